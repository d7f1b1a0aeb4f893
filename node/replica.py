"""The replica: core state + the lock that guards it, the apply hook, snapshot encode/decode;
evicted runs go to the history store through its `HistorySink` (node/storage/history_sink.py).

Thread rules: `apply_entry` runs on pysyncobj's tick thread; `write_snapshot` runs in a child
forked from the tick thread (node/raft/snapshotter.py), so it never takes `lock` (another thread may
have held it at the fork); `read_snapshot` runs on the main thread at start and on the tick
thread for a snapshot received from the leader. Readers on the asyncio thread take `lock` for
the (short) time they read. Listeners are called on the tick thread after each entry and must
only hand work over (never block).
"""

from __future__ import annotations

import gc
import logging
import pickle
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, cast

from gnomon.node import codec
from gnomon.node.clock import wall_ms
from gnomon.node.core import apply_batch, digest, new_state
from gnomon.node.core.commands import Batch
from gnomon.node.core.errors import UnknownCommand
from gnomon.node.core.model import Run, State
from gnomon.node.core.results import Effects
from gnomon.node.process import Crash
from gnomon.node.storage import state_codec
from gnomon.node.storage.history import AuditEntry
from gnomon.node.storage.history_sink import HistorySink
from gnomon.node.storage.snapshot_file import (
    FORMAT_VERSION,
    SnapshotError,
    SnapshotMeta,
    read_snapshot,
    write_snapshot,
)

log = logging.getLogger(__name__)

Listener = Callable[[Batch, list, Effects], None]


@dataclass
class LoadedSnapshot:
    """A verified, decoded snapshot file: the state and pysyncobj's raft data, which is
    (last entry, the entry before it, cluster members); entries are (command, index, term)."""

    path: str
    state: State
    raft_data: tuple
    meta: SnapshotMeta

    @property
    def index(self) -> int:
        """The Raft index of the last entry the state includes."""
        return int(self.raft_data[0][1])


T = TypeVar("T")


class Replica:
    """The replicated state of this node and what turns log entries and snapshots into it.

    `digest_snapshots`: store the core's state digest in each snapshot and check it on load
    (O(state) both ways: a debugging aid; the file trailer is the integrity check).
    """

    def __init__(self, history: HistorySink, *, crash: Crash,
                 digest_snapshots: bool = False) -> None:
        self.lock = threading.RLock()
        self.state: State = new_state()
        self.history = history
        self.applied_entries = 0
        # The Raft index `state` is at (0: none known yet); read it under `lock` with the
        # state. Membership entries do not touch the state, so it may trail raft's count.
        self.applied_index = 0
        self._listeners: list[Listener] = []
        self._crash = crash
        self._digest_snapshots = digest_snapshots

    def read(self, query: Callable[[State], T]) -> T:
        """`query(state)` under the lock: one consistent view of the state (the tick thread
        applies between two reads). A query is short and pure: it neither blocks nor keeps
        a reference to a mutable part of the state beyond its return (it encodes it)."""
        with self.lock:
            return query(self.state)

    def add_listener(self, listener: Listener) -> None:
        """Call `listener(batch, replies, effects)` on the tick thread after each entry."""
        self._listeners.append(listener)

    # -- tick thread ---------------------------------------------------------------------

    def apply_entry(self, data: bytes, index: int = 0) -> list:
        """Apply one committed entry (at Raft `index`, recorded as `applied_index` with the
        state it made, under the lock); any exception, in apply or after it, stops the node.

        pysyncobj applies an entry again when its replicated method raises, so raising would
        apply it twice (or, on a bug in a listener, forever): never return without the whole
        entry handled, never retry.
        """
        stage = "decoding the entry"
        try:
            batch = codec.batch_from_bytes(data)
            stage = "applying the entry"
            with self.lock:
                replies, effects = apply_batch(self.state, batch)
                self.applied_entries += 1
                if index:
                    self.applied_index = index
            stage = "handing evicted runs to the history store"
            if effects.evicted_runs or effects.audit:
                # core's Effects types them as objects; they are the evicted Runs.
                self.history.put(list(cast("list[Run]", effects.evicted_runs)),
                                 [AuditEntry(*a) for a in effects.audit])
            stage = "notifying listeners after apply"
            for listener in self._listeners:
                listener(batch, replies, effects)
        except UnknownCommand as exc:
            self._crash(f"unknown command in the Raft log: {exc}")
            raise
        except BaseException as exc:
            # A replica that cannot handle an entry would diverge: stop, never skip or redo.
            self._crash(f"{stage} failed: {exc!r}")
            raise
        return replies

    # -- snapshots -----------------------------------------------------------------------

    def write_snapshot(self, tmp_path: str, raft_data: tuple) -> dict:
        """Write the current state and `raft_data` to `tmp_path`; returns figures.

        Runs in a child forked from the tick thread (or with the tick thread otherwise idle):
        the state cannot change meanwhile, and `lock` is not taken (see the module docstring).
        """
        started = time.perf_counter()
        st = self.state
        meta = SnapshotMeta(
            format_version=FORMAT_VERSION,
            raft_index=int(raft_data[0][1]),
            state_digest=digest(st) if self._digest_snapshots else "",
            written_ms=wall_ms(),
            jobs=len(st.jobs),
            runs=len(st.runs),
        )
        size = write_snapshot(tmp_path, meta, pickle.dumps(raft_data),
                              state_codec.encode_tables(st))
        return {"index": meta.raft_index, "jobs": meta.jobs, "runs": meta.runs, "bytes": size,
                "write_ms": round((time.perf_counter() - started) * 1000)}

    def read_snapshot(self, path: str) -> LoadedSnapshot:
        """Verify and decode a snapshot file (does not install it); SnapshotError if bad."""
        started = time.perf_counter()
        snap = read_snapshot(path)
        # Millions of new objects: the cyclic GC would walk them over and over meanwhile, and
        # once more (a pause of seconds at 1M jobs) at the first allocation after it is back on,
        # unless they are moved to its permanent generation first. They live long anyway;
        # a discarded snapshot is still freed by reference counting.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            state = state_codec.decode_tables(
                {name: snap.iter_table(name) for name in state_codec.TABLES
                 if name in snap.tables or name not in state_codec.LATER_TABLES})
            if snap.meta.state_digest and digest(state) != snap.meta.state_digest:
                raise SnapshotError(f"{path}: state digest mismatch after decoding")
            raft_data = pickle.loads(snap.raft_data)
        except SnapshotError:
            raise
        except Exception as exc:  # noqa: BLE001 - protobuf, pickle, a missing table
            raise SnapshotError(f"{path}: cannot decode the snapshot: {exc!r}") from exc
        finally:
            snap.close()
            gc.freeze()
            if was_enabled:
                gc.enable()
        log.info("read snapshot %s at index %d: %d jobs, %d runs in %d ms", path,
                 snap.meta.raft_index, len(state.jobs), len(state.runs),
                 (time.perf_counter() - started) * 1000)
        return LoadedSnapshot(path, state, raft_data, snap.meta)

    def install(self, loaded: LoadedSnapshot) -> None:
        """Replace the state with a decoded snapshot's."""
        with self.lock:
            self.state = loaded.state
            self.applied_index = loaded.index
        log.info("restored snapshot at index %d: %d jobs, %d runs", loaded.index,
                 len(loaded.state.jobs), len(loaded.state.runs))

    def restored(self, loaded: LoadedSnapshot | None) -> None:
        """At start (main thread): install this node's own snapshot, if any. A history store
        created just now beside a snapshot lacks the runs evicted before it: backfill."""
        if loaded is None:
            return
        self.install(loaded)
        if self.history.store.created:
            log.warning("history store %s is new but the state starts at index %d: runs "
                        "evicted before it are copied from a peer", self.history.store.path,
                        loaded.index)
            self.history_incomplete(loaded.index)

    # -- what the snapshotter needs from the history store -------------------------------

    def history_mark(self) -> int:
        """See HistorySink.mark."""
        return self.history.mark()

    def history_written(self, mark: int) -> bool:
        """See HistorySink.written."""
        return self.history.written(mark)

    def history_incomplete(self, needs_index: int) -> None:
        """Record durably that runs evicted at or before `needs_index` may be missing here."""
        self.history.store.mark_incomplete(needs_index)
