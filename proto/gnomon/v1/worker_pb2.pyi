from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LeaseRef(_message.Message):
    __slots__ = ("run_id", "task_name", "fencing_token")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_name: str
    fencing_token: int
    def __init__(self, run_id: _Optional[str] = ..., task_name: _Optional[str] = ..., fencing_token: _Optional[int] = ...) -> None: ...

class WorkerMessage(_message.Message):
    __slots__ = ("hello", "credits", "heartbeat", "complete", "fail", "reports")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    FAIL_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    credits: Credits
    heartbeat: Heartbeat
    complete: Complete
    fail: Fail
    reports: Reports
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., credits: _Optional[_Union[Credits, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., complete: _Optional[_Union[Complete, _Mapping]] = ..., fail: _Optional[_Union[Fail, _Mapping]] = ..., reports: _Optional[_Union[Reports, _Mapping]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("worker_id", "queues", "labels", "held", "accepts_batches")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    ACCEPTS_BATCHES_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    queues: _containers.RepeatedScalarFieldContainer[str]
    labels: _containers.ScalarMap[str, str]
    held: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    accepts_batches: bool
    def __init__(self, worker_id: _Optional[str] = ..., queues: _Optional[_Iterable[str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., held: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ..., accepts_batches: _Optional[bool] = ...) -> None: ...

class Credits(_message.Message):
    __slots__ = ("credits",)
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    credits: int
    def __init__(self, credits: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    def __init__(self, leases: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ...) -> None: ...

class Complete(_message.Message):
    __slots__ = ("lease", "result", "output_tail", "exit_code", "duration_ms")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TAIL_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    lease: LeaseRef
    result: bytes
    output_tail: str
    exit_code: int
    duration_ms: int
    def __init__(self, lease: _Optional[_Union[LeaseRef, _Mapping]] = ..., result: _Optional[bytes] = ..., output_tail: _Optional[str] = ..., exit_code: _Optional[int] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class Fail(_message.Message):
    __slots__ = ("lease", "error", "retryable", "output_tail", "exit_code", "duration_ms")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TAIL_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    lease: LeaseRef
    error: str
    retryable: bool
    output_tail: str
    exit_code: int
    duration_ms: int
    def __init__(self, lease: _Optional[_Union[LeaseRef, _Mapping]] = ..., error: _Optional[str] = ..., retryable: _Optional[bool] = ..., output_tail: _Optional[str] = ..., exit_code: _Optional[int] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class ServerMessage(_message.Message):
    __slots__ = ("welcome", "assign", "heartbeat_ack", "report_ack", "cancel", "batch")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    ASSIGN_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_ACK_FIELD_NUMBER: _ClassVar[int]
    REPORT_ACK_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    assign: Assign
    heartbeat_ack: HeartbeatAck
    report_ack: ReportAck
    cancel: Cancel
    batch: ServerBatch
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., assign: _Optional[_Union[Assign, _Mapping]] = ..., heartbeat_ack: _Optional[_Union[HeartbeatAck, _Mapping]] = ..., report_ack: _Optional[_Union[ReportAck, _Mapping]] = ..., cancel: _Optional[_Union[Cancel, _Mapping]] = ..., batch: _Optional[_Union[ServerBatch, _Mapping]] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("node_id", "heartbeat_interval_ms", "lease_ttl_ms", "resumed_tokens")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    RESUMED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    heartbeat_interval_ms: int
    lease_ttl_ms: int
    resumed_tokens: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, node_id: _Optional[str] = ..., heartbeat_interval_ms: _Optional[int] = ..., lease_ttl_ms: _Optional[int] = ..., resumed_tokens: _Optional[_Iterable[int]] = ...) -> None: ...

class Assign(_message.Message):
    __slots__ = ("lease", "job_id", "tenant", "queue", "attempt", "idempotency_key", "payload", "scheduled_for_ms", "lease_ttl_ms", "deadline_ms", "max_attempts", "traceparent")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_FOR_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    lease: LeaseRef
    job_id: str
    tenant: str
    queue: str
    attempt: int
    idempotency_key: str
    payload: bytes
    scheduled_for_ms: int
    lease_ttl_ms: int
    deadline_ms: int
    max_attempts: int
    traceparent: str
    def __init__(self, lease: _Optional[_Union[LeaseRef, _Mapping]] = ..., job_id: _Optional[str] = ..., tenant: _Optional[str] = ..., queue: _Optional[str] = ..., attempt: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., payload: _Optional[bytes] = ..., scheduled_for_ms: _Optional[int] = ..., lease_ttl_ms: _Optional[int] = ..., deadline_ms: _Optional[int] = ..., max_attempts: _Optional[int] = ..., traceparent: _Optional[str] = ...) -> None: ...

class HeartbeatAck(_message.Message):
    __slots__ = ("valid_tokens", "revoked_tokens")
    VALID_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REVOKED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    valid_tokens: _containers.RepeatedScalarFieldContainer[int]
    revoked_tokens: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, valid_tokens: _Optional[_Iterable[int]] = ..., revoked_tokens: _Optional[_Iterable[int]] = ...) -> None: ...

class ReportAck(_message.Message):
    __slots__ = ("lease", "accepted", "detail", "retry", "reason")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    lease: LeaseRef
    accepted: bool
    detail: str
    retry: bool
    reason: str
    def __init__(self, lease: _Optional[_Union[LeaseRef, _Mapping]] = ..., accepted: _Optional[bool] = ..., detail: _Optional[str] = ..., retry: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class Reports(_message.Message):
    __slots__ = ("completes", "fails")
    COMPLETES_FIELD_NUMBER: _ClassVar[int]
    FAILS_FIELD_NUMBER: _ClassVar[int]
    completes: _containers.RepeatedCompositeFieldContainer[Complete]
    fails: _containers.RepeatedCompositeFieldContainer[Fail]
    def __init__(self, completes: _Optional[_Iterable[_Union[Complete, _Mapping]]] = ..., fails: _Optional[_Iterable[_Union[Fail, _Mapping]]] = ...) -> None: ...

class ServerBatch(_message.Message):
    __slots__ = ("assigns", "report_acks")
    ASSIGNS_FIELD_NUMBER: _ClassVar[int]
    REPORT_ACKS_FIELD_NUMBER: _ClassVar[int]
    assigns: _containers.RepeatedCompositeFieldContainer[Assign]
    report_acks: _containers.RepeatedCompositeFieldContainer[ReportAck]
    def __init__(self, assigns: _Optional[_Iterable[_Union[Assign, _Mapping]]] = ..., report_acks: _Optional[_Iterable[_Union[ReportAck, _Mapping]]] = ...) -> None: ...

class Cancel(_message.Message):
    __slots__ = ("lease", "reason")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    lease: LeaseRef
    reason: str
    def __init__(self, lease: _Optional[_Union[LeaseRef, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class LeaseTasksRequest(_message.Message):
    __slots__ = ("worker_id", "queues", "capacity", "wait_ms")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    queues: _containers.RepeatedScalarFieldContainer[str]
    capacity: int
    wait_ms: int
    def __init__(self, worker_id: _Optional[str] = ..., queues: _Optional[_Iterable[str]] = ..., capacity: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class LeasedTask(_message.Message):
    __slots__ = ("lease_id", "fencing_token", "idempotency_key", "ttl_ms", "payload", "deadline_ms", "run_id", "task_name", "job_id", "tenant", "queue", "attempt", "max_attempts", "scheduled_for_ms", "traceparent")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_FOR_MS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    fencing_token: int
    idempotency_key: str
    ttl_ms: int
    payload: bytes
    deadline_ms: int
    run_id: str
    task_name: str
    job_id: str
    tenant: str
    queue: str
    attempt: int
    max_attempts: int
    scheduled_for_ms: int
    traceparent: str
    def __init__(self, lease_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., ttl_ms: _Optional[int] = ..., payload: _Optional[bytes] = ..., deadline_ms: _Optional[int] = ..., run_id: _Optional[str] = ..., task_name: _Optional[str] = ..., job_id: _Optional[str] = ..., tenant: _Optional[str] = ..., queue: _Optional[str] = ..., attempt: _Optional[int] = ..., max_attempts: _Optional[int] = ..., scheduled_for_ms: _Optional[int] = ..., traceparent: _Optional[str] = ...) -> None: ...

class LeaseTasksResponse(_message.Message):
    __slots__ = ("tasks", "heartbeat_interval_ms", "lease_ttl_ms")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[LeasedTask]
    heartbeat_interval_ms: int
    lease_ttl_ms: int
    def __init__(self, tasks: _Optional[_Iterable[_Union[LeasedTask, _Mapping]]] = ..., heartbeat_interval_ms: _Optional[int] = ..., lease_ttl_ms: _Optional[int] = ...) -> None: ...

class RenewLeasesRequest(_message.Message):
    __slots__ = ("worker_id", "lease_ids")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_IDS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    lease_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, worker_id: _Optional[str] = ..., lease_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class LeaseStatus(_message.Message):
    __slots__ = ("lease_id", "status", "ttl_ms")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    status: str
    ttl_ms: int
    def __init__(self, lease_id: _Optional[str] = ..., status: _Optional[str] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class RenewLeasesResponse(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[LeaseStatus]
    def __init__(self, leases: _Optional[_Iterable[_Union[LeaseStatus, _Mapping]]] = ...) -> None: ...

class CompleteLeaseRequest(_message.Message):
    __slots__ = ("lease_id", "fencing_token", "result", "output_tail", "exit_code", "duration_ms", "worker_id")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TAIL_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    fencing_token: int
    result: bytes
    output_tail: str
    exit_code: int
    duration_ms: int
    worker_id: str
    def __init__(self, lease_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., result: _Optional[bytes] = ..., output_tail: _Optional[str] = ..., exit_code: _Optional[int] = ..., duration_ms: _Optional[int] = ..., worker_id: _Optional[str] = ...) -> None: ...

class FailLeaseRequest(_message.Message):
    __slots__ = ("lease_id", "fencing_token", "error", "retryable", "output_tail", "exit_code", "duration_ms", "worker_id")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TAIL_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    fencing_token: int
    error: str
    retryable: bool
    output_tail: str
    exit_code: int
    duration_ms: int
    worker_id: str
    def __init__(self, lease_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., error: _Optional[str] = ..., retryable: _Optional[bool] = ..., output_tail: _Optional[str] = ..., exit_code: _Optional[int] = ..., duration_ms: _Optional[int] = ..., worker_id: _Optional[str] = ...) -> None: ...

class LeaseReportResponse(_message.Message):
    __slots__ = ("accepted", "reason", "detail", "retry")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    reason: str
    detail: str
    retry: bool
    def __init__(self, accepted: _Optional[bool] = ..., reason: _Optional[str] = ..., detail: _Optional[str] = ..., retry: _Optional[bool] = ...) -> None: ...
