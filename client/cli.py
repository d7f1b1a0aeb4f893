"""``gnomon``: the command line of a gnomon cluster (jobs, runs, dead letters, ready-made
workers and a local development cluster). Run ``gnomon --help``."""

from __future__ import annotations

import argparse
import base64
import difflib
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO

from ._cli_dev import DEFAULT_SERVERS, DEV_GRPC_PORTS, DEV_RAFT_PORTS
from ._cli_render import (
    cluster_json,
    dead_letter_json,
    fmt_time,
    job_json,
    limits_json,
    render_cluster,
    render_dead_letters,
    render_job,
    render_jobs,
    render_limits,
    render_run,
    render_runs,
    run_json,
    task_ref_json,
)
from ._cli_spec import (
    UsageError,
    load_spec_file,
    parse_duration_ms,
    parse_instant_ms,
    spec_from_data,
    spec_to_data,
)
from ._errors import (
    AlreadyExists,
    Cancelled,
    Conflict,
    DeadlineExceeded,
    FailedPrecondition,
    GnomonError,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from ._models import CLUSTER_LIMIT_NAMES, Job, JobSpec, MisfirePolicy, Run, RunState, TaskRef

__all__ = ["EXIT_CODES", "build_parser", "error_line", "exit_code_for", "main"]

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_RUN_NOT_SUCCEEDED = 4
EXIT_INTERRUPTED = 130

EXIT_CODES = """\
exit codes:
  0    success
  1    the cluster refused the request; the message names the error class
       (not found, already exists, invalid argument, failed precondition, conflict,
       resource exhausted, unauthenticated, ...)
  2    usage error: bad flags or spec file; nothing was sent
  3    unavailable: no node answered, or there was no leader, before --timeout
  4    --wait: the run ended without succeeding, or was still running at --wait-timeout
  130  interrupted (Ctrl-C)"""

_COMMANDS = """\
commands:
  job create|get|list|update|delete|pause|resume|trigger   manage jobs
  run list|get|cancel                                      inspect and cancel runs
  dlq list|replay                                          the dead-letter queue
  cluster status|limits                                    nodes, leader, replicated limits
  worker shell|http|python                                 ready-made workers
  dev                                                      a local 3-node cluster with demos

A JOB is a job id (j12) or a job name (in --tenant, default "default"); write name:j12 for a
job named like an id. Tables are for people; --json prints JSON (times and durations in
integer milliseconds) for scripts. Run `gnomon COMMAND ACTION --help` for the options.

servers: --server or GNOMON_SERVERS, comma-separated host:port of any nodes; the default,
  {servers}, is what `gnomon dev` starts."""

_ERROR_LABELS: list[tuple[type[GnomonError], str]] = [
    (NotFound, "not found"),
    (AlreadyExists, "already exists"),
    (InvalidArgument, "invalid argument"),
    (Conflict, "conflict"),
    (FailedPrecondition, "failed precondition"),
    (Unavailable, "unavailable"),
    (ResourceExhausted, "resource exhausted"),
    (Unauthenticated, "unauthenticated"),
    (DeadlineExceeded, "deadline exceeded"),
    (Cancelled, "cancelled"),
]
_JOB_ID = re.compile(r"j\d+")

ClientFactory = Callable[[str, float], Any]


# --- errors and exit codes -------------------------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def exit_code_for(err: BaseException) -> int:
    """The documented exit code for an error that ended a command."""
    if isinstance(err, UsageError):
        return EXIT_USAGE
    if isinstance(err, Unavailable | DeadlineExceeded):
        return EXIT_UNAVAILABLE
    if isinstance(err, InvalidArgument) and err.code is None:
        return EXIT_USAGE  # raised by the client library before sending anything
    if isinstance(err, GnomonError):
        return EXIT_REFUSED
    if isinstance(err, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return EXIT_REFUSED


def error_line(err: BaseException, *, servers: str | None = None) -> str:
    """``gnomon: <error class>: <server's message>``, on one line."""
    if isinstance(err, UsageError):
        return f"gnomon: {_one_line(str(err))}"
    if not isinstance(err, GnomonError):
        return f"gnomon: {type(err).__name__}: {_one_line(str(err))}"
    label = next((text for cls, text in _ERROR_LABELS if isinstance(err, cls)), None)
    if label == "unauthenticated" and err.code is not None and err.code.name == "PERMISSION_DENIED":
        label = "permission denied"
    if label is None:
        label = err.code.name.lower().replace("_", " ") if err.code is not None else "error"
    line = f"gnomon: {label}: {_one_line(err.message) or 'no details'}"
    if isinstance(err, Unavailable | DeadlineExceeded) and servers:
        line += f" (servers {servers}"
        line += "; start a local cluster with `gnomon dev`)" if servers == DEFAULT_SERVERS else ")"
    return line


# --- parsing -----------------------------------------------------------------------------------


class _ArgumentError(Exception):
    """A command line argparse refused; the message is the whole line to print."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _ArgumentError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def _common() -> argparse.ArgumentParser:
    # SUPPRESS: an option given before the subcommand is not reset by the subcommand's parser.
    p = _Parser(add_help=False)
    g = p.add_argument_group("connection and output")
    g.add_argument(
        "-s",
        "--server",
        default=argparse.SUPPRESS,
        metavar="ADDRS",
        help="comma-separated host:port of any nodes "
        f"(env GNOMON_SERVERS; default {DEFAULT_SERVERS})",
    )
    g.add_argument(
        "--timeout",
        type=float,
        default=argparse.SUPPRESS,
        metavar="SECONDS",
        help="deadline of each call, retries included (default 10)",
    )
    g.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts"
    )
    return p


def _add_job_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", metavar="JOB", help="job id (j12) or name")
    p.add_argument("--tenant", help="tenant of a job given by name (default: default)")


def _duration_arg(text: str) -> int:
    try:
        return parse_duration_ms(text, "duration")
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e).split(": ", 1)[1]) from None


def _instant_arg(text: str) -> int:
    try:
        return parse_instant_ms(text, "time")
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e).split(": ", 1)[1]) from None


def _add_spec_flags(p: argparse.ArgumentParser, *, create: bool) -> None:
    g = p.add_argument_group("job spec (instead of -f)")
    if create:
        g.add_argument("--name", help="job name, unique in the tenant")
        g.add_argument("--tenant", help="tenant (default: default)")
    g.add_argument(
        "--cron", metavar="EXPR", help='cron: 5 fields, or 6 with seconds LAST ("* * * * * */5")'
    )
    g.add_argument("--tz", metavar="ZONE", help="IANA timezone of --cron (default UTC)")
    g.add_argument(
        "--interval-ms",
        "--interval",
        type=_duration_arg,
        metavar="DURATION",
        help="fixed period: 30000, 30s, 5m",
    )
    g.add_argument("--anchor-ms", type=_instant_arg, metavar="TIME", help="phase of --interval-ms")
    g.add_argument(
        "--at",
        type=_instant_arg,
        metavar="TIME",
        help="once: 2026-11-30T10:41:02Z, now, +10m, or epoch ms",
    )
    g.add_argument("--task-name", help="name of the single task (default main)")
    g.add_argument("--queue", help="queue of the task (default: default)")
    g.add_argument("--payload-json", metavar="JSON", help="task payload, a JSON value")
    g.add_argument("--payload", metavar="TEXT", help="task payload, raw text")
    g.add_argument(
        "--timeout-ms",
        type=_duration_arg,
        metavar="DURATION",
        help="limit of one attempt (0: none)",
    )
    g.add_argument("--max-attempts", type=int, metavar="N", help="attempts in total (default 3)")
    g.add_argument(
        "--backoff-ms",
        type=_duration_arg,
        metavar="DURATION",
        help="first retry backoff (default 1s)",
    )
    g.add_argument(
        "--max-backoff-ms",
        type=_duration_arg,
        metavar="DURATION",
        help="retry backoff cap (default 60s)",
    )
    g.add_argument("--priority", type=int, help="-100..100, higher first (default 0)")
    g.add_argument(
        "--misfire-policy", choices=[m.value for m in MisfirePolicy], help="for missed slots"
    )
    g.add_argument(
        "--misfire-grace-ms", type=_duration_arg, metavar="DURATION", help="lateness still on time"
    )
    if create:
        g.add_argument("--paused", action="store_true", default=None, help="create it paused")


def _add_wait(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--wait", action="store_true", help="wait until the run ends (exit 4 unless it succeeded)"
    )
    p.add_argument(
        "--wait-timeout", type=float, default=300.0, metavar="SECONDS", help="default 300"
    )


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    fmt = argparse.RawDescriptionHelpFormatter
    parser = _Parser(
        prog="gnomon",
        description="gnomon: cron as a service on Raft.\n\n"
        + _COMMANDS.format(servers=DEFAULT_SERVERS),
        epilog=EXIT_CODES,
        formatter_class=fmt,
        parents=[common],
    )
    parser.add_argument("--version", action="version", version="gnomon 0.1.0")
    groups = parser.add_subparsers(dest="group", metavar="COMMAND", required=True)

    def leaf(sub: Any, name: str, help_text: str, **kw: Any) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            parents=[common],
            epilog=EXIT_CODES,
            formatter_class=fmt,
            **kw,
        )

    job = groups.add_parser("job", help="manage jobs").add_subparsers(
        dest="action", metavar="ACTION", required=True
    )
    p = leaf(job, "create", "create a job from a spec file (-f) or from flags")
    p.add_argument(
        "-f", "--file", metavar="SPEC", help="YAML or JSON job spec (- for stdin); see examples/"
    )
    _add_spec_flags(p, create=True)
    p.add_argument(
        "--if-not-exists", action="store_true", help="a job of that name exists: print it, exit 0"
    )
    p.add_argument("--request-id", help="dedupe key: a retried request with it has one effect")
    p = leaf(job, "get", "show one job")
    _add_job_arg(p)
    p = leaf(job, "list", "list jobs")
    p.add_argument("--tenant", help="only this tenant (default: every tenant)")
    p.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    p = leaf(job, "update", "replace a job's spec (-f) or change some fields (flags)")
    p.add_argument(
        "job", metavar="JOB", nargs="?", help="job id or name (default: the spec's name)"
    )
    p.add_argument("--tenant", help="tenant of a job given by name")
    p.add_argument("-f", "--file", metavar="SPEC", help="YAML or JSON job spec (- for stdin)")
    _add_spec_flags(p, create=False)
    p.add_argument(
        "--expected-version",
        type=int,
        default=0,
        metavar="N",
        help="apply only to this version (flags: the version read)",
    )
    p.add_argument("--request-id", help="dedupe key")
    for name, text in (
        ("delete", "delete a job"),
        ("pause", "stop firing a job"),
        ("resume", "fire a job again (missed slots are not caught up)"),
    ):
        p = leaf(job, name, text)
        _add_job_arg(p)
        p.add_argument("--request-id", help="dedupe key")
        if name == "delete":
            p.add_argument("--expected-version", type=int, default=0, metavar="N")
            p.add_argument(
                "--cancel-running",
                action="store_true",
                help="also cancel running tasks of its runs and stop their workers "
                "(queued tasks are always cancelled)",
            )
    p = leaf(job, "trigger", "start a run now, outside the schedule")
    _add_job_arg(p)
    p.add_argument("--request-id", help="dedupe key")
    _add_wait(p)

    run = groups.add_parser("run", help="inspect and cancel runs").add_subparsers(
        dest="action", metavar="ACTION", required=True
    )
    p = leaf(run, "list", "a job's runs, newest first")
    p.add_argument("job", metavar="JOB", nargs="?", help="job id (j12) or name")
    p.add_argument("--job", dest="job_flag", metavar="JOB", help="the same as JOB")
    p.add_argument("--tenant", help="tenant of a job given by name (default: default)")
    p.add_argument("--limit", type=int, default=20, help="default 20")
    p.add_argument(
        "--before", type=_instant_arg, metavar="TIME", help="only runs scheduled before TIME"
    )
    p = leaf(run, "get", "one run, its tasks, their attempts and the latest output")
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("--output", action="store_true", help="print the output tail of every attempt")
    _add_wait(p)
    p = leaf(run, "cancel", "cancel a run's unfinished tasks (running ones are stopped)")
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("--reason", default="cancelled from the gnomon CLI")
    p.add_argument("--request-id", help="dedupe key")

    dlq = groups.add_parser("dlq", help="the dead-letter queue").add_subparsers(
        dest="action", metavar="ACTION", required=True
    )
    p = leaf(dlq, "list", "tasks that failed for good")
    p.add_argument("--tenant", help="only this tenant")
    p.add_argument("--limit", type=int, default=100)
    p = leaf(dlq, "replay", "retry dead-lettered tasks (same idempotency key)")
    p.add_argument("refs", nargs="*", metavar="RUN:TASK", help="task refs, as dlq list prints them")
    p.add_argument("--tenant", help="every dead letter of this tenant")
    p.add_argument("--all", action="store_true", help="every dead letter")
    p.add_argument("--request-id", help="dedupe key")

    cluster = groups.add_parser("cluster", help="the cluster").add_subparsers(
        dest="action", metavar="ACTION", required=True
    )
    p = leaf(cluster, "status", "nodes, roles, leader and Raft indexes")
    p.add_argument("--node", metavar="ADDR", help="ask this node (no leader following)")
    p.add_argument(
        "--digest",
        action="store_true",
        help="also hash the node's whole state (slow on large states)",
    )
    p = leaf(
        cluster,
        "limits",
        "the replicated limits (every node applies the same); --set changes them",
    )
    p.add_argument(
        "--set",
        dest="set_limits",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change one limit (repeatable; the others keep their value); keys: "
        + ", ".join(CLUSTER_LIMIT_NAMES)
        + " (_ms keys also take durations such as 1d)",
    )
    p.add_argument(
        "--expected-version",
        type=int,
        default=0,
        metavar="N",
        help="with --set: apply only at this limits version",
    )
    p.add_argument("--request-id", help="dedupe key")

    worker = groups.add_parser("worker", help="ready-made workers").add_subparsers(
        dest="action", metavar="KIND", required=True
    )
    for name, text in (
        ("shell", 'run each task\'s command (payload {"argv": [...], "env": {}, "cwd": ...})'),
        ("http", 'POST each task to its payload\'s URL (payload {"url": ..., "body": ...})'),
        ("python", "serve the @task functions of Python modules"),
    ):
        p = leaf(worker, name, text)
        p.add_argument(
            "--queue",
            "-q",
            action="append",
            default=[],
            metavar="QUEUE",
            help="queue to serve (repeatable)"
            + ("; default: the tasks' queues" if name == "python" else ""),
        )
        if name == "python":
            p.add_argument(
                "--module",
                "-m",
                action="append",
                required=True,
                metavar="MODULE",
                help="module to import, e.g. myapp.tasks (repeatable)",
            )
        if name == "shell":
            p.add_argument(
                "--kill-grace",
                type=float,
                default=5.0,
                metavar="SECONDS",
                help="SIGTERM to SIGKILL on cancel or timeout (default 5)",
            )
        if name == "http":
            p.add_argument(
                "--request-timeout",
                type=float,
                default=30.0,
                metavar="SECONDS",
                help="default per-request timeout (default 30)",
            )
        p.add_argument("--concurrency", type=int, default=4, help="tasks at once (default 4)")
        p.add_argument("--worker-id", help="default: host-pid-random")
        p.add_argument(
            "--shutdown-grace",
            type=float,
            default=30.0,
            metavar="SECONDS",
            help="on SIGTERM, running tasks may finish this long (default 30)",
        )
        p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])

    p = leaf(groups, "dev", "a local 3-node cluster, a demo worker and example jobs")
    p.add_argument("--data-dir", default=".gnomon", help="data and logs (default ./.gnomon)")
    p.add_argument(
        "--grpc-ports",
        type=_ports,
        default=DEV_GRPC_PORTS,
        metavar="P1,P2,P3",
        help="default 7701,7702,7703",
    )
    p.add_argument(
        "--raft-ports",
        type=_ports,
        default=DEV_RAFT_PORTS,
        metavar="P1,P2,P3",
        help="default 7801,7802,7803",
    )
    p.add_argument(
        "--headless-seconds",
        type=float,
        metavar="N",
        help="stop by itself after N seconds and print a summary",
    )
    p.add_argument("--no-examples", action="store_true", help="no example jobs, no demo worker")
    return parser


def _ports(text: str) -> tuple[int, ...]:
    try:
        ports = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of ports"
        ) from None
    if len(ports) != 3 or len(set(ports)) != 3 or not all(0 < p < 65536 for p in ports):
        raise argparse.ArgumentTypeError(f"{text!r}: expected three distinct ports")
    return ports


# --- specs from flags --------------------------------------------------------------------------


def _schedule_from_flags(
    args: argparse.Namespace, current: dict[str, Any] | None
) -> dict[str, Any] | None:
    kinds = [f for f in ("cron", "interval_ms", "at") if getattr(args, f, None) is not None]
    if len(kinds) > 1:
        raise UsageError("give one schedule: --cron, --interval-ms or --at")
    if args.tz is not None and not (
        kinds == ["cron"] or (not kinds and current and "cron" in current)
    ):
        raise UsageError("--tz applies to a cron schedule (--cron)")
    if args.anchor_ms is not None and not (
        kinds == ["interval_ms"] or (not kinds and current and "interval_ms" in current)
    ):
        raise UsageError("--anchor-ms applies to an interval schedule (--interval-ms)")
    if not kinds:
        if current is None or (args.tz is None and args.anchor_ms is None):
            return None
        schedule = dict(current)
    elif kinds == ["cron"]:
        schedule = {"cron": args.cron, "timezone": "UTC"}
    elif kinds == ["interval_ms"]:
        schedule = {"interval_ms": args.interval_ms}
    else:
        schedule = {"at_ms": args.at}
    if args.tz is not None:
        schedule["timezone"] = args.tz
    if args.anchor_ms is not None:
        schedule["anchor_ms"] = args.anchor_ms
    return schedule


def _task_from_flags(args: argparse.Namespace, task: dict[str, Any]) -> dict[str, Any]:
    task = dict(task)
    if args.payload_json is not None and args.payload is not None:
        raise UsageError("give --payload-json or --payload, not both")
    if args.payload_json is not None:
        try:
            value = json.loads(args.payload_json)
        except ValueError as e:
            raise UsageError(f"--payload-json: not JSON: {e}") from None
        task.pop("payload_base64", None)
        task["payload"] = value
        if isinstance(value, str):
            # A JSON string payload stays JSON-encoded (a plain string would be raw text).
            task.pop("payload")
            task["payload_base64"] = _b64(json.dumps(value).encode())
    if args.payload is not None:
        task.pop("payload_base64", None)
        task["payload"] = args.payload
    for flag, key in (("task_name", "name"), ("queue", "queue"), ("timeout_ms", "timeout_ms")):
        if getattr(args, flag) is not None:
            task[key] = getattr(args, flag)
    retry = dict(task.get("retry") or {})
    for flag, key in (
        ("max_attempts", "max_attempts"),
        ("backoff_ms", "initial_backoff_ms"),
        ("max_backoff_ms", "max_backoff_ms"),
    ):
        if getattr(args, flag) is not None:
            retry[key] = getattr(args, flag)
    if retry:
        task["retry"] = retry
    return task


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


_TASK_FLAGS = (
    "task_name",
    "queue",
    "payload_json",
    "payload",
    "timeout_ms",
    "max_attempts",
    "backoff_ms",
    "max_backoff_ms",
)
_JOB_FLAGS = ("priority", "misfire_policy", "misfire_grace_ms")
_SCHEDULE_FLAGS = ("cron", "tz", "interval_ms", "anchor_ms", "at")


def _given(args: argparse.Namespace, flags: Sequence[str]) -> list[str]:
    return [f for f in flags if getattr(args, f, None) is not None]


def _apply_job_flags(args: argparse.Namespace, data: dict[str, Any]) -> None:
    for flag in _JOB_FLAGS:
        if getattr(args, flag) is not None:
            data[flag] = getattr(args, flag)


def spec_from_flags(args: argparse.Namespace) -> JobSpec:
    """``job create`` without -f: a single-task job from flags."""
    if not args.name:
        raise UsageError("--name is required (or give a spec file with -f)")
    schedule = _schedule_from_flags(args, None)
    if schedule is None:
        raise UsageError("a schedule is required: --cron, --interval-ms or --at")
    data: dict[str, Any] = {
        "name": args.name,
        "schedule": schedule,
        "task": _task_from_flags(args, {}),
    }
    if args.tenant:
        data["tenant"] = args.tenant
    if args.paused:
        data["paused"] = True
    _apply_job_flags(args, data)
    return spec_from_data(data)


def updated_spec(job: Job, args: argparse.Namespace) -> JobSpec:
    """``job update`` with flags: the job's spec with the given fields changed."""
    data = spec_to_data(job.spec)
    schedule = _schedule_from_flags(args, data["schedule"])
    if schedule is not None:
        data["schedule"] = schedule
    if _given(args, _TASK_FLAGS):
        if len(data["tasks"]) != 1:
            raise UsageError(
                f"job {job.job_id} has {len(data['tasks'])} tasks: "
                "change them with a spec file (-f)"
            )
        data["tasks"] = [_task_from_flags(args, data["tasks"][0])]
    _apply_job_flags(args, data)
    return spec_from_data(data)


# --- commands ----------------------------------------------------------------------------------


class _Ctx:
    def __init__(self, args: argparse.Namespace, factory: ClientFactory, out: TextIO) -> None:
        self.args = args
        self.out = out
        self.json: bool = getattr(args, "json", False)
        self.servers: str = (
            getattr(args, "server", None) or os.environ.get("GNOMON_SERVERS") or DEFAULT_SERVERS
        )
        self.timeout_s: float = getattr(args, "timeout", None) or 10.0
        self._factory = factory
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._factory(self.servers, self.timeout_s)
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


def _read_spec(ctx: _Ctx) -> JobSpec:
    path = ctx.args.file
    return load_spec_file(path, stdin_text=sys.stdin.read() if path == "-" else None)


def _cmd_job_create(ctx: _Ctx) -> int:
    a = ctx.args
    flags = _given(a, ("name", "tenant", *_SCHEDULE_FLAGS, *_TASK_FLAGS, *_JOB_FLAGS, "paused"))
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
    ctx.emit(f"{verb} job {_job_label(job)}, {_next_fire(job)}", job_json(job))
    return EXIT_OK


def _cmd_job_get(ctx: _Ctx) -> int:
    job_id, kw = _ref_kwargs(_job_ref(ctx.args.job, ctx.args.tenant))
    job = ctx.client.get_job(job_id, **kw)
    ctx.emit(render_job(job), job_json(job))
    return EXIT_OK


def _cmd_job_list(ctx: _Ctx) -> int:
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


def _cmd_job_update(ctx: _Ctx) -> int:
    a = ctx.args
    flags = _given(a, (*_SCHEDULE_FLAGS, *_TASK_FLAGS, *_JOB_FLAGS))
    if a.file:
        if flags:
            raise UsageError(f"-f and --{flags[0].replace('_', '-')} do not mix")
        spec = _read_spec(ctx)
        job_id = None
        if a.job:
            job_id, kw = _ref_kwargs(_job_ref(a.job, a.tenant))
            if job_id is None:
                job_id = ctx.client.get_job(**kw).job_id
        job = ctx.client.update_job(
            job_id, spec, expected_version=a.expected_version, request_id=a.request_id
        )
    else:
        if not a.job:
            raise UsageError("name the JOB to update, or give a spec file with -f")
        if not flags:
            raise UsageError("nothing to change: give -f SPEC or flags such as --cron")
        job_id, kw = _ref_kwargs(_job_ref(a.job, a.tenant))
        current = ctx.client.get_job(job_id, **kw)
        if a.expected_version and a.expected_version != current.version:
            raise Conflict(
                f"expected_version: job {current.job_id} is at version {current.version}, "
                f"not {a.expected_version}"
            )
        job = ctx.client.update_job(
            current.job_id,
            updated_spec(current, a),
            expected_version=current.version,
            request_id=a.request_id,
        )
    ctx.emit(
        f"updated job {_job_label(job)} to version {job.version}, {_next_fire(job)}", job_json(job)
    )
    return EXIT_OK


def _cmd_job_delete(ctx: _Ctx) -> int:
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


def _cmd_job_pause(ctx: _Ctx) -> int:
    job_id, kw = _ref_kwargs(_job_ref(ctx.args.job, ctx.args.tenant))
    job = ctx.client.pause_job(job_id, **kw, request_id=ctx.args.request_id)
    ctx.emit(f"paused job {_job_label(job)}", job_json(job))
    return EXIT_OK


def _cmd_job_resume(ctx: _Ctx) -> int:
    job_id, kw = _ref_kwargs(_job_ref(ctx.args.job, ctx.args.tenant))
    job = ctx.client.resume_job(job_id, **kw, request_id=ctx.args.request_id)
    ctx.emit(f"resumed job {_job_label(job)}, {_next_fire(job)}", job_json(job))
    return EXIT_OK


def _finish_run(ctx: _Ctx, run: Run, started: str) -> int:
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


def _render_run(ctx: _Ctx, run: Run) -> str:
    return render_run(run, all_output=getattr(ctx.args, "output", False))


def _cmd_job_trigger(ctx: _Ctx) -> int:
    job_id, kw = _ref_kwargs(_job_ref(ctx.args.job, ctx.args.tenant))
    run = ctx.client.trigger_job(job_id, **kw, request_id=ctx.args.request_id)
    return _finish_run(ctx, run, f"started run {run.run_id}")


def _cmd_run_list(ctx: _Ctx) -> int:
    if (ctx.args.job is None) == (ctx.args.job_flag is None):
        raise UsageError("name one job: gnomon run list JOB (or --job JOB)")
    job_id, kw = _ref_kwargs(_job_ref(ctx.args.job or ctx.args.job_flag, ctx.args.tenant))
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


def _cmd_run_get(ctx: _Ctx) -> int:
    run = ctx.client.get_run(ctx.args.run_id)
    if ctx.args.wait and not run.done:
        return _finish_run(ctx, run, f"waiting for run {run.run_id} ({run.state.value})")
    ctx.emit(_render_run(ctx, run), run_json(run))
    if ctx.args.wait and run.state != RunState.SUCCEEDED:
        return EXIT_RUN_NOT_SUCCEEDED
    return EXIT_OK


def _cmd_run_cancel(ctx: _Ctx) -> int:
    run = ctx.client.cancel_run(
        ctx.args.run_id, reason=ctx.args.reason, request_id=ctx.args.request_id
    )
    ctx.emit(f"run {run.run_id} is {run.state.value}", run_json(run))
    return EXIT_OK


def _cmd_dlq_list(ctx: _Ctx) -> int:
    items = ctx.client.list_dead_letters(ctx.args.tenant, limit=ctx.args.limit)
    ctx.emit(render_dead_letters(items), [dead_letter_json(d) for d in items])
    return EXIT_OK


def parse_task_ref(text: str) -> TaskRef:
    run_id, sep, task_name = text.rpartition(":")
    if not sep or not run_id or not task_name:
        raise UsageError(f"{text!r} is not a task ref RUN_ID:TASK (as `gnomon dlq list` prints)")
    return TaskRef(run_id, task_name)


def _cmd_dlq_replay(ctx: _Ctx) -> int:
    a = ctx.args
    chosen = sum((bool(a.refs), a.tenant is not None, a.all))
    if chosen != 1:
        raise UsageError("give task refs (RUN:TASK ...), or --tenant T, or --all (one of them)")
    refs = [parse_task_ref(r) for r in a.refs]
    replayed = ctx.client.replay_dead_letters(
        refs or None, tenant=a.tenant, all=a.all, request_id=a.request_id
    )
    lines = [f"replayed {len(replayed)} task(s)"] + [
        f"  {r.run_id}:{r.task_name}" for r in replayed
    ]
    ctx.emit("\n".join(lines), {"replayed": [task_ref_json(r) for r in replayed]})
    return EXIT_OK


def _cmd_cluster_status(ctx: _Ctx) -> int:
    status = ctx.client.cluster_status(server=ctx.args.node, include_digest=ctx.args.digest)
    ctx.emit(render_cluster(status), cluster_json(status))
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


def _cmd_cluster_limits(ctx: _Ctx) -> int:
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


def _cmd_worker(ctx: _Ctx) -> int:
    from ._cli_workers import serve, worker_tasks

    a = ctx.args
    if a.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    tasks = worker_tasks(
        a.action,
        queues=a.queue,
        modules=getattr(a, "module", None) or (),
        kill_grace_s=getattr(a, "kill_grace", 5.0),
        http_timeout_s=getattr(a, "request_timeout", 30.0),
    )
    return serve(
        a.action,
        tasks,
        servers=ctx.servers,
        queues=a.queue,
        concurrency=a.concurrency,
        worker_id=a.worker_id,
        shutdown_grace_s=a.shutdown_grace,
        log_level=a.log_level,
    )


def _cmd_dev(ctx: _Ctx) -> int:
    from ._cli_dev import run_dev

    a = ctx.args
    if set(a.grpc_ports) & set(a.raft_ports):
        raise UsageError("--grpc-ports and --raft-ports overlap")
    if a.headless_seconds is not None and a.headless_seconds <= 0:
        raise UsageError("--headless-seconds must be positive")
    return run_dev(
        data_dir=a.data_dir,
        grpc_ports=a.grpc_ports,
        raft_ports=a.raft_ports,
        headless_s=a.headless_seconds,
        json_out=ctx.json,
        examples=not a.no_examples,
    )


_COMMAND_TABLE: dict[tuple[str, str | None], Callable[[_Ctx], int]] = {
    ("job", "create"): _cmd_job_create,
    ("job", "get"): _cmd_job_get,
    ("job", "list"): _cmd_job_list,
    ("job", "update"): _cmd_job_update,
    ("job", "delete"): _cmd_job_delete,
    ("job", "pause"): _cmd_job_pause,
    ("job", "resume"): _cmd_job_resume,
    ("job", "trigger"): _cmd_job_trigger,
    ("run", "list"): _cmd_run_list,
    ("run", "get"): _cmd_run_get,
    ("run", "cancel"): _cmd_run_cancel,
    ("dlq", "list"): _cmd_dlq_list,
    ("dlq", "replay"): _cmd_dlq_replay,
    ("cluster", "status"): _cmd_cluster_status,
    ("cluster", "limits"): _cmd_cluster_limits,
    ("worker", "shell"): _cmd_worker,
    ("worker", "http"): _cmd_worker,
    ("worker", "python"): _cmd_worker,
    ("dev", None): _cmd_dev,
}


def _default_client(servers: str, timeout_s: float) -> Any:
    from ._client import Client

    return Client(servers, timeout_s=timeout_s, attempt_timeout_s=min(5.0, timeout_s))


# Tools that live beside the client and may use the node's code: run as their own process so
# the client never imports gnomon.node (an import-linter contract).
_TOOLS = {"jepsen": "gnomon.jepsen", "bench": "gnomon.bench"}


def _run_tool(module: str, args: list[str]) -> int:
    """`gnomon jepsen ...` / `gnomon bench ...`: the tool's own CLI, its exit code."""
    import subprocess

    try:
        return subprocess.call([sys.executable, "-m", module, *args])
    except KeyboardInterrupt:
        return 130


def main(
    argv: Sequence[str] | None = None,
    *,
    client_factory: ClientFactory | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run one ``gnomon`` command; returns the exit code (see ``EXIT_CODES``)."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    words = list(sys.argv[1:] if argv is None else argv)
    if words and words[0] in _TOOLS:
        return _run_tool(_TOOLS[words[0]], words[1:])
    try:
        args = build_parser().parse_args(argv)
    except _ArgumentError as e:
        print(e, file=err)
        return EXIT_USAGE
    except SystemExit as e:  # --help, --version
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    ctx = _Ctx(args, client_factory or _default_client, out)
    handler = _COMMAND_TABLE[(args.group, getattr(args, "action", None))]
    try:
        return handler(ctx)
    except (UsageError, GnomonError) as e:
        print(error_line(e, servers=ctx.servers), file=err)
        return exit_code_for(e)
    except KeyboardInterrupt:
        print("gnomon: interrupted", file=err)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`gnomon job list | head`): stop quietly.
        if out is sys.stdout:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_REFUSED
    finally:
        try:
            ctx.close()
        except Exception:  # noqa: BLE001 - closing must not hide the command's outcome
            pass


if __name__ == "__main__":
    sys.exit(main())
