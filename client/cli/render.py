"""What the ``gnomon`` CLI prints: aligned tables and key/value blocks for people, plain JSON
objects for ``--json``.

Times print as ``2026-11-30 10:41:02Z`` (UTC), durations as ``350ms``, ``4.2s``, ``2m03s``,
``1h02m``, ``3d04h``. In JSON, times and durations stay integer milliseconds, enums are their
lower-case names, and bytes (payloads, results) follow ``spec.bytes_to_data``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from .._models import (
    Attempt,
    ClusterLimits,
    ClusterStatus,
    CronSchedule,
    DeadLetter,
    IntervalSchedule,
    Job,
    JobSpec,
    LimitsUpdate,
    Run,
    RunTrigger,
    RunWait,
    Schedule,
    SchedulePreview,
    TaskInstance,
    TaskRef,
    TaskState,
)
from .spec import bytes_to_data, spec_to_data

__all__ = [
    "LIMIT_HELP",
    "attempt_json",
    "cluster_json",
    "dead_letter_json",
    "fmt_duration",
    "fmt_schedule",
    "fmt_time",
    "job_json",
    "job_state",
    "kv",
    "limits_json",
    "render_cluster",
    "render_dead_letters",
    "preview_json",
    "render_job",
    "render_jobs",
    "render_preview",
    "render_limits",
    "render_run",
    "render_runs",
    "run_json",
    "table",
    "task_json",
    "task_ref_json",
]

_ELLIPSIS = "..."
_MAX_CELL = 60


def fmt_time(ms: int) -> str:
    """``2026-11-30 10:41:02Z``; ``-`` for 0 (unset)."""
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def fmt_duration(ms: int) -> str:
    """A short human duration: 350ms, 4.2s, 42s, 2m03s, 1h02m, 3d04h."""
    if ms < 0:
        return "-" + fmt_duration(-ms)
    if ms < 1000:
        return f"{ms}ms"
    if ms < 10_000:
        return f"{ms / 1000:.1f}s"
    seconds = ms // 1000
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def fmt_schedule(schedule: Schedule) -> str:
    if isinstance(schedule, CronSchedule):
        return f'cron "{schedule.expression}" {schedule.timezone}'
    if isinstance(schedule, IntervalSchedule):
        anchor = f" from {fmt_time(schedule.anchor_ms)}" if schedule.anchor_ms else ""
        return f"every {fmt_duration(schedule.interval_ms)}{anchor}"
    return f"once at {fmt_time(schedule.at_ms)}"


def _cell(value: Any, limit: int | None) -> str:
    text = " ".join(str(value).split()) if value is not None and value != "" else "-"
    if limit is not None and len(text) > limit:
        text = text[: limit - len(_ELLIPSIS)] + _ELLIPSIS
    return text


def table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], *, max_cell: int | None = _MAX_CELL
) -> str:
    """Columns aligned with two spaces; empty cells print as ``-``, long ones are cut."""
    cells = [[_cell(v, max_cell) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    lines = []
    for row in [list(headers), *cells]:
        padded = [text.ljust(widths[i]) for i, text in enumerate(row[:-1])] + [row[-1]]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)


def kv(pairs: Sequence[tuple[str, Any]]) -> str:
    width = max(len(k) for k, _ in pairs)
    return "\n".join(f"{k.ljust(width)}  {_cell(v, None)}" for k, v in pairs)


# --- jobs ----------------------------------------------------------------------------------


def job_state(job: Job) -> str:
    if job.paused:
        return "paused"
    return "active" if job.next_fire_ms else "done"


def render_jobs(jobs: Sequence[Job]) -> str:
    if not jobs:
        return "no jobs"
    return table(
        ["ID", "TENANT", "NAME", "SCHEDULE", "NEXT FIRE", "STATE", "TASKS", "VERSION"],
        [
            [
                j.job_id,
                j.tenant,
                j.name,
                fmt_schedule(j.spec.schedule),
                fmt_time(j.next_fire_ms) if not j.paused else "-",
                job_state(j),
                len(j.spec.tasks),
                j.version,
            ]
            for j in jobs
        ],
    )


def _payload_text(payload: bytes) -> str:
    data = bytes_to_data("payload", payload)
    if not data:
        return "-"
    if "payload" in data and isinstance(data["payload"], str):
        return data["payload"]
    key, value = next(iter(data.items()))
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if key == "payload" else f"base64:{value}"


def _bounds_rows(job: Job) -> list[tuple[str, Any]]:
    spec, rows = job.spec, []
    if spec.jitter_ms:
        rows.append(("jitter", fmt_duration(spec.jitter_ms)))
    if spec.start_at_ms or spec.end_at_ms:
        rows.append(("between", f"{fmt_time(spec.start_at_ms) if spec.start_at_ms else '-'} and "
                                f"{fmt_time(spec.end_at_ms) if spec.end_at_ms else '-'}"))
    if spec.max_runs:
        rows.append(("runs", f"{job.runs_started} of at most {spec.max_runs}"))
    if spec.delete_after_success:
        rows.append(("after success", "deleted"))
    if spec.circuit_breaker:
        b, c = spec.circuit_breaker, job.circuit
        rows.append(("circuit", f"{c.status} (opens at {b.failure_percent}% of "
                                f"{b.window_runs} runs failed, cool-down "
                                f"{fmt_duration(b.cooldown_ms)}; opened {c.opens}x)"))
    bf = job.backfill
    if bf is not None:
        rows.append(("backfill", f"{bf.status}: {bf.created + bf.skipped} of {bf.total_slots} "
                                 f"slots ({bf.created} runs, {bf.skipped} skipped), "
                                 f"{fmt_time(bf.from_ms)} to {fmt_time(bf.to_ms)}"))
    return rows


def _overlap_text(spec: JobSpec) -> str:
    policy = spec.overlap_policy.value
    if policy == "allow_all":
        return policy
    text = f"{policy} (max {spec.max_active_runs or 1} active"
    if policy == "buffer_all":
        text += f", {spec.max_buffered_runs or 100} buffered"
    return text + ")"


def render_preview(preview: SchedulePreview) -> str:
    """The fire instants of a preview: UTC, local time, DST note."""
    if not preview.fires:
        return "no fires left"
    head = f"reading: {preview.reading}\n" if preview.reading else ""
    rows = [(f.utc, f.local, f.dst_note) for f in preview.fires]
    return head + table(["UTC", f"LOCAL ({preview.timezone})", "DST"], rows, max_cell=None)


def preview_json(preview: SchedulePreview) -> dict[str, Any]:
    return {
        "timezone": preview.timezone,
        "reading": preview.reading,
        "fires": [
            {"at_ms": f.at_ms, "utc": f.utc, "local": f.local, "dst_note": f.dst_note}
            for f in preview.fires
        ],
    }


def render_job(job: Job) -> str:
    spec = job.spec
    grace = fmt_duration(spec.misfire_grace_ms) if spec.misfire_grace_ms else "default"
    head = kv(
        [
            ("job", f"{job.job_id} ({spec.tenant}/{spec.name})"),
            ("schedule", fmt_schedule(spec.schedule)),
            ("state", job_state(job)),
            ("next fire", fmt_time(job.next_fire_ms) if not job.paused else "-"),
            ("priority", spec.priority),
            ("misfire", f"{spec.misfire_policy.value} (grace {grace})"),
            ("overlap", _overlap_text(spec)),
            *_bounds_rows(job),
            ("version", job.version),
            ("created", fmt_time(job.created_ms)),
            ("updated", fmt_time(job.updated_ms)),
        ]
    )
    tasks = table(
        ["TASK", "QUEUE", "DEPENDS ON", "TIMEOUT", "ATTEMPTS", "PAYLOAD"],
        [
            [
                t.name,
                t.queue,
                ",".join(t.depends_on),
                fmt_duration(t.timeout_ms) if t.timeout_ms else "-",
                t.retry.max_attempts or "default",
                _payload_text(t.payload),
            ]
            for t in spec.tasks
        ],
    )
    return f"{head}\n\n{tasks}"


def job_json(job: Job) -> dict[str, Any]:
    data = {
        "job_id": job.job_id,
        "tenant": job.tenant,
        "name": job.name,
        "version": job.version,
        "paused": job.paused,
        "next_fire_ms": job.next_fire_ms,
        "created_ms": job.created_ms,
        "updated_ms": job.updated_ms,
        "spec": spec_to_data(job.spec),
    }
    bf = job.backfill
    if bf is not None:  # its progress (gnomon job backfill JOB --json has the same)
        data["backfill"] = {
            "status": bf.status, "from_ms": bf.from_ms, "to_ms": bf.to_ms,
            "next_slot_ms": bf.next_slot_ms, "total_slots": bf.total_slots,
            "created": bf.created, "skipped": bf.skipped, "number": bf.number,
            "overlap_policy": bf.overlap_policy.value if bf.overlap_policy else None}
    return data


# --- runs ----------------------------------------------------------------------------------


def _run_duration(run: Run) -> str:
    if not run.finished_ms or not run.created_ms:
        return "-"
    return fmt_duration(run.finished_ms - run.created_ms)


def _task_summary(run: Run) -> str:
    done = sum(1 for t in run.tasks if t.state == TaskState.SUCCEEDED)
    return f"{done}/{len(run.tasks)} ok"


def render_runs(runs: Sequence[Run]) -> str:
    if not runs:
        return "no runs"
    return table(
        ["RUN", "STATE", "TRIGGER", "SCHEDULED FOR", "STARTED", "DURATION", "TASKS"],
        [
            [
                r.run_id,
                r.state.value,
                r.trigger.value,
                fmt_time(r.scheduled_for_ms),
                fmt_time(r.created_ms),
                _run_duration(r),
                _task_summary(r),
            ]
            for r in runs
        ],
    )


def render_runs_across_jobs(runs: Sequence[Run], next_page_token: str = "") -> str:
    """Runs of many jobs: the job and tenant columns, the lateness of scheduled runs."""
    if not runs:
        return "no runs match"
    out = table(
        ["RUN", "JOB", "TENANT", "STATE", "TRIGGER", "CREATED", "LATE", "DURATION", "TASKS"],
        [
            [
                r.run_id,
                r.job_id,
                r.tenant,
                r.state.value,
                r.trigger.value,
                fmt_time(r.created_ms),
                _lateness(r),
                _run_duration(r),
                _task_summary(r),
            ]
            for r in runs
        ],
    )
    if next_page_token:
        out += f"\nmore: the same command with --page-token {next_page_token}"
    return out


def _lateness(run: Run) -> str:
    """How long after it was due a scheduled run started (its slot plus the fire delay)."""
    if run.trigger != RunTrigger.SCHEDULE or not run.created_ms:
        return "-"
    late = run.created_ms - run.scheduled_for_ms - run.fire_delay_ms
    return fmt_duration(late) if late > 0 else "-"


def _task_duration(t: TaskInstance) -> str:
    if t.started_ms and t.finished_ms:
        return fmt_duration(t.finished_ms - t.started_ms)
    return "-"


def render_run(run: Run, *, all_output: bool = False) -> str:
    """The run, its tasks, every recorded attempt and the latest output tail of each task
    (``all_output``: the output tail of every attempt)."""
    head = kv(
        [
            ("run", run.run_id),
            ("job", f"{run.job_id} (version {run.job_version})  tenant {run.tenant}"),
            ("state", run.state.value + (" (cancel requested)" if run.cancel_requested else "")),
            *([("reason", run.reason)] if run.reason else []),
            *([("fire delay", fmt_duration(run.fire_delay_ms))] if run.fire_delay_ms else []),
            *([("params", run.params.decode(errors="replace"))] if run.params else []),
            ("trigger", run.trigger.value),
            ("scheduled for", fmt_time(run.scheduled_for_ms)),
            ("created", fmt_time(run.created_ms)),
            ("finished", fmt_time(run.finished_ms)),
            ("duration", _run_duration(run)),
        ]
    )
    tasks = table(
        ["TASK", "STATE", "ATTEMPT", "TOKEN", "WORKER", "STARTED", "DURATION", "ERROR / RESULT"],
        [
            [
                t.task_name,
                t.state.value,
                t.attempt,
                t.fencing_token or "-",
                t.worker_id,
                fmt_time(t.started_ms),
                _task_duration(t),
                t.last_error if t.state != TaskState.SUCCEEDED else _payload_text(t.result),
            ]
            for t in run.tasks
        ],
    )
    errors = [
        f"  {t.task_name}: " + "\n    ".join(t.last_error.strip().splitlines())
        for t in run.tasks
        if t.last_error and len(" ".join(t.last_error.split())) > _MAX_CELL
    ]
    full = "\n\nerrors in full:\n" + "\n".join(errors) if errors else ""
    return f"{head}\n\n{tasks}{full}{_render_attempts(run, all_output=all_output)}"


def _exit_text(code: int | None) -> str:
    if code is None:
        return "-"
    return str(code) if code >= 0 else f"{code} (signal {-code})"


def _attempt_duration(a: Attempt) -> str:
    if a.duration_ms:
        return fmt_duration(a.duration_ms)
    if a.started_ms and a.finished_ms:
        return fmt_duration(a.finished_ms - a.started_ms)
    return "-"


def _indented(text: str) -> str:
    lines = text.rstrip("\n").splitlines() or [""]
    return "\n".join(f"  {line}".rstrip() for line in lines)


def _render_attempts(run: Run, *, all_output: bool) -> str:
    rows = [(t, a) for t in run.tasks for a in t.attempts]
    if not rows:
        return ""
    attempts = table(
        ["TASK", "ATTEMPT", "TOKEN", "WORKER", "OUTCOME", "EXIT", "DURATION", "FINISHED", "ERROR"],
        [
            [
                t.task_name,
                a.attempt,
                a.fencing_token or "-",
                a.worker_id,
                a.outcome.value,
                _exit_text(a.exit_code),
                _attempt_duration(a),
                fmt_time(a.finished_ms),
                a.error,
            ]
            for t, a in rows
        ],
    )
    out = [f"\n\nattempts:\n{attempts}"]
    for t in run.tasks:
        shown = (
            [a for a in t.attempts if a.output_tail]
            if all_output
            else [a for a in reversed(t.attempts) if a.output_tail][:1]
        )
        for a in shown:
            label = f"output of {t.task_name}, attempt {a.attempt} (token {a.fencing_token})"
            out.append(f"\n\n{label}:\n{_indented(a.output_tail)}")
    return "".join(out)


def task_json(t: TaskInstance) -> dict[str, Any]:
    return {
        "task_name": t.task_name,
        "state": t.state.value,
        "attempt": t.attempt,
        "fencing_token": t.fencing_token,
        "worker_id": t.worker_id,
        "idempotency_key": t.idempotency_key,
        "ready_ms": t.ready_ms,
        "started_ms": t.started_ms,
        "finished_ms": t.finished_ms,
        "retry_at_ms": t.retry_at_ms,
        "lease_ttl_ms": t.lease_ttl_ms,
        "lease_remaining_ms": t.lease_remaining_ms,
        "last_error": t.last_error,
        **bytes_to_data("result", t.result),
        "attempts": [attempt_json(a) for a in t.attempts],
    }


def attempt_json(a: Attempt) -> dict[str, Any]:
    return {
        "attempt": a.attempt,
        "fencing_token": a.fencing_token,
        "worker_id": a.worker_id,
        "started_ms": a.started_ms,
        "finished_ms": a.finished_ms,
        "outcome": a.outcome.value,
        "error": a.error,
        "exit_code": a.exit_code,
        "duration_ms": a.duration_ms,
        "output_tail": a.output_tail,
    }


def run_json(run: Run) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "job_id": run.job_id,
        "tenant": run.tenant,
        "state": run.state.value,
        "trigger": run.trigger.value,
        "scheduled_for_ms": run.scheduled_for_ms,
        "created_ms": run.created_ms,
        "finished_ms": run.finished_ms,
        "job_version": run.job_version,
        "reason": run.reason,
        "cancel_requested": run.cancel_requested,
        "fire_delay_ms": run.fire_delay_ms,
        **({"params": json.loads(run.params)} if run.params else {}),
        "tasks": [task_json(t) for t in run.tasks],
    }


# --- dead letters and cluster ----------------------------------------------------------------


def render_run_waits(run: Run, waits: Sequence[RunWait]) -> str:
    head = f"run {run.run_id} is {run.state.value}"
    if not waits:
        return f"{head}: it waits for nothing"
    rows = [[w.task_name or "(run)", w.kind,
             f"{w.limit} = {w.limit_value} (now {w.current})" if w.limit else "",
             w.detail, w.change] for w in waits]
    return head + "\n" + table(["TASK", "WAITS FOR", "BOUND", "DETAIL", "CHANGE"], rows)


def render_dead_letters(items: Sequence[DeadLetter]) -> str:
    if not items:
        return "no dead letters"
    return table(
        ["TASK REF", "JOB", "TENANT", "ATTEMPTS", "DEAD SINCE", "LAST ERROR"],
        [
            [
                f"{d.run_id}:{d.task_name}",
                d.job_id,
                d.tenant,
                d.attempts,
                fmt_time(d.dead_ms),
                d.last_error,
            ]
            for d in items
        ],
    )


def dead_letter_json(d: DeadLetter) -> dict[str, Any]:
    return {
        "run_id": d.run_id,
        "task_name": d.task_name,
        "job_id": d.job_id,
        "tenant": d.tenant,
        "attempts": d.attempts,
        "last_error": d.last_error,
        "dead_ms": d.dead_ms,
    }


def task_ref_json(ref: TaskRef) -> dict[str, str]:
    return {"run_id": ref.run_id, "task_name": ref.task_name}


def render_cluster(status: ClusterStatus) -> str:
    leader = status.leader_node_id or "none"
    if status.leader_grpc_address:
        leader += f" ({status.leader_grpc_address})"
    head = kv(
        [
            ("answered by", status.node_id),
            ("leader", leader),
            ("term", status.term),
            ("commit index", f"{status.commit_index} (applied {status.applied_index})"),
            ("cluster time", fmt_time(status.clock_ms)),
            ("jobs", status.jobs),
            ("active runs", status.active_runs),
            ("dead letters", f"{status.dead_letters} ({status.dead_letters_evicted} evicted)"),
            ("limits version", status.limits_version or "0 (not set yet)"),
            *([("state digest", status.state_digest)] if status.state_digest else []),
            ("version", status.version),
        ]
    )
    nodes = table(
        ["NODE", "ROLE", "GRPC", "RAFT", "MATCH INDEX", "CONNECTED"],
        [
            [
                n.node_id,
                n.role,
                n.grpc_address,
                n.raft_address,
                n.match_index,
                "yes" if n.connected else "no",
            ]
            for n in status.nodes
        ],
    )
    if not status.leader_changes:
        return f"{head}\n\n{nodes}"
    changes = table(
        ["SEEN AT", "TERM", "LEADER", "BEFORE", "CAUSE"],
        [[fmt_time(c.at_ms), c.term, c.leader_node_id or "none", c.previous_leader_node_id or "-",
          c.cause] for c in status.leader_changes],
    )
    return f"{head}\n\n{nodes}\n\nleader changes seen by {status.node_id}:\n{changes}"


def cluster_json(status: ClusterStatus) -> dict[str, Any]:
    return {
        "node_id": status.node_id,
        "leader_node_id": status.leader_node_id,
        "leader_grpc_address": status.leader_grpc_address,
        "term": status.term,
        "commit_index": status.commit_index,
        "applied_index": status.applied_index,
        "clock_ms": status.clock_ms,
        "jobs": status.jobs,
        "active_runs": status.active_runs,
        "dead_letters": status.dead_letters,
        "state_digest": status.state_digest,
        "version": status.version,
        "dead_letters_evicted": status.dead_letters_evicted,
        "limits_version": status.limits_version,
        "limits": dict(status.limits.items()),
        "nodes": [
            {
                "node_id": n.node_id,
                "role": n.role,
                "grpc_address": n.grpc_address,
                "raft_address": n.raft_address,
                "match_index": n.match_index,
                "connected": n.connected,
            }
            for n in status.nodes
        ],
        "leader_changes": [dataclasses.asdict(c) for c in status.leader_changes],
    }


# --- limits ----------------------------------------------------------------------------------

LIMIT_HELP: dict[str, str] = {
    "dedupe_capacity": "request ids remembered for retries (0: none)",
    "dedupe_max_age_ms": "how long a request id is remembered (0: no age bound)",
    "runs_retained_per_job": "terminal runs kept in memory per job (older: history store)",
    "max_dead_letters": "dead-letter queue entries; beyond, the oldest leave (counted)",
    "max_attempt_records": "finished attempts kept per task",
    "max_tokens_per_tenant": "tokens per tenant, revoked and expired included",
    "max_queue_circuits_per_tenant": "queue circuit breakers per tenant",
}


def _limit_value(name: str, value: int | None) -> str:
    if value is None:
        return "-"
    if name.endswith("_ms") and value > 0:
        return f"{value} ({fmt_duration(value)})"
    return str(value)


def render_limits(limits: ClusterLimits, version: int) -> str:
    """The replicated limits as a table, under their version."""
    head = kv([("limits version", version or "0 (not set yet)")])
    rows = [
        [name, _limit_value(name, value), LIMIT_HELP.get(name, "")]
        for name, value in limits.items()
    ]
    return f"{head}\n\n{table(['LIMIT', 'VALUE', 'MEANING'], rows, max_cell=None)}"


def limits_json(limits: ClusterLimits | LimitsUpdate, version: int | None = None) -> dict[str, Any]:
    if isinstance(limits, LimitsUpdate):
        version = limits.limits_version
        limits = limits.limits
    return {"limits_version": version or 0, "limits": dict(limits.items())}
