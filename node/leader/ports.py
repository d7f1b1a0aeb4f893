"""What the leader loops need from the rest of the node, declared here by them (as rqlite's
HTTP layer declares its `Store`): the replicated state under its lock, and the proposer.

The loops read `state` only while holding `lock` (the tick thread applies entries under it)
and copy out what they keep; they change the state only by proposing commands.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from gnomon.node.core.commands import Command
from gnomon.node.core.model import State


class LockedState(Protocol):
    """The replicated state (Replica): read `state` under `lock`, briefly."""

    lock: threading.RLock
    state: State


class LoopProposes(Protocol):
    """Commands to the log (Proposer), within the share of its queue left to the loops."""

    async def propose(self, command: Command, *, timeout_ms: int | None = None) -> Any: ...

    async def propose_many(self, commands: list, *,
                           timeout_ms: int | None = None) -> list: ...

    def room_for_loops(self) -> int: ...
