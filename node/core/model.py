"""The replicated state: jobs, runs, task instances, the dead-letter queue, dedupe.

Plain slotted classes, mutated only by `gnomon.node.core.apply`. Specs are frozen and shared
(a run points at the JobSpec it was fired with). Times are ms since the epoch, UTC.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field


class ScheduleKind:
    CRON = "cron"
    INTERVAL = "interval"
    ONCE = "once"


class MisfirePolicy:
    RUN_ALL = "run_all"
    RUN_LATEST = "run_latest"
    SKIP = "skip"


class RunState:
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"


class RunTrigger:
    SCHEDULE = "schedule"
    MANUAL = "manual"


class TaskState:
    PENDING = "pending"
    READY = "ready"
    LEASED = "leased"
    RETRY_WAIT = "retry_wait"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    UPSTREAM_FAILED = "upstream_failed"
    CANCELLED = "cancelled"


TERMINAL_TASK_STATES = frozenset(
    {TaskState.SUCCEEDED, TaskState.DEAD, TaskState.UPSTREAM_FAILED, TaskState.CANCELLED}
)
TERMINAL_RUN_STATES = frozenset(
    {RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.SKIPPED}
)

DEFAULT_QUEUE = "default"
DEFAULT_TENANT = "default"
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_INITIAL_BACKOFF_MS = 1_000
DEFAULT_MAX_BACKOFF_MS = 60_000
DEFAULT_MULTIPLIER = 2.0
DEFAULT_JITTER = 0.2
DEFAULT_MISFIRE_GRACE_MS = 60_000


@dataclass(frozen=True, slots=True)
class Schedule:
    kind: str
    expression: str = ""
    timezone: str = ""
    interval_ms: int = 0
    anchor_ms: int = 0
    at_ms: int = 0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Zero / negative values mean the defaults; use the effective_* helpers."""

    max_attempts: int = 0
    initial_backoff_ms: int = 0
    max_backoff_ms: int = 0
    multiplier: float = 0.0
    jitter: float = 0.0


@dataclass(frozen=True, slots=True)
class TaskSpec:
    name: str
    queue: str = ""
    depends_on: tuple[str, ...] = ()
    payload: bytes = b""
    timeout_ms: int = 0
    retry: RetryPolicy = RetryPolicy()


@dataclass(frozen=True, slots=True)
class JobSpec:
    tenant: str
    name: str
    schedule: Schedule
    tasks: tuple[TaskSpec, ...]
    priority: int = 0
    misfire_policy: str = MisfirePolicy.RUN_ALL
    misfire_grace_ms: int = 0
    paused: bool = False

    def task(self, name: str) -> TaskSpec:
        for spec in self.tasks:
            if spec.name == name:
                return spec
        raise KeyError(name)


@dataclass(slots=True)
class Job:
    job_id: str
    spec: JobSpec
    version: int
    next_fire_ms: int
    paused: bool
    created_ms: int
    updated_ms: int
    # Highest slot ever fired (run or skipped): a Fire at or below it is a no-op, so no
    # schedule change can fire a slot twice, even after its run left memory.
    last_fired_ms: int = 0


@dataclass(slots=True)
class TaskInstance:
    task_name: str
    state: str
    idempotency_key: str
    attempt: int = 0
    fencing_token: int = 0
    worker_id: str = ""
    ready_ms: int = 0
    started_ms: int = 0
    finished_ms: int = 0
    retry_at_ms: int = 0
    last_error: str = ""
    result: bytes = b""
    lease_ttl_ms: int = 0


@dataclass(slots=True)
class Run:
    run_id: str
    job_id: str
    tenant: str
    scheduled_for_ms: int
    state: str
    trigger: str
    created_ms: int
    job_version: int
    spec: JobSpec
    # Ordered as spec.tasks.
    tasks: dict[str, TaskInstance]
    finished_ms: int = 0


@dataclass(frozen=True, slots=True)
class DeadLetter:
    run_id: str
    task_name: str
    job_id: str
    tenant: str
    attempts: int
    last_error: str
    dead_ms: int


@dataclass(slots=True)
class State:
    """Everything replicated. Iteration orders are insertion orders, identical on replicas."""

    clock_ms: int = 0
    last_token: int = 0
    job_seq: int = 0
    manual_seq: int = 0
    jobs: dict[str, Job] = field(default_factory=dict)
    # (tenant, name) -> job_id
    job_names: dict[tuple[str, str], str] = field(default_factory=dict)
    # tenant -> number of jobs (derived from jobs; kept for the O(1) quota check)
    jobs_per_tenant: dict[str, int] = field(default_factory=dict)
    # Every run still in memory (active and the most recent terminal ones).
    runs: dict[str, Run] = field(default_factory=dict)
    # job_id -> run ids in creation order (terminal ones are evicted beyond retention).
    runs_by_job: dict[str, list[str]] = field(default_factory=dict)
    # (run_id, task_name) -> entry, in the order tasks died.
    dead_letters: dict[tuple[str, str], DeadLetter] = field(default_factory=dict)
    # request_id -> reply, oldest first, bounded by Limits.dedupe_capacity.
    dedupe: OrderedDict[str, object] = field(default_factory=OrderedDict)


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds that apply() enforces. Identical on every replica (a node-wide constant set at
    start-up from config; a mismatch shows as diverging digests)."""

    dedupe_capacity: int = 100_000
    # Terminal runs kept in memory per job; older ones are evicted to the history store.
    runs_retained_per_job: int = 20
    # Test-only canary (jepsen): accept completions and failures whatever their token.
    canary_skip_token_check: bool = False
