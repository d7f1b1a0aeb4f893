"""Lease table (node/leader/leases.py): re-arm, renew, expiry, Hello, checkpoints, retries."""

from __future__ import annotations

import asyncio
import logging

from pysyncobj import FAIL_REASON

from gnomon.node.core.commands import (
    Barrier,
    CheckpointLeases,
    ExpireLeases,
    LeaseCheckpoint,
)
from gnomon.node.core.model import AttemptOutcome, TaskState

from .harness import T0, commands_of, has, until

TTL = 10_000  # harness config lease_ttl_ms
SLACK = 3 * 50  # ack_slack_ms: 3 proof intervals of 50 ms


def expired_tokens(h) -> list[int]:
    return [e.fencing_token for cmd in commands_of(h.raft.committed, ExpireLeases)
            for e in cmd.leases]


async def leased_runs(h, n: int, worker: str = "w1", **spec) -> list[tuple[str, int]]:
    job = await h.create_job(f"lease-{worker}-{len(h.state.jobs)}", **spec)
    out = []
    for _ in range(n):
        run_id = await h.run_now(job)
        out.append((run_id, await h.grant(run_id, worker=worker)))
    return out


async def test_a_new_leader_rearms_at_the_checkpoint_or_a_ttl_plus_slack(make, clock):
    h = await make()
    (r1, t1), (r2, t2), (r3, t3) = await leased_runs(h, 3)
    clock.wall = T0 + 1_000
    await h.propose(CheckpointLeases((LeaseCheckpoint(r2, "a", t2, 3_000),
                                      LeaseCheckpoint(r3, "a", t3, 500))))
    assert h.inst(r2).lease_checkpoint_ms == T0 + 1_000
    clock.wall = T0 + 2_000
    mono = clock.mono
    await h.lead()
    d = h.leases.deadlines
    assert d[t1].expires_mono == mono + TTL + SLACK  # no checkpoint: a full TTL
    assert d[t2].expires_mono == mono + 2_000 + SLACK  # ends at T0 + 4000 as checkpointed
    assert d[t3].expires_mono == mono + SLACK  # its checkpointed deadline has passed

    clock.mono = mono + SLACK
    await until(lambda: h.inst(r3).state != TaskState.LEASED, "the passed lease to expire")
    assert (h.inst(r1).state, h.inst(r2).state) == (TaskState.LEASED, TaskState.LEASED)
    clock.mono = mono + 2_000 + SLACK
    await until(lambda: h.inst(r2).state != TaskState.LEASED, "the checkpointed lease")
    assert h.inst(r1).state == TaskState.LEASED
    clock.mono = mono + TTL + SLACK
    await until(lambda: h.inst(r1).state != TaskState.LEASED, "the full-TTL lease")
    assert sorted(expired_tokens(h)) == [t1, t2, t3]


async def test_expiry_proposes_expire_leases_and_the_task_leaves_leased(leader, clock):
    [(run_id, token)] = await leased_runs(leader, 1)
    assert leader.leases.deadlines[token].expires_mono == clock.mono + TTL  # armed by the grant
    clock.mono += TTL - 1
    assert leader.leases.holder(token) is not None
    clock.mono += 1
    await until(lambda: leader.inst(run_id).state == TaskState.RETRY_WAIT, "the expiry")
    [cmd] = commands_of(leader.raft.committed, ExpireLeases)
    assert [(e.run_id, e.task_name, e.fencing_token, e.reason) for e in cmd.leases] == [
        (run_id, "a", token, "lease expired")]
    attempt = leader.inst(run_id).attempts[-1]
    assert (attempt.outcome, attempt.error, attempt.fencing_token) == (
        AttemptOutcome.EXPIRED, "lease expired", token)
    await until(lambda: leader.leases.holder(token) is None, "the table to forget the lease")


async def test_a_task_timeout_expires_the_attempt_on_the_wall_clock(leader, clock):
    [(run_id, token)] = await leased_runs(leader, 1, timeout_ms=5_000)
    clock.wall += 5_000  # monotonic time stands still: the lease itself is fine
    await until(lambda: leader.inst(run_id).state != TaskState.LEASED, "the timeout")
    [cmd] = commands_of(leader.raft.committed, ExpireLeases)
    assert [(e.fencing_token, e.reason) for e in cmd.leases] == [(token, "timeout")]


async def test_renew_moves_the_deadline_of_the_holders_leases_only(leader, clock):
    [(renewed, t1), (quiet, t2)] = await leased_runs(leader, 2)
    [(_, other)] = await leased_runs(leader, 1, worker="w2")
    start = clock.mono
    clock.mono += 8_000
    assert leader.leases.renew("w1", [t1, other, 999_999]) == ([t1], [other, 999_999])
    assert leader.leases.deadlines[t1].expires_mono == clock.mono + TTL
    clock.mono = start + TTL  # past the first deadline, before the renewed one
    await until(lambda: leader.inst(quiet).state != TaskState.LEASED, "the quiet lease")
    assert leader.inst(renewed).state == TaskState.LEASED
    assert t1 not in expired_tokens(leader)
    clock.mono = start + 8_000 + TTL
    await until(lambda: leader.inst(renewed).state != TaskState.LEASED, "the renewed lease")


async def test_an_expiring_lease_is_not_renewed(leader, clock):
    [(run_id, token)] = await leased_runs(leader, 1)
    leader.raft.hold()
    clock.mono += TTL
    await until(lambda: commands_of(leader.raft.submitted, ExpireLeases), "the expiry proposal")
    assert leader.leases.renew("w1", [token]) == ([], [token])
    leader.raft.release()
    await until(lambda: leader.inst(run_id).state != TaskState.LEASED, "the expiry")


async def test_hello_expires_unlisted_leases_at_once_and_renews_listed_ones(leader, clock):
    [(kept, t1), (lost, t2)] = await leased_runs(leader, 2)
    clock.mono += 5_000
    assert leader.leases.reconnected("w1", [t1, 424_242]) == ([t1], [424_242])
    assert leader.leases.deadlines[t1].expires_mono == clock.mono + TTL
    await until(lambda: leader.inst(lost).state != TaskState.LEASED, "the unlisted lease")
    assert expired_tokens(leader) == [t2]
    assert leader.inst(kept).state == TaskState.LEASED


async def test_a_quiet_lease_is_checkpointed_once_and_cleared_when_renewed(leader, clock):
    [(run_id, token)] = await leased_runs(leader, 1)
    granted = clock.mono
    stale_after = 2_000 * 3 // 2  # 1.5 heartbeat intervals
    assert leader.leases.checkpoints_due(granted + stale_after - 1, clock.wall) == []
    due = leader.leases.checkpoints_due(granted + stale_after, clock.wall)
    left = TTL - stale_after
    assert due == [(LeaseCheckpoint(run_id, "a", token, left), clock.wall + left)]

    clock.mono = granted + stale_after  # the checkpoint loop writes it down
    await until(lambda: leader.inst(run_id).lease_remaining_ms == left, "the checkpoint")
    # The table learns that the log holds it once the proposal returns.
    await until(lambda: leader.leases.deadlines[token].checkpoint_wall_ms, "the table to know")
    assert leader.inst(run_id).lease_checkpoint_ms == leader.state.clock_ms
    assert len(commands_of(leader.raft.committed, CheckpointLeases)) == 1
    # Written down once: while the worker stays quiet the logged deadline is right.
    assert leader.leases.checkpoints_due(clock.mono, clock.wall) == []
    assert leader.leases.checkpoints_due(clock.mono + 15, clock.wall + 15) == []

    clock.mono += 10
    assert leader.leases.renew("w1", [token]) == ([token], [])
    assert leader.leases.checkpoints_due(clock.mono, clock.wall) == [
        (LeaseCheckpoint(run_id, "a", token, 0), 0)]
    await until(lambda: leader.inst(run_id).lease_remaining_ms == 0, "the checkpoint cleared")
    await until(lambda: not leader.leases.deadlines[token].checkpoint_wall_ms, "the table")
    assert leader.inst(run_id).lease_checkpoint_ms == 0
    assert leader.leases.checkpoints_due(clock.mono, clock.wall) == []


async def test_a_failed_expiry_proposal_is_retried(leader, clock):
    [(run_id, token)] = await leased_runs(leader, 1)
    leader.raft.fail(has(ExpireLeases), reason=FAIL_REASON.LEADER_CHANGED)
    clock.mono += TTL
    await until(lambda: leader.inst(run_id).state != TaskState.LEASED, "the retried expiry")
    submitted = [e.fencing_token for cmd in commands_of(leader.raft.submitted, ExpireLeases)
                 for e in cmd.leases]
    assert submitted == [token, token]
    assert expired_tokens(leader) == [token]


async def test_an_expiry_refused_as_overloaded_is_retried(make, clock, caplog):
    caplog.set_level(logging.WARNING, logger="gnomon.node.leader.leases")
    h = await make(max_pending_commands=5, max_inflight_batches=1)
    await h.lead()
    [(run_id, token)] = await leased_runs(h, 1)
    h.raft.hold()
    clients = [asyncio.create_task(h.proposer.propose(Barrier()))]
    await until(lambda: h.raft.waiting() == 1, "an entry waiting for commit")
    clients += [asyncio.create_task(h.proposer.propose(Barrier())) for _ in range(5)]
    await until(lambda: h.proposer.pending() == 5, "a full proposer queue")
    clock.mono += TTL
    await until(lambda: "lease expiry not committed" in caplog.text, "an Overloaded expiry")
    assert h.inst(run_id).state == TaskState.LEASED
    h.raft.release()
    await asyncio.gather(*clients)
    await until(lambda: h.inst(run_id).state != TaskState.LEASED, "the retried expiry")
    assert expired_tokens(h) == [token]
