"""A run's life: created (started, queued by the overlap policy, or skipped), its tasks made
ready, cancelled (CancelRun), finished, retained and evicted to the history store.

The run-lifecycle functions call each other in a loop (a run that ends starts the job's queued
runs, whose tasks may end them at once; a one-shot's successful run deletes its job, which ends
its other runs), so they live together here: `_start_queued`, `_remove_job` and the
lease/attempt bookkeeping a cancel shares with tasks.py included. Imports `circuits` and
`common` of the slices; jobs, fire, tasks and rerun build on it.
"""

from __future__ import annotations

from gnomon.node.core import access
from gnomon.node.core.circuits import _circuit_records, _queue_circuit_records
from gnomon.node.core.commands import CancelRun
from gnomon.node.core.common import Ctx
from gnomon.node.core.errors import Code, Rejected
from gnomon.node.core.model import (
    TERMINAL_RUN_STATES,
    TERMINAL_TASK_STATES,
    Attempt,
    AttemptOutcome,
    Job,
    Run,
    RunState,
    RunTrigger,
    State,
    TaskInstance,
    TaskState,
)
from gnomon.node.core.results import Reply, RunReply
from gnomon.node.core.transitions import RunEvent, TaskEvent, move_run, move_task, track_open
from gnomon.node.core.validate import queue_limit


def _cancel_run(ctx: Ctx, cmd: CancelRun) -> Reply:
    run = ctx.state.runs.get(cmd.run_id)
    if run is None:
        return Rejected(Code.NOT_FOUND, f"run_id: no run {cmd.run_id!r}")
    if run.state in TERMINAL_RUN_STATES:
        return Rejected(
            Code.FAILED_PRECONDITION, f"run_id: run {run.run_id!r} is already {run.state}"
        )
    reason = cmd.reason or "run cancelled"
    if run.state == RunState.QUEUED:
        _end_queued(ctx, run, reason)
        return RunReply(run_id=run.run_id)
    _cancel_tasks(ctx, run, reason, leased_too=True)
    move_run(ctx.state, run, RunEvent.CANCEL)
    run.reason, run.finished_ms = reason, ctx.now
    _enforce_retention(ctx, run.job_id)
    _start_queued(ctx, run.job_id)
    return RunReply(run_id=run.run_id)


# --- creating runs -------------------------------------------------------------------------------


def _new_run(ctx: Ctx, job: Job, run_id: str, scheduled_for_ms: int, trigger: str,
             run_state: str = RunState.RUNNING) -> Run:
    run = Run(
        run_id=run_id,
        job_id=job.job_id,
        tenant=job.spec.tenant,
        scheduled_for_ms=scheduled_for_ms,
        state=run_state,
        trigger=trigger,
        created_ms=ctx.now,
        job_version=job.version,
        spec=job.spec,
        tasks={},
    )
    ctx.state.runs[run_id] = run
    ctx.state.runs_by_job.setdefault(job.job_id, {})[run_id] = None
    ctx.state.active_runs += run_state == RunState.RUNNING
    track_open(ctx.state, run)
    return run


def _start_run(ctx: Ctx, job: Job, run_id: str, scheduled_for_ms: int, trigger: str) -> None:
    _start_tasks(ctx, _new_run(ctx, job, run_id, scheduled_for_ms, trigger))


def _start_tasks(ctx: Ctx, run: Run) -> None:
    """The run's task instances, its root tasks ready."""
    run_id = run.run_id
    for task in run.spec.tasks:
        inst = TaskInstance(
            task_name=task.name, state=TaskState.PENDING, idempotency_key=f"{run_id}:{task.name}"
        )
        run.tasks[task.name] = inst
        if not task.depends_on:
            _make_ready(ctx, run, inst)
    _finish_if_done(ctx, run)


def _make_ready(ctx: Ctx, run: Run, inst: TaskInstance,
                event: str = TaskEvent.DEPS_MET) -> None:
    move_task(inst, event)
    inst.ready_ms = ctx.now
    ctx.effects.dispatchable.append((run.run_id, inst.task_name))


def _record_skipped_run(ctx: Ctx, job: Job, run_id: str, scheduled_for_ms: int,
                        trigger: str, reason: str) -> None:
    run = _new_run(ctx, job, run_id, scheduled_for_ms, trigger)
    move_run(ctx.state, run, RunEvent.SKIP)
    run.reason, run.finished_ms = reason, ctx.now
    _enforce_retention(ctx, job.job_id)


# --- runs waiting for room (overlap) -------------------------------------------------------------


def _open_runs(state: State, job_id: str) -> tuple[list[Run], list[Run]]:
    """The job's RUNNING and QUEUED runs, each oldest first (a replicated order: the derived
    indexes' own order differs after a restore)."""
    def ordered(table: dict[str, dict[str, None]]) -> list[Run]:
        runs = [state.runs[run_id] for run_id in table.get(job_id, ())]
        runs.sort(key=lambda r: (r.created_ms, r.scheduled_for_ms, r.run_id))
        return runs

    return ordered(state.running_by_job), ordered(state.queued_by_job)


def _end_queued(ctx: Ctx, run: Run, reason: str, *, retain: bool = True) -> None:
    move_run(ctx.state, run, RunEvent.CANCEL)
    run.reason, run.finished_ms = reason, ctx.now
    if retain:
        _enforce_retention(ctx, run.job_id)


def _start_queued(ctx: Ctx, job_id: str) -> None:
    """Start the job's QUEUED runs, oldest first, while fewer than its max_active_runs
    (default 1, whatever the policy: a run queued by a trigger's override waits the same)
    are running."""
    state = ctx.state
    job = state.jobs.get(job_id)
    if job is None or job_id not in state.queued_by_job:
        return
    limit = queue_limit(job.spec)
    running, queued = _open_runs(state, job_id)
    active = len(running)
    for run in queued:
        if active >= limit:
            return
        move_run(state, run, RunEvent.START)
        run.reason = ""
        _start_tasks(ctx, run)
        active += 1


# --- cancelling a run's tasks --------------------------------------------------------------------


def _cancel_tasks(ctx: Ctx, run: Run, reason: str, *, leased_too: bool) -> None:
    """Cancel the run's live tasks; a leased one's holder is told (Effects.cancelled)."""
    for inst in run.tasks.values():
        if inst.state in TERMINAL_TASK_STATES:
            continue
        if inst.state == TaskState.LEASED:
            if not leased_too:
                continue
            _end_lease(ctx, run, inst)
            _record_attempt(ctx, inst, AttemptOutcome.CANCELLED, error=reason)
            ctx.effects.cancelled.append(
                (run.run_id, inst.task_name, inst.fencing_token, reason, inst.worker_id)
            )
        move_task(inst, TaskEvent.CANCEL)
        inst.finished_ms = ctx.now


def _end_lease(ctx: Ctx, run: Run, inst: TaskInstance) -> None:
    ctx.effects.lease_ended.append((run.run_id, inst.task_name, inst.fencing_token))


def _record_attempt(
    ctx: Ctx,
    inst: TaskInstance,
    outcome: str,
    *,
    error: str = "",
    exit_code: int | None = None,
    duration_ms: int = 0,
    output_tail: str = "",
) -> None:
    """Keep the attempt that just ended (the newest `max_attempt_records`)."""
    keep = ctx.limits.max_attempt_records
    if keep <= 0:
        return
    record = Attempt(
        attempt=inst.attempt,
        fencing_token=inst.fencing_token,
        worker_id=inst.worker_id,
        started_ms=inst.started_ms,
        finished_ms=ctx.now,
        outcome=outcome,
        error=error,
        exit_code=exit_code,
        duration_ms=duration_ms,
        output_tail=output_tail,
    )
    inst.attempts = (*inst.attempts[max(0, len(inst.attempts) + 1 - keep) :], record)


# --- run completion and retention ----------------------------------------------------------------


def _finish_if_done(ctx: Ctx, run: Run, *, retain: bool = True) -> None:
    """End the run when every task is terminal; `retain` applies the retention bound now
    (a caller that ends many runs of one job applies it once afterwards)."""
    if run.state != RunState.RUNNING:
        return
    if run.cancel_requested:  # what waits is cancelled; leased tasks end on their own
        _cancel_tasks(ctx, run, run.reason, leased_too=False)
    for inst in run.tasks.values():  # a loop, not any(genexpr): this runs per report
        if inst.state not in TERMINAL_TASK_STATES:
            return
    move_run(ctx.state, run, _final_run_event(run))
    run.finished_ms = ctx.now
    _circuit_records(ctx, run)
    _queue_circuit_records(ctx, run)
    if retain:
        _enforce_retention(ctx, run.job_id)
        _start_queued(ctx, run.job_id)
        _delete_if_done(ctx, run)


def _delete_if_done(ctx: Ctx, run: Run) -> None:
    """delete_after_success: a one-shot job whose scheduled run succeeded, with nothing left
    to fire, is deleted (its run goes to the history store like any deleted job's)."""
    job = ctx.state.jobs.get(run.job_id)
    if (job is not None and job.spec.delete_after_success and job.next_fire_ms == 0
            and run.state == RunState.SUCCEEDED and run.trigger == RunTrigger.SCHEDULE
            and not ctx.state.running_by_job.get(job.job_id)
            and not ctx.state.queued_by_job.get(job.job_id)):
        _remove_job(ctx, job, cancel_running=False)


def _final_run_event(run: Run) -> str:
    states = [inst.state for inst in run.tasks.values()]
    if TaskState.CANCELLED in states:
        return RunEvent.CANCEL
    if all(state == TaskState.SUCCEEDED for state in states):
        return RunEvent.SUCCEED
    return RunEvent.FAIL


def _enforce_retention(ctx: Ctx, job_id: str) -> None:
    """Evict the job's terminal runs that ended first while it keeps more than the retention
    bound (a deleted job keeps none). Cost O(runs evicted), whatever else the job has.

    Runs with dead letters stay in memory (pinned) and count toward the bound."""
    state = ctx.state
    keep = max(ctx.limits.runs_retained_per_job, 0) if job_id in state.jobs else 0
    fifo = state.retained.get(job_id)
    while fifo and len(fifo) + len(state.pinned.get(job_id, ())) > keep:
        run = state.runs.get(fifo.pop())
        if run is None or run.state not in TERMINAL_RUN_STATES:
            continue  # reopened by a replay since (it rejoins when it ends again)
        if _has_dead_letters(state, run):
            state.pinned.setdefault(job_id, {})[run.run_id] = None
        else:
            _evict(ctx, run)
    if job_id not in state.jobs and not state.runs_by_job.get(job_id):
        for table in (state.runs_by_job, state.retained, state.pinned):
            table.pop(job_id, None)


def _unpin_if_free(ctx: Ctx, run: Run) -> None:
    """A pinned run whose last dead letter left the queue leaves memory too."""
    pinned = ctx.state.pinned.get(run.job_id)
    if pinned and run.run_id in pinned and not _has_dead_letters(ctx.state, run):
        del pinned[run.run_id]
        if not pinned:
            del ctx.state.pinned[run.job_id]
        _evict(ctx, run)
        _enforce_retention(ctx, run.job_id)


def _evict(ctx: Ctx, run: Run) -> None:
    state = ctx.state
    del state.runs[run.run_id]
    del state.runs_by_job[run.job_id][run.run_id]
    ctx.effects.evicted_runs.append(run)


def _has_dead_letters(state: State, run: Run) -> bool:
    dead = state.dead_letters
    return bool(dead) and any((run.run_id, name) in dead for name in run.tasks)


# --- removing a job (it ends its runs) -----------------------------------------------------------


def _remove_job(ctx: Ctx, job: Job, cancel_running: bool) -> None:
    """Delete `job` (DeleteJob, or a one-shot's delete_after_success)."""
    state = ctx.state
    del state.jobs[job.job_id]
    del state.job_names[(job.spec.tenant, job.spec.name)]
    state.jobs_per_tenant[job.spec.tenant] -= 1
    if not state.jobs_per_tenant[job.spec.tenant]:
        del state.jobs_per_tenant[job.spec.tenant]
    state.access.add_payload(job.spec.tenant, -access.payload_bytes(job.spec))
    _unindex_job(state, job.spec.tenant)
    ctx.effects.jobs.append(job.job_id)
    # Queued work of the job is cancelled (nobody may ever serve its queue again); leased
    # tasks finish unless the request says otherwise. Terminal runs go to the history store.
    for run_id in list(state.runs_by_job.get(job.job_id, ())):
        run = state.runs[run_id]
        for name, inst in run.tasks.items():
            if inst.state == TaskState.DEAD:  # replaying it would queue work of no job
                state.dead_letters.pop((run_id, name), None)
        if run.state == RunState.QUEUED:
            _end_queued(ctx, run, "job deleted", retain=False)
        elif run.state == RunState.RUNNING:
            _cancel_tasks(ctx, run, "job deleted", leased_too=cancel_running)
            _finish_if_done(ctx, run, retain=False)
    for run_id in list(state.pinned.pop(job.job_id, ())):
        _evict(ctx, state.runs[run_id])  # their dead letters left with the job
    _enforce_retention(ctx, job.job_id)


def _unindex_job(state: State, tenant: str) -> None:
    def alive(seq: int) -> bool:
        return f"j{seq}" in state.jobs

    state.job_order.remove(alive)
    order = state.tenant_job_order[tenant]
    order.remove(alive)
    if not len(order):
        del state.tenant_job_order[tenant]


HANDLER_PAIRS = [(CancelRun, _cancel_run)]
