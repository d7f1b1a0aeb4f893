"""What the fire and lease workloads share: jobs on a schedule, executed by workers.

Setup creates the jobs (before any fault). During the run one client thread reads their runs
(linearizable) and now and then triggers a manual run. The final phase, after the heal, waits
until every job's next slot is past the heal time (catch-up done: `caught-up`, at most
`heal_bound_s` after the heal) and pauses every job (the pause answer names the next slot:
every slot before it must have fired); the runner waits until no run is active (same bound)
and stops the workers; then every run is read once.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from gnomon.client import GnomonError, Job, JobSpec
from gnomon.jepsen.checkers import schedule
from gnomon.jepsen.client import run_summary
from gnomon.jepsen.context import Context
from gnomon.jepsen.history import FAIL, FINAL, INFO, INVOKE, OK
from gnomon.node.core.model import Schedule as CoreSchedule

# Admin calls in flight at once in setup and the final phase (hundreds of jobs).
PARALLEL = 8
T = TypeVar("T")


async def bounded(items: Iterable[T], call: Callable[[T], Awaitable[Any]],
                  limit: int = PARALLEL) -> list[Any]:
    """`call(item)` for every item, at most `limit` at a time, results in order."""
    sem = asyncio.Semaphore(limit)

    async def one(item: T) -> Any:
        async with sem:
            return await call(item)

    return await asyncio.gather(*(one(i) for i in items))


def core_schedule(spec: JobSpec) -> CoreSchedule:
    s = spec.schedule
    kind = type(s).__name__
    if kind == "CronSchedule":
        return CoreSchedule("cron", expression=s.expression, timezone=s.timezone)
    if kind == "IntervalSchedule":
        return CoreSchedule("interval", interval_ms=s.interval_ms, anchor_ms=s.anchor_ms)
    return CoreSchedule("once", at_ms=s.at_ms)


async def retry_admin(ctx: Context, f: str, value: Any, call, *, deadline_s: float,
                      workload: str, describe=lambda result: None) -> Any:
    """Run an admin call until it succeeds (or the deadline), recording each attempt as a
    `final` operation (the harness's own process)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while True:
        ctx.history.append(FINAL, INVOKE, f, value, workload=workload)
        try:
            result = await call()
        except GnomonError as exc:
            ctx.history.append(FINAL, INFO if f in ("create-job", "pause") else FAIL, f, value,
                               error=f"{type(exc).__name__}: {str(exc)[:200]}",
                               workload=workload)
            if loop.time() > end:
                raise
            await asyncio.sleep(0.3)
            continue
        ctx.history.append(FINAL, OK, f, describe(result), workload=workload)
        return result


class ScheduledWorkload:
    name = "scheduled"
    tenant = "default"
    threads = 1
    stagger_s = 0.4
    trigger_p = 0.15

    def __init__(self) -> None:
        self.specs: list[JobSpec] = []
        self.jobs: dict[str, Job] = {}
        self.triggered: dict[str, str] = {}
        self._paused: dict[str, Job] = {}

    def make_specs(self, rng: random.Random) -> list[JobSpec]:
        raise NotImplementedError

    def configure(self, ctx: Context) -> None:
        """Settings that depend on the run (the fire workload's job count)."""

    async def setup(self, ctx: Context) -> None:
        self.configure(ctx)
        self.specs = self.make_specs(ctx.child_rng(self.name))

        async def create(spec: JobSpec) -> Job:
            rid = uuid.uuid4().hex
            return await retry_admin(
                ctx, "create-job", {"name": spec.name, "request_id": rid},
                lambda: ctx.admin.create_job(spec, request_id=rid),
                deadline_s=60, workload=self.name,
                describe=lambda j: {"job_id": j.job_id, "name": j.spec.name,
                                    "next_fire_ms": j.next_fire_ms})

        for job in await bounded(self.specs, create):
            self.jobs[job.job_id] = job

    def next_op(self, rng: random.Random, thread: int) -> dict[str, Any] | None:
        job_id = rng.choice(sorted(self.jobs))
        if rng.random() < self.trigger_p:
            return {"f": "trigger", "job_id": job_id}
        return {"f": "read-runs", "job_id": job_id, "limit": 10}

    def completed(self, thread: int, op: dict[str, Any], result: dict[str, Any]) -> None:
        if op["f"] == "trigger" and result["type"] == OK:
            self.triggered[result["value"]["run_id"]] = op["job_id"]

    async def final(self, ctx: Context) -> None:
        """Wait for catch-up, then pause every job (the runner then waits for the runs to
        settle, stops the workers and calls `final_read`)."""
        deadline = ctx.heal_wall_ms / 1000 + ctx.opts.heal_bound_s
        await self._wait_caught_up(ctx, deadline)

        async def pause(job_id: str) -> Job:
            rid = uuid.uuid4().hex
            return await retry_admin(
                ctx, "pause", {"job_id": job_id, "request_id": rid},
                lambda: ctx.admin.pause_job(job_id, request_id=rid),
                deadline_s=60, workload=self.name,
                describe=lambda j: {"job_id": j.job_id, "next_fire_ms": j.next_fire_ms,
                                    "paused": j.paused})

        ids = sorted(self.jobs)
        self._paused = dict(zip(ids, await bounded(ids, pause), strict=True))

    async def final_read(self, ctx: Context) -> None:
        """Every run of every job, read once after the workers stopped (so the read comes
        after every completion a worker was told about)."""
        runs = await self._read_runs(ctx)
        ctx.finals[self.name] = {"paused": self._paused, "runs": runs}

    async def _wait_caught_up(self, ctx: Context, deadline: float) -> None:
        """Until every job's next slot is at or after the heal (node-clock time): every slot
        due before the heal has fired. `fail` with the laggards when the bound runs out."""
        heal_ms = ctx.heal_wall_ms + int(ctx.db.clock_base_s * 1000)
        started = time.time()
        ctx.history.append(FINAL, INVOKE, "caught-up", {"heal_ms": heal_ms}, workload=self.name)
        behind: dict[str, int] = {}
        while True:
            try:
                behind = {j.job_id: j.next_fire_ms async for j in
                          ctx.admin.iter_jobs(tenant=self.tenant, page_size=500)
                          if j.job_id in self.jobs and j.next_fire_ms
                          and j.next_fire_ms < heal_ms}
            except GnomonError:
                behind = behind or {"?": 0}
            if not behind or time.time() > deadline:
                break
            await asyncio.sleep(0.5)
        value = {"heal_ms": heal_ms, "waited_s": round(time.time() - started, 2),
                 "behind": len(behind)}
        if behind:
            oldest = sorted(behind.items(), key=lambda kv: kv[1])[:20]
            value.update(oldest_next_fire_ms=dict(oldest),
                         max_behind_ms=heal_ms - oldest[0][1])
        ctx.history.append(FINAL, FAIL if behind else OK, "caught-up", value,
                           workload=self.name)

    async def _read_all(self, ctx: Context, job_id: str) -> list[list]:
        out: list[list] = []
        before = 0
        while True:
            page = await ctx.admin.list_runs(job_id, limit=1000, before_ms=before)
            out += [run_summary(r) for r in page]
            if len(page) < 1000:
                return out
            before = min(r.scheduled_for_ms for r in page)

    async def _read_runs(self, ctx: Context) -> dict[str, list[list]]:
        ids = sorted(self.jobs)
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        while True:
            try:
                got = await bounded(ids, lambda j: self._read_all(ctx, j))
                break
            except GnomonError:
                if loop.time() > end:
                    raise
                await asyncio.sleep(0.5)
        runs: dict[str, list[list]] = dict(zip(ids, got, strict=True))
        for job_id, rs in runs.items():
            ctx.history.append(FINAL, INVOKE, "final-runs", {"job_id": job_id},
                               workload=self.name)
            ctx.history.append(FINAL, OK, "final-runs", {"job_id": job_id, "runs": rs},
                               workload=self.name)
        return runs

    def check_schedule(self, ctx: Context) -> dict[str, Any]:
        """The schedule checker on this workload's jobs and runs."""
        jobs, runs = self.schedule_inputs(ctx)
        return schedule.check(jobs, runs, ctx.history.snapshot(),
                              heal_wall_ms=ctx.heal_wall_ms, bound_s=ctx.opts.heal_bound_s,
                              triggered=dict(self.triggered), nodes=len(ctx.node_ids),
                              workload=self.name)

    def schedule_inputs(self, ctx: Context) -> tuple[dict, dict]:
        final = ctx.finals.get(self.name, {})
        jobs = {}
        for job_id, job in self.jobs.items():
            paused = final.get("paused", {}).get(job_id)
            jobs[job_id] = {
                "name": job.spec.name, "tenant": job.spec.tenant,
                "schedule": core_schedule(job.spec), "policy": str(job.spec.misfire_policy),
                "grace_ms": job.spec.misfire_grace_ms, "first_ms": job.next_fire_ms,
                "boundary_ms": paused.next_fire_ms if paused else job.next_fire_ms,
            }
        return jobs, final.get("runs", {})
