"""Every job-spec conversion of the ``gnomon`` CLI: the YAML/JSON file schema, the flags of
``job create`` and ``job update``, and the JSON form that ``--json`` prints (which reads back as
a spec file).

Schema (every key but ``name`` and ``schedule`` is optional; ``*_ms`` keys take integer
milliseconds or a string: a duration such as ``"500ms"``, ``"30s"``, ``"1m30s"``, ``"2h"``, or
for instants (``at_ms``, ``anchor_ms``) an ISO 8601 time with a zone, ``"now"`` or
``"+10m"``)::

    name: etl                          # unique in the tenant; [A-Za-z0-9_.-]
    tenant: default
    schedule:                          # exactly one kind:
      cron: "0 3 * * *"                #   5 fields, @daily..., or 6 with a dialect:
      timezone: Europe/Berlin          #   IANA name; default UTC (or a CRON_TZ=/TZ= prefix)
      # dialect: seconds_first         #   6 fields: seconds_last (croniter) | seconds_first
      # dst_nonexistent: skip          #   a local time DST skips: skip | shift_forward
      # dst_ambiguous: first           #   one it repeats: first | last | both
      # interval_ms: 30s               #   fixed period (anchor_ms: phase, default the epoch)
      # at_ms: "2026-11-30T10:41:02Z"  #   once
    priority: 0                        # -100..100
    misfire_policy: run_all            # run_all | run_latest | skip
    misfire_grace_ms: 60s
    overlap_policy: skip               # allow_all | skip | buffer_one | buffer_all |
                                       # cancel_other | terminate_other (default allow_all)
    max_active_runs: 1                 # not with allow_all; default 1
    max_buffered_runs: 100             # buffer_all only
    jitter_ms: 30s                     # each fire delayed by a random 0..30 s
    start_at_ms: "2026-12-01T00:00:00Z"  # no slot before (0: none)
    end_at_ms: 0                       # no slot after (0: none)
    max_runs: 0                        # runs the schedule starts at most (0: no bound)
    delete_after_success: false        # a one-shot: deleted once its run succeeded
    circuit_breaker: {window_runs: 10, failure_percent: 50, cooldown_ms: 10m}
    paused: false
    defaults:                          # for every task that does not set the key
      queue: etl
      timeout_ms: 10m
      retry: {max_attempts: 5, initial_backoff_ms: 1s, max_backoff_ms: 1m,
              multiplier: 2.0, jitter: 0.2}
    tasks:                             # the DAG; or `task:` (one mapping) for a single task
      - name: extract                  #   default name of a single task: main
        queue: etl
        payload: {"table": "users"}    #   JSON value; a string is sent as raw text
        # payload_base64: "AAEC"       #   binary payload
        timeout_ms: 5m
        retry: {max_attempts: 3}
      - name: load
        depends_on: [extract]

Quote cron expressions in YAML (``*`` starts an alias). What other schedulers write is read as
they mean it: robfig/cron's and Dkron's ``@every 1h30m`` is an interval schedule (``interval_ms:
1h30m``, anchored at the epoch; whole seconds, as robfig rounds them), and a ``CRON_TZ=<zone> ``
or ``TZ=<zone> `` prefix (robfig, Kubernetes CronJob) is the timezone (refused if
``timezone``/``--tz`` names another). The cluster itself refuses both in a cron expression,
with the gnomon spelling.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from .._models import (
    CircuitBreaker,
    CronDialect,
    CronSchedule,
    DstAmbiguous,
    DstNonexistent,
    IntervalSchedule,
    Job,
    JobSpec,
    MisfirePolicy,
    OnceSchedule,
    OverlapPolicy,
    RetryPolicy,
    Schedule,
    TaskSpec,
    json_payload,
)
from .._specs import DEFAULT_QUEUE
from .values import (
    UsageError,
    check_keys,
    fail,
    kind_of,
    parse_duration_ms,
    parse_instant_ms,
    read_bool,
    read_float,
    read_int,
    read_mapping,
    read_str,
)

__all__ = [
    "UsageError",
    "bytes_to_data",
    "load_spec_file",
    "parse_duration_ms",
    "parse_instant_ms",
    "schedule_from_flags",
    "spec_flags_given",
    "spec_from_data",
    "spec_from_flags",
    "spec_to_data",
    "updated_spec",
]


_TOP_KEYS = (
    "name",
    "tenant",
    "schedule",
    "tasks",
    "task",
    "defaults",
    "priority",
    "misfire_policy",
    "misfire_grace_ms",
    "paused",
    "overlap_policy",
    "max_active_runs",
    "max_buffered_runs",
    "jitter_ms",
    "start_at_ms",
    "end_at_ms",
    "max_runs",
    "delete_after_success",
    "circuit_breaker",
)
_SCHEDULE_KEYS = ("cron", "timezone", "dialect", "dst_nonexistent", "dst_ambiguous",
                  "interval_ms", "anchor_ms", "at_ms")
_TASK_KEYS = (
    "name",
    "queue",
    "depends_on",
    "payload",
    "payload_base64",
    "timeout_ms",
    "retry",
)
_DEFAULT_KEYS = ("queue", "timeout_ms", "retry")
_RETRY_KEYS = ("max_attempts", "initial_backoff_ms", "max_backoff_ms", "multiplier", "jitter")


def _schedule(data: Any, path: str, now_ms: int | None) -> Schedule:
    data = read_mapping(data, path)
    check_keys(data, _SCHEDULE_KEYS, path)
    kinds = [k for k in ("cron", "interval_ms", "at_ms") if k in data]
    if len(kinds) != 1:
        found = ", ".join(kinds) if kinds else "none"
        raise fail(path, f"set exactly one of cron, interval_ms, at_ms (found {found})")
    kind = kinds[0]
    extra = {
        "cron": {"timezone", "dialect", "dst_nonexistent", "dst_ambiguous"},
        "interval_ms": {"anchor_ms"},
        "at_ms": set(),
    }[kind]
    for key in data:
        if key != kind and key not in extra:
            article = {"cron": "a cron", "interval_ms": "an interval", "at_ms": "a once"}[kind]
            raise fail(f"{path}.{key}", f"does not apply to {article} schedule")
    if kind == "cron":
        text, prefixed = _tz_prefix(read_str(data["cron"], f"{path}.cron"), f"{path}.cron")
        tz = data.get("timezone")
        if tz is not None:
            tz = read_str(tz, f"{path}.timezone")
        every = _every_ms(text, f"{path}.cron")
        if every is not None:
            if prefixed:
                raise fail(f"{path}.cron", f"a {prefixed[0]}= prefix does not apply to @every "
                           f"(an interval schedule: it fires at UTC instants); write {text!r}")
            for key in data:
                if key != "cron":
                    raise fail(f"{path}.{key}", "does not apply to @every (an interval "
                               "schedule: it fires at UTC instants)")
            return IntervalSchedule(interval_ms=every)
        if prefixed and tz is not None and tz != prefixed[1]:
            raise fail(f"{path}.timezone", f"{tz!r} contradicts the cron's "
                       f"{prefixed[0]}={prefixed[1]} prefix: give the timezone once")
        return CronSchedule(
            text,
            prefixed[1] if prefixed else tz if tz is not None else "UTC",
            _dialect(data.get("dialect"), f"{path}.dialect"),
            _choice(DstNonexistent, data.get("dst_nonexistent"), f"{path}.dst_nonexistent"),
            _choice(DstAmbiguous, data.get("dst_ambiguous"), f"{path}.dst_ambiguous"),
        )
    if kind == "interval_ms":
        anchor = data.get("anchor_ms")
        return IntervalSchedule(
            interval_ms=parse_duration_ms(data["interval_ms"], f"{path}.interval_ms"),
            anchor_ms=0
            if anchor is None
            else parse_instant_ms(anchor, f"{path}.anchor_ms", now_ms=now_ms),
        )
    return OnceSchedule(at_ms=parse_instant_ms(data["at_ms"], f"{path}.at_ms", now_ms=now_ms))


# robfig/cron's and Kubernetes CronJob's timezone prefix: `CRON_TZ=<zone> ` or `TZ=<zone> `.
_TZ_PREFIX = re.compile(r"(CRON_TZ|TZ)=(\S*)\s*", re.IGNORECASE)
_EVERY = re.compile(r"@every(?:\s+(.*))?", re.IGNORECASE | re.DOTALL)
# Go's time.ParseDuration, as robfig/cron and Dkron read `@every <duration>`.
_GO_DURATION = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNITS_MS = {"ns": Fraction(1, 10**6), "us": Fraction(1, 1000), "µs": Fraction(1, 1000),
                "μs": Fraction(1, 1000), "ms": Fraction(1), "s": Fraction(1000),
                "m": Fraction(60_000), "h": Fraction(3_600_000)}


def _tz_prefix(text: str, path: str) -> tuple[str, tuple[str, str] | None]:
    """A cron text without its `CRON_TZ=`/`TZ=` prefix, and (prefix name, zone) if it had one."""
    m = _TZ_PREFIX.match(text.strip())
    if m is None:
        return text, None
    if not m.group(2):
        raise fail(path, f"no timezone after {m.group(1)}= in {text!r}")
    return text.strip()[m.end():], (m.group(1), m.group(2))


def _every_ms(text: str, path: str) -> int | None:
    """The period of robfig/cron's and Dkron's `@every <Go duration>`, None for other text.

    It is refused where robfig's meaning differs: robfig rounds the duration down to whole
    seconds, at least one."""
    m = _EVERY.fullmatch(text.strip())
    if m is None:
        return None
    duration = (m.group(1) or "").strip()
    if not duration or _GO_DURATION.sub("", duration):
        raise fail(path, f"{text!r}: {duration!r} is not a duration (Go's, as robfig/cron and "
                   "Dkron read @every: 90s, 1h30m, 1.5h)")
    total = sum((Fraction(n) * _GO_UNITS_MS[u] for n, u in _GO_DURATION.findall(duration)),
                Fraction(0))
    if not total:
        raise fail(path, f"{text!r}: must be at least 1s (robfig/cron and Dkron fire it every "
                   "second)")
    if total < 1000 or total % 1000:
        shown = str(total) if total.denominator == 1 else f"{total.numerator / total.denominator:g}"
        raise fail(path, f"robfig/cron and Dkron round @every down to whole seconds (at least "
                   f"1s): {text!r} is not every {shown} ms there; write whole seconds, or "
                   f"interval_ms: {shown}ms")
    return int(total)


def _retry(data: Any, path: str) -> dict[str, Any]:
    data = read_mapping(data, path)
    check_keys(data, _RETRY_KEYS, path)
    out: dict[str, Any] = {}
    for key, value in data.items():
        where = f"{path}.{key}"
        if key == "max_attempts":
            out[key] = read_int(value, where)
        elif key.endswith("_ms"):
            out[key] = parse_duration_ms(value, where)
        else:
            out[key] = read_float(value, where)
    return out


def _payload(task: Mapping[str, Any], path: str) -> bytes:
    if "payload" in task and "payload_base64" in task:
        raise fail(path, "set payload or payload_base64, not both")
    if "payload_base64" in task:
        try:
            return base64.b64decode(
                read_str(task["payload_base64"], f"{path}.payload_base64"), validate=True
            )
        except binascii.Error as e:
            raise fail(f"{path}.payload_base64", f"not base64: {e}") from None
    value = task.get("payload")
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode()
    try:
        return json_payload(value)
    except (TypeError, ValueError) as e:
        raise fail(
            f"{path}.payload", f"not representable as JSON ({e}); quote dates and times"
        ) from None


def _task(data: Any, path: str, defaults: Mapping[str, Any], default_name: str | None) -> TaskSpec:
    data = read_mapping(data if data is not None else {}, path)
    check_keys(data, _TASK_KEYS, path)
    if "name" in data:
        name = read_str(data["name"], f"{path}.name")
    elif default_name is not None:
        name = default_name
    else:
        raise fail(f"{path}.name", "required")
    depends = data.get("depends_on", [])
    if isinstance(depends, str):
        depends = [depends]
    if not isinstance(depends, list):
        raise fail(f"{path}.depends_on", f"expected a list of task names, got {kind_of(depends)}")
    queue = data.get("queue", defaults.get("queue", DEFAULT_QUEUE))
    timeout = data.get("timeout_ms", defaults.get("timeout_ms", 0))
    retry = {**defaults.get("retry", {}), **_retry(data.get("retry", {}), f"{path}.retry")}
    return TaskSpec(
        name=name,
        queue=read_str(queue, f"{path}.queue"),
        depends_on=tuple(read_str(d, f"{path}.depends_on[{i}]") for i, d in enumerate(depends)),
        payload=_payload(data, path),
        timeout_ms=parse_duration_ms(timeout, f"{path}.timeout_ms"),
        retry=RetryPolicy(**retry),
    )


def _choice(kind: Any, value: Any, path: str) -> Any:
    if value is None:
        return None
    text = read_str(value, path).strip().lower().replace("-", "_")
    try:
        return kind(text)
    except ValueError:
        raise fail(path, f"{value!r} is not one of {', '.join(k.value for k in kind)}") from None


def _dialect(value: Any, path: str) -> CronDialect | None:
    if value is None:
        return None
    text = read_str(value, path).strip().lower().removeprefix("cron_dialect_")
    try:
        return CronDialect(text.replace("-", "_"))
    except ValueError:
        choices = ", ".join(d.value for d in CronDialect)
        raise fail(path, f"{value!r} is not one of {choices}") from None


def _misfire(value: Any, path: str) -> MisfirePolicy:
    text = read_str(value, path).strip().lower().removeprefix("misfire_policy_")
    try:
        return MisfirePolicy(text)
    except ValueError:
        choices = ", ".join(p.value for p in MisfirePolicy)
        raise fail(path, f"{value!r} is not one of {choices}") from None


def overlap_policy(value: Any, path: str) -> OverlapPolicy:
    text = read_str(value, path).strip().lower().removeprefix("overlap_policy_")
    try:
        return OverlapPolicy(text.replace("-", "_"))
    except ValueError:
        choices = ", ".join(p.value for p in OverlapPolicy)
        raise fail(path, f"{value!r} is not one of {choices}") from None


def spec_from_data(data: Any, *, path: str = "spec", now_ms: int | None = None) -> JobSpec:
    """A ``JobSpec`` from parsed YAML/JSON in the schema above; UsageError names the key."""
    data = read_mapping(data, path)
    check_keys(data, _TOP_KEYS, path)
    for key in ("name", "schedule"):
        if key not in data:
            raise fail(f"{path}.{key}", "required")
    defaults_raw = read_mapping(data.get("defaults") or {}, f"{path}.defaults")
    check_keys(defaults_raw, _DEFAULT_KEYS, f"{path}.defaults")
    defaults = dict(defaults_raw)
    if "timeout_ms" in defaults:
        defaults["timeout_ms"] = parse_duration_ms(
            defaults["timeout_ms"], f"{path}.defaults.timeout_ms"
        )
    if "retry" in defaults:
        defaults["retry"] = _retry(defaults["retry"], f"{path}.defaults.retry")
    if "tasks" in data and "task" in data:
        raise fail(path, "set tasks (a DAG) or task (a single task), not both")
    if "tasks" in data:
        tasks_raw = data["tasks"]
        if not isinstance(tasks_raw, list) or not tasks_raw:
            raise fail(f"{path}.tasks", "expected a non-empty list of tasks")
        tasks = [_task(t, f"{path}.tasks[{i}]", defaults, None) for i, t in enumerate(tasks_raw)]
    else:
        tasks = [_task(data.get("task"), f"{path}.task", defaults, "main")]
    misfire = data.get("misfire_policy")
    return JobSpec(
        name=read_str(data["name"], f"{path}.name"),
        schedule=_schedule(data["schedule"], f"{path}.schedule", now_ms),
        tasks=tuple(tasks),
        tenant=read_str(data.get("tenant") or "default", f"{path}.tenant"),
        priority=read_int(data.get("priority", 0), f"{path}.priority"),
        misfire_policy=_misfire(misfire, f"{path}.misfire_policy")
        if misfire is not None
        else MisfirePolicy.RUN_ALL,
        misfire_grace_ms=parse_duration_ms(
            data.get("misfire_grace_ms", 0), f"{path}.misfire_grace_ms"
        ),
        paused=read_bool(data.get("paused", False), f"{path}.paused"),
        overlap_policy=overlap_policy(data.get("overlap_policy", "allow_all"),
                                      f"{path}.overlap_policy"),
        max_active_runs=None if data.get("max_active_runs") is None
        else read_int(data["max_active_runs"], f"{path}.max_active_runs"),
        max_buffered_runs=read_int(data.get("max_buffered_runs", 0), f"{path}.max_buffered_runs"),
        jitter_ms=parse_duration_ms(data.get("jitter_ms", 0), f"{path}.jitter_ms"),
        start_at_ms=_instant_or_zero(data.get("start_at_ms", 0), f"{path}.start_at_ms", now_ms),
        end_at_ms=_instant_or_zero(data.get("end_at_ms", 0), f"{path}.end_at_ms", now_ms),
        max_runs=read_int(data.get("max_runs", 0), f"{path}.max_runs"),
        delete_after_success=read_bool(data.get("delete_after_success", False),
                                       f"{path}.delete_after_success"),
        circuit_breaker=_breaker(data.get("circuit_breaker"), f"{path}.circuit_breaker"),
    )


def _breaker(value: Any, path: str) -> CircuitBreaker | None:
    if value is None:
        return None
    data = read_mapping(value, path)
    check_keys(data, ("window_runs", "failure_percent", "cooldown_ms"), path)
    for key in ("window_runs", "failure_percent", "cooldown_ms"):
        if key not in data:
            raise fail(f"{path}.{key}", "required")
    return CircuitBreaker(read_int(data["window_runs"], f"{path}.window_runs"),
                          read_int(data["failure_percent"], f"{path}.failure_percent"),
                          parse_duration_ms(data["cooldown_ms"], f"{path}.cooldown_ms"))


def _instant_or_zero(value: Any, path: str, now_ms: int | None) -> int:
    return 0 if value in (0, "0", None) else parse_instant_ms(value, path, now_ms=now_ms)


def load_spec_file(path: str, *, stdin_text: str | None = None) -> JobSpec:
    """Read one job spec from a YAML or JSON file ("-" reads standard input)."""
    label = "<stdin>" if path == "-" else path
    try:
        text = stdin_text if path == "-" and stdin_text is not None else Path(path).read_text()
    except OSError as e:
        raise UsageError(f"{label}: cannot read: {e.strerror or e}") from None
    if path.endswith(".json"):
        try:
            docs = [json.loads(text)]
        except json.JSONDecodeError as e:
            raise UsageError(f"{label}: invalid JSON: {e}") from None
    else:
        try:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as e:
            raise UsageError(f"{label}: invalid YAML: {' '.join(str(e).split())}") from None
    if len(docs) != 1:
        raise UsageError(f"{label}: expected one job spec, found {len(docs)} documents")
    try:
        return spec_from_data(docs[0])
    except UsageError as e:
        raise UsageError(f"{label}: {e}") from None


# --- the JSON form (inverse of spec_from_data) -----------------------------------------------


def bytes_to_data(name: str, value: bytes) -> dict[str, Any]:
    """``{name: <JSON value>}`` for JSON bytes that are not a bare string, ``{name: "<text>"}``
    for other UTF-8, ``{name + "_base64": ...}`` otherwise; ``{}`` for no bytes. This reads back
    to the same bytes (up to JSON whitespace and key order)."""
    if not value:
        return {}
    try:
        text = value.decode()
    except UnicodeDecodeError:
        return {f"{name}_base64": base64.b64encode(value).decode()}
    try:
        parsed = json.loads(text)
    except ValueError:
        return {name: text}
    return {name: text if isinstance(parsed, str) else parsed}


def schedule_to_data(schedule: Schedule) -> dict[str, Any]:
    if isinstance(schedule, CronSchedule):
        extra = {name: getattr(schedule, name).value
                 for name in ("dialect", "dst_nonexistent", "dst_ambiguous")
                 if getattr(schedule, name)}
        return {"cron": schedule.expression, "timezone": schedule.timezone, **extra}
    if isinstance(schedule, IntervalSchedule):
        return {"interval_ms": schedule.interval_ms, "anchor_ms": schedule.anchor_ms}
    return {"at_ms": schedule.at_ms}


def retry_to_data(retry: RetryPolicy) -> dict[str, Any]:
    return {key: getattr(retry, key) for key in _RETRY_KEYS}


def task_to_data(task: TaskSpec) -> dict[str, Any]:
    return {
        "name": task.name,
        "queue": task.queue,
        "depends_on": list(task.depends_on),
        **bytes_to_data("payload", task.payload),
        "timeout_ms": task.timeout_ms,
        "retry": retry_to_data(task.retry),
    }


def spec_to_data(spec: JobSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "tenant": spec.tenant,
        "schedule": schedule_to_data(spec.schedule),
        "priority": spec.priority,
        "misfire_policy": spec.misfire_policy.value,
        "misfire_grace_ms": spec.misfire_grace_ms,
        "paused": spec.paused,
        "overlap_policy": spec.overlap_policy.value,
        **({"max_active_runs": spec.max_active_runs} if spec.max_active_runs is not None else {}),
        "max_buffered_runs": spec.max_buffered_runs,
        "jitter_ms": spec.jitter_ms,
        "start_at_ms": spec.start_at_ms,
        "end_at_ms": spec.end_at_ms,
        "max_runs": spec.max_runs,
        "delete_after_success": spec.delete_after_success,
        **({"circuit_breaker": {
            "window_runs": spec.circuit_breaker.window_runs,
            "failure_percent": spec.circuit_breaker.failure_percent,
            "cooldown_ms": spec.circuit_breaker.cooldown_ms,
        }} if spec.circuit_breaker else {}),
        "tasks": [task_to_data(t) for t in spec.tasks],
    }


# --- specs from flags (job create / job update without -f) ------------------------------


def _schedule_from_flags(
    args: argparse.Namespace, current: dict[str, Any] | None
) -> dict[str, Any] | None:
    kinds = [f for f in ("cron", "interval_ms", "at") if getattr(args, f, None) is not None]
    if len(kinds) > 1:
        raise UsageError("give one schedule: --cron, --interval-ms or --at")
    for flag, _key in _CRON_FLAGS:
        if getattr(args, flag) is not None and not (
            kinds == ["cron"] or (not kinds and current and "cron" in current)
        ):
            raise UsageError(f"--{flag.replace('_', '-')} applies to a cron schedule (--cron)")
    if args.anchor_ms is not None and not (
        kinds == ["interval_ms"] or (not kinds and current and "interval_ms" in current)
    ):
        raise UsageError("--anchor-ms applies to an interval schedule (--interval-ms)")
    if not kinds:
        if current is None or (
            args.anchor_ms is None and all(getattr(args, f) is None for f, _ in _CRON_FLAGS)
        ):
            return None
        schedule = dict(current)
    elif kinds == ["cron"]:
        text, prefixed = _tz_prefix(args.cron, "--cron")
        if prefixed and args.tz is not None and args.tz != prefixed[1]:
            raise UsageError(f"--tz {args.tz!r} contradicts the cron's "
                             f"{prefixed[0]}={prefixed[1]} prefix: give the timezone once")
        if _EVERY.fullmatch(text.strip()):
            for flag, _key in _CRON_FLAGS:
                if getattr(args, flag) is not None:
                    raise UsageError(f"--{flag.replace('_', '-')} applies to a cron schedule; "
                                     f"--cron {args.cron!r} is an interval (@every)")
        schedule = {"cron": args.cron}  # the timezone: --tz, the prefix, or UTC
    elif kinds == ["interval_ms"]:
        schedule = {"interval_ms": args.interval_ms}
    else:
        schedule = {"at_ms": args.at}
    for flag, key in _CRON_FLAGS:
        if getattr(args, flag) is not None:
            schedule[key] = getattr(args, flag)
    if args.anchor_ms is not None:
        schedule["anchor_ms"] = args.anchor_ms
    return schedule


def schedule_from_flags(args: argparse.Namespace) -> Schedule | None:
    """The schedule of --cron/--tz/--cron-dialect, --interval-ms/--anchor-ms or --at, if any
    (``job preview``)."""
    data = _schedule_from_flags(args, None)
    return None if data is None else _schedule(data, "schedule", None)


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
            task["payload_base64"] = base64.b64encode(json.dumps(value).encode()).decode()
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
_JOB_FLAGS = ("priority", "misfire_policy", "misfire_grace_ms", "overlap_policy",
              "max_active_runs", "max_buffered_runs", "jitter_ms", "start_at_ms", "end_at_ms",
              "max_runs", "delete_after_success")
_BREAKER_FLAGS = ("circuit_window_runs", "circuit_failure_percent", "circuit_cooldown_ms")
_SCHEDULE_FLAGS = ("cron", "tz", "cron_dialect", "dst_nonexistent", "dst_ambiguous",
                   "interval_ms", "anchor_ms", "at")
# Flags of a cron schedule beside --cron, and their key in the schedule mapping.
_CRON_FLAGS = (("tz", "timezone"), ("cron_dialect", "dialect"),
               ("dst_nonexistent", "dst_nonexistent"), ("dst_ambiguous", "dst_ambiguous"))


def _given(args: argparse.Namespace, flags: Sequence[str]) -> list[str]:
    return [f for f in flags if getattr(args, f, None) is not None]


def spec_flags_given(args: argparse.Namespace, *, create: bool) -> list[str]:
    """The spec flags on the command line (``job create`` also has --name, --tenant and
    --paused), as argparse names them."""
    first, last = (("name", "tenant"), ("paused",)) if create else ((), ())
    return _given(args, (*first, *_SCHEDULE_FLAGS, *_TASK_FLAGS, *_JOB_FLAGS, *_BREAKER_FLAGS,
                         *last))


def _apply_job_flags(args: argparse.Namespace, data: dict[str, Any]) -> None:
    for flag in _JOB_FLAGS:
        if getattr(args, flag) is not None:
            data[flag] = getattr(args, flag)
    given = [f for f in _BREAKER_FLAGS if getattr(args, f, None) is not None]
    if given:
        if len(given) != len(_BREAKER_FLAGS):
            raise UsageError("--circuit-window-runs, --circuit-failure-percent and "
                             "--circuit-cooldown-ms go together")
        data["circuit_breaker"] = {"window_runs": args.circuit_window_runs,
                                   "failure_percent": args.circuit_failure_percent,
                                   "cooldown_ms": args.circuit_cooldown_ms}


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
