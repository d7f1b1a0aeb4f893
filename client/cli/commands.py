"""The ``gnomon`` commands: one function per command line (``COMMANDS``), each taking a
``CommandContext`` and returning the exit code."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from .. import tracing
from .._errors import (
    VERSION_CONFLICT,
    AlreadyExists,
    Conflict,
    DeadlineExceeded,
    GnomonError,
    NotFound,
)
from .._models import CLUSTER_LIMIT_NAMES, Job, JobSpec, Run, RunState, TaskRef
from . import runs as runs_cli
from .access import ACCESS_COMMANDS
from .backfill_circuits import SEMANTICS_COMMANDS
from .dev import DEFAULT_SERVERS
from .errors import EXIT_OK, EXIT_RUN_NOT_SUCCEEDED, EXIT_UNAVAILABLE
from .ops import (
    OPS_COMMANDS,
    DeadlineClient,
    check_servers,
    job_document_spec,
    queues_without_workers,
    status_from_leader,
)
from .render import (
    cluster_json,
    dead_letter_json,
    fmt_time,
    job_json,
    limits_json,
    preview_json,
    render_cluster,
    render_dead_letters,
    render_job,
    render_jobs,
    render_limits,
    render_preview,
    render_run,
    render_run_waits,
    render_runs,
    run_json,
    task_ref_json,
)
from .server_parts import require_server
from .spec import (
    load_spec_file,
    schedule_from_flags,
    spec_flags_given,
    spec_from_flags,
    updated_spec,
)
from .values import UsageError, parse_duration_ms

__all__ = ["COMMANDS", "ClientFactory", "CommandContext", "parse_limit_settings", "parse_task_ref"]

ClientFactory = Callable[[str, float], Any]
"""Makes the client of a command from the servers and the call timeout (tests pass a fake)."""

_JOB_ID = re.compile(r"j\d+")


class CommandContext:
    """What a command works with: its arguments, a client made on first use, its output."""

    def __init__(self, args: argparse.Namespace, factory: ClientFactory, out: TextIO) -> None:
        self.args = args
        self.out = out
        self.err: TextIO = sys.stderr  # main() sets the stream it was given
        self.json: bool = getattr(args, "json", False)
        self.servers: str = (
            getattr(args, "server", None) or os.environ.get("GNOMON_SERVERS") or DEFAULT_SERVERS
        )
        self.timeout_s: float = getattr(args, "timeout", None) or 10.0
        self._factory = factory
        self._client: Any = None
        # TLS and token of this command ("tls", "token"), for the commands that dial
        # themselves (the ready-made workers); main() sets them.
        self.security: dict[str, Any] = {}

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = DeadlineClient(
                self._factory(check_servers(self.servers), self.timeout_s), self.timeout_s)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def emit(self, human: str, data: Any) -> None:
        if self.json:
            print(json.dumps(data, indent=2, ensure_ascii=False), file=self.out)
        else:
            print(human, file=self.out)


def _job_ref(text: str, tenant: str | None) -> dict[str, Any]:
    if text.startswith("id:"):
        return {"job_id": text[3:]}
    if text.startswith("name:"):
        return {"tenant": tenant, "name": text[5:]}
    if _JOB_ID.fullmatch(text):
        return {"job_id": text}
    return {"tenant": tenant, "name": text}


def _ref_kwargs(ref: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    return ref.get("job_id"), {"tenant": ref.get("tenant"), "name": ref.get("name")}


def _job_label(job: Job) -> str:
    return f"{job.job_id} ({job.tenant}/{job.name})"


def _next_fire(job: Job) -> str:
    if job.paused:
        return "paused"
    return f"next fire {fmt_time(job.next_fire_ms)}" if job.next_fire_ms else "nothing left to fire"


def _read_spec(ctx: CommandContext) -> JobSpec:
    path = ctx.args.file
    text = sys.stdin.read() if path == "-" else None
    return job_document_spec(path, text) or load_spec_file(path, stdin_text=text)


def _cmd_job_create(ctx: CommandContext) -> int:
    a = ctx.args
    flags = spec_flags_given(a, create=True)
    if a.file and flags:
        raise UsageError(
            f"-f and --{flags[0].replace('_', '-')} do not mix: put it in the spec file"
        )
    spec = _read_spec(ctx) if a.file else spec_from_flags(a)
    try:
        job = ctx.client.create_job(spec, request_id=a.request_id)
        verb = "created"
    except AlreadyExists:
        if not a.if_not_exists:
            raise
        job = ctx.client.get_job(tenant=spec.tenant, name=spec.name)
        verb = "exists, unchanged:"
    text = f"{verb} job {_job_label(job)}, {_next_fire(job)}"
    if not ctx.json and not job.paused and job.next_fire_ms:
        text += _next_three(ctx, job)
    ctx.emit(text, job_json(job))
    for line in queues_without_workers(ctx.client, [t.queue for t in job.spec.tasks]):
        print(line, file=ctx.err)
    return EXIT_OK


def _next_three(ctx: CommandContext, job: Job) -> str:
    """The next three fires of a new job, in UTC and its local time (nothing if the node
    cannot say: the job is created either way)."""
    try:
        preview = ctx.client.preview_schedule(job.job_id, count=3)
    except GnomonError:
        return ""
    return "\nnext fires:\n" + render_preview(preview)


def _cmd_job_reset_circuit(ctx: CommandContext) -> int:
    job_id, kw = _ref_kwargs(_job_ref(ctx.args.job, ctx.args.tenant))
    job = ctx.client.reset_circuit(job_id, **kw, request_id=ctx.args.request_id)
    ctx.emit(f"circuit of job {_job_label(job)} is {job.circuit.status}", job_json(job))
    return EXIT_OK


def _cmd_job_preview(ctx: CommandContext) -> int:
    a = ctx.args
    schedule = schedule_from_flags(a)
    if (a.job is None) == (schedule is None):
        raise UsageError("name a job (JOB) or give a schedule (--cron, --interval-ms or --at)")
    if not 1 <= a.count:
        raise UsageError("--count: must be at least 1")
    if schedule is None:
        job_id, kw = _ref_kwargs(_job_ref(a.job, a.tenant))
        preview = ctx.client.preview_schedule(job_id, **kw, count=a.count, after=a.after)
    else:
        preview = ctx.client.preview_schedule(schedule=schedule, tenant=a.tenant, name=a.name,
                                              count=a.count, after=a.after)
    ctx.emit(render_preview(preview), preview_json(preview))
    return EXIT_OK


def _cmd_job_get(ctx: CommandContext) -> int:
    job_id, kw = _ref_kwargs(_job_ref(ctx.args.job, ctx.args.tenant))
    job = ctx.client.get_job(job_id, **kw)
    ctx.emit(render_job(job), job_json(job))
    return EXIT_OK


def _cmd_job_list(ctx: CommandContext) -> int:
    limit = ctx.args.limit
    if limit < 1:
        raise UsageError("--limit must be at least 1")
    jobs: list[Job] = []
    for job in ctx.client.iter_jobs(ctx.args.tenant, page_size=min(limit, 500)):
        jobs.append(job)
        if len(jobs) >= limit:
            break
    ctx.emit(render_jobs(jobs), [job_json(j) for j in jobs])
    return EXIT_OK


def _cmd_job_update(ctx: CommandContext) -> int:
    a = ctx.args
    flags = spec_flags_given(a, create=False)
    if a.file:
        if flags:
            raise UsageError(f"-f and --{flags[0].replace('_', '-')} do not mix")
        job = _update_from_file(ctx)
    else:
        if not a.job:
            raise UsageError("name the JOB to update, or give a spec file with -f")
        if not flags:
            raise UsageError("nothing to change: give -f SPEC or flags such as --cron")
        job = _update_from_flags(ctx)
    ctx.emit(
        f"updated job {_job_label(job)} to version {job.version}, {_next_fire(job)}", job_json(job)
    )
    return EXIT_OK


def _update_from_file(ctx: CommandContext) -> Job:
    a = ctx.args
    spec = _read_spec(ctx)
    job_id = None
    if a.job:
        job_id, kw = _ref_kwargs(_job_ref(a.job, a.tenant))
        if job_id is None:
            job_id = ctx.client.get_job(**kw).job_id
    return ctx.client.update_job(
        job_id, spec, expected_version=a.expected_version, request_id=a.request_id
    )


def _update_from_flags(ctx: CommandContext) -> Job:
    """Read the job, change the fields the flags name, write it at the version read."""
    a = ctx.args
    job_id, kw = _ref_kwargs(_job_ref(a.job, a.tenant))
    current = ctx.client.get_job(job_id, **kw)
    if a.expected_version and a.expected_version != current.version:
        raise Conflict(
            f"expected_version: job {current.job_id} is at version {current.version}, "
            f"not {a.expected_version}",
            reason=VERSION_CONFLICT,
        )
    return ctx.client.update_job(
        current.job_id,
        updated_spec(current, a),
        expected_version=current.version,
        request_id=a.request_id,
    )


def _cmd_job_delete(ctx: CommandContext) -> int:
    a = ctx.args
    ref = _job_ref(a.job, a.tenant)
    job_id, kw = _ref_kwargs(ref)
    ctx.client.delete_job(
        job_id,
        **kw,
        expected_version=a.expected_version,
        cancel_running=a.cancel_running,
        request_id=a.request_id,
    )
    tasks = "queued and running tasks" if a.cancel_running else "queued tasks"
    ctx.emit(
        f"deleted job {a.job}; its {tasks} are cancelled; its runs stay readable by run id "
        "and by job id (gnomon run list JOB_ID)",
        {
            "deleted": True,
            "cancel_running": a.cancel_running,
            **{k: v for k, v in ref.items() if v},
        },
    )
    return EXIT_OK


def _cmd_job_pause(ctx: CommandContext) -> int:
    job_id, kw = _ref_kwargs(_job_ref(ctx.args.job, ctx.args.tenant))
    job = ctx.client.pause_job(job_id, **kw, request_id=ctx.args.request_id)
    ctx.emit(f"paused job {_job_label(job)}", job_json(job))
    return EXIT_OK


def _cmd_job_resume(ctx: CommandContext) -> int:
    job_id, kw = _ref_kwargs(_job_ref(ctx.args.job, ctx.args.tenant))
    job = ctx.client.resume_job(job_id, **kw, request_id=ctx.args.request_id)
    ctx.emit(f"resumed job {_job_label(job)}, {_next_fire(job)}", job_json(job))
    return EXIT_OK


def _finish_run(ctx: CommandContext, run: Run, started: str) -> int:
    if not ctx.args.wait:
        ctx.emit(started, run_json(run))
        return EXIT_OK
    if not ctx.json:
        print(started, file=ctx.out, flush=True)
    try:
        run = ctx.client.wait_run(run.run_id, timeout_s=ctx.args.wait_timeout)
    except DeadlineExceeded:
        run = ctx.client.get_run(run.run_id)
    ctx.emit(_render_run(ctx, run), run_json(run))
    return EXIT_OK if run.state == RunState.SUCCEEDED else EXIT_RUN_NOT_SUCCEEDED


def _render_run(ctx: CommandContext, run: Run) -> str:
    return render_run(run, all_output=getattr(ctx.args, "output", False))


def _cmd_job_trigger(ctx: CommandContext) -> int:
    job_id, kw = _ref_kwargs(_job_ref(ctx.args.job, ctx.args.tenant))
    params = None
    if ctx.args.params is not None:
        try:
            params = json.loads(ctx.args.params)
        except ValueError as exc:
            raise UsageError(f"--params: not valid JSON: {exc}") from None
        if not isinstance(params, dict):
            raise UsageError("--params: must be a JSON object")
    run = ctx.client.trigger_job(job_id, **kw, request_id=ctx.args.request_id,
                                 overlap_policy=ctx.args.overlap_policy, params=params)
    if run.state == RunState.SKIPPED:  # by the overlap policy: nothing to wait for
        ctx.emit(f"skipped run {run.run_id}: {run.reason}", run_json(run))
        return EXIT_OK
    if run.state == RunState.QUEUED:
        return _finish_run(ctx, run, f"queued run {run.run_id}: {run.reason}")
    return _finish_run(ctx, run, f"started run {run.run_id}")


def _cmd_run_list(ctx: CommandContext) -> int:
    a = ctx.args
    runs_cli.check_flags(a)
    job = a.job or a.job_flag
    if runs_cli.across_jobs(a):
        runs_cli.list_across_jobs(ctx, _across_job_id(ctx, job) if job else None)
        return EXIT_OK
    if a.tenant and len(a.tenant) > 1:
        raise UsageError("--tenant: one tenant names a job (several only filter across jobs)")
    job_id, kw = _ref_kwargs(_job_ref(job, a.tenant[0] if a.tenant else None))
    try:
        runs = ctx.client.list_runs(
            job_id, **kw, limit=ctx.args.limit, before_ms=ctx.args.before or 0
        )
    except NotFound as e:
        if job_id is not None:
            raise
        # A deleted job has no name any more, but its runs are kept under its id.
        raise NotFound(
            f"{e.message} (if the job was deleted, list its runs by job id: "
            "gnomon run list JOB_ID)",
            code=e.code,
            reason=e.reason,
        ) from None
    ctx.emit(render_runs(runs), [run_json(r) for r in runs])
    return EXIT_OK


def _across_job_id(ctx: CommandContext, job: str) -> str:
    """The id of JOB for the listing across jobs (a name is looked up in its tenant)."""
    tenants = ctx.args.tenant or []
    ref = _job_ref(job, tenants[0] if len(tenants) == 1 else None)
    if "job_id" in ref:
        return str(ref["job_id"])
    if len(tenants) > 1:
        raise UsageError("--tenant: a job given by name needs one tenant (or give its id)")
    return str(ctx.client.get_job(tenant=ref["tenant"], name=ref["name"]).job_id)


def _cmd_run_get(ctx: CommandContext) -> int:
    run = ctx.client.get_run(ctx.args.run_id)
    if ctx.args.wait and not run.done:
        return _finish_run(ctx, run, f"waiting for run {run.run_id} ({run.state.value})")
    ctx.emit(_render_run(ctx, run), run_json(run))
    if ctx.args.wait and run.state != RunState.SUCCEEDED:
        return EXIT_RUN_NOT_SUCCEEDED
    return EXIT_OK


def _cmd_run_waits(ctx: CommandContext) -> int:
    run, waits = ctx.client.explain_run(ctx.args.run_id)
    ctx.emit(render_run_waits(run, waits),
             {"run_id": run.run_id, "state": run.state.value,
              "waits": [dataclasses.asdict(w) for w in waits]})
    return EXIT_OK


def _cmd_run_cancel(ctx: CommandContext) -> int:
    run = ctx.client.cancel_run(
        ctx.args.run_id, reason=ctx.args.reason, request_id=ctx.args.request_id
    )
    ctx.emit(f"run {run.run_id} is {run.state.value}", run_json(run))
    return EXIT_OK


def _cmd_run_rerun(ctx: CommandContext) -> int:
    run = ctx.client.rerun_run(ctx.args.run_id, request_id=ctx.args.request_id)
    return _finish_run(ctx, run, f"re-running run {run.run_id}")


def _cmd_run_cancel_task(ctx: CommandContext) -> int:
    run = ctx.client.cancel_task(ctx.args.run_id, task_name=ctx.args.task_name,
                                 reason=ctx.args.reason,
                                 request_id=ctx.args.request_id)
    ctx.emit(f"task {ctx.args.task_name} of run {run.run_id} cancelled; the run is "
             f"{run.state.value}", run_json(run))
    return EXIT_OK


def _cmd_run_retry_task(ctx: CommandContext) -> int:
    run = ctx.client.retry_task(ctx.args.run_id, task_name=ctx.args.task_name,
                                request_id=ctx.args.request_id)
    return _finish_run(ctx, run, f"retrying task {ctx.args.task_name} of run {run.run_id}")


def _cmd_dlq_list(ctx: CommandContext) -> int:
    items = ctx.client.list_dead_letters(ctx.args.tenant, limit=ctx.args.limit)
    ctx.emit(render_dead_letters(items), [dead_letter_json(d) for d in items])
    return EXIT_OK


def parse_task_ref(text: str) -> TaskRef:
    run_id, sep, task_name = text.rpartition(":")
    if not sep or not run_id or not task_name:
        raise UsageError(f"{text!r} is not a task ref RUN_ID:TASK (as `gnomon dlq list` prints)")
    return TaskRef(run_id, task_name)


def _cmd_dlq_replay(ctx: CommandContext) -> int:
    a = ctx.args
    chosen = sum((bool(a.refs), a.tenant is not None, a.all))
    if chosen != 1:
        raise UsageError("give task refs (RUN:TASK ...), or --tenant T, or --all (one of them)")
    refs = [parse_task_ref(r) for r in a.refs]
    replayed = ctx.client.replay_dead_letters(
        refs or None, tenant=a.tenant, all=a.all, reason=a.reason, request_id=a.request_id
    )
    lines = [f"replayed {len(replayed)} task(s)"] + [
        f"  {r.run_id}:{r.task_name}" for r in replayed
    ]
    ctx.emit("\n".join(lines), {"replayed": [task_ref_json(r) for r in replayed]})
    return EXIT_OK


def _cmd_dlq_discard(ctx: CommandContext) -> int:
    a = ctx.args
    refs = [parse_task_ref(r) for r in a.refs]
    dropped = ctx.client.discard_dead_letters(refs, reason=a.reason, request_id=a.request_id)
    lines = [f"discarded {len(dropped)} dead letter(s); the tasks stay dead"] + [
        f"  {r.run_id}:{r.task_name}" for r in dropped
    ]
    ctx.emit("\n".join(lines), {"discarded": [task_ref_json(r) for r in dropped]})
    return EXIT_OK


def _cmd_cluster_status(ctx: CommandContext) -> int:
    status = status_from_leader(ctx.client, ctx.args.node, ctx.args.digest)
    ctx.emit(render_cluster(status), cluster_json(status))
    if not status.leader_node_id:
        print(f"gnomon: no leader: node {status.node_id} knows no leader (quorum lost, or an "
              "election is under way)", file=ctx.err)
        return EXIT_UNAVAILABLE
    return EXIT_OK


def parse_limit_settings(settings: Sequence[str]) -> dict[str, int]:
    """``--set KEY=VALUE`` options as set_limits keyword arguments; UsageError names the key."""
    out: dict[str, int] = {}
    for text in settings:
        key, sep, value = text.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise UsageError(f"--set {text}: expected KEY=VALUE, e.g. dedupe_capacity=50000")
        if key not in CLUSTER_LIMIT_NAMES:
            close = difflib.get_close_matches(key, CLUSTER_LIMIT_NAMES, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise UsageError(
                f"--set {key}: unknown limit ({hint}limits: {', '.join(CLUSTER_LIMIT_NAMES)})"
            )
        if key in out:
            raise UsageError(f"--set {key}: given twice")
        if not value:
            raise UsageError(f"--set {key}: no value")
        if key.endswith("_ms"):
            try:
                out[key] = parse_duration_ms(value, key)
            except UsageError as e:
                raise UsageError(f"--set {e}") from None
            continue
        try:
            out[key] = int(value)
        except ValueError:
            raise UsageError(f"--set {key}: {value!r} is not an integer") from None
    return out


def _cmd_cluster_limits(ctx: CommandContext) -> int:
    a = ctx.args
    changes = parse_limit_settings(a.set_limits)
    if not changes:
        if a.expected_version or a.request_id:
            raise UsageError("--expected-version and --request-id go with --set")
        status = ctx.client.cluster_status()
        ctx.emit(
            render_limits(status.limits, status.limits_version),
            limits_json(status.limits, status.limits_version),
        )
        return EXIT_OK
    update = ctx.client.set_limits(
        **changes, expected_version=a.expected_version, request_id=a.request_id
    )
    changed = ", ".join(f"{k}={v}" for k, v in changes.items())
    ctx.emit(
        f"set {changed}\n\n{render_limits(update.limits, update.limits_version)}",
        limits_json(update),
    )
    return EXIT_OK


def _cmd_worker(ctx: CommandContext) -> int:
    from .workers import serve, worker_tasks

    a = ctx.args
    if a.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    try:
        tracing.configure_exporter(a.tracing, f"gnomon-worker-{a.action}")
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    tasks = worker_tasks(
        a.action,
        queues=a.queue,
        modules=getattr(a, "module", None) or (),
        kill_grace_s=getattr(a, "kill_grace", 5.0),
        http_timeout_s=getattr(a, "request_timeout", 30.0),
        signing_secret_file=getattr(a, "signing_secret_file", None),
    )
    return serve(
        a.action,
        tasks,
        servers=check_servers(ctx.servers),
        queues=a.queue,
        concurrency=a.concurrency,
        worker_id=a.worker_id,
        shutdown_grace_s=a.shutdown_grace,
        log_level=a.log_level,
        tls=ctx.security.get("tls"),
        token=ctx.security.get("token"),
        connect_timeout_s=a.connect_timeout or None,
    )


def _cmd_completion(ctx: CommandContext) -> int:
    from .completion import SCRIPTS

    ctx.out.write(SCRIPTS[ctx.args.shell])
    return EXIT_OK


def _cmd_dev(ctx: CommandContext) -> int:
    from .dev import DEV_CLUSTER_MODULE, run_dev

    require_server("dev", DEV_CLUSTER_MODULE)
    a = ctx.args
    if set(a.grpc_ports) & set(a.raft_ports):
        raise UsageError("--grpc-ports and --raft-ports overlap")
    gateway = a.grpc_ports[0] - 1  # the gateway's gRPC port, and its HTTP port 100 below
    if {gateway, gateway - 100} & set(a.grpc_ports + a.raft_ports):
        raise UsageError(f"--grpc-ports: the gateway takes ports {gateway} and {gateway - 100} "
                         "(the first gRPC port - 1, and 100 below that); they overlap the "
                         "nodes' ports")
    if a.headless_seconds is not None and a.headless_seconds <= 0:
        raise UsageError("--headless-seconds must be positive")
    return run_dev(
        data_dir=a.data_dir,
        grpc_ports=a.grpc_ports,
        raft_ports=a.raft_ports,
        headless_s=a.headless_seconds,
        json_out=ctx.json,
        examples=not a.no_examples,
        secure=not a.insecure,
    )


COMMANDS: dict[tuple[str, str | None], Callable[[CommandContext], int]] = {
    ("job", "create"): _cmd_job_create,
    ("job", "get"): _cmd_job_get,
    ("job", "list"): _cmd_job_list,
    ("job", "update"): _cmd_job_update,
    ("job", "delete"): _cmd_job_delete,
    ("job", "pause"): _cmd_job_pause,
    ("job", "resume"): _cmd_job_resume,
    ("job", "trigger"): _cmd_job_trigger,
    ("job", "preview"): _cmd_job_preview,
    ("job", "reset-circuit"): _cmd_job_reset_circuit,
    ("run", "rerun"): _cmd_run_rerun,
    ("run", "cancel-task"): _cmd_run_cancel_task,
    ("run", "retry-task"): _cmd_run_retry_task,
    ("run", "list"): _cmd_run_list,
    ("run", "get"): _cmd_run_get,
    ("run", "waits"): _cmd_run_waits,
    ("run", "cancel"): _cmd_run_cancel,
    ("dlq", "list"): _cmd_dlq_list,
    ("dlq", "replay"): _cmd_dlq_replay,
    ("dlq", "discard"): _cmd_dlq_discard,
    ("cluster", "status"): _cmd_cluster_status,
    ("cluster", "limits"): _cmd_cluster_limits,
    ("worker", "shell"): _cmd_worker,
    ("worker", "http"): _cmd_worker,
    ("worker", "python"): _cmd_worker,
    ("dev", None): _cmd_dev,
    ("completion", None): _cmd_completion,
}
COMMANDS.update(OPS_COMMANDS)
COMMANDS.update(ACCESS_COMMANDS)
COMMANDS.update(SEMANTICS_COMMANDS)
