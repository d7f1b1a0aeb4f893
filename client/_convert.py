"""The one place that converts between protobuf messages and the public dataclasses.

Public -> proto -> public is the identity for every model (tested). Proto -> public normalises
the wire's "empty means default" fields (tenant, queue, timezone, misfire policy), so the reverse
trip yields the normalised message. Enum values a newer server may send map to ``UNSPECIFIED``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from typing import Any, cast

import grpc

from gnomon.v1 import api_pb2, types_pb2, worker_pb2

from ._errors import InvalidArgument, error_for_status
from ._models import (
    CLUSTER_LIMIT_NAMES,
    Attempt,
    AttemptOutcome,
    Backfill,
    CircuitBreaker,
    CircuitState,
    ClusterLimits,
    ClusterStatus,
    Consistency,
    CreateJobResult,
    CronDialect,
    CronSchedule,
    DeadLetter,
    DstAmbiguous,
    DstNonexistent,
    IntervalSchedule,
    Job,
    JobSpec,
    LeaderChange,
    LimitsUpdate,
    MisfirePolicy,
    NodeStatus,
    OnceSchedule,
    OverlapPolicy,
    PreviewFire,
    QueueCircuit,
    RetryPolicy,
    Run,
    RunPage,
    RunSort,
    RunState,
    RunTrigger,
    RunWait,
    Schedule,
    SchedulePreview,
    TaskInstance,
    TaskRef,
    TaskSpec,
    TaskState,
)
from ._specs import DEFAULT_QUEUE, DEFAULT_TENANT
from .worker.context import LeaseState, OutputTail, TaskContext, TraceParent

_MISFIRE = {
    MisfirePolicy.RUN_ALL: types_pb2.MISFIRE_POLICY_RUN_ALL,
    MisfirePolicy.RUN_LATEST: types_pb2.MISFIRE_POLICY_RUN_LATEST,
    MisfirePolicy.SKIP: types_pb2.MISFIRE_POLICY_SKIP,
}
_MISFIRE_BACK = {v: k for k, v in _MISFIRE.items()}

# The generated stubs type an enum field as its enum class; Value() is typed as a plain int.
_DIALECT: dict[CronDialect | None, types_pb2.CronDialect] = {
    None: types_pb2.CRON_DIALECT_UNSPECIFIED,
    CronDialect.SECONDS_LAST: types_pb2.CRON_DIALECT_SECONDS_LAST,
    CronDialect.SECONDS_FIRST: types_pb2.CRON_DIALECT_SECONDS_FIRST,
}
_DIALECT_BACK = {v: k for k, v in _DIALECT.items() if k is not None}
_DST_NONEXISTENT: dict[DstNonexistent | None, types_pb2.DstNonexistentPolicy] = {
    None: types_pb2.DST_NONEXISTENT_POLICY_UNSPECIFIED,
    **{p: cast("types_pb2.DstNonexistentPolicy",
               types_pb2.DstNonexistentPolicy.Value(f"DST_NONEXISTENT_POLICY_{p.name}"))
       for p in DstNonexistent},
}
_DST_NONEXISTENT_BACK = {v: k for k, v in _DST_NONEXISTENT.items() if k is not None}
_DST_AMBIGUOUS: dict[DstAmbiguous | None, types_pb2.DstAmbiguousPolicy] = {
    None: types_pb2.DST_AMBIGUOUS_POLICY_UNSPECIFIED,
    **{p: cast("types_pb2.DstAmbiguousPolicy",
               types_pb2.DstAmbiguousPolicy.Value(f"DST_AMBIGUOUS_POLICY_{p.name}"))
       for p in DstAmbiguous},
}
_DST_AMBIGUOUS_BACK = {v: k for k, v in _DST_AMBIGUOUS.items() if k is not None}

_CIRCUIT_BACK = {types_pb2.CIRCUIT_STATUS_CLOSED: "closed", types_pb2.CIRCUIT_STATUS_OPEN: "open",
                 types_pb2.CIRCUIT_STATUS_HALF_OPEN: "half_open"}

# Jitter and bounds: the same scalars on both sides.
_TIMING = ("jitter_ms", "start_at_ms", "end_at_ms", "max_runs", "delete_after_success")

_OVERLAP = {
    p: cast("types_pb2.OverlapPolicy", types_pb2.OverlapPolicy.Value(f"OVERLAP_POLICY_{p.name}"))
    for p in OverlapPolicy
}
_OVERLAP_BACK = {v: k for k, v in _OVERLAP.items()}


def overlap_to_proto(policy: OverlapPolicy | str | None) -> types_pb2.OverlapPolicy:
    """A trigger's override: None is UNSPECIFIED (the job's policy)."""
    return (types_pb2.OVERLAP_POLICY_UNSPECIFIED if policy is None
            else _OVERLAP[OverlapPolicy(policy)])

_RUN_STATE = {
    RunState.UNSPECIFIED: types_pb2.RUN_STATE_UNSPECIFIED,
    RunState.RUNNING: types_pb2.RUN_STATE_RUNNING,
    RunState.SUCCEEDED: types_pb2.RUN_STATE_SUCCEEDED,
    RunState.FAILED: types_pb2.RUN_STATE_FAILED,
    RunState.CANCELLED: types_pb2.RUN_STATE_CANCELLED,
    RunState.SKIPPED: types_pb2.RUN_STATE_SKIPPED,
    RunState.QUEUED: types_pb2.RUN_STATE_QUEUED,
}
_RUN_STATE_BACK = {v: k for k, v in _RUN_STATE.items()}

_RUN_TRIGGER = {
    RunTrigger.UNSPECIFIED: types_pb2.RUN_TRIGGER_UNSPECIFIED,
    RunTrigger.SCHEDULE: types_pb2.RUN_TRIGGER_SCHEDULE,
    RunTrigger.MANUAL: types_pb2.RUN_TRIGGER_MANUAL,
    RunTrigger.BACKFILL: types_pb2.RUN_TRIGGER_BACKFILL,
}
_RUN_TRIGGER_BACK = {v: k for k, v in _RUN_TRIGGER.items()}

_TASK_STATE = {
    TaskState.UNSPECIFIED: types_pb2.TASK_STATE_UNSPECIFIED,
    TaskState.PENDING: types_pb2.TASK_STATE_PENDING,
    TaskState.READY: types_pb2.TASK_STATE_READY,
    TaskState.LEASED: types_pb2.TASK_STATE_LEASED,
    TaskState.RETRY_WAIT: types_pb2.TASK_STATE_RETRY_WAIT,
    TaskState.SUCCEEDED: types_pb2.TASK_STATE_SUCCEEDED,
    TaskState.DEAD: types_pb2.TASK_STATE_DEAD,
    TaskState.UPSTREAM_FAILED: types_pb2.TASK_STATE_UPSTREAM_FAILED,
    TaskState.CANCELLED: types_pb2.TASK_STATE_CANCELLED,
}
_TASK_STATE_BACK = {v: k for k, v in _TASK_STATE.items()}

_ATTEMPT_OUTCOME = {
    AttemptOutcome.UNSPECIFIED: types_pb2.ATTEMPT_OUTCOME_UNSPECIFIED,
    AttemptOutcome.SUCCEEDED: types_pb2.ATTEMPT_OUTCOME_SUCCEEDED,
    AttemptOutcome.FAILED: types_pb2.ATTEMPT_OUTCOME_FAILED,
    AttemptOutcome.EXPIRED: types_pb2.ATTEMPT_OUTCOME_EXPIRED,
    AttemptOutcome.CANCELLED: types_pb2.ATTEMPT_OUTCOME_CANCELLED,
}
_ATTEMPT_OUTCOME_BACK = {v: k for k, v in _ATTEMPT_OUTCOME.items()}

_CONSISTENCY: dict[str, Any] = {
    "linearizable": api_pb2.CONSISTENCY_LINEARIZABLE,
    "stale": api_pb2.CONSISTENCY_STALE,
}


# --- schedules and specs -------------------------------------------------------------------


def schedule_to_proto(schedule: Schedule) -> types_pb2.Schedule:
    if isinstance(schedule, CronSchedule):
        return types_pb2.Schedule(
            cron=types_pb2.CronSchedule(
                expression=schedule.expression,
                timezone=schedule.timezone,
                dialect=_DIALECT[schedule.dialect],
                dst_nonexistent=_DST_NONEXISTENT[schedule.dst_nonexistent],
                dst_ambiguous=_DST_AMBIGUOUS[schedule.dst_ambiguous],
            )
        )
    if isinstance(schedule, IntervalSchedule):
        return types_pb2.Schedule(
            interval=types_pb2.IntervalSchedule(
                interval_ms=schedule.interval_ms, anchor_ms=schedule.anchor_ms
            )
        )
    if isinstance(schedule, OnceSchedule):
        return types_pb2.Schedule(once=types_pb2.OnceSchedule(at_ms=schedule.at_ms))
    raise TypeError(f"not a schedule: {schedule!r}")


def schedule_from_proto(msg: types_pb2.Schedule) -> Schedule:
    kind = msg.WhichOneof("kind")
    if kind == "cron":
        return CronSchedule(
            expression=msg.cron.expression,
            timezone=msg.cron.timezone or "UTC",
            dialect=_DIALECT_BACK.get(msg.cron.dialect),
            dst_nonexistent=_DST_NONEXISTENT_BACK.get(msg.cron.dst_nonexistent),
            dst_ambiguous=_DST_AMBIGUOUS_BACK.get(msg.cron.dst_ambiguous),
        )
    if kind == "interval":
        return IntervalSchedule(
            interval_ms=msg.interval.interval_ms, anchor_ms=msg.interval.anchor_ms
        )
    if kind == "once":
        return OnceSchedule(at_ms=msg.once.at_ms)
    raise ValueError("schedule has no kind set")


def retry_to_proto(retry: RetryPolicy) -> types_pb2.RetryPolicy:
    return types_pb2.RetryPolicy(
        max_attempts=retry.max_attempts,
        initial_backoff_ms=retry.initial_backoff_ms,
        max_backoff_ms=retry.max_backoff_ms,
        multiplier=retry.multiplier,
        jitter=retry.jitter,
    )


def retry_from_proto(msg: types_pb2.RetryPolicy) -> RetryPolicy:
    return RetryPolicy(
        max_attempts=msg.max_attempts,
        initial_backoff_ms=msg.initial_backoff_ms,
        max_backoff_ms=msg.max_backoff_ms,
        multiplier=msg.multiplier,
        jitter=msg.jitter,
    )


def task_spec_to_proto(spec: TaskSpec) -> types_pb2.TaskSpec:
    return types_pb2.TaskSpec(
        name=spec.name,
        queue=spec.queue,
        depends_on=list(spec.depends_on),
        payload=spec.payload,
        timeout_ms=spec.timeout_ms,
        retry=retry_to_proto(spec.retry),
    )


def task_spec_from_proto(msg: types_pb2.TaskSpec) -> TaskSpec:
    return TaskSpec(
        name=msg.name,
        queue=msg.queue,
        depends_on=tuple(msg.depends_on),
        payload=msg.payload,
        timeout_ms=msg.timeout_ms,
        retry=retry_from_proto(msg.retry),
    )


def job_spec_to_proto(spec: JobSpec) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        tenant=spec.tenant,
        name=spec.name,
        schedule=schedule_to_proto(spec.schedule),
        tasks=[task_spec_to_proto(t) for t in spec.tasks],
        priority=spec.priority,
        misfire_policy=_MISFIRE[spec.misfire_policy],
        misfire_grace_ms=spec.misfire_grace_ms,
        paused=spec.paused,
        overlap_policy=_OVERLAP[spec.overlap_policy],
        max_active_runs=spec.max_active_runs,
        max_buffered_runs=spec.max_buffered_runs,
        **{name: getattr(spec, name) for name in _TIMING},
        circuit_breaker=types_pb2.CircuitBreaker(
            window_runs=spec.circuit_breaker.window_runs,
            failure_percent=spec.circuit_breaker.failure_percent,
            cooldown_ms=spec.circuit_breaker.cooldown_ms,
        ) if spec.circuit_breaker else None,
    )


def job_spec_from_proto(msg: types_pb2.JobSpec) -> JobSpec:
    return JobSpec(
        tenant=msg.tenant,
        name=msg.name,
        schedule=schedule_from_proto(msg.schedule),
        tasks=tuple(task_spec_from_proto(t) for t in msg.tasks),
        priority=msg.priority,
        misfire_policy=_MISFIRE_BACK.get(msg.misfire_policy, MisfirePolicy.RUN_ALL),
        misfire_grace_ms=msg.misfire_grace_ms,
        paused=msg.paused,
        overlap_policy=_OVERLAP_BACK.get(msg.overlap_policy, OverlapPolicy.ALLOW_ALL),
        max_active_runs=msg.max_active_runs if msg.HasField("max_active_runs") else None,
        max_buffered_runs=msg.max_buffered_runs,
        **{name: getattr(msg, name) for name in _TIMING},
        circuit_breaker=CircuitBreaker(
            msg.circuit_breaker.window_runs, msg.circuit_breaker.failure_percent,
            msg.circuit_breaker.cooldown_ms) if msg.HasField("circuit_breaker") else None,
    )


# --- stored objects ------------------------------------------------------------------------


_BACKFILL_STATUS = {types_pb2.BACKFILL_STATUS_RUNNING: "running",
                    types_pb2.BACKFILL_STATUS_DONE: "done",
                    types_pb2.BACKFILL_STATUS_CANCELLED: "cancelled"}


def circuit_from_proto(msg: types_pb2.CircuitState) -> CircuitState:
    return CircuitState(
        status=_CIRCUIT_BACK.get(msg.status, "closed"),
        opened_ms=msg.opened_ms,
        recent_failures=tuple(msg.recent_failures),
        probe_run_id=msg.probe_run_id,
        opens=msg.opens,
    )


def breaker_to_proto(breaker: CircuitBreaker) -> types_pb2.CircuitBreaker:
    return types_pb2.CircuitBreaker(window_runs=breaker.window_runs,
                                    failure_percent=breaker.failure_percent,
                                    cooldown_ms=breaker.cooldown_ms)


def queue_circuit_from_proto(msg: types_pb2.QueueCircuit) -> QueueCircuit:
    return QueueCircuit(
        tenant=msg.tenant, queue=msg.queue,
        breaker=CircuitBreaker(msg.breaker.window_runs, msg.breaker.failure_percent,
                               msg.breaker.cooldown_ms),
        circuit=circuit_from_proto(msg.circuit))


def backfill_from_proto(msg: types_pb2.BackfillState) -> Backfill:
    return Backfill(
        from_ms=msg.from_ms, to_ms=msg.to_ms, next_slot_ms=msg.next_slot_ms,
        total_slots=msg.total_slots,
        overlap_policy=_OVERLAP_BACK.get(msg.overlap_policy) if msg.overlap_policy else None,
        status=_BACKFILL_STATUS.get(msg.status, "running"), created=msg.created,
        skipped=msg.skipped, started_ms=msg.started_ms, finished_ms=msg.finished_ms,
        number=msg.number or 1)


def job_to_proto(job: Job) -> types_pb2.Job:
    return types_pb2.Job(
        job_id=job.job_id,
        spec=job_spec_to_proto(job.spec),
        version=job.version,
        next_fire_ms=job.next_fire_ms,
        paused=job.paused,
        created_ms=job.created_ms,
        updated_ms=job.updated_ms,
        runs_started=job.runs_started,
        circuit=types_pb2.CircuitState(
            status={v: k for k, v in _CIRCUIT_BACK.items()}[job.circuit.status],
            opened_ms=job.circuit.opened_ms,
            recent_failures=list(job.circuit.recent_failures),
            probe_run_id=job.circuit.probe_run_id,
            opens=job.circuit.opens,
        ),
    )


_ITEM_INDEX = re.compile(r"^specs\[\d+\]")


def create_result_from_proto(index: int, spec: JobSpec,
                             msg: api_pb2.CreateJobsResult) -> CreateJobResult:
    """One CreateJobs result; an item error's `specs[i]` is renumbered to `index` (the spec's
    place in the whole ``create_jobs`` call, which may have taken several RPCs)."""
    if msg.HasField("job"):
        return CreateJobResult(index, spec, job=job_from_proto(msg.job))
    code = getattr(grpc.StatusCode, msg.error.code, grpc.StatusCode.UNKNOWN)
    text = _ITEM_INDEX.sub(f"specs[{index}]", msg.error.message, count=1)
    return CreateJobResult(index, spec, error=error_for_status(code, text))


def job_from_proto(msg: types_pb2.Job) -> Job:
    return Job(
        job_id=msg.job_id,
        spec=job_spec_from_proto(msg.spec),
        version=msg.version,
        next_fire_ms=msg.next_fire_ms,
        paused=msg.paused,
        created_ms=msg.created_ms,
        updated_ms=msg.updated_ms,
        runs_started=msg.runs_started,
        circuit=circuit_from_proto(msg.circuit),
        backfill=backfill_from_proto(msg.backfill) if msg.HasField("backfill") else None,
    )


def attempt_to_proto(a: Attempt) -> types_pb2.Attempt:
    msg = types_pb2.Attempt(
        attempt=a.attempt,
        fencing_token=a.fencing_token,
        worker_id=a.worker_id,
        started_ms=a.started_ms,
        finished_ms=a.finished_ms,
        outcome=_ATTEMPT_OUTCOME[a.outcome],
        error=a.error,
        duration_ms=a.duration_ms,
        output_tail=a.output_tail,
    )
    if a.exit_code is not None:
        msg.exit_code = a.exit_code
    return msg


def attempt_from_proto(msg: types_pb2.Attempt) -> Attempt:
    return Attempt(
        attempt=msg.attempt,
        fencing_token=msg.fencing_token,
        worker_id=msg.worker_id,
        started_ms=msg.started_ms,
        finished_ms=msg.finished_ms,
        outcome=_ATTEMPT_OUTCOME_BACK.get(msg.outcome, AttemptOutcome.UNSPECIFIED),
        error=msg.error,
        exit_code=msg.exit_code if msg.HasField("exit_code") else None,
        duration_ms=msg.duration_ms,
        output_tail=msg.output_tail,
    )


def task_instance_to_proto(ti: TaskInstance) -> types_pb2.TaskInstance:
    return types_pb2.TaskInstance(
        task_name=ti.task_name,
        state=_TASK_STATE[ti.state],
        attempt=ti.attempt,
        fencing_token=ti.fencing_token,
        worker_id=ti.worker_id,
        idempotency_key=ti.idempotency_key,
        ready_ms=ti.ready_ms,
        started_ms=ti.started_ms,
        finished_ms=ti.finished_ms,
        retry_at_ms=ti.retry_at_ms,
        last_error=ti.last_error,
        result=ti.result,
        lease_ttl_ms=ti.lease_ttl_ms,
        lease_remaining_ms=ti.lease_remaining_ms,
        attempts=[attempt_to_proto(a) for a in ti.attempts],
    )


def task_instance_from_proto(msg: types_pb2.TaskInstance) -> TaskInstance:
    return TaskInstance(
        task_name=msg.task_name,
        state=_TASK_STATE_BACK.get(msg.state, TaskState.UNSPECIFIED),
        attempt=msg.attempt,
        fencing_token=msg.fencing_token,
        worker_id=msg.worker_id,
        idempotency_key=msg.idempotency_key,
        ready_ms=msg.ready_ms,
        started_ms=msg.started_ms,
        finished_ms=msg.finished_ms,
        retry_at_ms=msg.retry_at_ms,
        last_error=msg.last_error,
        result=msg.result,
        lease_ttl_ms=msg.lease_ttl_ms,
        lease_remaining_ms=msg.lease_remaining_ms,
        attempts=tuple(attempt_from_proto(a) for a in msg.attempts),
    )


def run_to_proto(run: Run) -> types_pb2.Run:
    return types_pb2.Run(
        run_id=run.run_id,
        job_id=run.job_id,
        tenant=run.tenant,
        scheduled_for_ms=run.scheduled_for_ms,
        state=_RUN_STATE[run.state],
        trigger=_RUN_TRIGGER[run.trigger],
        created_ms=run.created_ms,
        finished_ms=run.finished_ms,
        tasks=[task_instance_to_proto(t) for t in run.tasks],
        job_version=run.job_version,
        reason=run.reason,
        cancel_requested=run.cancel_requested,
        fire_delay_ms=run.fire_delay_ms,
        params=run.params,
    )


def run_from_proto(msg: types_pb2.Run) -> Run:
    return Run(
        run_id=msg.run_id,
        job_id=msg.job_id,
        tenant=msg.tenant or DEFAULT_TENANT,
        scheduled_for_ms=msg.scheduled_for_ms,
        state=_RUN_STATE_BACK.get(msg.state, RunState.UNSPECIFIED),
        trigger=_RUN_TRIGGER_BACK.get(msg.trigger, RunTrigger.UNSPECIFIED),
        created_ms=msg.created_ms,
        finished_ms=msg.finished_ms,
        tasks=tuple(task_instance_from_proto(t) for t in msg.tasks),
        job_version=msg.job_version,
        reason=msg.reason,
        cancel_requested=msg.cancel_requested,
        fire_delay_ms=msg.fire_delay_ms,
        params=bytes(msg.params),
    )


def dead_letter_to_proto(dl: DeadLetter) -> types_pb2.DeadLetter:
    return types_pb2.DeadLetter(
        run_id=dl.run_id,
        task_name=dl.task_name,
        job_id=dl.job_id,
        tenant=dl.tenant,
        attempts=dl.attempts,
        last_error=dl.last_error,
        dead_ms=dl.dead_ms,
    )


# Wait kinds by number; a number a newer cluster sends and this client does not know is
# "unspecified", as for every other enum here.
_WAIT_KINDS = {v.number: v.name.removeprefix("WAIT_KIND_").lower()
               for v in api_pb2.WaitKind.DESCRIPTOR.values}


def run_wait_from_proto(msg: api_pb2.RunWait) -> RunWait:
    return RunWait(
        kind=_WAIT_KINDS.get(msg.kind, "unspecified"),
        task_name=msg.task_name, detail=msg.detail, limit=msg.limit,
        limit_value=msg.limit_value, current=msg.current, change=msg.change,
    )


def dead_letter_from_proto(msg: types_pb2.DeadLetter) -> DeadLetter:
    return DeadLetter(
        run_id=msg.run_id,
        task_name=msg.task_name,
        job_id=msg.job_id,
        tenant=msg.tenant or DEFAULT_TENANT,
        attempts=msg.attempts,
        last_error=msg.last_error,
        dead_ms=msg.dead_ms,
    )


def task_ref_to_proto(ref: TaskRef | tuple[str, str]) -> api_pb2.TaskRef:
    run_id, task_name = ref
    return api_pb2.TaskRef(run_id=run_id, task_name=task_name)


def task_ref_from_proto(msg: api_pb2.TaskRef) -> TaskRef:
    return TaskRef(msg.run_id, msg.task_name)


def node_status_to_proto(node: NodeStatus) -> api_pb2.NodeStatus:
    return api_pb2.NodeStatus(
        node_id=node.node_id,
        raft_address=node.raft_address,
        grpc_address=node.grpc_address,
        role=node.role,
        match_index=node.match_index,
        connected=node.connected,
    )


def node_status_from_proto(msg: api_pb2.NodeStatus) -> NodeStatus:
    return NodeStatus(
        node_id=msg.node_id,
        raft_address=msg.raft_address,
        grpc_address=msg.grpc_address,
        role=msg.role,
        match_index=msg.match_index,
        connected=msg.connected,
    )


def cluster_limits_to_proto(limits: ClusterLimits) -> types_pb2.ClusterLimits:
    """Only the fields that are not None are set (an unset field keeps its value)."""
    return types_pb2.ClusterLimits(
        **{name: value for name, value in limits.items() if value is not None}
    )


def cluster_limits_from_proto(msg: types_pb2.ClusterLimits) -> ClusterLimits:
    return ClusterLimits(
        **{name: getattr(msg, name) for name in CLUSTER_LIMIT_NAMES if msg.HasField(name)}
    )


def limits_update_to_proto(update: LimitsUpdate) -> api_pb2.SetLimitsResponse:
    return api_pb2.SetLimitsResponse(
        limits=cluster_limits_to_proto(update.limits), limits_version=update.limits_version
    )


def limits_update_from_proto(msg: api_pb2.SetLimitsResponse) -> LimitsUpdate:
    return LimitsUpdate(
        limits=cluster_limits_from_proto(msg.limits), limits_version=msg.limits_version
    )


def cluster_status_to_proto(status: ClusterStatus) -> api_pb2.GetStatusResponse:
    return api_pb2.GetStatusResponse(
        node_id=status.node_id,
        leader_node_id=status.leader_node_id,
        leader_grpc_address=status.leader_grpc_address,
        term=status.term,
        commit_index=status.commit_index,
        applied_index=status.applied_index,
        nodes=[node_status_to_proto(n) for n in status.nodes],
        clock_ms=status.clock_ms,
        jobs=status.jobs,
        active_runs=status.active_runs,
        dead_letters=status.dead_letters,
        state_digest=status.state_digest,
        version=status.version,
        limits=cluster_limits_to_proto(status.limits),
        limits_version=status.limits_version,
        dead_letters_evicted=status.dead_letters_evicted,
        leader_changes=[api_pb2.LeaderChange(
            at_ms=c.at_ms, term=c.term, leader_node_id=c.leader_node_id,
            previous_leader_node_id=c.previous_leader_node_id, cause=c.cause)
            for c in status.leader_changes],
    )


def cluster_status_from_proto(msg: api_pb2.GetStatusResponse) -> ClusterStatus:
    return ClusterStatus(
        node_id=msg.node_id,
        leader_node_id=msg.leader_node_id,
        leader_grpc_address=msg.leader_grpc_address,
        term=msg.term,
        commit_index=msg.commit_index,
        applied_index=msg.applied_index,
        nodes=tuple(node_status_from_proto(n) for n in msg.nodes),
        clock_ms=msg.clock_ms,
        jobs=msg.jobs,
        active_runs=msg.active_runs,
        dead_letters=msg.dead_letters,
        state_digest=msg.state_digest,
        version=msg.version,
        limits=cluster_limits_from_proto(msg.limits),
        limits_version=msg.limits_version,
        dead_letters_evicted=msg.dead_letters_evicted,
        leader_changes=tuple(LeaderChange(c.at_ms, c.term, c.leader_node_id,
                                          c.previous_leader_node_id, c.cause)
                             for c in msg.leader_changes),
    )


# --- request pieces ------------------------------------------------------------------------


def consistency_to_proto(consistency: Consistency) -> Any:
    try:
        return _CONSISTENCY[consistency]
    except KeyError:
        raise InvalidArgument(
            f"consistency must be 'linearizable' or 'stale', not {consistency!r}"
        ) from None


def preview_request(
    schedule: Schedule | None,
    job_id: str | None,
    tenant: str | None,
    name: str | None,
    count: int,
    after_ms: int,
) -> api_pb2.PreviewScheduleRequest:
    """A job's schedule (job_id, or tenant and name), or `schedule` (name: whose H hash)."""
    req = api_pb2.PreviewScheduleRequest(count=count, after_ms=after_ms)
    if schedule is None:
        req.job.CopyFrom(job_ref(job_id, tenant, name))
    else:
        if job_id:
            raise InvalidArgument("preview a job (job_id or name) or a schedule, not both")
        req.schedule.CopyFrom(schedule_to_proto(schedule))
        req.tenant, req.name = tenant or "", name or ""
    return req


def preview_from_proto(msg: api_pb2.PreviewScheduleResponse) -> SchedulePreview:
    return SchedulePreview(
        fires=tuple(
            PreviewFire(at_ms=f.at_ms, utc=f.utc, local=f.local, dst_note=f.dst_note)
            for f in msg.fires
        ),
        timezone=msg.timezone or "UTC",
        reading=msg.reading,
    )


def _enum_in(field: str, value: str, kind: type[enum.StrEnum]) -> Any:
    """``kind(value)``, or InvalidArgument naming the field and the values it takes."""
    try:
        return kind(value)
    except ValueError:
        names = ", ".join(v.value for v in kind if v.value != "unspecified")
        raise InvalidArgument(f"{field}: must be one of {names}, got {value!r}") from None


def _one_or_many(value: str | Iterable[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def runs_query(
    *,
    tenants: str | Iterable[str] | None,
    job_id: str | None,
    queue: str | None,
    states: str | Iterable[str] | None,
    triggers: str | Iterable[str] | None,
    since_ms: int,
    until_ms: int,
    late: bool,
    late_ms: int,
    errors: bool,
    sort: str,
    limit: int,
    page_token: str,
    consistency: int,
) -> api_pb2.ListRunsAcrossJobsRequest:
    """The ListRunsAcrossJobs request; a state, trigger or sort the SDK does not know is
    InvalidArgument naming it (before any call)."""
    return api_pb2.ListRunsAcrossJobsRequest(
        tenant=_one_or_many(tenants), job_id=job_id or "", queue=queue or "",
        state=[_RUN_STATE[_enum_in("states", s, RunState)] for s in _one_or_many(states)],
        trigger=[_RUN_TRIGGER[_enum_in("triggers", t, RunTrigger)]
                 for t in _one_or_many(triggers)],
        since_ms=since_ms, until_ms=until_ms, late=late, late_ms=late_ms, errors=errors,
        sort=cast(Any, api_pb2.RunSort.Value(f"RUN_SORT_{_enum_in('sort', sort, RunSort).name}")),
        limit=limit, page_token=page_token, consistency=cast(Any, consistency),
    )


def run_page_from_proto(msg: api_pb2.ListRunsAcrossJobsResponse) -> RunPage:
    return RunPage(runs=tuple(run_from_proto(r) for r in msg.runs),
                   next_page_token=msg.next_page_token)


def job_ref(job_id: str | None, tenant: str | None, name: str | None) -> api_pb2.JobRef:
    """A job named by id, or by (tenant, name) with the tenant defaulting to "default"."""
    if job_id:
        if name:
            raise InvalidArgument("name a job by job_id or by name, not both")
        return api_pb2.JobRef(job_id=job_id)
    if not name:
        raise InvalidArgument("name a job by job_id or by name (and tenant)")
    return api_pb2.JobRef(tenant=tenant or DEFAULT_TENANT, name=name)


def lease_ref(run_id: str, task_name: str, fencing_token: int) -> worker_pb2.LeaseRef:
    return worker_pb2.LeaseRef(run_id=run_id, task_name=task_name, fencing_token=fencing_token)


def task_refs_to_proto(refs: Iterable[TaskRef | tuple[str, str]]) -> list[api_pb2.TaskRef]:
    return [task_ref_to_proto(r) for r in refs]


def task_context_from_assign(
    assign: worker_pb2.Assign, *, worker_id: str, lease: LeaseState, output: OutputTail
) -> TaskContext:
    return TaskContext(
        run_id=assign.lease.run_id,
        job_id=assign.job_id,
        tenant=assign.tenant or DEFAULT_TENANT,
        task_name=assign.lease.task_name,
        queue=assign.queue or DEFAULT_QUEUE,
        attempt=assign.attempt,
        max_attempts=assign.max_attempts,
        scheduled_for_ms=assign.scheduled_for_ms,
        idempotency_key=assign.idempotency_key,
        fencing_token=assign.lease.fencing_token,
        deadline_ms=assign.deadline_ms,
        payload=assign.payload,
        worker_id=worker_id,
        _lease=lease,
        _output=output,
        _trace=TraceParent(assign.traceparent),
    )
