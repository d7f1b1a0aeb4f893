"""ReplayDeadLetters: a dead task gets a fresh series; its blocked dependents reopen.
DiscardDeadLetters: the letters leave the queue, the tasks stay dead."""

from __future__ import annotations

from gnomon.node.core.commands import CancelRun, DiscardDeadLetters, ReplayDeadLetters, TaskKey
from gnomon.node.core.errors import Code
from gnomon.node.core.model import RunState, TaskState
from gnomon.node.core.results import Discarded, Replayed


def test_replay_reopens_run_and_dependents(h):
    run_id = h.fire(h.create(h.spec({"a": [], "b": ["a"], "c": ["b"]})))
    h.kill(run_id, "a")
    assert h.run(run_id).state == RunState.FAILED
    h.now += 100
    reply, effects = h.one(ReplayDeadLetters("", (TaskKey(run_id, "a"),)))
    assert reply == Replayed(((run_id, "a"),))
    assert h.state.dead_letters == {}
    inst = h.inst(run_id, "a")
    assert (inst.state, inst.attempt, inst.last_error, inst.ready_ms, inst.finished_ms) == (
        TaskState.READY, 0, "boom", h.now, 0)
    assert h.task_states(run_id) == {"a": "ready", "b": "pending", "c": "pending"}
    assert h.inst(run_id, "c").finished_ms == 0
    run = h.run(run_id)
    assert (run.state, run.finished_ms) == (RunState.RUNNING, 0)
    assert effects.dispatchable == [(run_id, "a")]
    for task in "abc":
        h.complete(run_id, task)
    assert h.run(run_id).state == RunState.SUCCEEDED


def test_replayed_task_gets_full_attempt_budget(h):
    run_id = h.fire(h.create())
    h.kill(run_id, "a")
    h.one(ReplayDeadLetters("", (TaskKey(run_id, "a"),)))
    h.fail(run_id, "a")
    assert h.inst(run_id, "a").state == TaskState.RETRY_WAIT
    assert h.inst(run_id, "a").attempt == 1


def test_dependent_with_another_dead_dependency_stays_failed(h):
    run_id = h.fire(h.create(h.spec({"a": [], "b": [], "c": ["a", "b"], "d": ["c"]})))
    h.kill(run_id, "a")
    h.kill(run_id, "b")
    h.one(ReplayDeadLetters("", (TaskKey(run_id, "a"),)))
    assert h.task_states(run_id) == {
        "a": "ready", "b": "dead", "c": "upstream_failed", "d": "upstream_failed"}
    assert h.run(run_id).state == RunState.RUNNING
    h.complete(run_id, "a")
    assert h.run(run_id).state == RunState.FAILED
    h.one(ReplayDeadLetters("", (TaskKey(run_id, "b"),)))
    assert h.task_states(run_id) == {"a": "succeeded", "b": "ready", "c": "pending",
                                     "d": "pending"}


def test_blocked_path_through_other_branch_stays_failed(h):
    # c needs a and x; x needs b. With b still dead, c cannot run even after a is replayed.
    run_id = h.fire(h.create(h.spec({"a": [], "b": [], "x": ["b"], "c": ["a", "x"]})))
    h.kill(run_id, "b")
    h.kill(run_id, "a")
    h.one(ReplayDeadLetters("", (TaskKey(run_id, "a"),)))
    assert h.task_states(run_id)["c"] == TaskState.UPSTREAM_FAILED
    h.complete(run_id, "a")
    assert h.run(run_id).state == RunState.FAILED


def test_replay_both_in_one_command(h):
    run_id = h.fire(h.create(h.spec({"a": [], "b": [], "c": ["a", "b"]})))
    h.kill(run_id, "a")
    h.kill(run_id, "b")
    keys = (TaskKey(run_id, "b"), TaskKey(run_id, "a"), TaskKey(run_id, "b"))
    reply, effects = h.one(ReplayDeadLetters("", keys))
    assert reply == Replayed(((run_id, "b"), (run_id, "a")))
    assert effects.dispatchable == [(run_id, "b"), (run_id, "a")]
    assert h.task_states(run_id)["c"] == TaskState.PENDING


def test_unknown_key_changes_nothing(h):
    run_id = h.fire(h.create(h.spec({"a": [], "b": []})))
    h.kill(run_id, "a")
    keys = (TaskKey(run_id, "a"), TaskKey(run_id, "b"))
    h.rejects(ReplayDeadLetters("", keys), Code.NOT_FOUND,
              f"tasks[1]: no dead letter for task 'b' of run '{run_id}'")
    assert h.inst(run_id, "a").state == TaskState.DEAD


def test_replay_in_cancelled_run(h):
    run_id = h.fire(h.create(h.spec({"a": [], "b": [], "c": ["a"]})))
    h.kill(run_id, "a")
    h.one(CancelRun("", run_id))
    assert h.task_states(run_id) == {"a": "dead", "b": "cancelled", "c": "upstream_failed"}
    h.one(ReplayDeadLetters("", (TaskKey(run_id, "a"),)))
    assert h.run(run_id).state == RunState.RUNNING
    h.complete(run_id, "a")
    h.complete(run_id, "c")
    assert h.run(run_id).state == RunState.CANCELLED


def test_dependent_of_cancelled_task_is_not_revived(h):
    run_id = h.fire(h.create(h.spec({"a": [], "b": [], "c": ["a", "b"]})))
    h.kill(run_id, "a")
    h.one(CancelRun("", run_id))
    h.one(ReplayDeadLetters("", (TaskKey(run_id, "a"),)))
    assert h.task_states(run_id) == {"a": "ready", "b": "cancelled", "c": "upstream_failed"}
    h.complete(run_id, "a")
    assert h.run(run_id).state == RunState.CANCELLED


# -- DiscardDeadLetters: dropped from the queue for good -----------------------------------------

def test_discard_drops_the_letters_and_the_tasks_stay_dead(h):
    run_id = h.fire(h.create(h.spec({"a": [], "b": []})))
    h.kill(run_id, "a")
    h.kill(run_id, "b")
    reply, _ = h.one(DiscardDeadLetters("", (TaskKey(run_id, "a"), TaskKey(run_id, "a"))))
    assert reply == Discarded(((run_id, "a"),))
    assert list(h.state.dead_letters) == [(run_id, "b")]
    assert h.task_states(run_id) == {"a": "dead", "b": "dead"}
    assert h.run(run_id).state == RunState.FAILED


def test_discard_of_a_letter_not_in_the_queue_changes_nothing(h):
    run_id = h.fire(h.create())
    h.kill(run_id, "a")
    h.rejects(DiscardDeadLetters("", (TaskKey(run_id, "a"), TaskKey(run_id, "zz"))),
              Code.NOT_FOUND, "tasks[1]: no dead letter for task 'zz'")
    assert (run_id, "a") in h.state.dead_letters


def test_a_run_kept_only_for_its_dead_letter_leaves_memory_once_discarded(small):
    h = small  # runs_retained_per_job=2
    job_id = h.create(next_fire_ms=h.T0)
    dead_run = h.fire(job_id)
    h.kill(dead_run, "a")
    later = [h.fire(job_id, skip=True) for _ in range(3)]
    assert dead_run in h.state.runs  # pinned by its dead letter
    _, effects = h.one(DiscardDeadLetters("", (TaskKey(dead_run, "a"),)))
    assert dead_run not in h.state.runs
    assert dead_run in [run.run_id for run in effects.evicted_runs]  # to the history store
    assert list(h.state.runs_by_job[job_id]) == later[2:]
