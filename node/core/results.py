"""What apply() returns per command, and the effects a batch had (for the leader's loops)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gnomon.node.core.errors import Rejected


@dataclass(frozen=True, slots=True)
class JobReply:
    """CreateJob / UpdateJob / SetPaused: the job id and version after the change."""

    job_id: str
    version: int


@dataclass(frozen=True, slots=True)
class JobsReply:
    """CreateJobs: per item, in order, the job created or why not."""

    items: tuple[JobReply | Rejected, ...]


@dataclass(frozen=True, slots=True)
class RunReply:
    """TriggerJob / CancelRun / Fire: the run concerned ("" for a Fire that was a no-op)."""

    run_id: str


@dataclass(frozen=True, slots=True)
class LimitsReply:
    """SetLimits: the limits version after the change."""

    version: int


@dataclass(frozen=True, slots=True)
class Done:
    """A command that succeeded with nothing to return (DeleteJob, Barrier, ExpireLeases...)."""


@dataclass(frozen=True, slots=True)
class Granted:
    """GrantLeases: per grant, in order, the token or the reason it was refused."""

    tokens: tuple[int | Rejected, ...]


@dataclass(frozen=True, slots=True)
class Replayed:
    tasks: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Discarded:
    """DiscardDeadLetters: the (run_id, task_name) dropped from the queue, each once."""

    tasks: tuple[tuple[str, str], ...]


Reply = (JobReply | JobsReply | RunReply | Done | Granted | Replayed | Discarded | LimitsReply
         | Rejected)


@dataclass(slots=True)
class Effects:
    """What changed in one batch, for leader-local indexes. Lists are in apply order."""

    # Jobs created, updated, paused/resumed, fired or deleted (check state.jobs for which).
    jobs: list[str] = field(default_factory=list)
    # (run_id, task_name) that became READY or RETRY_WAIT (dispatchable now or later).
    dispatchable: list[tuple[str, str]] = field(default_factory=list)
    # (run_id, task_name, token) leases that started (GrantLeases).
    leased: list[tuple[str, str, int]] = field(default_factory=list)
    # (run_id, task_name, token) leases that ended for any reason (complete, fail, expire,
    # cancel, replay); a cancelled lease is also in `cancelled`.
    lease_ended: list[tuple[str, str, int]] = field(default_factory=list)
    # (run_id, task_name, token, reason, worker_id): leases revoked by a cancel (run cancel,
    # job delete with cancel_running): push Cancel to the worker that holds them.
    cancelled: list[tuple[str, str, int, str, str]] = field(default_factory=list)
    # Terminal runs that left memory: write them to the history store (run object, detached).
    evicted_runs: list[object] = field(default_factory=list)
    # (at_ms, actor, action, detail) administrative actions to keep in the history store.
    audit: list[tuple[int, str, str, str]] = field(default_factory=list)
    # Jobs whose backfill started, stepped, ended or was cancelled (the backfill loop).
    backfills: list[str] = field(default_factory=list)
    # Breakers that opened: ("job", job_id) or ("queue", queue_key); and the scope
    # ("job" / "queue") of each scheduled fire a breaker held (SKIPPED).
    circuit_opened: list[tuple[str, str]] = field(default_factory=list)
    circuit_skipped: list[str] = field(default_factory=list)
