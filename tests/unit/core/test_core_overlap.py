"""Overlap policies and max_active_runs: what a fire (scheduled or manual) does while runs of
its job are active; decided in apply, so it cannot race with the end of a run."""

from __future__ import annotations

import dataclasses

import pytest

from gnomon.node.core.commands import (
    CancelRun,
    CompleteTask,
    CreateJob,
    DeleteJob,
    ExpiredLease,
    ExpireLeases,
    Fire,
    TriggerJob,
    UpdateJob,
)
from gnomon.node.core.errors import Code
from gnomon.node.core.model import OverlapPolicy, RunState, RunTrigger, TaskState
from gnomon.node.core.results import RunReply

P = OverlapPolicy


def _spec(h, policy, tasks=None, name="nightly", **fields):
    return dataclasses.replace(h.spec(tasks, name=name), overlap_policy=policy, **fields)


def _busy(h, policy, **fields):
    """A job of `policy` whose first run is active (its task leased)."""
    job_id = h.create(_spec(h, policy, **fields), next_fire_ms=h.T0)
    first = h.fire(job_id)
    h.grant(first, "a")
    return job_id, first


def _done(h, run_id):
    """Complete task "a" of the run, leased already or not."""
    inst = h.inst(run_id, "a")
    token = inst.fencing_token if inst.state == TaskState.LEASED else h.grant(run_id, "a")
    _, effects = h.one(CompleteTask(run_id, "a", token, b""))
    return effects


class TestDecisionTable:
    @pytest.mark.parametrize("policy, second_state, reason", [
        (P.ALLOW_ALL, RunState.RUNNING, ""),
        (P.SKIP, RunState.SKIPPED, "overlap"),
        (P.BUFFER_ONE, RunState.QUEUED, "overlap: waiting for 1 active run"),
        (P.BUFFER_ALL, RunState.QUEUED, "overlap: waiting for 1 active run"),
        (P.CANCEL_OTHER, RunState.QUEUED, "overlap: waiting for 1 active run"),
        (P.TERMINATE_OTHER, RunState.RUNNING, ""),
    ])
    def test_second_fire_while_the_first_runs(self, h, policy, second_state, reason):
        job_id, first = _busy(h, policy)
        second = h.fire(job_id)
        assert (h.run(second).state, h.run(second).reason) == (second_state, reason)
        assert second == f"{job_id}@{h.T0 + h.INTERVAL}"  # the slot is consumed whatever

    def test_no_active_run_starts_under_every_policy(self, h):
        for i, policy in enumerate((P.SKIP, P.BUFFER_ONE, P.CANCEL_OTHER)):
            job_id = h.create(_spec(h, policy, name=f"n{i}"), next_fire_ms=h.T0)
            run_id = h.fire(job_id)
            _done(h, run_id)
            assert h.run(h.fire(job_id)).state == RunState.RUNNING

    def test_skip_records_the_reason_and_keeps_one_active(self, h):
        job_id, first = _busy(h, P.SKIP)
        skipped = [h.fire(job_id) for _ in range(3)]
        assert all(h.run(r).state == RunState.SKIPPED for r in skipped)
        assert all(h.run(r).tasks == {} for r in skipped)
        assert h.state.running_by_job[job_id] == {first: None}
        _done(h, first)
        assert h.run(h.fire(job_id)).state == RunState.RUNNING

    def test_max_active_runs_bounds_skip(self, h):
        job_id, first = _busy(h, P.SKIP, max_active_runs=2)
        second = h.fire(job_id)
        third = h.fire(job_id)
        assert [h.run(r).state for r in (second, third)] == [RunState.RUNNING, RunState.SKIPPED]


class TestBuffer:
    def test_buffer_one_keeps_one_and_skips_the_rest(self, h):
        job_id, first = _busy(h, P.BUFFER_ONE)
        queued = h.fire(job_id)
        extra = h.fire(job_id)
        assert h.run(extra).state == RunState.SKIPPED
        assert h.run(extra).reason == "overlap: buffer full (1 queued)"
        effects = _done(h, first)
        run = h.run(queued)
        assert run.state == RunState.RUNNING and run.reason == ""
        assert h.task_states(queued) == {"a": TaskState.READY}
        assert (queued, "a") in effects.dispatchable
        assert job_id not in h.state.queued_by_job

    def test_buffer_all_is_bounded_and_starts_oldest_first(self, h):
        job_id, first = _busy(h, P.BUFFER_ALL, max_buffered_runs=3)
        fired = [h.fire(job_id) for _ in range(4)]
        assert [h.run(r).state for r in fired] == [RunState.QUEUED] * 3 + [RunState.SKIPPED]
        order = [first]
        for _ in range(3):
            _done(h, order[-1])
            running = list(h.state.running_by_job[job_id])
            assert len(running) == 1
            order.append(running[0])
        assert order[1:] == fired[:3]

    def test_a_failed_or_cancelled_run_frees_its_slot_too(self, h):
        job_id, first = _busy(h, P.BUFFER_ONE)
        queued = h.fire(job_id)
        h.one(CancelRun("", first, "by hand"))
        assert h.run(first).reason == "by hand"
        assert h.run(queued).state == RunState.RUNNING

    def test_cancelling_a_queued_run(self, h):
        job_id, first = _busy(h, P.BUFFER_ALL)
        queued = h.fire(job_id)
        reply, _ = h.one(CancelRun("", queued, "no longer needed"))
        assert reply == RunReply(queued)
        assert (h.run(queued).state, h.run(queued).reason) == (
            RunState.CANCELLED, "no longer needed")
        assert h.run(queued).finished_ms == h.now
        _done(h, first)
        assert job_id not in h.state.running_by_job

    def test_raising_max_active_runs_starts_buffered_runs(self, h):
        job_id, first = _busy(h, P.BUFFER_ALL)
        queued = [h.fire(job_id), h.fire(job_id)]
        spec = _spec(h, P.BUFFER_ALL, max_active_runs=3)
        h.one(UpdateJob("", job_id, spec, 0, 0))
        assert [h.run(r).state for r in queued] == [RunState.RUNNING] * 2

    def test_deleting_the_job_cancels_queued_runs(self, h):
        job_id, first = _busy(h, P.BUFFER_ALL)
        queued = h.fire(job_id)
        h.one(DeleteJob("", job_id))
        assert h.run(first).state == RunState.RUNNING  # its leased task may finish
        assert queued not in h.state.runs  # ended and, the job gone, evicted
        assert job_id not in h.state.queued_by_job


class TestCancelOther:
    def test_cancel_other_waits_for_leased_tasks(self, h):
        job_id = h.create(_spec(h, P.CANCEL_OTHER, {"a": [], "b": [], "c": ["a"]}),
                          next_fire_ms=h.T0)
        first = h.fire(job_id)
        token = h.grant(first, "a")
        second = h.fire(job_id)
        old = h.run(first)
        assert old.cancel_requested and old.reason == f"overlap: cancelled for {second}"
        assert h.task_states(first) == {"a": TaskState.LEASED, "b": TaskState.CANCELLED,
                                        "c": TaskState.CANCELLED}
        assert h.run(second).state == RunState.QUEUED
        # The leased task fails retryably: no retry, its dependents never start.
        _, effects = h.one(ExpireLeases((ExpiredLease(first, "a", token),)))
        assert h.task_states(first) == {"a": TaskState.CANCELLED, "b": TaskState.CANCELLED,
                                        "c": TaskState.CANCELLED}
        assert old.state == RunState.CANCELLED
        assert h.run(second).state == RunState.RUNNING
        assert effects.cancelled == []  # nobody was told to stop: the lease had ended

    def test_cancel_other_with_nothing_leased_starts_at_once(self, h):
        job_id = h.create(_spec(h, P.CANCEL_OTHER), next_fire_ms=h.T0)
        first = h.fire(job_id)  # ready, not leased
        second = h.fire(job_id)
        assert h.run(first).state == RunState.CANCELLED
        assert h.run(second).state == RunState.RUNNING

    def test_a_leased_task_that_succeeds_ends_the_run_as_it_did(self, h):
        job_id, first = _busy(h, P.CANCEL_OTHER)
        second = h.fire(job_id)
        h.one(CompleteTask(first, "a", h.inst(first, "a").fencing_token, b""))
        assert h.run(first).state == RunState.SUCCEEDED
        assert h.run(second).state == RunState.RUNNING

    def test_a_newer_fire_supersedes_the_queued_one(self, h):
        job_id, first = _busy(h, P.CANCEL_OTHER)
        second = h.fire(job_id)
        third = h.fire(job_id)
        assert (h.run(second).state, h.run(second).reason) == (
            RunState.CANCELLED, f"overlap: superseded by {third}")
        assert h.run(third).state == RunState.QUEUED
        assert h.run(first).reason == f"overlap: cancelled for {second}"  # asked once


class TestTerminateOther:
    def test_terminate_cancels_leases_and_tells_the_worker(self, h):
        job_id, first = _busy(h, P.TERMINATE_OTHER)
        token = h.inst(first, "a").fencing_token
        slot = h.state.jobs[job_id].next_fire_ms
        h.now = slot
        reply, effects = h.one(Fire(job_id, slot, slot + h.INTERVAL))
        second = reply.run_id
        reason = f"overlap: terminated for {second}"
        assert effects.cancelled == [(first, "a", token, reason, "w1")]
        assert (h.run(first).state, h.run(first).reason) == (RunState.CANCELLED, reason)
        assert h.run(second).state == RunState.RUNNING
        assert h.inst(first, "a").attempts[-1].error == reason

    def test_terminate_with_max_active_runs_two_cancels_the_oldest(self, h):
        job_id, first = _busy(h, P.TERMINATE_OTHER, max_active_runs=2)
        second = h.fire(job_id)
        third = h.fire(job_id)
        assert [h.run(r).state for r in (first, second, third)] == [
            RunState.CANCELLED, RunState.RUNNING, RunState.RUNNING]


class TestManualTrigger:
    def test_a_trigger_honours_the_jobs_policy(self, h):
        job_id, first = _busy(h, P.SKIP)
        reply, _ = h.one(TriggerJob("", job_id))
        run = h.run(reply.run_id)
        assert (run.state, run.reason, run.trigger) == (
            RunState.SKIPPED, "overlap", RunTrigger.MANUAL)

    def test_a_trigger_may_override_it(self, h):
        job_id, first = _busy(h, P.SKIP)
        reply, _ = h.one(TriggerJob("", job_id, P.ALLOW_ALL))
        assert h.run(reply.run_id).state == RunState.RUNNING
        other = h.create(dataclasses.replace(h.spec(), name="other"), next_fire_ms=h.T0)
        busy = h.fire(other)
        reply, _ = h.one(TriggerJob("", other, P.BUFFER_ONE))
        assert h.run(reply.run_id).state == RunState.QUEUED
        assert h.run(busy).state == RunState.RUNNING

    def test_an_unknown_override_is_rejected(self, h):
        job_id, _ = _busy(h, P.SKIP)
        h.rejects(TriggerJob("", job_id, "sometimes"), Code.INVALID_ARGUMENT, "overlap_policy")


class TestMisfireReason:
    def test_a_misfire_skip_says_so(self, h):
        job_id = h.create(next_fire_ms=h.T0)
        assert h.run(h.fire(job_id, skip=True)).reason == "misfire"


class TestValidation:
    @pytest.mark.parametrize("fields, fragment", [
        ({"overlap_policy": P.SKIP, "max_active_runs": 0}, "spec.max_active_runs: must be >= 1"),
        ({"overlap_policy": P.ALLOW_ALL, "max_active_runs": 2},
         "spec.max_active_runs: ALLOW_ALL starts every fire"),
        ({"overlap_policy": P.BUFFER_ONE, "max_buffered_runs": 5},
         "spec.max_buffered_runs: applies to overlap policy buffer_all only"),
        ({"overlap_policy": P.BUFFER_ALL, "max_buffered_runs": -1},
         "spec.max_buffered_runs: must be >= 0"),
        ({"overlap_policy": "later"}, "spec.overlap_policy: must be one of"),
    ])
    def test_create_rejects(self, h, fields, fragment):
        spec = dataclasses.replace(h.spec(), **fields)
        h.rejects(CreateJob("", spec, h.T0), Code.INVALID_ARGUMENT, fragment)
