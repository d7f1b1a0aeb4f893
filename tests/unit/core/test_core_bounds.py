"""Bounds (issue 9): max_runs ends a schedule in apply, a one-shot is deleted after its run
succeeded (delete_after_success), and a Fire's delay (jitter + spread) is recorded."""

from __future__ import annotations

import dataclasses

import pytest

from gnomon.node.core.commands import CreateJob, Fire, TriggerJob
from gnomon.node.core.errors import Code
from gnomon.node.core.model import OverlapPolicy, RunState, Schedule, ScheduleKind
from gnomon.node.core.results import RunReply


def _once(h, **fields):
    return dataclasses.replace(h.spec(), schedule=Schedule(ScheduleKind.ONCE, at_ms=h.T0),
                               **fields)


def test_the_fire_delay_is_recorded_on_the_run(h):
    job_id = h.create(next_fire_ms=h.T0)
    reply, _ = h.one(Fire(job_id, h.T0, h.T0 + h.INTERVAL, delay_ms=1_234))
    assert h.run(reply.run_id).fire_delay_ms == 1_234


def test_max_runs_ends_the_schedule_after_that_many_runs(h):
    job_id = h.create(dataclasses.replace(h.spec(), max_runs=2), next_fire_ms=h.T0)
    first = h.fire(job_id)
    h.complete(first, "a")
    h.fire(job_id)
    job = h.state.jobs[job_id]
    assert (job.runs_started, job.next_fire_ms) == (2, 0)
    # A chained fire of the next slot in the same batch is a no-op (the CAS fails).
    slot = h.T0 + 2 * h.INTERVAL
    assert h.unchanged(Fire(job_id, slot, slot + h.INTERVAL)) == RunReply("")


def test_skipped_slots_do_not_count_towards_max_runs(h):
    spec = dataclasses.replace(h.spec(), max_runs=2, overlap_policy=OverlapPolicy.SKIP)
    job_id = h.create(spec, next_fire_ms=h.T0)
    h.fire(job_id)
    h.fire(job_id, skip=True)  # misfire
    assert h.run(h.fire(job_id)).state == RunState.SKIPPED  # overlap: the first still runs
    assert h.state.jobs[job_id].runs_started == 1 and h.state.jobs[job_id].next_fire_ms


def test_a_one_shot_is_deleted_after_its_run_succeeded(h):
    job_id = h.create(_once(h, delete_after_success=True), next_fire_ms=h.T0)
    h.now = h.T0
    reply, _ = h.one(Fire(job_id, h.T0, 0))
    effects = h.complete(reply.run_id, "a")
    assert job_id not in h.state.jobs and ("acme", "nightly") not in h.state.job_names
    assert [r.run_id for r in effects.evicted_runs] == [reply.run_id]  # to the history store
    assert effects.evicted_runs[0].state == RunState.SUCCEEDED


def test_a_failed_one_shot_stays(h):
    job_id = h.create(_once(h, delete_after_success=True), next_fire_ms=h.T0)
    h.now = h.T0
    reply, _ = h.one(Fire(job_id, h.T0, 0))
    h.kill(reply.run_id, "a")
    assert job_id in h.state.jobs
    assert h.run(reply.run_id).state == RunState.FAILED


def test_a_manual_run_does_not_delete_it(h):
    job_id = h.create(_once(h, delete_after_success=True), next_fire_ms=h.T0)
    reply, _ = h.one(TriggerJob("", job_id))
    h.complete(reply.run_id, "a")
    assert job_id in h.state.jobs


@pytest.mark.parametrize("fields, fragment", [
    ({"max_runs": -1}, "spec.max_runs: must be >= 0"),
    ({"delete_after_success": True},
     "spec.delete_after_success: applies to a one-shot (once) schedule only"),
])
def test_bad_bounds_are_rejected(h, fields, fragment):
    spec = dataclasses.replace(h.spec(), **fields)
    h.rejects(CreateJob("", spec, h.T0), Code.INVALID_ARGUMENT, fragment)


def test_a_trigger_with_parameters_runs_on_its_own_payloads(h):
    from gnomon.node.core.commands import TaskPayload

    job_id = h.create(h.spec({"a": [], "b": ["a"]}), next_fire_ms=h.T0)
    cmd = TriggerJob("", job_id, "", b'{"day":"mon"}',
                     (TaskPayload("a", b'{"day":"mon","x":1}'), TaskPayload("b", b'{"day":"mon"}')))
    reply, _ = h.one(cmd)
    run = h.run(reply.run_id)
    assert run.params == b'{"day":"mon"}'
    assert [t.payload for t in run.spec.tasks] == [b'{"day":"mon","x":1}', b'{"day":"mon"}']
    assert h.state.jobs[job_id].spec.tasks[0].payload == b""  # the job's own spec unchanged
    h.rejects(TriggerJob("", job_id, "", b"{}", (TaskPayload("zz", b"{}"),)),
              Code.INVALID_ARGUMENT, "payloads[0].task_name: the job has no task 'zz'")


def test_a_trigger_skipped_and_evicted_at_once_is_fine(h):
    """Found by the property machine: with retention 0 a SKIPPED manual run leaves memory in
    the same command; the trigger must not look it up afterwards."""
    from gnomon.node.core.commands import SetLimits
    from gnomon.node.core.model import Limits

    h.one(SetLimits("", Limits(runs_retained_per_job=0)))
    job_id = h.create(dataclasses.replace(h.spec(), overlap_policy=OverlapPolicy.SKIP),
                      next_fire_ms=h.T0)
    h.fire(job_id)  # active
    reply, effects = h.one(TriggerJob("", job_id))
    assert reply.run_id not in h.state.runs
    assert [r.run_id for r in effects.evicted_runs] == [reply.run_id]
    assert effects.evicted_runs[0].state == RunState.SKIPPED
