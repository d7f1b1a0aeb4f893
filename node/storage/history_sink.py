"""The hand-off of evicted runs from the tick thread to the LMDB history store (its own thread).

Thread rules: `put`, `mark` and `written` run on pysyncobj's tick thread, `get` and `list` on any
thread; the writer thread alone calls the store's writes. A record stays in the pending map until
it is durably in the store, so a reader never misses a run in between.
"""

from __future__ import annotations

import builtins
import logging
import queue
import threading
import time

from gnomon.node.core.model import Run
from gnomon.node.process import Crash, crash_process
from gnomon.node.storage import state_codec
from gnomon.node.storage.history import AuditEntry, HistoryStore, Record

log = logging.getLogger(__name__)

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
        # (batch number, records, audit entries) per put; None stops the writer.
        self._queue: queue.Queue[tuple[int, list[Record], list[AuditEntry]] | None] = (
            queue.Queue())
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

    # builtins.list: the method `list` above shadows it in the class body.
    def _write(self, records: builtins.list[Record], audit: builtins.list[AuditEntry]) -> bool:
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
