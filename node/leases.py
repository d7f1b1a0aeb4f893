"""Leader-local lease deadlines (etcd's lessor model).

The grant is replicated (GrantLeases); heartbeats renew a deadline in this leader's memory
only; a passed deadline becomes an ExpireLeases command, which apply ignores for a stale
token. A new leader cannot know the last heartbeat its predecessor saw, so it re-arms every
lease at now + ttl + election timeout before expiring anything. A task's `timeout_ms` is a
second deadline (from the replicated start time) that expires the attempt the same way.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import random
from dataclasses import dataclass

from gnomon.node import metrics
from gnomon.node.clock import mono_ms, wall_ms
from gnomon.node.core.commands import ExpiredLease, ExpireLeases
from gnomon.node.core.model import TaskState
from gnomon.node.raft import NotCommitted, Overloaded, Proposer
from gnomon.node.replica import Replica

log = logging.getLogger(__name__)

EXPIRY_TICK_S = 0.1


@dataclass(slots=True)
class LeaseDeadline:
    run_id: str
    task_name: str
    worker_id: str
    ttl_ms: int
    expires_mono: int
    # Wall-clock instant at which the task's timeout_ms runs out; 0 if none.
    timeout_wall_ms: int


class LeaseTable:
    def __init__(self, replica: Replica, proposer: Proposer, *, election_timeout_ms: int,
                 rng: random.Random):
        self._replica = replica
        self._proposer = proposer
        self._election_timeout_ms = election_timeout_ms
        self._rng = rng
        self.deadlines: dict[int, LeaseDeadline] = {}
        # One entry per lease: (deadline at push time, token). A renewed lease is re-pushed
        # when its old entry comes up, so renewals cost nothing here.
        self._ttl_heap: list[tuple[int, int]] = []
        self._timeout_heap: list[tuple[int, int]] = []
        self._expiring: set[int] = set()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Re-arm every lease of the replicated state (new leader session)."""
        now = mono_ms()
        self.deadlines.clear()
        self._ttl_heap.clear()
        self._timeout_heap.clear()
        self._expiring.clear()
        with self._replica.lock:
            for run in self._replica.state.runs.values():
                for inst in run.tasks.values():
                    if inst.state == TaskState.LEASED:
                        self._add(run, inst, now + inst.lease_ttl_ms + self._election_timeout_ms)
        self._task = asyncio.create_task(self._run(), name="leases")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self.deadlines.clear()

    def _add(self, run, inst, expires_mono: int) -> None:
        timeout_ms = run.spec.task(inst.task_name).timeout_ms
        token = inst.fencing_token
        d = LeaseDeadline(run.run_id, inst.task_name, inst.worker_id, inst.lease_ttl_ms,
                          expires_mono, inst.started_ms + timeout_ms if timeout_ms else 0)
        self.deadlines[token] = d
        heapq.heappush(self._ttl_heap, (expires_mono, token))
        if d.timeout_wall_ms:
            heapq.heappush(self._timeout_heap, (d.timeout_wall_ms, token))

    # -- effects hooks (loop thread) -------------------------------------------------------

    def leased(self, keys: list[tuple[str, str, int]]) -> None:
        if self._task is None:
            return
        now = mono_ms()
        with self._replica.lock:
            runs = self._replica.state.runs
            for run_id, task_name, token in keys:
                run = runs.get(run_id)
                inst = run.tasks.get(task_name) if run else None
                if inst is not None and inst.fencing_token == token:
                    self._add(run, inst, now + inst.lease_ttl_ms)

    def ended(self, keys: list[tuple[str, str, int]]) -> None:
        for _run_id, _task, token in keys:
            self.deadlines.pop(token, None)
            self._expiring.discard(token)

    # -- heartbeats -----------------------------------------------------------------------

    def renew(self, worker_id: str, tokens: list[int]) -> tuple[list[int], list[int]]:
        """Renew the worker's leases; returns (valid, revoked) tokens."""
        now = mono_ms()
        valid, revoked = [], []
        for token in tokens:
            d = self.deadlines.get(token)
            if d is None or d.worker_id != worker_id or token in self._expiring:
                revoked.append(token)
                continue
            d.expires_mono = now + d.ttl_ms
            valid.append(token)
        return valid, revoked

    def holder(self, token: int) -> LeaseDeadline | None:
        return self.deadlines.get(token)

    def expire_now(self, token: int) -> None:
        """Expire on the next tick (the lease's worker is gone)."""
        d = self.deadlines.get(token)
        if d is not None:
            d.expires_mono = 0
            heapq.heappush(self._ttl_heap, (0, token))

    # -- expiry loop ------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_TICK_S)
            expired = self._collect(mono_ms(), wall_ms())
            if expired:
                asyncio.create_task(self._propose(expired))

    def _collect(self, now_mono: int, now_wall: int) -> list[ExpiredLease]:
        out: list[ExpiredLease] = []
        while self._timeout_heap and self._timeout_heap[0][0] <= now_wall:
            _, token = heapq.heappop(self._timeout_heap)
            self._expire(token, "timeout", out)
        while self._ttl_heap and self._ttl_heap[0][0] <= now_mono:
            _, token = heapq.heappop(self._ttl_heap)
            d = self.deadlines.get(token)
            if d is not None and d.expires_mono > now_mono:
                heapq.heappush(self._ttl_heap, (d.expires_mono, token))  # renewed meanwhile
                continue
            self._expire(token, "lease expired", out)
        return out

    def _expire(self, token: int, reason: str, out: list[ExpiredLease]) -> None:
        d = self.deadlines.get(token)
        if d is None or token in self._expiring:
            return
        out.append(ExpiredLease(d.run_id, d.task_name, token, reason, self._rng.random()))
        self._expiring.add(token)

    async def _propose(self, expired: list[ExpiredLease]) -> None:
        try:
            await self._proposer.propose(ExpireLeases(tuple(expired)))
            for e in expired:
                metrics.LEASES_EXPIRED.labels(e.reason).inc()
        except (NotCommitted, Overloaded) as exc:
            log.warning("lease expiry not committed (%s); will retry", exc)
            for e in expired:
                self._expiring.discard(e.fencing_token)
                heap = self._timeout_heap if e.reason == "timeout" else self._ttl_heap
                heapq.heappush(heap, (0, e.fencing_token))
