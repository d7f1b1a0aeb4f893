"""Conversion between core dataclasses and gnomon.v1 protobuf messages: the only place.

Commands travel through the Raft log as CommandBatch; state travels through snapshots as
records; jobs and runs travel to clients as the public API messages.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
import sys
from collections.abc import Callable, Iterable
from typing import Any

from google.protobuf.message import Message

from gnomon.node.core import access
from gnomon.node.core import commands as c
from gnomon.node.core import results as r
from gnomon.node.core.errors import Rejected, UnknownCommand
from gnomon.node.core.model import (
    CLOSED_CIRCUIT,
    Attempt,
    Backfill,
    Circuit,
    CircuitBreaker,
    DeadLetter,
    Job,
    JobSpec,
    Limits,
    QueueCircuit,
    RetryPolicy,
    Run,
    Schedule,
    ScheduleKind,
    TaskInstance,
    TaskSpec,
)
from gnomon.v1 import raft_pb2, types_pb2

# Command class <-> name of its field in the Command oneof. Append-only, like the proto.
COMMAND_FIELDS: dict[type, str] = {
    c.CreateJob: "create_job",
    c.UpdateJob: "update_job",
    c.DeleteJob: "delete_job",
    c.SetPaused: "set_paused",
    c.Fire: "fire",
    c.TriggerJob: "trigger_job",
    c.CancelRun: "cancel_run",
    c.GrantLeases: "grant_leases",
    c.CompleteTask: "complete_task",
    c.FailTask: "fail_task",
    c.ExpireLeases: "expire_leases",
    c.ReplayDeadLetters: "replay_dead_letters",
    c.Barrier: "barrier",
    c.SetLimits: "set_limits",
    c.CheckpointLeases: "checkpoint_leases",
    access.CreateToken: "create_token",
    access.RevokeToken: "revoke_token",
    access.SetTenant: "set_tenant",
    access.RecordAudit: "record_audit",
    c.RerunRun: "rerun_run",
    c.CancelTask: "cancel_task",
    c.ResetCircuit: "reset_circuit",
    c.CreateJobs: "create_jobs",
    c.StartBackfill: "start_backfill",
    c.BackfillStep: "backfill_step",
    c.CancelBackfill: "cancel_backfill",
    c.SetQueueCircuit: "set_queue_circuit",
    c.DiscardDeadLetters: "discard_dead_letters",
}
COMMAND_CLASSES: dict[str, type] = {name: cls for cls, name in COMMAND_FIELDS.items()}
# Repeated scalar fields of commands (tuples in the dataclasses).
_REPEATED_SCALARS = frozenset({"tenants", "task_names", "slots_ms"})
# Nested repeated dataclasses inside commands, by field name.
_NESTED: dict[str, type] = {
    "grants": c.LeaseGrant,
    "leases": c.ExpiredLease,
    "tasks": c.TaskKey,
    "checkpoints": c.LeaseCheckpoint,
    "payloads": c.TaskPayload,
    "items": c.CreateJobItem,
}


# --- enums: core uses lower-case strings, protos use PREFIX_UPPER ---------------------------


def _enum_prefix(enum_type) -> str:
    return enum_type.values_by_number[0].name[: -len("UNSPECIFIED")]


# Any, not int: the generated stubs type an enum field as its enum class (an int subclass that
# no value is built as at run time), and a number is assignable to the field of its enum.
_ENUM_NUMBERS: dict[object, dict[str, int]] = {}


def enum_to_proto(enum_type, value: str) -> Any:
    numbers = _ENUM_NUMBERS.get(enum_type)
    if numbers is None:  # once per enum type: this runs for every run a node evicts
        prefix = len(_enum_prefix(enum_type))
        numbers = _ENUM_NUMBERS[enum_type] = {
            v.name[prefix:].lower(): v.number for v in enum_type.values}
    number = numbers.get(value)
    if number is None:  # the message names the value and the type, as before
        return enum_type.values_by_name[_enum_prefix(enum_type) + value.upper()].number
    return number


_ENUM_NAMES: dict[object, dict[int, str]] = {}


def enum_from_proto(enum_type, number: int, default: str) -> str:
    if number == 0:
        return default
    names = _ENUM_NAMES.get(enum_type)
    if names is None:  # once per enum type: this runs per job on a snapshot restore
        prefix = len(_enum_prefix(enum_type))
        names = _ENUM_NAMES[enum_type] = {
            v.number: v.name[prefix:].lower() for v in enum_type.values}
    return names[number]


_MISFIRE = types_pb2.MisfirePolicy.DESCRIPTOR
_RUN_STATE = types_pb2.RunState.DESCRIPTOR
_RUN_TRIGGER = types_pb2.RunTrigger.DESCRIPTOR
_TASK_STATE = types_pb2.TaskState.DESCRIPTOR
_ATTEMPT_OUTCOME = types_pb2.AttemptOutcome.DESCRIPTOR
_OVERLAP = types_pb2.OverlapPolicy.DESCRIPTOR
_DIALECT = types_pb2.CronDialect.DESCRIPTOR
_DST_NONEXISTENT = types_pb2.DstNonexistentPolicy.DESCRIPTOR
_DST_AMBIGUOUS = types_pb2.DstAmbiguousPolicy.DESCRIPTOR


def overlap_to_proto(value: str) -> Any:  # Any: as enum_to_proto
    """"" (a trigger without override) is UNSPECIFIED."""
    return enum_to_proto(_OVERLAP, value) if value else 0


def overlap_from_proto(number: int, default: str = "allow_all") -> str:
    return enum_from_proto(_OVERLAP, number, default)


# --- limits --------------------------------------------------------------------------------

_LIMIT_FIELDS = [f.name for f in dataclasses.fields(Limits)]


def limits_to_proto(limits: Limits, out: types_pb2.ClusterLimits | None = None):
    out = types_pb2.ClusterLimits() if out is None else out
    _copy_fields(limits, out, _LIMIT_FIELDS)
    return out


def limits_from_proto(m: types_pb2.ClusterLimits, base: Limits = Limits()) -> Limits:
    """The fields set in `m` over `base` (an unset field keeps base's value)."""
    return dataclasses.replace(base, **{n: getattr(m, n) for n in _LIMIT_FIELDS if m.HasField(n)})


# --- specs ---------------------------------------------------------------------------------


def schedule_to_proto(s: Schedule, out: types_pb2.Schedule) -> None:
    if s.kind == ScheduleKind.CRON:
        out.cron.expression = s.expression
        out.cron.timezone = s.timezone
        out.cron.dialect = (enum_to_proto(_DIALECT, s.dialect) if s.dialect
                            else types_pb2.CRON_DIALECT_UNSPECIFIED)
        out.cron.dst_nonexistent = (
            enum_to_proto(_DST_NONEXISTENT, s.dst_nonexistent) if s.dst_nonexistent
            else types_pb2.DST_NONEXISTENT_POLICY_UNSPECIFIED)
        out.cron.dst_ambiguous = (
            enum_to_proto(_DST_AMBIGUOUS, s.dst_ambiguous) if s.dst_ambiguous
            else types_pb2.DST_AMBIGUOUS_POLICY_UNSPECIFIED)
    elif s.kind == ScheduleKind.INTERVAL:
        out.interval.interval_ms = s.interval_ms
        out.interval.anchor_ms = s.anchor_ms
    elif s.kind == ScheduleKind.ONCE:
        out.once.at_ms = s.at_ms


def schedule_from_proto(m: types_pb2.Schedule) -> Schedule:
    """The schedule of `m`, one object per distinct value while cached (frozen, so shared:
    a replica holds one per distinct schedule, not one per job, wherever jobs share one)."""
    return _schedule_from_bytes(m.SerializeToString())


@functools.lru_cache(maxsize=4096)
def _schedule_from_bytes(data: bytes) -> Schedule:
    return schedule_from_bytes(data)


def schedule_from_bytes(data: bytes) -> Schedule:
    """A serialized Schedule message, decoded (not cached: a snapshot's distinct ones)."""
    return _schedule_from_message(types_pb2.Schedule.FromString(data))


def _schedule_from_message(m: types_pb2.Schedule) -> Schedule:
    kind = m.WhichOneof("kind")
    if kind == "cron":
        return Schedule(ScheduleKind.CRON, expression=m.cron.expression, timezone=m.cron.timezone,
                        dialect=enum_from_proto(_DIALECT, m.cron.dialect, ""),
                        dst_nonexistent=enum_from_proto(_DST_NONEXISTENT,
                                                        m.cron.dst_nonexistent, ""),
                        dst_ambiguous=enum_from_proto(_DST_AMBIGUOUS, m.cron.dst_ambiguous, ""))
    if kind == "interval":
        return Schedule(
            ScheduleKind.INTERVAL, interval_ms=m.interval.interval_ms, anchor_ms=m.interval.anchor_ms
        )
    if kind == "once":
        return Schedule(ScheduleKind.ONCE, at_ms=m.once.at_ms)
    return Schedule(kind="")


def schedule_message(s: Schedule) -> types_pb2.Schedule:
    out = types_pb2.Schedule()
    schedule_to_proto(s, out)
    return out


def _copy_fields(src, out: Message, names: Iterable[str]) -> None:
    for name in names:
        setattr(out, name, getattr(src, name))


_RETRY_FIELDS = [f.name for f in dataclasses.fields(RetryPolicy)]


def spec_to_proto(spec: JobSpec, out: types_pb2.JobSpec | None = None) -> types_pb2.JobSpec:
    out = types_pb2.JobSpec() if out is None else out
    spec_scalars_to_proto(spec, out)
    schedule_to_proto(spec.schedule, out.schedule)
    tasks_message(spec.tasks, out)
    return out


def spec_scalars_to_proto(spec: JobSpec, out: types_pb2.JobSpec) -> None:
    """Every field of the spec but its schedule and tasks."""
    out.tenant, out.name, out.priority = spec.tenant, spec.name, spec.priority
    out.misfire_policy = enum_to_proto(_MISFIRE, spec.misfire_policy)
    out.misfire_grace_ms, out.paused = spec.misfire_grace_ms, spec.paused
    out.overlap_policy = overlap_to_proto(spec.overlap_policy)
    if spec.max_active_runs is not None:
        out.max_active_runs = spec.max_active_runs
    out.max_buffered_runs = spec.max_buffered_runs
    _copy_fields(spec, out, _TIMING_FIELDS)
    if spec.circuit_breaker is not None:
        _copy_fields(spec.circuit_breaker, out.circuit_breaker, _BREAKER_FIELDS)


# JobSpec scalars of jitter and bounds (leader side, plus max_runs / delete_after_success).
_TIMING_FIELDS = ("jitter_ms", "start_at_ms", "end_at_ms", "max_runs", "delete_after_success")


def overlap_fields_from_proto(m: types_pb2.JobSpec) -> dict:
    """The overlap, jitter and bound fields of a JobSpec message, as JobSpec keyword
    arguments (the spec scalars added after the first ones)."""
    return {
        "overlap_policy": overlap_from_proto(m.overlap_policy),
        "max_active_runs": m.max_active_runs if m.HasField("max_active_runs") else None,
        "max_buffered_runs": m.max_buffered_runs,
        **{name: getattr(m, name) for name in _TIMING_FIELDS},
        "circuit_breaker": CircuitBreaker(**{n: getattr(m.circuit_breaker, n)
                                             for n in _BREAKER_FIELDS})
        if m.HasField("circuit_breaker") else None,
    }


_BREAKER_FIELDS = ("window_runs", "failure_percent", "cooldown_ms")
_CIRCUIT_STATUS = types_pb2.CircuitStatus.DESCRIPTOR


def circuit_to_proto(circuit: Circuit, out: types_pb2.CircuitState) -> None:
    out.status = enum_to_proto(_CIRCUIT_STATUS, circuit.status)
    out.opened_ms, out.probe_run_id, out.opens = (
        circuit.opened_ms, circuit.probe_run_id, circuit.opens)
    out.recent_failures.extend(circuit.recent_failures)


def circuit_from_proto(m: types_pb2.CircuitState) -> Circuit:
    if not m.status and not m.opens:
        return CLOSED_CIRCUIT  # shared: most jobs never trip
    return Circuit(enum_from_proto(_CIRCUIT_STATUS, m.status, "closed"), m.opened_ms,
                   tuple(m.recent_failures), m.probe_run_id, m.opens)


def breaker_to_proto(breaker: CircuitBreaker, out: types_pb2.CircuitBreaker) -> None:
    _copy_fields(breaker, out, _BREAKER_FIELDS)


def breaker_from_proto(m: types_pb2.CircuitBreaker) -> CircuitBreaker:
    return CircuitBreaker(**{n: getattr(m, n) for n in _BREAKER_FIELDS})


def queue_circuit_to_proto(qc: QueueCircuit, out: types_pb2.QueueCircuit | None = None
                           ) -> types_pb2.QueueCircuit:
    out = types_pb2.QueueCircuit() if out is None else out
    out.tenant, out.queue = qc.tenant, qc.queue
    breaker_to_proto(qc.breaker, out.breaker)
    circuit_to_proto(qc.circuit, out.circuit)
    return out


def queue_circuit_from_proto(m: types_pb2.QueueCircuit) -> QueueCircuit:
    return QueueCircuit(m.tenant, m.queue, breaker_from_proto(m.breaker),
                        circuit_from_proto(m.circuit))


_BACKFILL_STATUS = types_pb2.BackfillStatus.DESCRIPTOR
_BACKFILL_SCALARS = ("from_ms", "to_ms", "next_slot_ms", "total_slots", "created", "skipped",
                     "started_ms", "finished_ms", "span_hi_ms", "number")


def backfill_to_proto(bf: Backfill, out: types_pb2.BackfillState) -> None:
    _copy_fields(bf, out, _BACKFILL_SCALARS)
    out.overlap_policy = overlap_to_proto(bf.overlap_policy)
    out.status = enum_to_proto(_BACKFILL_STATUS, bf.status)


def backfill_from_proto(m: types_pb2.BackfillState) -> Backfill:
    return Backfill(overlap_policy=overlap_from_proto(m.overlap_policy, ""),
                    status=enum_from_proto(_BACKFILL_STATUS, m.status, "running"),
                    **{n: getattr(m, n) for n in _BACKFILL_SCALARS})


def job_extras_to_proto(job: Job, out: types_pb2.Job) -> None:
    """The job's backfill and ran spans (fields added with backfills)."""
    if job.backfill is not None:
        backfill_to_proto(job.backfill, out.backfill)
    for lo, hi in job.ran_spans:
        out.ran_spans.add(lo_ms=lo, hi_ms=hi)
    out.span_open = job.span_open


def job_extras_from_proto(m: types_pb2.Job) -> dict:
    """Job keyword arguments of the fields job_extras_to_proto writes."""
    return {
        "backfill": backfill_from_proto(m.backfill) if m.HasField("backfill") else None,
        "ran_spans": tuple((s.lo_ms, s.hi_ms) for s in m.ran_spans),
        "span_open": m.span_open,
    }


def tasks_message(tasks: tuple[TaskSpec, ...], out):
    """Add `tasks` to the repeated `tasks` field of `out` (a JobSpec or a TaskSet)."""
    for t in tasks:
        m = out.tasks.add(name=t.name, queue=t.queue, payload=t.payload, timeout_ms=t.timeout_ms)
        m.depends_on.extend(t.depends_on)
        _copy_fields(t.retry, m.retry, _RETRY_FIELDS)
    return out


def _task_from_proto(t: types_pb2.TaskSpec) -> TaskSpec:
    return TaskSpec(
        name=sys.intern(t.name),
        queue=sys.intern(t.queue),
        depends_on=tuple([sys.intern(d) for d in t.depends_on]),
        payload=bytes(t.payload),
        timeout_ms=t.timeout_ms,
        retry=RetryPolicy(**{n: getattr(t.retry, n) for n in _RETRY_FIELDS}),
    )


@functools.lru_cache(maxsize=4096)
def _task_from_bytes(data: bytes) -> TaskSpec:
    return _task_from_proto(types_pb2.TaskSpec.FromString(data))


# Tasks up to this size are decoded once per distinct value and shared (TaskSpec is frozen):
# restoring a million jobs with the same few task shapes builds a few objects, not millions.
_SHARED_TASK_BYTES = 512


def tasks_from_proto(tasks) -> tuple[TaskSpec, ...]:
    if all(t.ByteSize() <= _SHARED_TASK_BYTES for t in tasks):
        return _tasks_from_bytes(tuple([t.SerializeToString() for t in tasks]))
    return tuple([
        _task_from_bytes(t.SerializeToString()) if t.ByteSize() <= _SHARED_TASK_BYTES
        else _task_from_proto(t)
        for t in tasks
    ])


@functools.lru_cache(maxsize=4096)
def _tasks_from_bytes(datas: tuple[bytes, ...]) -> tuple[TaskSpec, ...]:
    """One shared tuple per distinct task list (of shared tasks) while cached."""
    return tuple([_task_from_bytes(d) for d in datas])


def misfire_from_proto(number: int) -> str:
    return enum_from_proto(_MISFIRE, number, "run_all")


def spec_from_proto(m: types_pb2.JobSpec) -> JobSpec:
    return JobSpec(
        # Interned: a tenant's jobs share one string (sys.intern only shares equal values).
        tenant=sys.intern(m.tenant),
        name=m.name,
        schedule=schedule_from_proto(m.schedule),
        tasks=tasks_from_proto(m.tasks),
        priority=m.priority,
        misfire_policy=misfire_from_proto(m.misfire_policy),
        misfire_grace_ms=m.misfire_grace_ms,
        paused=m.paused,
        **overlap_fields_from_proto(m),
    )


# --- jobs, runs, dead letters ----------------------------------------------------------------


def job_to_proto(job: Job, out: types_pb2.Job | None = None, *,
                 with_spec: bool = True) -> types_pb2.Job:
    out = types_pb2.Job() if out is None else out
    _copy_fields(job, out, ("job_id", "version", "next_fire_ms", "paused", "created_ms",
                            "updated_ms", "last_fired_ms", "runs_started"))
    if job.circuit is not CLOSED_CIRCUIT:
        circuit_to_proto(job.circuit, out.circuit)
    job_extras_to_proto(job, out)
    if with_spec:
        spec_to_proto(job.spec, out.spec)
    return out


def job_from_proto(m: types_pb2.Job) -> Job:
    return Job(
        job_id=m.job_id,
        spec=spec_from_proto(m.spec),
        version=m.version,
        next_fire_ms=m.next_fire_ms,
        paused=m.paused,
        created_ms=m.created_ms,
        updated_ms=m.updated_ms,
        last_fired_ms=m.last_fired_ms,
        runs_started=m.runs_started,
        circuit=circuit_from_proto(m.circuit),
        **job_extras_from_proto(m),
    )


_INSTANCE_SCALARS = [
    f.name for f in dataclasses.fields(TaskInstance)
    if f.name not in ("state", "task_name", "attempts")
]
_ATTEMPT_SCALARS = [f.name for f in dataclasses.fields(Attempt) if f.name != "outcome"]


def attempt_to_proto(a: Attempt, out: types_pb2.Attempt) -> None:
    for name in _ATTEMPT_SCALARS:
        value = getattr(a, name)
        if value is not None:
            setattr(out, name, value)
    out.outcome = enum_to_proto(_ATTEMPT_OUTCOME, a.outcome)


def attempt_from_proto(m: types_pb2.Attempt) -> Attempt:
    values = {n: getattr(m, n) for n in _ATTEMPT_SCALARS}
    values["exit_code"] = m.exit_code if m.HasField("exit_code") else None
    return Attempt(outcome=enum_from_proto(_ATTEMPT_OUTCOME, m.outcome, "failed"), **values)


def run_to_proto(run: Run, out: types_pb2.Run | None = None) -> types_pb2.Run:
    out = types_pb2.Run() if out is None else out
    _copy_fields(run, out, ("run_id", "job_id", "tenant", "scheduled_for_ms", "created_ms"))
    out.finished_ms, out.job_version = run.finished_ms, run.job_version
    out.reason, out.cancel_requested = run.reason, run.cancel_requested
    out.fire_delay_ms = run.fire_delay_ms
    out.params = run.params
    out.state = enum_to_proto(_RUN_STATE, run.state)
    out.trigger = enum_to_proto(_RUN_TRIGGER, run.trigger)
    for inst in run.tasks.values():
        m = out.tasks.add(task_name=inst.task_name, state=enum_to_proto(_TASK_STATE, inst.state))
        _copy_fields(inst, m, _INSTANCE_SCALARS)
        for attempt in inst.attempts:
            attempt_to_proto(attempt, m.attempts.add())
    return out


def run_from_proto(m: types_pb2.Run, spec: JobSpec) -> Run:
    tasks = {}
    for t in m.tasks:
        inst = TaskInstance(
            task_name=t.task_name,
            state=enum_from_proto(_TASK_STATE, t.state, "pending"),
            idempotency_key=t.idempotency_key,
        )
        for name in _INSTANCE_SCALARS:
            value = getattr(t, name)
            setattr(inst, name, bytes(value) if isinstance(value, bytes) else value)
        inst.attempts = tuple(attempt_from_proto(a) for a in t.attempts)
        tasks[t.task_name] = inst
    return Run(
        run_id=m.run_id,
        job_id=m.job_id,
        tenant=m.tenant,
        scheduled_for_ms=m.scheduled_for_ms,
        state=enum_from_proto(_RUN_STATE, m.state, "running"),
        trigger=enum_from_proto(_RUN_TRIGGER, m.trigger, "schedule"),
        created_ms=m.created_ms,
        job_version=m.job_version,
        spec=spec,
        tasks=tasks,
        finished_ms=m.finished_ms,
        reason=m.reason,
        cancel_requested=m.cancel_requested,
        fire_delay_ms=m.fire_delay_ms,
        params=bytes(m.params),
    )


_DEAD_LETTER_FIELDS = [f.name for f in dataclasses.fields(DeadLetter)]


def dead_letter_to_proto(d: DeadLetter, out: types_pb2.DeadLetter | None = None):
    out = types_pb2.DeadLetter() if out is None else out
    _copy_fields(d, out, _DEAD_LETTER_FIELDS)
    return out


def dead_letter_from_proto(m: types_pb2.DeadLetter) -> DeadLetter:
    return DeadLetter(**{n: getattr(m, n) for n in _DEAD_LETTER_FIELDS})


# --- commands ----------------------------------------------------------------------------


# Per command class, how each field converts, worked out once (from the field names, the
# proto field types and the first value seen) instead of per command: the generic walk with
# dataclasses.fields() and isinstance checks was most of the codec's cost, which every node
# pays for every command of every entry (18% of a follower's profile, bench/RESULTS.md).
(_K_PLAIN, _K_SPEC, _K_LIMITS, _K_OPTIONAL, _K_OVERLAP, _K_NEST, _K_TUPLE, _K_TENANT, _K_BYTES,
 _K_BREAKER) = range(10)
_ENCODE_PLANS: dict[type, tuple[tuple[str, int], ...]] = {}
_DECODE_PLANS: dict[type, tuple] = {}


def _encode_plan(cmd) -> tuple[tuple[str, int], ...]:
    plan = []
    for f in dataclasses.fields(cmd):
        value = getattr(cmd, f.name)
        kind = (_K_SPEC if isinstance(value, JobSpec) else _K_LIMITS if isinstance(value, Limits)
                else _K_BREAKER if f.name == "breaker"
                else _K_OVERLAP if f.name == "overlap_policy" else _K_NEST if f.name in _NESTED
                else _K_TUPLE if f.name in _REPEATED_SCALARS
                else _K_TENANT if isinstance(value, access.Tenant) else _K_PLAIN)
        plan.append((f.name, kind))
    return tuple(plan)


def _command_to_proto(cmd, out: Message) -> None:
    plan = _ENCODE_PLANS.get(type(cmd))
    if plan is None:
        plan = _ENCODE_PLANS[type(cmd)] = _encode_plan(cmd)
    for name, kind in plan:
        value = getattr(cmd, name)
        if value is None:
            continue  # an unset optional field (exit_code)
        if kind == _K_PLAIN:
            setattr(out, name, value)
        elif kind == _K_SPEC:
            spec_to_proto(value, getattr(out, name))
        elif kind == _K_NEST:
            repeated = getattr(out, name)
            for item in value:
                _command_to_proto(item, repeated.add())
        elif kind == _K_LIMITS:
            limits_to_proto(value, getattr(out, name))
        elif kind == _K_OVERLAP:
            setattr(out, name, overlap_to_proto(value))
        elif kind == _K_TUPLE:
            getattr(out, name).extend(value)
        elif kind == _K_BREAKER:
            breaker_to_proto(value, getattr(out, name))
        else:
            tenant_to_proto(value, getattr(out, name))


def _decode_plan(cls: type, m: Message) -> tuple[tuple[str, int], ...]:
    plan = []
    for f in dataclasses.fields(cls):
        fd = m.DESCRIPTOR.fields_by_name[f.name]
        kind = (_K_SPEC if f.name == "spec" else _K_LIMITS if f.name == "limits"
                else _K_BREAKER if f.name == "breaker"
                else _K_OPTIONAL if f.name == "exit_code" else _K_OVERLAP
                if f.name == "overlap_policy" else _K_NEST if f.name in _NESTED
                else _K_TUPLE if f.name in _REPEATED_SCALARS
                else _K_TENANT if fd.message_type is not None
                and fd.message_type.full_name == types_pb2.Tenant.DESCRIPTOR.full_name
                else _K_BYTES if fd.type == fd.TYPE_BYTES else _K_PLAIN)
        plan.append((f.name, kind))
    return tuple(plan)


def _command_from_proto(cls: type, m: Message):
    plan = _DECODE_PLANS.get(cls)
    if plan is None:
        plan = _DECODE_PLANS[cls] = _fast_plan(_decode_plan(cls, m))
    read, fixups = plan
    values = read(m)
    if not fixups:
        return cls(*values)
    values = list(values)
    for i, name, kind in fixups:
        values[i] = _decoded(kind, name, values[i], m)
    return cls(*values)


def _fast_plan(plan: tuple[tuple[str, int], ...]):
    """Every field read by one C call (attrgetter); only the fields that are not plain
    scalars are converted afterwards, by position."""
    names = [name for name, _ in plan]
    read: Callable[[Message], tuple[Any, ...]]
    if not names:
        read = lambda m: ()  # noqa: E731 - field-less commands (Barrier)
    elif len(names) == 1:
        one = operator.attrgetter(names[0])
        read = lambda m: (one(m),)  # noqa: E731
    else:
        read = operator.attrgetter(*names)
    fixups = tuple((i, name, kind) for i, (name, kind) in enumerate(plan) if kind != _K_PLAIN)
    return read, fixups


def _decoded(kind: int, name: str, value, m: Message):
    if kind == _K_NEST:
        nested = _NESTED[name]
        return tuple([_command_from_proto(nested, item) for item in value])
    if kind == _K_BYTES:
        return bytes(value)
    if kind == _K_SPEC:
        return spec_from_proto(value)
    if kind == _K_OPTIONAL:
        return value if m.HasField(name) else None
    if kind == _K_OVERLAP:
        return overlap_from_proto(value, "")
    if kind == _K_TUPLE:
        return tuple(value)
    if kind == _K_LIMITS:
        return limits_from_proto(value)
    if kind == _K_BREAKER:
        return breaker_from_proto(value) if m.HasField(name) else None
    return tenant_from_proto(value)


def batch_to_bytes(batch: c.Batch) -> bytes:
    out = raft_pb2.CommandBatch(now_ms=batch.now_ms)
    for cmd in batch.commands:
        msg = getattr(out.commands.add(), COMMAND_FIELDS[type(cmd)])
        msg.SetInParent()  # selects the oneof even for field-less commands (Barrier)
        _command_to_proto(cmd, msg)
    return out.SerializeToString()


def batch_from_bytes(data: bytes) -> c.Batch:
    m = raft_pb2.CommandBatch.FromString(data)
    cmds = []
    for item in m.commands:
        which = item.WhichOneof("cmd")
        if which is None or which not in COMMAND_CLASSES:
            # Fields unknown to this build land in unknown fields and leave the oneof empty.
            raise UnknownCommand(f"command {which or '<unknown field>'} in batch at {m.now_ms}")
        cmds.append(_command_from_proto(COMMAND_CLASSES[which], getattr(item, which)))
    return c.Batch(now_ms=m.now_ms, commands=tuple(cmds))


# --- replies (kept in the dedupe table, hence in snapshots) -------------------------------

_REPLY_CLASSES = {
    cls.__name__: cls
    for cls in (r.JobReply, r.JobsReply, r.RunReply, r.Done, r.Replayed, r.LimitsReply, Rejected,
                access.TokenReply, access.TenantReply, r.Discarded)
}


def _reply_fields(reply: object) -> dict:
    if isinstance(reply, r.JobsReply):  # nested replies keep their type tag
        return {"items": [{"type": type(i).__name__, **_reply_fields(i)} for i in reply.items]}
    if dataclasses.is_dataclass(reply) and not isinstance(reply, type):
        return dataclasses.asdict(reply)
    return {}


def reply_to_bytes(reply: object) -> bytes:
    return json.dumps({"type": type(reply).__name__, **_reply_fields(reply)},
                      sort_keys=True).encode()


def _reply_from_fields(fields: dict) -> object:
    cls = _REPLY_CLASSES[fields.pop("type")]
    if cls in (r.Replayed, r.Discarded):
        fields["tasks"] = tuple(tuple(t) for t in fields["tasks"])
    elif cls is r.JobsReply:
        fields["items"] = tuple(_reply_from_fields(i) for i in fields["items"])
    return cls(**fields)


def reply_from_bytes(data: bytes) -> object:
    return _reply_from_fields(json.loads(data))


# --- access ------------------------------------------------------------------------------


def token_to_proto(t: access.Token, out: types_pb2.Token | None = None) -> types_pb2.Token:
    out = types_pb2.Token() if out is None else out
    out.token_id, out.name, out.role = t.token_id, t.name, t.role
    out.tenants.extend(t.tenants)
    out.created_ms, out.expires_ms, out.revoked_ms = t.created_ms, t.expires_ms, t.revoked_ms
    out.created_by, out.cert_subject = t.created_by, t.cert_subject
    return out


def token_from_proto(m: types_pb2.Token, secret_sha256: str) -> access.Token:
    return access.Token(m.token_id, m.name, m.role, tuple(m.tenants), secret_sha256,
                        m.created_ms, m.expires_ms, m.revoked_ms, m.created_by,
                        m.cert_subject)


_TENANT_FIELDS = [f.name for f in dataclasses.fields(access.Tenant)]


def tenant_to_proto(t: access.Tenant, out: types_pb2.Tenant | None = None) -> types_pb2.Tenant:
    out = types_pb2.Tenant() if out is None else out
    _copy_fields(t, out, _TENANT_FIELDS)
    return out


def tenant_from_proto(m: types_pb2.Tenant) -> access.Tenant:
    return access.Tenant(**{n: getattr(m, n) for n in _TENANT_FIELDS})
