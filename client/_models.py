"""Public data types: schedules, job specs, jobs, runs, dead letters and cluster status.

They mirror ``gnomon/v1/types.proto`` and ``api.proto`` field for field, as frozen dataclasses;
``_convert`` is the only place that knows the protobuf side. Times are integer milliseconds since
the epoch (UTC), durations integer milliseconds, exactly as on the wire.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, NamedTuple

__all__ = [
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
    "LimitsUpdate",
    "json_payload",
]

DEFAULT_TENANT = "default"
DEFAULT_QUEUE = "default"

Consistency = Literal["linearizable", "stale"]
"""Read consistency: ``"linearizable"`` sees every acknowledged write; ``"stale"`` may lag."""


def json_payload(value: Any) -> bytes:
    """Encode ``value`` as compact JSON bytes with sorted keys (equal values, equal bytes)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


def _payload_bytes(value: bytes | bytearray | memoryview | Mapping[str, Any]) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, Mapping):
        return json_payload(dict(value))
    raise TypeError(f"payload must be bytes or a mapping (JSON), not {type(value).__name__}")


def _utc(ms: int) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC) if ms else None


class MisfirePolicy(enum.StrEnum):
    """What happens to fire slots missed by more than the job's ``misfire_grace_ms``."""

    RUN_ALL = "run_all"
    """Every missed slot runs, late."""
    RUN_LATEST = "run_latest"
    """Only the latest missed slot runs; the others are recorded as skipped runs."""
    SKIP = "skip"
    """Every missed slot is recorded as a skipped run."""


class RunState(enum.StrEnum):
    UNSPECIFIED = "unspecified"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL_RUN_STATES


_TERMINAL_RUN_STATES = frozenset(
    {RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.SKIPPED}
)


class RunTrigger(enum.StrEnum):
    UNSPECIFIED = "unspecified"
    SCHEDULE = "schedule"
    MANUAL = "manual"


class TaskState(enum.StrEnum):
    UNSPECIFIED = "unspecified"
    PENDING = "pending"
    READY = "ready"
    LEASED = "leased"
    RETRY_WAIT = "retry_wait"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    UPSTREAM_FAILED = "upstream_failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL_TASK_STATES


_TERMINAL_TASK_STATES = frozenset(
    {TaskState.SUCCEEDED, TaskState.DEAD, TaskState.UPSTREAM_FAILED, TaskState.CANCELLED}
)


class AttemptOutcome(enum.StrEnum):
    """How one finished attempt of a task ended."""

    UNSPECIFIED = "unspecified"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """The worker reported a failure."""
    EXPIRED = "expired"
    """The lease ran out (the worker went away) or the task's timeout passed (see ``error``)."""
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """A cron expression (5 fields, 6 with seconds last, or an @alias) in an IANA timezone."""

    expression: str
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if not self.timezone:
            object.__setattr__(self, "timezone", "UTC")


@dataclass(frozen=True, slots=True)
class IntervalSchedule:
    """Fires at ``anchor_ms + k * interval_ms`` for integer ``k``."""

    interval_ms: int
    anchor_ms: int = 0

    @classmethod
    def every(cls, interval: timedelta | float, *, anchor_ms: int = 0) -> IntervalSchedule:
        """An interval given as a timedelta or in seconds."""
        seconds = interval.total_seconds() if isinstance(interval, timedelta) else interval
        return cls(interval_ms=round(seconds * 1000), anchor_ms=anchor_ms)


@dataclass(frozen=True, slots=True)
class OnceSchedule:
    """One fire at ``at_ms``; an instant in the past fires as soon as possible."""

    at_ms: int

    @classmethod
    def at(cls, when: datetime) -> OnceSchedule:
        """One fire at a timezone-aware datetime."""
        if when.tzinfo is None:
            raise ValueError("OnceSchedule.at needs a timezone-aware datetime")
        return cls(at_ms=round(when.timestamp() * 1000))


Schedule = CronSchedule | IntervalSchedule | OnceSchedule


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failed attempt is retried. Zero fields mean the cluster's defaults
    (3 attempts, 1 s initial backoff, 60 s cap, multiplier 2.0, jitter 0.2); a negative
    ``jitter`` means none."""

    max_attempts: int = 0
    initial_backoff_ms: int = 0
    max_backoff_ms: int = 0
    multiplier: float = 0.0
    jitter: float = 0.0


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One node of a job's task DAG. ``payload`` is opaque bytes (see ``json_payload``)."""

    name: str
    queue: str = DEFAULT_QUEUE
    depends_on: tuple[str, ...] = ()
    payload: bytes = b""
    timeout_ms: int = 0
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def __post_init__(self) -> None:
        if not self.queue:
            object.__setattr__(self, "queue", DEFAULT_QUEUE)
        if isinstance(self.depends_on, str):
            raise TypeError("depends_on must be a sequence of task names, not a string")
        object.__setattr__(self, "depends_on", tuple(self.depends_on))
        object.__setattr__(self, "payload", _payload_bytes(self.payload))


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a user submits: a schedule and a DAG of tasks."""

    name: str
    schedule: Schedule
    tasks: tuple[TaskSpec, ...]
    tenant: str = DEFAULT_TENANT
    priority: int = 0
    misfire_policy: MisfirePolicy = MisfirePolicy.RUN_ALL
    misfire_grace_ms: int = 0
    paused: bool = False

    def __post_init__(self) -> None:
        if not self.tenant:
            object.__setattr__(self, "tenant", DEFAULT_TENANT)
        object.__setattr__(self, "tasks", tuple(self.tasks))
        object.__setattr__(self, "misfire_policy", MisfirePolicy(self.misfire_policy))

    @classmethod
    def single(
        cls,
        name: str,
        schedule: Schedule,
        *,
        task_name: str = "main",
        queue: str = DEFAULT_QUEUE,
        payload: bytes | Mapping[str, Any] = b"",
        timeout_ms: int = 0,
        retry: RetryPolicy | None = None,
        tenant: str = DEFAULT_TENANT,
        priority: int = 0,
        misfire_policy: MisfirePolicy = MisfirePolicy.RUN_ALL,
        misfire_grace_ms: int = 0,
        paused: bool = False,
    ) -> JobSpec:
        """A job of one task (named ``task_name``, "main" by default). A mapping payload is
        encoded as JSON."""
        task = TaskSpec(
            name=task_name,
            queue=queue,
            payload=_payload_bytes(payload),
            timeout_ms=timeout_ms,
            retry=retry if retry is not None else RetryPolicy(),
        )
        return cls(
            name=name,
            schedule=schedule,
            tasks=(task,),
            tenant=tenant,
            priority=priority,
            misfire_policy=misfire_policy,
            misfire_grace_ms=misfire_grace_ms,
            paused=paused,
        )


@dataclass(frozen=True, slots=True)
class Job:
    """A stored job. ``version`` increments on every change (see ``expected_version``)."""

    job_id: str
    spec: JobSpec
    version: int = 0
    next_fire_ms: int = 0
    paused: bool = False
    created_ms: int = 0
    updated_ms: int = 0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def tenant(self) -> str:
        return self.spec.tenant


@dataclass(frozen=True, slots=True)
class Attempt:
    """One finished attempt of a task: who ran it under which fencing token, how it ended,
    and the tail of its output."""

    attempt: int
    fencing_token: int = 0
    worker_id: str = ""
    started_ms: int = 0
    finished_ms: int = 0
    outcome: AttemptOutcome = AttemptOutcome.UNSPECIFIED
    error: str = ""
    exit_code: int | None = None
    """The exit code of the process the worker ran (negative: killed by that signal, as in
    Python's ``returncode``); None when the worker ran no process."""
    duration_ms: int = 0
    """Run time as the worker measured it (0 if the worker did not say, e.g. an expiry)."""
    output_tail: str = ""
    """The last bytes of the task's output (at most the cluster's ``max_output_tail_bytes``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "outcome", AttemptOutcome(self.outcome))

    @property
    def started(self) -> datetime | None:
        """``started_ms`` as an aware UTC datetime (None if unset)."""
        return _utc(self.started_ms)

    @property
    def finished(self) -> datetime | None:
        """``finished_ms`` as an aware UTC datetime (None if unset)."""
        return _utc(self.finished_ms)


@dataclass(frozen=True, slots=True)
class TaskInstance:
    """One task of one run. ``attempts`` are its most recent finished attempts, oldest first
    (the cluster keeps at most ``ClusterLimits.max_attempt_records``); the attempt in progress,
    if any, is described by ``attempt``, ``fencing_token`` and ``worker_id``."""

    task_name: str
    state: TaskState = TaskState.UNSPECIFIED
    attempt: int = 0
    fencing_token: int = 0
    worker_id: str = ""
    idempotency_key: str = ""
    ready_ms: int = 0
    started_ms: int = 0
    finished_ms: int = 0
    retry_at_ms: int = 0
    last_error: str = ""
    result: bytes = b""
    lease_ttl_ms: int = 0
    lease_remaining_ms: int = 0
    """Lease time left at the leader's last checkpoint (0: none since the grant)."""
    attempts: tuple[Attempt, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "attempts", tuple(self.attempts))

    @property
    def last_attempt(self) -> Attempt | None:
        """The most recent finished attempt, or None if none finished yet."""
        return self.attempts[-1] if self.attempts else None

    @property
    def output_tail(self) -> str:
        """The output tail of the most recent finished attempt that has one ("" if none)."""
        for attempt in reversed(self.attempts):
            if attempt.output_tail:
                return attempt.output_tail
        return ""


@dataclass(frozen=True, slots=True)
class Run:
    """One execution of a job's DAG; ``run_id`` is ``"<job_id>@<scheduled_for_ms>"`` for
    scheduled runs."""

    run_id: str
    job_id: str
    tenant: str = DEFAULT_TENANT
    scheduled_for_ms: int = 0
    state: RunState = RunState.UNSPECIFIED
    trigger: RunTrigger = RunTrigger.UNSPECIFIED
    created_ms: int = 0
    finished_ms: int = 0
    tasks: tuple[TaskInstance, ...] = ()
    job_version: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "tasks", tuple(self.tasks))

    @property
    def done(self) -> bool:
        return self.state.is_terminal

    def task(self, name: str) -> TaskInstance:
        """The instance of task ``name``; KeyError if the run has none."""
        for instance in self.tasks:
            if instance.task_name == name:
                return instance
        raise KeyError(name)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A task that failed for good; replay it with ``replay_dead_letters``."""

    run_id: str
    task_name: str
    job_id: str = ""
    tenant: str = DEFAULT_TENANT
    attempts: int = 0
    last_error: str = ""
    dead_ms: int = 0

    @property
    def ref(self) -> TaskRef:
        return TaskRef(self.run_id, self.task_name)


class TaskRef(NamedTuple):
    """Names one task of one run; a plain ``(run_id, task_name)`` tuple works too."""

    run_id: str
    task_name: str


@dataclass(frozen=True, slots=True)
class NodeStatus:
    node_id: str
    raft_address: str = ""
    grpc_address: str = ""
    role: str = ""
    """"leader", "follower", "candidate" or "unreachable", as seen by the answering node."""
    match_index: int = 0
    connected: bool = False


@dataclass(frozen=True, slots=True)
class ClusterLimits:
    """The replicated limits: bounds that change what the cluster's state machine does, the
    same on every node whatever its own config says. In ``set_limits`` a field left None keeps
    its value; in a status every field the node knows is set."""

    dedupe_capacity: int | None = None
    """Request ids remembered for retries (0: none)."""
    dedupe_max_age_ms: int | None = None
    """How long a request id is remembered at most (0: no age bound)."""
    runs_retained_per_job: int | None = None
    """Terminal runs kept in memory per job; older ones move to the history store."""
    max_dead_letters: int | None = None
    """Dead-letter queue entries (>= 1); beyond it the oldest leave the queue, counted in
    ``ClusterStatus.dead_letters_evicted``."""
    max_attempt_records: int | None = None
    """Finished attempts kept per task (``TaskInstance.attempts``)."""

    def items(self) -> list[tuple[str, int | None]]:
        """``(name, value)`` of every limit, in declaration order."""
        return [(name, getattr(self, name)) for name in CLUSTER_LIMIT_NAMES]


CLUSTER_LIMIT_NAMES: tuple[str, ...] = tuple(f.name for f in fields(ClusterLimits))


@dataclass(frozen=True, slots=True)
class LimitsUpdate:
    """What ``set_limits`` answers: every limit as it now is, and its new version."""

    limits: ClusterLimits
    limits_version: int


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """The answering node's view of the cluster. ``limits_version`` 0 means the first leader
    has not set the replicated limits yet."""

    node_id: str
    leader_node_id: str = ""
    leader_grpc_address: str = ""
    term: int = 0
    commit_index: int = 0
    applied_index: int = 0
    nodes: tuple[NodeStatus, ...] = ()
    clock_ms: int = 0
    jobs: int = 0
    active_runs: int = 0
    dead_letters: int = 0
    state_digest: str = ""
    """Only when asked for (``include_digest``)."""
    version: str = ""
    limits: ClusterLimits = field(default_factory=ClusterLimits)
    limits_version: int = 0
    dead_letters_evicted: int = 0
    """Dead letters that left the queue because of ``limits.max_dead_letters``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))
