"""Per-node LMDB store of terminal runs evicted from the replicated state (run history).

Databases in one directory environment:
- `runs`:   run_id -> job_id length (u16 BE) + job_id + scheduled_for_ms (u64 BE) + encoded run
- `by_job`: job_id length (u16 BE) + job_id + scheduled_for_ms (u64 BE) + run_id -> run_id
- `counts`: job_id -> number of runs kept for it (u64 BE), to enforce the per-job cap cheaply
- `audit`:  at_ms (u64 BE) + 8 bytes of SHA-256 of the entry -> JSON {at_ms, actor, action,
            detail}: administrative actions as the log recorded them (node/security/DESIGN.md)
- `meta`:   `backfill` -> JSON {"needs_index": N, "after": run_id} while the store lacks runs
            evicted at or before Raft index N (a snapshot was installed, or the store is new
            beside an existing snapshot); absent when the history is complete

Thread rule: every method opens its own LMDB transaction, so methods may be called from any
thread. LMDB serialises write transactions (a second writer blocks until the first commits) and
read transactions see a consistent snapshot while a write is in progress. Intended use: writes
from one thread (apply / history writer), reads from the gRPC thread. `close()` only after all
other threads stopped using the store; one HistoryStore per path per process.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import lmdb

_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")
_MAX_JOB_ID = 0xFFFF
_BACKFILL = b"backfill"

Record = tuple[str, int, str, bytes]


class AuditEntry(NamedTuple):
    """One administrative action: when (cluster time), who, what (the RPC) and its request."""

    at_ms: int
    actor: str
    action: str
    detail: str


class HistoryError(Exception):
    """The history store cannot be opened (the message names the directory)."""


@dataclass(frozen=True)
class Backfill:
    """What an incomplete store lacks: runs evicted at or before Raft index `needs_index`;
    pages were imported up to run id `after` (exclusive resume point)."""

    needs_index: int
    after: str = ""


class HistoryStore:
    """Terminal runs evicted from the state, per node (see the module docstring)."""

    def __init__(
        self, path: str, *, map_size: int = 8 << 30, max_runs_per_job: int = 10_000
    ) -> None:
        if max_runs_per_job < 1:
            raise ValueError("max_runs_per_job must be at least 1")
        self.path = path
        self._max = max_runs_per_job
        #: True when this open created the store (no data file before).
        self.created = not os.path.exists(os.path.join(path, "data.mdb"))
        try:
            self._env = lmdb.open(
                path, map_size=map_size, max_dbs=5, sync=True, writemap=False, subdir=True
            )
            self._runs = self._env.open_db(b"runs")
            self._by_job = self._env.open_db(b"by_job")
            self._counts = self._env.open_db(b"counts")
            self._meta = self._env.open_db(b"meta")
            self._audit = self._env.open_db(b"audit")
        except lmdb.Error as exc:
            raise HistoryError(f"{path}: cannot open the history store: {exc}") from exc

    def put_runs(self, records: Iterable[Record], audit: Iterable[AuditEntry] = ()) -> None:
        """Store (job_id, scheduled_for_ms, run_id, encoded_run) records, and audit entries,
        in one synced txn.

        Idempotent: re-putting a run (or an entry) replaces it. Beyond `max_runs_per_job` runs
        of a job, the oldest (by scheduled_for_ms, then run_id) are dropped.
        """
        with self._env.begin(write=True) as txn:
            self._put_all(txn, records)
            for entry in audit:
                value = json.dumps(entry._asdict(), sort_keys=True).encode()
                key = _U64.pack(entry.at_ms) + hashlib.sha256(value).digest()[:8]
                txn.put(key, value, db=self._audit)

    def list_audit(self, *, before_ms: int = 0, limit: int = 100) -> list[AuditEntry]:
        """Audit entries, newest first (before `before_ms` when given)."""
        out: list[AuditEntry] = []
        with self._env.begin() as txn, txn.cursor(db=self._audit) as cur:
            if before_ms:
                found = cur.set_range(_U64.pack(before_ms))
                found = cur.prev() if found else cur.last()
            else:
                found = cur.last()
            while found and len(out) < limit:
                out.append(AuditEntry(**json.loads(cur.value())))
                found = cur.prev()
        return out

    # -- completeness and backfill ---------------------------------------------------------------

    def backfill(self) -> Backfill | None:
        """None when the store holds every run evicted so far, else what it lacks."""
        with self._env.begin() as txn:
            raw = txn.get(_BACKFILL, db=self._meta)
        if raw is None:
            return None
        state = json.loads(raw)
        return Backfill(int(state["needs_index"]), str(state.get("after", "")))

    def mark_incomplete(self, needs_index: int) -> None:
        """Record (durably) that runs evicted at or before `needs_index` may be missing.

        Called before a snapshot received from the leader replaces the state: the runs its
        entries evicted were never handed to this store. Keeps the larger index if already
        incomplete, and restarts the import from the first page."""
        current = self.backfill()
        needs = max(needs_index, current.needs_index if current else 0)
        with self._env.begin(write=True) as txn:
            txn.put(_BACKFILL, json.dumps({"needs_index": needs, "after": ""}).encode(),
                    db=self._meta)

    def import_page(self, records: Iterable[Record], after: str) -> None:
        """Store records copied from a peer and the resume point, in one synced txn."""
        with self._env.begin(write=True) as txn:
            self._put_all(txn, records)
            raw = txn.get(_BACKFILL, db=self._meta)
            if raw is not None:
                state = json.loads(raw)
                state["after"] = after
                txn.put(_BACKFILL, json.dumps(state).encode(), db=self._meta)

    def mark_complete(self, needs_index: int) -> bool:
        """Clear the backfill marker if it still asks for `needs_index` (a snapshot installed
        meanwhile asks for more); True if the store is complete now."""
        with self._env.begin(write=True) as txn:
            raw = txn.get(_BACKFILL, db=self._meta)
            if raw is None:
                return True
            if int(json.loads(raw)["needs_index"]) > needs_index:
                return False
            txn.delete(_BACKFILL, db=self._meta)
            return True

    def page(self, after: str, *, limit: int, max_bytes: int) -> tuple[list[Record], bool]:
        """Up to `limit` runs (and about `max_bytes`) with run_id > `after`, by run_id, and
        whether more follow."""
        out: list[Record] = []
        size = 0
        with self._env.begin() as txn, txn.cursor(self._runs) as cur:
            found = cur.set_range(after.encode() + b"\0") if after else cur.first()
            while found and len(out) < limit and (not out or size < max_bytes):
                key, value = cur.item()
                job_id, scheduled_for_ms, data = _decode_value(value)
                out.append((job_id, scheduled_for_ms, key.decode(), data))
                size += len(key) + len(value)
                found = cur.next()
        return out, bool(found)

    def get_run(self, run_id: str) -> bytes | None:
        with self._env.begin() as txn:
            value = txn.get(run_id.encode(), db=self._runs)
        return None if value is None else _decode_value(value)[2]

    def list_runs(self, job_id: str, *, before_ms: int = 0, limit: int = 50) -> list[bytes]:
        """Encoded runs of a job, newest first; only scheduled_for_ms < before_ms if before_ms."""
        prefix = _job_prefix(job_id)
        end = prefix + _U64.pack(before_ms) if before_ms > 0 else _next_prefix(prefix)
        out: list[bytes] = []
        with self._env.begin() as txn, txn.cursor(self._by_job) as cur:
            # Position on the last key < end: step back from the first key >= end, if any.
            found = cur.prev() if cur.set_range(end) else cur.last()
            while found and len(out) < limit and cur.key().startswith(prefix):
                value = txn.get(cur.value(), db=self._runs)
                assert value is not None  # _put writes a run and its index key in one txn
                out.append(_decode_value(value)[2])
                found = cur.prev()
        return out

    def iter_all(self) -> Iterator[Record]:
        """Every stored run as (job_id, scheduled_for_ms, run_id, encoded_run), by run_id.

        Reads one consistent LMDB snapshot (a read transaction held until exhausted or closed).
        """
        with self._env.begin() as txn, txn.cursor(self._runs) as cur:
            for key, value in cur:
                job_id, scheduled_for_ms, data = _decode_value(value)
                yield job_id, scheduled_for_ms, key.decode(), data

    def close(self) -> None:
        """Close the environment (only after every other thread stopped using it)."""
        self._env.close()

    # -- writing -------------------------------------------------------------------------------

    def _put_all(self, txn: lmdb.Transaction[bytes], records: Iterable[Record]) -> None:
        """Put every record; each job's run count is read once and written once per txn
        (it was a get and a put per run: a tenth of a node's history writer)."""
        counts: dict[str, int] = {}
        for job_id, scheduled_for_ms, run_id, data in records:
            self._put(txn, counts, job_id, scheduled_for_ms, run_id, data)
        for job_id, count in counts.items():
            if count:
                txn.put(job_id.encode(), _U64.pack(count), db=self._counts)
            else:
                txn.delete(job_id.encode(), db=self._counts)

    def _put(self, txn: lmdb.Transaction[bytes], counts: dict[str, int], job_id: str,
             scheduled_for_ms: int, run_id: str, data: bytes) -> None:
        if scheduled_for_ms < 0:
            raise ValueError(f"{run_id}: scheduled_for_ms must be >= 0")
        rid = run_id.encode()
        old = txn.get(rid, db=self._runs)
        if old is not None:
            old_job, old_ms, _ = _decode_value(old)
            txn.delete(_index_key(old_job, old_ms, rid), db=self._by_job)
            self._add_count(txn, counts, old_job, -1)
        txn.put(rid, _encode_value(job_id, scheduled_for_ms, data), db=self._runs)
        txn.put(_index_key(job_id, scheduled_for_ms, rid), rid, db=self._by_job)
        if self._add_count(txn, counts, job_id, 1) > self._max:
            self._drop_oldest(txn, counts, job_id)

    def _add_count(self, txn: lmdb.Transaction[bytes], counts: dict[str, int], job_id: str,
                   delta: int) -> int:
        """The job's run count after `delta`, kept in `counts` until _put_all writes it."""
        count = counts.get(job_id)
        if count is None:
            raw = txn.get(job_id.encode(), db=self._counts)
            count = _U64.unpack(raw)[0] if raw else 0
        counts[job_id] = count = count + delta
        return count

    def _drop_oldest(self, txn: lmdb.Transaction[bytes], counts: dict[str, int], job_id: str) -> None:
        prefix = _job_prefix(job_id)
        with txn.cursor(self._by_job) as cur:
            if not cur.set_range(prefix) or not cur.key().startswith(prefix):
                return
            txn.delete(cur.value(), db=self._runs)
            cur.delete()
        self._add_count(txn, counts, job_id, -1)


def _job_prefix(job_id: str) -> bytes:
    encoded = job_id.encode()
    if len(encoded) > _MAX_JOB_ID:
        raise ValueError("job_id too long")
    # Length-prefixed so that one job's keys never share a prefix with another job's.
    return _U16.pack(len(encoded)) + encoded


def _next_prefix(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with `prefix`."""
    stripped = prefix.rstrip(b"\xff")
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _index_key(job_id: str, scheduled_for_ms: int, run_id: bytes) -> bytes:
    return _job_prefix(job_id) + _U64.pack(scheduled_for_ms) + run_id


def _encode_value(job_id: str, scheduled_for_ms: int, data: bytes) -> bytes:
    return _job_prefix(job_id) + _U64.pack(scheduled_for_ms) + data


def _decode_value(value: bytes) -> tuple[str, int, bytes]:
    (n,) = _U16.unpack_from(value)
    job_id = value[2 : 2 + n].decode()
    (scheduled_for_ms,) = _U64.unpack_from(value, 2 + n)
    return job_id, scheduled_for_ms, value[10 + n :]
