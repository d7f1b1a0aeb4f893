"""Backfill, the circuit breaker per queue and priority aging (issue 9) against real nodes.

Backfill: every slot of a range runs once (trigger backfill), paced by the leader, resumed
by a new leader after the old one is killed, never again by a second backfill; bad ranges
are refused naming the field. Queue breaker: failures on a queue open it, fires are
SKIPPED "circuit open: queue Q", its state and counters are in the API, CLI and metrics.
Aging: a low priority task that waited long enough goes before high priority ones that
became ready after it. Every wait is for a condition, with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from gnomon.client import (
    AsyncClient,
    CircuitBreaker,
    IntervalSchedule,
    InvalidArgument,
    JobSpec,
    NonRetryableError,
    OnceSchedule,
    RunState,
    RunTrigger,
    TaskContext,
    Worker,
    task,
)
from gnomon.node.local.cluster import LocalCluster
from tests.support.cluster import module_cluster
from tests.support.metrics import samples, scrape

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FAR_FUTURE_MS = 4_102_444_800_000
WAIT_S = 90.0  # deadlines for conditions, not expectations of speed
MIN = 60_000
OVERRIDES = {
    "backfill_slots_per_step": "2",
    "backfill_step_interval_ms": "300",
    "backfill_max_active_runs": "2",
    "backfill_max_slots": "50",
    "priority_aging_ms": "10",
    "lease_ttl_ms": "3000",
    "heartbeat_interval_ms": "500",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request) -> Iterator[LocalCluster]:
    with module_cluster(tmp_path_factory.mktemp("backfill"), OVERRIDES, request=request,
                        metrics=True) as c:
        yield c


async def _until(check, what: str, timeout_s: float = WAIT_S):
    """Poll the coroutine function `check` until it returns a truthy value."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, f"timed out: {what}"
        await asyncio.sleep(0.2)  # polling interval, not a synchronisation


def _range(slots: int) -> tuple[int, int]:
    """[from, to): the last `slots` whole minutes before now."""
    to_ms = int(time.time() * 1000) // MIN * MIN
    return to_ms - slots * MIN, to_ms


async def test_backfill_runs_each_slot_once_across_a_leader_kill(cluster):
    executed: Counter[int] = Counter()

    @task(name="main", queue="bf")
    async def main(ctx: TaskContext) -> str:
        executed[ctx.scheduled_for_ms] += 1
        return "ok"

    spec = JobSpec.single("bf", IntervalSchedule(interval_ms=MIN), queue="bf", paused=True)
    from_ms, to_ms = _range(20)
    async with AsyncClient(cluster.servers, timeout_s=30) as client:
        job_id = (await client.create_job(spec)).job_id
        async with Worker(client, tasks=[main], max_concurrency=4):
            job = await client.backfill_job(job_id, from_ms=from_ms, to_ms=to_ms)
            assert (job.backfill.status, job.backfill.total_slots) == ("running", 20)

            async def some_created():
                bf = (await client.get_job(job_id)).backfill
                return bf.created >= 4 and bf

            seen = await _until(some_created, "the first backfill runs")
            assert seen.created < 20, "pacing: the backfill was not done in one go"
            old = cluster.leader()
            cluster.kill(old.node_id)  # the new leader resumes from the replicated cursor
            job = await client.wait_backfill(job_id, timeout_s=WAIT_S)
            bf = job.backfill
            assert (bf.status, bf.created, bf.skipped) == ("done", 20, 0)
            runs = await client.list_runs(job_id, limit=200)

            async def all_ran():
                got = await client.list_runs(job_id, limit=200)
                return all(r.state is RunState.SUCCEEDED for r in got) and got

            runs = await _until(all_ran, "every backfilled run succeeds")
            slots = Counter(r.scheduled_for_ms for r in runs)
            assert len(runs) == 20 and set(slots.values()) == {1}  # one run per slot
            assert {r.trigger for r in runs} == {RunTrigger.BACKFILL}
            assert {r.run_id for r in runs} == {f"{job_id}@backfill-1-{s}" for s in slots}
            assert set(executed) == set(slots)  # at least once each
            # A second backfill of a wider range runs only the slots that did not run.
            await client.backfill_job(job_id, from_ms=from_ms - 2 * MIN, to_ms=to_ms)
            bf = (await client.wait_backfill(job_id, timeout_s=WAIT_S)).backfill
            assert (bf.created, bf.skipped, bf.total_slots) == (2, 20, 22)
        cluster.start_node(old.node_id)


async def test_bad_backfill_ranges_are_refused_naming_the_field(cluster):
    spec = JobSpec.single("bf-bad", IntervalSchedule(interval_ms=MIN), queue="bf", paused=True)
    from_ms, to_ms = _range(120)
    async with AsyncClient(cluster.servers, timeout_s=30) as client:
        job_id = (await client.create_job(spec)).job_id
        with pytest.raises(InvalidArgument, match=r"to_ms: .*backfill_max_slots 50"):
            await client.backfill_job(job_id, from_ms=from_ms, to_ms=to_ms)
        with pytest.raises(InvalidArgument, match="to_ms: must not be after now"):
            await client.backfill_job(job_id, from_ms=to_ms, to_ms=FAR_FUTURE_MS)
        with pytest.raises(InvalidArgument, match="to_ms: must be after from_ms"):
            await client.backfill_job(job_id, from_ms=to_ms, to_ms=to_ms)
        assert (await client.get_job(job_id)).backfill is None


def test_cli_backfill_watch_and_json(cluster):
    spec = JobSpec.single("bf-cli", IntervalSchedule(interval_ms=MIN), queue="bf-cli",
                          paused=True)
    from_ms, to_ms = _range(4)

    def gnomon(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "gnomon.client.cli", "-s", cluster.servers,
                               *argv], capture_output=True, text=True, timeout=120)

    async def create():
        async with AsyncClient(cluster.servers, timeout_s=30) as client:
            await client.create_job(spec)

    asyncio.run(create())
    # No worker serves bf-cli: the backfill's runs stay open, so it is paced at 2 at once.
    done = gnomon("job", "backfill", "bf-cli", "--from", str(from_ms), "--to", str(to_ms),
                  "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)["backfill"]
    assert (data["status"], data["total_slots"]) == ("running", 4)
    out = gnomon("job", "backfill", "bf-cli", "--cancel")
    assert out.returncode == 0 and "cancelled" in out.stdout, out.stderr
    out = gnomon("job", "backfill", "bf-cli", "--watch")
    assert out.returncode == 0 and "cancelled, " in out.stdout.splitlines()[-1]
    out = gnomon("job", "get", "bf-cli")
    assert "backfill" in out.stdout and "cancelled" in out.stdout


async def test_queue_breaker_opens_skips_resets_and_shows_in_metrics(cluster):
    @task(name="main", queue="qcb")
    async def main(ctx: TaskContext) -> str:
        raise NonRetryableError("downstream down")

    async with AsyncClient(cluster.servers, timeout_s=30) as client:
        qc = await client.set_queue_circuit("qcb", breaker=CircuitBreaker(2, 100, 60_000))
        assert (qc.tenant, qc.circuit.status) == ("default", "closed")
        await client.create_job(JobSpec.single(
            "guarded", OnceSchedule(at_ms=FAR_FUTURE_MS), queue="qcb", paused=True,
            circuit_breaker=CircuitBreaker(3, 100, 60_000)))
        job_id = (await client.create_job(JobSpec.single(
            "qcb-job", IntervalSchedule(interval_ms=300), queue="qcb"))).job_id
        async with Worker(client, tasks=[main], max_concurrency=2):
            async def held():
                runs = await client.list_runs(job_id, limit=100)
                return any(r.reason == "circuit open: queue qcb" for r in runs)

            await _until(held, "a fire SKIPPED by the open queue breaker")
            await client.pause_job(job_id)
        found = await client.list_queue_circuits(tenant="default")
        (qc,) = [q for q in found if q.queue == "qcb"]
        assert (qc.circuit.status, qc.circuit.opens) == ("open", 1)
        text = scrape(cluster.leader().metrics_addr)
        after = samples(text)
        if shutil.which("promtool"):  # the new families follow Prometheus' naming rules
            lint = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                                  capture_output=True, timeout=30)
            assert lint.returncode == 0 and not lint.stdout.strip(), (
                lint.stdout.decode() + lint.stderr.decode())
        assert after['gnomon_circuit_opens_total{scope="queue"}'] >= 1
        assert after['gnomon_circuit_skipped_fires_total{scope="queue"}'] >= 1
        assert after['gnomon_queue_circuit_state{queue="qcb",state="open",tenant="default"}'] == 1
        assert after['gnomon_job_circuits{state="closed"}'] >= 1
        qc = await client.reset_queue_circuit("qcb")
        assert (qc.circuit.status, qc.circuit.opens) == ("closed", 1)
        with pytest.raises(InvalidArgument, match="breaker.failure_percent"):
            await client.set_queue_circuit("qcb", breaker=CircuitBreaker(2, 0, 60_000))
        assert await client.set_queue_circuit("qcb", breaker=None) is None
        assert not [q for q in await client.list_queue_circuits() if q.queue == "qcb"]
        await client.delete_job(job_id)


async def test_an_aged_low_priority_task_goes_before_newer_high_ones(cluster):
    order: list[str] = []

    @task(name="main", queue="aging")
    async def main(ctx: TaskContext) -> str:
        order.append(ctx.run_id)
        return "ok"

    def spec(name: str, priority: int) -> JobSpec:
        return JobSpec.single(name, OnceSchedule(at_ms=FAR_FUTURE_MS), queue="aging",
                              priority=priority)

    async with AsyncClient(cluster.servers, timeout_s=30) as client:
        low = (await client.create_job(spec("aging-low", -100))).job_id
        high = (await client.create_job(spec("aging-high", 100))).job_id
        low_run = (await client.trigger_job(low)).run_id

        # 200 priority points are worth 2 s at priority_aging_ms 10: wait until the low
        # task has been ready for 3 s (cluster time), then make three high ones ready.
        async def aged():
            run = await client.get_run(low_run)
            return time.time() * 1000 - run.tasks[0].ready_ms > 3_000

        await _until(aged, "the low priority task ages")
        highs = [(await client.trigger_job(high)).run_id for _ in range(3)]
        async with Worker(client, tasks=[main], max_concurrency=1):
            async def all_done():
                return len(order) >= 4

            await _until(all_done, "the four tasks ran")
    assert order[0] == low_run, order  # strict priority alone would have run it last
    assert set(order[1:]) == set(highs)
