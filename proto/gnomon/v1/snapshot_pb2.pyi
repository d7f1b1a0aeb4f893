from gnomon.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SnapshotHeader(_message.Message):
    __slots__ = ("format_version", "raft_index", "state_digest", "written_ms", "jobs", "runs")
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    RAFT_INDEX_FIELD_NUMBER: _ClassVar[int]
    STATE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_MS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    format_version: int
    raft_index: int
    state_digest: str
    written_ms: int
    jobs: int
    runs: int
    def __init__(self, format_version: _Optional[int] = ..., raft_index: _Optional[int] = ..., state_digest: _Optional[str] = ..., written_ms: _Optional[int] = ..., jobs: _Optional[int] = ..., runs: _Optional[int] = ...) -> None: ...

class StateMeta(_message.Message):
    __slots__ = ("clock_ms", "last_token", "job_seq", "manual_seq", "limits", "limits_version", "dead_letters_evicted", "token_seq", "queue_circuits")
    CLOCK_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_TOKEN_FIELD_NUMBER: _ClassVar[int]
    JOB_SEQ_FIELD_NUMBER: _ClassVar[int]
    MANUAL_SEQ_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_VERSION_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_EVICTED_FIELD_NUMBER: _ClassVar[int]
    TOKEN_SEQ_FIELD_NUMBER: _ClassVar[int]
    QUEUE_CIRCUITS_FIELD_NUMBER: _ClassVar[int]
    clock_ms: int
    last_token: int
    job_seq: int
    manual_seq: int
    limits: _types_pb2.ClusterLimits
    limits_version: int
    dead_letters_evicted: int
    token_seq: int
    queue_circuits: _containers.RepeatedCompositeFieldContainer[_types_pb2.QueueCircuit]
    def __init__(self, clock_ms: _Optional[int] = ..., last_token: _Optional[int] = ..., job_seq: _Optional[int] = ..., manual_seq: _Optional[int] = ..., limits: _Optional[_Union[_types_pb2.ClusterLimits, _Mapping]] = ..., limits_version: _Optional[int] = ..., dead_letters_evicted: _Optional[int] = ..., token_seq: _Optional[int] = ..., queue_circuits: _Optional[_Iterable[_Union[_types_pb2.QueueCircuit, _Mapping]]] = ...) -> None: ...

class DedupeRecord(_message.Message):
    __slots__ = ("request_id", "reply", "seq", "at_ms", "scope", "fingerprint")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    reply: bytes
    seq: int
    at_ms: int
    scope: str
    fingerprint: bytes
    def __init__(self, request_id: _Optional[str] = ..., reply: _Optional[bytes] = ..., seq: _Optional[int] = ..., at_ms: _Optional[int] = ..., scope: _Optional[str] = ..., fingerprint: _Optional[bytes] = ...) -> None: ...

class JobRecord(_message.Message):
    __slots__ = ("job", "schedule_ref", "task_set_ref")
    JOB_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_REF_FIELD_NUMBER: _ClassVar[int]
    TASK_SET_REF_FIELD_NUMBER: _ClassVar[int]
    job: _types_pb2.Job
    schedule_ref: int
    task_set_ref: int
    def __init__(self, job: _Optional[_Union[_types_pb2.Job, _Mapping]] = ..., schedule_ref: _Optional[int] = ..., task_set_ref: _Optional[int] = ...) -> None: ...

class TaskSet(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[_types_pb2.TaskSpec]
    def __init__(self, tasks: _Optional[_Iterable[_Union[_types_pb2.TaskSpec, _Mapping]]] = ...) -> None: ...

class RunRecord(_message.Message):
    __slots__ = ("run", "spec")
    RUN_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    run: _types_pb2.Run
    spec: _types_pb2.JobSpec
    def __init__(self, run: _Optional[_Union[_types_pb2.Run, _Mapping]] = ..., spec: _Optional[_Union[_types_pb2.JobSpec, _Mapping]] = ...) -> None: ...

class TokenRecord(_message.Message):
    __slots__ = ("token", "secret_sha256")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SECRET_SHA256_FIELD_NUMBER: _ClassVar[int]
    token: _types_pb2.Token
    secret_sha256: str
    def __init__(self, token: _Optional[_Union[_types_pb2.Token, _Mapping]] = ..., secret_sha256: _Optional[str] = ...) -> None: ...
