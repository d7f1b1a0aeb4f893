from gnomon.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Consistency(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONSISTENCY_UNSPECIFIED: _ClassVar[Consistency]
    CONSISTENCY_LINEARIZABLE: _ClassVar[Consistency]
    CONSISTENCY_STALE: _ClassVar[Consistency]

class WaitKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WAIT_KIND_UNSPECIFIED: _ClassVar[WaitKind]
    WAIT_KIND_SKIPPED: _ClassVar[WaitKind]
    WAIT_KIND_LATE_FIRE: _ClassVar[WaitKind]
    WAIT_KIND_OVERLAP: _ClassVar[WaitKind]
    WAIT_KIND_CIRCUIT_OPEN: _ClassVar[WaitKind]
    WAIT_KIND_FIRE_ADMISSION: _ClassVar[WaitKind]
    WAIT_KIND_UPSTREAM: _ClassVar[WaitKind]
    WAIT_KIND_RETRY_BACKOFF: _ClassVar[WaitKind]
    WAIT_KIND_NO_WORKER: _ClassVar[WaitKind]
    WAIT_KIND_NO_FREE_WORKER: _ClassVar[WaitKind]
    WAIT_KIND_TENANT_CONCURRENCY: _ClassVar[WaitKind]
    WAIT_KIND_QUEUE_CONCURRENCY: _ClassVar[WaitKind]
    WAIT_KIND_DISPATCH: _ClassVar[WaitKind]
    WAIT_KIND_RUNNING: _ClassVar[WaitKind]

class RunSort(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_SORT_UNSPECIFIED: _ClassVar[RunSort]
    RUN_SORT_CREATED_DESC: _ClassVar[RunSort]
    RUN_SORT_CREATED_ASC: _ClassVar[RunSort]
    RUN_SORT_DURATION_DESC: _ClassVar[RunSort]
    RUN_SORT_DURATION_ASC: _ClassVar[RunSort]
CONSISTENCY_UNSPECIFIED: Consistency
CONSISTENCY_LINEARIZABLE: Consistency
CONSISTENCY_STALE: Consistency
WAIT_KIND_UNSPECIFIED: WaitKind
WAIT_KIND_SKIPPED: WaitKind
WAIT_KIND_LATE_FIRE: WaitKind
WAIT_KIND_OVERLAP: WaitKind
WAIT_KIND_CIRCUIT_OPEN: WaitKind
WAIT_KIND_FIRE_ADMISSION: WaitKind
WAIT_KIND_UPSTREAM: WaitKind
WAIT_KIND_RETRY_BACKOFF: WaitKind
WAIT_KIND_NO_WORKER: WaitKind
WAIT_KIND_NO_FREE_WORKER: WaitKind
WAIT_KIND_TENANT_CONCURRENCY: WaitKind
WAIT_KIND_QUEUE_CONCURRENCY: WaitKind
WAIT_KIND_DISPATCH: WaitKind
WAIT_KIND_RUNNING: WaitKind
RUN_SORT_UNSPECIFIED: RunSort
RUN_SORT_CREATED_DESC: RunSort
RUN_SORT_CREATED_ASC: RunSort
RUN_SORT_DURATION_DESC: RunSort
RUN_SORT_DURATION_ASC: RunSort

class ExplainRunRequest(_message.Message):
    __slots__ = ("run_id", "consistency")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    consistency: Consistency
    def __init__(self, run_id: _Optional[str] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class ExplainRunResponse(_message.Message):
    __slots__ = ("run", "waits", "workers_known")
    RUN_FIELD_NUMBER: _ClassVar[int]
    WAITS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_KNOWN_FIELD_NUMBER: _ClassVar[int]
    run: _types_pb2.Run
    waits: _containers.RepeatedCompositeFieldContainer[RunWait]
    workers_known: bool
    def __init__(self, run: _Optional[_Union[_types_pb2.Run, _Mapping]] = ..., waits: _Optional[_Iterable[_Union[RunWait, _Mapping]]] = ..., workers_known: _Optional[bool] = ...) -> None: ...

class RunWait(_message.Message):
    __slots__ = ("kind", "task_name", "detail", "limit", "limit_value", "current", "change")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_VALUE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    kind: WaitKind
    task_name: str
    detail: str
    limit: str
    limit_value: int
    current: int
    change: str
    def __init__(self, kind: _Optional[_Union[WaitKind, str]] = ..., task_name: _Optional[str] = ..., detail: _Optional[str] = ..., limit: _Optional[str] = ..., limit_value: _Optional[int] = ..., current: _Optional[int] = ..., change: _Optional[str] = ...) -> None: ...

class CreateJobRequest(_message.Message):
    __slots__ = ("request_id", "spec")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    spec: _types_pb2.JobSpec
    def __init__(self, request_id: _Optional[str] = ..., spec: _Optional[_Union[_types_pb2.JobSpec, _Mapping]] = ...) -> None: ...

class CreateJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _types_pb2.Job
    def __init__(self, job: _Optional[_Union[_types_pb2.Job, _Mapping]] = ...) -> None: ...

class CreateJobsRequest(_message.Message):
    __slots__ = ("request_id", "specs")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SPECS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    specs: _containers.RepeatedCompositeFieldContainer[_types_pb2.JobSpec]
    def __init__(self, request_id: _Optional[str] = ..., specs: _Optional[_Iterable[_Union[_types_pb2.JobSpec, _Mapping]]] = ...) -> None: ...

class CreateJobsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CreateJobsResult]
    def __init__(self, results: _Optional[_Iterable[_Union[CreateJobsResult, _Mapping]]] = ...) -> None: ...

class CreateJobsResult(_message.Message):
    __slots__ = ("job", "error")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    job: _types_pb2.Job
    error: ItemError
    def __init__(self, job: _Optional[_Union[_types_pb2.Job, _Mapping]] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ...) -> None: ...

class ItemError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class JobRef(_message.Message):
    __slots__ = ("job_id", "tenant", "name")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    tenant: str
    name: str
    def __init__(self, job_id: _Optional[str] = ..., tenant: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job", "consistency")
    JOB_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    job: JobRef
    consistency: Consistency
    def __init__(self, job: _Optional[_Union[JobRef, _Mapping]] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _types_pb2.Job
    def __init__(self, job: _Optional[_Union[_types_pb2.Job, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("tenant", "after_job_id", "limit", "consistency", "health")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    AFTER_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    after_job_id: str
    limit: int
    consistency: Consistency
    health: bool
    def __init__(self, tenant: _Optional[str] = ..., after_job_id: _Optional[str] = ..., limit: _Optional[int] = ..., consistency: _Optional[_Union[Consistency, str]] = ..., health: _Optional[bool] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_after_job_id", "health")
    class HealthEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: JobHealth
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[JobHealth, _Mapping]] = ...) -> None: ...
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_AFTER_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_types_pb2.Job]
    next_after_job_id: str
    health: _containers.MessageMap[str, JobHealth]
    def __init__(self, jobs: _Optional[_Iterable[_Union[_types_pb2.Job, _Mapping]]] = ..., next_after_job_id: _Optional[str] = ..., health: _Optional[_Mapping[str, JobHealth]] = ...) -> None: ...

class JobHealth(_message.Message):
    __slots__ = ("recent_runs", "succeeded", "failed", "duration_p50_ms", "duration_p99_ms", "lateness_p50_ms", "lateness_p99_ms", "queues")
    RECENT_RUNS_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    DURATION_P50_MS_FIELD_NUMBER: _ClassVar[int]
    DURATION_P99_MS_FIELD_NUMBER: _ClassVar[int]
    LATENESS_P50_MS_FIELD_NUMBER: _ClassVar[int]
    LATENESS_P99_MS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    recent_runs: _containers.RepeatedCompositeFieldContainer[RecentRun]
    succeeded: int
    failed: int
    duration_p50_ms: int
    duration_p99_ms: int
    lateness_p50_ms: int
    lateness_p99_ms: int
    queues: _containers.RepeatedCompositeFieldContainer[QueueHealth]
    def __init__(self, recent_runs: _Optional[_Iterable[_Union[RecentRun, _Mapping]]] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., duration_p50_ms: _Optional[int] = ..., duration_p99_ms: _Optional[int] = ..., lateness_p50_ms: _Optional[int] = ..., lateness_p99_ms: _Optional[int] = ..., queues: _Optional[_Iterable[_Union[QueueHealth, _Mapping]]] = ...) -> None: ...

class RecentRun(_message.Message):
    __slots__ = ("run_id", "state", "duration_ms", "late_ms", "created_ms")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    LATE_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    state: _types_pb2.RunState
    duration_ms: int
    late_ms: int
    created_ms: int
    def __init__(self, run_id: _Optional[str] = ..., state: _Optional[_Union[_types_pb2.RunState, str]] = ..., duration_ms: _Optional[int] = ..., late_ms: _Optional[int] = ..., created_ms: _Optional[int] = ...) -> None: ...

class QueueHealth(_message.Message):
    __slots__ = ("queue", "ready", "oldest_ready_age_ms", "workers", "workers_known")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    OLDEST_READY_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_KNOWN_FIELD_NUMBER: _ClassVar[int]
    queue: str
    ready: int
    oldest_ready_age_ms: int
    workers: int
    workers_known: bool
    def __init__(self, queue: _Optional[str] = ..., ready: _Optional[int] = ..., oldest_ready_age_ms: _Optional[int] = ..., workers: _Optional[int] = ..., workers_known: _Optional[bool] = ...) -> None: ...

class UpdateJobRequest(_message.Message):
    __slots__ = ("request_id", "job", "spec", "expected_version")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    job: JobRef
    spec: _types_pb2.JobSpec
    expected_version: int
    def __init__(self, request_id: _Optional[str] = ..., job: _Optional[_Union[JobRef, _Mapping]] = ..., spec: _Optional[_Union[_types_pb2.JobSpec, _Mapping]] = ..., expected_version: _Optional[int] = ...) -> None: ...

class UpdateJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _types_pb2.Job
    def __init__(self, job: _Optional[_Union[_types_pb2.Job, _Mapping]] = ...) -> None: ...

class DeleteJobRequest(_message.Message):
    __slots__ = ("request_id", "job", "expected_version", "cancel_running")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    CANCEL_RUNNING_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    job: JobRef
    expected_version: int
    cancel_running: bool
    def __init__(self, request_id: _Optional[str] = ..., job: _Optional[_Union[JobRef, _Mapping]] = ..., expected_version: _Optional[int] = ..., cancel_running: _Optional[bool] = ...) -> None: ...

class DeleteJobResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PauseJobRequest(_message.Message):
    __slots__ = ("request_id", "job")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    job: JobRef
    def __init__(self, request_id: _Optional[str] = ..., job: _Optional[_Union[JobRef, _Mapping]] = ...) -> None: ...

class PauseJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _types_pb2.Job
    def __init__(self, job: _Optional[_Union[_types_pb2.Job, _Mapping]] = ...) -> None: ...

class ResumeJobRequest(_message.Message):
    __slots__ = ("request_id", "job")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    job: JobRef
    def __init__(self, request_id: _Optional[str] = ..., job: _Optional[_Union[JobRef, _Mapping]] = ...) -> None: ...

class ResumeJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _types_pb2.Job
    def __init__(self, job: _Optional[_Union[_types_pb2.Job, _Mapping]] = ...) -> None: ...

class TriggerJobRequest(_message.Message):
    __slots__ = ("request_id", "job", "overlap_policy", "params_json")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_POLICY_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    job: JobRef
    overlap_policy: _types_pb2.OverlapPolicy
    params_json: str
    def __init__(self, request_id: _Optional[str] = ..., job: _Optional[_Union[JobRef, _Mapping]] = ..., overlap_policy: _Optional[_Union[_types_pb2.OverlapPolicy, str]] = ..., params_json: _Optional[str] = ...) -> None: ...

class TriggerJobResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _types_pb2.Run
    def __init__(self, run: _Optional[_Union[_types_pb2.Run, _Mapping]] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id", "consistency")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    consistency: Consistency
    def __init__(self, run_id: _Optional[str] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _types_pb2.Run
    def __init__(self, run: _Optional[_Union[_types_pb2.Run, _Mapping]] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("job", "limit", "before_ms", "consistency")
    JOB_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    BEFORE_MS_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    job: JobRef
    limit: int
    before_ms: int
    consistency: Consistency
    def __init__(self, job: _Optional[_Union[JobRef, _Mapping]] = ..., limit: _Optional[int] = ..., before_ms: _Optional[int] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[_types_pb2.Run]
    def __init__(self, runs: _Optional[_Iterable[_Union[_types_pb2.Run, _Mapping]]] = ...) -> None: ...

class ListRunsAcrossJobsRequest(_message.Message):
    __slots__ = ("tenant", "job_id", "queue", "state", "trigger", "since_ms", "until_ms", "late", "late_ms", "errors", "sort", "limit", "page_token", "consistency")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    LATE_FIELD_NUMBER: _ClassVar[int]
    LATE_MS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    SORT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    tenant: _containers.RepeatedScalarFieldContainer[str]
    job_id: str
    queue: str
    state: _containers.RepeatedScalarFieldContainer[_types_pb2.RunState]
    trigger: _containers.RepeatedScalarFieldContainer[_types_pb2.RunTrigger]
    since_ms: int
    until_ms: int
    late: bool
    late_ms: int
    errors: bool
    sort: RunSort
    limit: int
    page_token: str
    consistency: Consistency
    def __init__(self, tenant: _Optional[_Iterable[str]] = ..., job_id: _Optional[str] = ..., queue: _Optional[str] = ..., state: _Optional[_Iterable[_Union[_types_pb2.RunState, str]]] = ..., trigger: _Optional[_Iterable[_Union[_types_pb2.RunTrigger, str]]] = ..., since_ms: _Optional[int] = ..., until_ms: _Optional[int] = ..., late: _Optional[bool] = ..., late_ms: _Optional[int] = ..., errors: _Optional[bool] = ..., sort: _Optional[_Union[RunSort, str]] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class ListRunsAcrossJobsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[_types_pb2.Run]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[_types_pb2.Run, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ("request_id", "run_id", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    run_id: str
    reason: str
    def __init__(self, request_id: _Optional[str] = ..., run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _types_pb2.Run
    def __init__(self, run: _Optional[_Union[_types_pb2.Run, _Mapping]] = ...) -> None: ...

class ListDeadLettersRequest(_message.Message):
    __slots__ = ("tenant", "limit", "consistency")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    limit: int
    consistency: Consistency
    def __init__(self, tenant: _Optional[str] = ..., limit: _Optional[int] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class ListDeadLettersResponse(_message.Message):
    __slots__ = ("dead_letters",)
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    dead_letters: _containers.RepeatedCompositeFieldContainer[_types_pb2.DeadLetter]
    def __init__(self, dead_letters: _Optional[_Iterable[_Union[_types_pb2.DeadLetter, _Mapping]]] = ...) -> None: ...

class TaskRef(_message.Message):
    __slots__ = ("run_id", "task_name")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_name: str
    def __init__(self, run_id: _Optional[str] = ..., task_name: _Optional[str] = ...) -> None: ...

class ReplayDeadLettersRequest(_message.Message):
    __slots__ = ("request_id", "tasks", "tenant", "all", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ALL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    tasks: _containers.RepeatedCompositeFieldContainer[TaskRef]
    tenant: str
    all: bool
    reason: str
    def __init__(self, request_id: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[TaskRef, _Mapping]]] = ..., tenant: _Optional[str] = ..., all: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class DiscardDeadLettersRequest(_message.Message):
    __slots__ = ("request_id", "tasks", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    tasks: _containers.RepeatedCompositeFieldContainer[TaskRef]
    reason: str
    def __init__(self, request_id: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[TaskRef, _Mapping]]] = ..., reason: _Optional[str] = ...) -> None: ...

class DiscardDeadLettersResponse(_message.Message):
    __slots__ = ("discarded",)
    DISCARDED_FIELD_NUMBER: _ClassVar[int]
    discarded: _containers.RepeatedCompositeFieldContainer[TaskRef]
    def __init__(self, discarded: _Optional[_Iterable[_Union[TaskRef, _Mapping]]] = ...) -> None: ...

class ReplayDeadLettersResponse(_message.Message):
    __slots__ = ("replayed",)
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    replayed: _containers.RepeatedCompositeFieldContainer[TaskRef]
    def __init__(self, replayed: _Optional[_Iterable[_Union[TaskRef, _Mapping]]] = ...) -> None: ...

class ExportHistoryRequest(_message.Message):
    __slots__ = ("after_run_id", "page_runs", "min_applied_index")
    AFTER_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_RUNS_FIELD_NUMBER: _ClassVar[int]
    MIN_APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    after_run_id: str
    page_runs: int
    min_applied_index: int
    def __init__(self, after_run_id: _Optional[str] = ..., page_runs: _Optional[int] = ..., min_applied_index: _Optional[int] = ...) -> None: ...

class ExportHistoryPage(_message.Message):
    __slots__ = ("records", "last")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[HistoryRecord]
    last: bool
    def __init__(self, records: _Optional[_Iterable[_Union[HistoryRecord, _Mapping]]] = ..., last: _Optional[bool] = ...) -> None: ...

class HistoryRecord(_message.Message):
    __slots__ = ("job_id", "scheduled_for_ms", "run_id", "run")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_FOR_MS_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    scheduled_for_ms: int
    run_id: str
    run: bytes
    def __init__(self, job_id: _Optional[str] = ..., scheduled_for_ms: _Optional[int] = ..., run_id: _Optional[str] = ..., run: _Optional[bytes] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ("include_digest",)
    INCLUDE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    include_digest: bool
    def __init__(self, include_digest: _Optional[bool] = ...) -> None: ...

class SetLimitsRequest(_message.Message):
    __slots__ = ("request_id", "limits", "expected_version")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    limits: _types_pb2.ClusterLimits
    expected_version: int
    def __init__(self, request_id: _Optional[str] = ..., limits: _Optional[_Union[_types_pb2.ClusterLimits, _Mapping]] = ..., expected_version: _Optional[int] = ...) -> None: ...

class SetLimitsResponse(_message.Message):
    __slots__ = ("limits", "limits_version")
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_VERSION_FIELD_NUMBER: _ClassVar[int]
    limits: _types_pb2.ClusterLimits
    limits_version: int
    def __init__(self, limits: _Optional[_Union[_types_pb2.ClusterLimits, _Mapping]] = ..., limits_version: _Optional[int] = ...) -> None: ...

class NodeStatus(_message.Message):
    __slots__ = ("node_id", "raft_address", "grpc_address", "role", "match_index", "connected", "match_index_known", "http_address")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    MATCH_INDEX_KNOWN_FIELD_NUMBER: _ClassVar[int]
    HTTP_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    raft_address: str
    grpc_address: str
    role: str
    match_index: int
    connected: bool
    match_index_known: bool
    http_address: str
    def __init__(self, node_id: _Optional[str] = ..., raft_address: _Optional[str] = ..., grpc_address: _Optional[str] = ..., role: _Optional[str] = ..., match_index: _Optional[int] = ..., connected: _Optional[bool] = ..., match_index_known: _Optional[bool] = ..., http_address: _Optional[str] = ...) -> None: ...

class LeaderChange(_message.Message):
    __slots__ = ("at_ms", "term", "leader_node_id", "previous_leader_node_id", "cause")
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_LEADER_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    at_ms: int
    term: int
    leader_node_id: str
    previous_leader_node_id: str
    cause: str
    def __init__(self, at_ms: _Optional[int] = ..., term: _Optional[int] = ..., leader_node_id: _Optional[str] = ..., previous_leader_node_id: _Optional[str] = ..., cause: _Optional[str] = ...) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("node_id", "leader_node_id", "leader_grpc_address", "term", "commit_index", "applied_index", "nodes", "clock_ms", "jobs", "active_runs", "dead_letters", "state_digest", "version", "limits", "limits_version", "dead_letters_evicted", "leader_changes")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    CLOCK_MS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_RUNS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    STATE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_VERSION_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_EVICTED_FIELD_NUMBER: _ClassVar[int]
    LEADER_CHANGES_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    leader_node_id: str
    leader_grpc_address: str
    term: int
    commit_index: int
    applied_index: int
    nodes: _containers.RepeatedCompositeFieldContainer[NodeStatus]
    clock_ms: int
    jobs: int
    active_runs: int
    dead_letters: int
    state_digest: str
    version: str
    limits: _types_pb2.ClusterLimits
    limits_version: int
    dead_letters_evicted: int
    leader_changes: _containers.RepeatedCompositeFieldContainer[LeaderChange]
    def __init__(self, node_id: _Optional[str] = ..., leader_node_id: _Optional[str] = ..., leader_grpc_address: _Optional[str] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., nodes: _Optional[_Iterable[_Union[NodeStatus, _Mapping]]] = ..., clock_ms: _Optional[int] = ..., jobs: _Optional[int] = ..., active_runs: _Optional[int] = ..., dead_letters: _Optional[int] = ..., state_digest: _Optional[str] = ..., version: _Optional[str] = ..., limits: _Optional[_Union[_types_pb2.ClusterLimits, _Mapping]] = ..., limits_version: _Optional[int] = ..., dead_letters_evicted: _Optional[int] = ..., leader_changes: _Optional[_Iterable[_Union[LeaderChange, _Mapping]]] = ...) -> None: ...

class AddNodeRequest(_message.Message):
    __slots__ = ("node_id", "raft_address", "grpc_address", "http_address", "catch_up_timeout_ms")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HTTP_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    raft_address: str
    grpc_address: str
    http_address: str
    catch_up_timeout_ms: int
    def __init__(self, node_id: _Optional[str] = ..., raft_address: _Optional[str] = ..., grpc_address: _Optional[str] = ..., http_address: _Optional[str] = ..., catch_up_timeout_ms: _Optional[int] = ...) -> None: ...

class RemoveNodeRequest(_message.Message):
    __slots__ = ("node_id",)
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    def __init__(self, node_id: _Optional[str] = ...) -> None: ...

class MembershipResponse(_message.Message):
    __slots__ = ("changed", "members", "match_index", "catch_up_ms")
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    MATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_MS_FIELD_NUMBER: _ClassVar[int]
    changed: bool
    members: _containers.RepeatedCompositeFieldContainer[NodeStatus]
    match_index: int
    catch_up_ms: int
    def __init__(self, changed: _Optional[bool] = ..., members: _Optional[_Iterable[_Union[NodeStatus, _Mapping]]] = ..., match_index: _Optional[int] = ..., catch_up_ms: _Optional[int] = ...) -> None: ...

class TransferLeadershipRequest(_message.Message):
    __slots__ = ("to_node_id", "timeout_ms")
    TO_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    to_node_id: str
    timeout_ms: int
    def __init__(self, to_node_id: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class TransferLeadershipResponse(_message.Message):
    __slots__ = ("previous_leader_node_id", "leader_node_id", "leader_grpc_address", "term")
    PREVIOUS_LEADER_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    previous_leader_node_id: str
    leader_node_id: str
    leader_grpc_address: str
    term: int
    def __init__(self, previous_leader_node_id: _Optional[str] = ..., leader_node_id: _Optional[str] = ..., leader_grpc_address: _Optional[str] = ..., term: _Optional[int] = ...) -> None: ...

class CreateBackupRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BackupChunk(_message.Message):
    __slots__ = ("data", "last", "sha256", "raft_index", "raft_term", "jobs", "runs", "size_bytes", "state_digest")
    DATA_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    RAFT_INDEX_FIELD_NUMBER: _ClassVar[int]
    RAFT_TERM_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    STATE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    last: bool
    sha256: str
    raft_index: int
    raft_term: int
    jobs: int
    runs: int
    size_bytes: int
    state_digest: str
    def __init__(self, data: _Optional[bytes] = ..., last: _Optional[bool] = ..., sha256: _Optional[str] = ..., raft_index: _Optional[int] = ..., raft_term: _Optional[int] = ..., jobs: _Optional[int] = ..., runs: _Optional[int] = ..., size_bytes: _Optional[int] = ..., state_digest: _Optional[str] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QueueInfo(_message.Message):
    __slots__ = ("queue", "ready", "leased", "oldest_ready_age_ms", "workers")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    OLDEST_READY_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    ready: int
    leased: int
    oldest_ready_age_ms: int
    workers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, queue: _Optional[str] = ..., ready: _Optional[int] = ..., leased: _Optional[int] = ..., oldest_ready_age_ms: _Optional[int] = ..., workers: _Optional[_Iterable[str]] = ...) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ("queues", "from_leader")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    FROM_LEADER_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueInfo]
    from_leader: bool
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueInfo, _Mapping]]] = ..., from_leader: _Optional[bool] = ...) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkerInfo(_message.Message):
    __slots__ = ("worker_id", "queues", "credits", "leases_held", "connected_ms", "last_heartbeat_ms", "peer", "draining")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    LEASES_HELD_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    queues: _containers.RepeatedScalarFieldContainer[str]
    credits: int
    leases_held: int
    connected_ms: int
    last_heartbeat_ms: int
    peer: str
    draining: bool
    def __init__(self, worker_id: _Optional[str] = ..., queues: _Optional[_Iterable[str]] = ..., credits: _Optional[int] = ..., leases_held: _Optional[int] = ..., connected_ms: _Optional[int] = ..., last_heartbeat_ms: _Optional[int] = ..., peer: _Optional[str] = ..., draining: _Optional[bool] = ...) -> None: ...

class DrainWorkerRequest(_message.Message):
    __slots__ = ("worker_id",)
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    def __init__(self, worker_id: _Optional[str] = ...) -> None: ...

class DrainWorkerResponse(_message.Message):
    __slots__ = ("worker",)
    WORKER_FIELD_NUMBER: _ClassVar[int]
    worker: WorkerInfo
    def __init__(self, worker: _Optional[_Union[WorkerInfo, _Mapping]] = ...) -> None: ...

class ListWorkersResponse(_message.Message):
    __slots__ = ("workers", "from_leader")
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    FROM_LEADER_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerInfo]
    from_leader: bool
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerInfo, _Mapping]]] = ..., from_leader: _Optional[bool] = ...) -> None: ...

class ListActiveRunsRequest(_message.Message):
    __slots__ = ("tenant", "limit")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    limit: int
    def __init__(self, tenant: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListActiveRunsResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[_types_pb2.Run]
    def __init__(self, runs: _Optional[_Iterable[_Union[_types_pb2.Run, _Mapping]]] = ...) -> None: ...

class ListAuditRequest(_message.Message):
    __slots__ = ("before_ms", "limit")
    BEFORE_MS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    before_ms: int
    limit: int
    def __init__(self, before_ms: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class ListAuditResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[_types_pb2.AuditEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[_types_pb2.AuditEntry, _Mapping]]] = ...) -> None: ...

class SetTenantRequest(_message.Message):
    __slots__ = ("request_id", "tenant")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    tenant: _types_pb2.Tenant
    def __init__(self, request_id: _Optional[str] = ..., tenant: _Optional[_Union[_types_pb2.Tenant, _Mapping]] = ...) -> None: ...

class GetTenantRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class TenantResponse(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: _types_pb2.Tenant
    def __init__(self, tenant: _Optional[_Union[_types_pb2.Tenant, _Mapping]] = ...) -> None: ...

class ListTenantsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTenantsResponse(_message.Message):
    __slots__ = ("tenants",)
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[_types_pb2.Tenant]
    def __init__(self, tenants: _Optional[_Iterable[_Union[_types_pb2.Tenant, _Mapping]]] = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ("request_id", "name", "role", "tenants", "expires_ms", "cert_subject")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    CERT_SUBJECT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    name: str
    role: str
    tenants: _containers.RepeatedScalarFieldContainer[str]
    expires_ms: int
    cert_subject: str
    def __init__(self, request_id: _Optional[str] = ..., name: _Optional[str] = ..., role: _Optional[str] = ..., tenants: _Optional[_Iterable[str]] = ..., expires_ms: _Optional[int] = ..., cert_subject: _Optional[str] = ...) -> None: ...

class CreateTokenResponse(_message.Message):
    __slots__ = ("token", "secret")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    token: _types_pb2.Token
    secret: str
    def __init__(self, token: _Optional[_Union[_types_pb2.Token, _Mapping]] = ..., secret: _Optional[str] = ...) -> None: ...

class ListTokensRequest(_message.Message):
    __slots__ = ("include_inactive",)
    INCLUDE_INACTIVE_FIELD_NUMBER: _ClassVar[int]
    include_inactive: bool
    def __init__(self, include_inactive: _Optional[bool] = ...) -> None: ...

class ListTokensResponse(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[_types_pb2.Token]
    def __init__(self, tokens: _Optional[_Iterable[_Union[_types_pb2.Token, _Mapping]]] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ("request_id", "token_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    token_id: str
    def __init__(self, request_id: _Optional[str] = ..., token_id: _Optional[str] = ...) -> None: ...

class RevokeTokenResponse(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: _types_pb2.Token
    def __init__(self, token: _Optional[_Union[_types_pb2.Token, _Mapping]] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("name", "role", "tenants", "token_id", "authentication_required")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    AUTHENTICATION_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    name: str
    role: str
    tenants: _containers.RepeatedScalarFieldContainer[str]
    token_id: str
    authentication_required: bool
    def __init__(self, name: _Optional[str] = ..., role: _Optional[str] = ..., tenants: _Optional[_Iterable[str]] = ..., token_id: _Optional[str] = ..., authentication_required: _Optional[bool] = ...) -> None: ...

class PreviewScheduleRequest(_message.Message):
    __slots__ = ("job", "schedule", "tenant", "name", "count", "after_ms")
    JOB_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    job: JobRef
    schedule: _types_pb2.Schedule
    tenant: str
    name: str
    count: int
    after_ms: int
    def __init__(self, job: _Optional[_Union[JobRef, _Mapping]] = ..., schedule: _Optional[_Union[_types_pb2.Schedule, _Mapping]] = ..., tenant: _Optional[str] = ..., name: _Optional[str] = ..., count: _Optional[int] = ..., after_ms: _Optional[int] = ...) -> None: ...

class PreviewFire(_message.Message):
    __slots__ = ("at_ms", "utc", "local", "dst_note")
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    UTC_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    DST_NOTE_FIELD_NUMBER: _ClassVar[int]
    at_ms: int
    utc: str
    local: str
    dst_note: str
    def __init__(self, at_ms: _Optional[int] = ..., utc: _Optional[str] = ..., local: _Optional[str] = ..., dst_note: _Optional[str] = ...) -> None: ...

class PreviewScheduleResponse(_message.Message):
    __slots__ = ("fires", "timezone", "reading")
    FIRES_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    READING_FIELD_NUMBER: _ClassVar[int]
    fires: _containers.RepeatedCompositeFieldContainer[PreviewFire]
    timezone: str
    reading: str
    def __init__(self, fires: _Optional[_Iterable[_Union[PreviewFire, _Mapping]]] = ..., timezone: _Optional[str] = ..., reading: _Optional[str] = ...) -> None: ...

class RerunRunRequest(_message.Message):
    __slots__ = ("request_id", "run_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    run_id: str
    def __init__(self, request_id: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class RerunRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _types_pb2.Run
    def __init__(self, run: _Optional[_Union[_types_pb2.Run, _Mapping]] = ...) -> None: ...

class CancelTaskRequest(_message.Message):
    __slots__ = ("request_id", "run_id", "task_name", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    run_id: str
    task_name: str
    reason: str
    def __init__(self, request_id: _Optional[str] = ..., run_id: _Optional[str] = ..., task_name: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelTaskResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _types_pb2.Run
    def __init__(self, run: _Optional[_Union[_types_pb2.Run, _Mapping]] = ...) -> None: ...

class RetryTaskRequest(_message.Message):
    __slots__ = ("request_id", "run_id", "task_name")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    run_id: str
    task_name: str
    def __init__(self, request_id: _Optional[str] = ..., run_id: _Optional[str] = ..., task_name: _Optional[str] = ...) -> None: ...

class RetryTaskResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _types_pb2.Run
    def __init__(self, run: _Optional[_Union[_types_pb2.Run, _Mapping]] = ...) -> None: ...

class ResetCircuitRequest(_message.Message):
    __slots__ = ("request_id", "job", "tenant", "queue")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    job: JobRef
    tenant: str
    queue: str
    def __init__(self, request_id: _Optional[str] = ..., job: _Optional[_Union[JobRef, _Mapping]] = ..., tenant: _Optional[str] = ..., queue: _Optional[str] = ...) -> None: ...

class ResetCircuitResponse(_message.Message):
    __slots__ = ("job", "queue_circuit")
    JOB_FIELD_NUMBER: _ClassVar[int]
    QUEUE_CIRCUIT_FIELD_NUMBER: _ClassVar[int]
    job: _types_pb2.Job
    queue_circuit: _types_pb2.QueueCircuit
    def __init__(self, job: _Optional[_Union[_types_pb2.Job, _Mapping]] = ..., queue_circuit: _Optional[_Union[_types_pb2.QueueCircuit, _Mapping]] = ...) -> None: ...

class BackfillJobRequest(_message.Message):
    __slots__ = ("request_id", "job", "from_ms", "to_ms", "overlap_policy")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    FROM_MS_FIELD_NUMBER: _ClassVar[int]
    TO_MS_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_POLICY_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    job: JobRef
    from_ms: int
    to_ms: int
    overlap_policy: _types_pb2.OverlapPolicy
    def __init__(self, request_id: _Optional[str] = ..., job: _Optional[_Union[JobRef, _Mapping]] = ..., from_ms: _Optional[int] = ..., to_ms: _Optional[int] = ..., overlap_policy: _Optional[_Union[_types_pb2.OverlapPolicy, str]] = ...) -> None: ...

class BackfillJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _types_pb2.Job
    def __init__(self, job: _Optional[_Union[_types_pb2.Job, _Mapping]] = ...) -> None: ...

class CancelBackfillRequest(_message.Message):
    __slots__ = ("request_id", "job")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    job: JobRef
    def __init__(self, request_id: _Optional[str] = ..., job: _Optional[_Union[JobRef, _Mapping]] = ...) -> None: ...

class CancelBackfillResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _types_pb2.Job
    def __init__(self, job: _Optional[_Union[_types_pb2.Job, _Mapping]] = ...) -> None: ...

class SetQueueCircuitRequest(_message.Message):
    __slots__ = ("request_id", "tenant", "queue", "breaker")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    tenant: str
    queue: str
    breaker: _types_pb2.CircuitBreaker
    def __init__(self, request_id: _Optional[str] = ..., tenant: _Optional[str] = ..., queue: _Optional[str] = ..., breaker: _Optional[_Union[_types_pb2.CircuitBreaker, _Mapping]] = ...) -> None: ...

class SetQueueCircuitResponse(_message.Message):
    __slots__ = ("queue_circuit",)
    QUEUE_CIRCUIT_FIELD_NUMBER: _ClassVar[int]
    queue_circuit: _types_pb2.QueueCircuit
    def __init__(self, queue_circuit: _Optional[_Union[_types_pb2.QueueCircuit, _Mapping]] = ...) -> None: ...

class ListQueueCircuitsRequest(_message.Message):
    __slots__ = ("tenant", "consistency")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    consistency: Consistency
    def __init__(self, tenant: _Optional[str] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class ListQueueCircuitsResponse(_message.Message):
    __slots__ = ("queue_circuits",)
    QUEUE_CIRCUITS_FIELD_NUMBER: _ClassVar[int]
    queue_circuits: _containers.RepeatedCompositeFieldContainer[_types_pb2.QueueCircuit]
    def __init__(self, queue_circuits: _Optional[_Iterable[_Union[_types_pb2.QueueCircuit, _Mapping]]] = ...) -> None: ...
