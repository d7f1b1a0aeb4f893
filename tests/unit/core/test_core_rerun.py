"""RerunRun (re-run a finished run; retry one task) and CancelTask (issue 9)."""

from __future__ import annotations

from gnomon.node.core.commands import CancelTask, DeleteJob, RerunRun
from gnomon.node.core.errors import Code
from gnomon.node.core.model import RunState, TaskState
from gnomon.node.core.results import RunReply

DAG = {"a": [], "b": ["a"], "c": []}


def _failed_run(h):
    """A run where a succeeded, b died (a dead letter) and c was cancelled: it ended
    CANCELLED."""
    job_id = h.create(h.spec(DAG), next_fire_ms=h.T0)
    run_id = h.fire(job_id)
    h.complete(run_id, "a")
    h.kill(run_id, "b")
    h.one(CancelTask("", run_id, "c", "not today"))
    return job_id, run_id


def test_cancel_task_ends_the_run_when_nothing_can_move(h):
    _, run_id = _failed_run(h)
    assert h.task_states(run_id) == {"a": TaskState.SUCCEEDED, "b": TaskState.DEAD,
                                     "c": TaskState.CANCELLED}
    assert h.inst(run_id, "c").last_error == "not today"
    assert h.run(run_id).state == RunState.CANCELLED


def test_cancelling_a_leased_task_tells_its_worker_and_blocks_its_dependents(h):
    job_id = h.create(h.spec(DAG), next_fire_ms=h.T0)
    run_id = h.fire(job_id)
    token = h.grant(run_id, "a")
    reply, effects = h.one(CancelTask("", run_id, "a", "stop"))
    assert reply == RunReply(run_id)
    assert effects.cancelled == [(run_id, "a", token, "stop", "w1")]
    assert h.task_states(run_id) == {"a": TaskState.CANCELLED, "b": TaskState.UPSTREAM_FAILED,
                                     "c": TaskState.READY}
    assert h.run(run_id).state == RunState.RUNNING  # c can still run
    h.rejects(CancelTask("", run_id, "a"), Code.FAILED_PRECONDITION, "already cancelled")
    h.rejects(CancelTask("", run_id, "zz"), Code.NOT_FOUND, "has no task 'zz'")


def test_rerun_keeps_succeeded_tasks_and_starts_a_fresh_series(h):
    _, run_id = _failed_run(h)
    assert (run_id, "b") in h.state.dead_letters
    reply, effects = h.one(RerunRun("", run_id))
    assert reply == RunReply(run_id)
    assert h.task_states(run_id) == {"a": TaskState.SUCCEEDED, "b": TaskState.READY,
                                     "c": TaskState.READY}
    assert h.inst(run_id, "b").attempt == 0 and len(h.inst(run_id, "b").attempts) == 1
    assert (run_id, "b") not in h.state.dead_letters
    assert h.run(run_id).state == RunState.RUNNING and h.run(run_id).finished_ms == 0
    assert sorted(effects.dispatchable) == [(run_id, "b"), (run_id, "c")]
    h.complete(run_id, "b")
    h.complete(run_id, "c")
    assert h.run(run_id).state == RunState.SUCCEEDED


def test_retry_one_task_and_what_it_blocks(h):
    job_id = h.create(h.spec(DAG), next_fire_ms=h.T0)
    run_id = h.fire(job_id)
    h.kill(run_id, "a")  # b upstream_failed
    h.complete(run_id, "c")
    assert h.run(run_id).state == RunState.FAILED
    h.one(RerunRun("", run_id, ("a",)))
    assert h.task_states(run_id) == {"a": TaskState.READY, "b": TaskState.PENDING,
                                     "c": TaskState.SUCCEEDED}
    h.rejects(RerunRun("", run_id, ("c",)), Code.FAILED_PRECONDITION,
              "task_names[0]: task 'c' is succeeded")


def test_rerun_refusals(h):
    job_id = h.create(h.spec(), next_fire_ms=h.T0)
    run_id = h.fire(job_id)
    h.complete(run_id, "a")
    h.rejects(RerunRun("", run_id), Code.FAILED_PRECONDITION, "is succeeded")
    h.rejects(RerunRun("", "j1@42"), Code.NOT_FOUND, "no run 'j1@42' in memory")
    other = h.create(h.spec(name="other"), next_fire_ms=h.T0)
    doomed = h.fire(other)
    h.kill(doomed, "a")
    h.one(DeleteJob("", other))
    if doomed in h.state.runs:
        h.rejects(RerunRun("", doomed), Code.FAILED_PRECONDITION, "was deleted")
