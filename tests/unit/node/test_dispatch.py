"""Dispatcher (node/leader/dispatch.py): order, fairness, one grant per round, Assign, Cancel."""

from __future__ import annotations

import asyncio

from gnomon.node.core.commands import CancelRun, FailTask, GrantLeases
from gnomon.node.core.errors import Rejected
from gnomon.node.core.model import AttemptOutcome, TaskState

from .harness import Worker, commands_of, has, replies_to, turns, until


def grants(h) -> list:
    return [g for cmd in commands_of(h.raft.submitted, GrantLeases) for g in cmd.grants]


async def ready_runs(h, job_id: str, n: int, step_ms: int = 10) -> list[str]:
    """n manual runs of the job, each ready `step_ms` after the previous one."""
    out = []
    for _ in range(n):
        h.clock.wall += step_ms
        out.append(await h.run_now(job_id))
    return out


async def test_priority_first_then_age_within_a_queue(make, clock):
    h = await make()
    lo = await h.create_job("lo", queue="q", priority=0)
    hi = await h.create_job("hi", queue="q", priority=10)
    mid = await h.create_job("mid", queue="q", priority=5)
    other = await h.create_job("other", queue="elsewhere", priority=100)
    [lo1] = await ready_runs(h, lo, 1)
    [hi1] = await ready_runs(h, hi, 1)
    [mid1] = await ready_runs(h, mid, 1)
    [lo2] = await ready_runs(h, lo, 1)
    [hi2] = await ready_runs(h, hi, 1)
    await ready_runs(h, other, 1)
    await h.lead()  # indexes what is ready in the replicated state
    [lo3] = await ready_runs(h, lo, 1)  # ready after the session started (an effect)
    w = Worker(h, "w1", ("q",))
    h.dispatcher.add_credits(w.session, 10)
    await until(lambda: len(w.of("assign")) == 6, "six assignments")
    expected = [hi1, hi2, mid1, lo1, lo2, lo3]
    [cmd] = commands_of(h.raft.committed, GrantLeases)
    assert [g.run_id for g in cmd.grants] == expected
    assigns = w.of("assign")
    assert [a.lease.run_id for a in assigns] == expected
    tokens = [a.lease.fencing_token for a in assigns]
    assert tokens == sorted(tokens)
    assert w.session.credits == 4  # nothing else on its queue: the credits stay


async def test_a_worker_on_two_queues_takes_the_better_head(make, clock):
    h = await make()
    a = await h.create_job("a", queue="qa", priority=1)
    b = await h.create_job("b", queue="qb", priority=2)
    [a1, a2] = await ready_runs(h, a, 2)
    [b1] = await ready_runs(h, b, 1)
    await h.lead()
    w = Worker(h, "w1", ("qa", "qb"))
    h.dispatcher.add_credits(w.session, 3)
    await until(lambda: len(w.of("assign")) == 3, "three assignments")
    assert [x.lease.run_id for x in w.of("assign")] == [b1, a1, a2]
    assert [x.queue for x in w.of("assign")] == ["qb", "qa", "qa"]


async def test_round_robin_over_credits_in_one_grant_per_round(leader, clock):
    job = await leader.create_job("rr")
    runs = await ready_runs(leader, job, 5)
    w1, w2 = Worker(leader, "w1"), Worker(leader, "w2")
    leader.dispatcher.add_credits(w1.session, 3)
    leader.dispatcher.add_credits(w2.session, 1)
    await until(lambda: len(w1.of("assign")) + len(w2.of("assign")) == 4, "four assignments")
    [cmd] = commands_of(leader.raft.submitted, GrantLeases)  # one command for the round
    assert [(g.run_id, g.worker_id) for g in cmd.grants] == [
        (runs[0], "w1"), (runs[1], "w2"), (runs[2], "w1"), (runs[3], "w1")]
    assert {g.lease_ttl_ms for g in cmd.grants} == {leader.config.lease_ttl_ms}
    assert (w1.session.credits, w2.session.credits) == (0, 0)
    assert leader.inst(runs[4]).state == TaskState.READY  # no credit left for it


async def test_assign_is_pushed_after_commit_with_the_token(leader, clock):
    job = await leader.create_job("push", payload=b"\x00payload", queue="default")
    [run_id] = await ready_runs(leader, job, 1)
    leader.raft.hold()
    w = Worker(leader, "w1")
    leader.dispatcher.add_credits(w.session, 1)
    await until(lambda: commands_of(leader.raft.submitted, GrantLeases), "the grant proposal")
    await turns()
    assert w.drain() == []  # nothing before the grant committed
    assert leader.inst(run_id).state == TaskState.READY
    leader.raft.release()
    [assign] = await until(lambda: w.of("assign"), "the Assign")
    inst = leader.inst(run_id)
    assert inst.state == TaskState.LEASED and inst.worker_id == "w1"
    assert (assign.lease.run_id, assign.lease.task_name, assign.lease.fencing_token) == (
        run_id, "a", inst.fencing_token)
    assert (assign.job_id, assign.tenant, assign.queue, assign.attempt) == (
        job, "acme", "default", 1)
    assert assign.idempotency_key == f"{run_id}:a"
    assert assign.payload == b"\x00payload"
    assert assign.scheduled_for_ms == leader.state.runs[run_id].scheduled_for_ms
    assert (assign.lease_ttl_ms, assign.deadline_ms, assign.max_attempts) == (
        leader.config.lease_ttl_ms, 0, 3)


async def test_a_refused_grant_gives_the_credit_back(leader, clock):
    job = await leader.create_job("refused")
    [run_id] = await ready_runs(leader, job, 1)
    leader.raft.hold()
    cancel = asyncio.create_task(leader.proposer.propose(CancelRun("", run_id, "gone")))
    await until(lambda: leader.raft.waiting() == 1, "the cancel waiting for commit")
    w = Worker(leader, "w1")
    leader.dispatcher.add_credits(w.session, 1)
    await until(lambda: commands_of(leader.raft.submitted, GrantLeases), "the grant proposal")
    assert w.session.credits == 0
    leader.raft.release()  # the cancel applies first: the grant is refused
    await cancel
    await until(lambda: w.session.credits == 1, "the credit back")
    [granted] = replies_to(leader.raft, GrantLeases)
    [refusal] = granted.tokens
    assert isinstance(refusal, Rejected) and refusal.code == "FAILED_PRECONDITION", refusal
    assert "is cancelled, not ready" in refusal.detail
    assert leader.inst(run_id).state == TaskState.CANCELLED
    assert leader.inst(run_id).fencing_token == 0
    await turns()
    assert w.of("assign") == []
    assert len(grants(leader)) == 1  # a cancelled task is not offered again


async def test_a_grant_that_did_not_commit_is_offered_again(leader, clock):
    job = await leader.create_job("again")
    [run_id] = await ready_runs(leader, job, 1)
    leader.raft.fail(has(GrantLeases))
    w = Worker(leader, "w1")
    leader.dispatcher.add_credits(w.session, 1)
    [assign] = await until(lambda: w.of("assign"), "the Assign after a retry")
    assert [g.run_id for g in grants(leader)] == [run_id, run_id]
    assert assign.lease.fencing_token == leader.inst(run_id).fencing_token
    assert w.session.credits == 0


async def test_cancel_is_pushed_to_the_worker_named_in_the_effect(leader, clock):
    job = await leader.create_job("cancel")
    [run_id] = await ready_runs(leader, job, 1)
    w1, w2 = Worker(leader, "w1"), Worker(leader, "w2")
    leader.dispatcher.add_credits(w1.session, 1)
    [assign] = await until(lambda: w1.of("assign"), "the Assign")
    await leader.propose(CancelRun("", run_id, "stop it"))
    [cancel] = await until(lambda: w1.of("cancel"), "the Cancel")
    assert (cancel.lease, cancel.reason) == (assign.lease, "stop it")
    assert w2.of("cancel") == []
    assert leader.leases.holder(assign.lease.fencing_token) is None
    # The holder comes from the effect, not from the lease table.
    leader.dispatcher.cancelled([(run_id, "a", 77, "elsewhere", "w2")])
    [other] = w2.of("cancel")
    assert (other.lease.fencing_token, other.reason) == (77, "elsewhere")
    leader.dispatcher.cancelled([(run_id, "a", 78, "nobody", "w-unknown")])  # not connected


async def test_a_closed_sessions_fresh_lease_is_expired_at_once(leader, clock):
    job = await leader.create_job("closed")
    [run_id] = await ready_runs(leader, job, 1)
    leader.raft.hold()
    w = Worker(leader, "w1")
    leader.dispatcher.add_credits(w.session, 1)
    await until(lambda: commands_of(leader.raft.submitted, GrantLeases), "the grant proposal")
    leader.dispatcher.detach(w.session)  # the stream ended meanwhile
    leader.raft.release()
    await until(lambda: leader.inst(run_id).state == TaskState.RETRY_WAIT, "the expiry")
    attempt = leader.inst(run_id).attempts[-1]
    assert (attempt.outcome, attempt.worker_id) == (AttemptOutcome.EXPIRED, "w1")
    assert w.of("assign") == []


async def test_a_retry_waits_for_its_time_then_is_offered(leader, clock):
    job = await leader.create_job("backoff")
    [run_id] = await ready_runs(leader, job, 1)
    w = Worker(leader, "w1")
    leader.dispatcher.add_credits(w.session, 1)
    [first] = await until(lambda: w.of("assign"), "the first Assign")
    token = first.lease.fencing_token
    await leader.propose(FailTask(run_id, "a", token, "flaky", True))
    retry_at = leader.inst(run_id).retry_at_ms
    assert leader.inst(run_id).state == TaskState.RETRY_WAIT and retry_at > clock.wall
    leader.dispatcher.add_credits(w.session, 1)
    await turns(100)
    assert len(w.of("assign")) == 1
    clock.wall = retry_at
    leader.dispatcher.add_credits(w.session, 0)  # a report ack wakes the round too
    await until(lambda: len(w.of("assign")) == 2, "the retry's Assign")
    second = w.of("assign")[1]
    assert second.attempt == 2 and second.lease.fencing_token > token
