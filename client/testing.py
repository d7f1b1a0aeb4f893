"""Run task functions without a cluster, for unit tests of your tasks.

    from gnomon.client.testing import run_task

    assert run_task(send_report, payload={"day": "2024-01-01"}) == {"sent": 3}

``run_task`` calls the function with a fabricated ``TaskContext`` and returns what it returned
(unencoded); exceptions propagate, so ``pytest.raises(NonRetryableError)`` works.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ._specs import DEFAULT_QUEUE, DEFAULT_TENANT, json_payload
from .worker.context import (
    DEFAULT_OUTPUT_TAIL_BYTES,
    LeaseState,
    OutputTail,
    TaskContext,
    TraceParent,
)
from .worker.task import TaskDefinition

__all__ = ["make_context", "run_task", "run_task_async"]


def make_context(
    definition: TaskDefinition | None = None,
    *,
    payload: Any = b"",
    attempt: int = 1,
    max_attempts: int = 3,
    run_id: str = "job@0",
    task_name: str | None = None,
    queue: str | None = None,
    tenant: str = DEFAULT_TENANT,
    fencing_token: int = 1,
    deadline_ms: int = 0,
    worker_id: str = "test-worker",
    lease_valid: bool = True,
    cancelled: bool = False,
    traceparent: str = "",
) -> TaskContext:
    """A ``TaskContext`` as a worker would build it. ``payload`` is bytes or a JSON value;
    ``job_id`` and ``scheduled_for_ms`` are read from ``run_id`` ("<job_id>@<ms>");
    ``traceparent`` is what a tracing cluster would hand on (``TaskContext.traceparent``)."""
    name = task_name or (definition.name if definition else "main")
    job_id, _, slot = run_id.partition("@")
    lease = LeaseState()
    if not lease_valid:
        lease.fence()
    if cancelled:
        lease.cancelled.set()
    return TaskContext(
        run_id=run_id,
        job_id=job_id,
        tenant=tenant,
        task_name=name,
        queue=queue or (definition.queue if definition else DEFAULT_QUEUE),
        attempt=attempt,
        max_attempts=max_attempts,
        scheduled_for_ms=int(slot) if slot.isdigit() else 0,
        idempotency_key=f"{run_id}:{name}",
        fencing_token=fencing_token,
        deadline_ms=deadline_ms,
        _trace=TraceParent(traceparent),
        payload=payload if isinstance(payload, bytes) else json_payload(payload),
        worker_id=worker_id,
        _lease=lease,
        _output=OutputTail(DEFAULT_OUTPUT_TAIL_BYTES),
    )


def _as_definition(task: TaskDefinition | Callable[[TaskContext], Any]) -> TaskDefinition:
    if isinstance(task, TaskDefinition):
        return task
    name = getattr(task, "__name__", "")
    return TaskDefinition(
        name=name if name.isidentifier() else "main", queue=DEFAULT_QUEUE, fn=task
    )


def run_task(
    task: TaskDefinition | Callable[[TaskContext], Any],
    *,
    payload: Any = b"",
    attempt: int = 1,
    max_attempts: int = 3,
    run_id: str = "job@0",
    task_name: str | None = None,
    queue: str | None = None,
    tenant: str = DEFAULT_TENANT,
    fencing_token: int = 1,
    deadline_ms: int = 0,
    lease_valid: bool = True,
    cancelled: bool = False,
) -> Any:
    """Run a sync or async task once and return its result; options as for ``make_context``.
    Inside a running event loop, use ``await run_task_async(...)``."""
    definition = _as_definition(task)
    ctx = make_context(
        definition,
        payload=payload,
        attempt=attempt,
        max_attempts=max_attempts,
        run_id=run_id,
        task_name=task_name,
        queue=queue,
        tenant=tenant,
        fencing_token=fencing_token,
        deadline_ms=deadline_ms,
        lease_valid=lease_valid,
        cancelled=cancelled,
    )
    if not definition.is_async:
        return definition.fn(ctx)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(definition.fn(ctx))
    raise RuntimeError("run_task cannot run an async task inside an event loop: use run_task_async")


async def run_task_async(
    task: TaskDefinition | Callable[[TaskContext], Any],
    *,
    payload: Any = b"",
    attempt: int = 1,
    max_attempts: int = 3,
    run_id: str = "job@0",
    task_name: str | None = None,
    queue: str | None = None,
    tenant: str = DEFAULT_TENANT,
    fencing_token: int = 1,
    deadline_ms: int = 0,
    lease_valid: bool = True,
    cancelled: bool = False,
) -> Any:
    """Like ``run_task``, from async code; a sync task runs in a thread."""
    definition = _as_definition(task)
    ctx = make_context(
        definition,
        payload=payload,
        attempt=attempt,
        max_attempts=max_attempts,
        run_id=run_id,
        task_name=task_name,
        queue=queue,
        tenant=tenant,
        fencing_token=fencing_token,
        deadline_ms=deadline_ms,
        lease_valid=lease_valid,
        cancelled=cancelled,
    )
    if definition.is_async:
        return await definition.fn(ctx)
    return await asyncio.to_thread(definition.fn, ctx)
