"""``@task``: turns a function of one ``TaskContext`` into a ``TaskDefinition`` a Worker runs."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, overload

from .._specs import DEFAULT_QUEUE, RetryPolicy, TaskSpec, json_payload
from .context import TaskContext

__all__ = ["ANY_TASK", "TaskDefinition", "task"]

TaskFunction = Callable[[TaskContext], Any]

ANY_TASK = "*"
"""The task name of a catch-all definition: it serves every task of its queue that no other
definition of the worker names (the ready-made shell and HTTP workers use it)."""

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True, slots=True)
class TaskDefinition:
    """A task function and where it is served: the task ``name`` (as in the job's DAG) in
    ``queue``. Calling the definition calls the function."""

    name: str
    queue: str
    fn: TaskFunction

    def __post_init__(self) -> None:
        if self.name != ANY_TASK and not _NAME.fullmatch(self.name):
            raise ValueError(f"task name {self.name!r} must match [A-Za-z0-9_.-]{{1,64}}")
        if not self.queue:
            object.__setattr__(self, "queue", DEFAULT_QUEUE)
        if not callable(self.fn):
            raise TypeError("a task function must be callable")

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def __call__(self, ctx: TaskContext) -> Any:
        return self.fn(ctx)

    def spec(
        self,
        *,
        depends_on: Sequence[str] = (),
        payload: bytes | Mapping[str, Any] = b"",
        timeout_ms: int = 0,
        retry: RetryPolicy | None = None,
        timeout: timedelta | None = None,
    ) -> TaskSpec:
        """A ``TaskSpec`` naming this task and queue, for a ``JobSpec``'s DAG (``timeout``, a
        timedelta, may stand for ``timeout_ms``)."""
        return TaskSpec(
            name=self.name,
            queue=self.queue,
            depends_on=depends_on,
            payload=payload,
            timeout_ms=timeout_ms,
            retry=retry,
            timeout=timeout,
        )


@overload
def task(fn: TaskFunction, /) -> TaskDefinition: ...


@overload
def task(
    *, name: str | None = None, queue: str = DEFAULT_QUEUE
) -> Callable[[TaskFunction], TaskDefinition]: ...


def task(
    fn: TaskFunction | None = None, /, *, name: str | None = None, queue: str = DEFAULT_QUEUE
) -> TaskDefinition | Callable[[TaskFunction], TaskDefinition]:
    """Declare a task: ``@task`` or ``@task(name="send-report", queue="reports")``.

    The function takes one ``TaskContext`` (payload in ``ctx.payload`` / ``ctx.json()``) and may
    be sync (run in the worker's thread pool) or async. Its return value is the result:
    ``None`` -> empty, ``bytes`` as is, ``str`` as UTF-8, anything else as JSON. Raising
    ``NonRetryableError`` dead-letters the task; any other exception is retried. ``name``
    defaults to the function's name; ``name="*"`` serves every task of ``queue`` that no other
    task of the worker names.
    """

    def wrap(f: TaskFunction) -> TaskDefinition:
        return TaskDefinition(name=name or f.__name__, queue=queue, fn=f)

    return wrap(fn) if fn is not None else wrap


def encode_result(value: Any) -> bytes:
    """A task's return value as result bytes (see ``task``)."""
    if value is None:
        return b""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    try:
        return json_payload(value)
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"task result of type {type(value).__name__} is not bytes, str or JSON: {e}"
        ) from e
