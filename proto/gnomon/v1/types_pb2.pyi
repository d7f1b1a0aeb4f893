from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MisfirePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MISFIRE_POLICY_UNSPECIFIED: _ClassVar[MisfirePolicy]
    MISFIRE_POLICY_RUN_ALL: _ClassVar[MisfirePolicy]
    MISFIRE_POLICY_RUN_LATEST: _ClassVar[MisfirePolicy]
    MISFIRE_POLICY_SKIP: _ClassVar[MisfirePolicy]

class BackfillStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BACKFILL_STATUS_UNSPECIFIED: _ClassVar[BackfillStatus]
    BACKFILL_STATUS_RUNNING: _ClassVar[BackfillStatus]
    BACKFILL_STATUS_DONE: _ClassVar[BackfillStatus]
    BACKFILL_STATUS_CANCELLED: _ClassVar[BackfillStatus]

class RunState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATE_UNSPECIFIED: _ClassVar[RunState]
    RUN_STATE_RUNNING: _ClassVar[RunState]
    RUN_STATE_SUCCEEDED: _ClassVar[RunState]
    RUN_STATE_FAILED: _ClassVar[RunState]
    RUN_STATE_CANCELLED: _ClassVar[RunState]
    RUN_STATE_SKIPPED: _ClassVar[RunState]
    RUN_STATE_QUEUED: _ClassVar[RunState]

class RunTrigger(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_TRIGGER_UNSPECIFIED: _ClassVar[RunTrigger]
    RUN_TRIGGER_SCHEDULE: _ClassVar[RunTrigger]
    RUN_TRIGGER_MANUAL: _ClassVar[RunTrigger]
    RUN_TRIGGER_BACKFILL: _ClassVar[RunTrigger]

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATE_UNSPECIFIED: _ClassVar[TaskState]
    TASK_STATE_PENDING: _ClassVar[TaskState]
    TASK_STATE_READY: _ClassVar[TaskState]
    TASK_STATE_LEASED: _ClassVar[TaskState]
    TASK_STATE_RETRY_WAIT: _ClassVar[TaskState]
    TASK_STATE_SUCCEEDED: _ClassVar[TaskState]
    TASK_STATE_DEAD: _ClassVar[TaskState]
    TASK_STATE_UPSTREAM_FAILED: _ClassVar[TaskState]
    TASK_STATE_CANCELLED: _ClassVar[TaskState]

class AttemptOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ATTEMPT_OUTCOME_UNSPECIFIED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_SUCCEEDED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_FAILED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_EXPIRED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_CANCELLED: _ClassVar[AttemptOutcome]

class OverlapPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OVERLAP_POLICY_UNSPECIFIED: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_ALLOW_ALL: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_SKIP: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_BUFFER_ONE: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_BUFFER_ALL: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_CANCEL_OTHER: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_TERMINATE_OTHER: _ClassVar[OverlapPolicy]

class CronDialect(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CRON_DIALECT_UNSPECIFIED: _ClassVar[CronDialect]
    CRON_DIALECT_SECONDS_LAST: _ClassVar[CronDialect]
    CRON_DIALECT_SECONDS_FIRST: _ClassVar[CronDialect]

class DstNonexistentPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DST_NONEXISTENT_POLICY_UNSPECIFIED: _ClassVar[DstNonexistentPolicy]
    DST_NONEXISTENT_POLICY_SKIP: _ClassVar[DstNonexistentPolicy]
    DST_NONEXISTENT_POLICY_SHIFT_FORWARD: _ClassVar[DstNonexistentPolicy]

class DstAmbiguousPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DST_AMBIGUOUS_POLICY_UNSPECIFIED: _ClassVar[DstAmbiguousPolicy]
    DST_AMBIGUOUS_POLICY_FIRST: _ClassVar[DstAmbiguousPolicy]
    DST_AMBIGUOUS_POLICY_LAST: _ClassVar[DstAmbiguousPolicy]
    DST_AMBIGUOUS_POLICY_BOTH: _ClassVar[DstAmbiguousPolicy]

class CircuitStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CIRCUIT_STATUS_UNSPECIFIED: _ClassVar[CircuitStatus]
    CIRCUIT_STATUS_CLOSED: _ClassVar[CircuitStatus]
    CIRCUIT_STATUS_OPEN: _ClassVar[CircuitStatus]
    CIRCUIT_STATUS_HALF_OPEN: _ClassVar[CircuitStatus]
MISFIRE_POLICY_UNSPECIFIED: MisfirePolicy
MISFIRE_POLICY_RUN_ALL: MisfirePolicy
MISFIRE_POLICY_RUN_LATEST: MisfirePolicy
MISFIRE_POLICY_SKIP: MisfirePolicy
BACKFILL_STATUS_UNSPECIFIED: BackfillStatus
BACKFILL_STATUS_RUNNING: BackfillStatus
BACKFILL_STATUS_DONE: BackfillStatus
BACKFILL_STATUS_CANCELLED: BackfillStatus
RUN_STATE_UNSPECIFIED: RunState
RUN_STATE_RUNNING: RunState
RUN_STATE_SUCCEEDED: RunState
RUN_STATE_FAILED: RunState
RUN_STATE_CANCELLED: RunState
RUN_STATE_SKIPPED: RunState
RUN_STATE_QUEUED: RunState
RUN_TRIGGER_UNSPECIFIED: RunTrigger
RUN_TRIGGER_SCHEDULE: RunTrigger
RUN_TRIGGER_MANUAL: RunTrigger
RUN_TRIGGER_BACKFILL: RunTrigger
TASK_STATE_UNSPECIFIED: TaskState
TASK_STATE_PENDING: TaskState
TASK_STATE_READY: TaskState
TASK_STATE_LEASED: TaskState
TASK_STATE_RETRY_WAIT: TaskState
TASK_STATE_SUCCEEDED: TaskState
TASK_STATE_DEAD: TaskState
TASK_STATE_UPSTREAM_FAILED: TaskState
TASK_STATE_CANCELLED: TaskState
ATTEMPT_OUTCOME_UNSPECIFIED: AttemptOutcome
ATTEMPT_OUTCOME_SUCCEEDED: AttemptOutcome
ATTEMPT_OUTCOME_FAILED: AttemptOutcome
ATTEMPT_OUTCOME_EXPIRED: AttemptOutcome
ATTEMPT_OUTCOME_CANCELLED: AttemptOutcome
OVERLAP_POLICY_UNSPECIFIED: OverlapPolicy
OVERLAP_POLICY_ALLOW_ALL: OverlapPolicy
OVERLAP_POLICY_SKIP: OverlapPolicy
OVERLAP_POLICY_BUFFER_ONE: OverlapPolicy
OVERLAP_POLICY_BUFFER_ALL: OverlapPolicy
OVERLAP_POLICY_CANCEL_OTHER: OverlapPolicy
OVERLAP_POLICY_TERMINATE_OTHER: OverlapPolicy
CRON_DIALECT_UNSPECIFIED: CronDialect
CRON_DIALECT_SECONDS_LAST: CronDialect
CRON_DIALECT_SECONDS_FIRST: CronDialect
DST_NONEXISTENT_POLICY_UNSPECIFIED: DstNonexistentPolicy
DST_NONEXISTENT_POLICY_SKIP: DstNonexistentPolicy
DST_NONEXISTENT_POLICY_SHIFT_FORWARD: DstNonexistentPolicy
DST_AMBIGUOUS_POLICY_UNSPECIFIED: DstAmbiguousPolicy
DST_AMBIGUOUS_POLICY_FIRST: DstAmbiguousPolicy
DST_AMBIGUOUS_POLICY_LAST: DstAmbiguousPolicy
DST_AMBIGUOUS_POLICY_BOTH: DstAmbiguousPolicy
CIRCUIT_STATUS_UNSPECIFIED: CircuitStatus
CIRCUIT_STATUS_CLOSED: CircuitStatus
CIRCUIT_STATUS_OPEN: CircuitStatus
CIRCUIT_STATUS_HALF_OPEN: CircuitStatus

class CronSchedule(_message.Message):
    __slots__ = ("expression", "timezone", "dialect", "dst_nonexistent", "dst_ambiguous")
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    DIALECT_FIELD_NUMBER: _ClassVar[int]
    DST_NONEXISTENT_FIELD_NUMBER: _ClassVar[int]
    DST_AMBIGUOUS_FIELD_NUMBER: _ClassVar[int]
    expression: str
    timezone: str
    dialect: CronDialect
    dst_nonexistent: DstNonexistentPolicy
    dst_ambiguous: DstAmbiguousPolicy
    def __init__(self, expression: _Optional[str] = ..., timezone: _Optional[str] = ..., dialect: _Optional[_Union[CronDialect, str]] = ..., dst_nonexistent: _Optional[_Union[DstNonexistentPolicy, str]] = ..., dst_ambiguous: _Optional[_Union[DstAmbiguousPolicy, str]] = ...) -> None: ...

class IntervalSchedule(_message.Message):
    __slots__ = ("interval_ms", "anchor_ms")
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    ANCHOR_MS_FIELD_NUMBER: _ClassVar[int]
    interval_ms: int
    anchor_ms: int
    def __init__(self, interval_ms: _Optional[int] = ..., anchor_ms: _Optional[int] = ...) -> None: ...

class OnceSchedule(_message.Message):
    __slots__ = ("at_ms",)
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    at_ms: int
    def __init__(self, at_ms: _Optional[int] = ...) -> None: ...

class Schedule(_message.Message):
    __slots__ = ("cron", "interval", "once")
    CRON_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_FIELD_NUMBER: _ClassVar[int]
    ONCE_FIELD_NUMBER: _ClassVar[int]
    cron: CronSchedule
    interval: IntervalSchedule
    once: OnceSchedule
    def __init__(self, cron: _Optional[_Union[CronSchedule, _Mapping]] = ..., interval: _Optional[_Union[IntervalSchedule, _Mapping]] = ..., once: _Optional[_Union[OnceSchedule, _Mapping]] = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ("max_attempts", "initial_backoff_ms", "max_backoff_ms", "multiplier", "jitter")
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    initial_backoff_ms: int
    max_backoff_ms: int
    multiplier: float
    jitter: float
    def __init__(self, max_attempts: _Optional[int] = ..., initial_backoff_ms: _Optional[int] = ..., max_backoff_ms: _Optional[int] = ..., multiplier: _Optional[float] = ..., jitter: _Optional[float] = ...) -> None: ...

class TaskSpec(_message.Message):
    __slots__ = ("name", "queue", "depends_on", "payload", "timeout_ms", "retry")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    name: str
    queue: str
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    payload: bytes
    timeout_ms: int
    retry: RetryPolicy
    def __init__(self, name: _Optional[str] = ..., queue: _Optional[str] = ..., depends_on: _Optional[_Iterable[str]] = ..., payload: _Optional[bytes] = ..., timeout_ms: _Optional[int] = ..., retry: _Optional[_Union[RetryPolicy, _Mapping]] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("tenant", "name", "schedule", "tasks", "priority", "misfire_policy", "misfire_grace_ms", "paused", "overlap_policy", "max_active_runs", "max_buffered_runs", "jitter_ms", "start_at_ms", "end_at_ms", "max_runs", "delete_after_success", "circuit_breaker")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    MISFIRE_POLICY_FIELD_NUMBER: _ClassVar[int]
    MISFIRE_GRACE_MS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_POLICY_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_RUNS_FIELD_NUMBER: _ClassVar[int]
    MAX_BUFFERED_RUNS_FIELD_NUMBER: _ClassVar[int]
    JITTER_MS_FIELD_NUMBER: _ClassVar[int]
    START_AT_MS_FIELD_NUMBER: _ClassVar[int]
    END_AT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNS_FIELD_NUMBER: _ClassVar[int]
    DELETE_AFTER_SUCCESS_FIELD_NUMBER: _ClassVar[int]
    CIRCUIT_BREAKER_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    name: str
    schedule: Schedule
    tasks: _containers.RepeatedCompositeFieldContainer[TaskSpec]
    priority: int
    misfire_policy: MisfirePolicy
    misfire_grace_ms: int
    paused: bool
    overlap_policy: OverlapPolicy
    max_active_runs: int
    max_buffered_runs: int
    jitter_ms: int
    start_at_ms: int
    end_at_ms: int
    max_runs: int
    delete_after_success: bool
    circuit_breaker: CircuitBreaker
    def __init__(self, tenant: _Optional[str] = ..., name: _Optional[str] = ..., schedule: _Optional[_Union[Schedule, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[TaskSpec, _Mapping]]] = ..., priority: _Optional[int] = ..., misfire_policy: _Optional[_Union[MisfirePolicy, str]] = ..., misfire_grace_ms: _Optional[int] = ..., paused: _Optional[bool] = ..., overlap_policy: _Optional[_Union[OverlapPolicy, str]] = ..., max_active_runs: _Optional[int] = ..., max_buffered_runs: _Optional[int] = ..., jitter_ms: _Optional[int] = ..., start_at_ms: _Optional[int] = ..., end_at_ms: _Optional[int] = ..., max_runs: _Optional[int] = ..., delete_after_success: _Optional[bool] = ..., circuit_breaker: _Optional[_Union[CircuitBreaker, _Mapping]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("job_id", "spec", "version", "next_fire_ms", "paused", "created_ms", "updated_ms", "last_fired_ms", "runs_started", "circuit", "backfill", "ran_spans", "span_open")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_MS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_FIRED_MS_FIELD_NUMBER: _ClassVar[int]
    RUNS_STARTED_FIELD_NUMBER: _ClassVar[int]
    CIRCUIT_FIELD_NUMBER: _ClassVar[int]
    BACKFILL_FIELD_NUMBER: _ClassVar[int]
    RAN_SPANS_FIELD_NUMBER: _ClassVar[int]
    SPAN_OPEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    spec: JobSpec
    version: int
    next_fire_ms: int
    paused: bool
    created_ms: int
    updated_ms: int
    last_fired_ms: int
    runs_started: int
    circuit: CircuitState
    backfill: BackfillState
    ran_spans: _containers.RepeatedCompositeFieldContainer[SlotSpan]
    span_open: bool
    def __init__(self, job_id: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., version: _Optional[int] = ..., next_fire_ms: _Optional[int] = ..., paused: _Optional[bool] = ..., created_ms: _Optional[int] = ..., updated_ms: _Optional[int] = ..., last_fired_ms: _Optional[int] = ..., runs_started: _Optional[int] = ..., circuit: _Optional[_Union[CircuitState, _Mapping]] = ..., backfill: _Optional[_Union[BackfillState, _Mapping]] = ..., ran_spans: _Optional[_Iterable[_Union[SlotSpan, _Mapping]]] = ..., span_open: _Optional[bool] = ...) -> None: ...

class SlotSpan(_message.Message):
    __slots__ = ("lo_ms", "hi_ms")
    LO_MS_FIELD_NUMBER: _ClassVar[int]
    HI_MS_FIELD_NUMBER: _ClassVar[int]
    lo_ms: int
    hi_ms: int
    def __init__(self, lo_ms: _Optional[int] = ..., hi_ms: _Optional[int] = ...) -> None: ...

class BackfillState(_message.Message):
    __slots__ = ("from_ms", "to_ms", "next_slot_ms", "total_slots", "overlap_policy", "status", "created", "skipped", "started_ms", "finished_ms", "span_hi_ms", "number")
    FROM_MS_FIELD_NUMBER: _ClassVar[int]
    TO_MS_FIELD_NUMBER: _ClassVar[int]
    NEXT_SLOT_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SLOTS_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_POLICY_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_MS_FIELD_NUMBER: _ClassVar[int]
    SPAN_HI_MS_FIELD_NUMBER: _ClassVar[int]
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    from_ms: int
    to_ms: int
    next_slot_ms: int
    total_slots: int
    overlap_policy: OverlapPolicy
    status: BackfillStatus
    created: int
    skipped: int
    started_ms: int
    finished_ms: int
    span_hi_ms: int
    number: int
    def __init__(self, from_ms: _Optional[int] = ..., to_ms: _Optional[int] = ..., next_slot_ms: _Optional[int] = ..., total_slots: _Optional[int] = ..., overlap_policy: _Optional[_Union[OverlapPolicy, str]] = ..., status: _Optional[_Union[BackfillStatus, str]] = ..., created: _Optional[int] = ..., skipped: _Optional[int] = ..., started_ms: _Optional[int] = ..., finished_ms: _Optional[int] = ..., span_hi_ms: _Optional[int] = ..., number: _Optional[int] = ...) -> None: ...

class QueueCircuit(_message.Message):
    __slots__ = ("tenant", "queue", "breaker", "circuit")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    CIRCUIT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    queue: str
    breaker: CircuitBreaker
    circuit: CircuitState
    def __init__(self, tenant: _Optional[str] = ..., queue: _Optional[str] = ..., breaker: _Optional[_Union[CircuitBreaker, _Mapping]] = ..., circuit: _Optional[_Union[CircuitState, _Mapping]] = ...) -> None: ...

class TaskInstance(_message.Message):
    __slots__ = ("task_name", "state", "attempt", "fencing_token", "worker_id", "idempotency_key", "ready_ms", "started_ms", "finished_ms", "retry_at_ms", "last_error", "result", "lease_ttl_ms", "lease_remaining_ms", "lease_checkpoint_ms", "attempts")
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    READY_MS_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_MS_FIELD_NUMBER: _ClassVar[int]
    RETRY_AT_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_CHECKPOINT_MS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    task_name: str
    state: TaskState
    attempt: int
    fencing_token: int
    worker_id: str
    idempotency_key: str
    ready_ms: int
    started_ms: int
    finished_ms: int
    retry_at_ms: int
    last_error: str
    result: bytes
    lease_ttl_ms: int
    lease_remaining_ms: int
    lease_checkpoint_ms: int
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    def __init__(self, task_name: _Optional[str] = ..., state: _Optional[_Union[TaskState, str]] = ..., attempt: _Optional[int] = ..., fencing_token: _Optional[int] = ..., worker_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., ready_ms: _Optional[int] = ..., started_ms: _Optional[int] = ..., finished_ms: _Optional[int] = ..., retry_at_ms: _Optional[int] = ..., last_error: _Optional[str] = ..., result: _Optional[bytes] = ..., lease_ttl_ms: _Optional[int] = ..., lease_remaining_ms: _Optional[int] = ..., lease_checkpoint_ms: _Optional[int] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("attempt", "fencing_token", "worker_id", "started_ms", "finished_ms", "outcome", "error", "exit_code", "duration_ms", "output_tail")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_MS_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TAIL_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    fencing_token: int
    worker_id: str
    started_ms: int
    finished_ms: int
    outcome: AttemptOutcome
    error: str
    exit_code: int
    duration_ms: int
    output_tail: str
    def __init__(self, attempt: _Optional[int] = ..., fencing_token: _Optional[int] = ..., worker_id: _Optional[str] = ..., started_ms: _Optional[int] = ..., finished_ms: _Optional[int] = ..., outcome: _Optional[_Union[AttemptOutcome, str]] = ..., error: _Optional[str] = ..., exit_code: _Optional[int] = ..., duration_ms: _Optional[int] = ..., output_tail: _Optional[str] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("run_id", "job_id", "tenant", "scheduled_for_ms", "state", "trigger", "created_ms", "finished_ms", "tasks", "job_version", "reason", "cancel_requested", "fire_delay_ms", "params")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_FOR_MS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_MS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    JOB_VERSION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    FIRE_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    job_id: str
    tenant: str
    scheduled_for_ms: int
    state: RunState
    trigger: RunTrigger
    created_ms: int
    finished_ms: int
    tasks: _containers.RepeatedCompositeFieldContainer[TaskInstance]
    job_version: int
    reason: str
    cancel_requested: bool
    fire_delay_ms: int
    params: bytes
    def __init__(self, run_id: _Optional[str] = ..., job_id: _Optional[str] = ..., tenant: _Optional[str] = ..., scheduled_for_ms: _Optional[int] = ..., state: _Optional[_Union[RunState, str]] = ..., trigger: _Optional[_Union[RunTrigger, str]] = ..., created_ms: _Optional[int] = ..., finished_ms: _Optional[int] = ..., tasks: _Optional[_Iterable[_Union[TaskInstance, _Mapping]]] = ..., job_version: _Optional[int] = ..., reason: _Optional[str] = ..., cancel_requested: _Optional[bool] = ..., fire_delay_ms: _Optional[int] = ..., params: _Optional[bytes] = ...) -> None: ...

class ClusterLimits(_message.Message):
    __slots__ = ("dedupe_capacity", "dedupe_max_age_ms", "runs_retained_per_job", "max_dead_letters", "max_attempt_records", "max_tokens_per_tenant", "max_queue_circuits_per_tenant")
    DEDUPE_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    DEDUPE_MAX_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    RUNS_RETAINED_PER_JOB_FIELD_NUMBER: _ClassVar[int]
    MAX_DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPT_RECORDS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_PER_TENANT_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUE_CIRCUITS_PER_TENANT_FIELD_NUMBER: _ClassVar[int]
    dedupe_capacity: int
    dedupe_max_age_ms: int
    runs_retained_per_job: int
    max_dead_letters: int
    max_attempt_records: int
    max_tokens_per_tenant: int
    max_queue_circuits_per_tenant: int
    def __init__(self, dedupe_capacity: _Optional[int] = ..., dedupe_max_age_ms: _Optional[int] = ..., runs_retained_per_job: _Optional[int] = ..., max_dead_letters: _Optional[int] = ..., max_attempt_records: _Optional[int] = ..., max_tokens_per_tenant: _Optional[int] = ..., max_queue_circuits_per_tenant: _Optional[int] = ...) -> None: ...

class DeadLetter(_message.Message):
    __slots__ = ("run_id", "task_name", "job_id", "tenant", "attempts", "last_error", "dead_ms")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    DEAD_MS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_name: str
    job_id: str
    tenant: str
    attempts: int
    last_error: str
    dead_ms: int
    def __init__(self, run_id: _Optional[str] = ..., task_name: _Optional[str] = ..., job_id: _Optional[str] = ..., tenant: _Optional[str] = ..., attempts: _Optional[int] = ..., last_error: _Optional[str] = ..., dead_ms: _Optional[int] = ...) -> None: ...

class Token(_message.Message):
    __slots__ = ("token_id", "name", "role", "tenants", "created_ms", "expires_ms", "revoked_ms", "created_by", "cert_subject")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    REVOKED_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    CERT_SUBJECT_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    name: str
    role: str
    tenants: _containers.RepeatedScalarFieldContainer[str]
    created_ms: int
    expires_ms: int
    revoked_ms: int
    created_by: str
    cert_subject: str
    def __init__(self, token_id: _Optional[str] = ..., name: _Optional[str] = ..., role: _Optional[str] = ..., tenants: _Optional[_Iterable[str]] = ..., created_ms: _Optional[int] = ..., expires_ms: _Optional[int] = ..., revoked_ms: _Optional[int] = ..., created_by: _Optional[str] = ..., cert_subject: _Optional[str] = ...) -> None: ...

class Tenant(_message.Message):
    __slots__ = ("name", "weight", "max_concurrency", "max_jobs", "max_queued_tasks", "api_rate_per_s", "api_burst", "created_ms", "updated_ms", "max_active_runs", "max_payload_bytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    MAX_JOBS_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUED_TASKS_FIELD_NUMBER: _ClassVar[int]
    API_RATE_PER_S_FIELD_NUMBER: _ClassVar[int]
    API_BURST_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_RUNS_FIELD_NUMBER: _ClassVar[int]
    MAX_PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    weight: int
    max_concurrency: int
    max_jobs: int
    max_queued_tasks: int
    api_rate_per_s: int
    api_burst: int
    created_ms: int
    updated_ms: int
    max_active_runs: int
    max_payload_bytes: int
    def __init__(self, name: _Optional[str] = ..., weight: _Optional[int] = ..., max_concurrency: _Optional[int] = ..., max_jobs: _Optional[int] = ..., max_queued_tasks: _Optional[int] = ..., api_rate_per_s: _Optional[int] = ..., api_burst: _Optional[int] = ..., created_ms: _Optional[int] = ..., updated_ms: _Optional[int] = ..., max_active_runs: _Optional[int] = ..., max_payload_bytes: _Optional[int] = ...) -> None: ...

class AuditEntry(_message.Message):
    __slots__ = ("at_ms", "actor", "action", "detail")
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    at_ms: int
    actor: str
    action: str
    detail: str
    def __init__(self, at_ms: _Optional[int] = ..., actor: _Optional[str] = ..., action: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class CircuitBreaker(_message.Message):
    __slots__ = ("window_runs", "failure_percent", "cooldown_ms")
    WINDOW_RUNS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_PERCENT_FIELD_NUMBER: _ClassVar[int]
    COOLDOWN_MS_FIELD_NUMBER: _ClassVar[int]
    window_runs: int
    failure_percent: int
    cooldown_ms: int
    def __init__(self, window_runs: _Optional[int] = ..., failure_percent: _Optional[int] = ..., cooldown_ms: _Optional[int] = ...) -> None: ...

class CircuitState(_message.Message):
    __slots__ = ("status", "opened_ms", "recent_failures", "probe_run_id", "opens")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OPENED_MS_FIELD_NUMBER: _ClassVar[int]
    RECENT_FAILURES_FIELD_NUMBER: _ClassVar[int]
    PROBE_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    OPENS_FIELD_NUMBER: _ClassVar[int]
    status: CircuitStatus
    opened_ms: int
    recent_failures: _containers.RepeatedScalarFieldContainer[bool]
    probe_run_id: str
    opens: int
    def __init__(self, status: _Optional[_Union[CircuitStatus, str]] = ..., opened_ms: _Optional[int] = ..., recent_failures: _Optional[_Iterable[bool]] = ..., probe_run_id: _Optional[str] = ..., opens: _Optional[int] = ...) -> None: ...
