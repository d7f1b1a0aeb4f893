"""What servicers need from the node (narrow interfaces, declared here by their consumer, as
rqlite's HTTP layer declares its `Store`) and the translation decorator.

A servicer reaches the node only through `NodeApi`, whose parts are protocols rather than the
node's classes: `Reads` (the replicated state, through short queries under its lock, and this
node's history store), `Proposes` (commands to the Raft log), `Leads` (whether this node leads
and can prove it). mypy checks the servicers' bodies against them (check_untyped_defs for
node/api/grpc), so what a servicer may touch is what these say.
"""

from __future__ import annotations

import functools
import random
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from gnomon.node.api.grpc.errors import NotLeader, abort, status_of
from gnomon.node.clock import Clock
from gnomon.node.config import Config
from gnomon.node.core.commands import Barrier, Command
from gnomon.node.core.model import State
from gnomon.node.ops.leader_history import LeaderHistory
from gnomon.node.raft.node import RaftNode
from gnomon.node.spec.validate import InputLimits
from gnomon.node.storage.history_sink import HistorySink
from gnomon.v1 import api_pb2

T = TypeVar("T")


class Reads(Protocol):
    """The replicated state (Replica): `read(query)` runs a short pure query under the lock
    (the tick thread applies between two reads); `applied_index` is read with it."""

    lock: threading.RLock
    history: HistorySink
    applied_index: int

    def read(self, query: Callable[[State], T]) -> T: ...


class Proposes(Protocol):
    """Commands to the log (Proposer): each answers its reply once committed and applied (a
    Rejected value is returned, not raised)."""

    async def propose(self, command: Command, *, timeout_ms: int | None = None) -> Any: ...

    async def propose_many(self, commands: list, *,
                           timeout_ms: int | None = None) -> list: ...


class Leads(Protocol):
    """This node's leadership (Leadership): `ready` once its first barrier committed,
    `fresh()` while an entry it proposed committed recently (it can prove it leads)."""

    ready: bool

    def fresh(self) -> bool: ...


class Spawns(Protocol):
    """Supervised tasks (Supervisor): a failure is logged, a critical one stops the node."""

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str,
              critical: bool = False) -> Any: ...


class NodeApi(Protocol):
    clock: Clock
    config: Config
    replica: Reads
    proposer: Proposes
    leadership: Leads
    raft: RaftNode  # membership and Raft status (cluster and operations servicers)
    input_limits: InputLimits
    supervisor: Spawns
    rng: random.Random
    leader_history: LeaderHistory  # the leader changes this node saw (GetStatus)

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
