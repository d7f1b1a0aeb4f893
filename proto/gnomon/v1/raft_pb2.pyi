from gnomon.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CommandBatch(_message.Message):
    __slots__ = ("now_ms", "commands")
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    now_ms: int
    commands: _containers.RepeatedCompositeFieldContainer[Command]
    def __init__(self, now_ms: _Optional[int] = ..., commands: _Optional[_Iterable[_Union[Command, _Mapping]]] = ...) -> None: ...

class Command(_message.Message):
    __slots__ = ("create_job", "update_job", "delete_job", "set_paused", "fire", "trigger_job", "cancel_run", "grant_leases", "complete_task", "fail_task", "expire_leases", "replay_dead_letters", "barrier", "set_limits", "checkpoint_leases", "create_jobs", "create_token", "revoke_token", "set_tenant", "record_audit", "rerun_run", "cancel_task", "reset_circuit", "start_backfill", "backfill_step", "cancel_backfill", "set_queue_circuit", "discard_dead_letters")
    CREATE_JOB_FIELD_NUMBER: _ClassVar[int]
    UPDATE_JOB_FIELD_NUMBER: _ClassVar[int]
    DELETE_JOB_FIELD_NUMBER: _ClassVar[int]
    SET_PAUSED_FIELD_NUMBER: _ClassVar[int]
    FIRE_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_JOB_FIELD_NUMBER: _ClassVar[int]
    CANCEL_RUN_FIELD_NUMBER: _ClassVar[int]
    GRANT_LEASES_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_TASK_FIELD_NUMBER: _ClassVar[int]
    FAIL_TASK_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_LEASES_FIELD_NUMBER: _ClassVar[int]
    REPLAY_DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    BARRIER_FIELD_NUMBER: _ClassVar[int]
    SET_LIMITS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_LEASES_FIELD_NUMBER: _ClassVar[int]
    CREATE_JOBS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REVOKE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SET_TENANT_FIELD_NUMBER: _ClassVar[int]
    RECORD_AUDIT_FIELD_NUMBER: _ClassVar[int]
    RERUN_RUN_FIELD_NUMBER: _ClassVar[int]
    CANCEL_TASK_FIELD_NUMBER: _ClassVar[int]
    RESET_CIRCUIT_FIELD_NUMBER: _ClassVar[int]
    START_BACKFILL_FIELD_NUMBER: _ClassVar[int]
    BACKFILL_STEP_FIELD_NUMBER: _ClassVar[int]
    CANCEL_BACKFILL_FIELD_NUMBER: _ClassVar[int]
    SET_QUEUE_CIRCUIT_FIELD_NUMBER: _ClassVar[int]
    DISCARD_DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    create_job: CreateJobCmd
    update_job: UpdateJobCmd
    delete_job: DeleteJobCmd
    set_paused: SetPausedCmd
    fire: FireCmd
    trigger_job: TriggerJobCmd
    cancel_run: CancelRunCmd
    grant_leases: GrantLeasesCmd
    complete_task: CompleteTaskCmd
    fail_task: FailTaskCmd
    expire_leases: ExpireLeasesCmd
    replay_dead_letters: ReplayDeadLettersCmd
    barrier: BarrierCmd
    set_limits: SetLimitsCmd
    checkpoint_leases: CheckpointLeasesCmd
    create_jobs: CreateJobsCmd
    create_token: CreateTokenCmd
    revoke_token: RevokeTokenCmd
    set_tenant: SetTenantCmd
    record_audit: RecordAuditCmd
    rerun_run: RerunRunCmd
    cancel_task: CancelTaskCmd
    reset_circuit: ResetCircuitCmd
    start_backfill: StartBackfillCmd
    backfill_step: BackfillStepCmd
    cancel_backfill: CancelBackfillCmd
    set_queue_circuit: SetQueueCircuitCmd
    discard_dead_letters: DiscardDeadLettersCmd
    def __init__(self, create_job: _Optional[_Union[CreateJobCmd, _Mapping]] = ..., update_job: _Optional[_Union[UpdateJobCmd, _Mapping]] = ..., delete_job: _Optional[_Union[DeleteJobCmd, _Mapping]] = ..., set_paused: _Optional[_Union[SetPausedCmd, _Mapping]] = ..., fire: _Optional[_Union[FireCmd, _Mapping]] = ..., trigger_job: _Optional[_Union[TriggerJobCmd, _Mapping]] = ..., cancel_run: _Optional[_Union[CancelRunCmd, _Mapping]] = ..., grant_leases: _Optional[_Union[GrantLeasesCmd, _Mapping]] = ..., complete_task: _Optional[_Union[CompleteTaskCmd, _Mapping]] = ..., fail_task: _Optional[_Union[FailTaskCmd, _Mapping]] = ..., expire_leases: _Optional[_Union[ExpireLeasesCmd, _Mapping]] = ..., replay_dead_letters: _Optional[_Union[ReplayDeadLettersCmd, _Mapping]] = ..., barrier: _Optional[_Union[BarrierCmd, _Mapping]] = ..., set_limits: _Optional[_Union[SetLimitsCmd, _Mapping]] = ..., checkpoint_leases: _Optional[_Union[CheckpointLeasesCmd, _Mapping]] = ..., create_jobs: _Optional[_Union[CreateJobsCmd, _Mapping]] = ..., create_token: _Optional[_Union[CreateTokenCmd, _Mapping]] = ..., revoke_token: _Optional[_Union[RevokeTokenCmd, _Mapping]] = ..., set_tenant: _Optional[_Union[SetTenantCmd, _Mapping]] = ..., record_audit: _Optional[_Union[RecordAuditCmd, _Mapping]] = ..., rerun_run: _Optional[_Union[RerunRunCmd, _Mapping]] = ..., cancel_task: _Optional[_Union[CancelTaskCmd, _Mapping]] = ..., reset_circuit: _Optional[_Union[ResetCircuitCmd, _Mapping]] = ..., start_backfill: _Optional[_Union[StartBackfillCmd, _Mapping]] = ..., backfill_step: _Optional[_Union[BackfillStepCmd, _Mapping]] = ..., cancel_backfill: _Optional[_Union[CancelBackfillCmd, _Mapping]] = ..., set_queue_circuit: _Optional[_Union[SetQueueCircuitCmd, _Mapping]] = ..., discard_dead_letters: _Optional[_Union[DiscardDeadLettersCmd, _Mapping]] = ...) -> None: ...

class CreateJobCmd(_message.Message):
    __slots__ = ("request_id", "spec", "next_fire_ms", "max_jobs_per_tenant", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_JOBS_PER_TENANT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    spec: _types_pb2.JobSpec
    next_fire_ms: int
    max_jobs_per_tenant: int
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., spec: _Optional[_Union[_types_pb2.JobSpec, _Mapping]] = ..., next_fire_ms: _Optional[int] = ..., max_jobs_per_tenant: _Optional[int] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...

class CreateJobsCmd(_message.Message):
    __slots__ = ("request_id", "items", "max_jobs_per_tenant", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    MAX_JOBS_PER_TENANT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    items: _containers.RepeatedCompositeFieldContainer[CreateJobItem]
    max_jobs_per_tenant: int
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., items: _Optional[_Iterable[_Union[CreateJobItem, _Mapping]]] = ..., max_jobs_per_tenant: _Optional[int] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...

class CreateJobItem(_message.Message):
    __slots__ = ("spec", "next_fire_ms")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_MS_FIELD_NUMBER: _ClassVar[int]
    spec: _types_pb2.JobSpec
    next_fire_ms: int
    def __init__(self, spec: _Optional[_Union[_types_pb2.JobSpec, _Mapping]] = ..., next_fire_ms: _Optional[int] = ...) -> None: ...

class UpdateJobCmd(_message.Message):
    __slots__ = ("request_id", "job_id", "spec", "expected_version", "next_fire_ms", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_MS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    job_id: str
    spec: _types_pb2.JobSpec
    expected_version: int
    next_fire_ms: int
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., job_id: _Optional[str] = ..., spec: _Optional[_Union[_types_pb2.JobSpec, _Mapping]] = ..., expected_version: _Optional[int] = ..., next_fire_ms: _Optional[int] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...

class DeleteJobCmd(_message.Message):
    __slots__ = ("request_id", "job_id", "expected_version", "cancel_running", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    CANCEL_RUNNING_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    job_id: str
    expected_version: int
    cancel_running: bool
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., job_id: _Optional[str] = ..., expected_version: _Optional[int] = ..., cancel_running: _Optional[bool] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...

class SetPausedCmd(_message.Message):
    __slots__ = ("request_id", "job_id", "paused", "next_fire_ms", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_MS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    job_id: str
    paused: bool
    next_fire_ms: int
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., job_id: _Optional[str] = ..., paused: _Optional[bool] = ..., next_fire_ms: _Optional[int] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...

class FireCmd(_message.Message):
    __slots__ = ("job_id", "scheduled_for_ms", "next_fire_ms", "skip", "delay_ms")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_FOR_MS_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_MS_FIELD_NUMBER: _ClassVar[int]
    SKIP_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    scheduled_for_ms: int
    next_fire_ms: int
    skip: bool
    delay_ms: int
    def __init__(self, job_id: _Optional[str] = ..., scheduled_for_ms: _Optional[int] = ..., next_fire_ms: _Optional[int] = ..., skip: _Optional[bool] = ..., delay_ms: _Optional[int] = ...) -> None: ...

class TriggerJobCmd(_message.Message):
    __slots__ = ("request_id", "job_id", "overlap_policy", "params", "payloads", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_POLICY_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    PAYLOADS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    job_id: str
    overlap_policy: _types_pb2.OverlapPolicy
    params: bytes
    payloads: _containers.RepeatedCompositeFieldContainer[TaskPayload]
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., job_id: _Optional[str] = ..., overlap_policy: _Optional[_Union[_types_pb2.OverlapPolicy, str]] = ..., params: _Optional[bytes] = ..., payloads: _Optional[_Iterable[_Union[TaskPayload, _Mapping]]] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...

class CancelRunCmd(_message.Message):
    __slots__ = ("request_id", "run_id", "reason", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    run_id: str
    reason: str
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., run_id: _Optional[str] = ..., reason: _Optional[str] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...

class LeaseGrant(_message.Message):
    __slots__ = ("run_id", "task_name", "worker_id", "lease_ttl_ms")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_name: str
    worker_id: str
    lease_ttl_ms: int
    def __init__(self, run_id: _Optional[str] = ..., task_name: _Optional[str] = ..., worker_id: _Optional[str] = ..., lease_ttl_ms: _Optional[int] = ...) -> None: ...

class GrantLeasesCmd(_message.Message):
    __slots__ = ("grants",)
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    grants: _containers.RepeatedCompositeFieldContainer[LeaseGrant]
    def __init__(self, grants: _Optional[_Iterable[_Union[LeaseGrant, _Mapping]]] = ...) -> None: ...

class CompleteTaskCmd(_message.Message):
    __slots__ = ("run_id", "task_name", "fencing_token", "result", "output_tail", "exit_code", "duration_ms")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TAIL_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_name: str
    fencing_token: int
    result: bytes
    output_tail: str
    exit_code: int
    duration_ms: int
    def __init__(self, run_id: _Optional[str] = ..., task_name: _Optional[str] = ..., fencing_token: _Optional[int] = ..., result: _Optional[bytes] = ..., output_tail: _Optional[str] = ..., exit_code: _Optional[int] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class FailTaskCmd(_message.Message):
    __slots__ = ("run_id", "task_name", "fencing_token", "error", "retryable", "jitter_draw", "output_tail", "exit_code", "duration_ms")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    JITTER_DRAW_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TAIL_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_name: str
    fencing_token: int
    error: str
    retryable: bool
    jitter_draw: float
    output_tail: str
    exit_code: int
    duration_ms: int
    def __init__(self, run_id: _Optional[str] = ..., task_name: _Optional[str] = ..., fencing_token: _Optional[int] = ..., error: _Optional[str] = ..., retryable: _Optional[bool] = ..., jitter_draw: _Optional[float] = ..., output_tail: _Optional[str] = ..., exit_code: _Optional[int] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class ExpiredLease(_message.Message):
    __slots__ = ("run_id", "task_name", "fencing_token", "reason", "jitter_draw")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    JITTER_DRAW_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_name: str
    fencing_token: int
    reason: str
    jitter_draw: float
    def __init__(self, run_id: _Optional[str] = ..., task_name: _Optional[str] = ..., fencing_token: _Optional[int] = ..., reason: _Optional[str] = ..., jitter_draw: _Optional[float] = ...) -> None: ...

class ExpireLeasesCmd(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[ExpiredLease]
    def __init__(self, leases: _Optional[_Iterable[_Union[ExpiredLease, _Mapping]]] = ...) -> None: ...

class ReplayDeadLettersCmd(_message.Message):
    __slots__ = ("request_id", "tasks", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    tasks: _containers.RepeatedCompositeFieldContainer[TaskKey]
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[TaskKey, _Mapping]]] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...

class DiscardDeadLettersCmd(_message.Message):
    __slots__ = ("request_id", "tasks", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    tasks: _containers.RepeatedCompositeFieldContainer[TaskKey]
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[TaskKey, _Mapping]]] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...

class TaskKey(_message.Message):
    __slots__ = ("run_id", "task_name")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_name: str
    def __init__(self, run_id: _Optional[str] = ..., task_name: _Optional[str] = ...) -> None: ...

class BarrierCmd(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SetLimitsCmd(_message.Message):
    __slots__ = ("request_id", "limits", "expected_version", "bootstrap", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    BOOTSTRAP_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    limits: _types_pb2.ClusterLimits
    expected_version: int
    bootstrap: bool
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., limits: _Optional[_Union[_types_pb2.ClusterLimits, _Mapping]] = ..., expected_version: _Optional[int] = ..., bootstrap: _Optional[bool] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...

class LeaseCheckpoint(_message.Message):
    __slots__ = ("run_id", "task_name", "fencing_token", "remaining_ms")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_name: str
    fencing_token: int
    remaining_ms: int
    def __init__(self, run_id: _Optional[str] = ..., task_name: _Optional[str] = ..., fencing_token: _Optional[int] = ..., remaining_ms: _Optional[int] = ...) -> None: ...

class CheckpointLeasesCmd(_message.Message):
    __slots__ = ("checkpoints",)
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[LeaseCheckpoint]
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[LeaseCheckpoint, _Mapping]]] = ...) -> None: ...

class CreateTokenCmd(_message.Message):
    __slots__ = ("request_id", "name", "role", "tenants", "secret_sha256", "expires_ms", "created_by", "cert_subject", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    SECRET_SHA256_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    CERT_SUBJECT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    name: str
    role: str
    tenants: _containers.RepeatedScalarFieldContainer[str]
    secret_sha256: str
    expires_ms: int
    created_by: str
    cert_subject: str
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., name: _Optional[str] = ..., role: _Optional[str] = ..., tenants: _Optional[_Iterable[str]] = ..., secret_sha256: _Optional[str] = ..., expires_ms: _Optional[int] = ..., created_by: _Optional[str] = ..., cert_subject: _Optional[str] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...

class RevokeTokenCmd(_message.Message):
    __slots__ = ("request_id", "token_id", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    token_id: str
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., token_id: _Optional[str] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...

class SetTenantCmd(_message.Message):
    __slots__ = ("request_id", "tenant", "create", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    tenant: _types_pb2.Tenant
    create: bool
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., tenant: _Optional[_Union[_types_pb2.Tenant, _Mapping]] = ..., create: _Optional[bool] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...

class RecordAuditCmd(_message.Message):
    __slots__ = ("actor", "action", "detail")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    actor: str
    action: str
    detail: str
    def __init__(self, actor: _Optional[str] = ..., action: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class TaskPayload(_message.Message):
    __slots__ = ("task_name", "payload")
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    task_name: str
    payload: bytes
    def __init__(self, task_name: _Optional[str] = ..., payload: _Optional[bytes] = ...) -> None: ...

class RerunRunCmd(_message.Message):
    __slots__ = ("request_id", "run_id", "task_names", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_NAMES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    run_id: str
    task_names: _containers.RepeatedScalarFieldContainer[str]
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., run_id: _Optional[str] = ..., task_names: _Optional[_Iterable[str]] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...

class CancelTaskCmd(_message.Message):
    __slots__ = ("request_id", "run_id", "task_name", "reason", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    run_id: str
    task_name: str
    reason: str
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., run_id: _Optional[str] = ..., task_name: _Optional[str] = ..., reason: _Optional[str] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...

class ResetCircuitCmd(_message.Message):
    __slots__ = ("request_id", "job_id", "tenant", "queue", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    job_id: str
    tenant: str
    queue: str
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., job_id: _Optional[str] = ..., tenant: _Optional[str] = ..., queue: _Optional[str] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...

class StartBackfillCmd(_message.Message):
    __slots__ = ("request_id", "job_id", "from_ms", "to_ms", "total_slots", "overlap_policy", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_MS_FIELD_NUMBER: _ClassVar[int]
    TO_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SLOTS_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_POLICY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    job_id: str
    from_ms: int
    to_ms: int
    total_slots: int
    overlap_policy: _types_pb2.OverlapPolicy
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., job_id: _Optional[str] = ..., from_ms: _Optional[int] = ..., to_ms: _Optional[int] = ..., total_slots: _Optional[int] = ..., overlap_policy: _Optional[_Union[_types_pb2.OverlapPolicy, str]] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...

class BackfillStepCmd(_message.Message):
    __slots__ = ("job_id", "cursor_ms", "slots_ms", "next_cursor_ms", "done")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CURSOR_MS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_MS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_MS_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    cursor_ms: int
    slots_ms: _containers.RepeatedScalarFieldContainer[int]
    next_cursor_ms: int
    done: bool
    def __init__(self, job_id: _Optional[str] = ..., cursor_ms: _Optional[int] = ..., slots_ms: _Optional[_Iterable[int]] = ..., next_cursor_ms: _Optional[int] = ..., done: _Optional[bool] = ...) -> None: ...

class CancelBackfillCmd(_message.Message):
    __slots__ = ("request_id", "job_id", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    job_id: str
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., job_id: _Optional[str] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...

class SetQueueCircuitCmd(_message.Message):
    __slots__ = ("request_id", "tenant", "queue", "breaker", "request_scope", "request_fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    tenant: str
    queue: str
    breaker: _types_pb2.CircuitBreaker
    request_scope: str
    request_fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., tenant: _Optional[str] = ..., queue: _Optional[str] = ..., breaker: _Optional[_Union[_types_pb2.CircuitBreaker, _Mapping]] = ..., request_scope: _Optional[str] = ..., request_fingerprint: _Optional[bytes] = ...) -> None: ...
