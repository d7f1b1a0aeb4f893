"""Operator calls of the client (OperationsService): leadership transfer, online backup,
queues, workers and active runs. ``AsyncClient`` and ``Client`` expose them as methods."""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import grpc

try:
    import fcntl
except ImportError:  # Windows: no flock; abandoned part files are left alone there
    fcntl = None  # type: ignore[assignment]

from gnomon.v1 import api_pb2, api_pb2_grpc

from ._convert import node_status_from_proto
from ._errors import error_for_status
from ._models import NodeStatus
from ._transport import leader_hint, reason_of

__all__ = ["BackupResult", "LeaderTransfer", "MembershipChange", "QueueInfo", "WorkerInfo",
           "download_backup"]


@dataclass(frozen=True)
class LeaderTransfer:
    """The outcome of a leadership transfer."""

    previous_leader_node_id: str
    leader_node_id: str
    leader_grpc_address: str
    term: int


@dataclass(frozen=True)
class MembershipChange:
    """The outcome of adding or removing a node: whether it changed anything, the members
    after it, and (adding) the new node's match index and how long it took to catch up."""

    changed: bool
    members: tuple[NodeStatus, ...] = ()
    match_index: int = 0
    catch_up_ms: int = 0


@dataclass(frozen=True)
class QueueInfo:
    """One queue as the leader sees it."""

    queue: str
    ready: int = 0
    leased: int = 0
    oldest_ready_age_ms: int = 0
    workers: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkerInfo:
    """One worker connected to the leader."""

    worker_id: str
    queues: tuple[str, ...] = ()
    credits: int = 0
    leases_held: int = 0
    connected_ms: int = 0
    """When the leader accepted its stream (the leader's wall clock)."""
    last_heartbeat_ms: int = 0
    """Its last heartbeat at the leader (0: none yet)."""
    peer: str = ""
    """Where its stream came from: an address, or ``relay`` through a gateway's relay."""
    draining: bool = False
    """Drained (``drain_worker``): the leader grants it nothing more on this stream."""


@dataclass(frozen=True)
class BackupResult:
    """A backup written to ``path``: its Raft position, contents and SHA-256 (verified)."""

    path: str
    raft_index: int
    raft_term: int
    jobs: int
    runs: int
    size_bytes: int
    sha256: str
    state_digest: str


def transfer_from_proto(m: api_pb2.TransferLeadershipResponse) -> LeaderTransfer:
    return LeaderTransfer(m.previous_leader_node_id, m.leader_node_id, m.leader_grpc_address,
                          m.term)


def membership_from_proto(m: api_pb2.MembershipResponse) -> MembershipChange:
    return MembershipChange(m.changed, tuple(node_status_from_proto(n) for n in m.members),
                            m.match_index, m.catch_up_ms)


def queues_from_proto(m: api_pb2.ListQueuesResponse) -> list[QueueInfo]:
    return [QueueInfo(q.queue, q.ready, q.leased, q.oldest_ready_age_ms, tuple(q.workers))
            for q in m.queues]


def workers_from_proto(m: api_pb2.ListWorkersResponse) -> list[WorkerInfo]:
    return [worker_from_proto(w) for w in m.workers]


def worker_from_proto(w: api_pb2.WorkerInfo) -> WorkerInfo:
    return WorkerInfo(w.worker_id, tuple(w.queues), w.credits, w.leases_held,
                      w.connected_ms, w.last_heartbeat_ms, w.peer, w.draining)


async def download_backup(pool: Any, address: str, path: str, *, timeout_s: float,
                          metadata: Any) -> BackupResult:
    """Stream a backup from the node at ``address`` (following one leader redirect) into
    ``path`` (written to a file of its own next to it and renamed once its SHA-256 matched:
    two downloads to one path each leave a whole backup, and the last rename wins). Part
    files of downloads that were killed are removed; a running download's part is not."""
    for _ in range(3):
        stub = api_pb2_grpc.OperationsServiceStub(pool.get(address))
        # mkstemp: a name no other download uses, created 0600 whatever the umask (a backup
        # holds every payload and token hash).
        fd, part = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)),
                                    prefix=os.path.basename(path) + ".", suffix=PART_SUFFIX)
        # Locked until the part is renamed or removed: a part file nobody locks is abandoned.
        held = os.dup(fd)
        if fcntl is not None:
            fcntl.flock(held, fcntl.LOCK_EX)
            remove_abandoned_parts(path, keep=part)
        try:
            return await _download(stub, address, fd, part, path, timeout_s, metadata)
        except _Redirect as r:
            address = r.address
        finally:
            os.close(held)
    raise error_for_status(grpc.StatusCode.UNAVAILABLE, "the leader kept moving; retry")


PART_SUFFIX = ".part"
ABANDONED_AFTER_S = 60.0


class _Redirect(Exception):
    def __init__(self, address: str):
        super().__init__(address)
        self.address = address


async def _download(stub: Any, address: str, fd: int, part: str, path: str, timeout_s: float,
                    metadata: Any) -> BackupResult:
    """One try: the stream into `part` (open as `fd`), renamed to `path` once it checks."""
    h = hashlib.sha256()
    last = None
    try:
        with os.fdopen(fd, "wb") as f:
            call = stub.CreateBackup(api_pb2.CreateBackupRequest(), timeout=timeout_s,
                                     metadata=metadata)
            async for chunk in call:
                if chunk.data:
                    f.write(chunk.data)
                    h.update(chunk.data)
                if chunk.last:
                    last = chunk
            f.flush()
            os.fsync(f.fileno())
    except grpc.aio.AioRpcError as e:
        _remove(part)
        hint = leader_hint(e)
        if e.code() == grpc.StatusCode.UNAVAILABLE and hint and hint != address:
            raise _Redirect(hint) from None
        raise error_for_status(e.code(), e.details() or "", reason=reason_of(e)) from None
    except BaseException:  # a full disk, a cancelled call: no part file stays behind
        _remove(part)
        raise
    if last is None or h.hexdigest() != last.sha256:
        _remove(part)
        raise error_for_status(grpc.StatusCode.DATA_LOSS,
                               "backup stream ended early or its SHA-256 does not match")
    os.replace(part, path)
    return BackupResult(path, last.raft_index, last.raft_term, last.jobs, last.runs,
                        last.size_bytes, last.sha256, last.state_digest)


def remove_abandoned_parts(path: str, *, keep: str, now_s: float | None = None) -> list[str]:
    """Remove the part files next to `path` that no download holds locked (their download
    was killed) and that are older than ABANDONED_AFTER_S; return them. A running download's
    part is locked and stays (POSIX flock)."""
    assert fcntl is not None, "flock is POSIX only"
    folder = os.path.dirname(os.path.abspath(path))
    prefix = os.path.basename(path) + "."
    now_s = time.time() if now_s is None else now_s
    removed = []
    for name in sorted(os.listdir(folder)):
        other = os.path.join(folder, name)
        if not (name.startswith(prefix) and name.endswith(PART_SUFFIX)) or other == keep:
            continue
        try:
            fd = os.open(other, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:  # renamed or removed meanwhile
            continue
        try:
            # The age: a part made a moment ago may not be locked by its download yet.
            if now_s - os.fstat(fd).st_mtime < ABANDONED_AFTER_S:
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(other)
            removed.append(other)
        except (BlockingIOError, FileNotFoundError):
            continue  # its download is running, or it is gone already
        finally:
            os.close(fd)
    return removed


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
