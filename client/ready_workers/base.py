"""What the ready-made workers (``gnomon worker shell|http``) share: a catch-all task per
queue, a JSON-object payload with known keys, failures that are expected outcomes (their output
tail keeps what the command or server said, not a traceback), and the task's own fields, which
each worker hands on in its own shape (environment variables, HTTP headers, a JSON body)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .._errors import NonRetryableError
from ..worker.context import TaskContext
from ..worker.task import ANY_TASK, TaskDefinition

__all__ = [
    "BadPayload",
    "ExpectedFailure",
    "catch_all_task",
    "payload_object",
    "string_map",
    "task_fields",
]


class ExpectedFailure(Exception):
    """A failure that is an outcome of the task, not a bug of the worker: the worker reports
    it without adding a traceback to the output tail (see ``gnomon.client.worker.runner``)."""

    _gnomon_traceback_in_output = False


class BadPayload(ExpectedFailure, NonRetryableError):
    """The task's payload is not what the worker runs (retrying cannot help)."""


def catch_all_task(queue: str, fn: Callable[[TaskContext], Any]) -> TaskDefinition:
    """A definition that serves every task of ``queue`` (``ANY_TASK``)."""
    return TaskDefinition(name=ANY_TASK, queue=queue, fn=fn)


def payload_object(payload: bytes, *, keys: tuple[str, ...], example: str) -> dict[str, Any]:
    """The payload as a JSON object with no key outside ``keys``; BadPayload names what is
    wrong (``example`` shows the expected shape)."""
    try:
        data = json.loads(payload) if payload else None
    except ValueError as e:
        raise BadPayload(f"payload is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise BadPayload(f"payload must be a JSON object like {example}")
    unknown = sorted(set(data) - set(keys))
    if unknown:
        raise BadPayload(f"payload.{unknown[0]}: unknown key (expected {', '.join(keys)})")
    return data


def string_map(data: dict[str, Any], key: str) -> dict[str, str]:
    """``data[key]``, an object of string values (absent: empty)."""
    value = data.get(key) or {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise BadPayload(f"payload.{key}: expected an object of string values")
    return dict(value)


def task_fields(ctx: TaskContext) -> dict[str, str | int]:
    """What a ready-made worker tells the program it runs about the task, by field name."""
    return {
        "run_id": ctx.run_id,
        "job_id": ctx.job_id,
        "tenant": ctx.tenant,
        "task_name": ctx.task_name,
        "queue": ctx.queue,
        "attempt": ctx.attempt,
        "max_attempts": ctx.max_attempts,
        "scheduled_for_ms": ctx.scheduled_for_ms,
        "idempotency_key": ctx.idempotency_key,
        "fencing_token": ctx.fencing_token,
        "deadline_ms": ctx.deadline_ms,
        "worker_id": ctx.worker_id,
    }
