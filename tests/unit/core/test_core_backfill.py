"""Backfill (issue 9): StartBackfill records the intent, BackfillStep creates the runs of
the leader's slots (trigger BACKFILL) under the overlap policy, a slot that already ran is
not run again, a stale step is a no-op, CancelBackfill stops it; ran spans."""

from __future__ import annotations

import dataclasses

import pytest

from gnomon.node.core import spans
from gnomon.node.core.commands import (
    BackfillStep,
    CancelBackfill,
    SetPaused,
    StartBackfill,
)
from gnomon.node.core.errors import Code
from gnomon.node.core.model import (
    BackfillStatus,
    OverlapPolicy,
    RunState,
    RunTrigger,
)
from gnomon.node.core.results import Done, JobReply

MIN = 60_000


def _start(h, job_id, from_ms, to_ms, total, policy=""):
    reply, effects = h.one(StartBackfill("", job_id, from_ms, to_ms, total, policy))
    assert isinstance(reply, JobReply), reply
    assert effects.backfills == [job_id]
    return h.state.jobs[job_id].backfill


def _step(h, job_id, slots, next_cursor, done=False):
    cursor = h.state.jobs[job_id].backfill.next_slot_ms
    reply, _ = h.one(BackfillStep(job_id, cursor, tuple(slots), next_cursor, done))
    assert isinstance(reply, Done), reply
    return h.state.jobs[job_id].backfill


@pytest.fixture
def late(h):
    """A job whose schedule starts at T0 + 10 min, with the cluster there."""
    job_id = h.create(next_fire_ms=h.T0 + 10 * MIN)
    h.now = h.T0 + 10 * MIN
    return job_id


def test_a_backfill_creates_the_runs_of_its_slots(h, late):
    bf = _start(h, late, h.T0, h.T0 + 3 * MIN, 3)
    assert (bf.status, bf.next_slot_ms, bf.total_slots) == (BackfillStatus.RUNNING, h.T0, 3)
    bf = _step(h, late, [h.T0, h.T0 + MIN], h.T0 + MIN + 1)
    assert (bf.created, bf.skipped, bf.status) == (2, 0, BackfillStatus.RUNNING)
    run = h.run(f"{late}@backfill-1-{h.T0}")
    assert (run.trigger, run.state, run.scheduled_for_ms) == (
        RunTrigger.BACKFILL, RunState.RUNNING, h.T0)
    bf = _step(h, late, [h.T0 + 2 * MIN], h.T0 + 3 * MIN, done=True)
    assert (bf.created, bf.status, bf.finished_ms) == (3, BackfillStatus.DONE, h.now)
    assert h.state.jobs[late].ran_spans == ((h.T0, h.T0 + 2 * MIN),)


def test_a_stale_or_retried_step_is_a_no_op(h, late):
    _start(h, late, h.T0, h.T0 + 3 * MIN, 3)
    _step(h, late, [h.T0], h.T0 + 1)
    h.unchanged(BackfillStep(late, h.T0, (h.T0,), h.T0 + 1))  # the same step again
    assert h.state.jobs[late].backfill.created == 1


def test_a_second_backfill_does_not_run_a_slot_again(h, late):
    _start(h, late, h.T0, h.T0 + 2 * MIN, 2)
    _step(h, late, [h.T0, h.T0 + MIN], h.T0 + 2 * MIN, done=True)
    _start(h, late, h.T0, h.T0 + 4 * MIN, 4)
    bf = _step(h, late, [h.T0, h.T0 + MIN, h.T0 + 2 * MIN, h.T0 + 3 * MIN], h.T0 + 4 * MIN,
               done=True)
    assert (bf.created, bf.skipped) == (2, 2)
    assert h.state.jobs[late].ran_spans == ((h.T0, h.T0 + 3 * MIN),)


def test_slots_the_schedule_ran_are_not_backfilled_but_skipped_ones_are(h):
    job_id = h.create(next_fire_ms=h.T0)
    ran = h.fire(job_id)
    skipped = h.fire(job_id, skip=True)  # misfire: it did not run
    ran2 = h.fire(job_id)
    assert h.state.jobs[job_id].ran_spans == ((h.T0, h.T0), (h.T0 + 2 * MIN, h.T0 + 2 * MIN))
    h.now += MIN
    _start(h, job_id, h.T0, h.T0 + 3 * MIN, 3)
    bf = _step(h, job_id, [h.T0, h.T0 + MIN, h.T0 + 2 * MIN], h.T0 + 3 * MIN, done=True)
    assert (bf.created, bf.skipped) == (1, 2)
    assert f"{job_id}@backfill-1-{h.T0 + MIN}" in h.state.runs
    assert {ran, skipped, ran2} <= set(h.state.runs)
    assert h.state.jobs[job_id].ran_spans == ((h.T0, h.T0 + 2 * MIN),)


def test_the_schedules_own_slots_are_not_backfilled(h, late):
    _start(h, late, h.T0, h.T0 + 10 * MIN, 10)
    h.state.jobs[late].next_fire_ms = h.T0 + MIN  # as if the schedule were due from there
    bf = _step(h, late, [h.T0, h.T0 + MIN], h.T0 + MIN + 1)
    assert (bf.created, bf.skipped) == (1, 1)


def test_the_overlap_policy_or_its_override_decides(h):
    spec = dataclasses.replace(h.spec(), overlap_policy=OverlapPolicy.SKIP, max_active_runs=1)
    job_id = h.create(spec, next_fire_ms=h.T0 + 10 * MIN)
    h.now = h.T0 + 10 * MIN
    _start(h, job_id, h.T0, h.T0 + 2 * MIN, 2)
    bf = _step(h, job_id, [h.T0, h.T0 + MIN], h.T0 + 2 * MIN, done=True)
    assert (bf.created, bf.skipped) == (1, 1)
    assert h.run(f"{job_id}@backfill-1-{h.T0 + MIN}").reason == "overlap"
    # The skipped slot did not run: another backfill may run it (a run of its own), here
    # buffered.
    _start(h, job_id, h.T0, h.T0 + 2 * MIN, 2, OverlapPolicy.BUFFER_ALL)
    bf = _step(h, job_id, [h.T0, h.T0 + MIN], h.T0 + 2 * MIN, done=True)
    assert (bf.number, bf.created, bf.skipped) == (2, 1, 1)
    assert h.run(f"{job_id}@backfill-2-{h.T0 + MIN}").state == RunState.QUEUED
    assert h.run(f"{job_id}@backfill-1-{h.T0 + MIN}").state == RunState.SKIPPED


def test_cancel_stops_it_and_later_steps_do_nothing(h, late):
    _start(h, late, h.T0, h.T0 + 3 * MIN, 3)
    _step(h, late, [h.T0], h.T0 + 1)
    reply, _ = h.one(CancelBackfill("", late))
    assert isinstance(reply, JobReply)
    bf = h.state.jobs[late].backfill
    assert (bf.status, bf.created) == (BackfillStatus.CANCELLED, 1)
    h.unchanged(BackfillStep(late, h.T0 + 1, (h.T0 + MIN,), h.T0 + MIN + 1))
    h.rejects(CancelBackfill("", late), Code.FAILED_PRECONDITION, "no backfill running")


@pytest.mark.parametrize("args, code, fragment", [
    ((0, 10, 1, "sometimes"), Code.INVALID_ARGUMENT, "overlap_policy: must be one of"),
    ((-1, 10, 1, ""), Code.INVALID_ARGUMENT, "from_ms: must be >= 0"),
    ((10, 10, 1, ""), Code.INVALID_ARGUMENT, "to_ms: must be after from_ms"),
    ((10, 10**13, 1, ""), Code.INVALID_ARGUMENT, "to_ms: must not be after now"),
    ((0, 10, -1, ""), Code.INVALID_ARGUMENT, "total_slots: must be >= 0"),
])
def test_bad_starts_are_refused_naming_the_field(h, late, args, code, fragment):
    h.rejects(StartBackfill("", late, *args), code, fragment)


def test_one_backfill_at_a_time_and_unknown_jobs(h, late):
    _start(h, late, h.T0, h.T0 + 3 * MIN, 3)
    h.rejects(StartBackfill("", late, h.T0, h.T0 + MIN, 1), Code.FAILED_PRECONDITION,
              "has a backfill running")
    h.rejects(StartBackfill("", "j99", h.T0, h.T0 + MIN, 1), Code.NOT_FOUND, "job_id")


def test_bad_steps_are_refused(h, late):
    _start(h, late, h.T0, h.T0 + 3 * MIN, 3)
    h.rejects(BackfillStep(late, h.T0, (h.T0 + MIN, h.T0), h.T0 + 2 * MIN),
              Code.INVALID_ARGUMENT, "slots_ms[1]")
    h.rejects(BackfillStep(late, h.T0, (h.T0 + 3 * MIN,), h.T0 + 4 * MIN),
              Code.INVALID_ARGUMENT, "slots_ms[0]")
    h.rejects(BackfillStep(late, h.T0, (h.T0,), h.T0), Code.INVALID_ARGUMENT, "next_cursor_ms")


def test_an_empty_range_is_done_at_once(h, late):
    bf = _start(h, late, h.T0, h.T0 + 1, 0)
    assert bf.status == BackfillStatus.DONE


def test_a_pause_closes_the_span(h):
    job_id = h.create(next_fire_ms=h.T0)
    h.fire(job_id)
    h.one(SetPaused("", job_id, True))
    h.one(SetPaused("", job_id, False, next_fire_ms=h.T0 + 5 * MIN))
    h.fire(job_id)
    assert h.state.jobs[job_id].ran_spans == ((h.T0, h.T0), (h.T0 + 5 * MIN, h.T0 + 5 * MIN))


def test_spans_merge_and_stay_bounded():
    s = spans.add((), 10, 10)
    s = spans.add(s, 10, 20)
    s = spans.add(s, 40, 40)
    assert s == ((10, 20), (40, 40))
    s = spans.add(s, 15, 45)
    assert s == ((10, 45),)
    s = spans.add(s, 1, 2)
    assert s == ((1, 2), (10, 45)) and spans.covers(s, 2) and not spans.covers(s, 5)
    bounded = ()
    for i in range(10):
        bounded = spans.add(bounded, 10 * i, 10 * i, limit=4)
    assert bounded == ((0, 60), (70, 70), (80, 80), (90, 90))
    assert all(spans.covers(bounded, x) for x in (0, 30, 60, 90))  # merged: counts as ran
