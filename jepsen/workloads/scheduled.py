"""What the fire and lease workloads share: jobs on a schedule, executed by workers.

Setup creates the jobs (before any fault). During the run one client thread reads their runs
(linearizable) and now and then triggers a manual run. The final phase, after the heal, pauses
every job (the pause answer names the next slot: every slot before it must have fired), waits
until their runs are terminal (at most `heal_bound_s` after the heal) and reads every run.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from typing import Any

from gnomon.client import GnomonError, Job, JobSpec
from gnomon.jepsen.client import run_summary
from gnomon.jepsen.context import Context
from gnomon.jepsen.history import FAIL, FINAL, INFO, INVOKE, OK
from gnomon.node.core.model import Schedule as CoreSchedule


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

    def make_specs(self, rng: random.Random) -> list[JobSpec]:
        raise NotImplementedError

    async def setup(self, ctx: Context) -> None:
        self.specs = self.make_specs(ctx.child_rng(self.name))
        for spec in self.specs:
            rid = uuid.uuid4().hex
            job = await retry_admin(
                ctx, "create-job", {"name": spec.name, "request_id": rid},
                lambda s=spec, r=rid: ctx.admin.create_job(s, request_id=r),
                deadline_s=30, workload=self.name,
                describe=lambda j: {"job_id": j.job_id, "name": j.spec.name,
                                    "next_fire_ms": j.next_fire_ms})
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
        paused: dict[str, Job] = {}
        for job_id in sorted(self.jobs):
            rid = uuid.uuid4().hex
            job = await retry_admin(
                ctx, "pause", {"job_id": job_id, "request_id": rid},
                lambda j=job_id, r=rid: ctx.admin.pause_job(j, request_id=r),
                deadline_s=60, workload=self.name,
                describe=lambda j: {"job_id": j.job_id, "next_fire_ms": j.next_fire_ms,
                                    "paused": j.paused})
            paused[job_id] = job
        deadline = ctx.heal_wall_ms / 1000 + ctx.opts.heal_bound_s
        runs = await self._read_until_terminal(ctx, deadline)
        ctx.finals[self.name] = {"paused": paused, "runs": runs}

    async def _read_all(self, ctx: Context, job_id: str) -> list[list]:
        out: list[list] = []
        before = 0
        while True:
            page = await ctx.admin.list_runs(job_id, limit=1000, before_ms=before)
            out += [run_summary(r) for r in page]
            if len(page) < 1000:
                return out
            before = min(r.scheduled_for_ms for r in page)

    async def _read_until_terminal(self, ctx: Context, deadline: float) -> dict[str, list[list]]:
        while True:
            runs: dict[str, list[list]] = {}
            try:
                for job_id in sorted(self.jobs):
                    runs[job_id] = await self._read_all(ctx, job_id)
            except GnomonError:
                if time.time() > deadline + 30:
                    raise
                await asyncio.sleep(0.5)
                continue
            busy = [r for rs in runs.values() for r in rs if r[1] == "running"]
            if not busy or time.time() > deadline:
                for job_id, rs in runs.items():
                    ctx.history.append(FINAL, INVOKE, "final-runs", {"job_id": job_id},
                                       workload=self.name)
                    ctx.history.append(FINAL, OK, "final-runs", {"job_id": job_id, "runs": rs},
                                       workload=self.name)
                return runs
            await asyncio.sleep(0.5)

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
