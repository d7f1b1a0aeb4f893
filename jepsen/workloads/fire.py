"""fire: jobs every 1-5 s whose tasks report each execution to the witness; with an outage
nemesis hundreds more (every 15-60 s), so that catch-up after an outage has real size while
the steady load stays within what two workers execute here.

Checked (checkers/schedule.py): one run per (job, slot) and at most one accepted execution of
it; every slot between the job's first slot and the pause boundary has a run, SKIPPED only
as the misfire policy allows, otherwise executed within the bound after the final heal; run
counts per job equal the schedule's slot counts; acknowledged manual triggers ran. Every
third job has overlap policy SKIP (checkers/overlap.py): a slot SKIPPED for overlap is legal
only while another run of the job was active, and no two of its runs were active at once
(the workload's manual triggers never override the policy).
"""

from __future__ import annotations

import random
from typing import Any

from gnomon.client import (
    CronDialect,
    CronSchedule,
    IntervalSchedule,
    JobSpec,
    MisfirePolicy,
    OverlapPolicy,
    RetryPolicy,
    TaskSpec,
)
from gnomon.jepsen.context import Context
from gnomon.jepsen.workerproc import FIRE_QUEUE
from gnomon.jepsen.workloads.scheduled import ScheduledWorkload

# Lease expiries count as attempts: enough of them that no fault can exhaust a task.
RETRY = RetryPolicy(max_attempts=50, initial_backoff_ms=200, max_backoff_ms=1000)
POLICIES = (MisfirePolicy.RUN_ALL, MisfirePolicy.RUN_LATEST, MisfirePolicy.SKIP)
# Bulk jobs: fewer RUN_ALL (each missed slot is an execution to catch up), more of the
# policies whose missed slots are checked one by one for SKIPPED.
BULK_POLICIES = (MisfirePolicy.RUN_ALL, MisfirePolicy.RUN_LATEST, MisfirePolicy.SKIP,
                 MisfirePolicy.RUN_LATEST, MisfirePolicy.SKIP)
FIRE_JOBS = 6
OUTAGE_FIRE_JOBS = 300


class FireWorkload(ScheduledWorkload):
    name = "fire"
    tenant = "fire"
    jobs_count = FIRE_JOBS

    def configure(self, ctx: Context) -> None:
        outage = any(k.startswith("outage") for k in ctx.kinds)
        self.jobs_count = ctx.opts.fire_jobs or (OUTAGE_FIRE_JOBS if outage else FIRE_JOBS)

    def make_specs(self, rng: random.Random) -> list[JobSpec]:
        """The first FIRE_JOBS fast jobs, then slower bulk jobs; policies in rotation."""
        specs = []
        for i in range(self.jobs_count):
            sched = _fast(rng) if i < FIRE_JOBS else _bulk(rng)
            policy = POLICIES[i % 3] if i < FIRE_JOBS else BULK_POLICIES[i % 5]
            grace = 0 if policy == MisfirePolicy.RUN_ALL else rng.choice((2000, 3000, 5000))
            specs.append(JobSpec(
                name=f"fire-{i}", tenant=self.tenant, schedule=sched,
                tasks=(TaskSpec(name="fire", queue=FIRE_QUEUE, retry=RETRY),),
                misfire_policy=policy, misfire_grace_ms=grace,
                overlap_policy=OverlapPolicy.SKIP if i % 3 == 2 else OverlapPolicy.ALLOW_ALL))
        return specs

    def check(self, ctx: Context) -> dict[str, Any]:
        return self.check_schedule(ctx)


def _fast(rng: random.Random) -> Any:
    if rng.random() < 0.5:
        return IntervalSchedule(interval_ms=rng.choice(range(1000, 5001, 500)))
    return CronSchedule(f"* * * * * */{rng.choice((1, 2, 3, 5))}",
                        dialect=CronDialect.SECONDS_LAST)


def _bulk(rng: random.Random) -> Any:
    if rng.random() < 0.5:
        return IntervalSchedule(interval_ms=rng.choice(range(15000, 60001, 5000)))
    return CronSchedule(f"* * * * * */{rng.choice((15, 20, 30))}",
                        dialect=CronDialect.SECONDS_LAST)
