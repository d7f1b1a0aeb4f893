"""Replicated limits and the bounds they set: SetLimits, dedupe by count and age, the
dead-letter bound, attempt records, lease checkpoints, the paging index."""

from __future__ import annotations

import dataclasses

from gnomon.node.core.commands import (
    CheckpointLeases,
    CompleteTask,
    CreateJob,
    DeleteJob,
    FailTask,
    LeaseCheckpoint,
    SetLimits,
)
from gnomon.node.core.errors import Code
from gnomon.node.core.index import JobOrder
from gnomon.node.core.model import Limits
from gnomon.node.core.results import Done, JobReply, LimitsReply


class TestSetLimits:
    def test_replaces_the_limits_and_counts_versions(self, h):
        limits = dataclasses.replace(Limits(), runs_retained_per_job=3)
        reply, _ = h.one(SetLimits("s1", limits))
        assert reply == LimitsReply(1) and h.state.limits == limits
        reply, _ = h.one(SetLimits("s2", Limits(), expected_version=1))
        assert reply == LimitsReply(2)

    def test_rejections_change_nothing(self, h):
        h.rejects(SetLimits("", dataclasses.replace(Limits(), max_dead_letters=0)),
                  Code.INVALID_ARGUMENT, "limits.max_dead_letters: must be >= 1, got 0")
        h.rejects(SetLimits("", Limits(), expected_version=7), Code.FAILED_PRECONDITION,
                  "expected_version: the limits are at version 0, not 7")

    def test_lowering_dedupe_capacity_trims_at_once(self, h):
        h.apply(*[CreateJob(f"r{i}", h.spec(name=f"m{i}"), h.T0) for i in range(4)])
        h.one(SetLimits("", dataclasses.replace(Limits(), dedupe_capacity=2)))
        assert list(h.state.dedupe) == ["r2", "r3"]


class TestDedupeAge:
    def test_a_request_id_is_forgotten_after_the_age_bound(self):
        from tests.unit.core.conftest import Harness

        h = Harness(dataclasses.replace(Limits(), dedupe_max_age_ms=1_000))
        first, _ = h.one(CreateJob("r", h.spec(name="a"), h.T0))
        again, _ = h.one(CreateJob("r", h.spec(name="b"), h.T0), now=h.T0 + 999)
        assert again == first  # within the bound: the first answer, nothing applied
        assert len(h.state.jobs) == 1
        later, _ = h.one(CreateJob("r", h.spec(name="b"), h.T0), now=h.T0 + 1_001)
        assert later == JobReply("j2", 1)  # beyond it: a new request


class TestDeadLetterBound:
    def test_oldest_leave_the_queue_counted_and_their_runs_go_to_history(self):
        from tests.unit.core.conftest import Harness

        h = Harness(dataclasses.replace(Limits(), max_dead_letters=2, runs_retained_per_job=0))
        job = h.create()
        runs = [h.fire(job) for _ in range(3)]
        evicted = []
        for run_id in runs:
            evicted += h.kill(run_id, "a").evicted_runs
        assert list(h.state.dead_letters) == [(runs[1], "a"), (runs[2], "a")]
        assert h.state.dead_letters_evicted == 1
        assert [r.run_id for r in evicted] == [runs[0]]
        assert evicted[0].tasks["a"].state == "dead"


class TestAttempts:
    def test_each_finished_attempt_is_recorded_and_bounded(self):
        from tests.unit.core.conftest import Harness

        h = Harness(dataclasses.replace(Limits(), max_attempt_records=2))
        run_id = h.fire(h.create())
        tokens = []
        for _ in range(2):
            token = h.grant(run_id, "a", worker="w1")
            h.now += 10
            h.one(FailTask(run_id, "a", token, "boom", True, 0.5, output_tail="out",
                           exit_code=2, duration_ms=7))
            tokens.append(token)
            h.now = h.inst(run_id, "a").retry_at_ms
        token = h.grant(run_id, "a", worker="w2")
        reply, _ = h.one(CompleteTask(run_id, "a", token, b"ok", output_tail="done",
                                      exit_code=0, duration_ms=3))
        assert reply == Done()
        attempts = h.inst(run_id, "a").attempts
        assert [(a.fencing_token, a.outcome) for a in attempts] == [
            (tokens[1], "failed"), (token, "succeeded")]
        assert (attempts[0].exit_code, attempts[0].duration_ms, attempts[0].output_tail) == (
            2, 7, "out")
        assert (attempts[1].worker_id, attempts[1].output_tail) == ("w2", "done")


class TestCheckpoints:
    def test_current_token_is_checkpointed_stale_ignored_zero_clears(self, h):
        run_id = h.fire(h.create())
        token = h.grant(run_id, "a")
        h.now += 100
        h.one(CheckpointLeases((LeaseCheckpoint(run_id, "a", token, 2_500),
                                LeaseCheckpoint(run_id, "a", token + 9, 1))))
        inst = h.inst(run_id, "a")
        assert (inst.lease_remaining_ms, inst.lease_checkpoint_ms) == (2_500, h.now)
        h.one(CheckpointLeases((LeaseCheckpoint(run_id, "a", token, 0),)))
        assert (inst.lease_remaining_ms, inst.lease_checkpoint_ms) == (0, 0)


class TestJobOrder:
    def test_pages_skip_deleted_jobs_and_compact(self, h):
        ids = [h.create(h.spec(name=f"n{i}")) for i in range(200)]
        for job_id in ids[:150]:
            h.one(DeleteJob("", job_id))
        alive = lambda n: f"j{n}" in h.state.jobs  # noqa: E731
        assert h.state.job_order.page(0, 3, alive) == [151, 152, 153]
        assert len(h.state.job_order) == 50
        assert len(h.state.job_order._seqs) < 200  # compacted
        assert h.state.tenant_job_order["acme"].page(198, 10, alive) == [199, 200]

    def test_add_refuses_a_number_out_of_order(self):
        order = JobOrder()
        order.add(2)
        try:
            order.add(1)
        except ValueError as exc:
            assert "not after" in str(exc)
        else:
            raise AssertionError("accepted a smaller number")
