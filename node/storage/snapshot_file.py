"""One self-contained snapshot file: a single-file LMDB environment plus an integrity trailer.

The file is renamed into place by node/raft/snapshotter.py and streamed raw to lagging followers, so
everything lives in one file. Layout (see node/storage/DESIGN.md):

- named database `meta`: `header` (SnapshotHeader protobuf) and `raft_data`
- one named database `t:<table>` per caller table
- after LMDB's last page: a 44-byte trailer `GNOMSNAP` + u32 format version + SHA-256 of every
  byte before it. It is the integrity check: verified before LMDB parses the file, because LMDB
  trusts its pages and a flipped byte can make it abort the process (assertion) or silently
  return wrong records. Format 1 also stored a digest of the records, which repeated this check.

Thread rule: a Snapshot object is used by one thread at a time.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import lmdb
from google.protobuf.message import DecodeError

from gnomon.v1 import snapshot_pb2

# 2: no record digest (the trailer covers every byte), no history table.
FORMAT_VERSION = 4  # 3: the retention table; 4: jobs refer to shared schedules and task sets

_MAP_SIZE = 64 << 30  # address space only: the file stays at the size of the pages used
_MAX_DBS = 16
_META_DB = b"meta"
_TABLE_PREFIX = b"t:"
_TRAILER_MAGIC = b"GNOMSNAP"
_TRAILER = struct.Struct("<8sI32s")
_LEN = struct.Struct("<Q")
_CHUNK = 1 << 20


class SnapshotError(Exception):
    """The snapshot is corrupt, truncated, foreign or of another format version."""


@dataclass(frozen=True)
class SnapshotMeta:
    """The header of a snapshot; `state_digest` is "" when the writer did not compute it."""

    format_version: int
    raft_index: int
    state_digest: str
    written_ms: int
    jobs: int
    runs: int


def write_snapshot(
    path: str,
    meta: SnapshotMeta,
    raft_data: bytes,
    tables: Mapping[str, Iterable[tuple[bytes, bytes]]],
) -> int:
    """Write `tables` and `raft_data` to `path` (replacing it), fsynced before returning.

    Returns the file size in bytes.
    """
    if meta.format_version != FORMAT_VERSION:
        raise ValueError(f"meta.format_version is {meta.format_version}, expected {FORMAT_VERSION}")
    if len(tables) >= _MAX_DBS:
        raise ValueError(f"at most {_MAX_DBS - 1} tables per snapshot, got {len(tables)}")
    _remove(path)
    env = lmdb.open(path, subdir=False, lock=False, map_size=_MAP_SIZE, max_dbs=_MAX_DBS)
    try:
        with env.begin(write=True) as txn:
            for name, items in tables.items():
                db = env.open_db(_TABLE_PREFIX + name.encode(), txn=txn)
                with txn.cursor(db) as cur:
                    cur.putmulti(items)
            meta_db = env.open_db(_META_DB, txn=txn)
            txn.put(b"header", _header(meta).SerializeToString(), db=meta_db)
            txn.put(b"raft_data", raft_data, db=meta_db)
        env.sync(True)
    finally:
        env.close()
    return _append_trailer(path)


def read_snapshot(path: str) -> Snapshot:
    """Open and verify a snapshot; raises SnapshotError (naming `path`) if it is missing,
    damaged, foreign or of another format version."""
    _check_trailer(path)
    try:
        env = lmdb.open(
            path, subdir=False, lock=False, readonly=True, max_dbs=_MAX_DBS, map_size=_MAP_SIZE
        )
    except lmdb.Error as exc:
        raise SnapshotError(f"{path}: not a readable LMDB file: {exc}") from exc
    return Snapshot(path, env)


class Snapshot:
    """A verified snapshot open for reading: `.meta`, `.raft_data`, `iter_table(name)`."""

    def __init__(self, path: str, env: lmdb.Environment) -> None:
        self._path = path
        self._env: lmdb.Environment | None = env
        self._txn: lmdb.Transaction[bytes] | None = env.begin()
        self._dbs: dict[str, Any] = {}
        try:
            self._load()
        except (lmdb.Error, DecodeError, UnicodeDecodeError) as exc:
            self.close()
            raise SnapshotError(f"{path}: corrupt snapshot: {exc}") from exc
        except BaseException:
            self.close()
            raise

    def _load(self) -> None:
        txn, env = self._txn, self._env
        assert txn is not None and env is not None
        meta_db = env.open_db(_META_DB, txn=txn, create=False)
        header = txn.get(b"header", db=meta_db)
        if header is None:
            raise SnapshotError(f"{self._path}: snapshot has no header")
        self.meta = _meta_from_header(self._path, header)
        self.raft_data: bytes = txn.get(b"raft_data", db=meta_db) or b""
        self._dbs = {
            name: env.open_db(_TABLE_PREFIX + name.encode(), txn=txn, create=False)
            for name in self._table_names()
        }

    @property
    def tables(self) -> list[str]:
        """The names of the tables the writer wrote, sorted."""
        return sorted(self._dbs)

    def iter_table(self, name: str) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs in key order; KeyError for a table the writer did not write."""
        if self._txn is None:
            raise SnapshotError(f"{self._path}: snapshot is closed")
        return self._iter(self._txn, self._dbs[name])

    def _iter(self, txn: lmdb.Transaction[bytes], db: Any) -> Iterator[tuple[bytes, bytes]]:
        try:
            with txn.cursor(db) as cur:
                yield from cur
        except lmdb.Error as exc:
            raise SnapshotError(f"{self._path}: corrupt snapshot: {exc}") from exc

    def close(self) -> None:
        """Release the read transaction and the file. Idempotent."""
        if self._txn is not None:
            self._txn.abort()
            self._txn = None
        if self._env is not None:
            self._env.close()
            self._env = None

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _table_names(self) -> list[str]:
        assert self._txn is not None
        names = []
        for key in self._txn.cursor().iternext(values=False):
            if key.startswith(_TABLE_PREFIX):
                names.append(key[len(_TABLE_PREFIX) :].decode())
        return names


# -- helpers -------------------------------------------------------------------------------------


def _header(meta: SnapshotMeta) -> snapshot_pb2.SnapshotHeader:
    return snapshot_pb2.SnapshotHeader(
        format_version=meta.format_version,
        raft_index=meta.raft_index,
        state_digest=meta.state_digest,
        written_ms=meta.written_ms,
        jobs=meta.jobs,
        runs=meta.runs,
    )


def _meta_from_header(path: str, header_bytes: bytes) -> SnapshotMeta:
    h = snapshot_pb2.SnapshotHeader.FromString(header_bytes)
    if h.format_version != FORMAT_VERSION:
        raise SnapshotError(_version_message(path, h.format_version))
    return SnapshotMeta(
        format_version=h.format_version,
        raft_index=h.raft_index,
        state_digest=h.state_digest,
        written_ms=h.written_ms,
        jobs=h.jobs,
        runs=h.runs,
    )


def _version_message(path: str, version: int) -> str:
    return (
        f"{path}: snapshot format version {version}, this build reads version "
        f"{FORMAT_VERSION}; all nodes of a cluster must run compatible builds"
    )


def _file_digest(f: Any, length: int) -> bytes:
    h = hashlib.sha256()
    while length > 0:
        chunk = f.read(min(_CHUNK, length))
        if not chunk:
            break
        h.update(chunk)
        length -= len(chunk)
    return h.digest()


def _append_trailer(path: str) -> int:
    with open(path, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(0)
        digest = _file_digest(f, size)
        f.seek(size)
        f.write(_TRAILER.pack(_TRAILER_MAGIC, FORMAT_VERSION, digest))
        f.flush()
        os.fsync(f.fileno())
    return size + _TRAILER.size


def _check_trailer(path: str) -> None:
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size < _TRAILER.size:
                raise SnapshotError(f"{path}: too short to be a snapshot ({size} bytes)")
            f.seek(size - _TRAILER.size)
            magic, version, digest = _TRAILER.unpack(f.read(_TRAILER.size))
            if magic != _TRAILER_MAGIC:
                raise SnapshotError(f"{path}: not a gnomon snapshot, or truncated (no trailer)")
            if version != FORMAT_VERSION:
                raise SnapshotError(_version_message(path, version))
            f.seek(0)
            if _file_digest(f, size - _TRAILER.size) != digest:
                raise SnapshotError(f"{path}: file digest mismatch (corrupt or truncated)")
    except FileNotFoundError:
        raise SnapshotError(f"{path}: no snapshot file") from None
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read snapshot: {exc}") from exc


def _remove(path: str) -> None:
    # A leftover file (e.g. from a crash mid-write) would be opened and extended, not replaced.
    for p in (path, path + "-lock"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
