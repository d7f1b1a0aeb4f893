"""Why a run is where it is (ExplainRun): what each of its tasks waits for, said from the
cluster's own state and bounds, with the bound's value and where to change it.

A pure read of `State`, like run_query. What only the leader knows comes in as plain data:
the workers connected to it (`WorkerView`, None on a node that does not lead) and its
leader-local bounds (`DispatchBounds`: node config, not replicated). Times are cluster time
(`state.clock_ms`). The reasons are the ones the code acts on: the overlap policy that
queued the run (fire.py `_admit`), the dependencies of a pending task, a retry's back-off,
and for a ready task what the dispatcher checks before a grant (dispatch.py `_pick`: a
connected worker of the queue for the tenant, a free slot, the queue's and the tenant's
concurrency caps) and the trigger's fire admission (`fire_admission_max_ready`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gnomon.node.core.job_health import tenant_backlogs
from gnomon.node.core.model import (
    DEFAULT_QUEUE,
    CircuitStatus,
    Run,
    RunState,
    State,
    TaskState,
    queue_key,
)
from gnomon.node.core.run_query import lateness
from gnomon.node.core.validate import effective_max_active_runs

LATE_AFTER_MS = 1_000


class WaitKind:
    """What a run or a task waits for (api.proto WaitKind, lower case)."""

    SKIPPED = "skipped"  # the run did not run: misfire, overlap or circuit (its reason)
    LATE_FIRE = "late_fire"  # the run was created after its slot
    OVERLAP = "overlap"  # QUEUED behind the job's active runs
    CIRCUIT_OPEN = "circuit_open"  # the job's or a queue's breaker skips scheduled fires
    FIRE_ADMISSION = "fire_admission"  # the leader parks the job's fires: backlog at the bound
    UPSTREAM = "upstream"  # a pending task's dependencies have not succeeded
    RETRY_BACKOFF = "retry_backoff"  # waiting out a retry's back-off
    NO_WORKER = "no_worker"  # no connected worker takes the queue for the tenant
    NO_FREE_WORKER = "no_free_worker"  # workers of the queue have no free slot
    TENANT_CONCURRENCY = "tenant_concurrency"  # the tenant holds max_concurrency leases
    QUEUE_CONCURRENCY = "queue_concurrency"  # the queue holds queue_max_concurrency leases
    DISPATCH = "dispatch"  # nothing holds it back: the next grant round takes it
    RUNNING = "running"  # leased: a worker runs it


@dataclass(frozen=True, slots=True)
class WorkerView:
    """A worker connected to the leader: its queues, the tenants whose tasks it takes (None:
    every tenant) and its free slots (credits)."""

    queues: tuple[str, ...]
    tenants: tuple[str, ...] | None
    credits: int


@dataclass(frozen=True, slots=True)
class DispatchBounds:
    """The leader's own bounds (node config): queue -> most leased at once, and the ready
    backlog per (tenant, queue) at which fires are parked (0: no bound)."""

    queue_caps: Mapping[str, int] = field(default_factory=dict)
    fire_admission_max_ready: int = 0


@dataclass(frozen=True, slots=True)
class Wait:
    kind: str
    task: str  # "" for the run itself
    detail: str
    limit: str = ""  # the bound's name, when a bound holds it
    limit_value: int = 0
    current: int = 0  # the bound's current count
    change: str = ""  # where to change it


def explain_run(state: State, run: Run, workers: tuple[WorkerView, ...] | None,
                bounds: DispatchBounds) -> list[Wait]:
    """What `run` waits for, run-level reasons first, then its tasks in spec order."""
    out: list[Wait] = []
    if run.state == RunState.SKIPPED:
        return [_skipped(run)]
    late = lateness(run)
    if late is not None and late > LATE_AFTER_MS:
        out.append(Wait(WaitKind.LATE_FIRE, "", f"created {_ms(late)} after its slot (plus "
                        "the delay chosen on purpose: jitter, spread)"))
    if run.state not in (RunState.RUNNING, RunState.QUEUED):
        return out
    backlog = _ready(state)
    out += _circuits(state, run)
    out += _admission(run, bounds, backlog)
    if run.state == RunState.QUEUED:
        out.append(_overlap(state, run))
        return out
    held = _leases_held(state)
    for spec in run.spec.tasks:
        inst = run.tasks.get(spec.name)
        if inst is not None:
            out += _task_waits(state, run, inst, spec.queue or DEFAULT_QUEUE, spec.depends_on,
                               workers, bounds, held, backlog)
    return out


def _skipped(run: Run) -> Wait:
    reason = run.reason or "skipped"
    change = ("the job's misfirePolicy and misfireGraceMs" if reason.startswith("misfire")
              else "the job's overlapPolicy, maxActiveRuns and maxBufferedRuns"
              if reason.startswith("overlap") else
              "reset the circuit (POST /v1/jobs/{id}/circuit/reset)" if "circuit" in reason
              else "")
    return Wait(WaitKind.SKIPPED, "", f"skipped: {reason}", change=change)


def _circuits(state: State, run: Run) -> list[Wait]:
    out = []
    job = state.jobs.get(run.job_id)
    if job is not None and job.circuit.status == CircuitStatus.OPEN:
        out.append(Wait(WaitKind.CIRCUIT_OPEN, "", "the job's circuit breaker is open: its "
                        "scheduled fires are skipped until the cooldown ends",
                        change=f"POST /v1/jobs/{run.job_id}/circuit/reset"))
    for queue in dict.fromkeys(t.queue or DEFAULT_QUEUE for t in run.spec.tasks):
        qc = state.queue_circuits.get(queue_key(run.tenant, queue))
        if qc is not None and qc.circuit.status == CircuitStatus.OPEN:
            out.append(Wait(WaitKind.CIRCUIT_OPEN, "", f"queue {queue}'s circuit breaker is "
                            "open: scheduled fires of its jobs are skipped",
                            change=f"ResetCircuit with tenant {run.tenant} and queue {queue}"))
    return out


def _admission(run: Run, bounds: DispatchBounds, ready: dict[tuple[str, str], int]
               ) -> list[Wait]:
    """The job's next fires are parked while a queue of its first tasks holds the bound."""
    bound = bounds.fire_admission_max_ready
    if bound <= 0:
        return []
    out = []
    firsts = dict.fromkeys(t.queue or DEFAULT_QUEUE for t in run.spec.tasks if not t.depends_on)
    for queue in firsts:
        count = ready.get((run.tenant, queue), 0)
        if count >= bound:
            out.append(Wait(WaitKind.FIRE_ADMISSION, "", f"tenant {run.tenant} has {count} "
                            f"tasks ready on {queue}: the leader parks the job's next fires "
                            "until fewer wait (late, not lost)",
                            limit="fire_admission_max_ready", limit_value=bound, current=count,
                            change="node config fire_admission_max_ready "
                            "(--fire-admission-max-ready, GNOMON_FIRE_ADMISSION_MAX_READY)"))
    return out


def _overlap(state: State, run: Run) -> Wait:
    spec = run.spec
    job = state.jobs.get(run.job_id)
    policy = job.spec.overlap_policy if job is not None else spec.overlap_policy
    limit = effective_max_active_runs(spec, policy) or 1
    active = sorted(state.running_by_job.get(run.job_id, {}))
    return Wait(WaitKind.OVERLAP, "", f"{run.reason or 'queued'}; overlap policy {policy}: "
                f"active {', '.join(active) or 'none'}", limit="max_active_runs of the job",
                limit_value=limit, current=len(active),
                change=f"the job's overlapPolicy and maxActiveRuns (PATCH /v1/jobs/{run.job_id})")


def _task_waits(state: State, run: Run, inst, queue: str, depends_on: tuple[str, ...],
                workers: tuple[WorkerView, ...] | None, bounds: DispatchBounds,
                held: dict[tuple[str, str], int], backlog: dict[tuple[str, str], int]
                ) -> list[Wait]:
    name = inst.task_name
    if inst.state == TaskState.PENDING:
        waiting = [f"{d} ({run.tasks[d].state})" for d in depends_on
                   if d in run.tasks and run.tasks[d].state != TaskState.SUCCEEDED]
        return [Wait(WaitKind.UPSTREAM, name, f"waits for {', '.join(waiting) or 'upstream'}")]
    if inst.state == TaskState.RETRY_WAIT:
        left = max(0, inst.retry_at_ms - state.clock_ms)
        return [Wait(WaitKind.RETRY_BACKOFF, name, f"attempt {inst.attempt} failed "
                     f"({inst.last_error or 'no error text'}); ready again in {_ms(left)}",
                     change="the task's retry policy (initialBackoffMs, maxBackoffMs, "
                     "multiplier)")]
    if inst.state == TaskState.LEASED:
        return [Wait(WaitKind.RUNNING, name, f"leased to {inst.worker_id} (fencing token "
                     f"{inst.fencing_token}, attempt {inst.attempt})")]
    if inst.state != TaskState.READY:
        return []
    return _ready_waits(state, run, name, queue, workers, bounds, held, backlog)


def _ready_waits(state: State, run: Run, name: str, queue: str,
                 workers: tuple[WorkerView, ...] | None, bounds: DispatchBounds,
                 held: dict[tuple[str, str], int], backlog: dict[tuple[str, str], int]
                 ) -> list[Wait]:
    tenant = run.tenant
    out = []
    if workers is not None:
        serving = [w for w in workers if queue in w.queues
                   and (w.tenants is None or tenant in w.tenants)]
        if not serving:
            out.append(Wait(WaitKind.NO_WORKER, name, f"no connected worker takes queue "
                            f"{queue} for tenant {tenant}",
                            change=f"start a worker of queue {queue} (gnomon worker ... "
                            f"--queue {queue})"))
        elif not sum(w.credits for w in serving):
            out.append(Wait(WaitKind.NO_FREE_WORKER, name, f"{len(serving)} worker(s) of "
                            f"queue {queue} have no free slot", current=len(serving),
                            change="more workers of the queue, or more concurrency each"))
    record = state.access.tenants.get(tenant)
    cap = record.max_concurrency if record is not None else 0
    if cap and held.get(("tenant", tenant), 0) >= cap:
        out.append(Wait(WaitKind.TENANT_CONCURRENCY, name, f"tenant {tenant} holds "
                        f"{held.get(('tenant', tenant), 0)} leases, its max_concurrency",
                        limit=f"max_concurrency of tenant {tenant}", limit_value=cap,
                        current=held.get(("tenant", tenant), 0),
                        change=f"gnomon tenant set {tenant} --max-concurrency N "
                        f"(PUT /v1/tenants/{tenant})"))
    qcap = bounds.queue_caps.get(queue, 0)
    if qcap and held.get(("queue", queue), 0) >= qcap:
        out.append(Wait(WaitKind.QUEUE_CONCURRENCY, name, f"queue {queue} holds "
                        f"{held.get(('queue', queue), 0)} leases, its cap",
                        limit=f"queue_max_concurrency of {queue}", limit_value=qcap,
                        current=held.get(("queue", queue), 0),
                        change="node config queue_max_concurrency (--queue-max-concurrency, "
                        "GNOMON_QUEUE_MAX_CONCURRENCY; each node's, leader-local)"))
    if not out:
        ahead = backlog.get((tenant, queue), 0)
        out.append(Wait(WaitKind.DISPATCH, name, f"ready on {queue} ({ahead} of tenant "
                        f"{tenant} ready there): nothing holds it back"
                        + ("" if workers is not None else
                           "; workers are known to the leader only")))
    return out


def _leases_held(state: State) -> dict[tuple[str, str], int]:
    """Leased tasks per ("tenant", name) and ("queue", name), over the running runs."""
    out: dict[tuple[str, str], int] = {}
    for run in state.runs.values():
        if run.state != RunState.RUNNING:
            continue
        for inst in run.tasks.values():
            if inst.state == TaskState.LEASED:
                queue = run.spec.task(inst.task_name).queue or DEFAULT_QUEUE
                for key in (("tenant", run.tenant), ("queue", queue)):
                    out[key] = out.get(key, 0) + 1
    return out


def _ready(state: State) -> dict[tuple[str, str], int]:
    """Ready tasks per (tenant, queue)."""
    return {key: b.ready for key, b in tenant_backlogs(state).items()}


def _ms(ms: int) -> str:
    if ms < 1_000:
        return f"{ms} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms // 60_000} min"
