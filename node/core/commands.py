"""Commands: the only inputs of the state machine, mirrored 1:1 by gnomon.v1.raft messages.

Every non-deterministic input (time, next fire instants, jitter draws, worker choice) is a
field here, filled in by the leader. node/codec.py converts to and from protobuf.

Every command with a `request_id` also has `request_scope` (who asked, through which RPC)
and `request_fingerprint` (SHA-256 of the request without its id), stamped by the servicer:
apply remembers the id per scope and refuses it for a different request (DESIGN.md,
"Request ids"). Empty scope: the legacy global scope (entries written before scopes).
"""

from __future__ import annotations

from dataclasses import dataclass

from gnomon.node.core.access import CreateToken, RecordAudit, RevokeToken, SetTenant
from gnomon.node.core.model import CircuitBreaker, JobSpec, Limits


@dataclass(frozen=True, slots=True)
class CreateJob:
    request_id: str
    spec: JobSpec
    next_fire_ms: int
    max_jobs_per_tenant: int = 0
    request_scope: str = ""
    request_fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class CreateJobItem:
    spec: JobSpec
    next_fire_ms: int


@dataclass(frozen=True, slots=True)
class CreateJobs:
    """Bulk create: each item applies like a CreateJob of its own (its own rejection; the
    items before it count for names and quotas); `request_id` dedupes the whole command."""

    request_id: str
    items: tuple[CreateJobItem, ...]
    max_jobs_per_tenant: int = 0
    request_scope: str = ""
    request_fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class UpdateJob:
    request_id: str
    job_id: str
    spec: JobSpec
    expected_version: int
    next_fire_ms: int
    request_scope: str = ""
    request_fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class DeleteJob:
    """Queued runs of the job are cancelled; leased tasks finish unless `cancel_running`."""

    request_id: str
    job_id: str
    expected_version: int = 0
    cancel_running: bool = False
    request_scope: str = ""
    request_fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class SetPaused:
    request_id: str
    job_id: str
    paused: bool
    next_fire_ms: int = 0
    request_scope: str = ""
    request_fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class Fire:
    job_id: str
    scheduled_for_ms: int
    next_fire_ms: int
    skip: bool = False
    # The leader's delay after the slot (jitter draw + spread), recorded on the run.
    delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class TaskPayload:
    task_name: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class TriggerJob:
    request_id: str
    job_id: str
    # "" means the job's overlap policy; else one of model.OVERLAP_POLICIES.
    overlap_policy: str = ""
    # Run parameters (JSON, as given) and the tasks' payloads with them merged in (by the
    # leader: the core parses no JSON). A task not listed keeps its spec's payload.
    params: bytes = b""
    payloads: tuple[TaskPayload, ...] = ()
    request_scope: str = ""
    request_fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class CancelRun:
    request_id: str
    run_id: str
    reason: str = ""
    request_scope: str = ""
    request_fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    run_id: str
    task_name: str
    worker_id: str
    lease_ttl_ms: int


@dataclass(frozen=True, slots=True)
class GrantLeases:
    grants: tuple[LeaseGrant, ...]


@dataclass(frozen=True, slots=True)
class CompleteTask:
    run_id: str
    task_name: str
    fencing_token: int
    result: bytes = b""
    output_tail: str = ""
    exit_code: int | None = None
    duration_ms: int = 0


@dataclass(frozen=True, slots=True)
class FailTask:
    run_id: str
    task_name: str
    fencing_token: int
    error: str
    retryable: bool
    jitter_draw: float = 0.5
    output_tail: str = ""
    exit_code: int | None = None
    duration_ms: int = 0


@dataclass(frozen=True, slots=True)
class ExpiredLease:
    run_id: str
    task_name: str
    fencing_token: int
    reason: str = "lease expired"
    jitter_draw: float = 0.5


@dataclass(frozen=True, slots=True)
class ExpireLeases:
    leases: tuple[ExpiredLease, ...]


@dataclass(frozen=True, slots=True)
class LeaseCheckpoint:
    run_id: str
    task_name: str
    fencing_token: int
    # Lease time left as the leader saw it; 0 clears the checkpoint (the lease is healthy).
    remaining_ms: int


@dataclass(frozen=True, slots=True)
class CheckpointLeases:
    checkpoints: tuple[LeaseCheckpoint, ...]


@dataclass(frozen=True, slots=True)
class SetLimits:
    """Replace the replicated limits (every field); `expected_version` 0 means any.
    A `bootstrap` one (a new cluster's first leader) applies only while none was applied."""

    request_id: str
    limits: Limits
    expected_version: int = 0
    bootstrap: bool = False
    request_scope: str = ""
    request_fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class TaskKey:
    run_id: str
    task_name: str


@dataclass(frozen=True, slots=True)
class ReplayDeadLetters:
    request_id: str
    tasks: tuple[TaskKey, ...]
    request_scope: str = ""
    request_fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class DiscardDeadLetters:
    """Drop tasks from the dead-letter queue for good: they stay DEAD in their runs."""

    request_id: str
    tasks: tuple[TaskKey, ...]
    request_scope: str = ""
    request_fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class Barrier:
    pass


@dataclass(frozen=True, slots=True)
class RerunRun:
    """A fresh attempt series for the run's failed, cancelled and upstream-failed tasks
    (`task_names` empty), or for the named ones and the tasks they block; succeeded tasks
    are kept. The run (failed, cancelled, or still running) runs again."""

    request_id: str
    run_id: str
    task_names: tuple[str, ...] = ()
    request_scope: str = ""
    request_fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class ResetCircuit:
    """Close a job's breaker, or with `queue` set the breaker of (tenant, queue)."""

    request_id: str
    job_id: str
    tenant: str = ""
    queue: str = ""
    request_scope: str = ""
    request_fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class StartBackfill:
    """Backfill the job's slots in [from_ms, to_ms); `total_slots` is the leader's count
    (it checked backfill_max_slots). `overlap_policy` "" means the job's."""

    request_id: str
    job_id: str
    from_ms: int
    to_ms: int
    total_slots: int
    overlap_policy: str = ""
    request_scope: str = ""
    request_fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class BackfillStep:
    """The leader's next slots of a running backfill: applies only while the backfill's
    next_slot_ms equals `cursor_ms` (a retried or stale step is a no-op); `slots_ms` are the
    schedule's consecutive slots from the cursor, then next_slot_ms becomes `next_cursor_ms`;
    `done`: the range is exhausted."""

    job_id: str
    cursor_ms: int
    slots_ms: tuple[int, ...]
    next_cursor_ms: int
    done: bool = False


@dataclass(frozen=True, slots=True)
class CancelBackfill:
    request_id: str
    job_id: str
    request_scope: str = ""
    request_fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class SetQueueCircuit:
    """Give (tenant, queue) a breaker, replace its rule (the state closes), or remove it
    (`breaker` None)."""

    request_id: str
    tenant: str
    queue: str
    breaker: CircuitBreaker | None = None
    request_scope: str = ""
    request_fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class CancelTask:
    """Cancel one live task of a run (a leased one's worker is told); the tasks waiting for
    it can no longer run (upstream_failed)."""

    request_id: str
    run_id: str
    task_name: str
    reason: str = ""
    request_scope: str = ""
    request_fingerprint: bytes = b""


Command = (
    CreateJob
    | UpdateJob
    | DeleteJob
    | SetPaused
    | Fire
    | TriggerJob
    | CancelRun
    | GrantLeases
    | CompleteTask
    | FailTask
    | ExpireLeases
    | ReplayDeadLetters
    | DiscardDeadLetters
    | Barrier
    | SetLimits
    | CheckpointLeases
    | CreateToken
    | RevokeToken
    | SetTenant
    | RecordAudit
    | RerunRun
    | CancelTask
    | ResetCircuit
    | CreateJobs
    | StartBackfill
    | BackfillStep
    | CancelBackfill
    | SetQueueCircuit
)


@dataclass(frozen=True, slots=True)
class Batch:
    """One Raft entry: commands applied in order at cluster time max(clock, now_ms)."""

    now_ms: int
    commands: tuple[Command, ...]
