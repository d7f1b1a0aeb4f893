"""The spans of a run (fire -> run -> task attempt), derived from replicated records only.

Every id is a hash of the run id (and task and attempt), never drawn at random: whichever node
leads when a run fires, runs or ends, and however often leadership changes in between, the
spans it emits join one trace with the same ids, and the `traceparent` given to a worker names
the span its attempt will be recorded under. The core stays pure (no ids, no clock there): the
leader reads them off the state after apply. Nothing here imports OpenTelemetry; `tracing.py`
turns these records into spans.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from gnomon.node.core.commands import Fire, TriggerJob
from gnomon.node.core.model import TERMINAL_RUN_STATES, AttemptOutcome, RunState, State
from gnomon.node.core.results import RunReply

__all__ = ["SpanRecord", "RunSpanCollector", "attempt_traceparent", "span_id", "trace_id"]

# Runs whose run span was handed out, so a run touched again in the same millisecond is not
# emitted twice (a bound, like observe.EntryCounter's).
REMEMBER_RUNS = 10_000
_START_SPANS = {Fire: "fire", TriggerJob: "trigger"}


def trace_id(run_id: str) -> int:
    """The 128-bit trace id of a run: the first 16 bytes of SHA-256 of its id (never 0)."""
    digest = hashlib.sha256(b"gnomon-run\0" + run_id.encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1


def span_id(run_id: str, *parts: str) -> int:
    """The 64-bit span id of a run's span named by `parts` (never 0)."""
    name = "\0".join((run_id, *parts)).encode()
    return int.from_bytes(hashlib.sha256(b"gnomon-span\0" + name).digest()[:8], "big") or 1


def attempt_span_id(run_id: str, task_name: str, attempt: int) -> int:
    return span_id(run_id, "task", task_name, str(attempt))


def attempt_traceparent(run_id: str, task_name: str, attempt: int) -> str:
    """The W3C traceparent (sampled) of a task attempt's span: what the worker continues."""
    return (f"00-{trace_id(run_id):032x}-{attempt_span_id(run_id, task_name, attempt):016x}"
            "-01")


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One span to emit: ids, parent (0: a root), times (epoch ms), attributes, error text."""

    name: str
    trace_id: int
    span_id: int
    parent_span_id: int
    start_ms: int
    end_ms: int
    attributes: dict[str, Any] = field(default_factory=dict)
    error: str = ""


class RunSpanCollector:
    """Reads one applied entry (tick thread, after apply) and returns the spans it closed:
    the start of each run it created (fire, manual trigger), each attempt that ended, each run
    that ended. Reads the state without the lock: the tick thread is its only writer."""

    def __init__(self, remember: int = REMEMBER_RUNS) -> None:
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._remember = remember

    def collect(self, st: State, batch: Any, replies: list, effects: Any) -> list[SpanRecord]:
        out: list[SpanRecord] = []
        touched: dict[str, None] = {}
        for cmd, reply in zip(batch.commands, replies, strict=False):
            kind = _START_SPANS.get(type(cmd))
            if kind and isinstance(reply, RunReply) and reply.run_id:
                out.append(_start_span(st, kind, reply.run_id, cmd, batch.now_ms))
                touched[reply.run_id] = None
            run_id = getattr(cmd, "run_id", "")
            if run_id:
                touched[run_id] = None
        for run_id, task_name, token in effects.lease_ended:
            touched[run_id] = None
            record = _attempt_span(st, run_id, task_name, token)
            if record is not None:
                out.append(record)
        for key in effects.cancelled:
            touched[key[0]] = None
        out.extend(self._runs_ended(st, touched))
        return out

    def _runs_ended(self, st: State, run_ids: dict[str, None]) -> list[SpanRecord]:
        out = []
        for run_id in run_ids:
            run = st.runs.get(run_id)
            if run is None or run.state not in TERMINAL_RUN_STATES or run_id in self._ended:
                continue
            self._ended[run_id] = None
            if len(self._ended) > self._remember:
                self._ended.popitem(last=False)
            out.append(SpanRecord(
                "gnomon.run", trace_id(run_id), span_id(run_id, "run"), span_id(run_id, "fire"),
                run.created_ms, max(run.finished_ms, run.created_ms),
                {**_run_attributes(run_id, run.job_id, run.tenant), "gnomon.run.state": run.state,
                 "gnomon.run.trigger": run.trigger},
                error=run.reason if run.state == RunState.FAILED else ""))
        return out


def _run_attributes(run_id: str, job_id: str, tenant: str) -> dict[str, Any]:
    return {"gnomon.run_id": run_id, "gnomon.job_id": job_id, "gnomon.tenant": tenant}


def _start_span(st: State, kind: str, run_id: str, cmd: Any, now_ms: int) -> SpanRecord:
    """A run's root span: a fire lasts from its slot to its commit (its lateness), a manual
    trigger is the instant it committed."""
    run = st.runs.get(run_id)
    job_id = run.job_id if run else getattr(cmd, "job_id", "")
    tenant = run.tenant if run else ""
    start_ms = cmd.scheduled_for_ms if isinstance(cmd, Fire) else now_ms
    return SpanRecord(f"gnomon.{kind}", trace_id(run_id), span_id(run_id, "fire"), 0,
                      min(start_ms, now_ms), now_ms, _run_attributes(run_id, job_id, tenant))


def _attempt_span(st: State, run_id: str, task_name: str, token: int) -> SpanRecord | None:
    run = st.runs.get(run_id)
    inst = run.tasks.get(task_name) if run else None
    if run is None or inst is None:
        return None
    record = next((a for a in reversed(inst.attempts) if a.fencing_token == token), None)
    if record is None:
        return None
    return SpanRecord(
        "gnomon.task_attempt", trace_id(run_id),
        attempt_span_id(run_id, task_name, record.attempt), span_id(run_id, "run"),
        record.started_ms, max(record.finished_ms, record.started_ms),
        {**_run_attributes(run_id, run.job_id, run.tenant), "gnomon.task": task_name,
         "gnomon.attempt": record.attempt, "gnomon.fencing_token": token,
         "gnomon.worker_id": record.worker_id, "gnomon.attempt.outcome": record.outcome},
        error=record.error if record.outcome != AttemptOutcome.SUCCEEDED else "")
