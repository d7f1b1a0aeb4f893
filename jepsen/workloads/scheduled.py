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
# How long the final phase retries its pauses (all jobs together) and its reads.
FINAL_WRITES_S = 60.0
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

        pause_end = time.time() + FINAL_WRITES_S

        async def pause(job_id: str) -> Job | None:
            rid = uuid.uuid4().hex
            left = pause_end - time.time()
            if left <= 0:
                return None  # the phase's time is up: no attempt (final-pause-failed)
            try:
                return await retry_admin(
                    ctx, "pause", {"job_id": job_id, "request_id": rid},
                    lambda: ctx.admin.pause_job(job_id, request_id=rid),
                    deadline_s=left, workload=self.name,
                    describe=lambda j: {"job_id": j.job_id, "next_fire_ms": j.next_fire_ms,
                                        "paused": j.paused})
            except GnomonError:
                return None  # recorded; the checker reports it (final-pause-failed)

        ids = sorted(self.jobs)
        self._paused = dict(zip(ids, await bounded(ids, pause), strict=True))

    async def final_read(self, ctx: Context) -> None:
        """Every run of every job, read once after the workers stopped (so the read comes
        after every completion a worker was told about)."""
        try:
            runs = await self._read_runs(ctx)
            failed = False
        except GnomonError:
            runs, failed = {}, True
        ctx.finals[self.name] = {"paused": self._paused, "runs": runs, "read_failed": failed}

    async def _wait_caught_up(self, ctx: Context, deadline: float) -> None:
        """Until every job's next slot is at or after the heal (node-clock time): every slot
        due before the heal has fired. `fail` with the laggards when the bound runs out."""
        heal_ms = ctx.heal_wall_ms + int(ctx.db.clock_base_s * 1000)
        started = time.time()
        ctx.history.append(FINAL, INVOKE, "caught-up", {"heal_ms": heal_ms}, workload=self.name)
        behind: dict[str, int] | None = None
        error = None
        while True:
            try:
                behind = {j.job_id: j.next_fire_ms async for j in
                          ctx.admin.iter_jobs(tenant=self.tenant, page_size=500)
                          if j.job_id in self.jobs and j.next_fire_ms
                          and j.next_fire_ms < heal_ms}
            except GnomonError as exc:
                error = f"{type(exc).__name__}: {str(exc)[:200]}"
            if behind == {} or time.time() > deadline:
                break
            await asyncio.sleep(0.5)
        value: dict[str, Any] = {"heal_ms": heal_ms, "waited_s": round(time.time() - started, 2),
                                 "behind": None if behind is None else len(behind)}
        if behind:
            oldest = sorted(behind.items(), key=lambda kv: kv[1])[:20]
            value.update(oldest_next_fire_ms=dict(oldest),
                         max_behind_ms=heal_ms - oldest[0][1])
        if behind is None:
            value["error"] = f"the jobs could not be listed: {error}"
        ctx.history.append(FINAL, OK if behind == {} else FAIL, "caught-up", value,
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
        end = loop.time() + FINAL_WRITES_S
        while True:
            try:
                async with asyncio.timeout(max(1.0, end - loop.time())):
                    got = await bounded(ids, lambda j: self._read_all(ctx, j))
                break
            except (GnomonError, TimeoutError):
                if loop.time() > end:
                    raise GnomonError("final reads: out of time") from None
                await asyncio.sleep(0.5)
        runs: dict[str, list[list]] = dict(zip(ids, got, strict=True))
        for job_id, rs in runs.items():
            ctx.history.append(FINAL, INVOKE, "final-runs", {"job_id": job_id},
                               workload=self.name)
            ctx.history.append(FINAL, OK, "final-runs", {"job_id": job_id, "runs": rs},
                               workload=self.name)
        return runs

    def check_schedule(self, ctx: Context) -> dict[str, Any]:
        """The schedule checker on this workload's jobs and runs, and whether the final phase
        could pause every job and read every run (60 s of retries after the heal each)."""
        jobs, runs = self.schedule_inputs(ctx)
        final = ctx.finals.get(self.name, {})
        events = ctx.history.snapshot()
        if final.get("read_failed"):
            # Without the final state the run checks have nothing to compare with.
            result = {"anomalies": schedule.check_catch_up(events, self.name),
                      "stats": {"jobs": len(jobs)}}
        else:
            result = schedule.check(jobs, runs, events, heal_wall_ms=ctx.heal_wall_ms,
                                    bound_s=ctx.opts.heal_bound_s,
                                    triggered=dict(self.triggered), nodes=len(ctx.node_ids),
                                    workload=self.name)
        unpaused = sorted(j for j, job in jobs.items() if job["boundary_ms"] is None)
        extra = []
        if unpaused:
            extra.append({"type": "final-pause-failed", "jobs": len(unpaused),
                          "job_ids": unpaused[:20],
                          "explanation": "after the heal the cluster did not accept these "
                                         "pauses within 60 s of retries (see the final "
                                         "events)"})
        if final.get("read_failed"):
            extra.append({"type": "final-read-failed",
                          "explanation": "after the heal the runs could not be read within 60 s"})
        result["anomalies"] += extra
        result["valid"] = not result["anomalies"]
        return result

    def schedule_inputs(self, ctx: Context) -> tuple[dict, dict]:
        final = ctx.finals.get(self.name, {})
        jobs = {}
        for job_id, job in self.jobs.items():
            paused = final.get("paused", {}).get(job_id)
            jobs[job_id] = {
                "name": job.spec.name, "tenant": job.spec.tenant,
                "schedule": core_schedule(job.spec), "policy": str(job.spec.misfire_policy),
                "grace_ms": job.spec.misfire_grace_ms, "first_ms": job.next_fire_ms,
                "overlap": str(job.spec.overlap_policy),
                "max_active_runs": job.spec.max_active_runs,
                "circuit_breaker": job.spec.circuit_breaker is not None,
                "boundary_ms": paused.next_fire_ms if paused else None,
            }
        return jobs, final.get("runs", {})
