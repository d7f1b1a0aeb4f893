"""What the SDK worker reports is what the cluster records and answers (issue 8 items 6 and
8), against real node processes: attempt records with the output tail, exit code and duration
the real ``Worker`` sent, and a Complete the cluster turned into a failure surfaced to the
application instead of "all is well" (and not sent again)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from gnomon.client import (
    AsyncClient,
    AttemptOutcome,
    JobSpec,
    OnceSchedule,
    ReportRefusal,
    RetryPolicy,
    RunState,
    TaskContext,
    TaskState,
    Worker,
    task,
)
from tests.support.cluster import module_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

LIMITS = {"max_result_bytes": "100", "max_output_tail_bytes": "64"}
FAR_FUTURE_MS = 4_102_444_800_000
WAIT_S = 60.0
FAST_RETRY = RetryPolicy(max_attempts=2, initial_backoff_ms=100, max_backoff_ms=200, jitter=-1)


@pytest.fixture(scope="module")
def servers(tmp_path_factory, request) -> Iterator[str]:
    with module_cluster(tmp_path_factory.mktemp("sdk-reports"), LIMITS, request=request) as cluster:
        yield cluster.servers


async def _trigger(client: AsyncClient, name: str, **task_options) -> str:
    spec = JobSpec.single(name, OnceSchedule(FAR_FUTURE_MS), queue=name, **task_options)
    job = await client.create_job(spec)
    return (await client.trigger_job(job.job_id)).run_id


async def test_attempt_records_hold_what_the_worker_reported(servers):
    name = "sdk-attempts"

    @task(name="main", queue=name)
    async def flaky(ctx: TaskContext) -> str:
        ctx.write(f"attempt {ctx.attempt} starting\n")
        await asyncio.sleep(0.05)  # the work (not a synchronisation): a measurable duration
        if ctx.attempt == 1:
            ctx.set_exit_code(7)
            raise RuntimeError("first attempt fails")
        ctx.write("x" * 100 + "\nthe end\n")  # more than max_output_tail_bytes (64)
        return "ok"

    async with AsyncClient(servers, timeout_s=30) as client:
        async with Worker(client, tasks=[flaky], max_concurrency=1) as worker:
            run_id = await _trigger(client, name, retry=FAST_RETRY)
            run = await client.wait_run(run_id, timeout_s=WAIT_S, poll_interval_s=0.1)
    assert run.state is RunState.SUCCEEDED
    main = run.task("main")
    first, second = main.attempts
    assert (first.attempt, first.outcome, first.exit_code) == (1, AttemptOutcome.FAILED, 7)
    assert first.error == "RuntimeError: first attempt fails"
    # The task's output, then the traceback the worker added; the node kept the newest 64 bytes.
    assert first.output_tail.endswith("RuntimeError: first attempt fails\n")
    assert (second.attempt, second.outcome, second.exit_code) == (2, AttemptOutcome.SUCCEEDED, None)
    # The node keeps the newest max_output_tail_bytes of what the worker sent.
    assert second.output_tail.endswith("x\nthe end\n") and len(second.output_tail) == 64
    assert main.output_tail == second.output_tail
    for a in (first, second):
        assert a.worker_id == worker.worker_id
        assert a.duration_ms >= 50  # the worker measured at least the task's own sleep
        assert a.finished_ms >= a.started_ms > 0
    assert second.fencing_token > first.fencing_token > 0
    assert second.fencing_token == main.fencing_token
    assert worker.stats.reports_accepted == 2 and worker.stats.reports_refused == 0


async def test_a_complete_turned_into_a_failure_is_surfaced_and_not_resent(servers):
    name = "sdk-too-big"
    refusals: list[ReportRefusal] = []
    told = asyncio.Event()

    def on_refused(refusal: ReportRefusal) -> None:
        refusals.append(refusal)
        told.set()

    @task(name="main", queue=name)
    async def too_big(ctx: TaskContext) -> bytes:
        return b"x" * 1000  # under the worker's own limit, over the cluster's (100 bytes)

    async with AsyncClient(servers, timeout_s=30) as client:
        worker = Worker(client, tasks=[too_big], max_concurrency=1, on_report_refused=on_refused)
        async with worker:
            run_id = await _trigger(client, name)
            await asyncio.wait_for(told.wait(), WAIT_S)
            run = await client.wait_run(run_id, timeout_s=WAIT_S, poll_interval_s=0.1)
            stats = worker.stats
        dead = await client.list_dead_letters()
    (refusal,) = refusals
    assert refusal.final and refusal.kind == "complete"
    assert (refusal.run_id, refusal.task_name) == (run_id, "main")
    assert "max_result_bytes" in refusal.detail
    assert stats.reports_refused == 1
    assert stats.reports_resent == 0 and stats.reports_accepted == 0
    assert run.state is RunState.FAILED and run.task("main").state is TaskState.DEAD
    assert run.task("main").attempts[-1].outcome is AttemptOutcome.FAILED
    assert (run_id, "main") in [(d.run_id, d.task_name) for d in dead]
