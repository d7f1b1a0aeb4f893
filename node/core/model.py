"""The replicated state: jobs, runs, task instances, the dead-letter queue, dedupe.

Plain slotted classes, mutated only by `gnomon.node.core.apply`. Specs are frozen and shared
(a run points at the JobSpec it was fired with). Times are ms since the epoch, UTC.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from gnomon.node.core.access import AccessState
from gnomon.node.core.index import JobOrder, RunFifo


class ScheduleKind:
    CRON = "cron"
    INTERVAL = "interval"
    ONCE = "once"


class CronDialect:
    """Where a 6-field cron expression has its seconds ("": 5 fields or an alias)."""

    UNSPECIFIED = ""
    SECONDS_LAST = "seconds_last"
    SECONDS_FIRST = "seconds_first"


class DstNonexistent:
    """A cron fire whose local time falls in a DST gap ("": SHIFT_FORWARD)."""

    SKIP = "skip"
    SHIFT_FORWARD = "shift_forward"


class DstAmbiguous:
    """A cron fire whose local time occurs twice ("": BOTH)."""

    FIRST = "first"
    LAST = "last"
    BOTH = "both"


class MisfirePolicy:
    RUN_ALL = "run_all"
    RUN_LATEST = "run_latest"
    SKIP = "skip"


class OverlapPolicy:
    """What a fire does while the job has max_active_runs active runs (types.proto)."""

    ALLOW_ALL = "allow_all"
    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    BUFFER_ALL = "buffer_all"
    CANCEL_OTHER = "cancel_other"
    TERMINATE_OTHER = "terminate_other"


OVERLAP_POLICIES = (
    OverlapPolicy.ALLOW_ALL,
    OverlapPolicy.SKIP,
    OverlapPolicy.BUFFER_ONE,
    OverlapPolicy.BUFFER_ALL,
    OverlapPolicy.CANCEL_OTHER,
    OverlapPolicy.TERMINATE_OTHER,
)


class RunState:
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    # Buffered by the job's overlap policy: starts when an active run of the job ends.
    QUEUED = "queued"


class RunTrigger:
    SCHEDULE = "schedule"
    MANUAL = "manual"
    # A slot of a BackfillJob range (run id "<job>@backfill-<n>-<slot>", n: the backfill).
    BACKFILL = "backfill"


class BackfillStatus:
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"


class TaskState:
    PENDING = "pending"
    READY = "ready"
    LEASED = "leased"
    RETRY_WAIT = "retry_wait"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    UPSTREAM_FAILED = "upstream_failed"
    CANCELLED = "cancelled"


class AttemptOutcome:
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    # The lease ran out (worker gone) or the task's timeout passed; `error` says which.
    EXPIRED = "expired"
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
# BUFFER_ALL's buffer when the spec leaves max_buffered_runs at 0.
DEFAULT_MAX_BUFFERED_RUNS = 100


@dataclass(frozen=True, slots=True)
class Schedule:
    kind: str
    expression: str = ""
    timezone: str = ""
    interval_ms: int = 0
    anchor_ms: int = 0
    at_ms: int = 0
    # Cron only: CronDialect, DstNonexistent, DstAmbiguous ("": the defaults).
    dialect: str = ""
    dst_nonexistent: str = ""
    dst_ambiguous: str = ""


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
class CircuitBreaker:
    """Opens when failure_percent of the last window_runs finished runs failed."""

    window_runs: int
    failure_percent: int
    cooldown_ms: int


class CircuitStatus:
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class Circuit:
    """A job's breaker state (replicated): immutable, replaced on each change."""

    status: str = CircuitStatus.CLOSED
    opened_ms: int = 0
    # Outcomes of the last finished runs while closed, oldest first (True: failed).
    recent_failures: tuple[bool, ...] = ()
    probe_run_id: str = ""
    opens: int = 0


CLOSED_CIRCUIT = Circuit()


@dataclass(frozen=True, slots=True)
class QueueCircuit:
    """A queue's breaker (SetQueueCircuit): its rule and its state, replaced on each change.
    Keyed by queue_key(tenant, queue): queues are namespaced by tenant."""

    tenant: str
    queue: str
    breaker: CircuitBreaker
    circuit: Circuit = CLOSED_CIRCUIT


def queue_key(tenant: str, queue: str) -> str:
    return f"{tenant}/{queue}"


@dataclass(frozen=True, slots=True)
class Backfill:
    """A job's backfill of the slots in [from_ms, to_ms) (replicated intent): the leader
    proposes the slots from next_slot_ms on in paced steps (BackfillStep); the core creates
    their runs. The latest one stays on the job after it ended, for GetJob."""

    from_ms: int
    to_ms: int
    next_slot_ms: int
    # Slots in the range as the leader counted them at the start (progress).
    total_slots: int
    # "" means the job's overlap policy.
    overlap_policy: str = ""
    status: str = BackfillStatus.RUNNING
    created: int = 0
    # Slots not run: already ran (ran_spans), the schedule's own (at or after next_fire_ms),
    # or skipped by the overlap policy (those get a SKIPPED run).
    skipped: int = 0
    started_ms: int = 0
    finished_ms: int = 0
    # The last slot this backfill added to the job's ran_spans (0: none, or a skip broke
    # the chain): the next slot it runs extends that span.
    span_hi_ms: int = 0
    # The job's backfills so far, this one included: part of its run ids, so that a slot a
    # backfill skipped (overlap) and a later one runs have two distinct runs.
    number: int = 1


# Spans kept per job in Job.ran_spans; beyond it the two oldest merge (conservative: the
# slots between them then count as ran, so a backfill never runs one twice).
MAX_RAN_SPANS = 128


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
    overlap_policy: str = OverlapPolicy.ALLOW_ALL
    # None: the default (1; no bound for ALLOW_ALL). See effective_max_active_runs.
    max_active_runs: int | None = None
    # BUFFER_ALL's bound; 0 means DEFAULT_MAX_BUFFERED_RUNS.
    max_buffered_runs: int = 0
    # Leader-side: each fire delayed by a draw in 0..jitter_ms; no slot before start_at_ms
    # or after end_at_ms (0: none).
    jitter_ms: int = 0
    start_at_ms: int = 0
    end_at_ms: int = 0
    # Runs the schedule starts at most (0: no bound); a one-shot deleted once it succeeded.
    max_runs: int = 0
    delete_after_success: bool = False
    circuit_breaker: CircuitBreaker | None = None

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
    # Runs its schedule started or queued (max_runs).
    runs_started: int = 0
    circuit: Circuit = CLOSED_CIRCUIT
    # Inclusive (lo, hi) slot ranges, sorted and disjoint, in which every slot of the job's
    # schedule got a run that was not skipped (scheduled fires and backfills): a backfill
    # does not run those slots again. span_open: the last Fire ran, so the next one extends
    # the last span (a skip, pause or schedule change closes it).
    ran_spans: tuple[tuple[int, int], ...] = ()
    span_open: bool = False
    backfill: Backfill | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One finished attempt of a task instance: who ran it, how it ended, its output tail."""

    attempt: int
    fencing_token: int
    worker_id: str
    started_ms: int
    finished_ms: int
    outcome: str
    error: str = ""
    # The process exit code when the worker ran one (shell worker); None otherwise.
    exit_code: int | None = None
    # Run time as the worker measured it.
    duration_ms: int = 0
    # Last bytes of the task's output, cut by the leader to `max_output_tail_bytes`.
    output_tail: str = ""


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
    # Remaining lease time last checkpointed by a leader, and the cluster time of that
    # checkpoint (0, 0: none since the grant). A new leader re-arms the lease to end at
    # lease_checkpoint_ms + lease_remaining_ms instead of a full TTL from its promotion
    # (etcd's lease checkpoints), so churn does not keep a dead worker's lease alive.
    lease_remaining_ms: int = 0
    lease_checkpoint_ms: int = 0
    # The most recent finished attempts, oldest first (at most Limits.max_attempt_records).
    attempts: tuple[Attempt, ...] = ()


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
    # Why a policy skipped, queued or cancelled it ("misfire", "overlap", ...), or the
    # reason a CancelRun gave.
    reason: str = ""
    # CANCEL_OTHER asked it to stop: nothing new of it starts, it ends when its leases have.
    cancel_requested: bool = False
    # How long after its slot the leader fired it (jitter + spread; from the Fire command).
    fire_delay_ms: int = 0
    # A manual trigger's parameters (JSON), already merged into run.spec's task payloads.
    params: bytes = b""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    run_id: str
    task_name: str
    job_id: str
    tenant: str
    attempts: int
    last_error: str
    dead_ms: int


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds that change what apply() does. Replicated: they live in State and change only
    through the SetLimits command, so every replica applies an entry alike whatever its own
    config says (a node's config only proposes the initial values, see node/DESIGN.md)."""

    # Remembered request ids (a retried request with the same id has one effect)...
    dedupe_capacity: int = 100_000
    # ...for at most this long (0: no age bound).
    dedupe_max_age_ms: int = 86_400_000
    # Terminal runs kept in memory per job; older ones are evicted to the history store.
    runs_retained_per_job: int = 20
    # Dead-letter queue entries; beyond it the oldest leave the queue (counted in
    # State.dead_letters_evicted; their runs go to the history store like any other).
    max_dead_letters: int = 100_000
    # Finished attempts kept per task instance (the newest).
    max_attempt_records: int = 10
    # Tokens per tenant (cluster-wide tokens count under ""), revoked and expired ones
    # included: a new token beyond it first forgets that tenant's oldest dead token, if any.
    max_tokens_per_tenant: int = 1_000
    # Queue circuit breakers (SetQueueCircuit) per tenant.
    max_queue_circuits_per_tenant: int = 1_000


@dataclass(frozen=True, slots=True)
class DedupeEntry:
    at_ms: int
    reply: object
    # SHA-256 of the request the id was first used for (b"": a legacy entry, or a command
    # proposed without one): a different request under the same key is refused.
    fingerprint: bytes = b""


# A request id is remembered per scope (core/DESIGN.md, "Request ids"): the key is
# (scope, request_id), or the bare request_id in the legacy global scope "" (entries of logs
# and snapshots written before scopes existed, and commands proposed without a caller).
DedupeKey = str | tuple[str, str]


def dedupe_key(scope: str, request_id: str) -> DedupeKey:
    return (scope, request_id) if scope else request_id


def split_dedupe_key(key: DedupeKey) -> tuple[str, str]:
    """(scope, request_id) of a key of State.dedupe."""
    return key if isinstance(key, tuple) else ("", key)


@dataclass(slots=True)
class State:
    """Everything replicated. Iteration orders are insertion orders, identical on replicas."""

    clock_ms: int = 0
    limits: Limits = Limits()
    # Incremented by every SetLimits; 0 until the first leader proposed the initial limits.
    limits_version: int = 0
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
    # job_id -> its run ids in memory, in creation order (an ordered set).
    runs_by_job: dict[str, dict[str, None]] = field(default_factory=dict)
    # job_id -> its terminal runs in memory in the order they ended; the front leaves memory
    # first when the job keeps more than Limits.runs_retained_per_job.
    retained: dict[str, RunFifo] = field(default_factory=dict)
    # job_id -> terminal runs beyond the bound that stay in memory for their dead letters.
    pinned: dict[str, dict[str, None]] = field(default_factory=dict)
    # (run_id, task_name) -> entry, in the order tasks died.
    dead_letters: dict[tuple[str, str], DeadLetter] = field(default_factory=dict)
    # Dead letters that left the queue because of Limits.max_dead_letters.
    dead_letters_evicted: int = 0
    # dedupe_key(scope, request_id) -> (time, reply, fingerprint), oldest first, bounded by
    # Limits.dedupe_capacity and age.
    dedupe: OrderedDict[DedupeKey, DedupeEntry] = field(default_factory=OrderedDict)
    # Derived (not in snapshots or the digest): runs in state RUNNING; creation order of
    # jobs for paging.
    active_runs: int = 0
    # Derived: job_id -> its RUNNING runs, and its QUEUED ones (the overlap policy's view).
    # Their order is not replicated meaning: apply reads them sorted (overlap_order).
    running_by_job: dict[str, dict[str, None]] = field(default_factory=dict)
    queued_by_job: dict[str, dict[str, None]] = field(default_factory=dict)
    job_order: JobOrder = field(default_factory=lambda: JobOrder())
    tenant_job_order: dict[str, JobOrder] = field(default_factory=dict)
    # Bearer tokens (node/core/access.py).
    access: AccessState = field(default_factory=AccessState)
    # queue_key(tenant, queue) -> that queue's breaker (SetQueueCircuit), in creation order.
    queue_circuits: dict[str, QueueCircuit] = field(default_factory=dict)


