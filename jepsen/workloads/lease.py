"""lease: tasks that hold their lease for several heartbeats and report effects to the
fenced witness (start and end), run by SDK workers and by zombies that never self-fence.

Checked: the schedule checks of the fire workload, plus fencing (checkers/lease.py): the
witness never rejected a token the cluster accepted a completion for, stale completions are
always rejected, no instance completed twice.
"""

from __future__ import annotations

import random
from typing import Any

from gnomon.client import IntervalSchedule, JobSpec, MisfirePolicy, TaskSpec
from gnomon.jepsen.checkers import lease
from gnomon.jepsen.context import Context
from gnomon.jepsen.workerproc import LEASE_QUEUE
from gnomon.jepsen.workloads.fire import RETRY
from gnomon.jepsen.workloads.scheduled import ScheduledWorkload


class LeaseWorkload(ScheduledWorkload):
    name = "lease"
    tenant = "lease"
    jobs_count = 3
    trigger_p = 0.05

    def make_specs(self, rng: random.Random) -> list[JobSpec]:
        return [JobSpec(
            name=f"lease-{i}", tenant=self.tenant,
            schedule=IntervalSchedule(interval_ms=rng.choice(range(4000, 7001, 500))),
            tasks=(TaskSpec(name="hold", queue=LEASE_QUEUE, retry=RETRY,
                            payload={"duration_ms": rng.choice(range(3500, 5001, 250))}),),
            misfire_policy=MisfirePolicy.RUN_ALL) for i in range(self.jobs_count)]

    def check(self, ctx: Context) -> dict[str, Any]:
        _jobs, runs = self.schedule_inputs(ctx)
        events = ctx.history.snapshot()
        sched = self.check_schedule(ctx)
        fencing = lease.check(events, runs, set(self.jobs))
        anomalies = sched["anomalies"] + fencing["anomalies"]
        return {"valid": not anomalies, "anomalies": anomalies,
                "stats": {**sched["stats"], **fencing["stats"]}}
