"""The replica: core state + the lock that guards it, the apply hook, snapshot encode/decode,
and the hand-off of evicted runs to the history store.

Thread rules: `apply_entry` runs on pysyncobj's tick thread; `write_snapshot` runs in a child
forked from the tick thread (node/snapshotter.py), so it never takes `lock` (another thread may
have held it at the fork); `read_snapshot` runs on the main thread at start and on the tick
thread for a snapshot received from the leader. Readers on the asyncio thread take `lock` for
the (short) time they read. Listeners are called on the tick thread after each entry and must
only hand work over (never block).
"""

from __future__ import annotations

import gc
import logging
import os
import pickle
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gnomon.node import codec, state_codec
from gnomon.node.clock import wall_ms
from gnomon.node.core import apply_batch, digest, new_state
from gnomon.node.core.commands import Batch
from gnomon.node.core.errors import UnknownCommand
from gnomon.node.core.model import Run, State
from gnomon.node.core.results import Effects
from gnomon.node.history import AuditEntry, HistoryStore, Record
from gnomon.node.snapshot import (
    FORMAT_VERSION,
    SnapshotError,
    SnapshotMeta,
    read_snapshot,
    write_snapshot,
)

log = logging.getLogger(__name__)

Listener = Callable[[Batch, list, Effects], None]
Crash = Callable[[str], None]


def crash_process(reason: str) -> None:
    """Stop the node at once (exit code 70): used for an unreadable or unappliable log."""
    log.critical("FATAL: %s", reason)
    logging.shutdown()
    os._exit(70)


# Batches of evicted runs the history writer puts into one LMDB transaction at most.
MAX_BATCHES_PER_TXN = 256


class HistorySink:
    """Writes evicted runs to the LMDB history store on its own thread (the tick thread must
    not wait for fsync); runs stay readable from the pending map until written.

    A failed write is retried (`write_attempts` in all, backoff doubling from
    `retry_backoff_ms`); if it still fails the node stops through `crash`: the entries that
    evicted the runs are still in the journal (a snapshot only completes once every eviction
    before it is written, see `written`), so a restart hands them over again. Never a gap.
    """

    def __init__(self, store: HistoryStore, *, crash: Crash = crash_process,
                 write_attempts: int = 5, retry_backoff_ms: int = 200) -> None:
        if write_attempts < 1:
            raise ValueError("write_attempts must be at least 1")
        self.store = store
        self._crash = crash
        self._attempts = write_attempts
        self._backoff_s = retry_backoff_ms / 1000
        self._pending: dict[str, Record] = {}
        self._lock = threading.Condition()
        self._enqueued = 0  # batches handed over (tick thread)
        self._written = 0  # batches durably written, in order (writer thread)
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._drain, name="history", daemon=True)
        self._thread.start()

    def put(self, runs: list[Run], audit: list[AuditEntry] | None = None) -> None:
        """Hand evicted runs (and audit entries) over (tick thread); runs are readable at
        once, everything is written soon."""
        records = [(r.job_id, r.scheduled_for_ms, r.run_id, state_codec.encode_run(r))
                   for r in runs]
        with self._lock:
            for rec in records:
                self._pending[rec[2]] = rec
            self._enqueued += 1
            seq = self._enqueued
        self._queue.put((seq, records, audit or []))

    def mark(self) -> int:
        """A position after every run handed over so far (for `written`)."""
        with self._lock:
            return self._enqueued

    def written(self, mark: int) -> bool:
        """True once every run handed over before `mark()` returned is durably stored."""
        with self._lock:
            return self._written >= mark

    def get(self, run_id: str) -> bytes | None:
        """The encoded run, from the pending map or the store; None if unknown."""
        with self._lock:
            rec = self._pending.get(run_id)
        # Pending first: a record leaves the map only after it is in the store.
        return rec[3] if rec is not None else self.store.get_run(run_id)

    def list(self, job_id: str, *, before_ms: int, limit: int) -> list[bytes]:
        """Encoded runs of a job, newest first, pending ones included (never waits)."""
        with self._lock:
            pending = [r for r in self._pending.values()
                       if r[0] == job_id and (before_ms <= 0 or r[1] < before_ms)]
        if not pending:
            return self.store.list_runs(job_id, before_ms=before_ms, limit=limit)
        stored = [state_codec.decode_run(d) for d in
                  self.store.list_runs(job_id, before_ms=before_ms, limit=limit)]
        merged = {r.run_id: (r.scheduled_for_ms, r.run_id, state_codec.encode_run(r))
                  for r in stored}
        merged.update({r[2]: (r[1], r[2], r[3]) for r in pending})
        newest = sorted(merged.values(), reverse=True)[:limit]
        return [data for _, _, data in newest]

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until everything handed over so far is written; False on timeout."""
        mark = self.mark()
        with self._lock:
            return self._lock.wait_for(lambda: self._written >= mark, timeout_s)

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            # Group commit: every batch already waiting goes into the same synced txn (one
            # fsync for all; in order, so a run put twice keeps its latest record).
            items, stopping = [item], False
            while len(items) < MAX_BATCHES_PER_TXN:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stopping = True
                    break
                items.append(nxt)
            records = [rec for _seq, recs, _audit in items for rec in recs]
            audit = [entry for _seq, _recs, entries in items for entry in entries]
            if not self._write(records, audit):
                return  # the node is stopping (crash returned: only in tests)
            with self._lock:
                self._written = items[-1][0]
                for rec in records:
                    if self._pending.get(rec[2]) is rec:
                        del self._pending[rec[2]]
                self._lock.notify_all()
            if stopping:
                return

    def _write(self, records: list[Record], audit: list[AuditEntry]) -> bool:
        """Store one batch, retrying; False once the node was told to stop."""
        delay = self._backoff_s
        for attempt in range(1, self._attempts + 1):
            try:
                if audit:
                    self.store.put_runs(records, audit)
                else:
                    self.store.put_runs(records)
                return True
            except Exception as exc:  # noqa: BLE001 - any failure: retry, then stop
                if attempt == self._attempts:
                    self._crash(
                        f"history store {self.store.path}: writing {len(records)} evicted "
                        f"runs failed {attempt} times, last: {exc!r}. The node stops so that "
                        "no run is lost (the journal still holds the entries that evicted "
                        f"them). Check the disk under {self.store.path} (space, I/O errors), "
                        "then restart the node.")
                    return False
                log.warning("history store %s: write failed (attempt %d of %d, retrying in "
                            "%.1fs): %r", self.store.path, attempt, self._attempts, delay, exc)
                time.sleep(delay)
                delay *= 2
        return False  # pragma: no cover - the loop returns

    def close(self) -> None:
        """Write what is pending, stop the writer thread and close the store."""
        self._queue.put(None)
        self._thread.join(timeout=10)
        self.store.close()


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
        self._listeners: list[Listener] = []
        self._crash = crash
        self._digest_snapshots = digest_snapshots

    def add_listener(self, listener: Listener) -> None:
        """Call `listener(batch, replies, effects)` on the tick thread after each entry."""
        self._listeners.append(listener)

    # -- tick thread ---------------------------------------------------------------------

    def apply_entry(self, data: bytes) -> list:
        """Apply one committed entry; any exception, in apply or after it, stops the node.

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
            stage = "handing evicted runs to the history store"
            if effects.evicted_runs or effects.audit:
                self.history.put(list(effects.evicted_runs),
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
