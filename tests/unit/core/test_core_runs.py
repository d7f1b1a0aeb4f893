"""Fire (compare-and-set), TriggerJob, CancelRun and run retention."""

from __future__ import annotations

import pytest

from gnomon.node.core.commands import (
    CancelRun,
    CompleteTask,
    Fire,
    GrantLeases,
    LeaseGrant,
    SetPaused,
    TriggerJob,
    UpdateJob,
)
from gnomon.node.core.errors import Code
from gnomon.node.core.model import RunState, RunTrigger, TaskState
from gnomon.node.core.results import RunReply


class TestFire:
    def test_creates_run_and_advances_slot(self, h):
        job_id = h.create(h.spec({"a": [], "b": [], "c": ["a", "b"]}), next_fire_ms=h.T0)
        h.now = h.T0 + 30
        reply, effects = h.one(Fire(job_id, h.T0, h.T0 + 100))
        run_id = f"{job_id}@{h.T0}"
        assert reply == RunReply(run_id)
        run = h.run(run_id)
        assert (run.state, run.trigger, run.scheduled_for_ms) == (
            RunState.RUNNING, RunTrigger.SCHEDULE, h.T0)
        assert run.created_ms == h.T0 + 30 and run.job_version == 1 and run.tenant == "acme"
        assert h.task_states(run_id) == {"a": "ready", "b": "ready", "c": "pending"}
        assert h.inst(run_id, "a").ready_ms == h.T0 + 30
        assert h.inst(run_id, "c").idempotency_key == f"{run_id}:c"
        assert effects.dispatchable == [(run_id, "a"), (run_id, "b")]
        assert effects.jobs == [job_id]
        job = h.state.jobs[job_id]
        assert job.next_fire_ms == h.T0 + 100 and job.version == 1
        assert list(h.state.runs_by_job[job_id]) == [run_id]

    def test_second_fire_for_same_slot_is_noop(self, h):
        job_id = h.create(next_fire_ms=h.T0)
        h.one(Fire(job_id, h.T0, h.T0 + 100))
        reply = h.unchanged(Fire(job_id, h.T0, h.T0 + 100))
        assert reply == RunReply("")
        assert len(h.state.runs) == 1

    def test_duplicate_in_one_batch_creates_one_run(self, h):
        job_id = h.create(next_fire_ms=h.T0)
        fire = Fire(job_id, h.T0, h.T0 + 100)
        replies, _ = h.apply(fire, fire)
        assert replies == [RunReply(f"{job_id}@{h.T0}"), RunReply("")]

    @pytest.mark.parametrize(
        "job_id, slot, paused",
        [("j9", 1_000_000, False), ("j1", 999, False), ("j1", 0, False), ("j1", 1_000_000, True)],
    )
    def test_noops(self, h, job_id, slot, paused):
        h.create(h.spec(paused=paused), next_fire_ms=h.T0)
        assert h.unchanged(Fire(job_id, slot, slot + 1)) == RunReply("")

    def test_zero_slot_never_fires_a_finished_one_shot(self, h):
        job_id = h.create(next_fire_ms=h.T0)
        h.one(Fire(job_id, h.T0, 0))
        assert h.state.jobs[job_id].next_fire_ms == 0
        assert h.unchanged(Fire(job_id, 0, 0)) == RunReply("")

    def test_existing_run_id_is_not_recreated_but_slot_advances(self, h):
        job_id = h.create(next_fire_ms=h.T0)
        run_id = h.fire(job_id)
        h.one(UpdateJob("", job_id, h.spec(interval_ms=1), 0, next_fire_ms=h.T0))
        token = h.grant(run_id, "a")
        reply, _ = h.one(Fire(job_id, h.T0, h.T0 + 5))
        assert reply == RunReply("")
        assert h.state.jobs[job_id].next_fire_ms == h.T0 + 5
        assert h.inst(run_id, "a").fencing_token == token
        assert list(h.state.runs_by_job[job_id]) == [run_id]

    def test_skip_records_skipped_run(self, h):
        job_id = h.create(next_fire_ms=h.T0)
        reply, effects = h.one(Fire(job_id, h.T0, h.T0 + 100, skip=True))
        run = h.run(reply.run_id)
        assert (run.state, run.tasks, run.finished_ms) == (RunState.SKIPPED, {}, h.T0)
        assert effects.dispatchable == []
        assert h.state.jobs[job_id].next_fire_ms == h.T0 + 100

    def test_slot_at_or_below_the_high_water_mark_never_fires_again(self, h):
        # Even after the run left memory (retention), a schedule change back to an old slot
        # must not fire it a second time.
        job_id = h.create(next_fire_ms=h.T0)
        run_id = h.fire(job_id)
        del h.state.runs[run_id]
        h.one(UpdateJob("", job_id, h.spec(interval_ms=1), 0, next_fire_ms=h.T0))
        reply, _ = h.one(Fire(job_id, h.T0, h.T0 + 1))
        assert reply == RunReply("")
        assert run_id not in h.state.runs
        assert h.state.jobs[job_id].next_fire_ms == h.T0 + 1
        assert h.state.jobs[job_id].last_fired_ms == h.T0

    def test_run_keeps_spec_it_was_fired_with(self, h):
        job_id = h.create(next_fire_ms=h.T0)
        run_id = h.fire(job_id)
        assert h.run(run_id).spec is h.state.jobs[job_id].spec


class TestTriggerJob:
    def test_manual_runs_are_numbered_cluster_wide(self, h):
        first = h.create(h.spec(name="x"))
        second = h.create(h.spec(name="y"))
        h.now = h.T0 + 42
        reply, effects = h.one(TriggerJob("", first))
        assert reply == RunReply(f"{first}@manual-1")
        run = h.run(reply.run_id)
        assert (run.trigger, run.scheduled_for_ms) == (RunTrigger.MANUAL, h.T0 + 42)
        assert effects.dispatchable == [(reply.run_id, "a")]
        assert h.one(TriggerJob("", second))[0] == RunReply(f"{second}@manual-2")

    def test_works_when_paused(self, h):
        job_id = h.create(h.spec(paused=True))
        reply, _ = h.one(TriggerJob("", job_id))
        assert h.run(reply.run_id).state == RunState.RUNNING

    def test_unknown_job(self, h):
        h.rejects(TriggerJob("", "j4"), Code.NOT_FOUND, "job_id: no job 'j4'")


class TestCancelRun:
    def test_cancel_revokes_leases(self, h):
        job_id = h.create(h.spec({"a": [], "b": [], "c": ["a"], "d": ["c"]}))
        run_id = h.fire(job_id)
        token = h.grant(run_id, "a")
        h.complete(run_id, "b")
        h.now += 5
        reply, effects = h.one(CancelRun("", run_id, reason="operator"))
        assert reply == RunReply(run_id)
        assert h.task_states(run_id) == {
            "a": "cancelled", "b": "succeeded", "c": "cancelled", "d": "cancelled"}
        assert effects.cancelled == [(run_id, "a", token, "operator", "w1")]
        assert effects.lease_ended == [(run_id, "a", token)]
        run = h.run(run_id)
        assert (run.state, run.finished_ms) == (RunState.CANCELLED, h.now)
        assert h.inst(run_id, "a").finished_ms == h.now
        assert h.inst(run_id, "b").finished_ms < h.now

    def test_completion_after_cancel_is_rejected(self, h):
        run_id = h.fire(h.create())
        token = h.grant(run_id, "a")
        h.one(CancelRun("", run_id))
        h.rejects(CompleteTask(run_id, "a", token), Code.FAILED_PRECONDITION,
                  "is cancelled, not leased")

    def test_default_reason(self, h):
        run_id = h.fire(h.create())
        h.grant(run_id, "a")
        _, effects = h.one(CancelRun("", run_id))
        assert effects.cancelled[0][3] == "run cancelled"

    def test_unknown_run(self, h):
        h.rejects(CancelRun("", "j1@5"), Code.NOT_FOUND, "run_id: no run 'j1@5'")

    def test_terminal_run(self, h):
        run_id = h.fire(h.create())
        h.complete(run_id, "a")
        h.rejects(CancelRun("", run_id), Code.FAILED_PRECONDITION,
                  f"run_id: run '{run_id}' is already succeeded")

    def test_grant_after_cancel_rejected(self, h):
        run_id = h.fire(h.create())
        h.one(CancelRun("", run_id))
        reply = h.unchanged(GrantLeases((LeaseGrant(run_id, "a", "w", 1),)))
        assert reply.tokens[0].code == Code.FAILED_PRECONDITION


class TestRetention:
    def test_oldest_terminal_runs_are_evicted(self, small):
        h = small
        job_id = h.create(next_fire_ms=h.T0)
        runs = [h.fire(job_id) for _ in range(4)]
        h.complete(runs[1], "a")
        h.complete(runs[2], "a")
        assert list(h.state.runs) == runs
        effects = h.complete(runs[3], "a")
        # Three terminal runs, two retained: the oldest terminal one leaves; active runs[0] stays.
        assert [run.run_id for run in effects.evicted_runs] == [runs[1]]
        assert effects.evicted_runs[0].state == RunState.SUCCEEDED
        assert list(h.state.runs_by_job[job_id]) == [runs[0], runs[2], runs[3]]
        assert list(h.state.runs) == [runs[0], runs[2], runs[3]]

    def test_skipped_runs_count(self, small):
        h = small
        job_id = h.create(next_fire_ms=h.T0)
        runs = [h.fire(job_id, skip=True) for _ in range(3)]
        assert list(h.state.runs_by_job[job_id]) == runs[1:]

    def test_runs_with_dead_letters_are_pinned(self, small):
        h = small
        job_id = h.create(next_fire_ms=h.T0)
        dead_run = h.fire(job_id)
        h.kill(dead_run, "a")
        later = [h.fire(job_id, skip=True) for _ in range(3)]
        assert list(h.state.runs_by_job[job_id]) == [dead_run, later[2]]
        assert h.run(dead_run).state == RunState.FAILED

    def test_cancel_triggers_retention(self, small):
        h = small
        job_id = h.create(next_fire_ms=h.T0)
        skipped = [h.fire(job_id, skip=True) for _ in range(2)]
        live = h.fire(job_id)
        _, effects = h.one(CancelRun("", live))
        assert [run.run_id for run in effects.evicted_runs] == [skipped[0]]

    def test_paused_runs_still_finish(self, h):
        job_id = h.create()
        run_id = h.fire(job_id)
        h.one(SetPaused("", job_id, True))
        h.complete(run_id, "a")
        assert h.run(run_id).state == RunState.SUCCEEDED
        assert h.inst(run_id, "a").state == TaskState.SUCCEEDED
