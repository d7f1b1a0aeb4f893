"""Shape rules of a JobSpec's task DAG, and the ranges of the replicated limits: the one
place of these rules. apply() checks them (it must stay total on any log entry) and the
leader's input validation (node/spec/validate.py) calls the same functions before proposing, so a
user sees exactly the message apply would give.

Name syntax, sizes and schedule expressions are the leader's job alone (before proposing).
"""

from __future__ import annotations

from gnomon.node.core.errors import Code, Rejected
from gnomon.node.core.model import (
    DEFAULT_MAX_BUFFERED_RUNS,
    OVERLAP_POLICIES,
    CircuitBreaker,
    JobSpec,
    Limits,
    OverlapPolicy,
    ScheduleKind,
    TaskSpec,
)

# Limits field -> smallest allowed value.
LIMIT_MINIMUMS = {
    "dedupe_capacity": 0,
    "dedupe_max_age_ms": 0,
    "runs_retained_per_job": 0,
    "max_dead_letters": 1,
    "max_attempt_records": 0,
    "max_tokens_per_tenant": 1,
    "max_queue_circuits_per_tenant": 1,
}


def validate_limits(limits: Limits) -> Rejected | None:
    """None if every replicated limit is in range, else INVALID_ARGUMENT naming the field."""
    for name, minimum in LIMIT_MINIMUMS.items():
        value = getattr(limits, name)
        if value < minimum:
            return _invalid(f"limits.{name}: must be >= {minimum}, got {value}")
    return None


def validate_spec(spec: JobSpec) -> Rejected | None:
    """None if the DAG and the overlap fields of `spec` are usable, else INVALID_ARGUMENT
    naming the field and rule."""
    return check_dag(spec.tasks) or check_overlap(spec) or check_bounds(spec)


def check_breaker(breaker: CircuitBreaker, field: str) -> Rejected | None:
    """A breaker's rule (a job's `spec.circuit_breaker` or a queue's `breaker`)."""
    if breaker.window_runs < 1:
        return _invalid(f"{field}.window_runs: must be >= 1, got {breaker.window_runs}")
    if not 1 <= breaker.failure_percent <= 100:
        return _invalid(f"{field}.failure_percent: must be in 1..100, got "
                        f"{breaker.failure_percent}")
    if breaker.cooldown_ms < 1_000:
        return _invalid(f"{field}.cooldown_ms: must be >= 1000, got {breaker.cooldown_ms}")
    return None


def check_bounds(spec: JobSpec) -> Rejected | None:
    """The bounds apply() acts on: max_runs >= 0; delete_after_success only for a one-shot."""
    if spec.max_runs < 0:
        return _invalid(f"spec.max_runs: must be >= 0 (0 means no bound), got {spec.max_runs}")
    if spec.circuit_breaker is not None:
        rejected = check_breaker(spec.circuit_breaker, "spec.circuit_breaker")
        if rejected:
            return rejected
    if spec.delete_after_success and spec.schedule.kind != ScheduleKind.ONCE:
        return _invalid(
            f"spec.delete_after_success: applies to a one-shot (once) schedule only, the "
            f"job's is {spec.schedule.kind or 'unset'} (bound a repeating job with max_runs "
            "or end_at_ms)"
        )
    return None


def check_overlap(spec: JobSpec) -> Rejected | None:
    """The overlap rules that do not depend on node config: a known policy, max_active_runs
    >= 1 when set and not with ALLOW_ALL, max_buffered_runs only with BUFFER_ALL."""
    policy = spec.overlap_policy
    if policy not in OVERLAP_POLICIES:
        return _invalid(
            f"spec.overlap_policy: must be one of {', '.join(OVERLAP_POLICIES)}, got {show(policy)}"
        )
    if spec.max_active_runs is not None:
        if policy == OverlapPolicy.ALLOW_ALL:
            return _invalid(
                f"spec.max_active_runs: ALLOW_ALL starts every fire, so it takes no "
                f"max_active_runs (got {spec.max_active_runs}); use BUFFER_ALL or SKIP to bound "
                "active runs"
            )
        if spec.max_active_runs < 1:
            return _invalid(
                f"spec.max_active_runs: must be >= 1 with overlap policy {policy} (0 would never "
                f"let a run start; leave it unset for 1), got {spec.max_active_runs}"
            )
    if spec.max_buffered_runs < 0:
        return _invalid(
            f"spec.max_buffered_runs: must be >= 0 (0 means the default "
            f"{DEFAULT_MAX_BUFFERED_RUNS}), got {spec.max_buffered_runs}"
        )
    if spec.max_buffered_runs and policy != OverlapPolicy.BUFFER_ALL:
        return _invalid(
            f"spec.max_buffered_runs: applies to overlap policy buffer_all only, the job's is "
            f"{policy} (BUFFER_ONE buffers one)"
        )
    return None


def effective_max_active_runs(spec: JobSpec, policy: str) -> int:
    """Runs of the job that may be active at once under `policy` (the job's, or a manual
    trigger's override): 0 means no bound (ALLOW_ALL)."""
    if policy == OverlapPolicy.ALLOW_ALL:
        return 0
    return spec.max_active_runs or 1


def queue_limit(spec: JobSpec) -> int:
    """QUEUED runs of the job start while fewer than this many of its runs are running."""
    return spec.max_active_runs or 1


def effective_buffer(spec: JobSpec, policy: str) -> int:
    """QUEUED runs the policy keeps at most."""
    if policy == OverlapPolicy.BUFFER_ALL:
        return spec.max_buffered_runs or DEFAULT_MAX_BUFFERED_RUNS
    if policy in (OverlapPolicy.BUFFER_ONE, OverlapPolicy.CANCEL_OTHER):
        return 1
    return 0


def check_dag(tasks: tuple[TaskSpec, ...]) -> Rejected | None:
    """The DAG rules: at least one task, unique names, every dependency a task of the job
    (not itself, not twice), no cycle."""
    return (
        _check_not_empty(tasks)
        or _check_unique_names(tasks)
        or _check_dependencies(tasks)
        or _check_acyclic(tasks)
    )


def show(value: str, limit: int = 80) -> str:
    """A bounded repr for messages: user input may be long."""
    if len(value) <= limit:
        return repr(value)
    return repr(value[:limit]) + f"... ({len(value)} characters)"


def _invalid(detail: str) -> Rejected:
    return Rejected(Code.INVALID_ARGUMENT, detail)


def _check_not_empty(tasks: tuple[TaskSpec, ...]) -> Rejected | None:
    if not tasks:
        return _invalid("spec.tasks: at least one task is required")
    return None


def _check_unique_names(tasks: tuple[TaskSpec, ...]) -> Rejected | None:
    seen: dict[str, int] = {}
    for index, task in enumerate(tasks):
        if task.name in seen:
            return _invalid(
                f"spec.tasks[{index}].name: duplicate task name {show(task.name)} "
                f"(also spec.tasks[{seen[task.name]}])"
            )
        seen[task.name] = index
    return None


def _check_dependencies(tasks: tuple[TaskSpec, ...]) -> Rejected | None:
    names = {task.name for task in tasks}
    for index, task in enumerate(tasks):
        field = f"spec.tasks[{index}].depends_on"
        listed: dict[str, None] = {}
        for dep in task.depends_on:
            if dep == task.name:
                return _invalid(f"{field}: task {show(task.name)} depends on itself")
            if dep not in names:
                return _invalid(f"{field}: unknown task {show(dep)}")
            if dep in listed:
                return _invalid(f"{field}: {show(dep)} is listed twice")
            listed[dep] = None
    return None


def _check_acyclic(tasks: tuple[TaskSpec, ...]) -> Rejected | None:
    cycle = find_cycle({task.name: task.depends_on for task in tasks})
    if cycle:
        path = " -> ".join(cycle)
        return _invalid(f"spec.tasks: dependency cycle {path} (a -> b: a depends on b)")
    return None


def find_cycle(deps: dict[str, tuple[str, ...]]) -> list[str]:
    """A cycle of the 'depends on' relation as a closed path [a, b, ..., a], or [].

    Iterative DFS (DAGs may be deep), visiting tasks and edges in spec order so the
    reported path is deterministic.
    """
    done: dict[str, None] = {}
    for root in deps:
        if root in done:
            continue
        path: list[str] = [root]
        on_path: dict[str, int] = {root: 0}
        cursors: list[int] = [0]
        while path:
            current = path[-1]
            edges = deps.get(current, ())
            if cursors[-1] == len(edges):
                done[current] = None
                del on_path[current]
                path.pop()
                cursors.pop()
                continue
            nxt = edges[cursors[-1]]
            cursors[-1] += 1
            if nxt in on_path:
                return path[on_path[nxt]:] + [nxt]
            if nxt in done or nxt not in deps:
                continue
            on_path[nxt] = len(path)
            path.append(nxt)
            cursors.append(0)
    return []
