"""OperationsService: leadership transfer, online backup, queues, workers and active runs."""

from __future__ import annotations

import asyncio
import logging
import os
import re
from typing import Protocol

import grpc

from gnomon.node import codec
from gnomon.node.api.grpc.base import NodeApi, ServicerBase, translated
from gnomon.node.api.grpc.errors import ServiceError, abort
from gnomon.node.config import Member
from gnomon.node.core.model import RunState, State
from gnomon.node.leader.dispatch import WorkerSession
from gnomon.node.leader.leases import LeaseDeadline
from gnomon.node.ops.observe import queue_views
from gnomon.node.ops.operations import (
    OperationError,
    TransferTimeout,
    add_node,
    create_backup,
    remove_node,
    transfer_leadership,
)
from gnomon.v1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
MAX_ACTIVE_RUNS = 1_000
NODE_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
MAX_CATCH_UP_TIMEOUT_MS = 3_600_000


class Sessions(Protocol):
    """The leader's worker sessions (Dispatcher), read on the loop thread."""

    sessions: dict[str, WorkerSession]


class Deadlines(Protocol):
    """The leader's lease deadlines (LeaseTable), read on the loop thread."""

    deadlines: dict[int, LeaseDeadline]


class OperationsApi(NodeApi, Protocol):
    """NodeApi, and the leader-local worker view that ListQueues and ListWorkers show."""

    dispatcher: Sessions
    leases: Deadlines


class OperationsServicer(ServicerBase, api_pb2_grpc.OperationsServiceServicer):
    node: OperationsApi

    def __init__(self, node: OperationsApi):
        super().__init__(node)

    @translated
    async def TransferLeadership(self, request, context):  # noqa: N802
        self.require_leader()
        node = self.node
        if request.to_node_id == node.config.node_id:  # a retry after it moved here: done
            me = node.config.self_member
            return api_pb2.TransferLeadershipResponse(
                previous_leader_node_id=me.node_id, leader_node_id=me.node_id,
                leader_grpc_address=me.grpc_addr, term=node.raft.term())
        timeout_s = (request.timeout_ms or 5_000) / 1000
        if not 0 < timeout_s <= 60:
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               "timeout_ms: must be between 1 and 60000")
        node.leader_history.note_transfer(request.to_node_id, node.clock.wall_ms())
        try:
            leader = await transfer_leadership(node, request.to_node_id, timeout_s)
        except OperationError as exc:
            raise ServiceError(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from None
        except TransferTimeout as exc:  # not DEADLINE_EXCEEDED: clients retry that
            raise ServiceError(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from None
        return api_pb2.TransferLeadershipResponse(
            previous_leader_node_id=node.config.node_id, leader_node_id=leader.node_id,
            leader_grpc_address=leader.grpc_addr, term=node.raft.term())

    @translated
    async def AddNode(self, request, context):  # noqa: N802
        member = _member(request)
        timeout_ms = request.catch_up_timeout_ms or self.node.config.membership_catch_up_timeout_ms
        if not 0 < timeout_ms <= MAX_CATCH_UP_TIMEOUT_MS:
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"catch_up_timeout_ms: must be between 1 and "
                               f"{MAX_CATCH_UP_TIMEOUT_MS}")
        self.require_leader()
        try:
            change = await add_node(self.node, member, timeout_ms / 1000)
        except OperationError as exc:
            raise ServiceError(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from None
        return self._membership_response(change)

    @translated
    async def RemoveNode(self, request, context):  # noqa: N802
        if not NODE_ID_RE.fullmatch(request.node_id):
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               "node_id: 1-63 letters, digits, '.', '_' or '-'")
        self.require_leader()
        node = self.node
        try:
            if request.node_id == node.config.node_id:
                # A leader cannot remove itself (Raft would count it until the entry
                # commits): hand over first; the client's retry removes it on the new one.
                await transfer_leadership(node, "", timeout_s=10)
                self.require_leader()  # raises: UNAVAILABLE naming the new leader
            change = await remove_node(node, request.node_id)
        except (OperationError, TransferTimeout) as exc:
            raise ServiceError(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from None
        return self._membership_response(change)

    def _membership_response(self, change) -> api_pb2.MembershipResponse:
        out = api_pb2.MembershipResponse(changed=change.changed, match_index=change.match_index,
                                         catch_up_ms=change.catch_up_ms)
        for m in self.node.raft.membership.members():
            out.members.add(node_id=m.node_id, raft_address=m.raft_addr,
                            grpc_address=m.grpc_addr,
                            role="leader" if m.node_id == self.node.config.node_id else "follower")
        return out

    async def CreateBackup(self, request, context):  # noqa: N802
        try:
            self.require_leader()
            folder = os.path.join(self.node.config.data_dir, "backups")
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, f"backup-{self.node.clock.wall_ms()}-{id(context)}.lmdb")
            info = await create_backup(self.node, path)
        except Exception as exc:  # noqa: BLE001 - mapped by the one error table
            await abort(context, exc)
            return
        try:
            with open(path, "rb") as f:
                while chunk := await asyncio.to_thread(f.read, CHUNK_BYTES):
                    yield api_pb2.BackupChunk(data=chunk)
            yield api_pb2.BackupChunk(
                last=True, sha256=info.sha256, raft_index=info.raft_index,
                raft_term=info.raft_term, jobs=info.jobs, runs=info.runs,
                size_bytes=info.size_bytes, state_digest=info.state_digest)
        finally:
            os.unlink(path)

    @translated
    async def ListQueues(self, request, context):  # noqa: N802
        await self.before_read(api_pb2.CONSISTENCY_LINEARIZABLE)
        now = self.node.clock.wall_ms()
        sessions = dict(self.node.dispatcher.sessions)
        views = self.read(lambda st: queue_views(st, sessions))
        out = api_pb2.ListQueuesResponse(from_leader=True)
        for name, v in sorted(views.items()):
            out.queues.add(queue=name, ready=v.ready, leased=v.leased,
                           oldest_ready_age_ms=max(0, now - v.oldest_ready_ms)
                           if v.oldest_ready_ms else 0,
                           workers=sorted(v.workers))
        return out

    @translated
    async def ListWorkers(self, request, context):  # noqa: N802
        self.require_leader()
        held = self._leases_held()
        out = api_pb2.ListWorkersResponse(from_leader=True)
        for worker_id, s in sorted(self.node.dispatcher.sessions.items()):
            _worker_info(worker_id, s, held, out.workers.add())
        return out

    @translated
    async def DrainWorker(self, request, context):  # noqa: N802
        self.require_leader()
        session = self.node.dispatcher.sessions.get(request.worker_id)
        if session is None or session.closed:
            raise ServiceError(grpc.StatusCode.NOT_FOUND,
                               f"worker_id: no worker {request.worker_id!r} is connected "
                               "to the leader")
        session.draining = True
        log.info("worker %s drained: nothing more is granted to it", request.worker_id)
        out = api_pb2.DrainWorkerResponse()
        _worker_info(request.worker_id, session, self._leases_held(), out.worker)
        return out

    def _leases_held(self) -> dict[str, int]:
        held: dict[str, int] = {}
        for d in self.node.leases.deadlines.values():
            held[d.worker_id] = held.get(d.worker_id, 0) + 1
        return held

    @translated
    async def ListActiveRuns(self, request, context):  # noqa: N802
        limit = request.limit or 100
        if not 0 < limit <= MAX_ACTIVE_RUNS:
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"limit: must be between 1 and {MAX_ACTIVE_RUNS}")
        await self.before_read(api_pb2.CONSISTENCY_LINEARIZABLE)
        out = api_pb2.ListActiveRunsResponse()
        def running(st: State) -> None:
            runs = [r for r in st.runs.values() if r.state == RunState.RUNNING
                    and (not request.tenant or r.tenant == request.tenant)]
            runs.sort(key=lambda r: (r.scheduled_for_ms, r.run_id))
            for run in runs[:limit]:
                codec.run_to_proto(run, out.runs.add())

        self.read(running)
        return out


def _member(request) -> Member:
    """The AddNode request's member, or INVALID_ARGUMENT naming the field."""
    if not NODE_ID_RE.fullmatch(request.node_id):
        raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                           "node_id: 1-63 letters, digits, '.', '_' or '-'")
    for name in ("raft_address", "grpc_address", "http_address"):
        value = getattr(request, name)
        if name == "http_address" and not value:
            continue
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"{name}: {value!r} is not host:port (port 1-65535)")
    return Member(request.node_id, request.raft_address, request.grpc_address,
                  request.http_address)


def _worker_info(worker_id: str, s: WorkerSession, held: dict[str, int],
                 out: api_pb2.WorkerInfo) -> None:
    out.worker_id = worker_id
    out.queues.extend(s.queues)
    out.credits, out.leases_held = s.credits, held.get(worker_id, 0)
    out.connected_ms, out.last_heartbeat_ms = s.connected_ms, s.last_heartbeat_ms
    out.peer, out.draining = s.peer, s.draining
