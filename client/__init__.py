"""gnomon client SDK: manage jobs and runs (``Client``, ``AsyncClient``) and run tasks
(``task``, ``Worker``).

    from datetime import timedelta

    from gnomon.client import Client, CronSchedule, JobSpec

    # The three nodes `gnomon dev` starts; any subset of a cluster works.
    with Client("127.0.0.1:7701,127.0.0.1:7702,127.0.0.1:7703") as client:
        job = client.create_job(
            JobSpec.single("nightly-report", CronSchedule("0 3 * * *", "Europe/Berlin"),
                           queue="reports", payload={"format": "pdf"},
                           timeout=timedelta(minutes=10)))
        run = client.trigger_job(job.job_id)   # a RunHandle: the Run as created
        results = run.result(timeout_s=600)    # {"main": b"..."} once a worker ran it

Times are integer milliseconds on the wire and in every ``*_ms`` field; the models also take
and give aware UTC ``datetime`` and ``timedelta`` (``OnceSchedule(at=...)``, ``run.scheduled_for``).
Errors are documented in one place: ``help(gnomon.client._errors)`` (all derive from
``GnomonError``). ``gnomon.client.testing`` runs task functions without a cluster; the worker
protocol as the SDK sees it is in ``client/DESIGN.md``.
"""

from . import _grpc_env  # noqa: F401 - first: it must run before grpc is imported
from ._access import AuditEntry, Identity, NewToken, Tenant, Token
from ._blocking_client import Client
from ._client import AsyncClient
from ._errors import (
    AlreadyExists,
    Cancelled,
    Conflict,
    DeadlineExceeded,
    FailedPrecondition,
    GnomonError,
    InvalidArgument,
    NonRetryableError,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    RunFailed,
    Unauthenticated,
    Unavailable,
)
from ._models import (
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
    json_payload,
)
from ._run_handle import AsyncRunHandle, RunHandle
from ._transport import TLSConfig
from ._version import VERSION
from .worker.context import TaskContext
from .worker.task import TaskDefinition, task
from .worker.worker import ReportRefusal, Worker, WorkerStats

__version__ = VERSION

__all__ = [
    # clients
    "AsyncClient",
    "Client",
    "TLSConfig",
    # models
    "Attempt",
    "AttemptOutcome",
    "AuditEntry",
    "Backfill",
    "CircuitBreaker",
    "CircuitState",
    "ClusterLimits",
    "ClusterStatus",
    "Consistency",
    "CreateJobResult",
    "CronDialect",
    "CronSchedule",
    "DeadLetter",
    "DstAmbiguous",
    "DstNonexistent",
    "Identity",
    "IntervalSchedule",
    "Job",
    "JobSpec",
    "LeaderChange",
    "LimitsUpdate",
    "MisfirePolicy",
    "NewToken",
    "NodeStatus",
    "OnceSchedule",
    "OverlapPolicy",
    "PreviewFire",
    "QueueCircuit",
    "RetryPolicy",
    "Run",
    "RunHandle",
    "AsyncRunHandle",
    "RunPage",
    "RunSort",
    "RunState",
    "RunTrigger",
    "RunWait",
    "Schedule",
    "SchedulePreview",
    "TaskInstance",
    "TaskRef",
    "TaskSpec",
    "TaskState",
    "Tenant",
    "Token",
    "json_payload",
    # errors
    "AlreadyExists",
    "Cancelled",
    "Conflict",
    "DeadlineExceeded",
    "FailedPrecondition",
    "GnomonError",
    "InvalidArgument",
    "NonRetryableError",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "RunFailed",
    "Unauthenticated",
    "Unavailable",
    # worker SDK
    "TaskContext",
    "ReportRefusal",
    "TaskDefinition",
    "Worker",
    "WorkerStats",
    "task",
]
