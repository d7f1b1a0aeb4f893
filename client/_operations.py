"""Operator calls of the client (OperationsService): leadership transfer, online backup,
queues, workers and active runs. ``AsyncClient`` and ``Client`` expose them as methods."""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from typing import Any

import grpc

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
    return [WorkerInfo(w.worker_id, tuple(w.queues), w.credits, w.leases_held)
            for w in m.workers]


async def download_backup(pool: Any, address: str, path: str, *, timeout_s: float,
                          metadata: Any) -> BackupResult:
    """Stream a backup from the node at ``address`` (following one leader redirect) into
    ``path`` (written to a file of its own next to it and renamed once its SHA-256 matched:
    two downloads to one path each leave a whole backup, and the last rename wins)."""
    for _ in range(3):
        stub = api_pb2_grpc.OperationsServiceStub(pool.get(address))
        h = hashlib.sha256()
        last = None
        # mkstemp: a name no other download uses, created 0600 whatever the umask (a backup
        # holds every payload and token hash).
        fd, part = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)),
                                    prefix=os.path.basename(path) + ".", suffix=".part")
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
                address = hint
                continue
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
    raise error_for_status(grpc.StatusCode.UNAVAILABLE, "the leader kept moving; retry")


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
