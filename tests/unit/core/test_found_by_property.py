"""Core bugs found by tests/property (core_machine.py), reduced to their shrunk examples.

Each was a strict xfail until the core was fixed; they stay as regression tests, and the
matching OPEN_BUG_* flags in tests/property/core_machine.py are False (the state machine checks
the strong form of the invariants again).
"""

from __future__ import annotations

import pytest

from gnomon.node.core.commands import (
    DeleteJob,
    ExpiredLease,
    ExpireLeases,
    FailTask,
    ReplayDeadLetters,
    SetLimits,
    TaskKey,
    TriggerJob,
)
from gnomon.node.core.model import TERMINAL_TASK_STATES, Limits, RetryPolicy, RunState
from gnomon.node.core.results import Done, LimitsReply

QUEUED = ("pending", "ready", "retry_wait")


def test_lowering_run_retention_evicts_the_excess_runs(small):
    # Shrunk: some_jobs, fire_due(skip) -> a skipped (terminal) run, set_limits(retained=0).
    job_id = small.create()
    runs = [small.fire(job_id, skip=True), small.fire(job_id, skip=True)]
    assert list(small.state.runs) == runs  # runs_retained_per_job=2
    reply, effects = small.one(SetLimits("", Limits(dedupe_capacity=3, runs_retained_per_job=0)))
    assert reply == LimitsReply(1)
    assert [run.run_id for run in effects.evicted_runs] == runs
    assert small.state.runs == {} and not small.state.runs_by_job[job_id]


def _lease_of_deleted_job(h, max_attempts: int) -> tuple[str, int]:
    """A job's manual run whose task is leased when the job is deleted (no cancel_running)."""
    job_id = h.create(h.spec(retry=RetryPolicy(max_attempts=max_attempts, jitter=-1.0)))
    reply, _ = h.one(TriggerJob("", job_id))
    run_id = reply.run_id
    token = h.grant(run_id, "a")
    assert h.one(DeleteJob("", job_id))[0] == Done()
    assert h.task_states(run_id) == {"a": "leased"}
    return run_id, token


@pytest.mark.parametrize("how", ["fail", "expire"])
def test_retryable_end_of_a_lease_of_a_deleted_job_queues_nothing(h, how):
    # Shrunk: some_jobs(policy max_attempts=2), trigger, dispatch, delete_job, workers_report
    # (fail, retryable).
    run_id, token = _lease_of_deleted_job(h, max_attempts=2)
    command = (FailTask(run_id, "a", token, "boom", True) if how == "fail"
               else ExpireLeases((ExpiredLease(run_id, "a", token),)))
    reply, effects = h.one(command)
    assert reply == Done()
    assert effects.dispatchable == []
    run = h.state.runs.get(run_id) or next(r for r in effects.evicted_runs if r.run_id == run_id)
    assert run.tasks["a"].state in TERMINAL_TASK_STATES
    assert run.state != RunState.RUNNING


def test_replaying_a_dead_letter_of_a_deleted_job_queues_nothing(h):
    # Shrunk: some_jobs(dag a -> b, max_attempts=1), trigger, work (complete a, fail b),
    # delete_job, replay.
    job_id = h.create(h.spec({"a": [], "b": ["a"]}, retry=RetryPolicy(max_attempts=1)))
    reply, _ = h.one(TriggerJob("", job_id))
    run_id = reply.run_id
    h.complete(run_id, "a")
    h.fail(run_id, "b")
    assert h.task_states(run_id) == {"a": "succeeded", "b": "dead"}
    assert h.one(DeleteJob("", job_id))[0] == Done()
    _, effects = h.one(ReplayDeadLetters("", (TaskKey(run_id, "b"),)))
    assert effects.dispatchable == []
    run = h.state.runs.get(run_id)
    assert run is None or not set(h.task_states(run_id).values()) & set(QUEUED)
