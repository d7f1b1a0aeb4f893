"""What servicers need from the node (a narrow interface) and the translation decorator."""

from __future__ import annotations

import functools
import random
import threading
from collections.abc import Callable
from typing import Protocol, TypeVar

from gnomon.node.api.grpc.errors import NotLeader, abort, status_of
from gnomon.node.clock import Clock
from gnomon.node.config import Config
from gnomon.node.core.commands import Barrier
from gnomon.node.core.model import State
from gnomon.node.leader.session import Leadership
from gnomon.node.raft.node import RaftNode
from gnomon.node.raft.proposer import Proposer
from gnomon.node.replica import Replica
from gnomon.node.spec.validate import InputLimits
from gnomon.node.tasks import Supervisor
from gnomon.v1 import api_pb2

T = TypeVar("T")


class NodeApi(Protocol):
    clock: Clock
    config: Config
    replica: Replica
    proposer: Proposer
    leadership: Leadership
    raft: RaftNode
    input_limits: InputLimits
    supervisor: Supervisor
    rng: random.Random

    def leader_grpc_addr(self) -> str | None: ...


def translated(fn):
    """Map domain exceptions raised by a unary handler to gRPC statuses."""

    @functools.wraps(fn)
    async def wrapper(self, request, context):
        try:
            return await fn(self, request, context)
        except Exception as exc:  # noqa: BLE001 - unknown ones are re-raised by abort()
            if status_of(exc) is None:
                raise
            await abort(context, exc)

    return wrapper


class ServicerBase:
    def __init__(self, node: NodeApi):
        self.node = node

    @property
    def lock(self) -> threading.RLock:
        return self.node.replica.lock

    def read(self, query: Callable[[State], T]) -> T:
        """`query(state)` under the replica's lock (Replica.read)."""
        return self.node.replica.read(query)

    def require_leader(self) -> None:
        if not self.node.leadership.ready:
            raise NotLeader(self.node.leader_grpc_addr())

    async def before_read(self, consistency: int) -> None:
        """LINEARIZABLE (the default) commits a barrier on the leader first; STALE reads local."""
        if consistency == api_pb2.CONSISTENCY_STALE:
            return
        if "follower-read" in self.node.config.canaries:  # test-only jepsen canary
            return
        self.require_leader()
        await self.node.proposer.propose(Barrier())
