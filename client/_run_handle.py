"""What ``trigger_job`` returns: the run as created (every field of ``Run``) and a way to wait
for its end and its tasks' results."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from ._errors import RunFailed
from ._models import Run, RunState

if TYPE_CHECKING:
    from ._blocking_client import Client
    from ._client import AsyncClient

__all__ = ["AsyncRunHandle", "RunHandle"]

_RUN_FIELDS = tuple(f.name for f in fields(Run))


def run_fields(run: Run) -> dict[str, Any]:
    """The fields of ``run``, to build a handle of it."""
    return {name: getattr(run, name) for name in _RUN_FIELDS}


def results_of(run: Run) -> dict[str, bytes]:
    """The result of every task of a run that succeeded; RunFailed for any other end."""
    if run.state is not RunState.SUCCEEDED:
        raise RunFailed(run)
    return {t.task_name: t.result for t in run.tasks}


@dataclass(frozen=True, slots=True, eq=False)
class RunHandle(Run):
    """A run ``Client.trigger_job`` started: a ``Run`` (its fields as the run was created, so
    ``state`` is its state then) that can ``wait()`` for the run's end and give its
    ``result()``."""

    _client: Client | None = field(default=None, repr=False, compare=False)

    def wait(self, *, timeout_s: float = 60.0, poll_interval_s: float = 0.5) -> Run:
        """The run once it ended (polled every ``poll_interval_s``); DeadlineExceeded if it
        is still running after ``timeout_s``."""
        assert self._client is not None, "a RunHandle comes from Client.trigger_job"
        return self._client.wait_run(
            self.run_id, timeout_s=timeout_s, poll_interval_s=poll_interval_s
        )

    def result(self, *, timeout_s: float = 60.0, poll_interval_s: float = 0.5) -> dict[str, bytes]:
        """Wait for the run's end (as ``wait``) and return each task's result by task name;
        RunFailed (with the run as it ended) if it did not succeed."""
        return results_of(self.wait(timeout_s=timeout_s, poll_interval_s=poll_interval_s))


@dataclass(frozen=True, slots=True, eq=False)
class AsyncRunHandle(Run):
    """A run ``AsyncClient.trigger_job`` started: a ``Run`` (its fields as the run was
    created) that can ``await wait()`` for the run's end and ``await result()``."""

    _client: AsyncClient | None = field(default=None, repr=False, compare=False)

    async def wait(self, *, timeout_s: float = 60.0, poll_interval_s: float = 0.5) -> Run:
        """The run once it ended (polled every ``poll_interval_s``); DeadlineExceeded if it
        is still running after ``timeout_s``."""
        assert self._client is not None, "an AsyncRunHandle comes from AsyncClient.trigger_job"
        return await self._client.wait_run(
            self.run_id, timeout_s=timeout_s, poll_interval_s=poll_interval_s
        )

    async def result(
        self, *, timeout_s: float = 60.0, poll_interval_s: float = 0.5
    ) -> dict[str, bytes]:
        """Wait for the run's end (as ``wait``) and return each task's result by task name;
        RunFailed (with the run as it ended) if it did not succeed."""
        return results_of(await self.wait(timeout_s=timeout_s, poll_interval_s=poll_interval_s))
