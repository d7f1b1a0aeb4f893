"""A job at a glance (ListJobs with `health`): its recent runs, success rate, duration and
fire-lateness percentiles, and the backlog of its tenant on its queues.

A pure read of `State`, like run_query: no clock (a running run's duration counts to
`state.clock_ms`), no sets, so every replica answers the same for the same state. Workers are
not here: they are the leader's, not replicated (the servicer adds them).

Cost: `tenant_backlogs` is one pass over the runs in memory per request; `job_health` reads a
job's runs in memory (its active runs and `runs_retained_per_job` ended ones).
"""

from __future__ import annotations

from dataclasses import dataclass

from gnomon.node.core.model import DEFAULT_QUEUE, Job, Run, RunState, State, TaskState
from gnomon.node.core.run_query import duration, lateness

RECENT_RUNS = 20


@dataclass(frozen=True, slots=True)
class Backlog:
    """Ready tasks of one tenant on one queue, and the oldest one's ready time (0: none)."""

    ready: int = 0
    oldest_ready_ms: int = 0


@dataclass(frozen=True, slots=True)
class RecentRun:
    run: Run
    duration_ms: int
    late_ms: int


@dataclass(frozen=True, slots=True)
class JobHealth:
    recent: tuple[RecentRun, ...]
    succeeded: int
    failed: int
    duration_p50_ms: int
    duration_p99_ms: int
    lateness_p50_ms: int
    lateness_p99_ms: int
    # (queue, its backlog for the job's tenant), in the order the job's tasks name them.
    queues: tuple[tuple[str, Backlog], ...]


def percentile(values: list[int], percent: int) -> int:
    """Nearest-rank percentile of `values` (0 for none): the smallest value with at least
    `percent` % of the values at or below it."""
    if not values:
        return 0
    ordered = sorted(values)
    rank = max(1, -(-percent * len(ordered) // 100))  # ceil(percent * n / 100)
    return ordered[min(rank, len(ordered)) - 1]


def tenant_backlogs(state: State) -> dict[tuple[str, str], Backlog]:
    """Ready tasks per (tenant, queue) over the running runs (call under the replica lock)."""
    out: dict[tuple[str, str], Backlog] = {}
    for run in state.runs.values():
        if run.state != RunState.RUNNING:
            continue
        for inst in run.tasks.values():
            if inst.state != TaskState.READY:
                continue
            key = (run.tenant, run.spec.task(inst.task_name).queue or DEFAULT_QUEUE)
            seen = out.get(key, Backlog())
            oldest = min(seen.oldest_ready_ms or inst.ready_ms, inst.ready_ms)
            out[key] = Backlog(seen.ready + 1, oldest)
    return out


def job_queues(job: Job) -> tuple[str, ...]:
    """The queues of a job's tasks, each once, in task order."""
    return tuple(dict.fromkeys(t.queue or DEFAULT_QUEUE for t in job.spec.tasks))


def job_health(state: State, job: Job, backlogs: dict[tuple[str, str], Backlog],
               recent: int = RECENT_RUNS) -> JobHealth:
    """`job`'s health from its runs in memory (the last `recent` created, oldest first)."""
    ids = list(state.runs_by_job.get(job.job_id, {}))
    runs = [run for run_id in ids if (run := state.runs.get(run_id)) is not None]
    runs.sort(key=lambda r: (r.created_ms, r.run_id))
    shown = tuple(_recent(run, state.clock_ms) for run in runs[-recent:])
    ended = [r.duration_ms for r in shown
             if r.run.state in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)]
    late = [r.late_ms for r in shown
            if lateness(r.run) is not None and r.run.state != RunState.SKIPPED]
    tenant = job.spec.tenant
    return JobHealth(
        recent=shown,
        succeeded=sum(r.run.state == RunState.SUCCEEDED for r in shown),
        failed=sum(r.run.state == RunState.FAILED for r in shown),
        duration_p50_ms=percentile(ended, 50), duration_p99_ms=percentile(ended, 99),
        lateness_p50_ms=percentile(late, 50), lateness_p99_ms=percentile(late, 99),
        queues=tuple((q, backlogs.get((tenant, q), Backlog())) for q in job_queues(job)))


def _recent(run: Run, clock_ms: int) -> RecentRun:
    ran = run.state != RunState.SKIPPED
    return RecentRun(run, duration(run, clock_ms) if ran else 0,
                     max(0, lateness(run) or 0) if ran else 0)
