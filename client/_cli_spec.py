"""Job specs for the ``gnomon`` CLI: the YAML/JSON file schema, ``job create`` flags, and the
JSON form that ``--json`` prints (which reads back as a spec file).

Schema (every key but ``name`` and ``schedule`` is optional; ``*_ms`` keys take integer
milliseconds or a string: a duration such as ``"500ms"``, ``"30s"``, ``"1m30s"``, ``"2h"``, or
for instants (``at_ms``, ``anchor_ms``) an ISO 8601 time with a zone, ``"now"`` or
``"+10m"``)::

    name: etl                          # unique in the tenant; [A-Za-z0-9_.-]
    tenant: default
    schedule:                          # exactly one kind:
      cron: "0 3 * * *"                #   5 fields, 6 with seconds LAST, or @daily...
      timezone: Europe/Berlin          #   IANA name; default UTC
      # interval_ms: 30s               #   fixed period (anchor_ms: phase, default the epoch)
      # at_ms: "2026-11-30T10:41:02Z"  #   once
    priority: 0                        # -100..100
    misfire_policy: run_all            # run_all | run_latest | skip
    misfire_grace_ms: 60s
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

Quote cron expressions in YAML (``*`` starts an alias).
"""

from __future__ import annotations

import base64
import binascii
import difflib
import json
import re
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from ._models import (
    DEFAULT_QUEUE,
    CronSchedule,
    IntervalSchedule,
    JobSpec,
    MisfirePolicy,
    OnceSchedule,
    RetryPolicy,
    Schedule,
    TaskSpec,
    json_payload,
)

__all__ = [
    "UsageError",
    "bytes_to_data",
    "load_spec_file",
    "parse_duration_ms",
    "parse_instant_ms",
    "spec_from_data",
    "spec_to_data",
]


class UsageError(Exception):
    """Bad flags or spec input, found before anything was sent (exit code 2)."""


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
)
_SCHEDULE_KEYS = ("cron", "timezone", "interval_ms", "anchor_ms", "at_ms")
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

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def _fail(path: str, rule: str) -> UsageError:
    return UsageError(f"{path}: {rule}")


def _check_keys(data: Mapping[str, Any], allowed: tuple[str, ...], path: str) -> None:
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = (
                f" (did you mean {close[0]!r}?)"
                if close
                else f" (expected one of {', '.join(allowed)})"
            )
            raise _fail(f"{path}.{key}", f"unknown key{hint}")


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(path, f"expected a mapping, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return f"the string {value!r}"
    return type(value).__name__


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise _fail(path, f"expected a string, got {_kind(value)}")
    return value


def _int(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            return int(value)
        raise _fail(path, f"expected an integer, got {_kind(value)}")
    return value


def _float(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(path, f"expected a number, got {_kind(value)}")
    return float(value)


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(path, f"expected true or false, got {_kind(value)}")
    return value


def parse_duration_ms(value: Any, path: str = "duration") -> int:
    """Integer milliseconds, or a string like "500ms", "30s", "1m30s", "2h", "1d" (a bare
    number in a string is milliseconds)."""
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        if re.fullmatch(r"\d+", text):
            return int(text)
        if text and _DURATION.sub("", text) == "":
            return round(sum(float(n) * _UNITS_MS[u] for n, u in _DURATION.findall(text)))
        raise _fail(
            path, f"{value!r} is not a duration (integer milliseconds, or like 30s, 5m, 1h30m)"
        )
    ms = _int(value, path)
    if ms < 0:
        raise _fail(path, "must not be negative")
    return ms


def parse_instant_ms(value: Any, path: str = "time", *, now_ms: int | None = None) -> int:
    """Milliseconds since the epoch from an integer, an aware datetime, an ISO 8601 string with
    a zone ("2026-11-30T10:41:02Z", "2026-11-30 10:41:02+01:00"), "now" or "+<duration>"."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise _fail(path, f"{value.isoformat(' ')} has no timezone: add Z or an offset")
        return round(value.timestamp() * 1000)
    if isinstance(value, str):
        text = value.strip()
        if text == "now":
            return now
        if text.startswith("+"):
            return now + parse_duration_ms(text[1:], path)
        if re.fullmatch(r"\d+", text):
            return int(text)
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise _fail(
                path,
                f"{value!r} is not a time (ISO 8601 with a zone like 2026-11-30T10:41:02Z, "
                "milliseconds since the epoch, now, or +30s)",
            ) from None
        return parse_instant_ms(parsed, path, now_ms=now)
    return _int(value, path)


def _schedule(data: Any, path: str, now_ms: int | None) -> Schedule:
    data = _mapping(data, path)
    _check_keys(data, _SCHEDULE_KEYS, path)
    kinds = [k for k in ("cron", "interval_ms", "at_ms") if k in data]
    if len(kinds) != 1:
        found = ", ".join(kinds) if kinds else "none"
        raise _fail(path, f"set exactly one of cron, interval_ms, at_ms (found {found})")
    kind = kinds[0]
    extra = {
        "cron": {"timezone"},
        "interval_ms": {"anchor_ms"},
        "at_ms": set(),
    }[kind]
    for key in data:
        if key != kind and key not in extra:
            article = {"cron": "a cron", "interval_ms": "an interval", "at_ms": "a once"}[kind]
            raise _fail(f"{path}.{key}", f"does not apply to {article} schedule")
    if kind == "cron":
        tz = data.get("timezone")
        return CronSchedule(
            _str(data["cron"], f"{path}.cron"),
            _str(tz, f"{path}.timezone") if tz is not None else "UTC",
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


def _retry(data: Any, path: str) -> dict[str, Any]:
    data = _mapping(data, path)
    _check_keys(data, _RETRY_KEYS, path)
    out: dict[str, Any] = {}
    for key, value in data.items():
        where = f"{path}.{key}"
        if key == "max_attempts":
            out[key] = _int(value, where)
        elif key.endswith("_ms"):
            out[key] = parse_duration_ms(value, where)
        else:
            out[key] = _float(value, where)
    return out


def _payload(task: Mapping[str, Any], path: str) -> bytes:
    if "payload" in task and "payload_base64" in task:
        raise _fail(path, "set payload or payload_base64, not both")
    if "payload_base64" in task:
        try:
            return base64.b64decode(
                _str(task["payload_base64"], f"{path}.payload_base64"), validate=True
            )
        except binascii.Error as e:
            raise _fail(f"{path}.payload_base64", f"not base64: {e}") from None
    value = task.get("payload")
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode()
    try:
        return json_payload(value)
    except (TypeError, ValueError) as e:
        raise _fail(
            f"{path}.payload", f"not representable as JSON ({e}); quote dates and times"
        ) from None


def _task(data: Any, path: str, defaults: Mapping[str, Any], default_name: str | None) -> TaskSpec:
    data = _mapping(data if data is not None else {}, path)
    _check_keys(data, _TASK_KEYS, path)
    if "name" in data:
        name = _str(data["name"], f"{path}.name")
    elif default_name is not None:
        name = default_name
    else:
        raise _fail(f"{path}.name", "required")
    depends = data.get("depends_on", [])
    if isinstance(depends, str):
        depends = [depends]
    if not isinstance(depends, list):
        raise _fail(f"{path}.depends_on", f"expected a list of task names, got {_kind(depends)}")
    queue = data.get("queue", defaults.get("queue", DEFAULT_QUEUE))
    timeout = data.get("timeout_ms", defaults.get("timeout_ms", 0))
    retry = {**defaults.get("retry", {}), **_retry(data.get("retry", {}), f"{path}.retry")}
    return TaskSpec(
        name=name,
        queue=_str(queue, f"{path}.queue"),
        depends_on=tuple(_str(d, f"{path}.depends_on[{i}]") for i, d in enumerate(depends)),
        payload=_payload(data, path),
        timeout_ms=parse_duration_ms(timeout, f"{path}.timeout_ms"),
        retry=RetryPolicy(**retry),
    )


def _misfire(value: Any, path: str) -> MisfirePolicy:
    text = _str(value, path).strip().lower().removeprefix("misfire_policy_")
    try:
        return MisfirePolicy(text)
    except ValueError:
        choices = ", ".join(p.value for p in MisfirePolicy)
        raise _fail(path, f"{value!r} is not one of {choices}") from None


def spec_from_data(data: Any, *, path: str = "spec", now_ms: int | None = None) -> JobSpec:
    """A ``JobSpec`` from parsed YAML/JSON in the schema above; UsageError names the key."""
    data = _mapping(data, path)
    _check_keys(data, _TOP_KEYS, path)
    for key in ("name", "schedule"):
        if key not in data:
            raise _fail(f"{path}.{key}", "required")
    defaults_raw = _mapping(data.get("defaults") or {}, f"{path}.defaults")
    _check_keys(defaults_raw, _DEFAULT_KEYS, f"{path}.defaults")
    defaults = dict(defaults_raw)
    if "timeout_ms" in defaults:
        defaults["timeout_ms"] = parse_duration_ms(
            defaults["timeout_ms"], f"{path}.defaults.timeout_ms"
        )
    if "retry" in defaults:
        defaults["retry"] = _retry(defaults["retry"], f"{path}.defaults.retry")
    if "tasks" in data and "task" in data:
        raise _fail(path, "set tasks (a DAG) or task (a single task), not both")
    if "tasks" in data:
        tasks_raw = data["tasks"]
        if not isinstance(tasks_raw, list) or not tasks_raw:
            raise _fail(f"{path}.tasks", "expected a non-empty list of tasks")
        tasks = [_task(t, f"{path}.tasks[{i}]", defaults, None) for i, t in enumerate(tasks_raw)]
    else:
        tasks = [_task(data.get("task"), f"{path}.task", defaults, "main")]
    misfire = data.get("misfire_policy")
    return JobSpec(
        name=_str(data["name"], f"{path}.name"),
        schedule=_schedule(data["schedule"], f"{path}.schedule", now_ms),
        tasks=tuple(tasks),
        tenant=_str(data.get("tenant") or "default", f"{path}.tenant"),
        priority=_int(data.get("priority", 0), f"{path}.priority"),
        misfire_policy=_misfire(misfire, f"{path}.misfire_policy")
        if misfire is not None
        else MisfirePolicy.RUN_ALL,
        misfire_grace_ms=parse_duration_ms(
            data.get("misfire_grace_ms", 0), f"{path}.misfire_grace_ms"
        ),
        paused=_bool(data.get("paused", False), f"{path}.paused"),
    )


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
        return {"cron": schedule.expression, "timezone": schedule.timezone}
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
        "tasks": [task_to_data(t) for t in spec.tasks],
    }
