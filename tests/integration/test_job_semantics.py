"""Job semantics (issue 9) against real node processes.

Overlap policies: the decision is made in apply when a fire is committed, so what the SDK
sees is what every replica recorded. The SDK worker runs tasks that wait for the test to
release them; every wait is for a condition, with a deadline. Cron dialects and
PreviewSchedule: a 6-field expression needs a dialect, and a preview shows UTC and local
instants with DST notes, through the SDK and the CLI.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from gnomon.client import (
    AsyncClient,
    CircuitBreaker,
    Client,
    CronDialect,
    CronSchedule,
    DstAmbiguous,
    DstNonexistent,
    IntervalSchedule,
    InvalidArgument,
    JobSpec,
    NonRetryableError,
    NotFound,
    OnceSchedule,
    OverlapPolicy,
    RunState,
    TaskContext,
    TaskSpec,
    TaskState,
    Worker,
    task,
)
from gnomon.node.local.cluster import wait_for_async
from tests.support.cluster import module_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

FAR_FUTURE_MS = 4_102_444_800_000  # 2100-01-01: these jobs only run when triggered
WAIT_S = 60.0  # deadlines for conditions, not expectations of speed


@pytest.fixture(scope="module")
def servers(tmp_path_factory, request) -> Iterator[str]:
    with module_cluster(tmp_path_factory.mktemp("job-semantics"), request=request) as cluster:
        yield cluster.servers


class Gate:
    """Tasks that start, note it, and wait until released (or cancelled)."""

    def __init__(self, queue: str) -> None:
        self.started: list[str] = []
        self.cancelled: list[str] = []
        self.release = asyncio.Event()

        @task(name="main", queue=queue)
        async def main(ctx: TaskContext) -> str:
            self.started.append(ctx.run_id)
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled.append(ctx.run_id)
                raise
            return "ok"

        self.task = main


async def _state(client: AsyncClient, run_id: str) -> RunState:
    return (await client.get_run(run_id)).state


async def test_skip_then_a_per_call_buffer_then_allow_all(servers):
    name = "overlap-skip"
    gate = Gate(name)
    async with AsyncClient(servers, timeout_s=30) as client:
        spec = JobSpec.single(name, OnceSchedule(FAR_FUTURE_MS), queue=name,
                              overlap_policy=OverlapPolicy.SKIP)
        job_id = (await client.create_job(spec)).job_id
        async with Worker(client, tasks=[gate.task], max_concurrency=4):
            first = await client.trigger_job(job_id)
            await wait_for_async(lambda: gate.started == [first.run_id], timeout_s=WAIT_S, interval_s=0.01,
                                 what="the first run's task")
            skipped = await client.trigger_job(job_id)
            assert (skipped.state, skipped.reason) == (RunState.SKIPPED, "overlap")
            queued = await client.trigger_job(job_id, overlap_policy="buffer_one")
            assert queued.state is RunState.QUEUED
            assert queued.reason == "overlap: waiting for 1 active run"
            extra = await client.trigger_job(job_id, overlap_policy=OverlapPolicy.ALLOW_ALL)
            assert extra.state is RunState.RUNNING
            await wait_for_async(lambda: len(gate.started) == 2, timeout_s=WAIT_S, interval_s=0.01,
                                 what="the allowed run's task")
            assert queued.run_id not in gate.started  # two run, still over the bound of 1
            gate.release.set()
            for run in (first, extra):
                done = await client.wait_run(run.run_id, timeout_s=WAIT_S, poll_interval_s=0.1)
                assert done.state is RunState.SUCCEEDED
            # Both ended: the buffered one started and, released, succeeded.
            done = await client.wait_run(queued.run_id, timeout_s=WAIT_S, poll_interval_s=0.1)
            assert done.state is RunState.SUCCEEDED and done.reason == ""
            assert gate.started[2] == queued.run_id
        runs = await client.list_runs(job_id)
        assert sorted(r.state.value for r in runs) == [
            "skipped", "succeeded", "succeeded", "succeeded"]


async def test_terminate_other_cancels_the_running_task_at_once(servers):
    name = "overlap-terminate"
    gate = Gate(name)
    async with AsyncClient(servers, timeout_s=30) as client:
        spec = JobSpec.single(name, OnceSchedule(FAR_FUTURE_MS), queue=name,
                              overlap_policy=OverlapPolicy.TERMINATE_OTHER)
        job_id = (await client.create_job(spec)).job_id
        async with Worker(client, tasks=[gate.task], max_concurrency=2):
            first = await client.trigger_job(job_id)
            await wait_for_async(lambda: gate.started == [first.run_id], timeout_s=WAIT_S, interval_s=0.01,
                                 what="the first run's task")
            second = await client.trigger_job(job_id)
            assert second.state is RunState.RUNNING
            old = await client.get_run(first.run_id)
            assert old.state is RunState.CANCELLED
            assert old.reason == f"overlap: terminated for {second.run_id}"
            # The worker was told through the Cancel push; its task stopped.
            await wait_for_async(lambda: gate.cancelled == [first.run_id], timeout_s=WAIT_S, interval_s=0.01,
                                 what="the first task's cancellation")
            await wait_for_async(lambda: len(gate.started) == 2, timeout_s=WAIT_S, interval_s=0.01,
                                 what="the second run's task")
            gate.release.set()
            done = await client.wait_run(second.run_id, timeout_s=WAIT_S, poll_interval_s=0.1)
            assert done.state is RunState.SUCCEEDED


async def test_scheduled_fires_skip_while_a_run_is_active(servers):
    name = "overlap-scheduled"
    gate = Gate(name)
    async with AsyncClient(servers, timeout_s=30) as client:
        spec = JobSpec.single(name, IntervalSchedule(interval_ms=300), queue=name,
                              overlap_policy=OverlapPolicy.SKIP)
        job_id = (await client.create_job(spec)).job_id
        async with Worker(client, tasks=[gate.task], max_concurrency=4):
            async def skips() -> int:
                runs = await client.list_runs(job_id)
                return sum(r.state is RunState.SKIPPED and r.reason == "overlap" for r in runs)

            deadline = asyncio.get_running_loop().time() + WAIT_S
            while await skips() < 3:
                assert asyncio.get_running_loop().time() < deadline, "no overlap skips"
                await asyncio.sleep(0.2)  # polling interval, not a synchronisation
            runs = await client.list_runs(job_id)
            assert sum(r.state is RunState.RUNNING for r in runs) == 1
            assert len(gate.started) == 1
            await client.pause_job(job_id)
            gate.release.set()


async def test_bad_overlap_fields_are_refused_naming_the_field(servers):
    async with AsyncClient(servers, timeout_s=30) as client:
        cases = [
            ({"overlap_policy": "skip", "max_active_runs": 0}, "spec.max_active_runs: must be >= 1"),
            ({"max_active_runs": 2}, "spec.max_active_runs: ALLOW_ALL starts every fire"),
            ({"overlap_policy": "buffer_one", "max_buffered_runs": 3},
             "spec.max_buffered_runs: applies to overlap policy buffer_all only"),
            ({"overlap_policy": "buffer_all", "max_buffered_runs": 10**6},
             "spec.max_buffered_runs: 1000000 exceeds the node's max_buffered_runs 1000"),
        ]
        for i, (fields, message) in enumerate(cases):
            spec = JobSpec.single(f"bad-overlap-{i}", OnceSchedule(FAR_FUTURE_MS), **fields)
            with pytest.raises(InvalidArgument, match=message.replace("(", r"\(")):
                await client.create_job(spec)


def test_six_fields_need_a_dialect_and_a_preview_shows_dst(servers):
    with Client(servers, timeout_s=30) as client:
        ambiguous = JobSpec.single("dialect-missing", CronSchedule("*/10 * * * * *"))
        with pytest.raises(InvalidArgument, match=r"spec\.schedule\.cron\.dialect: the 6-field "
                           r"expression .* needs a dialect.*seconds last \(croniter\): next.*"
                           r"seconds first \(Quartz, Spring, Dkron\): next"):
            client.create_job(ambiguous)
        quartz = CronSchedule("*/10 * * * * *", dialect=CronDialect.SECONDS_FIRST)
        job = client.create_job(JobSpec.single("dialect-quartz", quartz, paused=True))
        assert client.get_job(job.job_id).spec.schedule == quartz
        preview = client.preview_schedule(job.job_id, count=3, after=1_767_225_600_000)
        assert [f.utc for f in preview.fires] == [
            "2026-01-01T00:00:10Z", "2026-01-01T00:00:20Z", "2026-01-01T00:00:30Z"]
        assert preview.reading == ("*/10 * * * * * (seconds first (Quartz, Spring, Dkron): "
                                   "second minute hour day-of-month month day-of-week)")
        # A schedule that is not a job's: Berlin's spring-forward gap, 2026-03-29.
        berlin = CronSchedule("30 2 * * *", "Europe/Berlin")
        preview = client.preview_schedule(schedule=berlin, count=2, after=1_774_656_000_000)
        assert [f.local for f in preview.fires] == [
            "2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00"]
        assert preview.fires[0].dst_note == ""
        assert "does not exist on 2026-03-29 (DST starts)" in preview.fires[1].dst_note
        with pytest.raises(InvalidArgument, match="count: must be in 1..100"):
            client.preview_schedule(schedule=berlin, count=101)
        with pytest.raises(InvalidArgument, match="uses H"):
            client.preview_schedule(schedule=CronSchedule("H 3 * * *"))
        hashed = client.preview_schedule(schedule=CronSchedule("H 3 * * *"), name="etl", count=1)
        assert hashed.fires[0].utc.endswith("Z")


def test_cli_create_prints_next_fires_and_preview(servers):
    import subprocess
    import sys

    def gnomon(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "gnomon.client.cli", "--server", servers,
                               *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    out = gnomon("job", "create", "--name", "preview-cli", "--cron", "30 1 * * *", "--tz",
                 "America/New_York")
    assert "next fires:" in out and "LOCAL (America/New_York)" in out
    out = gnomon("job", "preview", "preview-cli", "--count", "2", "--after",
                 "2026-11-01T00:00:00Z")
    assert "first occurrence (EDT" in out and "second occurrence (EST" in out


def test_dst_policies_decide_which_local_times_fire(servers):
    """The trigger loop and PreviewSchedule evaluate the same function on the leader; a
    preview across real transitions shows what the job will fire."""
    with Client(servers, timeout_s=30) as client:
        berlin = CronSchedule("30 2 * * *", "Europe/Berlin",
                              dst_nonexistent=DstNonexistent.SKIP,
                              dst_ambiguous=DstAmbiguous.FIRST)
        job = client.create_job(JobSpec.single("dst-berlin", berlin, paused=True))
        assert client.get_job(job.job_id).spec.schedule == berlin
        spring = client.preview_schedule(job.job_id, count=2, after=1_774_656_000_000)
        assert [f.local for f in spring.fires] == [  # 2026-03-29 is left out
            "2026-03-28T02:30:00+01:00", "2026-03-30T02:30:00+02:00"]
        autumn = client.preview_schedule(job.job_id, count=2, after=1_792_843_200_000)
        assert [f.local for f in autumn.fires] == [  # 2026-10-25: the first 02:30 only
            "2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]
        lord_howe = CronSchedule("*/15 1 * * *", "Australia/Lord_Howe",
                                 dst_ambiguous=DstAmbiguous.LAST)
        out = client.preview_schedule(schedule=lord_howe, count=3, after=1_775_311_800_000)
        assert [f.local for f in out.fires] == [
            "2026-04-05T01:15:00+11:00", "2026-04-05T01:30:00+10:30", "2026-04-05T01:45:00+10:30"]


async def test_jitter_bounds_and_delete_after_success(servers):
    name = "bounds"

    @task(name="main", queue=name)
    async def main(ctx: TaskContext) -> str:
        return "done"

    async with AsyncClient(servers, timeout_s=30) as client:
        jittered = (await client.create_job(JobSpec.single(
            "jittered", IntervalSchedule(interval_ms=1_000), queue="nobody", jitter_ms=400,
            max_runs=4))).job_id

        async def four_runs() -> bool:
            return (await client.get_job(jittered)).next_fire_ms == 0

        deadline = asyncio.get_running_loop().time() + WAIT_S
        while not await four_runs():
            assert asyncio.get_running_loop().time() < deadline, "max_runs never reached"
            await asyncio.sleep(0.2)  # polling interval, not a synchronisation
        job = await client.get_job(jittered)
        runs = await client.list_runs(jittered)
        assert job.runs_started == 4 and len(runs) == 4
        assert all(0 <= r.fire_delay_ms <= 400 for r in runs)
        assert all(r.created_ms >= r.scheduled_for_ms + r.fire_delay_ms for r in runs)

        once = OnceSchedule(at_ms=1_000)  # in the past: fires as soon as possible
        async with Worker(client, tasks=[main], max_concurrency=1):
            doomed = (await client.create_job(JobSpec.single(
                "one-shot", once, queue=name, delete_after_success=True))).job_id
            run_id = f"{doomed}@1000"
            done = await client.wait_run(run_id, timeout_s=WAIT_S, poll_interval_s=0.1)
            assert done.state is RunState.SUCCEEDED
        with pytest.raises(NotFound):
            await client.get_job(doomed)
        assert (await client.get_run(run_id)).state is RunState.SUCCEEDED  # in the history


async def test_trigger_with_parameters_reaches_the_task(servers):
    name = "params"
    seen: list[dict] = []

    @task(name="main", queue=name)
    async def main(ctx: TaskContext) -> str:
        seen.append(ctx.json())
        return "ok"

    async with AsyncClient(servers, timeout_s=30) as client:
        spec = JobSpec.single(name, OnceSchedule(FAR_FUTURE_MS), queue=name,
                              payload={"table": "users", "day": "sun"})
        job_id = (await client.create_job(spec)).job_id
        async with Worker(client, tasks=[main], max_concurrency=1):
            handle = await client.trigger_job(job_id, params={"day": "mon", "limit": 3})
            done = await handle.wait(timeout_s=WAIT_S)
        assert done.state is RunState.SUCCEEDED
        assert seen == [{"table": "users", "day": "mon", "limit": 3}]
        assert done.params == b'{"day":"mon","limit":3}'
        raw = (await client.create_job(JobSpec.single(
            "params-raw", OnceSchedule(FAR_FUTURE_MS), queue=name, payload=b"echo hi"))).job_id
        with pytest.raises(InvalidArgument, match="params_json: task 'main'"):
            await client.trigger_job(raw, params={"day": "mon"})


async def test_rerun_a_failed_run_and_cancel_or_retry_one_task(servers):
    name = "rerun"
    calls: list[str] = []
    gate = asyncio.Event()

    @task(name="flaky", queue=name)
    async def flaky(ctx: TaskContext) -> str:
        calls.append(ctx.run_id)
        if len(calls) == 1:
            raise NonRetryableError("first time fails for good")
        return "ok"

    @task(name="slow", queue=name)
    async def slow(ctx: TaskContext) -> str:
        await gate.wait()
        return "ok"

    @task(name="after", queue=name)
    async def after(ctx: TaskContext) -> str:
        return "ok"

    async with AsyncClient(servers, timeout_s=30) as client:
        job_id = (await client.create_job(JobSpec(
            name=name, schedule=OnceSchedule(FAR_FUTURE_MS),
            tasks=[TaskSpec("flaky", queue=name), TaskSpec("slow", queue=name),
                   TaskSpec("after", queue=name, depends_on=["slow"])]))).job_id
        async with Worker(client, tasks=[flaky, slow, after], max_concurrency=4):
            run_id = (await client.trigger_job(job_id)).run_id

            async def state_of(task_name: str) -> TaskState:
                return (await client.get_run(run_id)).task(task_name).state

            deadline = asyncio.get_running_loop().time() + WAIT_S
            while await state_of("slow") is not TaskState.LEASED:
                assert asyncio.get_running_loop().time() < deadline, "slow never leased"
                await asyncio.sleep(0.1)  # polling interval, not a synchronisation
            cancelled = await client.cancel_task(run_id, task_name="slow", reason="not needed")
            assert cancelled.task("slow").state is TaskState.CANCELLED
            assert cancelled.task("after").state is TaskState.UPSTREAM_FAILED
            ended = await client.wait_run(run_id, timeout_s=WAIT_S, poll_interval_s=0.1)
            assert ended.state is RunState.CANCELLED
            assert ended.task("flaky").state is TaskState.DEAD
            # Retry the dead task alone: it succeeds, the cancelled one stays cancelled.
            retried = await client.retry_task(run_id, task_name="flaky")
            assert retried.state is RunState.RUNNING
            ended = await retried.wait(timeout_s=WAIT_S, poll_interval_s=0.1)
            assert ended.task("flaky").state is TaskState.SUCCEEDED
            assert ended.state is RunState.CANCELLED
            # Re-run the run: the cancelled task and the one it blocked run, flaky is kept.
            gate.set()
            handle = await client.rerun_run(run_id)
            assert handle.run_id == run_id
            done = await handle.wait(timeout_s=WAIT_S, poll_interval_s=0.1)
            assert done.state is RunState.SUCCEEDED
            assert [t.state for t in done.tasks] == [TaskState.SUCCEEDED] * 3
            assert len(done.task("flaky").attempts) == 2 and calls == [run_id, run_id]


async def test_circuit_breaker_opens_holds_probes_and_resets(servers):
    name = "breaker"

    @task(name="main", queue=name)
    async def main(ctx: TaskContext) -> str:
        raise NonRetryableError("always down")

    async with AsyncClient(servers, timeout_s=30) as client:
        spec = JobSpec.single(name, IntervalSchedule(interval_ms=300), queue=name,
                              circuit_breaker=CircuitBreaker(2, 100, 1_500))
        job_id = (await client.create_job(spec)).job_id
        async with Worker(client, tasks=[main], max_concurrency=2):
            deadline = asyncio.get_running_loop().time() + WAIT_S
            while (await client.get_job(job_id)).circuit.opens < 2:  # opened, probed, reopened
                assert asyncio.get_running_loop().time() < deadline, "the breaker never reopened"
                await asyncio.sleep(0.2)  # polling interval, not a synchronisation
            await client.pause_job(job_id)
        runs = await client.list_runs(job_id, limit=200)
        reasons = {r.reason for r in runs if r.state is RunState.SKIPPED}
        assert "circuit open" in reasons
        assert sum(r.state is RunState.FAILED for r in runs) >= 3  # 2 to open + the probe
        job = await client.reset_circuit(job_id)
        assert (job.circuit.status, job.circuit.opens) == ("closed", 2)
