"""Fire and TriggerJob: a slot's compare-and-set, the ran spans, and admission of a run under
the job's overlap policy (`_admit`: start, queue, skip, or make room).

Imports `runs`, `circuits` and `common`; backfill.py admits its slots through `_admit`.
"""

from __future__ import annotations

from dataclasses import replace

from gnomon.node.core import spans
from gnomon.node.core.circuits import _circuit_holds, _claim_queue_probes, _queue_circuit_holds
from gnomon.node.core.commands import Fire, TaskPayload, TriggerJob
from gnomon.node.core.common import Ctx, _find_job
from gnomon.node.core.errors import Code, Rejected
from gnomon.node.core.model import (
    OVERLAP_POLICIES,
    CircuitStatus,
    Job,
    JobSpec,
    OverlapPolicy,
    RunState,
    RunTrigger,
)
from gnomon.node.core.results import Reply, RunReply
from gnomon.node.core.runs import (
    _cancel_tasks,
    _end_queued,
    _finish_if_done,
    _new_run,
    _open_runs,
    _record_skipped_run,
    _start_run,
)
from gnomon.node.core.validate import effective_buffer, effective_max_active_runs


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


def _queue_run(ctx: Ctx, job: Job, run_id: str, slot: int, trigger: str, active: int) -> None:
    run = _new_run(ctx, job, run_id, slot, trigger, RunState.QUEUED)
    run.reason = f"overlap: waiting for {active} active run{'s' if active != 1 else ''}"


HANDLER_PAIRS = [(Fire, _fire), (TriggerJob, _trigger_job)]
