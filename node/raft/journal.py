"""Durable Raft journal for pysyncobj: every entry is on disk (fsynced) before `add` returns.

pysyncobj's FileJournal writes an mmap that is never msynced or fsynced. `DurableJournal` keeps
the same in-memory semantics (a list of `(command, idx, term)` addressed by list position, not by
Raft index) and backs it with an append-only file of length-prefixed, CRC32-checked records.
See node/storage/DESIGN.md for the format and the recovery rule.

Thread rule: pysyncobj calls the journal from its tick thread only; the class is not thread-safe.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import logging
import mmap
import os
import re
import resource
import struct
import zlib
from collections.abc import Callable, Iterable
from typing import Any

from pysyncobj.journal import Journal, MemoryJournal

log = logging.getLogger(__name__)

Entry = tuple[bytes, int, int]
FatalHandler = Callable[[BaseException], None]

MAGIC = b"GNJRNL\x00\x01"  # name + format version 1
_REC = struct.Struct("<II")  # payload length, crc32(payload)
_IDX_TERM = struct.Struct("<QQ")
_POS = struct.Struct("<QQ")  # list position, list length before the operation (a replay check)
_ENTRY, _DEL_FROM, _DEL_TO, _CLEAR = b"E", b"F", b"T", b"C"
_KIND = re.compile(b"[EFTC]")
_MAX_RECORD = 1 << 30
_ENTRY_OVERHEAD = _REC.size + 1 + _IDX_TERM.size
DEFAULT_COMPACT_MIN_BYTES = 32 << 20


class JournalError(Exception):
    """The journal cannot be opened or written (not a torn tail: that is repaired silently).

    The message names the file."""


def fsync_dir(path: str) -> None:
    """fsync a directory so that renames and creations inside it are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file_and_dir(path: str) -> None:
    """Make a file written without fsync (e.g. a snapshot received by pysyncobj) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def write_file_atomically(path: str, chunks: Iterable[bytes]) -> None:
    """Write to a temp file, fsync, rename over `path`, fsync the directory."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def exit_process(exc: BaseException) -> None:
    """Default fatal handler: stop the process.

    pysyncobj logs and retries any exception raised on its tick thread, so raising alone would
    leave a node that keeps heartbeating as leader with a journal it cannot write. After a failed
    fsync the kernel may have dropped the dirty pages, so retrying is never safe either.
    """
    log.critical("FATAL: %s", exc)
    logging.shutdown()
    os._exit(70)


def _record(payload: bytes) -> bytes:
    return _REC.pack(len(payload), zlib.crc32(payload)) + payload


def _entry_payload(command: bytes, idx: int, term: int) -> bytes:
    return _ENTRY + _IDX_TERM.pack(idx, term) + command


def _entry_size(command: bytes) -> int:
    return _ENTRY_OVERHEAD + len(command)


def _to_bytes(command: bytes | bytearray | memoryview | str) -> bytes:
    return command.encode() if isinstance(command, str) else bytes(command)


def _start(position: int, length: int) -> int:
    """Where `del lst[position:]` / `lst[position:]` starts, as Python slicing computes it."""
    return slice(position, None).indices(length)[0]


class DurableJournal(Journal):
    """pysyncobj journal with fsync-before-ack, torn-tail recovery and file compaction.

    Files: `path` (records), `path.meta` (term, vote, commit index), `path.lock` (flock that
    keeps a second process or object off the same journal).
    """

    def __init__(
        self,
        path: str,
        *,
        compact_min_bytes: int = DEFAULT_COMPACT_MIN_BYTES,
        on_fatal: FatalHandler = exit_process,
    ) -> None:
        self._path = os.path.abspath(path)
        self._dir = os.path.dirname(self._path)
        self._meta_path = self._path + ".meta"
        self._compact_min_bytes = compact_min_bytes
        self._on_fatal = on_fatal
        self._failed: BaseException | None = None
        self._fd = -1
        self._lock_fd = _lock(self._path + ".lock")
        try:
            self._term, self._voted_for, self._commit_index = _read_meta(self._meta_path)
            self._meta_commit_index = self._commit_index
            self._entries: list[Entry] = []
            self._live_bytes = len(MAGIC)
            self._file_bytes = self._replay()
            if self._entries:
                # A corrupt middle record can cut the log below the stored commit index.
                self._commit_index = min(self._commit_index, self._entries[-1][1])
            self._dirty = False
            self._deferring = False
            self.entries_added = 0  # counters for metrics (read racily from other threads)
            self.fsyncs = 0
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND)
        except BaseException:
            os.close(self._lock_fd)
            raise

    # -- pysyncobj's Journal interface ---------------------------------------------------------

    def add(self, command: bytes, idx: int, term: int) -> None:
        command = _to_bytes(command)
        self._append(_entry_payload(command, idx, term), sync=not self._deferring)
        self.entries_added += 1
        self._entries.append((command, idx, term))
        self._live_bytes += _entry_size(command)

    def clear(self) -> None:
        if not self._entries:
            return
        # pysyncobj clears after renaming a received snapshot into place: make that durable
        # before the log forgets the entries the old snapshot needed.
        self._sync_dir()
        self._append(_CLEAR, sync=True)
        self._drop(0, len(self._entries))

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        n = len(self._entries)
        start = _start(entryFrom, n)
        if start >= n:
            return
        # Not fsynced here: this is on a follower's hot path (truncate, then add). The fsync of
        # the add that follows covers this record; a lost truncation is the same as a lost
        # AppendEntries, which Raft tolerates (no ack ever depended on it).
        self._append(_DEL_FROM + _POS.pack(start, n), sync=False)
        self._drop(start, n)

    def deleteEntriesTo(self, entryTo: int) -> None:
        n = len(self._entries)
        start = _start(entryTo, n)
        if start == 0:
            return
        # pysyncobj renamed the new snapshot over fullDumpFile just before compacting; if that
        # rename were lost while this prefix deletion survives, restart would pair the old
        # snapshot with a log that no longer reaches back to it.
        self._sync_dir()
        self._append(_DEL_TO + _POS.pack(start, n), sync=True)
        self._drop(0, start)

    def __getitem__(self, item: int | slice) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        self.close()

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        # Memory only; written into the meta file whenever that is written anyway (term/vote
        # change, close). pysyncobj re-derives it from the leader, so a stale value only means
        # a restarted node applies less before it hears from the leader.
        self._commit_index = raftCommitIndex

    def getRaftCommitIndex(self) -> int:
        return self._commit_index

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        if (term, votedForNodeId) == (self._term, self._voted_for):
            return
        self._write_meta(term, votedForNodeId)
        self._term, self._voted_for = term, votedForNodeId

    def getCurrentTerm(self) -> int:
        return self._term

    def getVotedForNodeId(self) -> Any:
        return self._voted_for

    def onOneSecondTimer(self) -> None:
        self._fsync_if_dirty()

    # -- group commit (node/raft/DESIGN.md) -----------------------------------------------------

    def defer_sync(self) -> None:
        """`add` writes without fsync until `sync`: the caller holds back every message that
        could acknowledge an entry until then (the transport's hold)."""
        self._deferring = True

    def sync(self) -> None:
        """fsync what was written since the last fsync (one for a whole batch of `add`s) and
        end the deferral."""
        self._deferring = False
        self._fsync_if_dirty()

    # -- public extras -------------------------------------------------------------------------

    @property
    def path(self) -> str:
        """The journal file (absolute)."""
        return self._path

    def reset(self, entries: Iterable[Entry]) -> None:
        """Replace every entry at once: written to a new file that is renamed over the journal
        (a crash leaves the old or the new list, never a mix)."""
        self._check_usable()
        self._entries = [(_to_bytes(c), idx, term) for c, idx, term in entries]
        self._live_bytes = len(MAGIC) + sum(_entry_size(e[0]) for e in self._entries)
        self._rewrite()

    def close(self) -> None:
        """Flush pending records and the commit index, release the file lock. Idempotent."""
        if self._fd < 0:
            return
        try:
            if self._failed is None:
                self.onOneSecondTimer()
                if self._commit_index != self._meta_commit_index:
                    self._write_meta(self._term, self._voted_for)
        finally:
            os.close(self._fd)
            os.close(self._lock_fd)
            self._fd = -1

    # -- writing -------------------------------------------------------------------------------

    def _append(self, payload: bytes, *, sync: bool) -> None:
        self._check_usable()
        rec = _record(payload)

        def write() -> None:
            _write_all(self._fd, rec)
            if sync:
                os.fsync(self._fd)
                self.fsyncs += 1

        self._guard(write)
        self._file_bytes += len(rec)
        self._dirty = not sync

    def _fsync_if_dirty(self) -> None:
        if self._dirty and self._failed is None and self._fd >= 0:
            self._guard(lambda: os.fsync(self._fd))
            self._dirty = False
            self.fsyncs += 1

    def _drop(self, start: int, stop: int) -> None:
        self._live_bytes -= sum(_entry_size(e[0]) for e in self._entries[start:stop])
        del self._entries[start:stop]
        self._maybe_compact()

    def _maybe_compact(self) -> None:
        dead = self._file_bytes - self._live_bytes
        # dead >= live keeps rewriting amortised O(1) per appended byte.
        if dead >= self._compact_min_bytes and dead >= self._live_bytes:
            self._rewrite()

    def _rewrite(self) -> None:
        def rewrite() -> None:
            records = (_record(_entry_payload(*e)) for e in self._entries)
            write_file_atomically(self._path, _chain([MAGIC], records))
            os.close(self._fd)
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND)

        dropped = self._file_bytes - self._live_bytes
        self._guard(rewrite)
        self._file_bytes, self._dirty = self._live_bytes, False
        log.debug("journal %s compacted: %d bytes dropped", self._path, dropped)

    def _write_meta(self, term: int, voted_for: Any) -> None:
        self._check_usable()
        body = {"term": term, "voted_for": voted_for, "commit_index": self._commit_index}
        data = json.dumps(body).encode()
        self._guard(lambda: write_file_atomically(self._meta_path, [data]))
        self._meta_commit_index = self._commit_index

    def _sync_dir(self) -> None:
        self._check_usable()
        self._guard(lambda: fsync_dir(self._dir))

    def _guard(self, action: Callable[[], None]) -> None:
        try:
            action()
        except OSError as exc:
            self._failed = exc
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                # Not the disk: the process (EMFILE) or the system (ENFILE) is out of file
                # descriptors, e.g. held by client connections.
                which = ("this process is at its open-file limit (RLIMIT_NOFILE soft "
                         f"{resource.getrlimit(resource.RLIMIT_NOFILE)[0]})"
                         if exc.errno == errno.EMFILE else
                         "the system is out of open files (fs.file-max)")
                advice = (f"too many open files: {which}; the disk under {self._dir} is not "
                          "the cause. Raise the limit (LimitNOFILE= in systemd, ulimit -n, "
                          "the container's nofile) or lower http_max_connections / raise "
                          "reserved_descriptors, then restart it.")
            else:
                advice = (f"Fix the disk under {self._dir} (free space, I/O errors), then "
                          "restart it.")
            error = JournalError(
                f"journal {self._path}: write failed: {exc} (errno {exc.errno}). The node stops: "
                f"every entry it acknowledged is on disk. {advice}")
            self._on_fatal(error)
            raise error from exc

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise JournalError(f"journal {self._path} failed earlier: {self._failed}")
        if self._fd < 0:
            raise JournalError(f"journal {self._path} is closed")

    # -- opening -------------------------------------------------------------------------------

    def _replay(self) -> int:
        """Load the records, cut a torn tail; returns the file size after the cut.

        Raises JournalError when a record fails its check and a valid record follows it: that
        is damage in the middle (acknowledged entries after it), not a torn last write."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path + ".tmp")  # an interrupted compaction; the journal is intact
        if not os.path.exists(self._path):
            write_file_atomically(self._path, [MAGIC])
        size = os.path.getsize(self._path)
        with open(self._path, "rb") as f:
            if f.read(len(MAGIC)) != MAGIC:
                raise JournalError(
                    f"{self._path} is not a gnomon journal (bad header); pysyncobj's own "
                    "journal files cannot be read: start this node from an empty data directory"
                )
            good = len(MAGIC)
            while (payload := _read_record(f, size - good)) is not None:
                self._replay_record(payload, good)
                good += _REC.size + len(payload)
        if good < size:
            following = _next_valid_record(self._path, good, size)
            if following is not None:
                raise JournalError(
                    f"{self._path}: the record at offset {good} is corrupt (checksum or length) "
                    f"and valid records follow it (offset {following}): this is damage, not a "
                    "torn last write, and cutting it would drop acknowledged entries")
            self._cut_tail(good, size)
        return good

    def _replay_record(self, payload: bytes, offset: int) -> None:
        kind, body = payload[:1], payload[1:]
        n = len(self._entries)
        if kind == _ENTRY and len(body) >= _IDX_TERM.size:
            idx, term = _IDX_TERM.unpack_from(body)
            command = body[_IDX_TERM.size :]
            self._entries.append((command, idx, term))
            self._live_bytes += _entry_size(command)
            return
        if kind == _CLEAR and not body:
            self._live_bytes = len(MAGIC)
            self._entries.clear()
            return
        if kind in (_DEL_FROM, _DEL_TO) and len(body) == _POS.size:
            pos, before = _POS.unpack(body)
            if before == n and pos <= n:
                start, stop = (pos, n) if kind == _DEL_FROM else (0, pos)
                self._live_bytes -= sum(_entry_size(e[0]) for e in self._entries[start:stop])
                del self._entries[start:stop]
                return
        # The CRC matched, so this is not a torn write: refuse rather than guess.
        raise JournalError(f"{self._path}: invalid record at offset {offset} (kind {kind!r})")

    def _cut_tail(self, good: int, size: int) -> None:
        log.warning(
            "journal %s: torn or corrupt record at offset %d, dropping %d bytes "
            "(reopened with %d entries)",
            self._path,
            good,
            size - good,
            len(self._entries),
        )
        with open(self._path, "r+b") as f:
            f.truncate(good)
            f.flush()
            os.fsync(f.fileno())


def _read_record(f: Any, remaining: int) -> bytes | None:
    """The next record's payload, or None at the end of the clean prefix."""
    head = f.read(_REC.size)
    if len(head) < _REC.size:
        return None
    length, crc = _REC.unpack(head)
    if length == 0 or length > _MAX_RECORD or length > remaining - _REC.size:
        return None
    payload = f.read(length)
    if len(payload) < length or zlib.crc32(payload) != crc:
        return None
    return payload


def _next_valid_record(path: str, bad: int, size: int) -> int | None:
    """The offset of the first record after `bad` that passes its checks, if any."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as buf:
        # Records start with length and CRC, then the kind byte: only look where one is.
        for match in _KIND.finditer(buf, bad + 1 + _REC.size):
            at = match.start() - _REC.size
            length, crc = _REC.unpack_from(buf, at)
            if 0 < length <= min(_MAX_RECORD, size - at - _REC.size) and \
                    zlib.crc32(buf[at + _REC.size : at + _REC.size + length]) == crc:
                return at
    return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _chain(*parts: Iterable[bytes]) -> Iterable[bytes]:
    for part in parts:
        yield from part


def _lock(path: str) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise JournalError(f"{path}: journal already open (another process or object)") from None
    return fd


def _read_meta(path: str) -> tuple[int, Any, int]:
    """(term, voted_for, commit_index); defaults when the file does not exist yet."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return 0, None, 1
    try:
        meta = json.loads(raw)
        return int(meta["term"]), meta["voted_for"], int(meta["commit_index"])
    except (ValueError, KeyError, TypeError) as exc:
        # Never fall back to term 0: forgetting a vote can elect two leaders in one term.
        raise JournalError(f"{path}: unreadable journal meta file: {exc}") from exc


# -- wiring into pysyncobj ---------------------------------------------------------------------


def make_journal(
    path: str | None, *, prepare: Callable[[DurableJournal], None] | None = None, **options: Any
) -> Journal:
    """pysyncobj's `createJournal` contract: a DurableJournal for a path, else in memory.

    `prepare(journal)` runs right after opening (pysyncobj has not read it yet); if it raises,
    the journal is closed and the exception propagates out of the SyncObj constructor."""
    if path is None:
        return MemoryJournal()
    journal = DurableJournal(path, **options)
    if prepare is not None:
        try:
            prepare(journal)
        except BaseException:
            journal.close()
            raise
    return journal


def patch_pysyncobj(**options: Any) -> None:
    """Make pysyncobj build its Raft log with `make_journal` (call before constructing SyncObj).

    `options` go to `make_journal` (`prepare`) and DurableJournal (e.g. `compact_min_bytes`,
    `on_fatal`). Each call replaces the previous options.
    """
    import pysyncobj.syncobj

    pysyncobj.syncobj.createJournal = functools.partial(make_journal, **options)
