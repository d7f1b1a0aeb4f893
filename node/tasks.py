"""Background tasks of the loop thread: supervised, never fire-and-forget; retry pacing.

An exception that escapes a background task is a bug. asyncio would keep it in the task
object until it is garbage collected (and only then log "exception was never retrieved", if
ever), so a leader loop could die unseen. `Supervisor.spawn` keeps a reference to every task
it starts and logs an escaped exception with its traceback at once; a task marked `critical`
(a leader loop whose death would silently stop fires, dispatch or expiry) then stops the node
through `on_fatal`, so the cluster fails over instead of limping on.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)


class Supervisor:
    def __init__(self, on_fatal: Callable[[str], None]) -> None:
        self._on_fatal = on_fatal
        self._tasks: set[asyncio.Task] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str,
              critical: bool = False) -> asyncio.Task:
        """Start `coro`; an exception escaping it is logged (and, if critical, fatal)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._done(t, critical))
        return task

    def _done(self, task: asyncio.Task, critical: bool) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        log.error("background task %s failed", task.get_name(), exc_info=exc)
        if critical:
            self._on_fatal(f"leader loop {task.get_name()} failed: {exc!r}")

    def running(self) -> int:
        return len(self._tasks)

    async def cancel_all(self, timeout_s: float) -> None:
        """Cancel every task still running and wait for them, at most `timeout_s`."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=timeout_s)
            for task in pending:
                log.warning("background task %s did not stop within %.1fs",
                            task.get_name(), timeout_s)


async def run_steps(steps: list[tuple[str, Callable[[], Any]]], timeout_s: float) -> str | None:
    """Run named steps in order (a step returns an awaitable) within `timeout_s` in all;
    returns None when all finished, else the name of the step that was still running."""
    current = "start"
    try:
        async with asyncio.timeout(timeout_s):
            for name, step in steps:
                current = name
                await step()
    except TimeoutError:
        return current
    return None


class Backoff:
    """Exponential delays with full jitter: min(cap, base * 2**n) * U(0.5, 1)."""

    def __init__(self, base_ms: int, cap_ms: int, rng: random.Random) -> None:
        self._base_ms, self._cap_ms, self._rng = base_ms, cap_ms, rng
        self._failures = 0

    def failed(self) -> float:
        """Seconds to wait after one more failure in a row."""
        ceiling = min(self._cap_ms, self._base_ms * (1 << min(self._failures, 30)))
        self._failures += 1
        return ceiling * (0.5 + self._rng.random() / 2) / 1000

    def succeeded(self) -> None:
        self._failures = 0
