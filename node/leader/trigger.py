"""The trigger loop (leader only): due slots -> Fire commands, in bounded chunks.

A heap of (next_fire_ms, job_id) built from the replicated state when a leader session
starts, so slots that fell due during an election are caught up, not dropped. Entries are
lazy: one is acted on only if it still equals the job's replicated next_fire_ms. The Fire
command is a compare-and-set on that value, so a slot fires at most once whatever this loop
does twice.

A slot is due at slot + delay: the cluster's spread offset of the job (a hash of its id in
[0, `spread_window_ms`), at most half the schedule's shortest gap) plus the job's jitter,
a draw in [0, jitter_ms] made once per (job, slot) by this leader. The delay goes into the
Fire command and onto the run, so a replay needs no clock or draw; a new leader may draw
again for a slot not yet fired, which only moves that fire within its jitter. Misfire
lateness counts from the due time.

Catch-up of any size (an outage, a long GC pause, a lost quorum): due slots are proposed in
chunks of at most `max_fires_per_proposal` Fire commands (fixed-size commands, so the count
also bounds the bytes), at most `max_slots_per_job` chained slots of one job per chunk, at
most `max_proposals_inflight` chunks waiting for commit, oldest slots first (heap order). A
chunk only takes the room the proposer has left after a reserve for client traffic, and an
Overloaded or uncommitted chunk backs off (exponential, jittered) instead of retrying the
same proposal at once, so the API keeps answering while the backlog drains.

Admission (`max_ready_per_queue`): while a tenant has that many tasks waiting for a worker on
a queue (the dispatcher's count), its jobs whose first tasks go there are parked here instead
of fired (a slot the misfire policy skips makes no task and is recorded meanwhile); they go back into the heap once the backlog is below the bound again (looked at on
every tick). Past capacity fires are late, as they would be anyway, but the cluster no
longer replicates, applies and stores runs faster than workers take them, which is what made
throughput fall as offered load rose. Misfire policies count the lateness as for any late
fire. The bound is approximate by up to a chunk (fires in flight count, a fire with several
first tasks on one queue counts once).
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import logging
import random
from dataclasses import dataclass
from typing import Protocol

from gnomon.node.clock import SYSTEM_CLOCK, Clock
from gnomon.node.core.commands import Fire
from gnomon.node.core.model import JobSpec, Schedule, ScheduleKind
from gnomon.node.leader.ports import LockedState, LoopProposes
from gnomon.node.memo import ByIdentity
from gnomon.node.ops import metrics
from gnomon.node.raft.errors import NotCommitted, Overloaded
from gnomon.node.spec.schedules import (
    bounded_next,
    decide_fire,
    job_hash_id,
    shortest_gap_ms,
    spread_offset_ms,
    uses_hash,
)
from gnomon.node.tasks import Backoff, Supervisor

log = logging.getLogger(__name__)

# Jobs read under the replica lock at a time while building a chunk (bounds lock holds).
_PICK_BATCH = 256


@dataclass(frozen=True, slots=True)
class TriggerLimits:
    """How much the trigger proposes at once (node config)."""

    tick_ms: int = 50
    max_fires_per_proposal: int = 1_000
    max_proposals_inflight: int = 2
    max_slots_per_job: int = 100
    # The cluster's spread of fires over a window by a hash of the job id (0: none).
    spread_window_ms: int = 0
    # Tasks of one tenant waiting on one queue at which its fires there wait (0: no bound).
    max_ready_per_queue: int = 0

    @classmethod
    def from_config(cls, cfg) -> TriggerLimits:
        """The limits of a node `Config` (any object with its field names)."""
        return cls(tick_ms=cfg.trigger_tick_ms, max_fires_per_proposal=cfg.max_fires_per_proposal,
                   max_proposals_inflight=cfg.max_fire_proposals_inflight,
                   max_slots_per_job=cfg.max_catch_up_slots_per_job,
                   spread_window_ms=cfg.fire_spread_window_ms,
                   max_ready_per_queue=cfg.fire_admission_max_ready)


@functools.lru_cache(maxsize=4096)
def _gap_ms(schedule: Schedule, hash_id: str) -> int:
    return shortest_gap_ms(schedule, hash_id)


@dataclass(frozen=True, slots=True)
class _Due:
    job_id: str
    slot_ms: int
    spec: JobSpec


_AdmissionKey = tuple[str, str]  # (queue, tenant)
# A full key's count is made exact (stale entries dropped) at most this often.
_PRUNE_INTERVAL_MS = 1_000


class ReadyBacklog(Protocol):
    """What admission needs of the dispatcher."""

    def ready_in(self, queue: str, tenant: str) -> int:
        """Tasks waiting for a worker there (may count a few that left READY)."""

    def prune(self, queue: str, tenant: str) -> int:
        """The exact count, after dropping the entries of tasks that left READY."""


class _Parked:
    """The heap entries parked behind one full key: one per job, oldest due first."""

    __slots__ = ("_entries", "_heap")

    def __init__(self) -> None:
        self._entries: dict[str, tuple[int, int, str]] = {}
        self._heap: list[tuple[int, int, str]] = []

    def add(self, entry: tuple[int, int, str]) -> None:
        if self._entries.get(entry[2]) != entry:
            self._entries[entry[2]] = entry
            heapq.heappush(self._heap, entry)

    def take(self, n: int) -> list[tuple[int, int, str]]:
        """Up to `n` entries, oldest first, removed (entries a later add replaced are
        dropped as they surface)."""
        out: list[tuple[int, int, str]] = []
        while self._heap and len(out) < n:
            entry = heapq.heappop(self._heap)
            if self._entries.get(entry[2]) == entry:
                del self._entries[entry[2]]
                out.append(entry)
        return out

    def __len__(self) -> int:
        return len(self._entries)


def _root_keys(spec: JobSpec) -> tuple[_AdmissionKey, ...]:
    return tuple(sorted({(t.queue or "default", spec.tenant) for t in spec.tasks if not t.depends_on}))


# The (queue, tenant) of the tasks a fire makes ready at once (those without deps), per spec.
_first_queues = ByIdentity(_root_keys)


class TriggerLoop:
    def __init__(self, replica: LockedState, proposer: LoopProposes, limits: TriggerLimits, *,
                 supervisor: Supervisor, rng: random.Random, backlog: ReadyBacklog,
                 clock: Clock = SYSTEM_CLOCK):
        self._replica = replica
        self._clock = clock
        self._proposer = proposer
        self._limits = limits
        self._supervisor = supervisor
        # (due_ms, slot_ms, job_id): due = slot + the job's delay for that slot.
        self._heap: list[tuple[int, int, str]] = []
        # (job_id, slot_ms) -> this leader's jitter draw for a slot not fired yet.
        self._draws: dict[tuple[str, int], int] = {}
        self._rng = rng
        # Jobs with a chunk waiting for commit: none of their slots is proposed meanwhile.
        self._inflight_jobs: set[str] = set()
        self._proposals: set[asyncio.Task] = set()
        self._backoff = Backoff(50, 2_000, rng)
        self._resume_at = 0.0  # loop time before which nothing is proposed (backing off)
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        # Admission: the dispatcher's ready count per (queue, tenant), fires proposed and not
        # answered yet per key, and the heap entries parked behind a full key.
        self._backlog = backlog
        self._pruned_ms: dict[_AdmissionKey, int] = {}
        self._inflight_fires: dict[_AdmissionKey, int] = {}
        # key -> the entries parked behind it (one per job: a job changed while parked is
        # not doubled).
        self._parked: dict[_AdmissionKey, _Parked] = {}

    def start(self) -> None:
        self._draws.clear()
        self._parked.clear()
        self._pruned_ms.clear()
        self._inflight_fires.clear()
        self._rebuild_heap()
        self._inflight_jobs.clear()
        self._resume_at = 0.0
        self._task = self._supervisor.spawn(self._run(), name="trigger", critical=True)

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._proposals) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        self._proposals.clear()

    def jobs_changed(self, job_ids: list[str]) -> None:
        """Effects hook (loop thread): re-read the changed jobs' next_fire_ms."""
        if self._task is None:
            return
        with self._replica.lock:
            jobs = self._replica.state.jobs
            if len(self._heap) > 2 * len(jobs) + 1024:
                self._rebuild_heap()  # lazy entries piled up: start from the state again
            else:
                for job_id in job_ids:
                    job = jobs.get(job_id)
                    if job and job.next_fire_ms and not job.paused:
                        heapq.heappush(self._heap, self._entry(job_id, job.next_fire_ms,
                                                               job.spec))
        self._wake.set()

    def _rebuild_heap(self) -> None:
        self._parked.clear()  # every job is in the new heap; a full queue parks it again
        with self._replica.lock:
            self._heap = [self._entry(j.job_id, j.next_fire_ms, j.spec)
                          for j in self._replica.state.jobs.values()
                          if j.next_fire_ms and not j.paused]
        heapq.heapify(self._heap)
        if len(self._draws) > 2 * len(self._heap) + 1024:  # draws of slots long gone
            pending = {(job_id, slot) for _, slot, job_id in self._heap}
            self._draws = {k: v for k, v in self._draws.items() if k in pending}

    def _entry(self, job_id: str, slot: int, spec: JobSpec) -> tuple[int, int, str]:
        # Without a delay the due time is the slot's own int object: `slot + 0` would be a
        # second 32-byte int per job in a heap of every job.
        delay = self.delay_ms(job_id, slot, spec)
        return (slot + delay if delay else slot), slot, job_id

    def delay_ms(self, job_id: str, slot: int, spec: JobSpec) -> int:
        """How long after `slot` the job's fire is due: spread offset plus jitter draw."""
        window = self._limits.spread_window_ms
        delay = 0
        if window > 0 and spec.schedule.kind != ScheduleKind.ONCE:
            # Keyed by the hash id only where H makes it matter: 100,000 jobs with one
            # expression cost one probe of 64 cron evaluations, not 100,000 (the herd bench
            # with a spread window stalled the leader's loop for minutes on this).
            hash_id = job_hash_id(spec.tenant, spec.name) if uses_hash(spec.schedule) else ""
            gap = _gap_ms(spec.schedule, hash_id)
            delay = spread_offset_ms(job_id, min(window, gap // 2) if gap else window)
        if spec.jitter_ms > 0:
            draw = self._draws.get((job_id, slot))
            if draw is None:
                draw = self._draws[(job_id, slot)] = self._rng.randint(0, spec.jitter_ms)
            delay += draw
        return delay

    # -- the loop --------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            delay = self._limits.tick_ms / 1000
            if self._heap:
                delay = min(delay, max(0.0, (self._heap[0][0] - self._clock.wall_ms()) / 1000))
            delay = max(delay, self._resume_at - loop.time())
            try:
                # Not wait_for: on Python 3.11 it swallows a cancel that races the event,
                # and stop() then waits forever (found by the jepsen harness).
                async with asyncio.timeout(delay):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            self._unpark()
            await self._propose_due(loop)

    async def _propose_due(self, loop: asyncio.AbstractEventLoop) -> None:
        """Propose chunks while slots are due, room is left and we are not backing off."""
        while loop.time() >= self._resume_at:
            if len(self._proposals) >= self._limits.max_proposals_inflight:
                await asyncio.wait(self._proposals, return_when=asyncio.FIRST_COMPLETED)
                continue
            budget = min(self._limits.max_fires_per_proposal, self._proposer.room_for_loops())
            if budget <= 0:
                self._back_off(loop, "the proposer has no room beyond its client reserve")
                return
            fires, charged = self._next_chunk(self._clock.wall_ms(), budget)
            if not fires:
                return
            task = self._supervisor.spawn(self._propose(fires, charged), name="trigger-propose")
            self._proposals.add(task)
            task.add_done_callback(self._proposals.discard)
            await asyncio.sleep(0)  # let requests that are waiting for the loop in

    def _back_off(self, loop: asyncio.AbstractEventLoop, why: str) -> None:
        delay = self._backoff.failed()
        self._resume_at = loop.time() + delay
        log.info("trigger backs off %.2fs: %s", delay, why)

    # -- building a chunk ------------------------------------------------------------------

    def _next_chunk(self, now_ms: int, budget: int) -> tuple[list[Fire], dict]:
        """Due fires up to `budget`, and the count charged to each admission key."""
        fires: list[Fire] = []
        charged: dict[_AdmissionKey, int] = {}
        while len(fires) < budget:
            picked = self._pick_due(now_ms, min(_PICK_BATCH, budget - len(fires)))
            if not picked:
                break
            for due in picked:
                room = min(budget - len(fires), self._limits.max_slots_per_job)
                if room <= 0:  # an earlier job of this pick took the rest: next chunk
                    self._inflight_jobs.discard(due.job_id)
                    heapq.heappush(self._heap, self._entry(due.job_id, due.slot_ms, due.spec))
                    continue
                mine = self._fires_for(due, now_ms, room, self._room(due.spec))
                if not mine:  # its next fire would run, and its queue's backlog is full
                    self._inflight_jobs.discard(due.job_id)
                    self._park(due)
                    continue
                fires.extend(mine)
                runs = sum(1 for f in mine if not f.skip)
                for key in _first_queues(due.spec):
                    charged[key] = charged.get(key, 0) + runs
                    self._inflight_fires[key] = self._inflight_fires.get(key, 0) + runs
        return fires, charged

    # -- admission -------------------------------------------------------------------------

    def _room(self, spec: JobSpec) -> int:
        """Runs of `spec` its first queues take before the bound (max_slots_per_job if
        there is no bound)."""
        if self._limits.max_ready_per_queue <= 0:
            return self._limits.max_slots_per_job
        return min((self._key_room(key) for key in _first_queues(spec)),
                   default=self._limits.max_slots_per_job)

    def _key_room(self, key: _AdmissionKey, ready: int | None = None) -> int:
        """Runs the key takes before the bound: the dispatcher's count (or `ready`) and the
        fires in flight count against it."""
        if ready is None:
            ready = self._backlog.ready_in(*key)
        return self._limits.max_ready_per_queue - ready - self._inflight_fires.get(key, 0)

    def _park(self, due: _Due) -> None:
        """Hold the job's entry behind the first of its queues that is full."""
        keys = _first_queues(due.spec)
        full = next((k for k in keys if self._key_room(k) <= 0), keys[0])
        self._parked.setdefault(full, _Parked()).add(self._entry(due.job_id, due.slot_ms,
                                                                 due.spec))

    def _unpark(self) -> None:
        """As many parked entries of a key as it has room for go back into the heap, oldest
        first (all of them at once made every parked job be picked and parked again on
        every tick: measurable work on a saturated leader). A key that still looks full has
        its count made exact now and then: entries of cancelled tasks stay in the
        dispatcher's heaps until popped, and nothing pops a queue no worker serves."""
        if not self._parked:
            return
        bound, now = self._limits.max_ready_per_queue, self._clock.wall_ms()
        for key in sorted(self._parked):
            room = self._key_room(key)
            if bound > 0 and room <= 0 and now - self._pruned_ms.get(key, 0) >= _PRUNE_INTERVAL_MS:
                self._pruned_ms[key] = now
                room = self._key_room(key, self._backlog.prune(*key))
            parked = self._parked[key]
            if bound <= 0 or room > 0:
                for entry in parked.take(len(parked) if bound <= 0 else room):
                    heapq.heappush(self._heap, entry)
            if not parked:
                del self._parked[key]

    def parked(self) -> int:
        """Jobs whose due fire waits for its queue's backlog to fall (metrics)."""
        return sum(len(v) for v in self._parked.values())

    def _pick_due(self, now_ms: int, limit: int) -> list[_Due]:
        """Up to `limit` jobs whose replicated next slot is due, oldest slot first."""
        picked: list[_Due] = []
        with self._replica.lock:
            jobs = self._replica.state.jobs
            while self._heap and self._heap[0][0] <= now_ms and len(picked) < limit:
                _due_ms, slot, job_id = heapq.heappop(self._heap)
                job = jobs.get(job_id)
                if (job is None or job.paused or job.next_fire_ms != slot
                        or job_id in self._inflight_jobs):
                    continue
                picked.append(_Due(job_id, slot, job.spec))
                self._inflight_jobs.add(job_id)
        return picked

    def _fires_for(self, due: _Due, now_ms: int, limit: int, admit: int) -> list[Fire]:
        """The job's due slots from `due.slot_ms`, chained (each Fire's next is the next
        one's slot), at most `limit`, of which at most `admit` make a run (a slot its
        misfire policy skips makes no task and is always taken). Croniter runs here,
        outside the lock."""
        spec, slot = due.spec, due.slot_ms
        fires: list[Fire] = []
        hash_id = job_hash_id(spec.tenant, spec.name)
        delay = self.delay_ms(due.job_id, slot, spec)
        while slot and slot + delay <= now_ms and len(fires) < limit:
            nxt = bounded_next(spec, slot, hash_id=hash_id)
            # Lateness counts from the due time: a jittered or spread fire is not late.
            skip = decide_fire(spec, slot, now_ms - delay, nxt)
            if not skip:
                if admit <= 0:
                    break
                admit -= 1
            fires.append(Fire(due.job_id, slot, nxt, skip, delay))
            slot = nxt
            delay = self.delay_ms(due.job_id, slot, spec) if slot else 0
        return fires

    # -- proposing -------------------------------------------------------------------------

    async def _propose(self, fires: list[Fire], charged: dict[_AdmissionKey, int]) -> None:
        job_ids = sorted({f.job_id for f in fires})
        loop = asyncio.get_running_loop()
        try:
            replies = await self._proposer.propose_many(fires)
        except (NotCommitted, Overloaded) as exc:
            self._back_off(loop, f"{len(fires)} fires not committed ({exc})")
        else:
            self._backoff.succeeded()
            now, made = self._clock.wall_ms(), {"run": 0, "skipped": 0}
            for fire, reply in zip(fires, replies, strict=True):
                self._draws.pop((fire.job_id, fire.scheduled_for_ms), None)
                if getattr(reply, "run_id", ""):
                    made["skipped" if fire.skip else "run"] += 1
                    metrics.FIRE_LATENESS.observe(max(0, now - fire.scheduled_for_ms) / 1000)
            for outcome, count in made.items():
                if count:
                    metrics.FIRES.labels(outcome).inc(count)
        finally:
            for job_id in job_ids:
                self._inflight_jobs.discard(job_id)
            for key, count in charged.items():  # committed: in the dispatcher's count now
                left = self._inflight_fires.get(key, 0) - count
                if left > 0:
                    self._inflight_fires[key] = left
                else:
                    self._inflight_fires.pop(key, None)
            # Whatever happened, re-read the jobs: committed fires advanced next_fire_ms,
            # failed ones left it where it was and must be proposed again.
            self.jobs_changed(job_ids)
