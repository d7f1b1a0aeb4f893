"""The replica: core state + the lock that guards it, the apply hook, snapshot encode/decode.

Thread rules: `apply_entry`, `write_snapshot` and `load_snapshot` run on pysyncobj's tick
thread; readers on the asyncio thread take `lock` for the (short) time they read. Listeners
are called on the tick thread after each entry and must only hand work over (never block).
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import struct
import threading
from collections.abc import Callable

from gnomon.node import codec, state_codec
from gnomon.node.clock import wall_ms
from gnomon.node.core import apply_batch, digest, new_state
from gnomon.node.core.commands import Batch
from gnomon.node.core.errors import UnknownCommand
from gnomon.node.core.model import Run, State
from gnomon.node.core.results import Effects
from gnomon.node.history import HistoryStore
from gnomon.node.snapshot import (
    FORMAT_VERSION,
    SnapshotError,
    SnapshotMeta,
    read_snapshot,
    write_snapshot,
)

log = logging.getLogger(__name__)

Listener = Callable[[Batch, list, Effects], None]


class HistorySink:
    """Writes evicted runs to the LMDB history store on its own thread (the tick thread must
    not wait for fsync); runs stay readable from `pending` until written."""

    def __init__(self, store: HistoryStore):
        self.store = store
        self._pending: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._drain, name="history", daemon=True)
        self._thread.start()

    def put(self, runs: list[Run]) -> None:
        records = [(r.job_id, r.scheduled_for_ms, r.run_id, state_codec.encode_run(r))
                   for r in runs]
        with self._lock:
            for rec in records:
                self._pending[rec[2]] = rec[3]
        self._queue.put(records)

    def get(self, run_id: str) -> bytes | None:
        with self._lock:
            data = self._pending.get(run_id)
        return data if data is not None else self.store.get_run(run_id)

    def list(self, job_id: str, *, before_ms: int, limit: int) -> list[bytes]:
        self.flush()
        return self.store.list_runs(job_id, before_ms=before_ms, limit=limit)

    def flush(self) -> None:
        self._queue.join()

    def _drain(self) -> None:
        while True:
            records = self._queue.get()
            try:
                if records is None:
                    return
                self.store.put_runs(records)
                with self._lock:
                    for rec in records:
                        self._pending.pop(rec[2], None)
            except Exception:  # noqa: BLE001
                log.exception("history write failed")
            finally:
                self._queue.task_done()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)
        self.store.close()


class Replica:
    def __init__(self, history: HistorySink, *, crash: Callable[[str], None]):
        self.lock = threading.RLock()
        self.state: State = new_state()
        self.history = history
        self.applied_entries = 0
        self._listeners: list[Listener] = []
        self._crash = crash

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    # -- tick thread ---------------------------------------------------------------------

    def apply_entry(self, data: bytes) -> list:
        try:
            batch = codec.batch_from_bytes(data)
            with self.lock:
                replies, effects = apply_batch(self.state, batch)
                self.applied_entries += 1
        except UnknownCommand as exc:
            self._crash(f"unknown command in the Raft log: {exc}")
            raise
        except Exception as exc:
            # A replica that cannot apply an entry would diverge: stop, never skip.
            self._crash(f"apply failed: {exc!r}")
            raise
        if effects.evicted_runs:
            self.history.put(list(effects.evicted_runs))
        for listener in self._listeners:
            listener(batch, replies, effects)
        return replies

    def write_snapshot(self, tmp_path: str, raft_data: tuple) -> None:
        started = wall_ms()
        with self.lock:
            st = self.state
            meta = SnapshotMeta(
                format_version=FORMAT_VERSION,
                raft_index=raft_data[0][1],
                state_digest=digest(st),
                written_ms=started,
                jobs=len(st.jobs),
                runs=len(st.runs),
            )
            tables = state_codec.encode_tables(st)
            self.history.flush()
            tables["history"] = (
                (state_codec.seq_key(i, rec[2]), encode_history(rec))
                for i, rec in enumerate(self.history.store.iter_all())
            )
            write_snapshot(tmp_path, meta, pickle.dumps(raft_data), tables)
        log.info("snapshot at index %d: %d jobs, %d runs in %d ms",
                 meta.raft_index, meta.jobs, meta.runs, wall_ms() - started)

    def load_snapshot(self, path: str) -> tuple:
        snap = read_snapshot(path)
        try:
            state = state_codec.decode_tables(
                {name: snap.iter_table(name) for name in state_codec.TABLES})
            if digest(state) != snap.meta.state_digest:
                raise SnapshotError(f"{path}: state digest mismatch after restore")
            history = [decode_history(v) for _, v in snap.iter_table("history")]
            raft_data = pickle.loads(snap.raft_data)
        finally:
            snap.close()
        if history:
            self.history.store.put_runs(history)
        with self.lock:
            self.state = state
        log.info("restored snapshot at index %d: %d jobs, %d runs",
                 snap.meta.raft_index, len(state.jobs), len(state.runs))
        return raft_data


def encode_history(rec: tuple[str, int, str, bytes]) -> bytes:
    job_id, scheduled_for_ms, run_id, data = rec
    head = f"{job_id}\n{scheduled_for_ms}\n{run_id}\n".encode()
    return struct.pack(">I", len(head)) + head + data


def decode_history(value: bytes) -> tuple[str, int, str, bytes]:
    (n,) = struct.unpack(">I", value[:4])
    job_id, scheduled, run_id = value[4 : 4 + n].decode().rstrip("\n").split("\n")
    return job_id, int(scheduled), run_id, value[4 + n :]


def crash_process(reason: str) -> None:
    """Stop the node at once (exit code 70): used for an unreadable or unappliable log."""
    log.critical("FATAL: %s", reason)
    logging.shutdown()
    os._exit(70)
