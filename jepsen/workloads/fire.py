"""fire: many jobs every 1-5 s whose tasks report each execution to the witness.

Checked (checkers/schedule.py): one run per (job, slot) and at most one accepted execution of
it; every slot between the job's first slot and the pause boundary has a run, SKIPPED only
as the misfire policy allows, otherwise executed within the bound after the final heal; run
counts per job equal the schedule's slot counts; acknowledged manual triggers ran.
"""

from __future__ import annotations

import random
from typing import Any

from gnomon.client import (
    CronSchedule,
    IntervalSchedule,
    JobSpec,
    MisfirePolicy,
    RetryPolicy,
    TaskSpec,
)
from gnomon.jepsen.checkers import schedule
from gnomon.jepsen.context import Context
from gnomon.jepsen.workerproc import FIRE_QUEUE
from gnomon.jepsen.workloads.scheduled import ScheduledWorkload

# Lease expiries count as attempts: enough of them that no fault can exhaust a task.
RETRY = RetryPolicy(max_attempts=50, initial_backoff_ms=200, max_backoff_ms=1000)
POLICIES = (MisfirePolicy.RUN_ALL, MisfirePolicy.RUN_LATEST, MisfirePolicy.SKIP)


class FireWorkload(ScheduledWorkload):
    name = "fire"
    tenant = "fire"
    jobs_count = 6

    def make_specs(self, rng: random.Random) -> list[JobSpec]:
        specs = []
        for i in range(self.jobs_count):
            if rng.random() < 0.5:
                sched: Any = IntervalSchedule(interval_ms=rng.choice(range(1000, 5001, 500)))
            else:
                sched = CronSchedule(f"* * * * * */{rng.choice((1, 2, 3, 5))}")
            policy = POLICIES[i % len(POLICIES)]
            grace = 0 if policy == MisfirePolicy.RUN_ALL else rng.choice((2000, 3000, 5000))
            specs.append(JobSpec(
                name=f"fire-{i}", tenant=self.tenant, schedule=sched,
                tasks=(TaskSpec(name="fire", queue=FIRE_QUEUE, retry=RETRY),),
                misfire_policy=policy, misfire_grace_ms=grace))
        return specs

    def check(self, ctx: Context) -> dict[str, Any]:
        jobs, runs = self.schedule_inputs(ctx)
        triggered = {r: j for r, j in self.triggered.items()}
        return schedule.check(jobs, runs, ctx.history.snapshot(), heal_wall_ms=ctx.heal_wall_ms,
                              bound_s=ctx.opts.heal_bound_s, triggered=triggered)
