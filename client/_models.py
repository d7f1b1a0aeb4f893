"""The public data types: what a user submits (``_specs``: schedules, retry policies, task and
job specs, re-exported here) and what the cluster stores and answers (jobs, runs, task
instances, attempts, dead letters, cluster status).

They mirror ``gnomon/v1/types.proto`` and ``api.proto`` field for field, as frozen dataclasses;
``_convert`` is the only place that knows the protobuf side. Times are integer milliseconds since
the epoch (UTC), durations integer milliseconds, exactly as on the wire; each ``x_ms`` field also
reads as a property ``x``: an aware UTC ``datetime`` for an instant (None where 0 means unset),
a ``timedelta`` for a duration.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import Literal, NamedTuple

from ._specs import (
    DEFAULT_TENANT,
    CircuitBreaker,
    CronDialect,
    CronSchedule,
    DstAmbiguous,
    DstNonexistent,
    IntervalSchedule,
    JobSpec,
    MisfirePolicy,
    OnceSchedule,
    OverlapPolicy,
    RetryPolicy,
    Schedule,
    TaskSpec,
    json_payload,
)
from ._time import DurationField, InstantField

__all__ = [
    "Attempt",
    "AttemptOutcome",
    "Backfill",
    "CircuitBreaker",
    "CircuitState",
    "ClusterLimits",
    "ClusterStatus",
    "Consistency",
    "CronDialect",
    "CronSchedule",
    "DeadLetter",
    "DstAmbiguous",
    "DstNonexistent",
    "IntervalSchedule",
    "Job",
    "JobSpec",
    "LimitsUpdate",
    "MisfirePolicy",
    "NodeStatus",
    "OnceSchedule",
    "OverlapPolicy",
    "PreviewFire",
    "QueueCircuit",
    "RetryPolicy",
    "Run",
    "RunPage",
    "RunSort",
    "RunState",
    "RunTrigger",
    "Schedule",
    "SchedulePreview",
    "TaskInstance",
    "TaskRef",
    "TaskSpec",
    "TaskState",
    "json_payload",
]

Consistency = Literal["linearizable", "stale"]
"""Read consistency: ``"linearizable"`` sees every acknowledged write; ``"stale"`` may lag."""


class RunState(enum.StrEnum):
    """Where a run is: running until every task is terminal, then how it ended."""

    UNSPECIFIED = "unspecified"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    QUEUED = "queued"
    """Buffered by the job's overlap policy: starts when an active run of the job ends."""

    @property
    def is_terminal(self) -> bool:
        """Whether the run ended."""
        return self in _TERMINAL_RUN_STATES


_TERMINAL_RUN_STATES = frozenset(
    {RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.SKIPPED}
)


class RunTrigger(enum.StrEnum):
    """Why a run exists: its job's schedule, or ``trigger_job``."""

    UNSPECIFIED = "unspecified"
    SCHEDULE = "schedule"
    MANUAL = "manual"
    BACKFILL = "backfill"


class RunSort(enum.StrEnum):
    """The order of ``list_runs_across_jobs`` (ties by run id)."""

    CREATED_DESC = "created_desc"
    CREATED_ASC = "created_asc"
    DURATION_DESC = "duration_desc"
    """Longest first: created to finished, or to now for a run not finished."""
    DURATION_ASC = "duration_asc"


class TaskState(enum.StrEnum):
    """Where one task of a run is (see ``node/core/DESIGN.md`` for the transitions)."""

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
        """Whether the task will not run again (unless a dead letter is replayed)."""
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
class PreviewFire:
    """One instant a schedule fires at: UTC ms, ISO 8601 in UTC and in the schedule's
    timezone, and what DST did to it (empty: nothing)."""

    at_ms: int
    utc: str = ""
    local: str = ""
    dst_note: str = ""

    at = InstantField()


@dataclass(frozen=True, slots=True)
class SchedulePreview:
    """``preview_schedule``: the next fires, the timezone of their local times, and how the
    cluster reads a cron expression: as written (an alias expanded), then ``(5 fields)`` or
    the dialect and its field order, ``0 */10 * * * * (seconds first (Quartz, Spring, Dkron):
    second minute hour day-of-month month day-of-week)``."""

    fires: tuple[PreviewFire, ...] = ()
    timezone: str = "UTC"
    reading: str = ""


@dataclass(frozen=True, slots=True)
class CircuitState:
    """A job's circuit breaker: ``status`` closed, open or half_open; ``opened_ms`` when it
    last opened; ``recent_failures`` the window while closed (True: failed); the half-open
    probe run; how many times it opened."""

    status: str = "closed"
    opened_ms: int = 0
    recent_failures: tuple[bool, ...] = ()
    probe_run_id: str = ""
    opens: int = 0


@dataclass(frozen=True, slots=True)
class CreateJobResult:
    """One spec's outcome in ``create_jobs``: ``job`` when it was created, else ``error``
    (the typed error a ``create_job`` of that spec alone would have raised; its message
    names the field as ``specs[i].field``, ``i`` the spec's index in the whole call)."""

    index: int
    spec: JobSpec
    job: Job | None = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        """True when the job was created."""
        return self.job is not None


@dataclass(frozen=True, slots=True)
class QueueCircuit:
    """A queue's circuit breaker (queues are namespaced by tenant): its rule and state."""

    tenant: str
    queue: str
    breaker: CircuitBreaker
    circuit: CircuitState = CircuitState()


@dataclass(frozen=True, slots=True)
class Backfill:
    """A job's backfill of the slots in [from_ms, to_ms): ``status`` running, done or
    cancelled; ``next_slot_ms`` the slots before it are done; ``created`` runs made,
    ``skipped`` slots not run (already ran, the schedule's own, or skipped by the overlap
    policy) of ``total_slots``."""

    from_ms: int
    to_ms: int
    next_slot_ms: int = 0
    total_slots: int = 0
    overlap_policy: OverlapPolicy | None = None
    status: str = "running"
    created: int = 0
    skipped: int = 0
    started_ms: int = 0
    finished_ms: int = 0
    # The job's backfills so far, this one included (its runs are "<job>@backfill-<n>-<slot>").
    number: int = 1

    @property
    def done_slots(self) -> int:
        """Slots dealt with (run or skipped)."""
        return self.created + self.skipped

    @property
    def finished(self) -> bool:
        return self.status != "running"


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
    # Runs its schedule started or queued (``spec.max_runs``).
    runs_started: int = 0
    circuit: CircuitState = CircuitState()
    # The job's latest backfill (None: never backfilled).
    backfill: Backfill | None = None

    @property
    def name(self) -> str:
        """The job's name (unique in its tenant)."""
        return self.spec.name

    @property
    def tenant(self) -> str:
        """The job's tenant."""
        return self.spec.tenant

    next_fire = InstantField("None: nothing left to fire")
    created = InstantField()
    updated = InstantField()


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

    started = InstantField()
    finished = InstantField()
    duration = DurationField()


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

    ready = InstantField()
    started = InstantField()
    finished = InstantField()
    retry_at = InstantField("None: no retry is waiting")
    lease_ttl = DurationField()
    lease_remaining = DurationField()


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
    # Why a policy skipped, queued or cancelled it ("misfire", "overlap", ...), or the reason
    # a cancel gave.
    reason: str = ""
    # The overlap policy (CANCEL_OTHER) asked it to stop; it ends when its leased tasks have.
    cancel_requested: bool = False
    # How long after its slot it was due: the job's jitter plus the cluster's spread.
    fire_delay_ms: int = 0
    # A manual trigger's parameters (JSON bytes), merged into its tasks' payloads.
    params: bytes = b""

    def __post_init__(self) -> None:
        object.__setattr__(self, "tasks", tuple(self.tasks))

    @property
    def done(self) -> bool:
        """Whether the run ended (succeeded, failed, cancelled or skipped)."""
        return self.state.is_terminal

    scheduled_for = InstantField("the slot this run fires for", zero_is_epoch=True)
    created = InstantField()
    finished = InstantField("None while running")

    def task(self, name: str) -> TaskInstance:
        """The instance of task ``name``; KeyError if the run has none."""
        for instance in self.tasks:
            if instance.task_name == name:
                return instance
        raise KeyError(name)


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of ``list_runs_across_jobs``; pass ``next_page_token`` for the next page
    ("" on the last one)."""

    runs: tuple[Run, ...] = ()
    next_page_token: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "runs", tuple(self.runs))


@dataclass(frozen=True, slots=True)
class RunWait:
    """One reason a run or a task waits (``explain_run``): its kind (``no_worker``,
    ``tenant_concurrency``, ``upstream``, ...), the task ("" for the run), the reason in
    words, the bound that holds it back with its value and current count, and where to
    change it."""

    kind: str
    task_name: str = ""
    detail: str = ""
    limit: str = ""
    limit_value: int = 0
    current: int = 0
    change: str = ""


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
        """The dead task as a ``TaskRef`` (for ``replay_dead_letters``)."""
        return TaskRef(self.run_id, self.task_name)

    dead = InstantField("when the task failed for good")


class TaskRef(NamedTuple):
    """Names one task of one run; a plain ``(run_id, task_name)`` tuple works too."""

    run_id: str
    task_name: str


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """One cluster member as the answering node sees it."""

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
    max_tokens_per_tenant: int | None = None
    """Tokens per tenant (>= 1; cluster-wide tokens count as one tenant), revoked and expired
    ones included: a new token at the bound replaces the tenant's oldest dead one, else
    ResourceExhausted."""
    max_queue_circuits_per_tenant: int | None = None
    """Queue circuit breakers per tenant (>= 1)."""

    dedupe_max_age = DurationField("None if not given")

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
class LeaderChange:
    """A leader change as the answering node saw it (node-local): when (its wall clock), the
    term, the new leader ("" none known), the one before, and the cause it can tell."""

    at_ms: int
    term: int
    leader_node_id: str = ""
    previous_leader_node_id: str = ""
    cause: str = ""


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
    leader_changes: tuple[LeaderChange, ...] = ()
    """The leader changes the answering node saw, newest first."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "leader_changes", tuple(self.leader_changes))

    clock = InstantField("the cluster's time, which never goes back")
