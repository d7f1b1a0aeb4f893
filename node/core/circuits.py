"""Circuit breakers: a job's (`JobSpec.circuit_breaker`) and a queue's (SetQueueCircuit),
ResetCircuit; the holds a scheduled fire asks about and the verdict of a finished run.

Imports only `common` of the slices: runs.py records a finished run's verdict here, fire.py
asks whether a breaker holds a fire.
"""

from __future__ import annotations

from dataclasses import replace

from gnomon.node.core.commands import ResetCircuit, SetQueueCircuit
from gnomon.node.core.common import Ctx, _find_job
from gnomon.node.core.errors import Code, Rejected
from gnomon.node.core.model import (
    CLOSED_CIRCUIT,
    DEFAULT_QUEUE,
    Circuit,
    CircuitBreaker,
    CircuitStatus,
    Job,
    JobSpec,
    QueueCircuit,
    Run,
    RunState,
    RunTrigger,
    State,
    TaskState,
    queue_key,
)
from gnomon.node.core.results import Done, JobReply, Reply
from gnomon.node.core.transitions import CircuitEvent, move_circuit
from gnomon.node.core.validate import check_breaker


def _set_queue_circuit(ctx: Ctx, cmd: SetQueueCircuit) -> Reply:
    table, key = ctx.state.queue_circuits, queue_key(cmd.tenant, cmd.queue)
    if not cmd.tenant:
        return Rejected(Code.INVALID_ARGUMENT, "tenant: required")
    if not cmd.queue:
        return Rejected(Code.INVALID_ARGUMENT, "queue: required")
    old = table.get(key)
    if cmd.breaker is None:
        if old is None:
            return Rejected(Code.NOT_FOUND, f"queue: queue {cmd.queue!r} of tenant "
                            f"{cmd.tenant!r} has no circuit breaker")
        del table[key]
        return Done()
    rejected = check_breaker(cmd.breaker, "breaker")
    if rejected:
        return rejected
    if old is not None and old.breaker == cmd.breaker:
        return Done()  # the same rule again keeps the state
    if old is None and _circuits_of(table, cmd.tenant) >= ctx.limits.max_queue_circuits_per_tenant:
        return Rejected(Code.RESOURCE_EXHAUSTED,
                        f"queue: tenant {cmd.tenant!r} has "
                        f"{ctx.limits.max_queue_circuits_per_tenant} queue circuit breakers, the "
                        "most max_queue_circuits_per_tenant allows; remove one first")
    circuit = _reset(old.circuit) if old is not None else CLOSED_CIRCUIT
    table[key] = QueueCircuit(cmd.tenant, cmd.queue, cmd.breaker, circuit)
    return Done()


def _circuits_of(table: dict[str, QueueCircuit], tenant: str) -> int:
    return sum(1 for qc in table.values() if qc.tenant == tenant)


def _reset_circuit(ctx: Ctx, cmd: ResetCircuit) -> Reply:
    if cmd.queue:
        key = queue_key(cmd.tenant, cmd.queue)
        qc = ctx.state.queue_circuits.get(key)
        if qc is None:
            return Rejected(Code.NOT_FOUND, f"queue: queue {cmd.queue!r} of tenant "
                            f"{cmd.tenant!r} has no circuit breaker")
        ctx.state.queue_circuits[key] = replace(qc, circuit=_reset(qc.circuit))
        return Done()
    job = _find_job(ctx.state, cmd.job_id)
    if isinstance(job, Rejected):
        return job
    job.circuit = _reset(job.circuit)
    ctx.effects.jobs.append(job.job_id)
    return JobReply(job_id=job.job_id, version=job.version)


def _reset(circuit: Circuit) -> Circuit:
    """Closed again (ResetCircuit, a changed queue rule): its window, cool-down and probe
    forgotten, `opens` kept."""
    return move_circuit(circuit, CircuitEvent.RESET, opened_ms=0, recent_failures=(),
                        probe_run_id="")


# --- circuit breaker -----------------------------------------------------------------------------


def _circuit_holds(ctx: Ctx, job: Job) -> str:
    """Why the job's breaker holds this scheduled fire ("": it may run). An open breaker
    whose cool-down passed turns half-open: this fire is its probe."""
    breaker, circuit = job.spec.circuit_breaker, job.circuit
    if breaker is None or circuit.status == CircuitStatus.CLOSED:
        return ""
    if circuit.status == CircuitStatus.OPEN:
        if ctx.now < circuit.opened_ms + breaker.cooldown_ms:
            return "circuit open"
        job.circuit = move_circuit(circuit, CircuitEvent.COOLED, probe_run_id="")
        return ""
    probe = circuit.probe_run_id
    if probe and (probe in ctx.state.running_by_job.get(job.job_id, ())
                  or probe in ctx.state.queued_by_job.get(job.job_id, ())):
        return f"circuit half-open: probe {probe} running"
    # No probe, or it ended without a verdict (cancelled): this fire is the next probe.
    job.circuit = replace(circuit, probe_run_id="")
    return ""


def _circuit_records(ctx: Ctx, run: Run) -> None:
    """A scheduled run that succeeded or failed moves its job's breaker."""
    job = ctx.state.jobs.get(run.job_id)
    if job is None or job.spec.circuit_breaker is None or run.trigger != RunTrigger.SCHEDULE:
        return
    if run.state not in (RunState.SUCCEEDED, RunState.FAILED):
        return
    job.circuit = _next_circuit(ctx, job.spec.circuit_breaker, job.circuit,
                                run.state == RunState.FAILED, run.run_id, ("job", job.job_id))


def _next_circuit(ctx: Ctx, breaker: CircuitBreaker, circuit: Circuit, failed: bool,
                  run_id: str, name: tuple[str, str]) -> Circuit:
    """The breaker's state after a finished run's verdict: the half-open probe closes or
    reopens it; while closed, the window opens it at failure_percent of window_runs."""
    if circuit.status == CircuitStatus.HALF_OPEN and run_id == circuit.probe_run_id:
        if not failed:
            return move_circuit(circuit, CircuitEvent.PROBE_SUCCEEDED, probe_run_id="",
                                recent_failures=(), opened_ms=0)
        ctx.effects.circuit_opened.append(name)
        return move_circuit(circuit, CircuitEvent.PROBE_FAILED, opened_ms=ctx.now,
                            probe_run_id="", opens=circuit.opens + 1)
    if circuit.status != CircuitStatus.CLOSED:
        return circuit
    recent = (*circuit.recent_failures, failed)[-max(1, breaker.window_runs):]
    if (len(recent) >= breaker.window_runs
            and 100 * sum(recent) >= breaker.failure_percent * len(recent)):
        ctx.effects.circuit_opened.append(name)
        return move_circuit(circuit, CircuitEvent.TRIP, opened_ms=ctx.now,
                            recent_failures=(), opens=circuit.opens + 1)
    return replace(circuit, recent_failures=recent)


# --- circuit breaker per queue -------------------------------------------------------------------


def _job_queues(spec: JobSpec) -> list[str]:
    """The queues of the job's tasks, in task order, each once."""
    return list(dict.fromkeys(t.queue or DEFAULT_QUEUE for t in spec.tasks))


def _run_open(state: State, run_id: str) -> bool:
    run = state.runs.get(run_id)
    return run is not None and run.state in (RunState.RUNNING, RunState.QUEUED)


def _queue_circuit_holds(ctx: Ctx, job: Job) -> str:
    """Why a breaker of one of the job's queues holds this scheduled fire ("": none). An
    open one whose cool-down passed turns half-open: this fire may be its probe."""
    table = ctx.state.queue_circuits
    if not table:
        return ""
    for queue in _job_queues(job.spec):
        key = queue_key(job.spec.tenant, queue)
        qc = table.get(key)
        if qc is None or qc.circuit.status == CircuitStatus.CLOSED:
            continue
        circuit = qc.circuit
        if circuit.status == CircuitStatus.OPEN:
            if ctx.now < circuit.opened_ms + qc.breaker.cooldown_ms:
                return f"circuit open: queue {queue}"
            table[key] = replace(qc, circuit=move_circuit(circuit, CircuitEvent.COOLED,
                                                          probe_run_id=""))
            continue
        if circuit.probe_run_id and _run_open(ctx.state, circuit.probe_run_id):
            return f"circuit half-open: queue {queue}: probe {circuit.probe_run_id} running"
        table[key] = replace(qc, circuit=replace(circuit, probe_run_id=""))
    return ""


def _claim_queue_probes(ctx: Ctx, job: Job, run_id: str) -> None:
    """A started scheduled run is the probe of every half-open breaker of its queues."""
    table = ctx.state.queue_circuits
    if not table:
        return
    for queue in _job_queues(job.spec):
        key = queue_key(job.spec.tenant, queue)
        qc = table.get(key)
        if qc is not None and qc.circuit.status == CircuitStatus.HALF_OPEN \
                and not qc.circuit.probe_run_id:
            table[key] = replace(qc, circuit=replace(qc.circuit, probe_run_id=run_id))


def _queue_verdicts(run: Run) -> dict[str, bool]:
    """Per queue of the run's tasks: True if one of its tasks there died, False if all of
    them succeeded (a queue whose tasks were only cancelled or blocked gives no verdict)."""
    verdicts: dict[str, bool] = {}
    undecided: dict[str, None] = {}
    for task in run.spec.tasks:
        queue, state = task.queue or DEFAULT_QUEUE, run.tasks[task.name].state
        if state == TaskState.DEAD:
            verdicts[queue] = True
        elif state != TaskState.SUCCEEDED:
            undecided[queue] = None
        elif queue not in verdicts:
            verdicts[queue] = False
    return {q: v for q, v in verdicts.items() if v or q not in undecided}


def _queue_circuit_records(ctx: Ctx, run: Run) -> None:
    """A scheduled run that succeeded or failed moves the breakers of its queues."""
    table = ctx.state.queue_circuits
    if not table or run.trigger != RunTrigger.SCHEDULE:
        return
    if run.state not in (RunState.SUCCEEDED, RunState.FAILED):
        return
    for queue, failed in _queue_verdicts(run).items():
        key = queue_key(run.tenant, queue)
        qc = table.get(key)
        if qc is not None:
            table[key] = replace(qc, circuit=_next_circuit(ctx, qc.breaker, qc.circuit, failed,
                                                           run.run_id, ("queue", key)))


HANDLER_PAIRS = [(ResetCircuit, _reset_circuit), (SetQueueCircuit, _set_queue_circuit)]
