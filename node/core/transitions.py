"""Every state transition of task instances, runs, circuit breakers and backfills, as data
(h11's EVENT_TRIGGERED_TRANSITIONS): one table of (state, event) -> state per entity, and the
one function per entity that applies it. No handler assigns a state itself; a new breaker
starts closed (`CLOSED_CIRCUIT`) and a new backfill running (done at once when it has no
slots): creations, not transitions.

An event that the table does not allow from the current state raises IllegalTransition: a
handler that asks for one has a bug, and apply crashing (which stops the node) is the right
answer — never a state nobody designed. node/core/DESIGN.md carries the tables as rendered by
`render_tables()`; a test keeps the two equal.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gnomon.node.core.index import RunFifo
from gnomon.node.core.model import (
    TERMINAL_RUN_STATES,
    Backfill,
    BackfillStatus,
    Circuit,
    CircuitStatus,
    Run,
    RunState,
    State,
    TaskInstance,
    TaskState,
)


class TaskEvent:
    DEPS_MET = "deps_met"  # every dependency succeeded (or there are none)
    GRANT = "grant"  # a worker was granted a lease
    COMPLETE = "complete"  # the holder reported success
    RETRY = "retry"  # the attempt failed (report, expiry, timeout) and attempts remain
    GIVE_UP = "give_up"  # the attempt failed for good: dead-lettered
    UPSTREAM_DEAD = "upstream_dead"  # a task it depends on (transitively) died
    CANCEL = "cancel"  # its run was cancelled, or its job deleted
    REPLAY = "replay"  # its dead letter was replayed: a fresh attempt series
    REVIVE = "revive"  # a replay revived the dead task that blocked it
    RERUN = "rerun"  # its run (or it) was re-run: a fresh attempt series


class RunEvent:
    SKIP = "skip"  # the slot was skipped by the misfire policy
    SUCCEED = "succeed"  # every task succeeded
    FAIL = "fail"  # every task is terminal, some died
    CANCEL = "cancel"  # cancelled, or a task of it was cancelled and the rest ended
    REOPEN = "reopen"  # a dead letter of it was replayed
    START = "start"  # a run buffered by the overlap policy starts (an active one ended)


class CircuitEvent:
    TRIP = "trip"  # closed: failure_percent of the window's runs failed
    COOLED = "cooled"  # open: the cool-down passed (a scheduled fire asks; it may probe)
    PROBE_SUCCEEDED = "probe_succeeded"  # the half-open breaker's probe run succeeded
    PROBE_FAILED = "probe_failed"  # the probe run failed
    RESET = "reset"  # ResetCircuit, or SetQueueCircuit with a changed rule


class BackfillEvent:
    STEP = "step"  # a BackfillStep that leaves slots of the range to go
    FINISH = "finish"  # a BackfillStep that exhausted the range (or the leader's last)
    CANCEL = "cancel"  # CancelBackfill


_LIVE = (TaskState.PENDING, TaskState.READY, TaskState.LEASED, TaskState.RETRY_WAIT)

TASK_TRANSITIONS: dict[tuple[str, str], str] = {
    (TaskState.PENDING, TaskEvent.DEPS_MET): TaskState.READY,
    (TaskState.READY, TaskEvent.GRANT): TaskState.LEASED,
    (TaskState.RETRY_WAIT, TaskEvent.GRANT): TaskState.LEASED,
    (TaskState.LEASED, TaskEvent.COMPLETE): TaskState.SUCCEEDED,
    (TaskState.LEASED, TaskEvent.RETRY): TaskState.RETRY_WAIT,
    (TaskState.LEASED, TaskEvent.GIVE_UP): TaskState.DEAD,
    (TaskState.PENDING, TaskEvent.UPSTREAM_DEAD): TaskState.UPSTREAM_FAILED,
    **{(state, TaskEvent.CANCEL): TaskState.CANCELLED for state in _LIVE},
    (TaskState.DEAD, TaskEvent.REPLAY): TaskState.READY,
    (TaskState.UPSTREAM_FAILED, TaskEvent.REVIVE): TaskState.PENDING,
    **{(state, TaskEvent.RERUN): TaskState.PENDING
       for state in (TaskState.DEAD, TaskState.CANCELLED, TaskState.UPSTREAM_FAILED)},
}

RUN_TRANSITIONS: dict[tuple[str, str], str] = {
    (RunState.RUNNING, RunEvent.SKIP): RunState.SKIPPED,
    (RunState.RUNNING, RunEvent.SUCCEED): RunState.SUCCEEDED,
    (RunState.RUNNING, RunEvent.FAIL): RunState.FAILED,
    (RunState.RUNNING, RunEvent.CANCEL): RunState.CANCELLED,
    # A replayed dead letter reopens its run, whether other tasks still run or it had ended
    # (failed, or cancelled when another task of it was cancelled).
    (RunState.RUNNING, RunEvent.REOPEN): RunState.RUNNING,
    (RunState.FAILED, RunEvent.REOPEN): RunState.RUNNING,
    (RunState.CANCELLED, RunEvent.REOPEN): RunState.RUNNING,
    (RunState.QUEUED, RunEvent.START): RunState.RUNNING,
    # Cancelled while buffered (CancelRun, job deleted, superseded, TERMINATE_OTHER).
    (RunState.QUEUED, RunEvent.CANCEL): RunState.CANCELLED,
}


CIRCUIT_TRANSITIONS: dict[tuple[str, str], str] = {
    (CircuitStatus.CLOSED, CircuitEvent.TRIP): CircuitStatus.OPEN,
    (CircuitStatus.OPEN, CircuitEvent.COOLED): CircuitStatus.HALF_OPEN,
    (CircuitStatus.HALF_OPEN, CircuitEvent.PROBE_SUCCEEDED): CircuitStatus.CLOSED,
    (CircuitStatus.HALF_OPEN, CircuitEvent.PROBE_FAILED): CircuitStatus.OPEN,
    **{(status, CircuitEvent.RESET): CircuitStatus.CLOSED
       for status in (CircuitStatus.CLOSED, CircuitStatus.OPEN, CircuitStatus.HALF_OPEN)},
}

BACKFILL_TRANSITIONS: dict[tuple[str, str], str] = {
    (BackfillStatus.RUNNING, BackfillEvent.STEP): BackfillStatus.RUNNING,
    (BackfillStatus.RUNNING, BackfillEvent.FINISH): BackfillStatus.DONE,
    (BackfillStatus.RUNNING, BackfillEvent.CANCEL): BackfillStatus.CANCELLED,
}


class IllegalTransition(Exception):
    """A handler asked for a transition the tables do not have: a bug; the node must stop."""


def move_task(inst: TaskInstance, event: str) -> None:
    new = TASK_TRANSITIONS.get((inst.state, event))
    if new is None:
        raise IllegalTransition(f"task {inst.idempotency_key}: no {event!r} from {inst.state!r}")
    inst.state = new


def move_run(state: State, run: Run, event: str) -> None:
    """Also keeps the derived count of active (RUNNING) runs, the open runs of each job and
    the order runs ended in."""
    new = RUN_TRANSITIONS.get((run.state, event))
    if new is None:
        raise IllegalTransition(f"run {run.run_id}: no {event!r} from {run.state!r}")
    state.active_runs += (new == RunState.RUNNING) - (run.state == RunState.RUNNING)
    old = run.state
    if old != new:
        untrack_open(state, run)
        run.state = new
        track_open(state, run)
    if new in TERMINAL_RUN_STATES:  # ended: it joins its job's retention order
        fifo = state.retained.get(run.job_id)
        if fifo is None:
            fifo = state.retained[run.job_id] = RunFifo()
        fifo.push(run.run_id)


def move_circuit(circuit: Circuit, event: str, **changes: Any) -> Circuit:
    """The breaker after `event`: a new value (breaker states are immutable; the caller stores
    it) with the table's status and `changes`."""
    new = CIRCUIT_TRANSITIONS.get((circuit.status, event))
    if new is None:
        raise IllegalTransition(f"circuit: no {event!r} from {circuit.status!r}")
    return replace(circuit, status=new, **changes)


def move_backfill(backfill: Backfill, event: str, **changes: Any) -> Backfill:
    """The backfill after `event`: a new value, like `move_circuit`."""
    new = BACKFILL_TRANSITIONS.get((backfill.status, event))
    if new is None:
        raise IllegalTransition(
            f"backfill {backfill.number}: no {event!r} from {backfill.status!r}")
    return replace(backfill, status=new, **changes)


def _open_table(state: State, run_state: str) -> dict[str, dict[str, None]] | None:
    if run_state == RunState.RUNNING:
        return state.running_by_job
    if run_state == RunState.QUEUED:
        return state.queued_by_job
    return None


def track_open(state: State, run: Run) -> None:
    """Index a RUNNING or QUEUED run under its job (derived; also used on restore)."""
    table = _open_table(state, run.state)
    if table is not None:
        table.setdefault(run.job_id, {})[run.run_id] = None


def untrack_open(state: State, run: Run) -> None:
    table = _open_table(state, run.state)
    ids = table.get(run.job_id) if table is not None else None
    if ids is not None:
        ids.pop(run.run_id, None)
        if not ids:
            del table[run.job_id]  # type: ignore[union-attr]


def render_tables() -> str:
    """The tables as Markdown (what core/DESIGN.md shows)."""
    lines = []
    for title, table in (("Task", TASK_TRANSITIONS), ("Run", RUN_TRANSITIONS),
                         ("Circuit", CIRCUIT_TRANSITIONS), ("Backfill", BACKFILL_TRANSITIONS)):
        lines += [f"| {title} state | event | new state |", "|---|---|---|"]
        lines += [f"| {old} | {event} | {new} |" for (old, event), new in table.items()]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
