"""gnomon client SDK: manage jobs and runs (``Client``, ``AsyncClient``) and run tasks
(``task``, ``Worker``).

    from gnomon.client import Client, CronSchedule, JobSpec

    with Client("127.0.0.1:7070,127.0.0.1:7071") as client:
        job = client.create_job(
            JobSpec.single("nightly-report", CronSchedule("0 3 * * *", "Europe/Berlin"),
                           queue="reports", payload={"format": "pdf"}))
        run = client.trigger_job(job.job_id)

Errors are documented in one place: ``help(gnomon.client._errors)`` (all derive from
``GnomonError``). ``gnomon.client.testing`` runs task functions without a cluster.
"""

from ._client import AsyncClient, Client
from ._context import TaskContext
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
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from ._models import (
    Attempt,
    AttemptOutcome,
    ClusterLimits,
    ClusterStatus,
    Consistency,
    CronSchedule,
    DeadLetter,
    IntervalSchedule,
    Job,
    JobSpec,
    LimitsUpdate,
    MisfirePolicy,
    NodeStatus,
    OnceSchedule,
    RetryPolicy,
    Run,
    RunState,
    RunTrigger,
    Schedule,
    TaskInstance,
    TaskRef,
    TaskSpec,
    TaskState,
    json_payload,
)
from ._task import TaskDefinition, task
from ._worker import ReportRefusal, Worker, WorkerStats

__version__ = "0.1.0"

__all__ = [
    # clients
    "AsyncClient",
    "Client",
    # models
    "Attempt",
    "AttemptOutcome",
    "ClusterLimits",
    "ClusterStatus",
    "Consistency",
    "CronSchedule",
    "DeadLetter",
    "IntervalSchedule",
    "Job",
    "JobSpec",
    "LimitsUpdate",
    "MisfirePolicy",
    "NodeStatus",
    "OnceSchedule",
    "RetryPolicy",
    "Run",
    "RunState",
    "RunTrigger",
    "Schedule",
    "TaskInstance",
    "TaskRef",
    "TaskSpec",
    "TaskState",
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
    "ResourceExhausted",
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
