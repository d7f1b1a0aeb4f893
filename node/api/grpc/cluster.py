"""ClusterService: status of this node and, as far as it knows, of the cluster."""

from __future__ import annotations

import asyncio

import grpc

from gnomon.node import codec
from gnomon.node.api.grpc.access import scoped
from gnomon.node.api.grpc.base import ServicerBase, translated
from gnomon.node.api.grpc.errors import ServiceError, check
from gnomon.node.core import commands as c
from gnomon.node.core import digest
from gnomon.node.core.apply import reused_request_id
from gnomon.node.core.model import State
from gnomon.node.core.results import LimitsReply
from gnomon.node.core.validate import validate_limits
from gnomon.node.raft.node import ROLE_NAMES
from gnomon.node.spec.validate import validate_request_id
from gnomon.node.storage.history_copy import serve_export
from gnomon.node.version import VERSION
from gnomon.v1 import api_pb2, api_pb2_grpc


class ClusterServicer(ServicerBase, api_pb2_grpc.ClusterServiceServicer):
    @translated
    async def GetStatus(self, request, context):  # noqa: N802
        node = self.node
        raw = node.raft.status()
        me = node.config.self_member
        # None when the leader's proof is stale here (no quorum): "no leader" (server.py).
        leader = node.fresh_leader() if hasattr(node, "fresh_leader") else node.raft.leader()
        out = api_pb2.GetStatusResponse(
            node_id=me.node_id,
            leader_node_id=leader.node_id if leader else "",
            leader_grpc_address=leader.grpc_addr if leader else "",
            term=int(raw.get("raft_term", 0)),
            commit_index=int(raw.get("commit_idx", 0)),
            applied_index=int(raw.get("last_applied", 0)),
            version=VERSION,
        )
        state = raw.get("state")
        role = ROLE_NAMES.get(state, "unknown") if isinstance(state, int) else "unknown"
        for m in node.raft.membership.members():
            if m.node_id == me.node_id:
                out.nodes.add(node_id=m.node_id, raft_address=m.raft_addr, grpc_address=m.grpc_addr,
                              http_address=m.http_addr, role=role,
                              match_index=out.applied_index, connected=True,
                              match_index_known=True)
                continue
            connected = raw.get(f"partner_node_status_server_{m.raft_addr}", 0) == 2
            out.nodes.add(
                node_id=m.node_id, raft_address=m.raft_addr, grpc_address=m.grpc_addr,
                http_address=m.http_addr,
                role=("leader" if leader and leader.node_id == m.node_id
                      else "follower" if connected else "unreachable"),
                # Only the leader tracks the others' match index; a follower's copy is 0 or
                # what it knew when it last led: not shown as if it were true.
                match_index=int(raw.get(f"match_idx_server_{m.raft_addr}", 0))
                if role == "leader" else 0,
                match_index_known=role == "leader",
                connected=connected,
            )
        def counts(st: State) -> None:
            out.clock_ms = st.clock_ms
            out.jobs = len(st.jobs)
            out.active_runs = st.active_runs
            out.dead_letters = len(st.dead_letters)
            out.dead_letters_evicted = st.dead_letters_evicted
            out.limits_version = st.limits_version
            codec.limits_to_proto(st.limits, out.limits)

        self.read(counts)
        for change in node.leader_history.changes():
            out.leader_changes.add(at_ms=change.at_ms, term=change.term,
                                   leader_node_id=change.leader_node_id,
                                   previous_leader_node_id=change.previous_leader_node_id,
                                   cause=change.cause)
        if request.include_digest:
            # The digest is of the state at the applied index answered with it: both read
            # under one lock (read apart, 2 of 18 indexes came back with two digests).
            out.state_digest, index = await asyncio.to_thread(self._digest)
            out.applied_index = index or out.applied_index
        return out

    def _digest(self) -> tuple[str, int]:
        # O(state) and under the lock (it stalls the tick thread meanwhile): only on request.
        replica = self.node.replica
        return replica.read(lambda st: (digest(st), replica.applied_index))

    async def ExportHistory(self, request, context):  # noqa: N802
        """Pages of this node's run history, for a peer's backfill (node/storage/history_copy.py)."""
        async for page in serve_export(self.node, request, context):
            yield page

    @translated
    async def SetLimits(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        self.require_leader()
        current = self.read(lambda st: st.limits)
        limits = codec.limits_from_proto(request.limits, current)
        check(validate_limits(limits))  # apply checks too; refusing here commits nothing
        reply = check(await self.node.proposer.propose(scoped(
            c.SetLimits(request.request_id, limits, request.expected_version), request)))
        if not isinstance(reply, LimitsReply):  # a second line, as jobs._answering
            raise ServiceError(grpc.StatusCode.FAILED_PRECONDITION,
                               reused_request_id(request.request_id))
        return api_pb2.SetLimitsResponse(limits=codec.limits_to_proto(limits),
                                         limits_version=reply.version)
