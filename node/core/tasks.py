"""Task instances: leases granted, completed, failed, expired and checkpointed; attempts;
dead letters and their replay; dependents promoted; CancelTask.

Imports `runs` (a task's end may end its run) and `common`; limits.py bounds the dead letters
through `_bound_dead_letters`.
"""

from __future__ import annotations

from gnomon.node.core.commands import (
    CancelTask,
    CheckpointLeases,
    CompleteTask,
    DiscardDeadLetters,
    ExpireLeases,
    FailTask,
    GrantLeases,
    LeaseGrant,
    ReplayDeadLetters,
)
from gnomon.node.core.common import Ctx
from gnomon.node.core.dag import graph
from gnomon.node.core.errors import Code, Rejected
from gnomon.node.core.model import (
    TERMINAL_TASK_STATES,
    AttemptOutcome,
    DeadLetter,
    Run,
    State,
    TaskInstance,
    TaskState,
)
from gnomon.node.core.results import Discarded, Done, Granted, Replayed, Reply, RunReply
from gnomon.node.core.retry import backoff_ms, effective_max_attempts
from gnomon.node.core.runs import (
    _end_lease,
    _finish_if_done,
    _make_ready,
    _record_attempt,
    _unpin_if_free,
)
from gnomon.node.core.transitions import RunEvent, TaskEvent, move_run, move_task

# States from which a task can still reach SUCCEEDED without a replay.
_VIABLE_TASK_STATES = frozenset(
    {
        TaskState.PENDING,
        TaskState.READY,
        TaskState.LEASED,
        TaskState.RETRY_WAIT,
        TaskState.SUCCEEDED,
    }
)


# --- leases and task outcomes --------------------------------------------------------------------


def _grant_leases(ctx: Ctx, cmd: GrantLeases) -> Reply:
    return Granted(tokens=tuple(_grant_one(ctx, grant) for grant in cmd.grants))


def _grant_one(ctx: Ctx, grant: LeaseGrant) -> int | Rejected:
    state = ctx.state
    found = _find_task(state, grant.run_id, grant.task_name, Code.FAILED_PRECONDITION)
    if isinstance(found, Rejected):
        return found
    run, inst = found
    rejected = _check_grantable(run, inst, ctx.now)
    if rejected:
        return rejected
    state.last_token += 1
    move_task(inst, TaskEvent.GRANT)
    inst.fencing_token = state.last_token
    inst.worker_id = grant.worker_id
    inst.lease_ttl_ms = grant.lease_ttl_ms
    inst.lease_remaining_ms = inst.lease_checkpoint_ms = 0
    inst.attempt += 1
    inst.started_ms = ctx.now
    ctx.effects.leased.append((run.run_id, inst.task_name, inst.fencing_token))
    return inst.fencing_token


def _check_grantable(run: Run, inst: TaskInstance, now: int) -> Rejected | None:
    where = f"task {inst.task_name!r} of run {run.run_id!r}"
    if inst.state == TaskState.READY:
        return None
    if inst.state == TaskState.RETRY_WAIT:
        if inst.retry_at_ms <= now:
            return None
        return Rejected(
            Code.FAILED_PRECONDITION,
            f"task_name: {where} waits to retry until {inst.retry_at_ms}, it is {now}",
        )
    return Rejected(Code.FAILED_PRECONDITION, f"task_name: {where} is {inst.state}, not ready")


def _complete_task(ctx: Ctx, cmd: CompleteTask) -> Reply:
    found = _find_leased(ctx.state, cmd.run_id, cmd.task_name, cmd.fencing_token)
    if isinstance(found, Rejected):
        return found
    run, inst = found
    _end_lease(ctx, run, inst)
    _record_attempt(ctx, inst, AttemptOutcome.SUCCEEDED, exit_code=cmd.exit_code,
                    duration_ms=cmd.duration_ms, output_tail=cmd.output_tail)
    move_task(inst, TaskEvent.COMPLETE)
    inst.finished_ms = ctx.now
    inst.result = cmd.result
    _promote_dependents(ctx, run, inst.task_name)
    _finish_if_done(ctx, run)
    return Done()


def _fail_task(ctx: Ctx, cmd: FailTask) -> Reply:
    found = _find_leased(ctx.state, cmd.run_id, cmd.task_name, cmd.fencing_token)
    if isinstance(found, Rejected):
        return found
    run, inst = found
    _end_lease(ctx, run, inst)
    _record_attempt(ctx, inst, AttemptOutcome.FAILED, error=cmd.error, exit_code=cmd.exit_code,
                    duration_ms=cmd.duration_ms, output_tail=cmd.output_tail)
    _fail_attempt(ctx, run, inst, cmd.error, cmd.retryable, cmd.jitter_draw)
    return Done()


def _expire_leases(ctx: Ctx, cmd: ExpireLeases) -> Reply:
    for lease in cmd.leases:
        found = _find_leased(ctx.state, lease.run_id, lease.task_name, lease.fencing_token)
        if isinstance(found, Rejected):
            continue  # stale expiry: the lease already ended or was re-granted
        run, inst = found
        _end_lease(ctx, run, inst)
        _record_attempt(ctx, inst, AttemptOutcome.EXPIRED, error=lease.reason)
        # A timed-out or vanished worker counts as a retryable failure.
        _fail_attempt(ctx, run, inst, lease.reason, True, lease.jitter_draw)
    return Done()


def _checkpoint_leases(ctx: Ctx, cmd: CheckpointLeases) -> Reply:
    for cp in cmd.checkpoints:
        found = _find_leased(ctx.state, cp.run_id, cp.task_name, cp.fencing_token)
        if isinstance(found, Rejected):
            continue  # a stale checkpoint: the lease already ended or was re-granted
        inst = found[1]
        inst.lease_remaining_ms = max(0, cp.remaining_ms)
        inst.lease_checkpoint_ms = ctx.now if inst.lease_remaining_ms else 0
    return Done()


def _cancel_task(ctx: Ctx, cmd: CancelTask) -> Reply:
    found = _find_task(ctx.state, cmd.run_id, cmd.task_name, Code.NOT_FOUND)
    if isinstance(found, Rejected):
        return found
    run, inst = found
    if inst.state in TERMINAL_TASK_STATES:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"task_name: task {inst.task_name!r} of run {run.run_id!r} is already "
                        f"{inst.state}")
    reason = cmd.reason or "task cancelled"
    if inst.state == TaskState.LEASED:
        _end_lease(ctx, run, inst)
        _record_attempt(ctx, inst, AttemptOutcome.CANCELLED, error=reason)
        ctx.effects.cancelled.append(
            (run.run_id, inst.task_name, inst.fencing_token, reason, inst.worker_id))
    move_task(inst, TaskEvent.CANCEL)
    inst.finished_ms, inst.last_error = ctx.now, reason
    for name in graph(run.spec).descendants(inst.task_name):
        downstream = run.tasks[name]
        if downstream.state == TaskState.PENDING:
            move_task(downstream, TaskEvent.UPSTREAM_DEAD)
            downstream.finished_ms = ctx.now
    _finish_if_done(ctx, run)
    return RunReply(run_id=run.run_id)


def _find_task(
    state: State, run_id: str, task_name: str, code: str
) -> tuple[Run, TaskInstance] | Rejected:
    run = state.runs.get(run_id)
    if run is None:
        return Rejected(code, f"run_id: no run {run_id!r}")
    inst = run.tasks.get(task_name)
    if inst is None:
        return Rejected(code, f"task_name: run {run_id!r} has no task {task_name!r}")
    return run, inst


def _find_leased(
    state: State, run_id: str, task_name: str, token: int
) -> tuple[Run, TaskInstance] | Rejected:
    found = _find_task(state, run_id, task_name, Code.NOT_FOUND)
    if isinstance(found, Rejected):
        return found
    _, inst = found
    if token != inst.fencing_token:
        return Rejected(
            Code.FAILED_PRECONDITION,
            f"fencing_token: stale fencing token {token}, current is {inst.fencing_token}",
        )
    if inst.state != TaskState.LEASED:
        return Rejected(
            Code.FAILED_PRECONDITION,
            f"fencing_token: task {task_name!r} of run {run_id!r} is {inst.state}, not leased",
        )
    return found


def _fail_attempt(
    ctx: Ctx, run: Run, inst: TaskInstance, error: str, retryable: bool, jitter_draw: float
) -> None:
    policy = graph(run.spec).tasks[inst.task_name].retry
    inst.last_error = error
    if run.job_id not in ctx.state.jobs or run.cancel_requested:
        # The job was deleted while this attempt ran, or the overlap policy asked its run to
        # stop: nothing of it is retried or dead-lettered (nobody may serve it again, or
        # nothing new of the run starts); the attempt's failure is on record.
        move_task(inst, TaskEvent.CANCEL)
        inst.finished_ms = ctx.now
        _finish_if_done(ctx, run)
        return
    if retryable and inst.attempt < effective_max_attempts(policy):
        move_task(inst, TaskEvent.RETRY)
        inst.retry_at_ms = ctx.now + backoff_ms(inst.attempt, policy, jitter_draw)
        ctx.effects.dispatchable.append((run.run_id, inst.task_name))
        return
    _dead_letter(ctx, run, inst)


def _dead_letter(ctx: Ctx, run: Run, inst: TaskInstance) -> None:
    move_task(inst, TaskEvent.GIVE_UP)
    inst.finished_ms = ctx.now
    ctx.state.dead_letters[(run.run_id, inst.task_name)] = DeadLetter(
        run_id=run.run_id,
        task_name=inst.task_name,
        job_id=run.job_id,
        tenant=run.tenant,
        attempts=inst.attempt,
        last_error=inst.last_error,
        dead_ms=ctx.now,
    )
    for name in graph(run.spec).descendants(inst.task_name):
        downstream = run.tasks[name]
        if downstream.state == TaskState.PENDING:
            move_task(downstream, TaskEvent.UPSTREAM_DEAD)
            downstream.finished_ms = ctx.now
    _finish_if_done(ctx, run)
    _bound_dead_letters(ctx)


def _bound_dead_letters(ctx: Ctx) -> None:
    """Beyond max_dead_letters the oldest entries leave the queue, counted; the task stays
    dead in its run, which is then free to go to the history store like any finished run."""
    state = ctx.state
    while len(state.dead_letters) > max(ctx.limits.max_dead_letters, 1):
        key = next(iter(state.dead_letters))
        letter = state.dead_letters.pop(key)
        state.dead_letters_evicted += 1
        run = state.runs.get(letter.run_id)
        if run is not None:
            _unpin_if_free(ctx, run)


def _promote_dependents(ctx: Ctx, run: Run, task_name: str) -> None:
    if run.cancel_requested:
        return  # nothing new of it starts; _finish_if_done cancels what waits
    dag = graph(run.spec)
    for name in dag.dependents[task_name]:
        inst = run.tasks[name]
        if inst.state == TaskState.PENDING and all(
            run.tasks[dep].state == TaskState.SUCCEEDED for dep in dag.deps[name]
        ):
            _make_ready(ctx, run, inst)


# --- dead letters --------------------------------------------------------------------------------


def _replay_dead_letters(ctx: Ctx, cmd: ReplayDeadLetters) -> Reply:
    dead_letters = ctx.state.dead_letters
    for index, key in enumerate(cmd.tasks):
        if (key.run_id, key.task_name) not in dead_letters:
            return Rejected(
                Code.NOT_FOUND,
                f"tasks[{index}]: no dead letter for task {key.task_name!r} "
                f"of run {key.run_id!r}",
            )
    keys = tuple(dict.fromkeys((key.run_id, key.task_name) for key in cmd.tasks))
    for run_id, task_name in keys:
        _replay_one(ctx, run_id, task_name)
    return Replayed(tasks=keys)


def _replay_one(ctx: Ctx, run_id: str, task_name: str) -> None:
    del ctx.state.dead_letters[(run_id, task_name)]
    # Runs with dead-lettered tasks are never evicted, so the run is in memory.
    run = ctx.state.runs[run_id]
    inst = run.tasks[task_name]
    inst.attempt = 0  # a fresh series of attempts; last_error is kept for the record
    inst.retry_at_ms = 0
    inst.finished_ms = 0
    _make_ready(ctx, run, inst, TaskEvent.REPLAY)
    dag = graph(run.spec)
    # Topological order: a revived task's own dependencies are settled before it is looked at.
    for name in dag.descendants(task_name):
        downstream = run.tasks[name]
        if downstream.state == TaskState.UPSTREAM_FAILED and all(
            run.tasks[dep].state in _VIABLE_TASK_STATES for dep in dag.deps[name]
        ):
            move_task(downstream, TaskEvent.REVIVE)
            downstream.finished_ms = 0
    move_run(ctx.state, run, RunEvent.REOPEN)
    run.finished_ms = 0
    pinned = ctx.state.pinned.get(run.job_id)
    if pinned and run_id in pinned:  # running again: it rejoins the order when it ends
        del pinned[run_id]
        if not pinned:
            del ctx.state.pinned[run.job_id]


def _discard_dead_letters(ctx: Ctx, cmd: DiscardDeadLetters) -> Reply:
    """All named dead letters leave the queue, or none (NOT_FOUND naming the first missing).
    Their tasks stay DEAD; a run kept in memory only for them (pinned) may leave memory."""
    dead_letters = ctx.state.dead_letters
    for index, key in enumerate(cmd.tasks):
        if (key.run_id, key.task_name) not in dead_letters:
            return Rejected(Code.NOT_FOUND, f"tasks[{index}]: no dead letter for task "
                            f"{key.task_name!r} of run {key.run_id!r}")
    keys = tuple(dict.fromkeys((key.run_id, key.task_name) for key in cmd.tasks))
    for run_id, task_name in keys:
        del dead_letters[(run_id, task_name)]
        run = ctx.state.runs.get(run_id)
        if run is not None:
            _unpin_if_free(ctx, run)
    return Discarded(tasks=keys)


HANDLER_PAIRS = [(GrantLeases, _grant_leases), (CompleteTask, _complete_task), (FailTask, _fail_task), (ExpireLeases, _expire_leases), (CheckpointLeases, _checkpoint_leases), (ReplayDeadLetters, _replay_dead_letters), (DiscardDeadLetters, _discard_dead_letters), (CancelTask, _cancel_task)]
