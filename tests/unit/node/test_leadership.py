"""Leadership (node/leader/session.py): a session starts after its own barrier, freshness, demotion."""

from __future__ import annotations

import pytest
from pysyncobj import FAIL_REASON

from gnomon.node.core.commands import Barrier, CreateJob, SetLimits
from gnomon.node.raft.errors import NotCommitted
from gnomon.node.raft.node import LEADER

from .harness import (
    LOOP_TASKS,
    MEMBERS,
    T0,
    Worker,
    commands_of,
    has,
    loop_tasks,
    make_spec,
    turns,
    until,
)

PROOF = 50  # harness config proof_interval_ms


async def test_a_session_starts_only_after_its_own_barrier_commits(h):
    h.raft.hold()
    h.leadership.role_changed(0, LEADER)
    await until(lambda: commands_of(h.raft.submitted, Barrier), "the barrier proposal")
    await turns(100)
    assert (h.leadership.ready, h.leadership.session, h.leadership.fresh()) == (False, 0, False)
    assert loop_tasks() == set()
    h.raft.release()
    await until(lambda: h.leadership.ready, "the session")
    assert h.leadership.session == 1 and h.leadership.fresh()
    assert loop_tasks() == LOOP_TASKS
    # The barrier is the first entry of the term; the loops' proposals (here the first
    # leader's initial limits) come after it.
    await until(lambda: commands_of(h.raft.committed, SetLimits), "the initial limits")
    kinds = [type(cmd) for b in h.raft.committed for cmd in b.commands]
    assert kinds[0] is Barrier and kinds.index(SetLimits) > 0


async def test_a_barrier_that_did_not_commit_is_retried_before_any_session(h):
    h.raft.fail(has(Barrier), reason=FAIL_REASON.NOT_LEADER)
    h.leadership.role_changed(0, LEADER)
    await until(lambda: h.leadership.ready, "the session after a second barrier")
    assert len(commands_of(h.raft.submitted, Barrier)) >= 2
    assert [type(b.commands[0]) for b, _ in h.raft.failed] == [Barrier]
    assert h.leadership.session == 1


async def test_no_session_when_leadership_is_lost_before_the_barrier_commits(h):
    h.raft.hold()
    h.leadership.role_changed(0, LEADER)
    await until(lambda: commands_of(h.raft.submitted, Barrier), "the barrier proposal")
    h.raft.fail_when_not_leader = False  # the entry commits: leadership ends right after
    h.raft.leader_flag = False
    h.raft.release()
    await until(lambda: commands_of(h.raft.committed, Barrier), "the barrier commit")
    await turns(100)
    assert (h.leadership.ready, h.leadership.session) == (False, 0)
    assert loop_tasks() == set()


async def test_fresh_only_while_proofs_commit(leader, clock):
    assert leader.leadership.fresh()
    # Idle, the leader commits a proof every proof interval by itself.
    clock.mono += PROOF
    await until(lambda: leader.leadership.last_proof_mono == clock.mono, "an idle proof")

    proof = leader.leadership.last_proof_mono
    leader.raft.hold()
    clock.mono = proof + 3 * PROOF - 1
    assert leader.leadership.fresh()
    clock.mono = proof + 3 * PROOF
    assert not leader.leadership.fresh()
    sent = len(commands_of(leader.raft.submitted, Barrier))
    await until(lambda: len(commands_of(leader.raft.submitted, Barrier)) > sent,
                "a proof proposed (and held)")
    assert not leader.leadership.fresh()
    assert leader.leadership.ready  # still leading: only freshness is gone
    leader.raft.release()
    await until(leader.leadership.fresh, "fresh again once a proof commits")
    assert leader.leadership.last_proof_mono == proof + 3 * PROOF


async def test_demotion_stops_the_loops_and_a_new_session_rearms(leader, clock):
    job = await leader.create_job("demote")
    run_id = await leader.run_now(job)
    token = await leader.grant(run_id)
    w = Worker(leader, "w1")
    assert loop_tasks() == LOOP_TASKS and token in leader.leases.deadlines

    await leader.demote(leader=MEMBERS[1])
    assert loop_tasks() == set()
    assert not leader.leadership.fresh()
    assert w.session.closed and w.drain()[-1] is None  # the stream is told to end
    assert leader.leases.deadlines == {}
    assert leader.leader_grpc_addr() == MEMBERS[1].grpc_addr

    # Effects of entries applied while following are not routed to stopped loops.
    due = "j2"
    leader.follow(CreateJob("", make_spec("followed"), T0))
    assert due in leader.state.jobs and leader.leases.deadlines == {}
    with pytest.raises(NotCommitted):  # a follower's own proposals do not commit
        await leader.proposer.propose(Barrier())

    await leader.lead()
    assert leader.leadership.session == 2 and loop_tasks() == LOOP_TASKS
    slack = 3 * PROOF
    assert leader.leases.deadlines[token].expires_mono == clock.mono + 10_000 + slack
    # The job that became due meanwhile is fired by the new session.
    await until(lambda: f"{due}@{T0}" in leader.state.runs,
                "the due slot fired by the new session")
