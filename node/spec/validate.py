"""Leader-side validation of user input before a command is proposed.

Every rule raises ValidationError whose message is `"<field>: <rule>"`, with proto field paths
such as `spec.tasks[1].depends_on`, so the servicer can return it as INVALID_ARGUMENT verbatim.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace

from gnomon.node.core.commands import TaskPayload
from gnomon.node.core.model import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MULTIPLIER,
    DEFAULT_QUEUE,
    DEFAULT_TENANT,
    OVERLAP_POLICIES,
    CircuitBreaker,
    JobSpec,
    MisfirePolicy,
    RetryPolicy,
    TaskSpec,
)
from gnomon.node.core.validate import check_bounds, check_breaker, check_dag, check_overlap
from gnomon.node.core.validate import show as _show
from gnomon.node.spec.errors import ValidationError
from gnomon.node.spec.schedules import check_schedule, job_hash_id, shortest_gap_ms

__all__ = [
    "InputLimits",
    "ValidationError",
    "validate_id",
    "validate_request_id",
    "validate_spec",
    "validate_worker_id",
    "validate_queue_ref",
    "validate_breaker",
    "validate_backfill_range",
]

_TENANT = re.compile(r"[a-z0-9_-]{1,64}")
_QUEUE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_NAME_CHARS = re.compile(r"[A-Za-z0-9_.-]+")
_WORKER_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
MAX_REQUEST_ID_BYTES = 128
# Ids the cluster assigns ("j12", "j12@1700000000000") are far shorter; the bound keeps any id a
# valid LMDB key (at most 511 bytes) in the run history store.
MAX_ID_BYTES = 256
MIN_PRIORITY = -100
MAX_PRIORITY = 100
_MISFIRE_POLICIES = (MisfirePolicy.RUN_ALL, MisfirePolicy.RUN_LATEST, MisfirePolicy.SKIP)


@dataclass(frozen=True, slots=True)
class InputLimits:
    """Bounds on user input, from node config."""

    max_payload_bytes: int = 64 * 1024
    max_tasks_per_job: int = 100
    max_attempts: int = 100
    min_interval_ms: int = 100
    max_timeout_ms: int = 7 * 24 * 3600 * 1000
    max_name_len: int = 128
    max_task_name_len: int = 64
    max_active_runs: int = 100
    max_buffered_runs: int = 1_000
    max_jitter_ms: int = 3_600_000
    max_circuit_window_runs: int = 100


def validate_spec(spec: JobSpec, limits: InputLimits) -> JobSpec:
    """Check every rule of `spec`; return it normalised (empty tenant and queues -> "default")."""
    tenant = spec.tenant or DEFAULT_TENANT
    if not _TENANT.fullmatch(tenant):
        raise ValidationError("spec.tenant", f"must match [a-z0-9_-]{{1,64}}, got {_show(tenant)}")
    _check_name("spec.name", spec.name, limits.max_name_len)
    check_schedule(
        spec.schedule, min_interval_ms=limits.min_interval_ms, hash_id=job_hash_id(tenant, spec.name)
    )
    tasks = _check_tasks(spec.tasks, limits)
    if not MIN_PRIORITY <= spec.priority <= MAX_PRIORITY:
        raise ValidationError(
            "spec.priority", f"must be in {MIN_PRIORITY}..{MAX_PRIORITY}, got {spec.priority}"
        )
    policy = spec.misfire_policy or MisfirePolicy.RUN_ALL
    if policy not in _MISFIRE_POLICIES:
        raise ValidationError(
            "spec.misfire_policy",
            f"must be one of {', '.join(_MISFIRE_POLICIES)}, got {_show(policy)}",
        )
    if spec.misfire_grace_ms < 0:
        raise ValidationError(
            "spec.misfire_grace_ms",
            f"must be >= 0 (0 means the default), got {spec.misfire_grace_ms}",
        )
    _check_overlap(spec, limits)
    _check_timing(spec, limits, job_hash_id(tenant, spec.name))
    return replace(spec, tenant=tenant, tasks=tasks, misfire_policy=policy)


def _check_timing(spec: JobSpec, limits: InputLimits, hash_id: str) -> None:
    """Jitter and the bounds (start_at_ms, end_at_ms, max_runs, delete_after_success)."""
    for name in ("jitter_ms", "start_at_ms", "end_at_ms", "max_runs"):
        value = getattr(spec, name)
        if value < 0:
            raise ValidationError(f"spec.{name}", f"must be >= 0 (0 means none), got {value}")
    if spec.end_at_ms and spec.end_at_ms < spec.start_at_ms:
        raise ValidationError("spec.end_at_ms", f"{spec.end_at_ms} is before start_at_ms "
                              f"{spec.start_at_ms}: the job would never fire")
    rejected = check_bounds(spec)  # the core's rules (apply checks the same)
    if rejected:
        field, _, rule = rejected.detail.partition(": ")
        raise ValidationError(field, rule)
    breaker = spec.circuit_breaker
    if breaker is not None and breaker.window_runs > limits.max_circuit_window_runs:
        raise ValidationError("spec.circuit_breaker.window_runs", f"{breaker.window_runs} "
                              f"exceeds the node's max_circuit_window_runs "
                              f"{limits.max_circuit_window_runs}")
    if not spec.jitter_ms:
        return
    if spec.jitter_ms > limits.max_jitter_ms:
        raise ValidationError("spec.jitter_ms", f"{spec.jitter_ms} exceeds the node's "
                              f"max_jitter_ms {limits.max_jitter_ms}")
    gap = shortest_gap_ms(spec.schedule, hash_id)
    if gap and spec.jitter_ms >= gap:
        raise ValidationError("spec.jitter_ms", f"{spec.jitter_ms} is not less than the "
                              f"schedule's shortest gap between slots ({gap} ms): a delayed "
                              "fire would run into the next slot")


def _check_overlap(spec: JobSpec, limits: InputLimits) -> None:
    rejected = check_overlap(spec)  # the core's rules (apply checks the same)
    if rejected:
        field, _, rule = rejected.detail.partition(": ")
        raise ValidationError(field, rule)
    if spec.max_active_runs is not None and spec.max_active_runs > limits.max_active_runs:
        raise ValidationError(
            "spec.max_active_runs",
            f"{spec.max_active_runs} exceeds the node's max_active_runs {limits.max_active_runs}",
        )
    if spec.max_buffered_runs > limits.max_buffered_runs:
        raise ValidationError(
            "spec.max_buffered_runs",
            f"{spec.max_buffered_runs} exceeds the node's max_buffered_runs "
            f"{limits.max_buffered_runs}",
        )


def merge_params(spec: JobSpec, params_json: str,
                 limits: InputLimits) -> tuple[bytes, tuple[TaskPayload, ...]]:
    """A manual run's parameters (a JSON object) merged into each task's payload (empty, or a
    JSON object whose keys the parameters override): (params, payloads) for TriggerJob."""
    if not params_json:
        return b"", ()
    size = len(params_json.encode())
    if size > limits.max_payload_bytes:
        raise ValidationError("params_json", f"{size} bytes exceeds max_payload_bytes "
                              f"{limits.max_payload_bytes}")
    try:
        params = json.loads(params_json)
    except ValueError as exc:
        raise ValidationError("params_json", f"not valid JSON: {exc}") from None
    if not isinstance(params, dict):
        raise ValidationError("params_json", f"must be a JSON object, got {type(params).__name__}")
    payloads = []
    for index, task in enumerate(spec.tasks):
        base: object = {}
        if task.payload:
            try:
                base = json.loads(task.payload)
            except ValueError:
                base = None
        if not isinstance(base, dict):
            raise ValidationError(
                "params_json", f"task {task.name!r} (spec.tasks[{index}]) has a payload that "
                "is not a JSON object: parameters cannot be merged into it")
        merged = json.dumps({**base, **params}, separators=(",", ":"), sort_keys=True,
                            ensure_ascii=False).encode()
        if len(merged) > limits.max_payload_bytes:
            raise ValidationError("params_json", f"task {task.name!r}: the merged payload, "
                                  f"{len(merged)} bytes, exceeds max_payload_bytes "
                                  f"{limits.max_payload_bytes}")
        payloads.append(TaskPayload(task.name, merged))
    canonical = json.dumps(params, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return canonical.encode(), tuple(payloads)


def validate_overlap_override(value: str) -> None:
    """A manual trigger's overlap policy: "" (the job's) or a known one."""
    if value and value not in OVERLAP_POLICIES:
        raise ValidationError(
            "overlap_policy", f"must be one of {', '.join(OVERLAP_POLICIES)}, got {_show(value)}"
        )


def validate_queue_ref(tenant: str, queue: str) -> tuple[str, str]:
    """A (tenant, queue) named by a queue-level call; tenant "" is the default one."""
    tenant = tenant or DEFAULT_TENANT
    if not _TENANT.fullmatch(tenant):
        raise ValidationError("tenant", f"must match [a-z0-9_-]{{1,64}}, got {_show(tenant)}")
    if not _QUEUE.fullmatch(queue):
        raise ValidationError("queue", f"must match [A-Za-z0-9_.-]{{1,64}}, got {_show(queue)}")
    return tenant, queue


def validate_breaker(breaker: CircuitBreaker, field: str, limits: InputLimits) -> None:
    """A breaker's rule: the core's ranges and the node's max_circuit_window_runs."""
    rejected = check_breaker(breaker, field)
    if rejected:
        at, _, rule = rejected.detail.partition(": ")
        raise ValidationError(at, rule)
    if breaker.window_runs > limits.max_circuit_window_runs:
        raise ValidationError(f"{field}.window_runs", f"{breaker.window_runs} exceeds the "
                              f"node's max_circuit_window_runs {limits.max_circuit_window_runs}")


# A backfill's to_ms this little after the node's now is taken as now (a client's "now" on a
# clock a little ahead); beyond it the range reaches into the schedule's future.
BACKFILL_CLOCK_SLACK_MS = 60_000


def validate_backfill_range(from_ms: int, to_ms: int, now_ms: int) -> int:
    """[from_ms, to_ms): from_ms >= 0, to_ms after it and not in the future; the end to use
    (to_ms, or now for one within BACKFILL_CLOCK_SLACK_MS after it)."""
    if from_ms < 0:
        raise ValidationError("from_ms", f"must be >= 0, got {from_ms}")
    if to_ms <= from_ms:
        raise ValidationError("to_ms", f"must be after from_ms ({from_ms}), got {to_ms}")
    if to_ms > now_ms + BACKFILL_CLOCK_SLACK_MS:
        raise ValidationError("to_ms", f"must not be after now ({now_ms}), got {to_ms}: "
                              "slots to come are the schedule's")
    end = min(to_ms, now_ms)
    if end <= from_ms:
        raise ValidationError("to_ms", f"from_ms {from_ms} is not before now ({now_ms})")
    return end


def validate_request_id(request_id: str) -> None:
    """At most 128 bytes of UTF-8, printable characters only; empty means no dedupe."""
    if not request_id.isprintable():
        raise ValidationError(
            "request_id", f"must be printable characters, got {_show(request_id)}"
        )
    size = len(request_id.encode("utf-8"))
    if size > MAX_REQUEST_ID_BYTES:
        raise ValidationError(
            "request_id", f"{size} bytes exceeds the maximum of {MAX_REQUEST_ID_BYTES}"
        )


def validate_id(field: str, value: str, *, required: bool = True) -> None:
    """An id the cluster assigned (job_id, run_id): at most 256 bytes; empty only if optional."""
    if not value:
        if required:
            raise ValidationError(field, "required")
        return
    size = len(value.encode("utf-8"))
    if size > MAX_ID_BYTES:
        raise ValidationError(field, f"{size} bytes exceeds the maximum of {MAX_ID_BYTES}")


def validate_worker_id(worker_id: str) -> None:
    """`[A-Za-z0-9_.:-]{1,128}`."""
    if not _WORKER_ID.fullmatch(worker_id):
        raise ValidationError(
            "worker_id", f"must match [A-Za-z0-9_.:-]{{1,128}}, got {_show(worker_id)}"
        )


def _check_tasks(tasks: tuple[TaskSpec, ...], limits: InputLimits) -> tuple[TaskSpec, ...]:
    if not tasks:
        raise ValidationError("spec.tasks", "at least one task is required")
    if len(tasks) > limits.max_tasks_per_job:
        raise ValidationError(
            "spec.tasks",
            f"{len(tasks)} tasks exceeds max_tasks_per_job {limits.max_tasks_per_job}",
        )
    for i, task in enumerate(tasks):
        _check_name(f"spec.tasks[{i}].name", task.name, limits.max_task_name_len)
    # The DAG's shape: the core's rules (apply checks the same), one message for both.
    rejected = check_dag(tasks)
    if rejected:
        field, _, rule = rejected.detail.partition(": ")
        raise ValidationError(field, rule)

    normalised = []
    for i, task in enumerate(tasks):
        at = f"spec.tasks[{i}]"
        queue = task.queue or DEFAULT_QUEUE
        if not _QUEUE.fullmatch(queue):
            raise ValidationError(
                f"{at}.queue", f"must match [A-Za-z0-9_.-]{{1,64}}, got {_show(queue)}"
            )
        if len(task.payload) > limits.max_payload_bytes:
            raise ValidationError(
                f"{at}.payload",
                f"{len(task.payload)} bytes exceeds max_payload_bytes {limits.max_payload_bytes}",
            )
        if task.timeout_ms < 0:
            raise ValidationError(
                f"{at}.timeout_ms", f"must be >= 0 (0 means no limit), got {task.timeout_ms}"
            )
        if task.timeout_ms > limits.max_timeout_ms:
            raise ValidationError(
                f"{at}.timeout_ms",
                f"{task.timeout_ms} exceeds max_timeout_ms {limits.max_timeout_ms}",
            )
        _check_retry(f"{at}.retry", task.retry, limits)
        normalised.append(task if task.queue == queue else replace(task, queue=queue))
    return tuple(normalised)


def _check_retry(at: str, retry: RetryPolicy, limits: InputLimits) -> None:
    if retry.max_attempts < 0:
        raise ValidationError(
            f"{at}.max_attempts",
            f"must be >= 0 (0 means the default {DEFAULT_MAX_ATTEMPTS}), got {retry.max_attempts}",
        )
    if retry.max_attempts > limits.max_attempts:
        raise ValidationError(
            f"{at}.max_attempts",
            f"{retry.max_attempts} exceeds max_attempts {limits.max_attempts}",
        )
    for name in ("initial_backoff_ms", "max_backoff_ms"):
        value = getattr(retry, name)
        if value < 0:
            raise ValidationError(
                f"{at}.{name}", f"must be >= 0 (0 means the default), got {value}"
            )
    # RetryPolicy lets negatives mean the default, but the proto contract is stricter: >= 1.
    multiplier = retry.multiplier
    if not math.isfinite(multiplier) or (multiplier != 0 and multiplier < 1):
        raise ValidationError(
            f"{at}.multiplier",
            f"must be >= 1 (0 means the default {DEFAULT_MULTIPLIER}), got {multiplier}",
        )
    # Written so that NaN fails too; negative means no jitter.
    if not retry.jitter <= 1:
        raise ValidationError(
            f"{at}.jitter",
            f"must be at most 1 (a fraction; negative means none), got {retry.jitter}",
        )


def _check_name(field: str, name: str, max_len: int) -> None:
    if not (1 <= len(name) <= max_len and _NAME_CHARS.fullmatch(name)):
        raise ValidationError(field, f"must match [A-Za-z0-9_.-]{{1,{max_len}}}, got {_show(name)}")
