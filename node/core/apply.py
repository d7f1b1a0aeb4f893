"""apply_batch: the replicated state machine's only transition function.

Runs on the Raft tick thread of every node (and again on journal replay). Pure: all
non-deterministic inputs are fields of the commands; business-rule violations are returned as
Rejected values and change nothing. One handler per command type, registered in HANDLERS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

from gnomon.node.core import access, spans
from gnomon.node.core.commands import (
    BackfillStep,
    Barrier,
    Batch,
    CancelBackfill,
    CancelRun,
    CancelTask,
    CheckpointLeases,
    Command,
    CompleteTask,
    CreateJob,
    CreateJobs,
    DeleteJob,
    ExpireLeases,
    FailTask,
    Fire,
    GrantLeases,
    LeaseGrant,
    ReplayDeadLetters,
    RerunRun,
    ResetCircuit,
    SetLimits,
    SetPaused,
    SetQueueCircuit,
    StartBackfill,
    TaskPayload,
    TriggerJob,
    UpdateJob,
)
from gnomon.node.core.dag import graph
from gnomon.node.core.errors import Code, Rejected, UnknownCommand
from gnomon.node.core.index import JobOrder
from gnomon.node.core.model import (
    CLOSED_CIRCUIT,
    DEFAULT_QUEUE,
    OVERLAP_POLICIES,
    TERMINAL_RUN_STATES,
    TERMINAL_TASK_STATES,
    Attempt,
    AttemptOutcome,
    Backfill,
    BackfillStatus,
    Circuit,
    CircuitBreaker,
    CircuitStatus,
    DeadLetter,
    DedupeEntry,
    Job,
    JobSpec,
    Limits,
    OverlapPolicy,
    QueueCircuit,
    Run,
    RunState,
    RunTrigger,
    State,
    TaskInstance,
    TaskState,
    queue_key,
)
from gnomon.node.core.results import (
    Done,
    Effects,
    Granted,
    JobReply,
    JobsReply,
    LimitsReply,
    Replayed,
    Reply,
    RunReply,
)
from gnomon.node.core.retry import backoff_ms, effective_max_attempts
from gnomon.node.core.transitions import (
    RunEvent,
    TaskEvent,
    move_run,
    move_task,
    track_open,
)
from gnomon.node.core.validate import (
    check_breaker,
    effective_buffer,
    effective_max_active_runs,
    queue_limit,
    validate_limits,
    validate_spec,
)

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


@dataclass(slots=True)
class Ctx:
    """What a handler works on: the state, this batch's effects and cluster time."""

    state: State
    effects: Effects
    now: int

    @property
    def limits(self) -> Limits:
        return self.state.limits


Handler = Callable[[Ctx, Any], Reply]


def new_state(limits: Limits | None = None) -> State:
    """The state of a fresh cluster (before the first log entry)."""
    return State() if limits is None else State(limits=limits)


def apply_batch(state: State, batch: Batch) -> tuple[list[Reply], Effects]:
    """Apply one Raft entry: advance cluster time, then every command in order.

    Raises UnknownCommand for a command type this build does not know (the node must stop).
    """
    state.clock_ms = max(state.clock_ms, batch.now_ms)
    ctx = Ctx(state=state, effects=Effects(), now=state.clock_ms)
    _trim_dedupe(ctx)
    replies = [apply_command(ctx, command) for command in batch.commands]
    return replies, ctx.effects


def apply_command(ctx: Ctx, command: Command) -> Reply:
    """One command, with request-id dedupe for the commands that carry one."""
    handler = HANDLERS.get(type(command))
    if handler is None:
        raise UnknownCommand(f"no handler for command type {type(command).__name__}")
    request_id: str = getattr(command, "request_id", "")
    if not request_id:
        return handler(ctx, command)
    entry = ctx.state.dedupe.get(request_id)
    if entry is not None:
        return cast(Reply, entry.reply)
    reply = handler(ctx, command)
    ctx.state.dedupe[request_id] = DedupeEntry(ctx.now, reply)
    _trim_dedupe(ctx)
    return reply


def _trim_dedupe(ctx: Ctx) -> None:
    """Forget the oldest request ids beyond the count bound or older than the age bound."""
    dedupe, limits = ctx.state.dedupe, ctx.limits
    oldest_kept = ctx.now - limits.dedupe_max_age_ms if limits.dedupe_max_age_ms > 0 else None
    while dedupe:
        first = next(iter(dedupe.values()))
        if len(dedupe) <= limits.dedupe_capacity and (
            oldest_kept is None or first.at_ms >= oldest_kept
        ):
            return
        dedupe.popitem(last=False)


# --- jobs ----------------------------------------------------------------------------------


def _create_job(ctx: Ctx, cmd: CreateJob) -> Reply:
    state, spec = ctx.state, cmd.spec
    rejected = (
        validate_spec(spec)
        or _check_name_free(state, spec)
        or _check_job_quota(state, spec.tenant, access.max_jobs(state.access, spec.tenant,
                                                                cmd.max_jobs_per_tenant))
        or access.check_payload_quota(state.access, spec.tenant, access.payload_bytes(spec))
    )
    if rejected:
        return rejected
    state.job_seq += 1
    job_id = f"j{state.job_seq}"
    state.jobs[job_id] = Job(
        job_id=job_id,
        spec=spec,
        version=1,
        next_fire_ms=cmd.next_fire_ms,
        paused=spec.paused,
        created_ms=ctx.now,
        updated_ms=ctx.now,
    )
    state.job_names[(spec.tenant, spec.name)] = job_id
    state.jobs_per_tenant[spec.tenant] = state.jobs_per_tenant.get(spec.tenant, 0) + 1
    state.access.add_payload(spec.tenant, access.payload_bytes(spec))
    index_job(state, state.job_seq, spec.tenant)
    ctx.effects.jobs.append(job_id)
    return JobReply(job_id=job_id, version=1)


def _create_jobs(ctx: Ctx, cmd: CreateJobs) -> Reply:
    """Each item on its own, in order: a rejected item changes nothing, the others apply."""
    return JobsReply(items=tuple(
        cast(JobReply | Rejected, _create_job(
            ctx, CreateJob("", item.spec, item.next_fire_ms, cmd.max_jobs_per_tenant)))
        for item in cmd.items))


def index_job(state: State, seq: int, tenant: str) -> None:
    """Add a job to the derived paging indexes (also used when a snapshot is restored)."""
    state.job_order.add(seq)
    order = state.tenant_job_order.get(tenant)
    if order is None:
        order = state.tenant_job_order[tenant] = JobOrder()
    order.add(seq)


def _unindex_job(state: State, tenant: str) -> None:
    def alive(seq: int) -> bool:
        return f"j{seq}" in state.jobs

    state.job_order.remove(alive)
    order = state.tenant_job_order[tenant]
    order.remove(alive)
    if not len(order):
        del state.tenant_job_order[tenant]


def _update_job(ctx: Ctx, cmd: UpdateJob) -> Reply:
    job = _find_job(ctx.state, cmd.job_id)
    if isinstance(job, Rejected):
        return job
    rejected = (
        _check_version(job, cmd.expected_version)
        or _check_same_identity(job, cmd.spec)
        or validate_spec(cmd.spec)
        or access.check_payload_quota(ctx.state.access, job.spec.tenant,
                                      access.payload_bytes(cmd.spec)
                                      - access.payload_bytes(job.spec))
    )
    if rejected:
        return rejected
    # An unchanged schedule keeps its slot: an already-due fire must not be lost.
    if cmd.spec.schedule != job.spec.schedule:
        job.next_fire_ms = cmd.next_fire_ms
        job.span_open = False  # the next fire's slot is no neighbour of the last one
    ctx.state.access.add_payload(job.spec.tenant, access.payload_bytes(cmd.spec)
                                 - access.payload_bytes(job.spec))
    job.spec = cmd.spec
    _bump_version(ctx, job)
    _start_queued(ctx, job.job_id)  # a raised max_active_runs lets them go
    return JobReply(job_id=job.job_id, version=job.version)


def _delete_job(ctx: Ctx, cmd: DeleteJob) -> Reply:
    state = ctx.state
    job = _find_job(state, cmd.job_id)
    if isinstance(job, Rejected):
        return job
    rejected = _check_version(job, cmd.expected_version)
    if rejected:
        return rejected
    _remove_job(ctx, job, cmd.cancel_running)
    return Done()


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


def _set_paused(ctx: Ctx, cmd: SetPaused) -> Reply:
    job = _find_job(ctx.state, cmd.job_id)
    if isinstance(job, Rejected):
        return job
    if job.paused == cmd.paused:
        return JobReply(job_id=job.job_id, version=job.version)
    job.paused = cmd.paused
    job.span_open = False  # the slots of the paused time never fire
    if not cmd.paused:
        # No catch-up of the paused period: resume at the leader's next slot after now.
        job.next_fire_ms = cmd.next_fire_ms
    _bump_version(ctx, job)
    return JobReply(job_id=job.job_id, version=job.version)


def _find_job(state: State, job_id: str) -> Job | Rejected:
    job = state.jobs.get(job_id)
    if job is None:
        return Rejected(Code.NOT_FOUND, f"job_id: no job {job_id!r}")
    return job


def _check_version(job: Job, expected: int) -> Rejected | None:
    if expected != 0 and expected != job.version:
        return Rejected(
            Code.FAILED_PRECONDITION,
            f"expected_version: job {job.job_id!r} is at version {job.version}, not {expected}",
        )
    return None


def _check_same_identity(job: Job, spec: JobSpec) -> Rejected | None:
    if spec.tenant != job.spec.tenant:
        return Rejected(
            Code.INVALID_ARGUMENT,
            f"spec.tenant: job {job.job_id!r} belongs to tenant {job.spec.tenant!r}, "
            f"not {spec.tenant!r} (a job cannot change tenant)",
        )
    if spec.name != job.spec.name:
        return Rejected(
            Code.INVALID_ARGUMENT,
            f"spec.name: job {job.job_id!r} is named {job.spec.name!r}, not {spec.name!r} "
            "(a job cannot be renamed)",
        )
    return None


def _check_name_free(state: State, spec: JobSpec) -> Rejected | None:
    if (spec.tenant, spec.name) in state.job_names:
        return Rejected(
            Code.ALREADY_EXISTS,
            f"spec.name: tenant {spec.tenant!r} already has a job named {spec.name!r}",
        )
    return None


def _check_job_quota(state: State, tenant: str, limit: int) -> Rejected | None:
    if limit <= 0:
        return None
    count = state.jobs_per_tenant.get(tenant, 0)
    if count >= limit:
        return Rejected(
            Code.RESOURCE_EXHAUSTED,
            f"spec.tenant: tenant {tenant!r} already has {count} jobs, the limit is {limit}",
        )
    return None


def _bump_version(ctx: Ctx, job: Job) -> None:
    job.version += 1
    job.updated_ms = ctx.now
    ctx.effects.jobs.append(job.job_id)


# --- runs ----------------------------------------------------------------------------------


def _fire(ctx: Ctx, cmd: Fire) -> Reply:
    job = ctx.state.jobs.get(cmd.job_id)
    # Compare-and-set on the slot: a duplicate or stale Fire (deposed leader) is a no-op.
    if (
        job is None
        or job.paused
        or cmd.scheduled_for_ms == 0
        or job.next_fire_ms != cmd.scheduled_for_ms
    ):
        return RunReply(run_id="")
    job.next_fire_ms = cmd.next_fire_ms
    ctx.effects.jobs.append(job.job_id)
    run_id = f"{job.job_id}@{cmd.scheduled_for_ms}"
    if cmd.scheduled_for_ms <= job.last_fired_ms or run_id in ctx.state.runs:
        return RunReply(run_id="")
    previous_ms, job.last_fired_ms = job.last_fired_ms, cmd.scheduled_for_ms
    held = "" if cmd.skip else _circuit_holds(ctx, job) or _queue_circuit_holds(ctx, job)
    if cmd.skip or held:
        _record_skipped_run(ctx, job, run_id, cmd.scheduled_for_ms, RunTrigger.SCHEDULE,
                            held or "misfire")
        if held:
            ctx.effects.circuit_skipped.append("queue" if ": queue " in held else "job")
    else:
        _admit(ctx, job, run_id, cmd.scheduled_for_ms, RunTrigger.SCHEDULE,
               job.spec.overlap_policy)
    run = ctx.state.runs.get(run_id)
    _note_fired(job, cmd.scheduled_for_ms, previous_ms,
                ran=run is not None and run.state != RunState.SKIPPED)
    if run is not None:
        run.fire_delay_ms = max(0, cmd.delay_ms)
        if run.state in (RunState.RUNNING, RunState.QUEUED):
            if job.circuit.status == CircuitStatus.HALF_OPEN and not job.circuit.probe_run_id:
                job.circuit = replace(job.circuit, probe_run_id=run_id)
            _claim_queue_probes(ctx, job, run_id)
            job.runs_started += 1
            if job.spec.max_runs and job.runs_started >= job.spec.max_runs:
                job.next_fire_ms = 0  # max_runs reached: nothing left to fire
    return RunReply(run_id=run_id)


def _note_fired(job: Job, slot_ms: int, previous_ms: int, *, ran: bool) -> None:
    """A scheduled slot that ran joins the job's ran spans (extending the last one while
    the fires before it ran too); a skipped one closes the span."""
    if not ran:
        job.span_open = False
        return
    lo = previous_ms if job.span_open and previous_ms else slot_ms
    job.ran_spans = spans.add(job.ran_spans, lo, slot_ms)
    job.span_open = True


def _trigger_job(ctx: Ctx, cmd: TriggerJob) -> Reply:
    state = ctx.state
    job = _find_job(state, cmd.job_id)
    if isinstance(job, Rejected):
        return job
    policy = cmd.overlap_policy or job.spec.overlap_policy
    if policy not in OVERLAP_POLICIES:
        return Rejected(Code.INVALID_ARGUMENT,
                        f"overlap_policy: must be one of {', '.join(OVERLAP_POLICIES)}, "
                        f"got {policy!r}")
    spec = _with_payloads(job.spec, cmd.payloads)
    if isinstance(spec, Rejected):
        return spec
    state.manual_seq += 1
    run_id = f"{job.job_id}@manual-{state.manual_seq}"
    _admit(ctx, job, run_id, ctx.now, RunTrigger.MANUAL, policy)
    run = state.runs.get(run_id)  # a skipped run may have left memory at once (retention)
    if run is not None:
        run.spec, run.params = spec, cmd.params  # the run's own payloads (its parameters)
    return RunReply(run_id=run_id)


def _with_payloads(spec: JobSpec, payloads: tuple[TaskPayload, ...]) -> JobSpec | Rejected:
    """`spec` with the listed tasks' payloads replaced (a manual run's parameters merged in
    by the leader); every name must be a task of the job."""
    if not payloads:
        return spec
    given = {p.task_name: p.payload for p in payloads}
    names = {t.name for t in spec.tasks}
    for index, name in enumerate(given):
        if name not in names:
            return Rejected(Code.INVALID_ARGUMENT,
                            f"payloads[{index}].task_name: the job has no task {name!r}")
    return replace(spec, tasks=tuple(
        replace(t, payload=given[t.name]) if t.name in given else t for t in spec.tasks))


# --- overlap -------------------------------------------------------------------------------


def _admit(ctx: Ctx, job: Job, run_id: str, slot: int, trigger: str, policy: str) -> None:
    """A fire of `job` (scheduled, catch-up or manual) under overlap `policy`: start its
    run, or, while the job has its max_active_runs active, skip, buffer, or make room."""
    limit = effective_max_active_runs(job.spec, policy)
    if not limit:
        _start_run(ctx, job, run_id, slot, trigger)
        return
    running, queued = _open_runs(ctx.state, job.job_id)
    if len(running) < limit and not queued:
        _start_run(ctx, job, run_id, slot, trigger)
    elif policy == OverlapPolicy.SKIP:
        _record_skipped_run(ctx, job, run_id, slot, trigger, "overlap")
    elif policy in (OverlapPolicy.BUFFER_ONE, OverlapPolicy.BUFFER_ALL):
        if len(queued) >= effective_buffer(job.spec, policy):
            _record_skipped_run(ctx, job, run_id, slot, trigger,
                                f"overlap: buffer full ({len(queued)} queued)")
        else:
            _queue_run(ctx, job, run_id, slot, trigger, len(running))
    else:  # CANCEL_OTHER, TERMINATE_OTHER: this fire waits while room is made for it
        for old in queued:
            _end_queued(ctx, old, f"overlap: superseded by {run_id}")
        _queue_run(ctx, job, run_id, slot, trigger, len(running))
        terminate = policy == OverlapPolicy.TERMINATE_OTHER
        verb = "terminated" if terminate else "cancelled"
        for old in running[: len(running) - limit + 1]:  # the oldest, as many as needed
            if old.cancel_requested and not terminate:
                continue
            old.reason, old.cancel_requested = f"overlap: {verb} for {run_id}", True
            _cancel_tasks(ctx, old, old.reason, leased_too=terminate)
            _finish_if_done(ctx, old)  # ended (nothing leased): the queued run starts


def _open_runs(state: State, job_id: str) -> tuple[list[Run], list[Run]]:
    """The job's RUNNING and QUEUED runs, each oldest first (a replicated order: the derived
    indexes' own order differs after a restore)."""
    def ordered(table: dict[str, dict[str, None]]) -> list[Run]:
        runs = [state.runs[run_id] for run_id in table.get(job_id, ())]
        runs.sort(key=lambda r: (r.created_ms, r.scheduled_for_ms, r.run_id))
        return runs

    return ordered(state.running_by_job), ordered(state.queued_by_job)


def _queue_run(ctx: Ctx, job: Job, run_id: str, slot: int, trigger: str, active: int) -> None:
    run = _new_run(ctx, job, run_id, slot, trigger, RunState.QUEUED)
    run.reason = f"overlap: waiting for {active} active run{'s' if active != 1 else ''}"


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


def _record_skipped_run(ctx: Ctx, job: Job, run_id: str, scheduled_for_ms: int,
                        trigger: str, reason: str) -> None:
    run = _new_run(ctx, job, run_id, scheduled_for_ms, trigger)
    move_run(ctx.state, run, RunEvent.SKIP)
    run.reason, run.finished_ms = reason, ctx.now
    _enforce_retention(ctx, job.job_id)


# --- leases and task outcomes --------------------------------------------------------------


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


def _make_ready(ctx: Ctx, run: Run, inst: TaskInstance,
                event: str = TaskEvent.DEPS_MET) -> None:
    move_task(inst, event)
    inst.ready_ms = ctx.now
    ctx.effects.dispatchable.append((run.run_id, inst.task_name))


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


# --- dead letters --------------------------------------------------------------------------


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


# --- circuit breaker -------------------------------------------------------------------------


def _circuit_holds(ctx: Ctx, job: Job) -> str:
    """Why the job's breaker holds this scheduled fire ("": it may run). An open breaker
    whose cool-down passed turns half-open: this fire is its probe."""
    breaker, circuit = job.spec.circuit_breaker, job.circuit
    if breaker is None or circuit.status == CircuitStatus.CLOSED:
        return ""
    if circuit.status == CircuitStatus.OPEN:
        if ctx.now < circuit.opened_ms + breaker.cooldown_ms:
            return "circuit open"
        job.circuit = replace(circuit, status=CircuitStatus.HALF_OPEN, probe_run_id="")
        return ""
    probe = circuit.probe_run_id
    if probe and (probe in ctx.state.running_by_job.get(job.job_id, ())
                  or probe in ctx.state.queued_by_job.get(job.job_id, ())):
        return f"circuit half-open: probe {probe} running"
    # No probe, or it ended without a verdict (cancelled): this fire is the next probe.
    job.circuit = replace(circuit, probe_run_id="")
    return ""


def _circuit_records(ctx: Ctx, run: Run) -> None:
    """A scheduled run that succeeded or failed moves its job's breaker."""
    job = ctx.state.jobs.get(run.job_id)
    if job is None or job.spec.circuit_breaker is None or run.trigger != RunTrigger.SCHEDULE:
        return
    if run.state not in (RunState.SUCCEEDED, RunState.FAILED):
        return
    job.circuit = _next_circuit(ctx, job.spec.circuit_breaker, job.circuit,
                                run.state == RunState.FAILED, run.run_id, ("job", job.job_id))


def _next_circuit(ctx: Ctx, breaker: CircuitBreaker, circuit: Circuit, failed: bool,
                  run_id: str, name: tuple[str, str]) -> Circuit:
    """The breaker's state after a finished run's verdict: the half-open probe closes or
    reopens it; while closed, the window opens it at failure_percent of window_runs."""
    if circuit.status == CircuitStatus.HALF_OPEN and run_id == circuit.probe_run_id:
        if not failed:
            return replace(circuit, status=CircuitStatus.CLOSED, probe_run_id="",
                           recent_failures=(), opened_ms=0)
        ctx.effects.circuit_opened.append(name)
        return replace(circuit, status=CircuitStatus.OPEN, opened_ms=ctx.now, probe_run_id="",
                       opens=circuit.opens + 1)
    if circuit.status != CircuitStatus.CLOSED:
        return circuit
    recent = (*circuit.recent_failures, failed)[-max(1, breaker.window_runs):]
    if (len(recent) >= breaker.window_runs
            and 100 * sum(recent) >= breaker.failure_percent * len(recent)):
        ctx.effects.circuit_opened.append(name)
        return replace(circuit, status=CircuitStatus.OPEN, opened_ms=ctx.now,
                       recent_failures=(), opens=circuit.opens + 1)
    return replace(circuit, recent_failures=recent)


# --- circuit breaker per queue ---------------------------------------------------------------


def _job_queues(spec: JobSpec) -> list[str]:
    """The queues of the job's tasks, in task order, each once."""
    return list(dict.fromkeys(t.queue or DEFAULT_QUEUE for t in spec.tasks))


def _run_open(state: State, run_id: str) -> bool:
    run = state.runs.get(run_id)
    return run is not None and run.state in (RunState.RUNNING, RunState.QUEUED)


def _queue_circuit_holds(ctx: Ctx, job: Job) -> str:
    """Why a breaker of one of the job's queues holds this scheduled fire ("": none). An
    open one whose cool-down passed turns half-open: this fire may be its probe."""
    table = ctx.state.queue_circuits
    if not table:
        return ""
    for queue in _job_queues(job.spec):
        key = queue_key(job.spec.tenant, queue)
        qc = table.get(key)
        if qc is None or qc.circuit.status == CircuitStatus.CLOSED:
            continue
        circuit = qc.circuit
        if circuit.status == CircuitStatus.OPEN:
            if ctx.now < circuit.opened_ms + qc.breaker.cooldown_ms:
                return f"circuit open: queue {queue}"
            table[key] = replace(qc, circuit=replace(circuit, status=CircuitStatus.HALF_OPEN,
                                                     probe_run_id=""))
            continue
        if circuit.probe_run_id and _run_open(ctx.state, circuit.probe_run_id):
            return f"circuit half-open: queue {queue}: probe {circuit.probe_run_id} running"
        table[key] = replace(qc, circuit=replace(circuit, probe_run_id=""))
    return ""


def _claim_queue_probes(ctx: Ctx, job: Job, run_id: str) -> None:
    """A started scheduled run is the probe of every half-open breaker of its queues."""
    table = ctx.state.queue_circuits
    if not table:
        return
    for queue in _job_queues(job.spec):
        key = queue_key(job.spec.tenant, queue)
        qc = table.get(key)
        if qc is not None and qc.circuit.status == CircuitStatus.HALF_OPEN \
                and not qc.circuit.probe_run_id:
            table[key] = replace(qc, circuit=replace(qc.circuit, probe_run_id=run_id))


def _queue_verdicts(run: Run) -> dict[str, bool]:
    """Per queue of the run's tasks: True if one of its tasks there died, False if all of
    them succeeded (a queue whose tasks were only cancelled or blocked gives no verdict)."""
    verdicts: dict[str, bool] = {}
    undecided: dict[str, None] = {}
    for task in run.spec.tasks:
        queue, state = task.queue or DEFAULT_QUEUE, run.tasks[task.name].state
        if state == TaskState.DEAD:
            verdicts[queue] = True
        elif state != TaskState.SUCCEEDED:
            undecided[queue] = None
        elif queue not in verdicts:
            verdicts[queue] = False
    return {q: v for q, v in verdicts.items() if v or q not in undecided}


def _queue_circuit_records(ctx: Ctx, run: Run) -> None:
    """A scheduled run that succeeded or failed moves the breakers of its queues."""
    table = ctx.state.queue_circuits
    if not table or run.trigger != RunTrigger.SCHEDULE:
        return
    if run.state not in (RunState.SUCCEEDED, RunState.FAILED):
        return
    for queue, failed in _queue_verdicts(run).items():
        key = queue_key(run.tenant, queue)
        qc = table.get(key)
        if qc is not None:
            table[key] = replace(qc, circuit=_next_circuit(ctx, qc.breaker, qc.circuit, failed,
                                                           run.run_id, ("queue", key)))


def _set_queue_circuit(ctx: Ctx, cmd: SetQueueCircuit) -> Reply:
    table, key = ctx.state.queue_circuits, queue_key(cmd.tenant, cmd.queue)
    if not cmd.tenant:
        return Rejected(Code.INVALID_ARGUMENT, "tenant: required")
    if not cmd.queue:
        return Rejected(Code.INVALID_ARGUMENT, "queue: required")
    old = table.get(key)
    if cmd.breaker is None:
        if old is None:
            return Rejected(Code.NOT_FOUND, f"queue: queue {cmd.queue!r} of tenant "
                            f"{cmd.tenant!r} has no circuit breaker")
        del table[key]
        return Done()
    rejected = check_breaker(cmd.breaker, "breaker")
    if rejected:
        return rejected
    if old is not None and old.breaker == cmd.breaker:
        return Done()  # the same rule again keeps the state
    opens = old.circuit.opens if old is not None else 0
    table[key] = QueueCircuit(cmd.tenant, cmd.queue, cmd.breaker,
                              replace(CLOSED_CIRCUIT, opens=opens))
    return Done()


def _reset_circuit(ctx: Ctx, cmd: ResetCircuit) -> Reply:
    if cmd.queue:
        key = queue_key(cmd.tenant, cmd.queue)
        qc = ctx.state.queue_circuits.get(key)
        if qc is None:
            return Rejected(Code.NOT_FOUND, f"queue: queue {cmd.queue!r} of tenant "
                            f"{cmd.tenant!r} has no circuit breaker")
        ctx.state.queue_circuits[key] = replace(
            qc, circuit=replace(CLOSED_CIRCUIT, opens=qc.circuit.opens))
        return Done()
    job = _find_job(ctx.state, cmd.job_id)
    if isinstance(job, Rejected):
        return job
    job.circuit = replace(CLOSED_CIRCUIT, opens=job.circuit.opens)
    ctx.effects.jobs.append(job.job_id)
    return JobReply(job_id=job.job_id, version=job.version)


# --- backfill --------------------------------------------------------------------------------


def _start_backfill(ctx: Ctx, cmd: StartBackfill) -> Reply:
    job = _find_job(ctx.state, cmd.job_id)
    if isinstance(job, Rejected):
        return job
    rejected = _check_backfill(ctx, job, cmd)
    if rejected:
        return rejected
    done = cmd.total_slots == 0
    number = job.backfill.number + 1 if job.backfill is not None else 1
    job.backfill = Backfill(
        number=number, from_ms=cmd.from_ms, to_ms=cmd.to_ms, next_slot_ms=cmd.from_ms,
        total_slots=cmd.total_slots, overlap_policy=cmd.overlap_policy,
        status=BackfillStatus.DONE if done else BackfillStatus.RUNNING,
        started_ms=ctx.now, finished_ms=ctx.now if done else 0)
    ctx.effects.jobs.append(job.job_id)
    ctx.effects.backfills.append(job.job_id)
    return JobReply(job_id=job.job_id, version=job.version)


def _check_backfill(ctx: Ctx, job: Job, cmd: StartBackfill) -> Rejected | None:
    if cmd.overlap_policy and cmd.overlap_policy not in OVERLAP_POLICIES:
        return Rejected(Code.INVALID_ARGUMENT,
                        f"overlap_policy: must be one of {', '.join(OVERLAP_POLICIES)}, "
                        f"got {cmd.overlap_policy!r}")
    if cmd.from_ms < 0:
        return Rejected(Code.INVALID_ARGUMENT, f"from_ms: must be >= 0, got {cmd.from_ms}")
    if cmd.to_ms <= cmd.from_ms:
        return Rejected(Code.INVALID_ARGUMENT, f"to_ms: must be after from_ms ({cmd.from_ms}), "
                        f"got {cmd.to_ms}")
    if cmd.to_ms > ctx.now:
        return Rejected(Code.INVALID_ARGUMENT, f"to_ms: must not be after now ({ctx.now}), got "
                        f"{cmd.to_ms}: slots to come are the schedule's")
    if cmd.total_slots < 0:
        return Rejected(Code.INVALID_ARGUMENT,
                        f"total_slots: must be >= 0, got {cmd.total_slots}")
    bf = job.backfill
    if bf is not None and bf.status == BackfillStatus.RUNNING:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"job_id: job {job.job_id!r} has a backfill running ({bf.created} runs "
                        f"created, {bf.skipped} slots skipped of {bf.total_slots}): cancel it "
                        "first")
    return None


def _backfill_step(ctx: Ctx, cmd: BackfillStep) -> Reply:
    state = ctx.state
    job = state.jobs.get(cmd.job_id)
    bf = job.backfill if job is not None else None
    if (job is None or bf is None or bf.status != BackfillStatus.RUNNING
            or bf.next_slot_ms != cmd.cursor_ms):
        return Done()  # a retried or stale step (deposed leader, cancelled): a no-op
    last = cmd.cursor_ms - 1
    for index, slot in enumerate(cmd.slots_ms):
        if slot <= last or slot >= bf.to_ms:
            return Rejected(Code.INVALID_ARGUMENT,
                            f"slots_ms[{index}]: {slot} is not after {last} and before "
                            f"to_ms {bf.to_ms}")
        last = slot
    if cmd.next_cursor_ms <= last:
        return Rejected(Code.INVALID_ARGUMENT,
                        f"next_cursor_ms: must be after the last slot {last}, got "
                        f"{cmd.next_cursor_ms}")
    created, skipped, span_hi = bf.created, bf.skipped, bf.span_hi_ms
    policy = bf.overlap_policy or job.spec.overlap_policy
    for slot in cmd.slots_ms:
        if spans.covers(job.ran_spans, slot):
            if span_hi:  # consecutive slots: nothing between them to leave out
                job.ran_spans = spans.add(job.ran_spans, span_hi, slot)
            skipped, span_hi = skipped + 1, slot  # it ran already: never twice
            continue
        run_id = f"{job.job_id}@backfill-{bf.number}-{slot}"
        if (job.next_fire_ms and slot >= job.next_fire_ms) or slot > ctx.now \
                or run_id in state.runs:
            skipped, span_hi = skipped + 1, 0  # the schedule's own slot
            continue
        _admit(ctx, job, run_id, slot, RunTrigger.BACKFILL, policy)
        run = state.runs.get(run_id)
        if run is None or run.state == RunState.SKIPPED:
            skipped, span_hi = skipped + 1, 0  # the overlap policy skipped it
            continue
        created += 1
        job.ran_spans = spans.add(job.ran_spans, span_hi or slot, slot)
        span_hi = slot
    done = cmd.done or cmd.next_cursor_ms >= bf.to_ms
    job.backfill = replace(
        bf, next_slot_ms=min(cmd.next_cursor_ms, bf.to_ms), created=created, skipped=skipped,
        span_hi_ms=span_hi, status=BackfillStatus.DONE if done else BackfillStatus.RUNNING,
        finished_ms=ctx.now if done else 0)
    ctx.effects.backfills.append(job.job_id)
    return Done()


def _cancel_backfill(ctx: Ctx, cmd: CancelBackfill) -> Reply:
    job = _find_job(ctx.state, cmd.job_id)
    if isinstance(job, Rejected):
        return job
    bf = job.backfill
    if bf is None or bf.status != BackfillStatus.RUNNING:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"job_id: job {job.job_id!r} has no backfill running")
    job.backfill = replace(bf, status=BackfillStatus.CANCELLED, finished_ms=ctx.now)
    ctx.effects.jobs.append(job.job_id)
    ctx.effects.backfills.append(job.job_id)
    return JobReply(job_id=job.job_id, version=job.version)


# --- re-runs and task-level cancel ----------------------------------------------------------

_RERUNNABLE = (TaskState.DEAD, TaskState.CANCELLED, TaskState.UPSTREAM_FAILED)


def _rerun_run(ctx: Ctx, cmd: RerunRun) -> Reply:
    state = ctx.state
    run = state.runs.get(cmd.run_id)
    if run is None:
        return Rejected(Code.NOT_FOUND, f"run_id: no run {cmd.run_id!r} in memory (runs that "
                        "moved to the history store cannot be re-run)")
    if run.job_id not in state.jobs:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"run_id: the job of run {run.run_id!r} was deleted")
    if run.state not in (RunState.RUNNING, RunState.FAILED, RunState.CANCELLED):
        return Rejected(Code.FAILED_PRECONDITION,
                        f"run_id: run {run.run_id!r} is {run.state}: only a failed, cancelled "
                        "or running run is re-run")
    dag = graph(run.spec)
    for index, name in enumerate(cmd.task_names):
        inst = run.tasks.get(name)
        if inst is None:
            return Rejected(Code.NOT_FOUND,
                            f"task_names[{index}]: run {run.run_id!r} has no task {name!r}")
        if inst.state not in _RERUNNABLE:
            return Rejected(Code.FAILED_PRECONDITION,
                            f"task_names[{index}]: task {name!r} is {inst.state}: only a dead, "
                            "cancelled or upstream-failed task is retried")
    chosen = dict.fromkeys(cmd.task_names) if cmd.task_names else dict.fromkeys(
        n for n, i in run.tasks.items() if i.state in _RERUNNABLE)
    for name in list(chosen):  # the tasks they block run again too
        for below in dag.descendants(name):
            if run.tasks[below].state in _RERUNNABLE:
                chosen[below] = None
    if not chosen:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"run_id: run {run.run_id!r} has no failed, cancelled or "
                        "upstream-failed task to re-run")
    for name in dag.order:
        if name not in chosen:
            continue
        inst = run.tasks[name]
        ctx.state.dead_letters.pop((run.run_id, name), None)
        move_task(inst, TaskEvent.RERUN)
        inst.attempt, inst.retry_at_ms, inst.finished_ms = 0, 0, 0
    for name in run.tasks:
        inst = run.tasks[name]
        if name in chosen and all(run.tasks[d].state == TaskState.SUCCEEDED
                                  for d in dag.deps[name]):
            _make_ready(ctx, run, inst)
    run.cancel_requested = False
    if run.state != RunState.RUNNING:
        move_run(state, run, RunEvent.REOPEN)
        run.finished_ms, run.reason = 0, ""
    pinned = state.pinned.get(run.job_id)
    if pinned and run.run_id in pinned:  # running again: it rejoins the order when it ends
        del pinned[run.run_id]
        if not pinned:
            del state.pinned[run.job_id]
    return RunReply(run_id=run.run_id)


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


def _barrier(ctx: Ctx, cmd: Barrier) -> Reply:
    return Done()


# --- limits --------------------------------------------------------------------------------

def _set_limits(ctx: Ctx, cmd: SetLimits) -> Reply:
    state = ctx.state
    if cmd.expected_version and cmd.expected_version != state.limits_version:
        return Rejected(
            Code.FAILED_PRECONDITION,
            f"expected_version: the limits are at version {state.limits_version}, "
            f"not {cmd.expected_version}",
        )
    if cmd.bootstrap and state.limits_version:
        return LimitsReply(version=state.limits_version)  # set already: the bootstrap is late
    rejected = validate_limits(cmd.limits)
    if rejected:
        return rejected
    old, state.limits = state.limits, cmd.limits
    state.limits_version += 1
    _trim_dedupe(ctx)
    _bound_dead_letters(ctx)
    if (cmd.limits.runs_retained_per_job < old.runs_retained_per_job
            or cmd.limits.max_attempt_records < old.max_attempt_records):
        _trim_all_runs(ctx)
    return LimitsReply(version=state.limits_version)


def _trim_all_runs(ctx: Ctx) -> None:
    """Lowered retention or attempt bounds apply to what is already there: O(runs), an
    administrator's rare command."""
    keep = ctx.limits.max_attempt_records
    for run in ctx.state.runs.values():
        for inst in run.tasks.values():
            if len(inst.attempts) > keep:
                inst.attempts = inst.attempts[len(inst.attempts) - keep :] if keep else ()
    for job_id in list(ctx.state.retained):
        _enforce_retention(ctx, job_id)


# --- run completion and retention ----------------------------------------------------------


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


def handler_table(pairs: list[tuple[type, Handler]]) -> dict[type, Handler]:
    """The command type -> handler table; a type registered twice is a bug, not a dict key
    that quietly wins."""
    table: dict[type, Handler] = {}
    for command_type, handler in pairs:
        if command_type in table:
            raise ValueError(f"HANDLERS: {command_type.__name__} registered twice")
        table[command_type] = handler
    return table


HANDLERS: dict[type, Handler] = handler_table([
    (CreateJob, _create_job),
    (CreateJobs, _create_jobs),
    (UpdateJob, _update_job),
    (DeleteJob, _delete_job),
    (SetPaused, _set_paused),
    (Fire, _fire),
    (TriggerJob, _trigger_job),
    (CancelRun, _cancel_run),
    (GrantLeases, _grant_leases),
    (CompleteTask, _complete_task),
    (FailTask, _fail_task),
    (ExpireLeases, _expire_leases),
    (ReplayDeadLetters, _replay_dead_letters),
    (Barrier, _barrier),
    (SetLimits, _set_limits),
    (CheckpointLeases, _checkpoint_leases),
    (RerunRun, _rerun_run),
    (CancelTask, _cancel_task),
    (ResetCircuit, _reset_circuit),
    (StartBackfill, _start_backfill),
    (BackfillStep, _backfill_step),
    (CancelBackfill, _cancel_backfill),
    (SetQueueCircuit, _set_queue_circuit),
    *access.HANDLER_PAIRS,
])
