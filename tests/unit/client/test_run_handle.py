"""``trigger_job`` returns a run handle: the run as created (a ``Run``, so old callers keep
reading its fields) that waits for the run's end and gives its tasks' results."""

from __future__ import annotations

import asyncio

import pytest

from gnomon.client import (
    AsyncClient,
    AsyncRunHandle,
    Client,
    DeadlineExceeded,
    Run,
    RunFailed,
    RunHandle,
    RunState,
)
from gnomon.v1 import api_pb2, types_pb2
from tests.support.fakes import FakeNode


def _run(state: int, *results: tuple[str, bytes, str]) -> types_pb2.Run:
    tasks = [types_pb2.TaskInstance(task_name=n, result=r, last_error=e) for n, r, e in results]
    return types_pb2.Run(run_id="j1@manual-1", job_id="j1", state=state, tasks=tasks)


def scripted(*gets: types_pb2.Run) -> FakeNode:
    """TriggerJob answers a running run; each GetRun the next of ``gets`` (the last repeats)."""
    pending = list(gets)

    def respond(method: str, request: object) -> object:
        if method == "TriggerJob":
            return api_pb2.TriggerJobResponse(run=_run(types_pb2.RUN_STATE_RUNNING))
        return api_pb2.GetRunResponse(run=pending.pop(0) if len(pending) > 1 else pending[0])

    return FakeNode(respond=respond)


SUCCEEDED = _run(types_pb2.RUN_STATE_SUCCEEDED, ("extract", b"42", ""), ("load", b"ok", ""))
FAILED = _run(types_pb2.RUN_STATE_FAILED, ("extract", b"", "ConnectionError: db down"))
RUNNING = _run(types_pb2.RUN_STATE_RUNNING)


async def test_the_handle_is_the_run_as_created_and_waits_for_its_end(serve):
    addr = await serve(scripted(RUNNING, SUCCEEDED))
    async with AsyncClient(addr, timeout_s=5) as client:
        handle = await client.trigger_job("j1")
        assert isinstance(handle, AsyncRunHandle) and isinstance(handle, Run)
        assert (handle.run_id, handle.job_id, handle.state) == ("j1@manual-1", "j1", "running")
        assert not handle.done
        final = await handle.wait(timeout_s=5, poll_interval_s=0.01)
        assert final.state is RunState.SUCCEEDED and type(final) is Run
        assert handle.state is RunState.RUNNING  # the handle stays the run as created
        assert await handle.result(timeout_s=5) == {"extract": b"42", "load": b"ok"}


async def test_result_of_a_run_that_did_not_succeed_raises_with_the_run(serve):
    addr = await serve(scripted(FAILED))
    async with AsyncClient(addr, timeout_s=5) as client:
        handle = await client.trigger_job("j1")
        with pytest.raises(RunFailed) as failed:
            await handle.result(timeout_s=5, poll_interval_s=0.01)
    assert failed.value.run.state is RunState.FAILED
    assert (
        str(failed.value) == "run j1@manual-1 ended failed: task extract: ConnectionError: db down"
    )
    assert failed.value.code is None


async def test_wait_gives_up_at_its_deadline(serve):
    addr = await serve(scripted(RUNNING))
    async with AsyncClient(addr, timeout_s=5) as client:
        handle = await client.trigger_job("j1")
        # Still running at the deadline, or the last poll's own deadline: DeadlineExceeded.
        with pytest.raises(DeadlineExceeded):
            await handle.wait(timeout_s=0.3, poll_interval_s=0.01)


async def test_the_blocking_client_returns_a_blocking_handle(serve):
    addr = await serve(scripted(RUNNING, SUCCEEDED))

    def use() -> tuple[RunHandle, dict[str, bytes]]:
        with Client(addr, timeout_s=5) as client:
            handle = client.trigger_job("j1")
            return handle, handle.result(timeout_s=5, poll_interval_s=0.01)

    handle, results = await asyncio.to_thread(use)
    assert isinstance(handle, RunHandle) and handle.run_id == "j1@manual-1"
    assert results == {"extract": b"42", "load": b"ok"}
    assert "_client" not in repr(handle)
