"""OperationsService: leadership transfer, online backup, queues, workers and active runs."""

from __future__ import annotations

import asyncio
import os

import grpc

from gnomon.node import codec
from gnomon.node.clock import wall_ms
from gnomon.node.core.model import RunState
from gnomon.node.observe import queue_views
from gnomon.node.operations import (
    OperationError,
    TransferTimeout,
    create_backup,
    transfer_leadership,
)
from gnomon.node.servicers.base import ServicerBase, translated
from gnomon.node.servicers.errors import ServiceError, abort
from gnomon.v1 import api_pb2, api_pb2_grpc

CHUNK_BYTES = 1 << 20
MAX_ACTIVE_RUNS = 1_000


class OperationsServicer(ServicerBase, api_pb2_grpc.OperationsServiceServicer):
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
        try:
            leader = await transfer_leadership(node, request.to_node_id, timeout_s)
        except OperationError as exc:
            raise ServiceError(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from None
        except TransferTimeout as exc:  # not DEADLINE_EXCEEDED: clients retry that
            raise ServiceError(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from None
        return api_pb2.TransferLeadershipResponse(
            previous_leader_node_id=node.config.node_id, leader_node_id=leader.node_id,
            leader_grpc_address=leader.grpc_addr, term=node.raft.term())

    async def CreateBackup(self, request, context):  # noqa: N802
        try:
            self.require_leader()
            folder = os.path.join(self.node.config.data_dir, "backups")
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, f"backup-{wall_ms()}-{id(context)}.lmdb")
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
        now = wall_ms()
        sessions = dict(self.node.dispatcher.sessions)
        with self.lock:
            views = queue_views(self.node.replica.state, sessions)
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
        held: dict[str, int] = {}
        for d in self.node.leases.deadlines.values():
            held[d.worker_id] = held.get(d.worker_id, 0) + 1
        out = api_pb2.ListWorkersResponse(from_leader=True)
        for worker_id, s in sorted(self.node.dispatcher.sessions.items()):
            out.workers.add(worker_id=worker_id, queues=list(s.queues), credits=s.credits,
                            leases_held=held.get(worker_id, 0))
        return out

    @translated
    async def ListActiveRuns(self, request, context):  # noqa: N802
        limit = request.limit or 100
        if not 0 < limit <= MAX_ACTIVE_RUNS:
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"limit: must be between 1 and {MAX_ACTIVE_RUNS}")
        await self.before_read(api_pb2.CONSISTENCY_LINEARIZABLE)
        out = api_pb2.ListActiveRunsResponse()
        with self.lock:
            runs = [r for r in self.node.replica.state.runs.values()
                    if r.state == RunState.RUNNING
                    and (not request.tenant or r.tenant == request.tenant)]
            runs.sort(key=lambda r: (r.scheduled_for_ms, r.run_id))
            for run in runs[:limit]:
                codec.run_to_proto(run, out.runs.add())
        return out
