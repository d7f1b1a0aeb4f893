"""Leadership as the node acts on it: a term session starts only after this leader's own
barrier entry committed, and leadership is "fresh" only while an entry it proposed recently
has committed (ARCHITECTURE section 4). pysyncobj's `_isLeader()` alone proves nothing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from gnomon.node.clock import SYSTEM_CLOCK, Clock
from gnomon.node.core.commands import Barrier
from gnomon.node.ops import metrics
from gnomon.node.raft.errors import NotCommitted, Overloaded
from gnomon.node.raft.node import LEADER, ROLE_NAMES, RaftNode
from gnomon.node.raft.proposer import Proposer
from gnomon.node.tasks import Supervisor

log = logging.getLogger(__name__)


class Leadership:
    """Owns the leader session. `on_start(session)` / `on_stop()` start and stop leader loops."""

    def __init__(
        self,
        raft_getter: Callable[[], RaftNode],
        proposer_getter: Callable[[], Proposer],
        *,
        proof_interval_ms: int,
        on_start: Callable[[int], Awaitable[None]],
        on_stop: Callable[[], Awaitable[None]],
        supervisor: Supervisor,
        clock: Clock = SYSTEM_CLOCK,
    ):
        self._supervisor = supervisor
        self._clock = clock
        self._raft = raft_getter
        self._proposer = proposer_getter
        self.proof_interval_ms = proof_interval_ms
        self._on_start, self._on_stop = on_start, on_stop
        self.session = 0  # increments on every promotion; loops compare it
        self.ready = False
        self.last_proof_mono = -(10**12)
        self._role = 0
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = self._supervisor.spawn(self._run(), name="leadership", critical=True)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.ready:
            self.ready = False
            await self._on_stop()

    # Called through call_soon_threadsafe from the tick thread.
    def role_changed(self, old: int, new: int) -> None:
        log.info("raft role %s -> %s", ROLE_NAMES.get(old, old), ROLE_NAMES.get(new, new))
        self._role = new
        self._changed.set()

    def committed(self, sent_mono: int) -> None:
        """An entry this node proposed at `sent_mono` committed: leadership held then."""
        self.last_proof_mono = max(self.last_proof_mono, sent_mono)

    def fresh(self) -> bool:
        return self.ready and self._clock.mono_ms() - self.last_proof_mono < 3 * self.proof_interval_ms

    async def _run(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self.proof_interval_ms / 1000):  # see trigger.py
                    await self._changed.wait()
            except TimeoutError:
                pass
            self._changed.clear()
            is_leader = self._role == LEADER and self._raft().is_leader()
            if is_leader and not self.ready:
                await self._promote()
            elif not is_leader and self.ready:
                await self._demote()
            elif self.ready and self._clock.mono_ms() - self.last_proof_mono >= self.proof_interval_ms:
                await self._barrier()

    async def _barrier(self) -> bool:
        try:
            await self._proposer().propose(Barrier(), timeout_ms=3 * self.proof_interval_ms + 1000)
            return True
        except (NotCommitted, Overloaded) as exc:
            log.info("barrier not committed: %s", exc)
            return False

    async def _promote(self) -> None:
        if not await self._barrier():
            self._changed.set()  # try again on the next round
            return
        if not self._raft().is_leader():
            return
        self.session += 1
        self.ready = True
        metrics.IS_LEADER.set(1)
        log.info("leading (session %d, term %d)", self.session, self._raft().term())
        await self._on_start(self.session)

    async def _demote(self) -> None:
        self.ready = False
        metrics.IS_LEADER.set(0)
        log.info("no longer leading")
        await self._on_stop()
