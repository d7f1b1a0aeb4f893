"""Snapshots off the tick thread: pysyncobj's `Serializer` replaced by a forking one.

pysyncobj calls `serialize` on its tick thread, where apply runs, so the state is consistent
there. `ForkSnapshotter.serialize` forks: the child owns a copy-on-write image of that state
and writes the snapshot file (node/storage/snapshot_file.py through `SnapshotHost.write_snapshot`), then
`os._exit`s; the tick thread pauses only for the fork itself (page tables, O(memory)/~64 per
page, no Python object is copied). `checkSerializing`, polled every tick, reaps the child; it
renames the file into place (with a directory fsync) and reports SUCCESS, which makes pysyncobj
delete the journal prefix, only once the history writer has durably stored every run evicted
by an entry the snapshot includes. Otherwise those runs, no longer in the state and no longer
in the journal, would be lost from history.

The child must not touch gRPC, the history LMDB environment, or any lock another thread may
have held at the fork (the replica lock included): only the state, codecs and a new LMDB file.

A snapshot received from the leader (`setTransmissionData`) is verified and decoded before it
replaces the current file; a bad one is discarded and logged, the current one stays.

A file is renamed into place only if it is newer than the one there (`installed_index`),
whichever path it came by (ARCHITECTURE section 9, rule 4). Installing the leader's snapshot
replaces the journal (node.py `_install_received`), so a child forked before it is dropped
there and then, whatever its index: its SUCCESS would compact a journal it no longer matches,
and its file, renamed over the leader's newer one, would leave a journal that starts after the
snapshot's last entry (the node then refuses to start).

Thread rule: every method runs on pysyncobj's tick thread.
"""

from __future__ import annotations

import contextlib
import gc
import glob
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from pysyncobj.config import SERIALIZER_STATE

from gnomon.node.raft.journal import fsync_dir
from gnomon.node.storage.snapshot_file import SnapshotError

log = logging.getLogger(__name__)

_MAX_REPORT = 1 << 16
_PR_SET_PDEATHSIG = 1
# The child yields the CPU to the node's own threads (the tick thread must keep its
# heartbeats) and to the other processes of the machine: a snapshot may take longer.
_CHILD_NICE = 10


def _load_libc() -> Any:
    # Loaded in the parent: the child should not import or dlopen anything.
    with contextlib.suppress(Exception):
        import ctypes

        return ctypes.CDLL(None, use_errno=True)
    return None


_LIBC = _load_libc()


class SnapshotHost(Protocol):
    """What the snapshotter needs from the replica."""

    def write_snapshot(self, tmp_path: str, raft_data: tuple) -> dict: ...  # pragma: no cover
    def read_snapshot(self, path: str) -> Any: ...  # pragma: no cover
    def history_mark(self) -> int: ...  # pragma: no cover
    def history_written(self, mark: int) -> bool: ...  # pragma: no cover
    def history_incomplete(self, needs_index: int) -> None: ...  # pragma: no cover


@dataclass
class _Child:
    pid: int
    tmp: str
    serialize_id: int  # what pysyncobj passed: the index of the entry before the last one
    index: int  # the last entry the snapshot includes
    history_mark: int
    started: float
    fork_ms: float
    report_fd: int
    report: dict | None = None
    waiting_since: float = 0.0


@dataclass
class SnapshotFigures:
    """The last completed snapshot, for logs, metrics and the benchmark."""

    index: int = 0
    fork_ms: float = 0.0
    child_ms: int = 0
    history_wait_ms: int = 0
    bytes: int = 0
    jobs: int = 0
    runs: int = 0
    completed: int = 0
    failed: int = 0
    discarded: int = 0  # a child's snapshot dropped: the one in place is newer
    extra: dict = field(default_factory=dict)


class ForkSnapshotter:
    """Duck-typed pysyncobj `Serializer` (checkSerializing, serialize, deserialize,
    getTransmissionData, setTransmissionData, cancelTransmisstion) for one snapshot file.

    `child_timeout_s`: a child still running after this is killed (a fork taken while another
    thread held a lock the child needs would hang forever) and the snapshot counts as failed;
    `retry_s`: after a failure, no new snapshot starts for this long (a full disk would
    otherwise fork on every tick). `chunk_bytes`: bytes per message sent to a follower.
    """

    def __init__(self, path: str, host: SnapshotHost, *, crash, chunk_bytes: int = 1 << 16,
                 child_timeout_s: float = 600.0, retry_s: float = 30.0) -> None:
        self.path = os.path.abspath(path)
        self._dir = os.path.dirname(self.path)
        self._host = host
        self._crash = crash
        self._chunk = chunk_bytes
        self._child_timeout_s = child_timeout_s
        self._retry_s = retry_s
        self._child: _Child | None = None
        self._retry_at = 0.0
        self._sending: dict[Any, tuple[IO[bytes], int]] = {}
        self._incoming: IO[bytes] | None = None
        self._received: Any = None
        # The last index of the snapshot file in place (0: none); RaftNode sets it from the
        # file it read at start. A file is installed only if it is newer.
        self.installed_index = 0
        self.figures = SnapshotFigures()
        # The cluster's members as plain tuples, written in place of pysyncobj's node set.
        self.member_records: Callable[[], tuple] | None = None
        self._remove_leftovers()

    # -- writing (pysyncobj: serialize, then checkSerializing every tick) ---------------------

    def serialize(self, data: tuple, serialize_id: int) -> None:
        """Start writing a snapshot of the current state in a forked child.

        `data` is pysyncobj's (None, last entry, entry before it, cluster members)."""
        if self._child is not None or time.monotonic() < self._retry_at:
            return
        index = int(data[1][1])
        if index <= self.installed_index:
            # The file in place holds this state already (the leader's, or the one read at
            # start): nothing newer to write until an entry is applied.
            return
        raft_data = tuple(data[1:])
        if self.member_records is not None:
            # pysyncobj's node objects would need globals to read back (node/raft/membership.py).
            raft_data = (raft_data[0], raft_data[1], self.member_records())
        tmp = f"{self.path}.{os.getpid()}-{index}.tmp"
        mark = self._host.history_mark()
        read_fd, write_fd = os.pipe()
        started = time.perf_counter()
        try:
            pid = os.fork()
        except OSError as exc:  # no memory or processes left: like a failed child
            os.close(read_fd)
            os.close(write_fd)
            self._retry_at = time.monotonic() + self._retry_s
            self.figures.failed += 1
            log.warning("snapshot at index %d not started (next try in %.0fs): fork failed: %r",
                        index, self._retry_s, exc)
            return
        if pid == 0:  # pragma: no cover - the child; measured through its report
            os.close(read_fd)
            _child_main(self._host, tmp, raft_data, write_fd)
        fork_ms = (time.perf_counter() - started) * 1000
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        self._child = _Child(pid, tmp, serialize_id, index, mark, time.monotonic(), fork_ms,
                             read_fd)

    def checkSerializing(self) -> tuple[int, int | None]:  # noqa: N802 - pysyncobj's name
        """NOT_SERIALIZING, SERIALIZING, or SUCCESS/FAILED once, with pysyncobj's id."""
        child = self._child
        if child is None:
            return SERIALIZER_STATE.NOT_SERIALIZING, None
        if child.report is None:
            state = self._reap(child)
            if state is not None:
                return state, child.serialize_id
        if not self._host.history_written(child.history_mark):
            child.waiting_since = child.waiting_since or time.monotonic()
            return SERIALIZER_STATE.SERIALIZING, child.serialize_id
        return self._install(child), child.serialize_id

    def _reap(self, child: _Child) -> int | None:
        """None once the child exited well (report set); else SERIALIZING or FAILED."""
        try:
            pid, status = os.waitpid(child.pid, os.WNOHANG)
        except ChildProcessError:
            return self._failed(child, "the snapshot child vanished (reaped elsewhere)")
        if pid == 0:
            if time.monotonic() - child.started <= self._child_timeout_s:
                return SERIALIZER_STATE.SERIALIZING
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
            os.waitpid(child.pid, 0)
            return self._failed(child, f"the snapshot child ran over "
                                       f"snapshot_child_timeout_s ({self._child_timeout_s}s)")
        report = _read_report(child.report_fd)
        _close(child)
        code = os.waitstatus_to_exitcode(status)
        if code != 0 or not report.get("ok"):
            return self._failed(child, report.get("error") or f"the child exited with {code}")
        child.report = report
        return None

    def _install(self, child: _Child) -> int:
        if child.index <= self.installed_index:
            # Not SUCCESS: pysyncobj would compact the journal to this older index.
            self._discard(child, f"the snapshot in place is at index {self.installed_index}")
            return SERIALIZER_STATE.NOT_SERIALIZING
        try:
            os.replace(child.tmp, self.path)
            fsync_dir(self._dir)
        except OSError as exc:
            return self._failed(child, f"cannot rename it into place: {exc!r}")
        self._child = None
        self.installed_index = child.index
        self._stop_sending()
        report = child.report or {}
        waited = (time.monotonic() - child.waiting_since) * 1000 if child.waiting_since else 0
        f = self.figures
        f.index, f.fork_ms, f.child_ms = child.index, child.fork_ms, int(report.get("child_ms", 0))
        f.history_wait_ms, f.bytes = int(waited), int(report.get("bytes", 0))
        f.jobs, f.runs, f.completed = int(report.get("jobs", 0)), int(report.get("runs", 0)), \
            f.completed + 1
        log.info("snapshot at index %d: %d jobs, %d runs; tick thread paused %.1f ms (fork), "
                 "child wrote %d bytes in %d ms, history wait %d ms", f.index, f.jobs, f.runs,
                 f.fork_ms, f.bytes, f.child_ms, f.history_wait_ms)
        return SERIALIZER_STATE.SUCCESS

    def _discard(self, child: _Child, reason: str) -> None:
        """Drop the child's snapshot (stopping the child if it still runs), with a log line."""
        self._child = None
        _end(child)
        self.figures.discarded += 1
        log.info("snapshot at index %d discarded: %s", child.index, reason)

    def _failed(self, child: _Child, reason: str) -> int:
        self._child = None
        _close(child)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(child.tmp)
        self._retry_at = time.monotonic() + self._retry_s
        self.figures.failed += 1
        log.warning("snapshot at index %d failed, the journal keeps its entries (next try in "
                    "%.0fs): %s", child.index, self._retry_s, reason)
        return SERIALIZER_STATE.FAILED

    def deserialize(self) -> tuple:
        """pysyncobj's shape, (None, last entry, entry before it, cluster); unused by gnomon's
        load path (raft.py), which verifies and decodes before installing."""
        return (None, *self._host.read_snapshot(self.path).raft_data)

    # -- sending to a lagging follower (leader) ----------------------------------------------

    def getTransmissionData(self, transmission_id: Any):  # noqa: N802 - pysyncobj's name
        """(chunk, is_first, is_last) of the current file for one follower, or None."""
        sending = self._sending.get(transmission_id)
        if sending is None:
            try:
                sending = (open(self.path, "rb"), 0)  # noqa: SIM115 - kept across ticks
            except OSError as exc:
                log.warning("cannot send snapshot %s: %s", self.path, exc)
                return None
        f, sent = sending
        try:
            chunk = f.read(self._chunk)
        except OSError as exc:
            log.warning("cannot send snapshot %s: %s", self.path, exc)
            self.cancelTransmisstion(transmission_id)
            return None
        if not chunk:
            f.close()
            self._sending.pop(transmission_id, None)
        else:
            self._sending[transmission_id] = (f, sent + len(chunk))
        return chunk, sent == 0, not chunk

    def cancelTransmisstion(self, transmission_id: Any) -> None:  # noqa: N802 - pysyncobj's
        """Forget one follower's transmission (it disconnected)."""
        sending = self._sending.pop(transmission_id, None)
        if sending is not None:
            sending[0].close()

    def _stop_sending(self) -> None:
        # A new file: restart every transmission from its first byte, as pysyncobj does.
        for transmission_id in list(self._sending):
            self.cancelTransmisstion(transmission_id)

    # -- receiving from the leader (follower) -------------------------------------------------

    def setTransmissionData(self, data) -> bool:  # noqa: N802 - pysyncobj's name
        """Store one chunk; True once a complete, verified snapshot replaced the current one
        (pysyncobj then loads it, and raft.py takes the decoded state from `take_received`)."""
        if data is None:
            return False
        chunk, is_first, is_last = data
        tmp = self.path + ".recv.tmp"
        if is_first:
            self._drop_incoming(tmp)
            try:
                self._incoming = open(tmp, "wb")  # noqa: SIM115 - kept across messages
            except OSError as exc:
                log.error("cannot store the snapshot sent by the leader in %s: %s", tmp, exc)
                return False
        if self._incoming is None:
            return False
        try:
            self._incoming.write(chunk)
            if not is_last:
                return False
            self._incoming.flush()
            os.fsync(self._incoming.fileno())
            self._incoming.close()
            self._incoming = None
        except OSError as exc:
            log.error("cannot store the snapshot sent by the leader in %s: %s", tmp, exc)
            self._drop_incoming(tmp)
            return False
        return self._accept(tmp)

    def _accept(self, tmp: str) -> bool:
        try:
            loaded = self._host.read_snapshot(tmp)
        except SnapshotError as exc:
            log.error("snapshot sent by the leader rejected, the current one stays: %s", exc)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            return False
        if loaded.index <= self.installed_index:
            # It holds committed entries this node has: its own file and journal stay.
            log.info("snapshot at index %d sent by the leader discarded: the snapshot in place "
                     "is at index %d", loaded.index, self.installed_index)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            return False
        try:
            # Before the rename: from then on this node lacks the runs the snapshot's entries
            # evicted (they are in the leader's history store, not in the snapshot).
            self._host.history_incomplete(loaded.index)
            os.replace(tmp, self.path)
            fsync_dir(self._dir)
        except BaseException as exc:  # noqa: BLE001 - storage failing under us: stop
            self._crash(f"installing the snapshot sent by the leader as {self.path} failed: "
                        f"{exc!r}; check the disk under {self._dir}")
            raise
        self.installed_index = loaded.index
        if self._child is not None:
            # Forked from the state this one replaces; the journal it would compact is gone.
            self._discard(self._child, f"the leader's snapshot at index {loaded.index} was "
                                       "installed meanwhile")
        self._received = loaded
        return True

    def take_received(self) -> Any:
        """The decoded snapshot accepted by the last `setTransmissionData` (once)."""
        loaded, self._received = self._received, None
        return loaded

    def _drop_incoming(self, tmp: str) -> None:
        if self._incoming is not None:
            with contextlib.suppress(OSError):
                self._incoming.close()
            self._incoming = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop a running child (the node is stopping) and close open files."""
        child, self._child = self._child, None
        if child is not None:
            _end(child)
        self._stop_sending()
        self._drop_incoming(self.path + ".recv.tmp")

    def _remove_leftovers(self) -> None:
        # Files of a process that crashed mid-write; the current file is never one of them.
        for leftover in glob.glob(glob.escape(self.path) + ".*.tmp"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)


def _child_main(host: SnapshotHost, tmp: str, raft_data: tuple,
                report_fd: int) -> None:  # pragma: no cover - runs in the forked child
    code, report = 1, {"ok": False, "error": "no report"}
    try:
        # Collections would touch (and so copy) every page of the parent's heap.
        gc.disable()
        _die_with_parent()
        os.nice(_CHILD_NICE)
        started = time.perf_counter()
        figures = host.write_snapshot(tmp, raft_data)
        report = {"ok": True, **figures,
                  "child_ms": round((time.perf_counter() - started) * 1000)}
        code = 0
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which logs it
        report = {"ok": False, "error": f"{exc!r}"[:4000]}
    try:
        os.write(report_fd, json.dumps(report).encode()[:_MAX_REPORT - 1])
    finally:
        os._exit(code)


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """SIGKILL this child if the thread that forked it dies (Linux; best effort)."""
    if _LIBC is not None:
        with contextlib.suppress(Exception):
            _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _end(child: _Child) -> None:
    """Stop a child that still runs (not one already reaped: its pid may be reused), close its
    pipe, remove its file."""
    if child.report is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(child.pid, 0)
    _close(child)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(child.tmp)


def _close(child: _Child) -> None:
    # Once: a second close could hit a descriptor number reused by another file meanwhile.
    if child.report_fd >= 0:
        os.close(child.report_fd)
        child.report_fd = -1


def _read_report(fd: int) -> dict:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, _MAX_REPORT)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        return {"ok": False, "error": "unreadable report from the snapshot child"}
