"""Cancel reaches the SDK worker (issue 8 item 5), against real node processes: the real
``Worker`` runs a long task, ``cancel_run`` / ``delete_job(cancel_running=True)`` stop it.

Heartbeats are 5 s apart (lease TTL 20 s). Each test waits until a heartbeat of the task's
lease was just acknowledged, so the next acknowledgement is a whole interval away, then cancels:
the task must see the cancellation through the leader's Cancel push, with no heartbeat
acknowledgement in between. That is an ordering of events the worker observed, not a timing.
Before the node pushed Cancel, the worker learned it from the next heartbeat acknowledgement
(its ``revoked_tokens``), and these tests failed on that order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gnomon.client import (
    AsyncClient,
    AttemptOutcome,
    JobSpec,
    NotFound,
    OnceSchedule,
    RunState,
    TaskContext,
    TaskState,
    Worker,
    task,
)
from tests.support.cluster import module_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SLOW_HEARTBEATS = {"heartbeat_interval_ms": "5000", "lease_ttl_ms": "20000"}
FAR_FUTURE_MS = 4_102_444_800_000  # 2100-01-01: these jobs only run when triggered
WAIT_S = 60.0  # deadlines for conditions, not expectations of speed

Event = tuple[str, Any]


class RecordingWorker(Worker):
    """The SDK worker with a log of what it heard, in order: ``("heartbeat_ack", valid
    tokens)``, ``("cancel", token)``, ``("report_ack", (token, accepted))``, and what the test's tasks note (``note``). Everything
    but ``note`` from a task thread runs on the worker's event loop, so the order is real."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.events: list[Event] = []
        self._changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def note(self, kind: str, detail: Any = None) -> None:
        self.events.append((kind, detail))
        self._changed.set()

    def note_from_thread(self, kind: str, detail: Any = None) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self.note, kind, detail)

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        await super().run()

    def _on_heartbeat_ack(self, ack: Any) -> None:
        self.note("heartbeat_ack", frozenset(ack.valid_tokens))
        super()._on_heartbeat_ack(ack)

    def _on_report_ack(self, ack: Any) -> None:
        self.note("report_ack", (ack.lease.fencing_token, ack.accepted))
        super()._on_report_ack(ack)

    def _on_cancel(self, cancel: Any) -> None:
        self.note("cancel", cancel.lease.fencing_token)
        super()._on_cancel(cancel)

    async def until(self, predicate: Callable[[Event], bool], *, after: int, what: str) -> int:
        """The index of the first event from ``after`` on that satisfies ``predicate``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while True:
            for i in range(after, len(self.events)):
                if predicate(self.events[i]):
                    return i
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"timed out after {WAIT_S}s waiting for {what}; events: {self.events}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass


@pytest.fixture(scope="module")
def servers(tmp_path_factory, request) -> Iterator[str]:
    with module_cluster(tmp_path_factory.mktemp("sdk-cancel"), SLOW_HEARTBEATS, request=request) as cluster:
        yield cluster.servers


async def _job(client: AsyncClient, name: str) -> str:
    spec = JobSpec.single(name, OnceSchedule(FAR_FUTURE_MS), queue=name)
    return (await client.create_job(spec)).job_id


async def _just_heartbeated(worker: RecordingWorker, token: int) -> int:
    """Wait for a heartbeat acknowledgement that vouches for ``token``; the next one is a
    whole heartbeat interval away. Returns the index after it."""
    i = await worker.until(
        lambda e: e[0] == "heartbeat_ack" and token in e[1],
        after=0,
        what=f"a heartbeat ack for token {token}",
    )
    return i + 1


def _assert_cancel_was_pushed(events: list[Event], token: int, mark: int) -> None:
    after = events[mark:]
    assert ("cancel", token) in after, f"no Cancel pushed for token {token}: {after}"
    pushed = after.index(("cancel", token))
    seen = after.index(("task_cancelled", token))
    assert pushed < seen, after
    acks = [e for e in after[:seen] if e[0] == "heartbeat_ack"]
    assert acks == [], f"the task learned of the cancel only after a heartbeat: {after}"


async def test_cancel_run_reaches_the_running_task_through_a_push(servers):
    name = "sdk-cancel-run"
    started = asyncio.Event()
    contexts: list[TaskContext] = []

    @task(name="main", queue=name)
    async def long_running(ctx: TaskContext) -> str:
        contexts.append(ctx)
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            worker.note("task_cancelled", ctx.fencing_token)
            raise
        return "never"

    async with AsyncClient(servers, timeout_s=30) as client:
        job_id = await _job(client, name)
        worker = RecordingWorker(client, tasks=[long_running], max_concurrency=1)
        async with worker:
            run = await client.trigger_job(job_id)
            await asyncio.wait_for(started.wait(), WAIT_S)
            ctx = contexts[0]
            token = ctx.fencing_token
            mark = await _just_heartbeated(worker, token)
            cancelled = await client.cancel_run(run.run_id, reason="operator")
            assert cancelled.state is RunState.CANCELLED
            await worker.until(
                lambda e: e == ("task_cancelled", token), after=mark, what="the cancellation"
            )
            _assert_cancel_was_pushed(worker.events, token, mark)
            assert ctx.is_cancelled() and not ctx.lease_valid()
            # Nothing is reported for a cancelled lease.
            assert worker.stats.reports_accepted == worker.stats.reports_refused == 0

        final = await client.wait_run(run.run_id, timeout_s=WAIT_S, poll_interval_s=0.1)
    assert final.state is RunState.CANCELLED
    main = final.task("main")
    assert main.state is TaskState.CANCELLED
    assert main.last_attempt is not None
    assert main.last_attempt.outcome is AttemptOutcome.CANCELLED
    assert main.last_attempt.fencing_token == token
    assert main.last_attempt.worker_id == worker.worker_id


async def test_delete_job_cancel_running_reaches_a_sync_task(servers):
    name = "sdk-delete-running"
    contexts: list[TaskContext] = []

    @task(name="main", queue=name)
    def blocking(ctx: TaskContext) -> str:
        contexts.append(ctx)
        worker.note_from_thread("task_started", ctx.fencing_token)
        # A sync task cannot be interrupted: it waits on its context instead of sleeping.
        if ctx.wait_cancelled(300):
            worker.note_from_thread("task_cancelled", ctx.fencing_token)
        return "stopped"

    async with AsyncClient(servers, timeout_s=30) as client:
        job_id = await _job(client, name)
        worker = RecordingWorker(client, tasks=[blocking], max_concurrency=1)
        async with worker:
            run = await client.trigger_job(job_id)
            await worker.until(lambda e: e[0] == "task_started", after=0, what="the task")
            token = contexts[0].fencing_token
            mark = await _just_heartbeated(worker, token)
            await client.delete_job(job_id, cancel_running=True)
            await worker.until(
                lambda e: e == ("task_cancelled", token), after=mark, what="the cancellation"
            )
            _assert_cancel_was_pushed(worker.events, token, mark)
            assert not contexts[0].lease_valid()

        # The job is gone, its run is not: readable by run id and listed by job id.
        final = await client.wait_run(run.run_id, timeout_s=WAIT_S, poll_interval_s=0.1)
        assert final.state is RunState.CANCELLED
        assert final.task("main").state is TaskState.CANCELLED
        assert [r.run_id for r in await client.list_runs(job_id)] == [run.run_id]
        with pytest.raises(NotFound):
            await client.list_runs(name=name)


async def test_delete_job_without_cancel_running_lets_the_task_finish(servers):
    name = "sdk-delete-finishes"
    release = asyncio.Event()
    contexts: list[TaskContext] = []

    @task(name="main", queue=name)
    async def gated(ctx: TaskContext) -> str:
        contexts.append(ctx)
        worker.note("task_started", ctx.fencing_token)
        await release.wait()
        return "finished after the delete"

    async with AsyncClient(servers, timeout_s=30) as client:
        job_id = await _job(client, name)
        worker = RecordingWorker(client, tasks=[gated], max_concurrency=1)
        async with worker:
            run = await client.trigger_job(job_id)
            await worker.until(lambda e: e[0] == "task_started", after=0, what="the task")
            token = contexts[0].fencing_token
            await client.delete_job(job_id)
            mark = len(worker.events)
            # A Cancel would be pushed at once; the next heartbeat ack still vouches for the
            # lease, and nothing cancelled it before that.
            ack = await worker.until(
                lambda e: e[0] == "heartbeat_ack", after=mark, what="a heartbeat ack"
            )
            assert token in worker.events[ack][1]
            assert ("cancel", token) not in worker.events[mark:]
            assert contexts[0].lease_valid() and not contexts[0].is_cancelled()
            release.set()
            await worker.until(
                lambda e: e == ("report_ack", (token, True)), after=mark, what="the ReportAck"
            )
            assert worker.stats.reports_accepted == 1 and worker.stats.reports_refused == 0
            final = await client.wait_run(run.run_id, timeout_s=WAIT_S, poll_interval_s=0.1)

    assert final.state is RunState.SUCCEEDED
    assert final.task("main").result == b"finished after the delete"
