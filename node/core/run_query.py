"""Runs across jobs: a filtered, sorted page of the runs in memory (ListRunsAcrossJobs).

A pure read of `State`: no clock (the time cut-offs are parameters; a running run's duration
counts to `state.clock_ms`), and a total order (the sort value, then the run id), so the same
state and query give the same page on every replica. Only the runs in memory are seen: the
active ones and the most recent terminal ones per job (`Limits.runs_retained_per_job`); older
runs are in each node's history store and not part of this listing.

Cost: one pass over the candidate runs (a job's runs when `job_id` is set, else every run in
memory) keeping the best `limit + 1` in a heap, so an answer never holds more than a page.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gnomon.node.core.model import (
    DEFAULT_QUEUE,
    AttemptOutcome,
    Run,
    RunTrigger,
    State,
    TaskState,
)

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
# Attempt outcomes that count as an error (a cancelled attempt is not one).
_ERROR_OUTCOMES = (AttemptOutcome.FAILED, AttemptOutcome.EXPIRED)
_ERROR_STATES = (TaskState.DEAD, TaskState.RETRY_WAIT)


class RunSort:
    CREATED_DESC = "created_desc"
    CREATED_ASC = "created_asc"
    DURATION_DESC = "duration_desc"
    DURATION_ASC = "duration_asc"


RUN_SORTS = (RunSort.CREATED_DESC, RunSort.CREATED_ASC, RunSort.DURATION_DESC,
             RunSort.DURATION_ASC)


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Every set field must match (empty / None: no filter)."""

    # Runs of these tenants only; empty: every tenant (the servicer scopes it to the caller).
    tenants: tuple[str, ...] = ()
    job_id: str = ""
    # A run with any task on this queue (a task without a queue is on "default").
    queue: str = ""
    # Any of these RunState values.
    states: tuple[str, ...] = ()
    # Any of these RunTrigger values.
    triggers: tuple[str, ...] = ()
    # created_ms in [created_since_ms, created_until_ms); 0: unbounded.
    created_since_ms: int = 0
    created_until_ms: int = 0
    # Only runs of the schedule that started more than this many ms after they were due
    # (`lateness`); None: no filter.
    late_over_ms: int | None = None
    # Only runs with a task that failed an attempt or died (`has_errors`).
    errors_only: bool = False


@dataclass(frozen=True, slots=True)
class RunCursor:
    """Where a page ended: the last run's sort value and id (a page token's content)."""

    value: int
    run_id: str


@dataclass(frozen=True, slots=True)
class RunPage:
    runs: list[Run]
    # None: this was the last page.
    next: RunCursor | None


def lateness(run: Run) -> int | None:
    """How long after it was due a scheduled run was created: its slot plus the delay the
    leader chose on purpose (jitter, spread). None for manual and backfill runs, which have
    no due time of their own."""
    if run.trigger != RunTrigger.SCHEDULE:
        return None
    return run.created_ms - run.scheduled_for_ms - run.fire_delay_ms


def duration(run: Run, clock_ms: int) -> int:
    """Created to finished; a run not finished counts to cluster time."""
    return max(0, (run.finished_ms or clock_ms) - run.created_ms)


def has_errors(run: Run) -> bool:
    """A task died or is waiting to retry, or one of its recorded attempts failed or expired."""
    return any(inst.state in _ERROR_STATES
               or any(a.outcome in _ERROR_OUTCOMES for a in inst.attempts)
               for inst in run.tasks.values())


def on_queue(run: Run, queue: str) -> bool:
    return any((task.queue or DEFAULT_QUEUE) == queue for task in run.spec.tasks)


def matches(run: Run, flt: RunFilter) -> bool:
    if flt.tenants and run.tenant not in flt.tenants:
        return False
    if flt.job_id and run.job_id != flt.job_id:
        return False
    if flt.states and run.state not in flt.states:
        return False
    if flt.triggers and run.trigger not in flt.triggers:
        return False
    if run.created_ms < flt.created_since_ms:
        return False
    if flt.created_until_ms and run.created_ms >= flt.created_until_ms:
        return False
    if flt.late_over_ms is not None:
        late = lateness(run)
        if late is None or late <= flt.late_over_ms:
            return False
    if flt.queue and not on_queue(run, flt.queue):
        return False
    return not flt.errors_only or has_errors(run)


def sort_value(run: Run, sort: str, clock_ms: int) -> int:
    if sort in (RunSort.DURATION_DESC, RunSort.DURATION_ASC):
        return duration(run, clock_ms)
    return run.created_ms


def _position(value: int, run_id: str, sort: str) -> tuple[int, str]:
    """Ascending position in the listing: descending sorts negate the value; ties by run id."""
    descending = sort in (RunSort.CREATED_DESC, RunSort.DURATION_DESC)
    return (-value if descending else value, run_id)


def _candidates(state: State, flt: RunFilter) -> Iterator[Run]:
    if flt.job_id:
        ids: Iterable[str] = state.runs_by_job.get(flt.job_id, {})
        return (run for run_id in ids if (run := state.runs.get(run_id)) is not None)
    return iter(state.runs.values())


def query_runs(state: State, flt: RunFilter, *, sort: str = RunSort.CREATED_DESC,
               limit: int = DEFAULT_LIMIT, after: RunCursor | None = None) -> RunPage:
    """The first `limit` runs matching `flt` in `sort` order after `after` (a previous page's
    `next`). Callers validate `sort` and `limit` (1..MAX_LIMIT)."""
    if sort not in RUN_SORTS or not 0 < limit <= MAX_LIMIT:
        raise ValueError(f"sort {sort!r} / limit {limit}")
    clock = state.clock_ms
    start = _position(after.value, after.run_id, sort) if after is not None else None
    keyed = ((_position(sort_value(run, sort, clock), run.run_id, sort), run)
             for run in _candidates(state, flt) if matches(run, flt))
    if start is not None:
        keyed = ((key, run) for key, run in keyed if key > start)
    best = heapq.nsmallest(limit + 1, keyed, key=lambda pair: pair[0])
    runs = [run for _, run in best[:limit]]
    if len(best) <= limit:
        return RunPage(runs, None)
    last = runs[-1]
    return RunPage(runs, RunCursor(sort_value(last, sort, clock), last.run_id))
