"""AsyncClient/Client against in-process fake nodes: leader following, request-id reuse,
backoff rotation, deadlines and typed errors."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gnomon.client import (
    AsyncClient,
    Client,
    ClusterLimits,
    Conflict,
    CronSchedule,
    DeadlineExceeded,
    InvalidArgument,
    JobSpec,
    NotFound,
    RunState,
    TaskRef,
    Unavailable,
)
from gnomon.v1 import api_pb2, types_pb2
from tests.support.fakes import Abort, FakeNode, Hang, closed_address

SPEC = JobSpec.single("nightly", CronSchedule("0 3 * * *"), payload={"x": 1})


def fast(servers, **kw):
    kw.setdefault("timeout_s", 5.0)
    kw.setdefault("backoff_initial_s", 0.01)
    kw.setdefault("backoff_max_s", 0.05)
    return AsyncClient(servers, **kw)


async def test_follows_gnomon_leader_and_reuses_request_id(serve):
    leader = FakeNode()
    leader_addr = await serve(leader)
    follower = FakeNode([Abort(grpc.StatusCode.UNAVAILABLE, "not the leader", leader=leader_addr)])
    follower_addr = await serve(follower)

    async with fast([follower_addr]) as client:
        job = await client.create_job(SPEC)
        assert job.job_id == "j1" and job.spec == SPEC
        assert [m for m, _ in follower.calls] == ["CreateJob"]
        assert [m for m, _ in leader.calls] == ["CreateJob"]
        (rid,) = follower.request_ids
        assert leader.request_ids == [rid] and len(rid) == 32
        # The leader is remembered: the next call goes straight to it, with a new request id.
        assert client.target == leader_addr
        await client.pause_job("j1")
        assert len(follower.calls) == 1
        assert leader.request_ids[1] != rid


async def test_rotates_through_servers_without_a_hint(serve):
    no_leader = FakeNode([Abort(grpc.StatusCode.UNAVAILABLE, "no leader")])
    good = FakeNode()
    addrs = [closed_address(), await serve(no_leader), await serve(good)]
    async with fast(addrs) as client:
        run = await client.trigger_job(name="nightly", request_id="rid-1")
        assert run.run_id == "j1@manual-1" and run.state is RunState.RUNNING
    assert no_leader.request_ids == ["rid-1"] and good.request_ids == ["rid-1"]
    ((_, req),) = good.calls
    assert req.job == api_pb2.JobRef(tenant="default", name="nightly")


async def test_attempt_timeout_is_retried_with_the_same_request_id(serve):
    hang = Hang()
    node = FakeNode([hang])
    addr = await serve(node)
    try:
        async with fast([addr], attempt_timeout_s=0.2) as client:
            await client.cancel_run("j1@1000", reason="test")
    finally:
        hang.release.set()
    assert [m for m, _ in node.calls] == ["CancelRun", "CancelRun"]
    first, second = node.request_ids
    assert first == second


async def test_non_retryable_errors_are_typed_and_not_retried(serve):
    node = FakeNode(
        [
            Abort(grpc.StatusCode.NOT_FOUND, "no job j9"),
            Abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                "version is 4, not 3",
                reason="VERSION_CONFLICT",
            ),
            Abort(grpc.StatusCode.INVALID_ARGUMENT, "spec.name: must not be empty"),
        ]
    )
    addr = await serve(node)
    async with fast([addr]) as client:
        with pytest.raises(NotFound) as e:
            await client.get_job("j9")
        assert str(e.value) == "no job j9" and e.value.code is grpc.StatusCode.NOT_FOUND
        with pytest.raises(Conflict) as c:
            await client.update_job("j1", SPEC, expected_version=3)
        assert c.value.reason == "VERSION_CONFLICT"
        with pytest.raises(InvalidArgument, match="must not be empty"):
            await client.create_job(SPEC)
    assert len(node.calls) == 3


async def test_gives_up_with_the_last_error_at_the_deadline(serve):
    node = FakeNode(respond=lambda m, r: None)
    node.script.extend(Abort(grpc.StatusCode.UNAVAILABLE, "no quorum") for _ in range(10_000))
    addr = await serve(node)
    async with fast([addr], timeout_s=0.3, retries=10_000) as client:
        with pytest.raises(Unavailable, match="no quorum") as e:
            await client.get_run("j1@0")
    assert any("gave up after" in note for note in e.value.__notes__)
    assert len(node.calls) > 1


async def test_retries_are_bounded(serve):
    node = FakeNode([Abort(grpc.StatusCode.UNAVAILABLE, "down")] * 10)
    addr = await serve(node)
    async with fast([addr], retries=2) as client:
        with pytest.raises(Unavailable):
            await client.delete_job("j1")
    assert len(node.calls) == 3
    assert len(set(node.request_ids)) == 1


async def test_redirect_ping_pong_does_not_spin(serve):
    a, b = FakeNode(), FakeNode()
    a_addr, b_addr = await serve(a), await serve(b)
    a.script.extend(Abort(grpc.StatusCode.UNAVAILABLE, "", leader=b_addr) for _ in range(100))
    b.script.extend(Abort(grpc.StatusCode.UNAVAILABLE, "", leader=a_addr) for _ in range(100))
    async with fast([a_addr], retries=8) as client:
        with pytest.raises(Unavailable):
            await client.resume_job("j1")
    assert len(a.calls) + len(b.calls) == 9


async def test_deadline_exceeded_when_every_attempt_times_out(serve):
    hang = Hang()
    node = FakeNode(respond=lambda m, r: None)
    node.script.extend([hang] * 50)
    addr = await serve(node)
    try:
        async with fast([addr], timeout_s=0.3, attempt_timeout_s=None) as client:
            with pytest.raises(DeadlineExceeded):
                await client.get_job("j1")
    finally:
        hang.release.set()


async def test_reads_and_pagination(serve):
    pages = {
        "": api_pb2.ListJobsResponse(
            jobs=[
                types_pb2.Job(job_id="j1", spec=_spec_pb("a")),
                types_pb2.Job(job_id="j2", spec=_spec_pb("b")),
            ],
            next_after_job_id="j2",
        ),
        "j2": api_pb2.ListJobsResponse(jobs=[types_pb2.Job(job_id="j3", spec=_spec_pb("c"))]),
    }

    def respond(method, request):
        assert method == "ListJobs"
        assert request.limit == 2 and request.consistency == api_pb2.CONSISTENCY_STALE
        return pages[request.after_job_id]

    node = FakeNode(respond=respond)
    addr = await serve(node)
    async with fast(addr) as client:
        ids = [j.job_id async for j in client.iter_jobs("acme", page_size=2, consistency="stale")]
        assert ids == ["j1", "j2", "j3"]
        first = await client.list_jobs("acme", limit=2, consistency="stale")
        assert [j.name for j in first] == ["a", "b"]
    assert all(r.tenant == "acme" for _, r in node.calls)


async def test_dead_letter_replay_and_status(serve):
    node = FakeNode()
    addr = await serve(node)
    async with fast(f" {addr} , {addr}") as client:
        assert client.servers == (addr,)
        replayed = await client.replay_dead_letters([("j1@0", "a"), TaskRef("j1@0", "b")])
        assert replayed == [TaskRef("j1@0", "a"), TaskRef("j1@0", "b")]
        with pytest.raises(InvalidArgument):
            await client.replay_dead_letters()
        with pytest.raises(InvalidArgument):
            await client.replay_dead_letters(tenant="acme", all=True)
        await client.replay_dead_letters(tenant="acme")
        await client.replay_dead_letters(all=True)
        status = await client.cluster_status(server=addr)
        assert status.node_id == "fake" and status.term == 3
        assert await client.list_dead_letters() == []
    _, by_tenant = node.calls[1]
    assert not by_tenant.all and by_tenant.tenant == "acme" and not by_tenant.tasks
    _, everything = node.calls[2]
    assert everything.all and everything.tenant == "" and not everything.tasks


async def test_every_mutating_call_carries_a_request_id(serve):
    node = FakeNode()
    addr = await serve(node)
    async with fast(addr) as client:
        await client.create_job(SPEC)
        await client.update_job(None, SPEC)
        await client.delete_job(name="nightly")
        await client.pause_job("j1")
        await client.resume_job("j1")
        await client.trigger_job("j1")
        await client.cancel_run("j1@0")
        await client.replay_dead_letters(all=True)
        await client.set_limits(max_attempt_records=5)
    ids = node.request_ids
    assert len(ids) == 9 and len(set(ids)) == 9 and all(ids)
    (_, update) = node.calls[1]
    assert update.job == api_pb2.JobRef(tenant="default", name="nightly")


async def test_delete_job_cancel_running_is_sent(serve):
    node = FakeNode()
    addr = await serve(node)
    async with fast(addr) as client:
        await client.delete_job("j1")
        await client.delete_job("j2", cancel_running=True, expected_version=3)
    (_, plain), (_, cancelling) = node.calls
    assert plain.job.job_id == "j1" and not plain.cancel_running
    assert cancelling.job.job_id == "j2" and cancelling.cancel_running
    assert cancelling.expected_version == 3


async def test_set_limits_sends_only_the_given_limits_and_reuses_its_request_id(serve):
    leader = FakeNode([Abort(grpc.StatusCode.UNAVAILABLE, "not committed: leader changed")])
    addr = await serve(leader)
    async with fast(addr) as client:
        update = await client.set_limits(
            dedupe_capacity=50_000, runs_retained_per_job=0, expected_version=1
        )
    assert [m for m, _ in leader.calls] == ["SetLimits", "SetLimits"]
    (_, first), (_, second) = leader.calls
    assert first == second and first.request_id and first.expected_version == 1
    # Unset fields keep their value on the cluster; 0 is a value (sent, not "unset").
    assert first.limits.HasField("dedupe_capacity") and first.limits.dedupe_capacity == 50_000
    assert first.limits.HasField("runs_retained_per_job")
    assert first.limits.runs_retained_per_job == 0
    assert not first.limits.HasField("max_dead_letters")
    assert update.limits_version == 2
    assert update.limits == ClusterLimits(
        dedupe_capacity=50_000,
        dedupe_max_age_ms=86_400_000,
        runs_retained_per_job=0,
        max_dead_letters=100_000,
        max_attempt_records=10,
    )


async def test_set_limits_is_validated_before_sending(serve):
    node = FakeNode()
    addr = await serve(node)
    async with fast(addr) as client:
        with pytest.raises(InvalidArgument, match="at least one limit"):
            await client.set_limits()
        with pytest.raises(InvalidArgument, match="max_dead_letters"):
            await client.set_limits(max_dead_letters="5")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="dedupe_capacity"):
            await client.set_limits(dedupe_capacity=True)
        with pytest.raises(TypeError):
            await client.set_limits(100)  # type: ignore[misc]  # keyword-only
    assert node.calls == []


async def test_status_carries_limits_and_eviction_count(serve):
    class Node(FakeNode):
        async def GetStatus(self, request, context):
            self.calls.append(("GetStatus", request))
            return api_pb2.GetStatusResponse(
                node_id="n1",
                limits=types_pb2.ClusterLimits(dedupe_capacity=5, max_attempt_records=3),
                limits_version=4,
                dead_letters_evicted=9,
            )

    node = Node()
    addr = await serve(node)
    async with fast(addr) as client:
        status = await client.cluster_status(include_digest=True)
    assert node.calls[0][1].include_digest
    assert status.limits == ClusterLimits(dedupe_capacity=5, max_attempt_records=3)
    assert (status.limits_version, status.dead_letters_evicted) == (4, 9)


async def test_wait_run_polls_until_terminal(serve):
    states = iter([types_pb2.RUN_STATE_RUNNING, types_pb2.RUN_STATE_SUCCEEDED])
    node = FakeNode(
        respond=lambda m, r: api_pb2.GetRunResponse(
            run=types_pb2.Run(run_id=r.run_id, state=next(states))
        )
    )
    addr = await serve(node)
    async with fast(addr) as client:
        run = await client.wait_run("j1@0", poll_interval_s=0.01)
    assert run.state is RunState.SUCCEEDED and len(node.calls) == 2


async def test_blocking_client_follows_the_leader(serve):
    leader = FakeNode()
    leader_addr = await serve(leader)
    follower = FakeNode([Abort(grpc.StatusCode.UNAVAILABLE, "not the leader", leader=leader_addr)])
    follower_addr = await serve(follower)

    def use_blocking_client():
        with Client(follower_addr, timeout_s=5.0) as client:
            job = client.create_job(SPEC)
            jobs = list(client.iter_jobs())
            return job, jobs, client.target

    job, jobs, target = await asyncio.to_thread(use_blocking_client)
    assert job.job_id == "j1" and jobs == [] and target == leader_addr
    assert follower.request_ids == leader.request_ids[:1]


def test_blocking_client_rejects_use_after_close():
    client = Client("127.0.0.1:1")
    client.close()
    client.close()
    with pytest.raises(RuntimeError, match="closed"):
        client.get_run("j1@0")


def test_options_are_validated():
    with pytest.raises(InvalidArgument):
        AsyncClient("")
    with pytest.raises(InvalidArgument):
        AsyncClient("a:1", timeout_s=0)


def _spec_pb(name):
    return types_pb2.JobSpec(
        name=name,
        schedule=types_pb2.Schedule(interval=types_pb2.IntervalSchedule(interval_ms=1000)),
        tasks=[types_pb2.TaskSpec(name="main")],
    )


class _PreviewNode(FakeNode):
    async def PreviewSchedule(self, request, context):  # noqa: N802 - the RPC's name
        return await self._handle("PreviewSchedule", request, context)


async def test_preview_schedule_after_a_datetime_sends_its_ms(serve):
    # Was TypeError (instant_ms called without the parameter's name), found by mypy.
    from datetime import UTC, datetime

    node = _PreviewNode()
    async with fast([await serve(node)]) as client:
        await client.preview_schedule("j1", after=datetime(2026, 1, 1, tzinfo=UTC))
        with pytest.raises(InvalidArgument, match="after: .* naive datetime"):
            await client.preview_schedule("j1", after=datetime(2026, 1, 1))
    ((method, req),) = node.calls
    assert method == "PreviewSchedule" and req.after_ms == 1_767_225_600_000
