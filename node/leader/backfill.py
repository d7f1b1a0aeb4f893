"""Leader loop: job backfills (BackfillJob) -> paced BackfillStep commands.

Not node/storage/history_copy.py (that one copies the run history from a peer to a wiped follower).

A backfill is replicated intent (`Job.backfill`: range, cursor, counts). The leader
evaluates the schedule (croniter is never run in the core) from the replicated cursor and
proposes the next slots, at most `slots_per_step` per step and only while the backfill has
fewer than `max_active_runs` runs running or queued, one step per job per
`step_interval_ms`: a backfill of thousands of slots trickles in behind the work it makes
and never stampedes admission. A new leader resumes from the cursor; a step proposed twice
(a retry, a deposed leader) is a compare-and-set on the cursor and applies once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from gnomon.node.core import spans
from gnomon.node.core.commands import BackfillStep
from gnomon.node.core.model import (
    BackfillStatus,
    OverlapPolicy,
    RunTrigger,
    Schedule,
    State,
)
from gnomon.node.core.validate import effective_max_active_runs
from gnomon.node.leader.ports import LockedState, LoopProposes
from gnomon.node.raft.errors import NotCommitted, Overloaded
from gnomon.node.spec.schedules import job_hash_id, next_fire_after
from gnomon.node.tasks import Supervisor

log = logging.getLogger(__name__)

# Slots one step looks at at most (those that ran already take no room but cost croniter).
SCAN_PER_STEP = 1_000


@dataclass(frozen=True)
class BackfillLimits:
    slots_per_step: int = 20
    step_interval_ms: int = 500
    max_active_runs: int = 10


def slots_in(schedule: Schedule, hash_id: str, cursor_ms: int, to_ms: int, count: int,
             *, free: Callable[[int], bool] | None = None,
             scan: int = 0) -> tuple[list[int], int, bool]:
    """The schedule's next slots at or after `cursor_ms` and before `to_ms` until `count` of
    them are `free` (default: all are; at most `scan` slots in all, 0: no more than count),
    the cursor after them, and whether the range is exhausted."""
    slots: list[int] = []
    after, taken = cursor_ms - 1, 0
    while taken < count and len(slots) < max(scan, count):
        slot = next_fire_after(schedule, after, hash_id=hash_id)
        if slot == 0 or slot >= to_ms or slot <= after:
            return slots, to_ms, True
        slots.append(slot)
        taken += free is None or free(slot)
        after = slot
    return slots, slots[-1] + 1 if slots else cursor_ms, False


def count_slots(schedule: Schedule, hash_id: str, from_ms: int, to_ms: int,
                limit: int) -> int:
    """Slots of the schedule in [from_ms, to_ms), counted up to limit + 1."""
    slots, _, _ = slots_in(schedule, hash_id, from_ms, to_ms, limit + 1)
    return len(slots)


@dataclass(frozen=True)
class _Plan:
    job_id: str
    schedule: Schedule
    hash_id: str
    cursor_ms: int
    to_ms: int
    room: int
    # The job's ran spans and next fire: slots that will not get a run (they ran, or are
    # the schedule's own) take no room, so a backfill over a range that mostly ran moves on.
    ran_spans: tuple[tuple[int, int], ...]
    next_fire_ms: int

    def free(self, slot_ms: int) -> bool:
        return not spans.covers(self.ran_spans, slot_ms) and not (
            self.next_fire_ms and slot_ms >= self.next_fire_ms)


class JobBackfillLoop:
    def __init__(self, replica: LockedState, proposer: LoopProposes, limits: BackfillLimits, *,
                 supervisor: Supervisor, queued_tasks: Callable[[str], int] | None = None):
        self._replica = replica
        self._proposer = proposer
        self._limits = limits
        self._supervisor = supervisor
        # Tasks of a tenant waiting for a worker (the dispatcher's view): a tenant at its
        # max_queued_tasks gets no further backfill runs until it drains.
        self._queued_tasks = queued_tasks or (lambda tenant: 0)
        self._jobs: dict[str, None] = {}  # jobs with a running backfill (leader view)
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        with self._replica.lock:
            self._jobs = {job_id: None for job_id, job in self._replica.state.jobs.items()
                          if job.backfill is not None
                          and job.backfill.status == BackfillStatus.RUNNING}
        self._task = self._supervisor.spawn(self._run(), name="job-backfill", critical=True)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def changed(self, job_ids: list[str]) -> None:
        """Effects hook (loop thread): these jobs' backfills started, stepped or ended."""
        if self._task is None:
            return
        for job_id in job_ids:
            self._jobs[job_id] = None
        self._wake.set()

    @property
    def running(self) -> int:
        """Backfills this leader is working on."""
        return len(self._jobs)

    async def _run(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self._limits.step_interval_ms / 1000):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            await self.step_all()
            # Pacing: one step per job per interval, even when woken by the step's effects.
            await asyncio.sleep(self._limits.step_interval_ms / 1000)

    async def step_all(self) -> int:
        """One step for each running backfill that has room; the steps committed."""
        plans = self._plans()
        if not plans:
            return 0
        steps = [self._step(plan) for plan in plans]
        results = await asyncio.gather(*(self._propose(s) for s in steps if s is not None))
        return sum(results)

    def _plans(self) -> list[_Plan]:
        plans = []
        with self._replica.lock:
            st = self._replica.state
            for job_id in list(self._jobs):
                plan = self._plan(st, job_id)
                if plan is not None:
                    plans.append(plan)
        return plans

    def _plan(self, st: State, job_id: str) -> _Plan | None:
        job = st.jobs.get(job_id)
        bf = job.backfill if job is not None else None
        if job is None or bf is None or bf.status != BackfillStatus.RUNNING:
            self._jobs.pop(job_id, None)
            return None
        tenant = st.access.tenants.get(job.spec.tenant)
        if tenant is not None and tenant.max_queued_tasks and \
                self._queued_tasks(job.spec.tenant) >= tenant.max_queued_tasks:
            return None
        open_ids = [*st.running_by_job.get(job_id, ()), *st.queued_by_job.get(job_id, ())]
        mine = sum(1 for run_id in open_ids if st.runs[run_id].trigger == RunTrigger.BACKFILL)
        room = min(self._limits.slots_per_step, self._limits.max_active_runs - mine)
        policy = bf.overlap_policy or job.spec.overlap_policy
        if policy == OverlapPolicy.SKIP:  # wait for room instead of skipping the slots
            room = min(room, effective_max_active_runs(job.spec, policy) - len(open_ids))
        if room <= 0:
            return None
        return _Plan(job_id, job.spec.schedule, job_hash_id(job.spec.tenant, job.spec.name),
                     bf.next_slot_ms, bf.to_ms, room, job.ran_spans, job.next_fire_ms)

    def _step(self, plan: _Plan) -> BackfillStep | None:
        try:
            slots, cursor, done = slots_in(plan.schedule, plan.hash_id, plan.cursor_ms,
                                           plan.to_ms, plan.room, free=plan.free,
                                           scan=SCAN_PER_STEP)
        except ValueError as exc:  # croniter far in the past/future: end the backfill
            log.warning("backfill of %s: slots after %d not computable (%s); it ends",
                        plan.job_id, plan.cursor_ms, exc)
            slots, cursor, done = [], plan.to_ms, True
        return BackfillStep(plan.job_id, plan.cursor_ms, tuple(slots), cursor, done)

    async def _propose(self, step: BackfillStep) -> int:
        if self._proposer.room_for_loops() <= 0:
            return 0
        try:
            await self._proposer.propose(step)
        except (NotCommitted, Overloaded) as exc:
            log.info("backfill step of %s not committed (%s); retried", step.job_id, exc)
            return 0
        return 1
