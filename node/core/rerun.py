"""RerunRun: a fresh series for a run's dead, cancelled and upstream-failed tasks.

Imports `runs`.
"""

from __future__ import annotations

from gnomon.node.core.commands import RerunRun
from gnomon.node.core.common import Ctx
from gnomon.node.core.dag import graph
from gnomon.node.core.errors import Code, Rejected
from gnomon.node.core.model import RunState, TaskState
from gnomon.node.core.results import Reply, RunReply
from gnomon.node.core.runs import _make_ready
from gnomon.node.core.transitions import RunEvent, TaskEvent, move_run, move_task

_RERUNNABLE = (TaskState.DEAD, TaskState.CANCELLED, TaskState.UPSTREAM_FAILED)


def _rerun_run(ctx: Ctx, cmd: RerunRun) -> Reply:
    state = ctx.state
    run = state.runs.get(cmd.run_id)
    if run is None:
        return Rejected(Code.NOT_FOUND, f"run_id: no run {cmd.run_id!r} in memory (runs that "
                        "moved to the history store cannot be re-run)")
    if run.job_id not in state.jobs:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"run_id: the job of run {run.run_id!r} was deleted")
    if run.state not in (RunState.RUNNING, RunState.FAILED, RunState.CANCELLED):
        return Rejected(Code.FAILED_PRECONDITION,
                        f"run_id: run {run.run_id!r} is {run.state}: only a failed, cancelled "
                        "or running run is re-run")
    dag = graph(run.spec)
    for index, name in enumerate(cmd.task_names):
        inst = run.tasks.get(name)
        if inst is None:
            return Rejected(Code.NOT_FOUND,
                            f"task_names[{index}]: run {run.run_id!r} has no task {name!r}")
        if inst.state not in _RERUNNABLE:
            return Rejected(Code.FAILED_PRECONDITION,
                            f"task_names[{index}]: task {name!r} is {inst.state}: only a dead, "
                            "cancelled or upstream-failed task is retried")
    chosen = dict.fromkeys(cmd.task_names) if cmd.task_names else dict.fromkeys(
        n for n, i in run.tasks.items() if i.state in _RERUNNABLE)
    for name in list(chosen):  # the tasks they block run again too
        for below in dag.descendants(name):
            if run.tasks[below].state in _RERUNNABLE:
                chosen[below] = None
    if not chosen:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"run_id: run {run.run_id!r} has no failed, cancelled or "
                        "upstream-failed task to re-run")
    for name in dag.order:
        if name not in chosen:
            continue
        inst = run.tasks[name]
        ctx.state.dead_letters.pop((run.run_id, name), None)
        move_task(inst, TaskEvent.RERUN)
        inst.attempt, inst.retry_at_ms, inst.finished_ms = 0, 0, 0
    for name in run.tasks:
        inst = run.tasks[name]
        if name in chosen and all(run.tasks[d].state == TaskState.SUCCEEDED
                                  for d in dag.deps[name]):
            _make_ready(ctx, run, inst)
    run.cancel_requested = False
    if run.state != RunState.RUNNING:
        move_run(state, run, RunEvent.REOPEN)
        run.finished_ms, run.reason = 0, ""
    pinned = state.pinned.get(run.job_id)
    if pinned and run.run_id in pinned:  # running again: it rejoins the order when it ends
        del pinned[run.run_id]
        if not pinned:
            del state.pinned[run.job_id]
    return RunReply(run_id=run.run_id)


HANDLER_PAIRS = [(RerunRun, _rerun_run)]
