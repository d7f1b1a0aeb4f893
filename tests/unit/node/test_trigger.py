"""Trigger loop (node/leader/trigger.py): due slots -> Fire commands, chunked, CAS, misfire policy."""

from __future__ import annotations

import asyncio
import logging

import pytest
from pysyncobj import FAIL_REASON

from gnomon.node.core.commands import Barrier, CancelRun, DeleteJob, Fire, SetPaused
from gnomon.node.core.model import MisfirePolicy, RunState
from gnomon.node.core.results import Done, RunReply
from gnomon.node.leader.trigger import TriggerLimits

from .harness import HOUR, T0, commands_of, has, turns, until

SECOND = 1_000
MINUTE = 60_000


def runs_of(h, job_id: str) -> dict[int, str]:
    """scheduled_for_ms -> run state, for the job's scheduled runs in memory."""
    return {r.scheduled_for_ms: r.state for r in h.state.runs.values()
            if r.job_id == job_id and r.trigger == "schedule"}


def fires_for(batches, job_id: str, slot: int | None = None) -> list[Fire]:
    return [f for f in commands_of(batches, Fire)
            if f.job_id == job_id and (slot is None or f.scheduled_for_ms == slot)]


async def test_a_due_slot_fires_once_and_a_repeated_fire_is_a_no_op(leader, clock):
    slot = T0 + MINUTE
    job = await leader.create_job("tick", interval_ms=MINUTE, next_fire_ms=slot)
    clock.wall = slot - 1
    await turns()
    assert runs_of(leader, job) == {}  # not due yet
    clock.wall = slot
    await until(lambda: f"{job}@{slot}" in leader.state.runs, "the due slot's run")
    assert leader.state.jobs[job].next_fire_ms == slot + MINUTE
    assert len(fires_for(leader.raft.submitted, job, slot)) == 1

    # The same slot proposed again (a retry after a timeout, a deposed leader): no second run.
    assert await leader.propose(Fire(job, slot, slot + MINUTE)) == RunReply("")
    assert runs_of(leader, job) == {slot: RunState.RUNNING}
    assert leader.state.jobs[job].next_fire_ms == slot + MINUTE


async def test_the_same_slot_twice_in_one_entry_gives_one_run(h):
    job = await h.create_job("cas", interval_ms=MINUTE, next_fire_ms=T0)
    fire = Fire(job, T0, T0 + MINUTE)
    assert await h.propose(fire, fire) == [RunReply(f"{job}@{T0}"), RunReply("")]
    assert runs_of(h, job) == {T0: RunState.RUNNING}


async def test_catch_up_goes_out_in_bounded_chunks_oldest_first(make, clock):
    limits = TriggerLimits(tick_ms=5, max_fires_per_proposal=10, max_proposals_inflight=2,
                           max_slots_per_job=4)
    h = await make(trigger_limits=limits)
    await h.lead()
    jobs = [await h.create_job(f"j{k}", interval_ms=SECOND, next_fire_ms=T0 + SECOND + 10 * k,
                               anchor_ms=T0 + 10 * k)
            for k in range(5)]
    first = {job: T0 + SECOND + 10 * k for k, job in enumerate(jobs)}
    h.raft.hold()
    clock.wall = T0 + 40 * SECOND  # 40 due slots for jobs 0-3, 39 for job 4
    await until(lambda: h.proposer.inflight.get(Fire) == 2, "two chunks in flight")
    await turns(200)
    assert len(h.proposer.chunks(Fire)) == 2, "a third chunk went out while two were in flight"

    # The first chunk: the oldest slots, at most 4 per job, 10 in all.
    chunk = h.proposer.chunks(Fire)[0]
    assert [(f.job_id, f.scheduled_for_ms) for f in chunk] == (
        [(jobs[0], first[jobs[0]] + i * SECOND) for i in range(4)]
        + [(jobs[1], first[jobs[1]] + i * SECOND) for i in range(4)]
        + [(jobs[2], first[jobs[2]] + i * SECOND) for i in range(2)])

    h.raft.release()
    await until(lambda: all(h.state.jobs[j].next_fire_ms > clock.wall for j in jobs),
                "the catch-up to finish")
    assert h.proposer.max_inflight[Fire] == 2
    for call in h.proposer.chunks(Fire):
        assert len(call) <= 10
        per_job: dict[str, list[Fire]] = {}
        for f in call:
            per_job.setdefault(f.job_id, []).append(f)
        assert all(len(fs) <= 4 for fs in per_job.values()), call
        # Chained: each Fire's next slot is the following Fire's slot.
        for fs in per_job.values():
            assert all(a.next_fire_ms == b.scheduled_for_ms for a, b in zip(fs, fs[1:], strict=False))
        # Oldest first inside a chunk: jobs ordered by the slot they start at.
        starts = [fs[0].scheduled_for_ms for fs in per_job.values()]
        assert starts == sorted(starts), call
    for job in jobs:
        expected = list(range(first[job], clock.wall + 1, SECOND))
        proposed = [f.scheduled_for_ms for f in fires_for(h.raft.submitted, job)]
        assert proposed == expected  # every slot once, oldest first, none skipped
        assert runs_of(h, job) == dict.fromkeys(expected, RunState.RUNNING)


async def test_no_room_in_the_proposer_backs_off_then_catches_up_fully(make, clock, caplog):
    caplog.set_level(logging.INFO, logger="gnomon.node.leader.trigger")
    h = await make(max_pending_commands=40, max_loop_pending_commands=30, max_inflight_batches=1)
    await h.lead()
    job = await h.create_job("busy", interval_ms=SECOND, next_fire_ms=T0 + SECOND)
    h.raft.hold()
    clients = [asyncio.create_task(h.proposer.propose(Barrier()))]
    await until(lambda: h.raft.waiting() == 1, "an entry waiting for commit")
    clients += [asyncio.create_task(h.proposer.propose(Barrier())) for _ in range(30)]
    await until(lambda: h.proposer.pending() == 30, "client commands filling the queue")
    clock.wall = T0 + 20 * SECOND
    await until(lambda: "trigger backs off" in caplog.text, "the trigger to back off")
    assert h.proposer.chunks(Fire) == []
    assert "no room beyond its client reserve" in caplog.text

    h.raft.release()
    assert await asyncio.gather(*clients) == [Done()] * 31  # no client request dropped
    await until(lambda: h.state.jobs[job].next_fire_ms == T0 + 21 * SECOND, "catch-up")
    assert runs_of(h, job) == {T0 + i * SECOND: RunState.RUNNING for i in range(1, 21)}


@pytest.mark.parametrize("reason", [FAIL_REASON.LEADER_CHANGED, FAIL_REASON.NOT_LEADER,
                                    FAIL_REASON.QUEUE_FULL],
                         ids=["leader-changed", "not-leader", "pysyncobj-queue-full"])
async def test_a_chunk_that_did_not_commit_is_proposed_again(leader, clock, reason):
    job = await leader.create_job("retry", interval_ms=SECOND, next_fire_ms=T0 + SECOND)
    leader.raft.fail(has(Fire), reason=reason)
    clock.wall = T0 + 4 * SECOND
    await until(lambda: leader.state.jobs[job].next_fire_ms == T0 + 5 * SECOND, "catch-up")
    assert [reason] == [r for _, r in leader.raft.failed]
    slots = [T0 + i * SECOND for i in range(1, 5)]
    assert runs_of(leader, job) == dict.fromkeys(slots, RunState.RUNNING)
    for slot in slots:  # proposed twice (the failed chunk, then again), committed once
        assert len(fires_for(leader.raft.submitted, job, slot)) == 2
        assert len(fires_for(leader.raft.committed, job, slot)) == 1


async def test_a_chunk_whose_submit_raises_is_proposed_again(leader, clock):
    job = await leader.create_job("raises", interval_ms=MINUTE, next_fire_ms=T0 + MINUTE)
    leader.raft.refuse_submits = RuntimeError("pysyncobj stopped")
    clock.wall = T0 + MINUTE
    await until(lambda: leader.proposer.chunks(Fire), "a first chunk")
    await turns()
    assert runs_of(leader, job) == {}
    leader.raft.refuse_submits = None
    await until(lambda: runs_of(leader, job), "the slot fired after all")
    assert runs_of(leader, job) == {T0 + MINUTE: RunState.RUNNING}


async def test_paused_and_deleted_jobs_are_not_fired(leader, clock):
    slot = T0 + MINUTE
    paused_at_create = await leader.create_job("p1", next_fire_ms=slot, paused=True)
    paused_later = await leader.create_job("p2", next_fire_ms=slot)
    deleted = await leader.create_job("gone", next_fire_ms=slot)
    control = await leader.create_job("live", interval_ms=MINUTE, next_fire_ms=slot)
    await leader.propose(SetPaused("", paused_later, True))
    assert await leader.propose(DeleteJob("", deleted)) == Done()
    clock.wall = slot
    await until(lambda: f"{control}@{slot}" in leader.state.runs, "the control job's run")
    clock.wall = slot + MINUTE  # one more pass over the heap
    await until(lambda: f"{control}@{slot + MINUTE}" in leader.state.runs, "a second pass")
    for job in (paused_at_create, paused_later, deleted):
        assert fires_for(leader.raft.submitted, job) == []
        assert runs_of(leader, job) == {}

    # Resumed: the next slot after now, not the paused period.
    resume_at = clock.wall + MINUTE
    await leader.propose(SetPaused("", paused_later, False, resume_at))
    await turns()
    assert fires_for(leader.raft.submitted, paused_later) == []
    clock.wall = resume_at
    await until(lambda: runs_of(leader, paused_later), "the resumed job's slot")
    assert runs_of(leader, paused_later) == {resume_at: RunState.RUNNING}


# Five slots a minute apart, the newest 45 s late; the next one (15 s ahead) is not due.
S = [T0 - 45_000 - (4 - k) * MINUTE for k in range(5)]
RUN, SKIP = RunState.RUNNING, RunState.SKIPPED


@pytest.mark.parametrize("policy, grace, expected", [
    (MisfirePolicy.RUN_ALL, 30_000, [RUN, RUN, RUN, RUN, RUN]),
    (MisfirePolicy.SKIP, 30_000, [SKIP, SKIP, SKIP, SKIP, SKIP]),
    (MisfirePolicy.RUN_LATEST, 30_000, [SKIP, SKIP, SKIP, SKIP, RUN]),
    # Within the grace a slot is on time whatever the policy (0 = the default, 60 s).
    (MisfirePolicy.SKIP, 0, [SKIP, SKIP, SKIP, SKIP, RUN]),
    (MisfirePolicy.SKIP, 50_000, [SKIP, SKIP, SKIP, SKIP, RUN]),
    (MisfirePolicy.RUN_LATEST, 50_000, [SKIP, SKIP, SKIP, SKIP, RUN]),
    (MisfirePolicy.RUN_LATEST, 120_000, [SKIP, SKIP, SKIP, RUN, RUN]),
])
async def test_misfire_policy_decides_slot_by_slot(make, policy, grace, expected):
    h = await make()
    job = await h.create_job(
        "late", interval_ms=MINUTE, anchor_ms=S[0], next_fire_ms=S[0], misfire_policy=policy,
        misfire_grace_ms=grace)
    await h.lead()  # the new leader finds five due slots in the replicated state
    await until(lambda: h.state.jobs[job].next_fire_ms == S[4] + MINUTE, "the catch-up")
    assert runs_of(h, job) == dict(zip(S, expected, strict=True))
    assert [f.skip for f in fires_for(h.raft.committed, job)] == [e == SKIP for e in expected]


async def test_stop_returns_while_proposals_are_pending(make, clock):
    h = await make(trigger_limits=TriggerLimits(tick_ms=5, max_fires_per_proposal=3,
                                                max_proposals_inflight=1, max_slots_per_job=3))
    await h.lead()
    await h.create_job("stuck", interval_ms=SECOND, next_fire_ms=T0 + SECOND)
    h.raft.hold()
    clock.wall = T0 + 30 * SECOND
    await until(lambda: h.proposer.inflight.get(Fire) == 1, "a chunk waiting for commit")
    await turns()  # the loop now waits for the in-flight chunk
    async with asyncio.timeout(2):
        await h.trigger.stop()
    names = {t.get_name() for t in asyncio.all_tasks() if not t.done()}
    assert not names & {"trigger", "trigger-propose"}, names
    assert h.proposer.inflight.get(Fire) == 0
    h.raft.release()
    await until(lambda: h.raft.waiting() == 0, "the held entry to commit")
    await turns()
    assert len(h.proposer.chunks(Fire)) == 1  # nothing proposed after stop


# --- jitter, spread and bounds (issue 9) -----------------------------------------------------


async def test_jitter_delays_the_fire_and_the_draw_goes_into_the_command(leader, clock):
    slot = T0 + MINUTE
    job = await leader.create_job("jittery", interval_ms=MINUTE, next_fire_ms=slot,
                                  jitter_ms=20 * SECOND)
    draw = leader.trigger.delay_ms(job, slot, leader.state.jobs[job].spec)
    assert 0 <= draw <= 20 * SECOND
    assert leader.trigger.delay_ms(job, slot, leader.state.jobs[job].spec) == draw  # one draw
    if draw:
        clock.wall = slot + draw - 1
        await turns()
        assert runs_of(leader, job) == {}  # the slot is past, its due time is not
    clock.wall = slot + draw
    await until(lambda: f"{job}@{slot}" in leader.state.runs, "the jittered run")
    [fire] = fires_for(leader.raft.submitted, job, slot)
    assert fire.delay_ms == draw
    run = leader.state.runs[f"{job}@{slot}"]
    assert (run.scheduled_for_ms, run.fire_delay_ms) == (slot, draw)


async def test_jitter_draws_differ_between_slots_and_stay_in_bounds(leader):
    job = await leader.create_job("spread-draws", interval_ms=MINUTE, jitter_ms=30 * SECOND)
    spec = leader.state.jobs[job].spec
    draws = {leader.trigger.delay_ms(job, T0 + k * MINUTE, spec) for k in range(50)}
    assert len(draws) > 10 and all(0 <= d <= 30 * SECOND for d in draws)


async def test_the_spread_window_ramps_a_herd_by_a_hash_of_the_job_id(make, clock):
    h = await make(trigger_limits=TriggerLimits(tick_ms=5, spread_window_ms=60 * SECOND))
    await h.lead()
    slot = T0 + HOUR
    jobs = [await h.create_job(f"herd-{k}", interval_ms=HOUR, next_fire_ms=slot)
            for k in range(40)]
    delays = {j: h.trigger.delay_ms(j, slot, h.state.jobs[j].spec) for j in jobs}
    assert len(set(delays.values())) > 30 and all(0 <= d < 60 * SECOND for d in delays.values())
    # The same job gets the same offset on any leader (a hash, not a draw).
    assert delays[jobs[0]] == h.trigger.delay_ms(jobs[0], slot + HOUR, h.state.jobs[jobs[0]].spec)
    clock.wall = slot + 30 * SECOND
    await until(lambda: sum(f"{j}@{slot}" in h.state.runs for j in jobs)
                == sum(d <= 30 * SECOND for d in delays.values()), "the first half of the ramp")
    await turns(20)
    fired = {j for j in jobs if f"{j}@{slot}" in h.state.runs}
    assert fired == {j for j, d in delays.items() if d <= 30 * SECOND}
    clock.wall = slot + 60 * SECOND
    await until(lambda: all(f"{j}@{slot}" in h.state.runs for j in jobs), "the whole herd")


async def test_a_delayed_fire_is_not_a_misfire(leader, clock):
    slot = T0 + MINUTE
    job = await leader.create_job("late-ok", interval_ms=10 * MINUTE, next_fire_ms=slot,
                                  jitter_ms=5 * MINUTE, misfire_policy=MisfirePolicy.SKIP,
                                  misfire_grace_ms=SECOND)
    draw = leader.trigger.delay_ms(job, slot, leader.state.jobs[job].spec)
    clock.wall = slot + draw
    await until(lambda: f"{job}@{slot}" in leader.state.runs, "the run")
    assert leader.state.runs[f"{job}@{slot}"].state == RunState.RUNNING


async def test_end_at_and_max_runs_stop_the_schedule(leader, clock):
    slot = T0 + MINUTE
    ending = await leader.create_job("ending", interval_ms=MINUTE, next_fire_ms=slot,
                                     end_at_ms=slot + MINUTE)
    bounded = await leader.create_job("bounded", interval_ms=MINUTE, next_fire_ms=slot,
                                      max_runs=2)
    clock.wall = slot + 5 * MINUTE
    await until(lambda: not leader.state.jobs[ending].next_fire_ms
                and not leader.state.jobs[bounded].next_fire_ms, "both schedules ended")
    assert sorted(runs_of(leader, ending)) == [slot, slot + MINUTE]
    assert sorted(runs_of(leader, bounded)) == [slot, slot + MINUTE]
    assert leader.state.jobs[bounded].runs_started == 2


def ready_tasks(h, queue: str = "default") -> list[tuple[str, int]]:
    """(job_id, slot) of the READY tasks on `queue`, oldest slot first."""
    return sorted((r.job_id, r.scheduled_for_ms) for r in h.state.runs.values()
                  for t in r.tasks.values() if t.state == "ready" and r.spec.task(
                      t.task_name).queue == queue)


async def test_fires_wait_while_their_queue_backlog_is_at_the_bound(make, clock):
    """Admission: past the bound a queue's fires wait in the trigger (late, not lost, not
    doubled); another queue is not held back; cancelled tasks stop counting."""
    limits = TriggerLimits(tick_ms=5, max_fires_per_proposal=10, max_slots_per_job=4,
                           max_ready_per_queue=6)
    h = await make(trigger_limits=limits)
    await h.lead()
    jobs = [await h.create_job(f"j{k}", interval_ms=SECOND, next_fire_ms=T0 + SECOND)
            for k in range(3)]
    other = await h.create_job("other", interval_ms=SECOND, next_fire_ms=T0 + SECOND,
                               queue="elsewhere")
    clock.wall = T0 + 20 * SECOND  # 20 due slots per job
    # The stable state: both queues at the bound and all four jobs parked (waiting for only
    # the default queue's three raced the other queue filling up).
    await until(lambda: len(ready_tasks(h)) == 6 and len(ready_tasks(h, "elsewhere")) == 6
                and h.trigger.parked() == 4, "both queues at their bound, their jobs parked")
    await turns(200)
    assert len(ready_tasks(h)) == 6, "fires went past the bound"
    assert len(ready_tasks(h, "elsewhere")) == 6, "a full queue held back another queue"

    # Every slot fires once, in order, as the backlog is cancelled away (the heap entries
    # of cancelled tasks linger until the trigger has the count made exact).
    fired: list[tuple[str, int]] = []
    while len(fired) < 3 * 20:
        batch = ready_tasks(h)
        assert 0 < len(batch) <= 6
        fired += batch
        for job_id, slot in batch:
            await h.propose(CancelRun("", f"{job_id}@{slot}"))
        clock.wall += SECOND
        if len(fired) < 60:
            await until(lambda: ready_tasks(h), "fires after the backlog fell")
    assert sorted(fired) == sorted((j, T0 + k * SECOND) for j in jobs for k in range(1, 21))
    assert h.state.jobs[other].next_fire_ms <= T0 + 8 * SECOND  # still held at its bound


async def test_a_full_queue_still_records_the_slots_a_misfire_policy_skips(make, clock):
    limits = TriggerLimits(tick_ms=5, max_fires_per_proposal=50, max_slots_per_job=50,
                           max_ready_per_queue=2)
    h = await make(trigger_limits=limits)
    await h.lead()
    filler = await h.create_job("filler", interval_ms=SECOND, next_fire_ms=T0 + SECOND)
    clock.wall = T0 + 3 * SECOND
    await until(lambda: len(ready_tasks(h)) == 2, "the filler's runs fill the queue")
    skipper = await h.create_job("skipper", interval_ms=SECOND, next_fire_ms=T0 + SECOND,
                                 misfire_policy=MisfirePolicy.SKIP, misfire_grace_ms=SECOND)
    clock.wall = T0 + 20 * SECOND
    # The skipper's late slots (1-18 s; the grace is 1 s) are recorded SKIPPED although the
    # queue is at its bound; its on-time slot (19 s) waits like the filler's.
    await until(lambda: h.state.jobs[skipper].next_fire_ms == T0 + 19 * SECOND,
                "the skipped slots recorded")
    await turns(200)
    assert runs_of(h, skipper) == {T0 + k * SECOND: RunState.SKIPPED for k in range(1, 19)}
    assert h.state.jobs[skipper].next_fire_ms == T0 + 19 * SECOND
    assert len(ready_tasks(h)) == 2 and h.trigger.parked() == 2
    assert h.state.jobs[filler].next_fire_ms == T0 + 3 * SECOND


async def test_an_undelayed_heap_entry_holds_one_int_for_due_and_slot(leader, clock):
    """A heap of every job: without jitter or spread, the due time is the slot's object."""
    slot = T0 + 10 * HOUR + 12_345
    job = await leader.create_job("far", interval_ms=HOUR, next_fire_ms=slot)
    await until(lambda: any(e[2] == job for e in leader.trigger._heap), "the job's heap entry")
    due, at, _ = next(e for e in leader.trigger._heap if e[2] == job)
    assert due == at == slot and due is at
