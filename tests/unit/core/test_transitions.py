"""State transitions as data: the tables, the refusal of anything else, the doc copy."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gnomon.node.core import apply, circuits, limits
from gnomon.node.core.commands import Barrier
from gnomon.node.core.model import (
    CLOSED_CIRCUIT,
    Backfill,
    BackfillStatus,
    Circuit,
    CircuitStatus,
    RunState,
    TaskState,
)
from gnomon.node.core.transitions import (
    BACKFILL_TRANSITIONS,
    CIRCUIT_TRANSITIONS,
    RUN_TRANSITIONS,
    TASK_TRANSITIONS,
    BackfillEvent,
    CircuitEvent,
    IllegalTransition,
    RunEvent,
    TaskEvent,
    move_backfill,
    move_circuit,
    move_run,
    move_task,
    render_tables,
)

DESIGN = Path(__file__).resolve().parents[3] / "node" / "core" / "DESIGN.md"


def test_design_doc_shows_the_tables_of_the_code():
    text = DESIGN.read_text()
    doc = text.split("<!-- transitions:begin -->\n", 1)[1].split("<!-- transitions:end -->")[0]
    assert doc == render_tables()


def test_terminal_task_states_have_no_way_out_but_replay_revive_and_rerun():
    leaving = {old for old, _ in TASK_TRANSITIONS}
    assert leaving & {TaskState.SUCCEEDED} == set()
    assert {ev for (old, ev) in TASK_TRANSITIONS if old == TaskState.CANCELLED} == {
        TaskEvent.RERUN}
    assert {ev for (old, ev) in TASK_TRANSITIONS if old == TaskState.DEAD} == {
        TaskEvent.REPLAY, TaskEvent.RERUN}
    assert {ev for (old, ev) in TASK_TRANSITIONS
            if old == TaskState.UPSTREAM_FAILED} == {TaskEvent.REVIVE, TaskEvent.RERUN}
    assert {old for old, _ in RUN_TRANSITIONS} & {RunState.SUCCEEDED, RunState.SKIPPED} == set()


def test_an_illegal_transition_raises_and_changes_nothing(h):
    run_id = h.fire(h.create())
    inst = h.inst(run_id, "a")
    with pytest.raises(IllegalTransition, match="no 'complete' from 'ready'"):
        move_task(inst, TaskEvent.COMPLETE)
    assert inst.state == TaskState.READY
    h.complete(run_id, "a")
    run = h.run(run_id)
    with pytest.raises(IllegalTransition, match="no 'skip' from 'succeeded'"):
        move_run(h.state, run, RunEvent.SKIP)
    assert run.state == RunState.SUCCEEDED


def test_run_moves_keep_the_active_count(h):
    run_id = h.fire(h.create())
    assert h.state.active_runs == 1
    h.complete(run_id, "a")
    assert h.state.active_runs == 0


def test_the_handler_table_refuses_a_command_type_twice():
    with pytest.raises(ValueError, match="Barrier registered twice"):
        apply.handler_table([(Barrier, limits._barrier), (Barrier, limits._barrier)])


def test_a_backfill_that_ended_stays_ended():
    assert {old for old, _ in BACKFILL_TRANSITIONS} == {BackfillStatus.RUNNING}
    done = Backfill(0, 10, 10, 1, status=BackfillStatus.DONE)
    with pytest.raises(IllegalTransition, match="no 'cancel' from 'done'"):
        move_backfill(done, BackfillEvent.CANCEL)


def test_moves_of_immutable_values_return_the_new_value_with_the_changes():
    running = Backfill(0, 10, 0, 2)
    moved = move_backfill(running, BackfillEvent.FINISH, next_slot_ms=10, finished_ms=7)
    assert moved == dataclasses.replace(running, status=BackfillStatus.DONE, next_slot_ms=10,
                                        finished_ms=7)
    assert running.status == BackfillStatus.RUNNING
    opened = move_circuit(CLOSED_CIRCUIT, CircuitEvent.TRIP, opened_ms=5, opens=1)
    assert (opened.status, opened.opened_ms, opened.opens) == (CircuitStatus.OPEN, 5, 1)
    with pytest.raises(IllegalTransition, match="no 'cooled' from 'closed'"):
        move_circuit(CLOSED_CIRCUIT, CircuitEvent.COOLED)


def test_a_reset_closes_a_breaker_from_every_state_keeping_only_opens():
    assert {old for (old, ev) in CIRCUIT_TRANSITIONS if ev == CircuitEvent.RESET} == {
        CircuitStatus.CLOSED, CircuitStatus.OPEN, CircuitStatus.HALF_OPEN}
    # A field added to Circuit must be decided here: does a reset forget it?
    assert [f.name for f in dataclasses.fields(Circuit)] == [
        "status", "opened_ms", "recent_failures", "probe_run_id", "opens"]
    for status in (CircuitStatus.CLOSED, CircuitStatus.OPEN, CircuitStatus.HALF_OPEN):
        tripped = Circuit(status, opened_ms=9, recent_failures=(True, False),
                          probe_run_id="j1@5", opens=3)
        assert circuits._reset(tripped) == dataclasses.replace(CLOSED_CIRCUIT, opens=3)
