"""The trigger loop (leader only): due slots -> Fire commands.

A heap of (next_fire_ms, job_id) built from the replicated state when a leader session
starts, so slots that fell due during an election are caught up, not dropped. Entries are
lazy: one is acted on only if it still equals the job's replicated next_fire_ms. The Fire
command is a compare-and-set on that value, so a slot fires at most once whatever this loop
does twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import logging

from gnomon.node import metrics
from gnomon.node.clock import wall_ms
from gnomon.node.core.commands import Fire
from gnomon.node.core.model import Job
from gnomon.node.raft import NotCommitted, Overloaded, Proposer
from gnomon.node.replica import Replica
from gnomon.node.schedules import decide_fire, next_fire_after

log = logging.getLogger(__name__)

# Slots of one job fired in one batch while catching up (bounds one entry's size).
MAX_CATCH_UP_PER_JOB = 500
MAX_FIRES_PER_BATCH = 5_000


def hash_id(job: Job) -> str:
    return f"{job.spec.tenant}/{job.spec.name}"


class TriggerLoop:
    def __init__(self, replica: Replica, proposer: Proposer, *, tick_ms: int):
        self._replica = replica
        self._proposer = proposer
        self._tick_s = tick_ms / 1000
        self._heap: list[tuple[int, str]] = []
        self._inflight: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        with self._replica.lock:
            self._heap = [
                (j.next_fire_ms, j.job_id)
                for j in self._replica.state.jobs.values()
                if j.next_fire_ms and not j.paused
            ]
        heapq.heapify(self._heap)
        self._inflight.clear()
        self._task = asyncio.create_task(self._run(), name="trigger")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def jobs_changed(self, job_ids: list[str]) -> None:
        """Effects hook (loop thread): re-read the changed jobs' next_fire_ms."""
        if self._task is None:
            return
        with self._replica.lock:
            jobs = self._replica.state.jobs
            for job_id in job_ids:
                job = jobs.get(job_id)
                if job and job.next_fire_ms and not job.paused:
                    heapq.heappush(self._heap, (job.next_fire_ms, job_id))
        self._wake.set()

    async def _run(self) -> None:
        while True:
            delay = self._tick_s
            if self._heap:
                delay = min(delay, max(0.0, (self._heap[0][0] - wall_ms()) / 1000))
            try:
                # Not wait_for: on Python 3.11 it swallows a cancel that races the event,
                # and stop() then waits forever (found by the jepsen harness).
                async with asyncio.timeout(delay):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            fires = self._due_fires(wall_ms())
            if fires:
                asyncio.create_task(self._propose(fires))

    def _due_fires(self, now_ms: int) -> list[Fire]:
        due: list[Job] = []
        with self._replica.lock:
            jobs = self._replica.state.jobs
            while self._heap and self._heap[0][0] <= now_ms and len(due) < MAX_FIRES_PER_BATCH:
                slot, job_id = heapq.heappop(self._heap)
                job = jobs.get(job_id)
                if job is None or job.paused or job.next_fire_ms != slot or job_id in self._inflight:
                    continue
                # A copy: croniter runs outside the lock (the tick thread applies meanwhile).
                due.append(dataclasses.replace(job))
                self._inflight.add(job_id)
        return [fire for job in due for fire in self._fires_for(job, now_ms)]

    @staticmethod
    def _fires_for(job: Job, now_ms: int) -> list[Fire]:
        """The job's due slots, chained (each Fire's next is the following one's slot)."""
        fires = []
        slot = job.next_fire_ms
        while slot and slot <= now_ms and len(fires) < MAX_CATCH_UP_PER_JOB:
            nxt = next_fire_after(job.spec.schedule, slot, hash_id=hash_id(job))
            skip = decide_fire(job.spec, slot, now_ms, nxt)
            fires.append(Fire(job.job_id, slot, nxt, skip))
            slot = nxt
        return fires

    async def _propose(self, fires: list[Fire]) -> None:
        job_ids = sorted({f.job_id for f in fires})
        try:
            replies = await self._proposer.propose_many(fires)
            now = wall_ms()
            for fire, reply in zip(fires, replies, strict=True):
                if getattr(reply, "run_id", ""):
                    metrics.FIRES.labels("skipped" if fire.skip else "run").inc()
                    metrics.FIRE_LATENESS.observe(max(0, now - fire.scheduled_for_ms) / 1000)
        except (NotCommitted, Overloaded) as exc:
            log.warning("fires not committed (%s); will retry", exc)
        finally:
            for job_id in job_ids:
                self._inflight.discard(job_id)
            # Whatever happened, re-read the jobs: committed fires advanced next_fire_ms,
            # failed ones left it where it was and must be proposed again.
            self.jobs_changed(job_ids)
