"""Work per command does not grow with the state (issue 14: every apply handler O(1) or
O(size of the command)).

Work is counted, not timed: the number of lines of node/core executed while one command is
applied, to a small and to a large state that differ only in background (other jobs, dedupe
entries, runs of the same job that are active or pinned by dead letters). A handler whose
count grows with the background is not O(1). Ending a run used to scan every run of its job
(`_enforce_retention`, the collapse under saturation in issue 14); the retention order
(`State.retained`) made it O(runs evicted).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from gnomon.node import core
from gnomon.node.core import apply_batch, new_state
from gnomon.node.core.commands import (
    Barrier,
    Batch,
    CancelRun,
    CheckpointLeases,
    CompleteTask,
    CreateJob,
    ExpiredLease,
    ExpireLeases,
    FailTask,
    Fire,
    GrantLeases,
    LeaseCheckpoint,
    LeaseGrant,
    ReplayDeadLetters,
    SetLimits,
    SetPaused,
    TaskKey,
    TriggerJob,
    UpdateJob,
)
from gnomon.node.core.model import (
    JobSpec,
    Limits,
    RetryPolicy,
    Schedule,
    ScheduleKind,
    State,
    TaskSpec,
)
from gnomon.node.core.results import Reply

CORE_DIR = str(Path(core.__file__).parent)
SMALL, LARGE = 4, 40
# Lines that may differ between the two states for an O(1) handler (none expected today).
SLACK = 5
T0 = 1_000_000


def spec(name: str) -> JobSpec:
    return JobSpec(tenant="acme", name=name,
                   schedule=Schedule(kind=ScheduleKind.INTERVAL, interval_ms=1_000),
                   tasks=(TaskSpec("a", retry=RetryPolicy(max_attempts=2)),))


@dataclass
class World:
    """A state with `n` of everything around job j1, and j1's fresh run `run` (task ready)."""

    state: State
    run: str = ""
    seq: int = 0

    def apply(self, *commands: object) -> list[Reply]:
        return apply_batch(self.state, Batch(now_ms=T0, commands=commands))[0]

    def trigger(self, request_id: str = "") -> str:
        return self.apply(TriggerJob(request_id, "j1"))[0].run_id

    def grant(self, run_id: str) -> int:
        return self.apply(GrantLeases((LeaseGrant(run_id, "a", "w", 30_000),)))[0].tokens[0]

    def kill(self, run_id: str) -> None:
        self.apply(FailTask(run_id, "a", self.grant(run_id), "fatal", False))

    def fresh_request_id(self) -> str:
        self.seq += 1
        return f"r{self.seq}"


def world(n: int) -> World:
    w = World(new_state(Limits(dedupe_capacity=10 * n + 10, max_dead_letters=10 * n + 10,
                               runs_retained_per_job=2)))
    w.apply(*(CreateJob("", spec(f"job{i}"), T0 + 1_000) for i in range(n + 1)))
    for _ in range(n):
        w.apply(SetPaused(w.fresh_request_id(), "j2", False))  # dedupe entries
        w.kill(w.trigger())  # a failed run of j1 pinned by its dead letter
        w.trigger()  # an active run of j1
    w.run = w.trigger()
    return w


# name -> (set-up on the world returning the command to measure)
Scenario = Callable[[World], object]


def _leased(make: Callable[[str, int], object]) -> Scenario:
    return lambda w: make(w.run, w.grant(w.run))


def _dead(w: World) -> object:
    w.kill(w.run)
    return ReplayDeadLetters("", (TaskKey(w.run, "a"),))


def _dedupe_hit(w: World) -> object:
    w.trigger("again")
    return TriggerJob("again", "j1")


O1: dict[str, Scenario] = {
    "grant": lambda w: GrantLeases((LeaseGrant(w.run, "a", "w", 30_000),)),
    "checkpoint": _leased(lambda r, t: CheckpointLeases((LeaseCheckpoint(r, "a", t, 5),))),
    "fail_retryable": _leased(lambda r, t: FailTask(r, "a", t, "boom", True)),
    "expire": _leased(lambda r, t: ExpireLeases((ExpiredLease(r, "a", t),))),
    "fire": lambda w: Fire("j1", T0 + 1_000, T0 + 2_000),
    "trigger": lambda w: TriggerJob("", "j1"),
    "create": lambda w: CreateJob("", spec("new"), T0 + 1_000),
    "update": lambda w: UpdateJob("", "j1", replace(spec("job0"), priority=3), 0, T0 + 1_000),
    "pause": lambda w: SetPaused("", "j1", True),
    "replay": _dead,
    "set_same_limits": lambda w: SetLimits("", w.state.limits),
    "dedupe_hit": _dedupe_hit,
    "barrier": lambda w: Barrier(),
}
# Handlers that end a run call _enforce_retention, which lists every run of the job (active
# ones and those pinned by dead letters included) to find the terminal ones.
ENDS_A_RUN: dict[str, Scenario] = {
    "complete_ends_run": _leased(lambda r, t: CompleteTask(r, "a", t)),
    "fail_final_ends_run": _leased(lambda r, t: FailTask(r, "a", t, "fatal", False)),
    "cancel_run": lambda w: CancelRun("", w.run),
    "fire_skipped": lambda w: Fire("j1", T0 + 1_000, T0 + 2_000, skip=True),
}


def core_lines(state: State, command: object) -> int:
    """Lines of node/core executed while `command` is applied."""
    count = 0

    def local(frame, event, arg):
        nonlocal count
        count += event == "line"
        return local

    def calls(frame, event, arg):
        return local if frame.f_code.co_filename.startswith(CORE_DIR) else None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        apply_batch(state, Batch(now_ms=T0, commands=(command,)))
    finally:
        sys.settrace(previous)
    return count


def work(scenario: Scenario, n: int) -> int:
    w = world(n)
    return core_lines(w.state, scenario(w))


def test_the_background_is_what_the_scenarios_assume():
    w = world(LARGE)
    runs = w.state.runs_by_job["j1"]
    assert len(runs) == 2 * LARGE + 1 and len(w.state.dead_letters) == LARGE
    assert len(w.state.dedupe) == LARGE and len(w.state.jobs) == LARGE + 1


@pytest.mark.parametrize("name", sorted(O1))
def test_handler_work_does_not_grow_with_the_state(name):
    small, large = work(O1[name], SMALL), work(O1[name], LARGE)
    assert small > 0
    assert large - small <= SLACK, f"{name}: {small} lines with {SMALL}, {large} with {LARGE}"


@pytest.mark.parametrize("name", sorted(ENDS_A_RUN))
def test_ending_a_run_does_not_grow_with_the_runs_of_its_job(name):
    small, large = work(ENDS_A_RUN[name], SMALL), work(ENDS_A_RUN[name], LARGE)
    assert large - small <= SLACK, f"{name}: {small} lines with {SMALL}, {large} with {LARGE}"
