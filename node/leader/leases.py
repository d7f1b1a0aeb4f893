"""Leader-local lease deadlines (etcd's lessor model, with its lease checkpoints).

The grant is replicated (GrantLeases); heartbeats renew a deadline in this leader's memory
only; a passed deadline becomes an ExpireLeases command, which apply ignores for a stale
token. A task's `timeout_ms` is a second deadline (from the replicated start time) that
expires the attempt the same way.

A new leader cannot know the last heartbeat its predecessor saw. It re-arms a lease to end
at the deadline a predecessor checkpointed in the log (CheckpointLeases: remaining time at a
cluster time), or a full TTL from its promotion when there is none, plus `ack_slack_ms`: the
longest a deposed leader may still have acknowledged a heartbeat (3 proof intervals, see
leadership.py), so no lease is expired before its worker has stopped trusting it. Leases of
workers that stopped heartbeating are checkpointed every `checkpoint_interval_ms`, and a
checkpoint is cleared again when the worker comes back, so a dead worker's task is
re-offered within about one TTL plus one election however often the leader changes.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import random
from dataclasses import dataclass

from gnomon.node.clock import SYSTEM_CLOCK, Clock
from gnomon.node.core.commands import (
    CheckpointLeases,
    ExpiredLease,
    ExpireLeases,
    LeaseCheckpoint,
)
from gnomon.node.core.model import Run, TaskInstance, TaskState
from gnomon.node.leader.ports import LockedState, LoopProposes
from gnomon.node.ops import logs, metrics
from gnomon.node.raft.errors import NotCommitted, Overloaded
from gnomon.node.tasks import Supervisor

log = logging.getLogger(__name__)

EXPIRY_TICK_S = 0.1
MAX_CHECKPOINTS_PER_PROPOSAL = 1_000


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    """Node config that shapes lease deadlines."""

    heartbeat_interval_ms: int
    ack_slack_ms: int
    checkpoint_interval_ms: int


@dataclass(slots=True)
class LeaseDeadline:
    run_id: str
    task_name: str
    worker_id: str
    ttl_ms: int
    expires_mono: int
    # Wall-clock instant at which the task's timeout_ms runs out; 0 if none.
    timeout_wall_ms: int
    renewed_mono: int
    # The deadline (wall ms) the log holds for this lease as a checkpoint; 0 if none.
    checkpoint_wall_ms: int = 0
    tenant: str = ""
    queue: str = ""


# Up to this many expiries of one round are logged one line each; beyond, one summary line
# (an expiry storm on an overloaded leader spent 7% of its CPU writing log lines).
MAX_EXPIRY_LINES = 10


def _log_expired(expired: list[ExpiredLease]) -> None:
    if len(expired) <= MAX_EXPIRY_LINES:
        for e in expired:
            log.info("lease of %s expired (%s)", e.task_name, e.reason,
                     extra=logs.fields(job=e.run_id.rsplit("@", 1)[0], run=e.run_id,
                                       token=e.fencing_token))
        return
    reasons: dict[str, int] = {}
    for e in expired:
        reasons[e.reason] = reasons.get(e.reason, 0) + 1
    first = expired[0]
    log.info("%d leases expired (%s); the first: %s of run %s (token %d)", len(expired),
             ", ".join(f"{n} {why}" for why, n in sorted(reasons.items())), first.task_name,
             first.run_id, first.fencing_token)


class LeaseTable:
    def __init__(self, replica: LockedState, proposer: LoopProposes, timing: LeaseTiming, *,
                 rng: random.Random, supervisor: Supervisor, clock: Clock = SYSTEM_CLOCK):
        self._replica = replica
        self._clock = clock
        self._proposer = proposer
        self._timing = timing
        self._rng = rng
        self._supervisor = supervisor
        self.deadlines: dict[int, LeaseDeadline] = {}
        self._by_worker: dict[str, dict[int, None]] = {}
        # Leases held per tenant and per queue (the dispatcher's concurrency caps).
        self.by_tenant: dict[str, int] = {}
        self.by_queue: dict[str, int] = {}
        # One entry per lease: (deadline at push time, token). A renewed lease is re-pushed
        # when its old entry comes up, so renewals cost nothing here.
        self._ttl_heap: list[tuple[int, int]] = []
        self._timeout_heap: list[tuple[int, int]] = []
        self._expiring: set[int] = set()
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        """Re-arm every lease of the replicated state (new leader session)."""
        self._clear()
        now_mono, slack = self._clock.mono_ms(), self._timing.ack_slack_ms
        with self._replica.lock:
            now_wall = max(self._clock.wall_ms(), self._replica.state.clock_ms)
            for run in self._replica.state.runs.values():
                for inst in run.tasks.values():
                    if inst.state != TaskState.LEASED:
                        continue
                    checkpoint = _checkpointed_deadline(inst)
                    left = max(0, checkpoint - now_wall) if checkpoint else inst.lease_ttl_ms
                    d = self._add(run, inst, now_mono + left + slack, now_mono)
                    d.checkpoint_wall_ms = checkpoint
        self._tasks = [
            self._supervisor.spawn(self._expire_loop(), name="lease-expiry", critical=True),
            self._supervisor.spawn(self._checkpoint_loop(), name="lease-checkpoints",
                                   critical=True),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self._clear()

    def _clear(self) -> None:
        self.deadlines.clear()
        self._by_worker.clear()
        self.by_tenant.clear()
        self.by_queue.clear()
        self._ttl_heap.clear()
        self._timeout_heap.clear()
        self._expiring.clear()

    def _add(self, run: Run, inst: TaskInstance, expires_mono: int,
             now_mono: int) -> LeaseDeadline:
        timeout_ms = run.spec.task(inst.task_name).timeout_ms
        token = inst.fencing_token
        d = LeaseDeadline(run.run_id, inst.task_name, inst.worker_id, inst.lease_ttl_ms,
                          expires_mono, inst.started_ms + timeout_ms if timeout_ms else 0,
                          renewed_mono=now_mono, tenant=run.spec.tenant,
                          queue=run.spec.task(inst.task_name).queue or "default")
        if token not in self.deadlines:
            self.by_tenant[d.tenant] = self.by_tenant.get(d.tenant, 0) + 1
            self.by_queue[d.queue] = self.by_queue.get(d.queue, 0) + 1
        self.deadlines[token] = d
        self._by_worker.setdefault(d.worker_id, {})[token] = None
        heapq.heappush(self._ttl_heap, (expires_mono, token))
        if d.timeout_wall_ms:
            heapq.heappush(self._timeout_heap, (d.timeout_wall_ms, token))
        return d

    def _forget(self, token: int) -> None:
        d = self.deadlines.pop(token, None)
        self._expiring.discard(token)
        if d is not None:
            _decrement(self.by_tenant, d.tenant)
            _decrement(self.by_queue, d.queue)
            held = self._by_worker.get(d.worker_id)
            if held is not None:
                held.pop(token, None)
                if not held:
                    del self._by_worker[d.worker_id]

    # -- effects hooks (loop thread) -------------------------------------------------------

    def leased(self, keys: list[tuple[str, str, int]]) -> None:
        if not self._tasks:
            return
        now = self._clock.mono_ms()
        with self._replica.lock:
            runs = self._replica.state.runs
            for run_id, task_name, token in keys:
                run = runs.get(run_id)
                inst = run.tasks.get(task_name) if run else None
                if run is not None and inst is not None and inst.fencing_token == token:
                    self._add(run, inst, now + inst.lease_ttl_ms, now)

    def ended(self, keys: list[tuple[str, str, int]]) -> None:
        for _run_id, _task, token in keys:
            self._forget(token)

    # -- heartbeats and reconnects ----------------------------------------------------------

    def renew(self, worker_id: str, tokens: list[int]) -> tuple[list[int], list[int]]:
        """Renew the worker's leases; returns (valid, revoked) tokens."""
        now = self._clock.mono_ms()
        valid, revoked = [], []
        for token in tokens:
            d = self.deadlines.get(token)
            if d is None or d.worker_id != worker_id or token in self._expiring:
                revoked.append(token)
                continue
            d.expires_mono = now + d.ttl_ms
            d.renewed_mono = now
            valid.append(token)
        if valid:
            metrics.LEASES_RENEWED.inc(len(valid))
        return valid, revoked

    def reconnected(self, worker_id: str, held: list[int]) -> tuple[list[int], list[int]]:
        """A worker said Hello listing the leases it still holds: renew those, expire at once
        every other lease the cluster has it holding (it lost them, e.g. it restarted)."""
        listed = set(held)
        for token in list(self._by_worker.get(worker_id, ())):
            if token not in listed:
                self.expire_now(token)
        return self.renew(worker_id, held)

    def holder(self, token: int) -> LeaseDeadline | None:
        return self.deadlines.get(token)

    def expire_now(self, token: int) -> None:
        """Expire on the next tick (the lease's worker is gone)."""
        d = self.deadlines.get(token)
        if d is not None:
            d.expires_mono = 0
            heapq.heappush(self._ttl_heap, (0, token))

    # -- expiry loop ------------------------------------------------------------------------

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_TICK_S)
            expired = self._collect(self._clock.mono_ms(), self._clock.wall_ms())
            if expired:
                self._supervisor.spawn(self._propose_expiry(expired), name="lease-expire")

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

    async def _propose_expiry(self, expired: list[ExpiredLease]) -> None:
        try:
            await self._proposer.propose(ExpireLeases(tuple(expired)))
            for e in expired:
                metrics.LEASES_EXPIRED.labels(e.reason).inc()
            _log_expired(expired)
        except (NotCommitted, Overloaded) as exc:
            log.warning("lease expiry not committed (%s); will retry", exc)
            for e in expired:
                self._expiring.discard(e.fencing_token)
                heap = self._timeout_heap if e.reason == "timeout" else self._ttl_heap
                heapq.heappush(heap, (0, e.fencing_token))

    # -- checkpoints ------------------------------------------------------------------------

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(self._timing.checkpoint_interval_ms / 1000)
            wanted = self.checkpoints_due(self._clock.mono_ms(), self._clock.wall_ms())
            for i in range(0, len(wanted), MAX_CHECKPOINTS_PER_PROPOSAL):
                await self._propose_checkpoints(wanted[i : i + MAX_CHECKPOINTS_PER_PROPOSAL])

    def checkpoints_due(self, now_mono: int, now_wall: int) -> list[tuple[LeaseCheckpoint, int]]:
        """(checkpoint, deadline it records) for every lease whose logged deadline is off:
        a lease not renewed for 1.5 heartbeat intervals gets its deadline written down (once,
        it does not move until renewed); a renewed lease with a checkpoint gets it cleared."""
        stale_after = self._timing.heartbeat_interval_ms * 3 // 2
        tolerance = self._timing.checkpoint_interval_ms
        out = []
        for token, d in self.deadlines.items():
            if token in self._expiring:
                continue
            if now_mono - d.renewed_mono < stale_after:
                if d.checkpoint_wall_ms:
                    out.append((LeaseCheckpoint(d.run_id, d.task_name, token, 0), 0))
                continue
            remaining = max(1, d.expires_mono - now_mono)
            deadline = now_wall + remaining
            if not d.checkpoint_wall_ms or abs(deadline - d.checkpoint_wall_ms) > tolerance:
                out.append((LeaseCheckpoint(d.run_id, d.task_name, token, remaining), deadline))
        return out

    async def _propose_checkpoints(self, wanted: list[tuple[LeaseCheckpoint, int]]) -> None:
        try:
            await self._proposer.propose(CheckpointLeases(tuple(cp for cp, _ in wanted)))
        except (NotCommitted, Overloaded) as exc:
            log.info("lease checkpoints not committed (%s); next round", exc)
            return
        for cp, deadline in wanted:
            d = self.deadlines.get(cp.fencing_token)
            if d is not None:
                d.checkpoint_wall_ms = deadline


def _checkpointed_deadline(inst: TaskInstance) -> int:
    """Wall ms at which a predecessor said the lease ends, 0 if none was checkpointed."""
    if not inst.lease_checkpoint_ms:
        return 0
    return inst.lease_checkpoint_ms + inst.lease_remaining_ms


def _decrement(counts: dict[str, int], key: str) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
