"""CreateJob, UpdateJob, DeleteJob, SetPaused."""

from __future__ import annotations

import dataclasses

import pytest

from gnomon.node.core.commands import CompleteTask, CreateJob, DeleteJob, Fire, SetPaused, UpdateJob
from gnomon.node.core.errors import Code
from gnomon.node.core.results import Done, JobReply


class TestCreateJob:
    def test_creates_job_with_sequential_id(self, h):
        h.now = h.T0 + 5
        reply, effects = h.one(CreateJob("", h.spec(name="a"), next_fire_ms=h.T0 + 100))
        assert reply == JobReply("j1", 1)
        assert effects.jobs == ["j1"]
        job = h.state.jobs["j1"]
        assert (job.version, job.next_fire_ms, job.paused) == (1, h.T0 + 100, False)
        assert job.created_ms == job.updated_ms == h.T0 + 5
        assert h.state.job_names[("acme", "a")] == "j1"
        assert h.create(h.spec(name="b")) == "j2"

    def test_created_paused(self, h):
        job_id = h.create(h.spec(paused=True))
        assert h.state.jobs[job_id].paused

    def test_same_name_in_other_tenant_is_fine(self, h):
        h.create(h.spec(tenant="acme"))
        assert h.create(h.spec(tenant="globex")) == "j2"

    @pytest.mark.parametrize(
        "existing, spec_key, quota, code, fragment",
        [
            (1, "same", 0, Code.ALREADY_EXISTS,
             "spec.name: tenant 'acme' already has a job named 'nightly'"),
            (2, "other", 2, Code.RESOURCE_EXHAUSTED,
             "spec.tenant: tenant 'acme' already has 2 jobs, the limit is 2"),
            (0, "cyclic", 0, Code.INVALID_ARGUMENT, "dependency cycle"),
            (0, "empty", 0, Code.INVALID_ARGUMENT, "at least one task"),
        ],
    )
    def test_rejections(self, h, existing, spec_key, quota, code, fragment):
        for index in range(existing):
            h.create(h.spec(name="nightly" if index == 0 else f"n{index}"))
        spec = {
            "same": h.spec(),
            "other": h.spec(name="other"),
            "cyclic": h.spec({"a": ["b"], "b": ["a"]}, name="c"),
            "empty": dataclasses.replace(h.spec(name="e"), tasks=()),
        }[spec_key]
        h.rejects(CreateJob("", spec, 0, max_jobs_per_tenant=quota), code, fragment)

    def test_quota_counts_only_the_tenant(self, h):
        h.create(h.spec(tenant="globex"))
        reply, _ = h.one(CreateJob("", h.spec(), 0, max_jobs_per_tenant=1))
        assert reply == JobReply("j2", 1)

    def test_name_is_free_again_after_delete(self, h):
        job_id = h.create()
        h.one(DeleteJob("", job_id))
        assert h.create() == "j2"


class TestUpdateJob:
    def test_replaces_spec_and_keeps_due_slot_when_schedule_unchanged(self, h):
        job_id = h.create(next_fire_ms=h.T0 + 10)
        new_spec = h.spec({"a": [], "b": ["a"]})
        h.now += 7
        reply, effects = h.one(UpdateJob("", job_id, new_spec, expected_version=1,
                                         next_fire_ms=h.T0 + 999))
        assert reply == JobReply(job_id, 2)
        job = h.state.jobs[job_id]
        assert job.spec == new_spec
        assert job.next_fire_ms == h.T0 + 10
        assert job.updated_ms == h.T0 + 7
        assert effects.jobs == [job_id]

    def test_schedule_change_takes_new_slot(self, h):
        job_id = h.create(next_fire_ms=h.T0 + 10)
        h.one(UpdateJob("", job_id, h.spec(interval_ms=5_000), 0, next_fire_ms=h.T0 + 5_000))
        assert h.state.jobs[job_id].next_fire_ms == h.T0 + 5_000

    def test_does_not_change_paused(self, h):
        job_id = h.create(h.spec(paused=True))
        h.one(UpdateJob("", job_id, h.spec(paused=False), 0, 0))
        assert h.state.jobs[job_id].paused

    def test_runs_in_flight_keep_their_spec(self, h):
        job_id = h.create()
        run_id = h.fire(job_id)
        old_spec = h.state.jobs[job_id].spec
        h.one(UpdateJob("", job_id, h.spec({"x": []}), 0, 0))
        assert h.run(run_id).spec is old_spec
        assert list(h.run(run_id).tasks) == ["a"]
        assert h.run(run_id).job_version == 1

    @pytest.mark.parametrize(
        "job_id, spec_kw, version, code, fragment",
        [
            ("j7", {}, 0, Code.NOT_FOUND, "job_id: no job 'j7'"),
            ("j1", {}, 2, Code.FAILED_PRECONDITION,
             "expected_version: job 'j1' is at version 1, not 2"),
            ("j1", {"tenant": "globex"}, 0, Code.INVALID_ARGUMENT, "spec.tenant: job 'j1'"),
            ("j1", {"name": "other"}, 0, Code.INVALID_ARGUMENT,
             "spec.name: job 'j1' is named 'nightly', not 'other'"),
            ("j1", {"tasks": {"a": ["a"]}}, 0, Code.INVALID_ARGUMENT, "depends on itself"),
        ],
    )
    def test_rejections(self, h, job_id, spec_kw, version, code, fragment):
        h.create()
        h.rejects(UpdateJob("", job_id, h.spec(**spec_kw), version, 0), code, fragment)


class TestDeleteJob:
    def test_deletes(self, h):
        job_id = h.create()
        reply, effects = h.one(DeleteJob("", job_id, expected_version=1))
        assert reply == Done()
        assert effects.jobs == [job_id]
        assert h.state.jobs == {} and h.state.job_names == {}

    @pytest.mark.parametrize(
        "command, code, fragment",
        [
            (DeleteJob("", "j9"), Code.NOT_FOUND, "job_id: no job 'j9'"),
            (DeleteJob("", "j1", 3), Code.FAILED_PRECONDITION,
             "expected_version: job 'j1' is at version 1, not 3"),
        ],
    )
    def test_rejections(self, h, command, code, fragment):
        h.create()
        h.rejects(command, code, fragment)

    def test_leased_task_finishes_then_its_run_leaves_memory(self, h):
        job_id = h.create(h.spec({"a": [], "b": ["a"]}))
        done_run = h.fire(job_id)
        h.complete(done_run, "a")
        h.complete(done_run, "b")
        live_run = h.fire(job_id)
        token = h.grant(live_run, "a")
        _, effects = h.one(DeleteJob("", job_id))
        # The terminal run goes to the history store at once; the leased task keeps going,
        # the task waiting for it will never be wanted: cancelled.
        assert [run.run_id for run in effects.evicted_runs] == [done_run]
        assert list(h.state.runs) == [live_run]
        assert h.task_states(live_run) == {"a": "leased", "b": "cancelled"}
        assert effects.cancelled == []
        reply, effects = h.one(CompleteTask(live_run, "a", token, b"ok"))
        assert reply == Done()
        assert [run.run_id for run in effects.evicted_runs] == [live_run]
        assert effects.evicted_runs[0].state == "cancelled"
        assert h.state.runs == {} and h.state.runs_by_job == {}

    def test_queued_runs_are_cancelled_and_leave_memory(self, h):
        job_id = h.create(h.spec({"a": []}))
        ready = h.fire(job_id)
        waiting = h.fire(job_id)
        h.fail(waiting, "a")  # retry_wait
        _, effects = h.one(DeleteJob("", job_id))
        evicted = {run.run_id: run for run in effects.evicted_runs}
        assert sorted(evicted) == sorted([ready, waiting])
        assert {run.state for run in evicted.values()} == {"cancelled"}
        assert h.state.runs == {} and h.state.runs_by_job == {}

    def test_cancel_running_revokes_leases_and_names_their_workers(self, h):
        job_id = h.create()
        run_id = h.fire(job_id)
        token = h.grant(run_id, "a", worker="w7")
        _, effects = h.one(DeleteJob("", job_id, cancel_running=True))
        assert effects.cancelled == [(run_id, "a", token, "job deleted", "w7")]
        assert (run_id, "a", token) in effects.lease_ended
        assert [run.state for run in effects.evicted_runs] == ["cancelled"]
        attempts = effects.evicted_runs[0].tasks["a"].attempts
        assert [(a.outcome, a.fencing_token, a.worker_id) for a in attempts] == [
            ("cancelled", token, "w7")]

    def test_fire_after_delete_is_noop(self, h):
        job_id = h.create(next_fire_ms=h.T0)
        h.one(DeleteJob("", job_id))
        h.unchanged(Fire(job_id, h.T0, h.T0 + 1))


class TestSetPaused:
    def test_pause_then_resume_without_catch_up(self, h):
        job_id = h.create(next_fire_ms=h.T0 + 10)
        reply, effects = h.one(SetPaused("", job_id, True, next_fire_ms=123))
        assert reply == JobReply(job_id, 2)
        job = h.state.jobs[job_id]
        assert job.paused and job.next_fire_ms == h.T0 + 10
        assert effects.jobs == [job_id]
        h.now = h.T0 + 500_000
        reply, _ = h.one(SetPaused("", job_id, False, next_fire_ms=h.T0 + 540_000))
        assert reply == JobReply(job_id, 3)
        assert not job.paused and job.next_fire_ms == h.T0 + 540_000
        assert job.updated_ms == h.T0 + 500_000

    @pytest.mark.parametrize("paused", [False, True])
    def test_no_change_is_a_noop_success(self, h, paused):
        job_id = h.create(h.spec(paused=paused), next_fire_ms=h.T0 + 10)
        reply = h.unchanged(SetPaused("", job_id, paused, next_fire_ms=999))
        assert reply == JobReply(job_id, 1)
        assert h.state.jobs[job_id].next_fire_ms == h.T0 + 10

    def test_unknown_job(self, h):
        h.rejects(SetPaused("", "j3", True), Code.NOT_FOUND, "job_id: no job 'j3'")

    def test_paused_job_does_not_fire(self, h):
        job_id = h.create(next_fire_ms=h.T0)
        h.one(SetPaused("", job_id, True))
        h.unchanged(Fire(job_id, h.T0, h.T0 + 1))

