"""What a user submits: schedules, retry policies, task specs and job specs.

Frozen dataclasses that mirror ``gnomon/v1/types.proto`` field for field (``_convert`` is the
only place that knows the protobuf side). Times are integer milliseconds as on the wire
(``at_ms``, ``timeout_ms``, ...); every such field is also taken as an aware ``datetime`` or a
``timedelta`` by a keyword without the ``_ms`` (``OnceSchedule(at=...)``,
``TaskSpec(timeout=...)``) and read back by a property of that name (``OnceSchedule.when`` for
``at_ms``, as ``OnceSchedule.at`` is the older constructor).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ._time import DurationField, InstantField, duration_ms, instant_ms, ms_or_alias

__all__ = [
    "CircuitBreaker",
    "CronDialect",
    "CronSchedule",
    "DstAmbiguous",
    "DstNonexistent",
    "IntervalSchedule",
    "JobSpec",
    "MisfirePolicy",
    "OnceSchedule",
    "OverlapPolicy",
    "RetryPolicy",
    "Schedule",
    "TaskSpec",
    "json_payload",
]

DEFAULT_TENANT = "default"
DEFAULT_QUEUE = "default"


def json_payload(value: Any) -> bytes:
    """Encode ``value`` as compact JSON bytes with sorted keys (equal values, equal bytes)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


def payload_bytes(value: bytes | bytearray | memoryview | Mapping[str, Any]) -> bytes:
    """A payload as bytes: bytes as they are, a mapping as JSON."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, Mapping):
        return json_payload(dict(value))
    raise TypeError(f"payload must be bytes or a mapping (JSON), not {type(value).__name__}")


class MisfirePolicy(enum.StrEnum):
    """What happens to fire slots missed by more than the job's ``misfire_grace_ms``."""

    RUN_ALL = "run_all"
    """Every missed slot runs, late."""
    RUN_LATEST = "run_latest"
    """Only the latest missed slot runs; the others are recorded as skipped runs."""
    SKIP = "skip"
    """Every missed slot is recorded as a skipped run."""


class OverlapPolicy(enum.StrEnum):
    """What a fire does while the job already has ``max_active_runs`` active runs (decided
    by the cluster when the fire is applied; manual triggers may override it per call)."""

    ALLOW_ALL = "allow_all"
    """Every fire starts a run (``max_active_runs`` must be unset)."""
    SKIP = "skip"
    """The fire is recorded as a skipped run with reason "overlap"."""
    BUFFER_ONE = "buffer_one"
    """The fire waits as a queued run, at most one; further fires are skipped."""
    BUFFER_ALL = "buffer_all"
    """Fires wait as queued runs, at most ``max_buffered_runs``, started oldest first."""
    CANCEL_OTHER = "cancel_other"
    """The oldest active run is asked to stop (leased tasks may finish); the fire waits."""
    TERMINATE_OTHER = "terminate_other"
    """The oldest active run is cancelled at once (workers told); the fire starts."""


class CronDialect(enum.StrEnum):
    """Where a 6-field cron expression has its seconds (required for 6 fields)."""

    SECONDS_LAST = "seconds_last"
    """``minute hour day-of-month month day-of-week second`` (croniter)."""
    SECONDS_FIRST = "seconds_first"
    """``second minute hour day-of-month month day-of-week`` (Quartz, Spring, Dkron)."""


class DstNonexistent(enum.StrEnum):
    """A cron fire whose local time falls in a DST gap (None: SHIFT_FORWARD)."""

    SKIP = "skip"
    """No fire for it that day."""
    SHIFT_FORWARD = "shift_forward"
    """Fires at the first instant after the gap."""


class DstAmbiguous(enum.StrEnum):
    """A cron fire whose local time occurs twice (None: BOTH)."""

    FIRST = "first"
    """Only the first occurrence (daylight time)."""
    LAST = "last"
    """Only the second occurrence (standard time)."""
    BOTH = "both"
    """Both occurrences."""


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """A cron expression (5 fields, an @alias, or 6 fields with a ``dialect`` saying where
    the seconds are) in an IANA timezone. ``H`` tokens spread jobs by a hash of their name
    (see ``types.proto``). ``dst_nonexistent`` and ``dst_ambiguous`` decide what a local
    time that DST skips or repeats does (None: shift forward, fire both)."""

    expression: str
    timezone: str = "UTC"
    dialect: CronDialect | None = None
    dst_nonexistent: DstNonexistent | None = None
    dst_ambiguous: DstAmbiguous | None = None

    def __post_init__(self) -> None:
        if not self.timezone:
            object.__setattr__(self, "timezone", "UTC")
        for name, kind in (("dialect", CronDialect), ("dst_nonexistent", DstNonexistent),
                           ("dst_ambiguous", DstAmbiguous)):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, kind(value))


@dataclass(frozen=True, slots=True, init=False)
class IntervalSchedule:
    """Fires at ``anchor_ms + k * interval_ms`` for integer ``k``. ``every`` (a timedelta)
    and ``anchor`` (an aware datetime) may stand for the two fields."""

    interval_ms: int
    anchor_ms: int = 0

    def __init__(
        self,
        interval_ms: int | None = None,
        anchor_ms: int = 0,
        *,
        every: timedelta | None = None,
        anchor: datetime | None = None,
    ) -> None:
        interval = ms_or_alias(
            "IntervalSchedule", "interval_ms", interval_ms, "every", every, duration_ms
        )
        if interval is None:
            raise TypeError("IntervalSchedule: give interval_ms or every")
        phase = ms_or_alias(
            "IntervalSchedule", "anchor_ms", anchor_ms, "anchor", anchor, instant_ms
        )
        object.__setattr__(self, "interval_ms", interval)
        object.__setattr__(self, "anchor_ms", phase)

    @classmethod
    def every(cls, interval: timedelta | float, *, anchor_ms: int = 0) -> IntervalSchedule:
        """An interval given as a timedelta or in seconds."""
        seconds = interval.total_seconds() if isinstance(interval, timedelta) else interval
        return cls(interval_ms=round(seconds * 1000), anchor_ms=anchor_ms)

    interval = DurationField()
    anchor = InstantField("the epoch by default", zero_is_epoch=True)


@dataclass(frozen=True, slots=True, init=False)
class OnceSchedule:
    """One fire at ``at_ms`` (or ``at``, an aware datetime); an instant in the past fires as
    soon as possible."""

    at_ms: int

    def __init__(self, at_ms: int | None = None, *, at: datetime | None = None) -> None:
        when = ms_or_alias("OnceSchedule", "at_ms", at_ms, "at", at, instant_ms)
        if when is None:
            raise TypeError("OnceSchedule: give at_ms or at")
        object.__setattr__(self, "at_ms", when)

    @classmethod
    def at(cls, when: datetime) -> OnceSchedule:
        """One fire at a timezone-aware datetime (the same as ``OnceSchedule(at=when)``)."""
        return cls(at=when)

    when = InstantField(field="at_ms", zero_is_epoch=True)


Schedule = CronSchedule | IntervalSchedule | OnceSchedule


@dataclass(frozen=True, slots=True, init=False)
class RetryPolicy:
    """How a failed attempt is retried. Zero fields mean the cluster's defaults
    (3 attempts, 1 s initial backoff, 60 s cap, multiplier 2.0, jitter 0.2); a negative
    ``jitter`` means none. ``initial_backoff`` and ``max_backoff`` (timedeltas) may stand for
    the ``_ms`` fields."""

    max_attempts: int = 0
    initial_backoff_ms: int = 0
    max_backoff_ms: int = 0
    multiplier: float = 0.0
    jitter: float = 0.0

    def __init__(
        self,
        max_attempts: int = 0,
        initial_backoff_ms: int = 0,
        max_backoff_ms: int = 0,
        multiplier: float = 0.0,
        jitter: float = 0.0,
        *,
        initial_backoff: timedelta | None = None,
        max_backoff: timedelta | None = None,
    ) -> None:
        owner = "RetryPolicy"
        first = ms_or_alias(
            owner,
            "initial_backoff_ms",
            initial_backoff_ms,
            "initial_backoff",
            initial_backoff,
            duration_ms,
        )
        cap = ms_or_alias(
            owner, "max_backoff_ms", max_backoff_ms, "max_backoff", max_backoff, duration_ms
        )
        object.__setattr__(self, "max_attempts", max_attempts)
        object.__setattr__(self, "initial_backoff_ms", first)
        object.__setattr__(self, "max_backoff_ms", cap)
        object.__setattr__(self, "multiplier", multiplier)
        object.__setattr__(self, "jitter", jitter)

    initial_backoff = DurationField("zero: the cluster's default")
    max_backoff = DurationField("zero: the cluster's default")


@dataclass(frozen=True, slots=True, init=False)
class TaskSpec:
    """One node of a job's task DAG. ``payload`` is opaque bytes (a mapping is encoded as
    JSON, see ``json_payload``); ``timeout`` (a timedelta) may stand for ``timeout_ms``."""

    name: str
    queue: str = DEFAULT_QUEUE
    depends_on: tuple[str, ...] = ()
    payload: bytes = b""
    timeout_ms: int = 0
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def __init__(
        self,
        name: str,
        queue: str = DEFAULT_QUEUE,
        depends_on: Sequence[str] = (),
        payload: bytes | Mapping[str, Any] = b"",
        timeout_ms: int = 0,
        retry: RetryPolicy | None = None,
        *,
        timeout: timedelta | None = None,
    ) -> None:
        if isinstance(depends_on, str):
            raise TypeError("depends_on must be a sequence of task names, not a string")
        limit = ms_or_alias("TaskSpec", "timeout_ms", timeout_ms, "timeout", timeout, duration_ms)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "queue", queue or DEFAULT_QUEUE)
        object.__setattr__(self, "depends_on", tuple(depends_on))
        object.__setattr__(self, "payload", payload_bytes(payload))
        object.__setattr__(self, "timeout_ms", limit)
        object.__setattr__(self, "retry", retry if retry is not None else RetryPolicy())

    timeout = DurationField("zero: no limit")


@dataclass(frozen=True, slots=True)
class CircuitBreaker:
    """Stops a job's schedule while its runs keep failing: opens when ``failure_percent``
    of the last ``window_runs`` finished scheduled runs failed, holds fires (SKIPPED,
    reason "circuit open") for ``cooldown_ms``, then lets one probe run decide."""

    window_runs: int
    failure_percent: int
    cooldown_ms: int


@dataclass(frozen=True, slots=True, init=False)
class JobSpec:
    """What a user submits: a schedule and a DAG of tasks. ``misfire_grace`` (a timedelta)
    may stand for ``misfire_grace_ms``. ``overlap_policy`` with ``max_active_runs`` (None:
    1, no bound for ALLOW_ALL) and ``max_buffered_runs`` (BUFFER_ALL; 0: the default 100)
    decide what a fire does while earlier runs are active. ``jitter_ms`` delays each fire by
    a random 0..jitter_ms; ``start_at_ms`` / ``end_at_ms`` bound the slots, ``max_runs`` the
    runs the schedule starts; ``delete_after_success`` deletes a one-shot once it
    succeeded."""

    name: str
    schedule: Schedule
    tasks: tuple[TaskSpec, ...]
    tenant: str = DEFAULT_TENANT
    priority: int = 0
    misfire_policy: MisfirePolicy = MisfirePolicy.RUN_ALL
    misfire_grace_ms: int = 0
    paused: bool = False
    overlap_policy: OverlapPolicy = OverlapPolicy.ALLOW_ALL
    max_active_runs: int | None = None
    max_buffered_runs: int = 0
    jitter_ms: int = 0
    start_at_ms: int = 0
    end_at_ms: int = 0
    max_runs: int = 0
    delete_after_success: bool = False
    circuit_breaker: CircuitBreaker | None = None

    def __init__(
        self,
        name: str,
        schedule: Schedule,
        tasks: Sequence[TaskSpec],
        tenant: str = DEFAULT_TENANT,
        priority: int = 0,
        misfire_policy: MisfirePolicy | str = MisfirePolicy.RUN_ALL,
        misfire_grace_ms: int = 0,
        paused: bool = False,
        *,
        misfire_grace: timedelta | None = None,
        overlap_policy: OverlapPolicy | str = OverlapPolicy.ALLOW_ALL,
        max_active_runs: int | None = None,
        max_buffered_runs: int = 0,
        jitter_ms: int = 0,
        start_at_ms: int = 0,
        end_at_ms: int = 0,
        max_runs: int = 0,
        delete_after_success: bool = False,
        circuit_breaker: CircuitBreaker | None = None,
    ) -> None:
        grace = ms_or_alias(
            "JobSpec",
            "misfire_grace_ms",
            misfire_grace_ms,
            "misfire_grace",
            misfire_grace,
            duration_ms,
        )
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "schedule", schedule)
        object.__setattr__(self, "tasks", tuple(tasks))
        object.__setattr__(self, "tenant", tenant or DEFAULT_TENANT)
        object.__setattr__(self, "priority", priority)
        object.__setattr__(self, "misfire_policy", MisfirePolicy(misfire_policy))
        object.__setattr__(self, "misfire_grace_ms", grace)
        object.__setattr__(self, "paused", paused)
        object.__setattr__(self, "overlap_policy", OverlapPolicy(overlap_policy))
        object.__setattr__(self, "max_active_runs", max_active_runs)
        object.__setattr__(self, "max_buffered_runs", max_buffered_runs)
        object.__setattr__(self, "jitter_ms", jitter_ms)
        object.__setattr__(self, "start_at_ms", start_at_ms)
        object.__setattr__(self, "end_at_ms", end_at_ms)
        object.__setattr__(self, "max_runs", max_runs)
        object.__setattr__(self, "delete_after_success", delete_after_success)
        object.__setattr__(self, "circuit_breaker", circuit_breaker)

    misfire_grace = DurationField()

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
        timeout: timedelta | None = None,
        misfire_grace: timedelta | None = None,
        overlap_policy: OverlapPolicy | str = OverlapPolicy.ALLOW_ALL,
        max_active_runs: int | None = None,
        max_buffered_runs: int = 0,
        jitter_ms: int = 0,
        start_at_ms: int = 0,
        end_at_ms: int = 0,
        max_runs: int = 0,
        delete_after_success: bool = False,
        circuit_breaker: CircuitBreaker | None = None,
    ) -> JobSpec:
        """A job of one task (named ``task_name``, "main" by default). A mapping payload is
        encoded as JSON; ``timeout`` and ``misfire_grace`` (timedeltas) may stand for the
        ``_ms`` options."""
        task = TaskSpec(
            name=task_name,
            queue=queue,
            payload=payload,
            timeout_ms=timeout_ms,
            retry=retry,
            timeout=timeout,
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
            misfire_grace=misfire_grace,
            overlap_policy=overlap_policy,
            max_active_runs=max_active_runs,
            max_buffered_runs=max_buffered_runs,
            jitter_ms=jitter_ms,
            start_at_ms=start_at_ms,
            end_at_ms=end_at_ms,
            max_runs=max_runs,
            delete_after_success=delete_after_success,
            circuit_breaker=circuit_breaker,
        )
