"""Workers without a stream (node/api/grpc/worker_poll.py): lease, renew, complete and fail
as unary calls over the stream's lease table, scoped by token, bounded. Over HTTP against a
real cluster, with the curl worker of examples/: tests/http/test_worker_http.py."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gnomon.node.api.grpc.access import set_principal
from gnomon.node.api.grpc.worker import WorkerServicer
from gnomon.node.api.grpc.worker_poll import lease_id, parse_lease_id
from gnomon.node.core.access import WORKER
from gnomon.node.core.commands import CancelRun
from gnomon.node.core.model import AttemptOutcome, TaskState
from gnomon.node.security.auth import ANONYMOUS, Principal
from gnomon.node.spec.validate import ValidationError
from gnomon.v1 import worker_pb2

from .harness import Aborted, Context, until


class Poller:
    """One caller of the unary worker calls on the harness node, as `principal`."""

    def __init__(self, h, principal: Principal = ANONYMOUS, worker_id: str = "w1", *,
                 svc: WorkerServicer | None = None) -> None:
        self.svc = svc or WorkerServicer(h, h.dispatcher, h.leases)
        self.principal, self.worker_id = principal, worker_id

    async def _call(self, method: str, request):
        set_principal(self.principal)
        return await getattr(self.svc, method)(request, Context())

    async def lease(self, capacity: int = 1, wait_ms: int = 0, **kw):
        return await self._call("LeaseTasks", worker_pb2.LeaseTasksRequest(
            worker_id=kw.pop("worker_id", self.worker_id), capacity=capacity, wait_ms=wait_ms,
            **kw))

    async def renew(self, *lease_ids: str) -> dict[str, str]:
        reply = await self._call("RenewLeases", worker_pb2.RenewLeasesRequest(
            worker_id=self.worker_id, lease_ids=lease_ids))
        return {s.lease_id: s.status for s in reply.leases}

    async def complete(self, task: worker_pb2.LeasedTask, result: bytes = b"{}", **kw):
        return await self._call("CompleteLease", worker_pb2.CompleteLeaseRequest(
            lease_id=task.lease_id, fencing_token=task.fencing_token, result=result, **kw))

    async def fail(self, task: worker_pb2.LeasedTask, error: str, retryable: bool, **kw):
        return await self._call("FailLease", worker_pb2.FailLeaseRequest(
            lease_id=task.lease_id, fencing_token=task.fencing_token, error=error,
            retryable=retryable, **kw))


def _scoped(token_id: str, tenant: str) -> Principal:
    return Principal(f"{tenant}-worker", WORKER, (tenant,), token_id)


def test_a_lease_id_names_run_task_and_token_and_bad_ones_name_the_field():
    text = lease_id("acme/nightly@1700000000000", "extract.v2", 41)
    ref = parse_lease_id(text, "lease_id")
    assert (ref.run_id, ref.task_name, ref.fencing_token) == (
        "acme/nightly@1700000000000", "extract.v2", 41)
    for bad in ("", "41", "run/41", "run/task/x", "run/task/0", "/task/4"):
        with pytest.raises(ValidationError, match="^lease_id: .* is not a lease id"):
            parse_lease_id(bad, "lease_id")


async def test_lease_renew_complete_round_trip(leader):
    run_id = await leader.run_now(await leader.create_job("poll"))
    w = Poller(leader)
    reply = await w.lease(capacity=5)
    [task] = reply.tasks
    assert (task.run_id, task.task_name, task.idempotency_key) == (run_id, "a", f"{run_id}:a")
    assert task.lease_id == f"{run_id}/a/{task.fencing_token}"
    assert task.ttl_ms == reply.lease_ttl_ms == leader.config.lease_ttl_ms
    assert reply.heartbeat_interval_ms == leader.config.heartbeat_interval_ms
    assert await w.renew(task.lease_id) == {task.lease_id: "ok"}
    ack = await w.complete(task, b'{"rows": 3}', exit_code=0)
    assert ack.accepted and not ack.reason
    assert leader.inst(run_id).state == TaskState.SUCCEEDED
    assert leader.inst(run_id).result == b'{"rows": 3}'
    # Done: the lease is no longer current, and a second report changes nothing.
    assert await w.renew(task.lease_id) == {task.lease_id: "revoked"}
    again = await w.complete(task)
    assert (again.accepted, again.reason) == (False, "STALE_LEASE")
    # The call detached: nothing is granted to the worker between calls.
    assert "w1" not in leader.dispatcher.sessions


async def test_a_lease_call_waits_for_a_task_and_answers_as_one_is_granted(leader):
    job = await leader.create_job("poll")
    w = Poller(leader)
    call = asyncio.create_task(w.lease(capacity=2, wait_ms=30_000))
    await until(lambda: "w1" in leader.dispatcher.sessions, "the call to wait")
    assert not call.done()
    run_id = await leader.run_now(job)
    reply = await asyncio.wait_for(call, 5)
    assert [t.run_id for t in reply.tasks] == [run_id]


async def test_a_lease_call_without_work_answers_empty_after_its_wait(leader):
    w = Poller(leader)
    assert list((await w.lease(wait_ms=0)).tasks) == []
    assert list((await w.lease(wait_ms=20)).tasks) == []


async def test_a_grant_in_flight_when_the_wait_ends_is_answered_not_lost(leader):
    run_id = await leader.run_now(await leader.create_job("poll"))
    leader.raft.hold()  # the grant is proposed, not committed yet
    w = Poller(leader)
    call = asyncio.create_task(w.lease(capacity=2, wait_ms=1))
    await until(lambda: leader.raft.waiting() > 0, "the grant to be proposed")
    # Its wait is over (credits dropped to 0 from the 1 left), the grant still unanswered:
    await until(lambda: leader.dispatcher.sessions["w1"].credits == 0, "the wait to end")
    assert not call.done()  # it waits for the grant it was proposed for
    leader.raft.release()
    [task] = (await asyncio.wait_for(call, 5)).tasks
    assert task.run_id == run_id and leader.inst(run_id).state == TaskState.LEASED


async def test_lease_calls_waiting_at_once_are_bounded(make):
    h = await make(worker_max_polls=1)
    await h.lead()
    svc = WorkerServicer(h, h.dispatcher, h.leases)  # one per node, as the node has
    first = asyncio.create_task(Poller(h, worker_id="a", svc=svc).lease(wait_ms=30_000))
    await until(lambda: "a" in h.dispatcher.sessions, "the first call to wait")
    with pytest.raises(Aborted) as refused:
        await Poller(h, worker_id="b", svc=svc).lease(wait_ms=0)
    assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "worker_max_polls (1)" in refused.value.details
    assert refused.value.trailing["retry-after-ms"] == "1000"
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert list((await Poller(h, worker_id="b", svc=svc).lease()).tasks) == []  # room again


@pytest.mark.parametrize(("kw", "message"), [
    ({"capacity": 0}, "capacity: 0: must be 1 to 1000 (max_worker_credits)"),
    ({"wait_ms": 30_001}, "wait_ms: 30001: must be 0 to 30000 (worker_poll_max_wait_ms)"),
    ({"worker_id": "bad id"}, "worker_id:"),
])
async def test_bad_lease_calls_name_the_field_and_change_nothing(leader, kw, message):
    run_id = await leader.run_now(await leader.create_job("poll"))
    with pytest.raises(Aborted) as refused:
        await Poller(leader).lease(**{"capacity": 1, **kw})
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert message in refused.value.details
    assert leader.inst(run_id).state == TaskState.READY and not leader.dispatcher.sessions


async def test_a_scoped_worker_renews_and_reports_only_its_own_tokens_leases(leader):
    run_id = await leader.run_now(await leader.create_job("poll", tenant="globex"))
    own = Poller(leader, _scoped("t2", "globex"), "w1")
    [task] = (await own.lease()).tasks
    assert leader.leases.holder(task.fencing_token).worker_id == "t2:w1"
    # Another tenant's worker naming the same worker id and the lease: not its lease.
    other = Poller(leader, _scoped("t5", "acme"), "w1")
    assert await other.renew(task.lease_id) == {task.lease_id: "revoked"}
    for report in (other.complete(task), other.fail(task, "boom", False)):
        ack = await report
        assert (ack.accepted, ack.reason) == (False, "NOT_YOURS")
    assert leader.inst(run_id).state == TaskState.LEASED
    # Naming a worker id that is not the holder's is refused too, even with the right token.
    ack = await own.complete(task, worker_id="w2")
    assert (ack.accepted, ack.reason) == (False, "NOT_YOURS")
    assert (await own.complete(task, worker_id="w1")).accepted


async def test_a_tenant_worker_is_granted_only_its_tenants_tasks(leader):
    theirs = await leader.run_now(await leader.create_job("poll", tenant="acme"))
    mine = await leader.run_now(await leader.create_job("poll", tenant="globex"))
    tasks = (await Poller(leader, _scoped("t2", "globex")).lease(capacity=5)).tasks
    assert [t.run_id for t in tasks] == [mine]
    assert leader.inst(theirs).state == TaskState.READY


async def test_a_cancelled_run_answers_cancel_and_refuses_the_report(leader):
    run_id = await leader.run_now(await leader.create_job("poll"))
    w = Poller(leader)
    [task] = (await w.lease()).tasks
    await leader.propose(CancelRun("", run_id))
    assert await w.renew(task.lease_id) == {task.lease_id: "cancel"}
    ack = await w.complete(task)
    assert not ack.accepted and ack.reason == "STALE_LEASE"


async def test_fail_retryable_or_not_as_on_the_stream(leader):
    run_id = await leader.run_now(await leader.create_job("poll", max_attempts=3))
    w = Poller(leader)
    [task] = (await w.lease()).tasks
    assert (await w.fail(task, "flaky", True, exit_code=2)).accepted
    attempt = leader.inst(run_id).attempts[-1]
    assert (attempt.outcome, attempt.error, attempt.exit_code) == (
        AttemptOutcome.FAILED, "flaky", 2)
    assert leader.inst(run_id).state == TaskState.RETRY_WAIT


async def test_an_oversized_result_is_recorded_as_failure(make):
    h = await make(max_result_bytes=4)
    await h.lead()
    run_id = await h.run_now(await h.create_job("poll"))
    w = Poller(h)
    [task] = (await w.lease()).tasks
    ack = await w.complete(task, b"12345")
    assert (ack.accepted, ack.reason) == (False, "RECORDED_AS_FAILURE")
    assert "max_result_bytes" in ack.detail and h.inst(run_id).state == TaskState.DEAD


async def test_a_report_that_did_not_commit_says_report_again(leader):
    await leader.run_now(await leader.create_job("poll"))
    w = Poller(leader)
    [task] = (await w.lease()).tasks
    leader.raft.fail()
    ack = await w.complete(task)
    assert (ack.accepted, ack.retry, ack.reason) == (False, True, "NOT_RECORDED")


async def test_a_follower_refuses_with_the_leaders_address(leader):
    await leader.demote(leader.config.members[1])
    with pytest.raises(Aborted) as refused:
        await Poller(leader).lease()
    assert refused.value.code == grpc.StatusCode.UNAVAILABLE
    assert refused.value.trailing["gnomon-leader"] == leader.config.members[1].grpc_addr
