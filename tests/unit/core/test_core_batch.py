"""apply_batch plumbing: cluster clock, dedupe, unknown commands, digest, replay determinism."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from gnomon.node.core import HANDLERS, apply_batch, digest, new_state
from gnomon.node.core.commands import (
    Barrier,
    Batch,
    CancelRun,
    CreateJob,
    DeleteJob,
    ReplayDeadLetters,
    SetPaused,
    TaskKey,
    TriggerJob,
    UpdateJob,
)
from gnomon.node.core.errors import Rejected, UnknownCommand
from gnomon.node.core.model import Limits
from gnomon.node.core.results import Done, Effects, JobReply, RunReply


def test_clock_never_goes_back(h):
    h.apply(now=500)
    assert h.state.clock_ms == 500
    h.apply(now=100)
    assert h.state.clock_ms == 500
    replies, effects = h.apply(Barrier(), now=900)
    assert replies == [Done()] and effects == Effects()
    assert h.state.clock_ms == 900


def test_cluster_time_is_used_not_the_batch_time(h):
    h.apply(now=h.T0 + 1_000)
    job_id = h.create()
    h.one(TriggerJob("", job_id), now=h.T0 - 50_000)
    assert h.state.jobs[job_id].created_ms == h.T0 + 1_000
    assert h.run(f"{job_id}@manual-1").scheduled_for_ms == h.T0 + 1_000


def test_unknown_command_raises(h):
    @dataclasses.dataclass(frozen=True)
    class Mystery:
        request_id: str = ""

    with pytest.raises(UnknownCommand, match="Mystery"):
        h.apply(Mystery())


def test_every_command_has_a_handler():
    from gnomon.node.core import commands

    assert set(HANDLERS) == set(commands.Command.__args__)


class TestDedupe:
    def test_same_request_twice_has_one_effect(self, h):
        command = CreateJob("req-1", h.spec(), next_fire_ms=h.T0)
        first, effects = h.one(command)
        after_first = h.digest()
        second, effects2 = h.one(command)
        assert first == second == JobReply("j1", 1)
        assert effects2 == Effects() and h.digest() == after_first
        assert len(h.state.jobs) == 1

    def test_trigger_retried_gives_the_same_run(self, h):
        job_id = h.create()
        replies, _ = h.apply(TriggerJob("t", job_id), TriggerJob("t", job_id))
        assert replies == [RunReply(f"{job_id}@manual-1")] * 2
        assert len(h.state.runs) == 1

    def test_rejection_is_remembered(self, h):
        first, _ = h.one(DeleteJob("d", "j1"))
        h.create()
        second, _ = h.one(DeleteJob("d", "j1"))
        assert isinstance(first, Rejected) and second == first
        assert "j1" in h.state.jobs

    def test_oldest_entries_are_evicted(self, small):
        h = small
        job_id = h.create()
        for index in range(4):
            h.one(SetPaused(f"r{index}", job_id, index % 2 == 0))
        assert list(h.state.dedupe) == ["r1", "r2", "r3"]
        # r0 (pause) was forgotten: re-sending it applies again.
        version = h.state.jobs[job_id].version
        h.one(SetPaused("r0", job_id, True))
        assert h.state.jobs[job_id].version == version + 1

    @pytest.mark.parametrize(
        "make",
        [
            lambda j, r: UpdateJob("x", j, None, 0, 0),
            lambda j, r: DeleteJob("x", j),
            lambda j, r: SetPaused("x", j, True),
            lambda j, r: TriggerJob("x", j),
            lambda j, r: CancelRun("x", r),
            lambda j, r: ReplayDeadLetters("x", (TaskKey(r, "a"),)),
        ],
    )
    def test_all_request_commands_dedupe(self, h, make):
        job_id = h.create(h.spec({"a": [], "b": []}))
        run_id = h.fire(job_id)
        h.kill(run_id, "a")
        command = make(job_id, run_id)
        if isinstance(command, UpdateJob):
            command = dataclasses.replace(command, spec=h.spec({"z": []}))
        first, _ = h.one(command)
        state_after = h.digest()
        second, effects = h.one(command)
        assert second == first and not isinstance(first, Rejected)
        assert h.digest() == state_after and effects == Effects()

    def test_capacity_zero_remembers_nothing(self):
        state = new_state(Limits(dedupe_capacity=0))
        apply_batch(state, Batch(1, (Barrier(),)))
        job = CreateJob("a", _spec(), 0)
        apply_batch(state, Batch(1, (job,)))
        assert state.dedupe == {}


def _spec():
    from gnomon.node.core.model import JobSpec, Schedule, TaskSpec

    return JobSpec("t", "n", Schedule("once", at_ms=5), (TaskSpec("a"),))


class TestDigest:
    def test_fresh_states_agree_and_differ_after_change(self):
        first, second = new_state(), new_state()
        assert digest(first) == digest(second)
        second.clock_ms = 1
        assert digest(first) != digest(second)

    def test_deepcopy_has_same_digest(self, h):
        run_id = h.fire(h.create(h.spec({"a": [], "b": ["a"]})))
        h.kill(run_id, "a")
        h.one(SetPaused("p", "j1", True))
        assert digest(copy.deepcopy(h.state)) == h.digest()

    def test_order_of_plain_dicts_does_not_matter_but_dedupe_order_does(self, h):
        h.create(h.spec(name="x"))
        h.create(h.spec(name="y"))
        h.one(Barrier())
        h.apply(SetPaused("r1", "j1", True), SetPaused("r2", "j2", True))
        reordered = copy.deepcopy(h.state)
        reordered.jobs = dict(reversed(list(reordered.jobs.items())))
        assert digest(reordered) == h.digest()
        reordered.dedupe.move_to_end("r1")
        assert digest(reordered) != h.digest()

    def test_every_field_counts(self, h):
        run_id = h.fire(h.create())
        base = h.digest()
        h.inst(run_id, "a").last_error = "x"
        assert h.digest() != base

    def test_unencodable_value_raises(self):
        state = new_state()
        state.dedupe["r"] = object()
        with pytest.raises(TypeError):
            digest(state)


def test_two_replicas_replaying_the_same_log_agree(h):
    from gnomon.node.core.commands import CompleteTask, FailTask, Fire, GrantLeases, LeaseGrant

    log: list[Batch] = []

    def propose(*commands, now):
        batch = Batch(now, commands)
        log.append(batch)
        return apply_batch(h.state, batch)

    spec = h.spec({"a": [], "b": ["a"], "c": ["a"]})
    propose(CreateJob("c1", spec, h.T0), now=h.T0 - 10)
    propose(now=h.T0)
    propose(Fire("j1", h.T0, h.T0 + 60_000), now=h.T0)
    propose(GrantLeases((LeaseGrant("j1@1000000", "a", "w", 10),)), now=h.T0 + 1)
    propose(CompleteTask("j1@1000000", "a", 1), now=h.T0 - 400)
    propose(GrantLeases((LeaseGrant("j1@1000000", "b", "w", 10),
                         LeaseGrant("j1@1000000", "c", "w", 10))), now=h.T0 + 5)
    propose(FailTask("j1@1000000", "b", 2, "e", True, 0.25), now=h.T0 + 6)
    replica = new_state(h.limits)
    for batch in log:
        apply_batch(replica, batch)
    assert digest(replica) == h.digest()
    assert h.state.last_token == 3 and h.inst("j1@1000000", "b").state == "retry_wait"
