"""GrantLeases, CompleteTask, FailTask, ExpireLeases: DAG progression, retries, fencing."""

from __future__ import annotations

import pytest

from gnomon.node.core.commands import (
    CompleteTask,
    ExpiredLease,
    ExpireLeases,
    FailTask,
    GrantLeases,
    LeaseGrant,
)
from gnomon.node.core.errors import Code, Rejected
from gnomon.node.core.model import DeadLetter, RetryPolicy, RunState, TaskState
from gnomon.node.core.results import Done, Granted


class TestGrantLeases:
    def test_tokens_strictly_increase_and_bad_grants_are_refused_one_by_one(self, h):
        run_id = h.fire(h.create(h.spec({"a": [], "b": [], "c": ["a"]})))
        h.now += 3
        grants = (
            LeaseGrant(run_id, "a", "w1", 30_000),
            LeaseGrant(run_id, "c", "w1", 30_000),
            LeaseGrant(run_id, "b", "w2", 10_000),
            LeaseGrant(run_id, "a", "w2", 30_000),
            LeaseGrant("j1@1", "a", "w2", 30_000),
            LeaseGrant(run_id, "zz", "w2", 30_000),
        )
        reply, effects = h.one(GrantLeases(grants))
        assert isinstance(reply, Granted)
        assert reply.tokens[:1] == (1,) and reply.tokens[2] == 2
        refused = [reply.tokens[i] for i in (1, 3, 4, 5)]
        assert all(r.code == Code.FAILED_PRECONDITION for r in refused)
        assert "is pending, not ready" in refused[0].detail
        assert "is leased, not ready" in refused[1].detail
        assert "run_id: no run 'j1@1'" in refused[2].detail
        assert "has no task 'zz'" in refused[3].detail
        assert effects.leased == [(run_id, "a", 1), (run_id, "b", 2)]
        inst = h.inst(run_id, "b")
        assert (inst.state, inst.fencing_token, inst.worker_id, inst.lease_ttl_ms) == (
            TaskState.LEASED, 2, "w2", 10_000)
        assert (inst.attempt, inst.started_ms) == (1, h.now)
        assert h.state.last_token == 2

    def test_retry_wait_is_grantable_only_when_due(self, h):
        run_id = h.fire(h.create())
        h.fail(run_id, "a")
        retry_at = h.inst(run_id, "a").retry_at_ms
        reply = h.unchanged(GrantLeases((LeaseGrant(run_id, "a", "w", 1),)))
        assert f"waits to retry until {retry_at}" in reply.tokens[0].detail
        h.now = retry_at
        assert h.grant(run_id, "a") == 2
        assert h.inst(run_id, "a").attempt == 2


class TestCompleteTask:
    def test_linear_chain(self, h):
        run_id = h.fire(h.create(h.spec({"a": [], "b": ["a"]})))
        token = h.grant(run_id, "a")
        h.now += 10
        reply, effects = h.one(CompleteTask(run_id, "a", token, b"res"))
        assert reply == Done()
        inst = h.inst(run_id, "a")
        assert (inst.state, inst.result, inst.finished_ms) == (TaskState.SUCCEEDED, b"res", h.now)
        assert effects.lease_ended == [(run_id, "a", token)]
        assert effects.dispatchable == [(run_id, "b")]
        assert h.inst(run_id, "b").ready_ms == h.now
        h.complete(run_id, "b")
        run = h.run(run_id)
        assert (run.state, run.finished_ms) == (RunState.SUCCEEDED, h.now)

    def test_fan_out_fan_in(self, h):
        run_id = h.fire(h.create(h.spec({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]})))
        effects = h.complete(run_id, "a")
        assert effects.dispatchable == [(run_id, "b"), (run_id, "c")]
        assert h.complete(run_id, "b").dispatchable == []
        assert h.task_states(run_id)["d"] == TaskState.PENDING
        assert h.complete(run_id, "c").dispatchable == [(run_id, "d")]
        h.complete(run_id, "d")
        assert h.run(run_id).state == RunState.SUCCEEDED

    def test_dependency_declared_after_dependent(self, h):
        run_id = h.fire(h.create(h.spec({"late": ["early"], "early": []})))
        assert h.task_states(run_id) == {"late": "pending", "early": "ready"}
        assert h.complete(run_id, "early").dispatchable == [(run_id, "late")]

    @pytest.mark.parametrize(
        "run_id, task, token, code, fragment",
        [
            ("j1@9", "a", 1, Code.NOT_FOUND, "run_id: no run 'j1@9'"),
            ("RUN", "x", 1, Code.NOT_FOUND, "has no task 'x'"),
            ("RUN", "a", 5, Code.FAILED_PRECONDITION, "stale fencing token 5, current is 2"),
            ("RUN", "a", 0, Code.FAILED_PRECONDITION, "stale fencing token 0, current is 2"),
            ("RUN", "b", 0, Code.FAILED_PRECONDITION, "task 'b' of run 'RUN' is pending"),
        ],
    )
    def test_rejections(self, h, run_id, task, token, code, fragment):
        real = h.fire(h.create(h.spec({"a": [], "b": ["a"]})))
        h.fail(real, "a")
        h.now = h.inst(real, "a").retry_at_ms
        h.grant(real, "a")
        run_id = real if run_id == "RUN" else run_id
        h.rejects(CompleteTask(run_id, task, token), code, fragment.replace("RUN", real))

    def test_duplicate_completion_rejected_and_unchanged(self, h):
        run_id = h.fire(h.create())
        token = h.grant(run_id, "a")
        h.one(CompleteTask(run_id, "a", token))
        h.rejects(CompleteTask(run_id, "a", token), Code.FAILED_PRECONDITION,
                  "is succeeded, not leased")

    def test_stale_token_after_regrant_changes_nothing(self, h):
        run_id = h.fire(h.create())
        old = h.grant(run_id, "a")
        h.apply(ExpireLeases((ExpiredLease(run_id, "a", old, jitter_draw=0.5),)))
        h.now = h.inst(run_id, "a").retry_at_ms
        new = h.grant(run_id, "a")
        h.rejects(CompleteTask(run_id, "a", old), Code.FAILED_PRECONDITION,
                  f"stale fencing token {old}, current is {new}")
        h.rejects(FailTask(run_id, "a", old, "x", False), Code.FAILED_PRECONDITION, "stale")


class TestFailTask:
    def test_retry_backoff_then_dead_letter(self, h):
        # NO_JITTER: initial 1000 ms, multiplier 2, 3 attempts.
        job_id = h.create(h.spec({"a": [], "b": ["a"], "c": ["b"], "d": []}))
        run_id = h.fire(job_id)
        effects = h.fail(run_id, "a")
        inst = h.inst(run_id, "a")
        assert (inst.state, inst.retry_at_ms, inst.last_error) == (
            TaskState.RETRY_WAIT, h.now + 1_000, "boom")
        assert effects.dispatchable == [(run_id, "a")] and len(effects.lease_ended) == 1
        h.now = inst.retry_at_ms
        h.fail(run_id, "a")
        assert inst.retry_at_ms == h.now + 2_000 and inst.attempt == 2
        h.now = inst.retry_at_ms
        effects = h.fail(run_id, "a")
        assert inst.state == TaskState.DEAD and inst.finished_ms == h.now
        assert effects.dispatchable == []
        assert h.state.dead_letters[(run_id, "a")] == DeadLetter(
            run_id, "a", job_id, "acme", attempts=3, last_error="boom", dead_ms=h.now)
        assert h.task_states(run_id) == {
            "a": "dead", "b": "upstream_failed", "c": "upstream_failed", "d": "ready"}
        assert h.inst(run_id, "c").finished_ms == h.now
        assert h.run(run_id).state == RunState.RUNNING
        h.complete(run_id, "d")
        assert h.run(run_id).state == RunState.FAILED

    def test_non_retryable_dies_at_once(self, h):
        run_id = h.fire(h.create())
        h.kill(run_id, "a")
        assert h.inst(run_id, "a").attempt == 1
        assert h.run(run_id).state == RunState.FAILED

    def test_jitter_draw_shapes_backoff(self, h):
        policy = RetryPolicy(max_attempts=5, initial_backoff_ms=1_000, jitter=0.5)
        run_id = h.fire(h.create(h.spec(retry=policy)))
        h.fail(run_id, "a", draw=0.0)
        assert h.inst(run_id, "a").retry_at_ms == h.now + 500
        h.now = h.inst(run_id, "a").retry_at_ms
        h.fail(run_id, "a", draw=1.0)
        assert h.inst(run_id, "a").retry_at_ms == h.now + 3_000

    def test_default_policy_attempts(self, h):
        run_id = h.fire(h.create(h.spec(retry=RetryPolicy())))
        for _ in range(2):
            h.fail(run_id, "a")
            h.now = h.inst(run_id, "a").retry_at_ms
        h.fail(run_id, "a")
        assert h.inst(run_id, "a").state == TaskState.DEAD


class TestExpireLeases:
    def test_expiry_is_a_retryable_failure(self, h):
        run_id = h.fire(h.create())
        token = h.grant(run_id, "a")
        reply, effects = h.one(ExpireLeases((ExpiredLease(run_id, "a", token, "timeout", 0.5),)))
        assert reply == Done()
        inst = h.inst(run_id, "a")
        assert (inst.state, inst.last_error, inst.retry_at_ms) == (
            TaskState.RETRY_WAIT, "timeout", h.now + 1_000)
        assert effects.lease_ended == [(run_id, "a", token)]
        assert effects.dispatchable == [(run_id, "a")]

    def test_repeated_expiry_dead_letters(self, h):
        run_id = h.fire(h.create())
        for _ in range(3):
            token = h.grant(run_id, "a")
            h.one(ExpireLeases((ExpiredLease(run_id, "a", token),)))
            h.now = max(h.now, h.inst(run_id, "a").retry_at_ms)
        assert h.inst(run_id, "a").state == TaskState.DEAD
        assert h.state.dead_letters[(run_id, "a")].last_error == "lease expired"

    def test_stale_expiry_is_ignored(self, h):
        run_id = h.fire(h.create(h.spec({"a": [], "b": []})))
        old = h.grant(run_id, "a")
        h.one(CompleteTask(run_id, "a", old))
        current = h.grant(run_id, "b")
        reply = h.unchanged(ExpireLeases((
            ExpiredLease(run_id, "a", old),
            ExpiredLease(run_id, "b", current - 1),
            ExpiredLease("nope@1", "a", 1),
            ExpiredLease(run_id, "zz", current),
        )))
        assert reply == Done()
        assert h.inst(run_id, "b").state == TaskState.LEASED


def test_rejected_is_a_value_not_an_exception(h):
    reply, _ = h.one(FailTask("x@1", "a", 1, "e", True))
    assert isinstance(reply, Rejected)
