"""The client SDK and the worker SDK against real nodes, across a leader kill."""

from __future__ import annotations

import asyncio
import signal
import threading

import pytest

from gnomon.client import (
    AsyncClient,
    IntervalSchedule,
    JobSpec,
    OnceSchedule,
    RunState,
    RunTrigger,
    TaskContext,
    TaskState,
    Worker,
    task,
)

pytestmark = pytest.mark.integration

FAST = {"lease_ttl_ms": "3000", "heartbeat_interval_ms": "500"}


def _servers(cluster) -> str:
    return cluster.servers


async def _until(predicate, *, timeout_s: float, what: str):
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


async def test_client_follows_a_leader_change_without_doubling(make_cluster):
    cluster = make_cluster()
    leader = cluster.leader()
    async with AsyncClient(_servers(cluster), timeout_s=30) as client:
        job = await client.create_job(
            JobSpec.single("hourly", IntervalSchedule(interval_ms=3_600_000)))
        cluster.kill(leader.node_id, signal.SIGKILL)
        # The first attempt meets the dead leader or a follower; the client retries with the
        # same request id until the new leader commits it.
        run = await client.trigger_job(job.job_id, request_id="trigger-across-failover")
        again = await client.trigger_job(job.job_id, request_id="trigger-across-failover")
        assert again.run_id == run.run_id
        manual = [r for r in await client.list_runs(job.job_id)
                  if r.trigger == RunTrigger.MANUAL]
        assert [r.run_id for r in manual] == [run.run_id]


async def test_worker_survives_a_leader_kill(make_cluster):
    cluster = make_cluster(**FAST)
    leader = cluster.leader()
    started = asyncio.Event()
    release = threading.Event()
    seen: dict[str, object] = {}
    loop = asyncio.get_running_loop()

    @task(name="main")
    def slow(ctx: TaskContext) -> str:
        seen["token"] = ctx.fencing_token
        seen["key"] = ctx.idempotency_key
        loop.call_soon_threadsafe(started.set)
        if not release.wait(timeout=60):
            raise RuntimeError("never released")
        seen["valid_at_end"] = ctx.lease_valid()
        return "finished"

    async with AsyncClient(_servers(cluster), timeout_s=30) as client:
        job = await client.create_job(JobSpec.single("slow", OnceSchedule(at_ms=1)))
        async with Worker(client, tasks=[slow], worker_id="survivor", shutdown_grace_s=5):
            await asyncio.wait_for(started.wait(), 30)
            cluster.kill(leader.node_id, signal.SIGKILL)
            cluster.leader(exclude={leader.node_id})
            release.set()

            async def finished():
                runs = await client.list_runs(job.job_id)
                return runs and runs[0].state in (RunState.SUCCEEDED, RunState.FAILED) and runs[0]

            run = await _until(finished, timeout_s=60, what="the run to finish")
    inst = run.tasks[0]
    print("token seen", seen["token"], "final", inst.fencing_token, inst.state)
    assert inst.idempotency_key == seen["key"]
    if inst.fencing_token == seen["token"]:
        # Finished on the new leader under the same lease.
        assert run.state == RunState.SUCCEEDED and inst.result == b"finished"
        assert seen["valid_at_end"]
    else:
        # Lost to a higher token: the stale attempt must not have been accepted.
        assert inst.fencing_token > seen["token"]
        assert inst.state in (TaskState.SUCCEEDED, TaskState.DEAD)
