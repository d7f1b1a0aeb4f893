"""State transitions as data: the tables, the refusal of anything else, the doc copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from gnomon.node.core import apply, limits
from gnomon.node.core.commands import Barrier
from gnomon.node.core.model import RunState, TaskState
from gnomon.node.core.transitions import (
    RUN_TRANSITIONS,
    TASK_TRANSITIONS,
    IllegalTransition,
    RunEvent,
    TaskEvent,
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
