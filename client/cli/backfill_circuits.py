"""``gnomon job backfill`` and ``gnomon queue circuit|circuits`` (runs of past slots, queue circuit breakers)."""

from __future__ import annotations

import argparse
import dataclasses
import re
import time
from collections.abc import Callable
from typing import Any

from .._models import Backfill, CircuitBreaker, Job, OverlapPolicy, QueueCircuit
from .errors import EXIT_OK
from .render import fmt_duration, fmt_time, table
from .values import UsageError, parse_duration_ms, parse_instant_ms

__all__ = ["SEMANTICS_COMMANDS", "add_job_backfill", "add_queue_circuit"]

Leaf = Callable[..., argparse.ArgumentParser]
WATCH_INTERVAL_S = 1.0


def _instant(text: str) -> int:
    try:
        return parse_instant_ms(text, "time")
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e).split(": ", 1)[1]) from None


def _duration(text: str) -> int:
    try:
        return parse_duration_ms(text, "duration")
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e).split(": ", 1)[1]) from None


def add_job_backfill(job: Any, leaf: Leaf) -> None:
    p = leaf(job, "backfill", "run every slot of a job's schedule in [--from, --to) that has "
             "not run yet (trigger backfill, paced by the leader); without --from/--to: show "
             "the job's backfill")
    p.add_argument("job", metavar="JOB", help="job id (j12) or name")
    p.add_argument("--tenant", help="tenant of a job given by name (default: default)")
    p.add_argument("--from", dest="from_ms", type=_instant, metavar="TIME",
                   help="first instant of the range (included)")
    p.add_argument("--to", dest="to_ms", type=_instant, metavar="TIME",
                   help="end of the range (excluded; not in the future)")
    p.add_argument("--overlap", "--overlap-policy", dest="overlap",
                   choices=[o.value for o in OverlapPolicy],
                   help="overlap policy of the backfill's runs (default: the job's)")
    p.add_argument("--watch", action="store_true",
                   help="print progress until the backfill is done or cancelled")
    p.add_argument("--cancel", action="store_true", help="stop the job's running backfill")
    p.add_argument("--request-id", help="dedupe key")


def add_queue_circuit(queue: Any, leaf: Leaf) -> None:
    p = leaf(queue, "circuit", "a queue's circuit breaker: show it, set its rule (--window-runs "
             "...), --reset it or --remove it")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--tenant", help="tenant of the queue (default: default)")
    p.add_argument("--window-runs", type=int, metavar="N",
                   help="finished scheduled runs with tasks on the queue it judges")
    p.add_argument("--failure-percent", type=int, metavar="P",
                   help="opens when P%% of them failed (1..100)")
    p.add_argument("--cooldown-ms", "--cooldown", type=_duration, metavar="DURATION",
                   help="open this long, then one probe run decides (>= 1s)")
    p.add_argument("--reset", action="store_true", help="close it by hand")
    p.add_argument("--remove", action="store_true", help="remove the queue's breaker")
    p.add_argument("--request-id", help="dedupe key")
    p = leaf(queue, "circuits", "the queues' circuit breakers and their state")
    p.add_argument("--tenant", help="only this tenant (default: every tenant you may read)")


# --- rendering -------------------------------------------------------------------------------


def backfill_json(job: Job) -> dict[str, Any]:
    bf = job.backfill
    data: dict[str, Any] = {"job_id": job.job_id, "tenant": job.tenant, "name": job.name}
    if bf is not None:
        data["backfill"] = {**dataclasses.asdict(bf), "overlap_policy": (
            bf.overlap_policy.value if bf.overlap_policy else None)}
    else:
        data["backfill"] = None
    return data


def backfill_text(job: Job) -> str:
    bf = job.backfill
    label = f"{job.name} ({job.job_id})"
    if bf is None:
        return f"job {label} has no backfill"
    return (f"backfill of job {label}, {fmt_time(bf.from_ms)} to {fmt_time(bf.to_ms)}: "
            f"{bf.status}, {bf.done_slots} of {bf.total_slots} slots "
            f"({bf.created} runs, {bf.skipped} skipped){_policy(bf)}")


def _policy(bf: Backfill) -> str:
    return f", overlap {bf.overlap_policy.value}" if bf.overlap_policy else ""


def circuit_row(qc: QueueCircuit) -> list[Any]:
    b, c = qc.breaker, qc.circuit
    return [qc.tenant, qc.queue, c.status, f"{b.failure_percent}% of {b.window_runs}",
            fmt_duration(b.cooldown_ms), c.opens, c.probe_run_id or "-"]


def circuit_json(qc: QueueCircuit) -> dict[str, Any]:
    return {"tenant": qc.tenant, "queue": qc.queue,
            "breaker": dataclasses.asdict(qc.breaker), "circuit": {
                **dataclasses.asdict(qc.circuit),
                "recent_failures": list(qc.circuit.recent_failures)}}


_HEADERS = ["TENANT", "QUEUE", "STATE", "OPENS AT", "COOL-DOWN", "OPENED", "PROBE"]


# --- commands --------------------------------------------------------------------------------


def _ref(text: str, tenant: str | None) -> dict[str, Any]:
    if text.startswith("id:") or re.fullmatch(r"j\d+", text):
        return {"job_id": text.removeprefix("id:")}
    return {"tenant": tenant, "name": text.removeprefix("name:")}


def _cmd_job_backfill(ctx: Any) -> int:
    a = ctx.args
    ref = _ref(a.job, a.tenant)
    if a.cancel:
        if a.from_ms is not None or a.to_ms is not None:
            raise UsageError("--cancel and --from/--to do not mix")
        job = ctx.client.cancel_backfill(**ref, request_id=a.request_id)
    elif a.from_ms is not None or a.to_ms is not None:
        if a.from_ms is None or a.to_ms is None:
            raise UsageError("--from and --to go together")
        job = ctx.client.backfill_job(**ref, from_ms=a.from_ms, to_ms=a.to_ms,
                                      overlap_policy=a.overlap, request_id=a.request_id)
    else:
        job = ctx.client.get_job(**ref)
    if a.watch and not ctx.json:
        job = _watch(ctx, job)
    elif a.watch:
        job = ctx.client.wait_backfill(job.job_id, timeout_s=24 * 3600.0)
    ctx.emit(backfill_text(job), backfill_json(job))
    return EXIT_OK


def _watch(ctx: Any, job: Job) -> Job:
    """Print a progress line whenever it changes, until the backfill ends."""
    last = ""
    while True:
        line = backfill_text(job)
        if job.backfill is None or job.backfill.finished:
            return job
        if line != last:
            print(line, file=ctx.out, flush=True)
            last = line
        time.sleep(WATCH_INTERVAL_S)
        job = ctx.client.get_job(job.job_id)


def _cmd_queue_circuit(ctx: Any) -> int:
    a = ctx.args
    rule = (a.window_runs, a.failure_percent, a.cooldown_ms)
    if sum((a.reset, a.remove, any(v is not None for v in rule))) > 1:
        raise UsageError("give one of: a rule (--window-runs ...), --reset, --remove")
    if a.remove:
        ctx.client.set_queue_circuit(a.queue, breaker=None, tenant=a.tenant,
                                     request_id=a.request_id)
        ctx.emit(f"queue {a.queue}: circuit breaker removed",
                 {"tenant": a.tenant or "default", "queue": a.queue, "removed": True})
        return EXIT_OK
    if a.reset:
        qc = ctx.client.reset_queue_circuit(a.queue, tenant=a.tenant, request_id=a.request_id)
    elif any(v is not None for v in rule):
        if any(v is None for v in rule):
            raise UsageError("--window-runs, --failure-percent and --cooldown-ms go together")
        qc = ctx.client.set_queue_circuit(
            a.queue, breaker=CircuitBreaker(a.window_runs, a.failure_percent, a.cooldown_ms),
            tenant=a.tenant, request_id=a.request_id)
    else:
        found = [q for q in ctx.client.list_queue_circuits(tenant=a.tenant or "default")
                 if q.queue == a.queue]
        if not found:
            ctx.emit(f"queue {a.queue} has no circuit breaker",
                     {"tenant": a.tenant or "default", "queue": a.queue, "breaker": None})
            return EXIT_OK
        qc = found[0]
    ctx.emit(table(_HEADERS, [circuit_row(qc)]), circuit_json(qc))
    return EXIT_OK


def _cmd_queue_circuits(ctx: Any) -> int:
    found = ctx.client.list_queue_circuits(tenant=ctx.args.tenant)
    ctx.emit(table(_HEADERS, [circuit_row(q) for q in found]) if found
             else "no queue has a circuit breaker", [circuit_json(q) for q in found])
    return EXIT_OK


SEMANTICS_COMMANDS: dict[tuple[str, str | None], Callable[[Any], int]] = {
    ("job", "backfill"): _cmd_job_backfill,
    ("queue", "circuit"): _cmd_queue_circuit,
    ("queue", "circuits"): _cmd_queue_circuits,
}
