"""The ``gnomon`` command line's parser: every command, its flags and their help."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any, NoReturn

from .._models import (
    CLUSTER_LIMIT_NAMES,
    CronDialect,
    DstAmbiguous,
    DstNonexistent,
    MisfirePolicy,
    OverlapPolicy,
    RunSort,
    RunState,
    RunTrigger,
)
from .._version import VERSION
from .access import add_access_groups
from .backfill_circuits import add_job_backfill
from .dev import DEFAULT_SERVERS, DEV_GRPC_PORTS, DEV_RAFT_PORTS
from .errors import EXIT_CODES
from .ops import (
    add_job_ops,
    add_membership,
    add_ops_groups,
    add_run_active,
    add_transfer_leader,
    add_worker_list,
)
from .values import UsageError, parse_duration_ms, parse_instant_ms

__all__ = ["ArgumentError", "build_parser"]

_COMMANDS = """\
commands:
  job create|get|list|update|delete|pause|resume|trigger|preview|reset-circuit   manage jobs
  job backfill JOB --from T --to T [--watch]               run a past range's slots
  job export|import                                        job specs as YAML (GitOps)
  run list|get|waits|cancel|active|rerun|cancel-task|retry-task
                                                           inspect (why one waits), cancel and re-run runs
  dlq list|replay|discard                                  the dead-letter queue
  cluster status|limits|transfer-leader|add-node|remove-node
                                                           nodes, leader, limits, members
  backup create                                            online backup of the state
  queue list|circuit|circuits                              backlog, workers, breakers
  worker shell|http|python|list                            ready-made workers, who is connected
  token create|list|revoke, whoami                         bearer tokens and who you are
  tenant create|set|get|list                               tenants' weights and bounds
  audit list                                               who did what when (admins)
  dev                                                      a local 3-node cluster with demos

A JOB is a job id (j12) or a job name (in --tenant, default "default"); write name:j12 for a
job named like an id. Tables are for people; --json prints JSON (times and durations in
integer milliseconds) for scripts. Run `gnomon COMMAND ACTION --help` for the options.

servers: --server or GNOMON_SERVERS, comma-separated host:port of any nodes; the default,
  {servers}, is what `gnomon dev` starts."""

_FORMAT = argparse.RawDescriptionHelpFormatter
Leaf = Callable[..., argparse.ArgumentParser]


class ArgumentError(Exception):
    """A command line argparse refused; the message is the whole line to print."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ArgumentError(f"{self.prog}: error: {message} (see {self.prog} --help)")


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
    g.add_argument(
        "--verbose", action="store_true", default=argparse.SUPPRESS,
        help="also print the gRPC library's own log lines (TLS handshakes, reconnects)",
    )
    s = p.add_argument_group("security (files, never secrets on the command line)")
    s.add_argument("--ca", default=argparse.SUPPRESS, metavar="FILE",
                   help="CA certificate of the nodes' gRPC port: talk TLS (env GNOMON_CA)")
    s.add_argument("--cert", default=argparse.SUPPRESS, metavar="FILE",
                   help="client certificate for mutual TLS (env GNOMON_CERT)")
    s.add_argument("--key", default=argparse.SUPPRESS, metavar="FILE",
                   help="its private key (env GNOMON_KEY)")
    s.add_argument("--token-file", default=argparse.SUPPRESS, metavar="FILE",
                   help="file holding a bearer token (env GNOMON_TOKEN_FILE, or the token "
                        "itself in GNOMON_TOKEN)")
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


def _since_arg(text: str) -> int:
    """A duration ("1h": that long ago) or an instant, in ms since the epoch."""
    if not text.strip().isdigit():
        try:
            return parse_instant_ms("now") - parse_duration_ms(text, "time")
        except UsageError:
            pass
    return _instant_arg(text)


def _add_schedule_flags(g: Any) -> None:
    g.add_argument(
        "--cron",
        metavar="EXPR",
        help='cron: 5 fields, an @alias, or 6 fields with --cron-dialect ("*/10 * * * * *"); '
        '"@every 1h30m" is an interval, a "CRON_TZ=<zone> " prefix the --tz',
    )
    g.add_argument("--tz", metavar="ZONE", help="IANA timezone of --cron (default UTC)")
    g.add_argument(
        "--cron-dialect",
        choices=[d.value for d in CronDialect],
        help="where a 6-field --cron has its seconds: seconds_last (croniter) or "
        "seconds_first (Quartz, Spring, Dkron)",
    )
    g.add_argument(
        "--dst-nonexistent",
        choices=[d.value for d in DstNonexistent],
        help="a --cron local time DST skips: skip it, or fire after the gap (default)",
    )
    g.add_argument(
        "--dst-ambiguous",
        choices=[d.value for d in DstAmbiguous],
        help="a --cron local time DST repeats: fire first, last or both (default)",
    )
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


def _add_spec_flags(p: argparse.ArgumentParser, *, create: bool) -> None:
    g = p.add_argument_group("job spec (instead of -f)")
    if create:
        g.add_argument("--name", help="job name, unique in the tenant")
        g.add_argument("--tenant", help="tenant (default: default)")
    _add_schedule_flags(g)
    _add_spec_task_flags(g)
    if create:
        g.add_argument("--paused", action="store_true", default=None, help="create it paused")


def _add_spec_task_flags(g: Any) -> None:
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
    g.add_argument(
        "--overlap-policy",
        choices=[p.value for p in OverlapPolicy],
        help="what a fire does while max-active-runs runs are active (default allow_all)",
    )
    g.add_argument(
        "--max-active-runs", type=int, metavar="N", help="active runs at once (default 1)"
    )
    g.add_argument(
        "--max-buffered-runs", type=int, metavar="N", help="buffer_all: queued runs at most"
    )
    g.add_argument(
        "--jitter-ms", type=_duration_arg, metavar="DURATION",
        help="delay each fire by a random 0..DURATION",
    )
    g.add_argument("--start-at-ms", "--start-at", type=_instant_arg, metavar="TIME",
                   help="no slot before TIME")
    g.add_argument("--end-at-ms", "--end-at", type=_instant_arg, metavar="TIME",
                   help="no slot after TIME")
    g.add_argument("--max-runs", type=int, metavar="N", help="runs the schedule starts at most")
    g.add_argument("--delete-after-success", action="store_true", default=None,
                   help="a one-shot (--at): delete it once its run succeeded")
    g.add_argument("--circuit-window-runs", type=int, metavar="N",
                   help="circuit breaker: the last N finished runs...")
    g.add_argument("--circuit-failure-percent", type=int, metavar="P",
                   help="...opens it when P%% of them failed...")
    g.add_argument("--circuit-cooldown-ms", type=_duration_arg, metavar="DURATION",
                   help="...for DURATION, then one probe run decides")


def _add_wait(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--wait", action="store_true", help="wait until the run ends (exit 4 unless it succeeded)"
    )
    p.add_argument(
        "--wait-timeout", type=float, default=300.0, metavar="SECONDS", help="default 300"
    )


def build_parser() -> argparse.ArgumentParser:
    """The parser of every ``gnomon`` command; it raises ``ArgumentError`` for a bad line."""
    common = _common()
    parser = _Parser(
        prog="gnomon",
        description="gnomon: cron as a service on Raft.\n\n"
        + _COMMANDS.format(servers=DEFAULT_SERVERS),
        epilog=EXIT_CODES,
        formatter_class=_FORMAT,
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"gnomon {VERSION}")
    groups = parser.add_subparsers(dest="group", metavar="COMMAND", required=True)

    def leaf(sub: Any, name: str, help_text: str, **kw: Any) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            parents=[common],
            epilog=EXIT_CODES,
            formatter_class=_FORMAT,
            **kw,
        )

    _add_job_commands(groups, leaf)
    _add_run_commands(groups, leaf)
    _add_dlq_commands(groups, leaf)
    _add_cluster_commands(groups, leaf)
    _add_worker_commands(groups, leaf)
    _add_dev_command(groups, leaf)
    p = leaf(groups, "completion", "print a shell completion script: "
             'eval "$(gnomon completion bash)" in ~/.bashrc (zsh: ~/.zshrc)')
    p.add_argument("shell", choices=["bash", "zsh"])
    add_ops_groups(groups, leaf)
    add_access_groups(groups, leaf)
    return parser


def _actions(groups: Any, name: str, help_text: str, *, metavar: str = "ACTION") -> Any:
    return groups.add_parser(name, help=help_text).add_subparsers(
        dest="action", metavar=metavar, required=True
    )


def _add_request_id(p: argparse.ArgumentParser, help_text: str = "dedupe key") -> None:
    p.add_argument("--request-id", help=help_text)


def _add_job_commands(groups: Any, leaf: Leaf) -> None:
    job = _actions(groups, "job", "manage jobs")
    p = leaf(job, "create", "create a job from a spec file (-f) or from flags")
    p.add_argument(
        "-f", "--file", metavar="SPEC", help="YAML or JSON job spec (- for stdin); see examples/"
    )
    _add_spec_flags(p, create=True)
    p.add_argument(
        "--if-not-exists", action="store_true", help="a job of that name exists: print it, exit 0"
    )
    _add_request_id(p, "dedupe key: a retried request with it has one effect")
    _add_job_arg(leaf(job, "get", "show one job"))
    p = leaf(job, "list", "list jobs")
    p.add_argument("--tenant", help="only this tenant (default: every tenant)")
    p.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    _add_job_update(leaf(job, "update", "replace a job's spec (-f) or change some fields (flags)"))
    for name, text in (
        ("delete", "delete a job"),
        ("pause", "stop firing a job"),
        ("resume", "fire a job again (missed slots are not caught up)"),
    ):
        p = leaf(job, name, text)
        _add_job_arg(p)
        _add_request_id(p)
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
    _add_request_id(p)
    p.add_argument(
        "--overlap-policy",
        choices=[o.value for o in OverlapPolicy],
        help="override the job's overlap policy for this trigger",
    )
    p.add_argument(
        "--params", "--conf", metavar="JSON",
        help="run parameters: a JSON object merged into every task's payload of this run",
    )
    _add_wait(p)
    p = leaf(job, "reset-circuit", "close a job's circuit breaker by hand")
    _add_job_arg(p)
    _add_request_id(p)
    p = leaf(job, "preview", "the next fire instants of a job's schedule, or of --cron/...")
    p.add_argument("job", metavar="JOB", nargs="?", help="job id (j12) or name")
    p.add_argument("--tenant", help="tenant of the job (default: default)")
    p.add_argument("--name", help="with --cron: the job name H hashes (H needs one)")
    p.add_argument("--count", type=int, default=5, metavar="N", help="instants (default 5)")
    p.add_argument("--after", type=_instant_arg, metavar="TIME", help="from (default now)")
    g = p.add_argument_group("a schedule instead of JOB")
    _add_schedule_flags(g)
    add_job_backfill(job, leaf)
    add_job_ops(job, leaf)


def _add_job_update(p: argparse.ArgumentParser) -> None:
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
    _add_request_id(p)


def _add_run_commands(groups: Any, leaf: Leaf) -> None:
    run = _actions(groups, "run", "inspect and cancel runs")
    p = leaf(run, "list", "a job's runs, newest first; with a filter (or no job) runs across "
             "jobs")
    p.add_argument("job", metavar="JOB", nargs="?", help="job id (j12) or name")
    p.add_argument("--job", dest="job_flag", metavar="JOB", help="the same as JOB")
    p.add_argument("--tenant", action="append",
                   help="tenant of a job given by name (default: default); across jobs: only "
                   "this tenant's runs (repeatable; default: every tenant the token reads)")
    p.add_argument("--limit", type=int, default=20, help="default 20 (at most 1000)")
    p.add_argument(
        "--before", type=_instant_arg, metavar="TIME",
        help="one job's runs scheduled before TIME (not with the filters below)"
    )
    g = p.add_argument_group(
        "runs across jobs (in memory: the active ones and each job's most recent ended ones)")
    g.add_argument("--state", action="append", choices=[s.value for s in RunState
                                                        if s != RunState.UNSPECIFIED],
                   help="only runs in this state (repeatable: any of them)")
    g.add_argument("--trigger", action="append", choices=[t.value for t in RunTrigger
                                                          if t != RunTrigger.UNSPECIFIED],
                   help="only runs created this way (repeatable)")
    g.add_argument("--queue", help="only runs with a task on this queue")
    g.add_argument("--since", type=_since_arg, metavar="TIME",
                   help="only runs created at or after TIME: a duration ago (1h, 30m, 7d) or "
                   "a time (ISO 8601 with a zone, epoch ms)")
    g.add_argument("--until", type=_since_arg, metavar="TIME",
                   help="only runs created before TIME (as --since)")
    g.add_argument("--late", action="store_true",
                   help="only scheduled runs that started late (more than --late-ms after "
                   "they were due)")
    g.add_argument("--late-ms", type=int, default=0, metavar="MS",
                   help="with --late: how late counts (default 1000)")
    g.add_argument("--errors", action="store_true",
                   help="only runs with a task that died or failed an attempt")
    g.add_argument("--sort", choices=[s.value for s in RunSort],
                   help="default created_desc (newest first)")
    g.add_argument("--page-token", metavar="TOKEN", help="the next page, as the last one said")
    p = leaf(run, "get", "one run, its tasks, their attempts and the latest output")
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("--output", action="store_true", help="print the output tail of every attempt")
    _add_wait(p)
    p = leaf(run, "waits", "why a run waits: each task's reason, the bound and where to change it")
    p.add_argument("run_id", metavar="RUN")
    p = leaf(run, "cancel", "cancel a run's unfinished tasks (running ones are stopped)")
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("--reason", default="cancelled from the gnomon CLI")
    _add_request_id(p)
    p = leaf(run, "rerun", "run a failed or cancelled run again (succeeded tasks are kept)")
    p.add_argument("run_id", metavar="RUN")
    _add_request_id(p)
    _add_wait(p)
    p = leaf(run, "cancel-task", "cancel one task of a run (its worker is told)")
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("task_name", metavar="TASK")
    p.add_argument("--reason", default="cancelled from the gnomon CLI")
    _add_request_id(p)
    p = leaf(run, "retry-task", "retry one dead, cancelled or upstream-failed task")
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("task_name", metavar="TASK")
    _add_request_id(p)
    _add_wait(p)
    add_run_active(run, leaf)


def _add_dlq_commands(groups: Any, leaf: Leaf) -> None:
    dlq = _actions(groups, "dlq", "the dead-letter queue")
    p = leaf(dlq, "list", "tasks that failed for good")
    p.add_argument("--tenant", help="only this tenant")
    p.add_argument("--limit", type=int, default=100)
    p = leaf(dlq, "replay", "retry dead-lettered tasks (same idempotency key)")
    p.add_argument("refs", nargs="*", metavar="RUN:TASK", help="task refs, as dlq list prints them")
    p.add_argument("--tenant", help="every dead letter of this tenant")
    p.add_argument("--all", action="store_true", help="every dead letter")
    p.add_argument("--reason", default="", help="why (kept in the audit log)")
    _add_request_id(p)
    p = leaf(dlq, "discard", "drop dead letters for good (the tasks stay dead)")
    p.add_argument("refs", nargs="+", metavar="RUN:TASK", help="task refs, as dlq list prints them")
    p.add_argument("--reason", default="", help="why (kept in the audit log)")
    _add_request_id(p)


def _add_cluster_commands(groups: Any, leaf: Leaf) -> None:
    cluster = _actions(groups, "cluster", "the cluster")
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
    _add_request_id(p)
    add_transfer_leader(cluster, leaf)
    add_membership(cluster, leaf)


_WORKER_KINDS = (
    ("shell", 'run each task\'s command (payload {"argv": [...], "env": {}, "cwd": ...})'),
    ("http", 'POST each task to its payload\'s URL (payload {"url": ..., "body": ...})'),
    ("python", "serve the @task functions of Python modules"),
)


def _add_worker_commands(groups: Any, leaf: Leaf) -> None:
    worker = _actions(groups, "worker", "ready-made workers", metavar="KIND")
    for name, text in _WORKER_KINDS:
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
        _add_worker_kind_flags(p, name)
        p.add_argument("--concurrency", type=int, default=4, help="tasks at once (default 4)")
        p.add_argument("--worker-id", help="default: host-pid-random")
        p.add_argument(
            "--shutdown-grace",
            type=float,
            default=30.0,
            metavar="SECONDS",
            help="on SIGTERM, running tasks may finish this long (default 30)",
        )
        p.add_argument(
            "--connect-timeout",
            type=float,
            default=60.0,
            metavar="SECONDS",
            help="exit (code 3) if no node accepted the worker's stream within this long "
            "after start, e.g. a TLS cluster dialled without --ca (default 60; 0 waits forever)",
        )
        p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
        p.add_argument(
            "--tracing",
            choices=["none", "otlp", "console"],
            default=os.environ.get("OTEL_TRACES_EXPORTER", "none")
            if os.environ.get("OTEL_TRACES_EXPORTER") in ("otlp", "console") else "none",
            help="export a span per task execution (the otel extra; OTEL_EXPORTER_OTLP_* "
            "configure otlp; default: OTEL_TRACES_EXPORTER if otlp or console, else none)",
        )
    add_worker_list(worker, leaf)


def _add_worker_kind_flags(p: argparse.ArgumentParser, kind: str) -> None:
    if kind == "python":
        p.add_argument(
            "--module",
            "-m",
            action="append",
            required=True,
            metavar="MODULE",
            help="module to import, e.g. myapp.tasks (repeatable)",
        )
    elif kind == "shell":
        p.add_argument(
            "--kill-grace",
            type=float,
            default=5.0,
            metavar="SECONDS",
            help="SIGTERM to SIGKILL on cancel or timeout (default 5)",
        )
    elif kind == "http":
        p.add_argument(
            "--request-timeout",
            type=float,
            default=30.0,
            metavar="SECONDS",
            help="default per-request timeout (default 30)",
        )
        p.add_argument(
            "--signing-secret-file",
            metavar="PATH",
            help="sign every request the Standard Webhooks way (webhook-id, "
            "webhook-timestamp, webhook-signature) with the secret in PATH: whsec_ and the "
            "base64 of at least 24 random bytes",
        )


def _add_dev_command(groups: Any, leaf: Leaf) -> None:
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
    p.add_argument("--insecure", action="store_true",
                   help="plaintext ports, no authentication (default: TLS with a throwaway CA "
                   "and an admin token under --data-dir/tls)")


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
