"""Fire instants of schedules and the misfire decision. Leader only: never imported by core.

The leader computes every fire instant here and puts the UTC result in the command, because
croniter and tzdata versions may differ between nodes (core must stay deterministic).

Cron semantics (croniter 7.0, IANA timezones via `zoneinfo`):

- 5 fields `minute hour day-of-month month day-of-week`, or 6 with a seconds field whose
  place the schedule's dialect says: SECONDS_LAST (croniter: `0 0 * * * 30` is 00:00:30
  every day) or SECONDS_FIRST (Quartz, Spring, Dkron: `30 0 0 * * *`), rotated here into
  croniter's form. A new 6-field expression without a dialect is refused with both readings
  (`*/10 * * * * *` is "every second of every tenth minute" to croniter and "every ten
  seconds" to Quartz); a job stored before dialects existed keeps the seconds-last reading.
  Names (`mon`, `jan`), `?`, `L` in day-of-month (the last day), `nW` (the weekday nearest
  day n, within its month) and `#` (`fri#3`: the third Friday) are croniter's and mean what
  they mean in Quartz; the last Friday of the month is croniter's `L5` (Quartz: `6L`,
  `FRIL`). Weekday numbers are croniter's in every dialect (0 or 7 Sunday .. 6 Saturday, as
  Spring and Dkron number them; Quartz's 1 is Sunday, so its `6#3` is `5#3` here). Quartz's
  `LW`, `L-n`, `nL` and a lone `L` in day-of-week are refused naming the field and the
  nearest spelling (`_quartz_form`).
- Day-of-month and day-of-week both restricted (anything but `*` or `?`, a step such as `*/2`
  included) means either matches: `0 0 */2 * 1` fires on odd days and on Mondays. That is
  croniter's rule, not Vixie cron's: Vixie cron and cronie take a field that starts with `*`
  as unrestricted and fire `0 0 */2 * 1` on odd-day Mondays only.
- Other schedulers' text is refused with the gnomon spelling, never half-read: robfig/cron's
  and Dkron's `@every 1h30m` is an interval schedule (interval_ms 5400000), a `CRON_TZ=` or
  `TZ=` prefix (robfig, Kubernetes CronJob) belongs in the timezone field. The CLI and spec
  files convert both before sending (`gnomon.client.cli.spec`).
- Aliases @hourly @daily @midnight @weekly @monthly @yearly @annually keep their usual meaning;
  they are expanded here, never hashed.
- `H` picks a per-job value from `hash_id` (crc32, the same in every process); `R` (random)
  is rejected because it would change on every evaluation.
- DST, per job (Schedule.dst_nonexistent, dst_ambiguous; tests with Europe/Berlin,
  America/New_York, Australia/Lord_Howe, America/Santiago and Asia/Tokyo): a local time that
  does not exist fires at the first instant after the gap (SHIFT_FORWARD, the default:
  `30 2 * * *` fires at 03:00 EDT on 2026-03-08, and `33 33 2 * * *` seconds-first in
  US/Pacific at 03:00:00 PDT on that day, where croniter says 03:00:33: `_gap_end`) or not
  at all (SKIP); a local time that occurs twice fires twice, once per UTC instant (BOTH,
  the default: `30 1 * * *` fires at 05:30Z and 06:30Z on 2026-11-01), or only at its FIRST
  or LAST occurrence. croniter finds the candidates; a candidate whose local time does not
  match the expression was shifted out of a gap, one whose wall time has two UTC offsets is
  repeated (`_dst_kind`).
"""

from __future__ import annotations

import functools
import re
import threading
import zlib
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from gnomon.node.core.model import (
    DEFAULT_MISFIRE_GRACE_MS,
    CronDialect,
    DstAmbiguous,
    DstNonexistent,
    JobSpec,
    MisfirePolicy,
    Schedule,
    ScheduleKind,
)
from gnomon.node.spec.errors import ValidationError

__all__ = [
    "ScheduleError",
    "check_schedule",
    "decide_fire",
    "first_fire_ms",
    "job_hash_id",
    "uses_hash",
    "next_fire_after",
    "preview",
    "shortest_gap_ms",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)

_ALIASES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
# croniter's own token grammar for H/R (month and weekday names never start with h or r).
_HASH_TOKEN = re.compile(r"h(\(\d+-\d+\))?(/\d+)?", re.ASCII | re.IGNORECASE)
_RANDOM_TOKEN = re.compile(r"r(\(\d+-\d+\))?(/\d+)?", re.ASCII | re.IGNORECASE)
# Without a year field every calendar pattern recurs within 28 years; croniter searches 50.
_EXISTENCE_PROBE_MS = 946_684_800_000  # 2000-01-01T00:00:00Z
# Used by check_schedule when the caller has no job identity to hash.
_PLACEHOLDER_HASH_ID = "gnomon"
_CRON_LOCK = threading.Lock()
_MAX_DST_SKIPS = 10_000
_DST_NONEXISTENT_POLICIES = ("", DstNonexistent.SKIP, DstNonexistent.SHIFT_FORWARD)
_DST_AMBIGUOUS_POLICIES = ("", DstAmbiguous.FIRST, DstAmbiguous.LAST, DstAmbiguous.BOTH)
_MAX_EXPRESSION_LEN = 256


class ScheduleError(ValidationError):
    """A schedule that cannot be used; the message is `"<field>: <rule>"`."""


def job_hash_id(tenant: str, name: str) -> str:
    """The `hash_id` of a job for `H`: stable for the job's lifetime, distinct between jobs."""
    return f"{tenant}/{name}"


def next_fire_after(schedule: Schedule, after_ms: int, *, hash_id: str = "") -> int:
    """First fire instant strictly after `after_ms` (UTC ms), or 0 when there is none."""
    kind = schedule.kind
    if kind == ScheduleKind.ONCE:
        return schedule.at_ms if schedule.at_ms > after_ms else 0
    if kind == ScheduleKind.INTERVAL:
        interval = schedule.interval_ms
        if interval <= 0:
            raise ScheduleError("spec.schedule.interval.interval_ms", "must be > 0")
        # Floor division keeps this right for anchors before and after `after_ms`.
        k = (after_ms - schedule.anchor_ms) // interval + 1
        return schedule.anchor_ms + k * interval
    if kind == ScheduleKind.CRON:
        return _cron_next(schedule.expression, schedule.timezone, after_ms, hash_id,
                          schedule.dialect, schedule.dst_nonexistent, schedule.dst_ambiguous)
    raise ScheduleError("spec.schedule", f"unknown schedule kind {kind!r}")


def first_fire_ms(schedule: Schedule, now_ms: int, *, hash_id: str = "") -> int:
    """The slot a new or resumed job starts at; a one-shot in the past fires as soon as possible."""
    if schedule.kind == ScheduleKind.ONCE:
        return schedule.at_ms
    return next_fire_after(schedule, now_ms, hash_id=hash_id)


def decide_fire(spec: JobSpec, slot_ms: int, now_ms: int, next_slot_ms: int) -> bool:
    """Whether slot `slot_ms` is recorded as SKIPPED (True) rather than run.

    `next_slot_ms` is the slot after this one (0 if none). A slot is on time while
    `now_ms - slot_ms <= grace`; late slots follow the job's misfire policy.
    """
    grace = spec.misfire_grace_ms if spec.misfire_grace_ms > 0 else DEFAULT_MISFIRE_GRACE_MS
    if now_ms - slot_ms <= grace:
        return False
    policy = spec.misfire_policy
    if policy == MisfirePolicy.SKIP:
        return True
    if policy == MisfirePolicy.RUN_LATEST:
        latest_due = next_slot_ms == 0 or next_slot_ms > now_ms
        return not latest_due
    return False  # RUN_ALL, and unspecified which means RUN_ALL


def check_schedule(
    schedule: Schedule, *, min_interval_ms: int, field: str = "spec.schedule", hash_id: str = ""
) -> None:
    """Raise ScheduleError naming the field and the rule when `schedule` is unusable.

    Pass the job's `hash_id` (`job_hash_id`) for `H` expressions: whether e.g. `0 0 H 2 *` can
    ever fire depends on it. Without one, `H` is checked with a placeholder id.
    """
    kind = schedule.kind
    _check_dst_fields(schedule, field)
    if kind == ScheduleKind.CRON:
        tz_field = f"{field}.cron.timezone"
        expr_field = f"{field}.cron.expression"
        zone = _zone(schedule.timezone, tz_field)
        # First what the text is (another scheduler's prefix or @every, a field count), then
        # whether a 6-field one says where its seconds are.
        expr, uses_hash = _normalise(schedule.expression, expr_field, schedule.dialect)
        _check_dialect(schedule, f"{field}.cron", hash_id or _PLACEHOLDER_HASH_ID, zone)
        key = hash_id or _PLACEHOLDER_HASH_ID
        template = _parse(expr, key if uses_hash else None, expr_field)
        try:
            _next_with(template, zone, _EXISTENCE_PROBE_MS)
        except (CroniterBadDateError, ValueError, OverflowError):
            raise ScheduleError(
                expr_field, f"{schedule.expression!r} never fires (no matching date exists)"
            ) from None
    elif kind == ScheduleKind.INTERVAL:
        interval = schedule.interval_ms
        interval_field = f"{field}.interval.interval_ms"
        if interval <= 0:
            raise ScheduleError(interval_field, f"must be > 0, got {interval}")
        if interval < min_interval_ms:
            raise ScheduleError(
                interval_field, f"{interval} is below min_interval_ms {min_interval_ms}"
            )
    elif kind == ScheduleKind.ONCE:
        if schedule.at_ms <= 0:
            raise ScheduleError(
                f"{field}.once.at_ms", f"must be > 0 (ms since the epoch), got {schedule.at_ms}"
            )
    elif not kind:
        raise ScheduleError(field, "exactly one of cron, interval, once must be set")
    else:
        raise ScheduleError(field, f"unknown schedule kind {kind!r}")


def _cron_next(expression: str, timezone: str, after_ms: int, hash_id: str,
               dialect: str = "", nonexistent: str = "", ambiguous: str = "") -> int:
    field = "spec.schedule.cron.expression"
    zone = _zone(timezone, "spec.schedule.cron.timezone")
    expr, uses_hash = _normalise(expression, field, dialect)
    if uses_hash and not hash_id:
        raise ScheduleError(field, "H needs a hash_id (the job's tenant/name)")
    template = _parse(expr, hash_id if uses_hash else None, field)
    try:
        at = _next_with(template, zone, after_ms)
        # Fires the job's DST policy leaves out: an ambiguous hour of a seconds schedule
        # has 3,600 of them; the bound only guards against a bug looping forever.
        for _ in range(_MAX_DST_SKIPS):
            kind, fold = _dst_kind(at, zone, template.expanded)
            if kind == "shifted" and nonexistent != DstNonexistent.SKIP:
                # croniter moves a time out of a gap by whole minutes and keeps its seconds
                # (`33 33 2 * * *` -> 03:00:33); SHIFT_FORWARD is the first instant after it.
                start = _gap_end(at, zone)
                if start > after_ms:
                    return start
                # else this gap's fire was at or before after_ms: look further
            elif not _policy_leaves_out(kind, fold, nonexistent, ambiguous):
                return at
            at = _next_with(template, zone, at)
        return at
    except (CroniterBadDateError, ValueError, OverflowError):
        # No match within croniter's 50-year search, or past datetime's year 9999.
        return 0


def _offset(at_ms: int, zone: ZoneInfo) -> timedelta | None:
    return (_EPOCH + at_ms * _MS).astimezone(zone).utcoffset()


def _gap_end(at_ms: int, zone: ZoneInfo) -> int:
    """The first instant after the DST gap that croniter shifted the fire `at_ms` out of: the
    instant the UTC offset changed (croniter's fire is within a minute of it; an hour back is
    searched). `at_ms` itself when no change is found."""
    after = _offset(at_ms, zone)
    lo, hi = at_ms - 3_600_000, at_ms
    if _offset(lo, zone) == after:
        return at_ms
    while hi - lo > 1:  # offset(lo) is the old offset, offset(hi) the new one
        mid = (lo + hi) // 2
        if _offset(mid, zone) == after:
            hi = mid
        else:
            lo = mid
    return hi


def _dst_leaves_out(at_ms: int, zone: ZoneInfo, expanded: list, nonexistent: str,
                    ambiguous: str) -> bool:
    """Whether the job's DST policy leaves out the fire croniter found at `at_ms`."""
    return _policy_leaves_out(*_dst_kind(at_ms, zone, expanded), nonexistent, ambiguous)


def _policy_leaves_out(kind: str, fold: int, nonexistent: str, ambiguous: str) -> bool:
    if kind == "shifted":
        return nonexistent == DstNonexistent.SKIP
    if kind == "repeated":
        return (ambiguous == DstAmbiguous.FIRST and fold == 1) or (
            ambiguous == DstAmbiguous.LAST and fold == 0)
    return False


def _dst_kind(at_ms: int, zone: ZoneInfo, expanded: list) -> tuple[str, int]:
    """("shifted", 0): croniter moved the fire out of a DST gap (its local time does not
    match the expression); ("repeated", fold): its local time occurs twice and this is the
    first (0) or second (1) occurrence; ("", 0) otherwise."""
    local = (_EPOCH + at_ms * _MS).astimezone(zone)
    if not (_matches(expanded[0], local.minute) and _matches(expanded[1], local.hour)):
        return "shifted", 0
    naive = local.replace(tzinfo=None)
    if naive.replace(tzinfo=zone, fold=0).utcoffset() != naive.replace(
            tzinfo=zone, fold=1).utcoffset():
        return "repeated", local.fold
    return "", 0


def _next_with(template: croniter[datetime], zone: ZoneInfo, after_ms: int) -> int:
    # Exact: no float round trip of after_ms before croniter sees it.
    start = (_EPOCH + after_ms * _MS).astimezone(zone)
    # Cached croniter objects are shared: they carry the current position, and `#` expressions
    # update their parsed fields in place on the first use.
    with _CRON_LOCK:
        fire = template.get_next(datetime, start_time=start)
    return (fire - _EPOCH) // _MS


@functools.lru_cache(maxsize=4096)
def _parse_cached(expr: str, hash_id: str | None) -> croniter[datetime]:
    return croniter(expr, _EPOCH, ret_type=datetime, hash_id=hash_id, max_years_between_matches=50)


def _parse(expr: str, hash_id: str | None, field: str) -> croniter[datetime]:
    try:
        return _parse_cached(expr, hash_id)
    except (CroniterError, ValueError) as exc:
        rule = _quartz_form(expr) or f"invalid cron expression: {exc}"
        raise ScheduleError(field, rule) from None


def _normalise(expression: str, field: str, dialect: str = "") -> tuple[str, bool]:
    """croniter's 5- or 6-field (seconds last) form of `expression` (aliases expanded, a
    SECONDS_FIRST expression rotated) and whether it uses `H`."""
    if len(expression) > _MAX_EXPRESSION_LEN:
        raise ScheduleError(field, f"longer than {_MAX_EXPRESSION_LEN} characters")
    text = expression.strip()
    prefix = _TZ_PREFIX.match(text)
    if prefix:
        rest = " ".join(text[prefix.end():].split())
        tz_field = field.rpartition(".")[0] + ".timezone"
        raise ScheduleError(field, f"the {prefix.group(1)}={prefix.group(2)} prefix (robfig/cron, "
                            f"Kubernetes CronJob) is not part of a gnomon expression: set "
                            f"{tz_field} to {prefix.group(2)!r} and the expression to {rest!r} "
                            "(spec files and the CLI's --cron take the prefix)")
    if text.startswith("@"):
        if text[:7].lower() == "@every " or text.lower() == "@every":
            raise ScheduleError(field, _every_rule(text))
        alias = _ALIASES.get(text.lower())
        if alias is None:
            raise ScheduleError(
                field, f"unknown alias {text!r}; known: {', '.join(sorted(_ALIASES))}"
            )
        return alias, False
    fields = text.split()
    if len(fields) not in (5, 6):
        year = " (Quartz's year field is not supported)" if len(fields) == 7 else ""
        raise ScheduleError(
            field,
            f"{expression!r} has {len(fields)} fields{year}; expected 5 (minute hour "
            "day-of-month month day-of-week) or 6 (the same with seconds, first or last as "
            "the dialect says)",
        )
    if len(fields) == 6 and dialect == CronDialect.SECONDS_FIRST:
        fields = fields[1:] + fields[:1]
    tokens = [tok for f in fields for tok in f.split(",")]
    if any(_RANDOM_TOKEN.fullmatch(tok) for tok in tokens):
        raise ScheduleError(field, "R (random) is not supported; use H for a stable spread")
    return " ".join(fields), any(_HASH_TOKEN.fullmatch(tok) for tok in tokens)


# robfig/cron's (and Kubernetes CronJob's) `CRON_TZ=<zone> ` or `TZ=<zone> ` in front.
_TZ_PREFIX = re.compile(r"(CRON_TZ|TZ)=(\S*)\s*", re.IGNORECASE)
# Go's time.ParseDuration (robfig's @every), and gnomon's `d`.
_GO_DURATION = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h|d)")
_GO_UNITS_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "μs": 1e-3, "ms": 1, "s": 1000,
                "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _every_rule(text: str) -> str:
    """Why `@every <duration>` is refused as a cron expression, with the interval it means."""
    duration = text[len("@every"):].strip()
    head = (f"{text!r} is an interval (robfig/cron, Dkron), not a cron expression: send an "
            "interval schedule")
    tail = "(spec files and the CLI's --cron take @every and send it as one)"
    if duration and _GO_DURATION.sub("", duration) == "":
        total = sum(float(n) * _GO_UNITS_MS[u] for n, u in _GO_DURATION.findall(duration))
        return f"{head}, interval_ms {round(total)} {tail}"
    return f"{head} {tail}; {duration!r} is not a duration (like 90s, 1h30m, 1.5h)"


# croniter's weekday numbers (0 or 7 Sunday .. 6 Saturday); Quartz numbers 1 Sunday .. 7 Saturday.
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_DAY_NAMES = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_QUARTZ_NUMBERING = ("weekdays are 0 or 7 Sunday to 6 Saturday, Quartz numbers 1 Sunday to "
                     "7 Saturday")


def _quartz_form(expr: str) -> str:
    """The rule for a Quartz (or Spring) day form croniter refuses, naming the field and the
    nearest gnomon spelling; "" when there is none in `expr` (croniter's field order)."""
    fields = expr.split()
    if len(fields) < 5:
        return ""
    for tok in fields[2].split(","):
        t = tok.upper()
        if t == "LW":
            return (f"day-of-month {tok!r} (Quartz: the last weekday, Monday to Friday, of the "
                    "month) is not supported: nearest: 'L', the last day")
        m = re.fullmatch(r"L-(\d+)(W?)", t)
        if m:
            what = (f"the weekday nearest {m.group(1)} days before the last day of the month"
                    if m.group(2) else f"{m.group(1)} days before the last day of the month")
            return (f"day-of-month {tok!r} (Quartz: {what}) is not supported: nearest: 'L', "
                    "the last day")
        m = re.fullmatch(r"(\d+)L", t)
        if m:
            return (f"day-of-month {tok!r} is not a day-of-month form (Quartz's {t} is a "
                    f"day-of-week: the last of weekday {m.group(1)} in the month): the last day "
                    "of the month is 'L'")
    for tok in fields[4].split(","):
        t = tok.upper()
        if t == "L":
            return (f"day-of-week {tok!r} alone (Quartz: 7, Saturday) is not supported: "
                    "write 'sat'")
        m = re.fullmatch(r"([0-7]|[A-Z]{3})(#L|L)", t)
        if not m or (m.group(1).isalpha() and m.group(1).lower() not in _WEEKDAYS):
            continue
        day = m.group(1)
        num = int(day) % 7 if day.isdigit() else _WEEKDAYS.index(day.lower())
        name = _DAY_NAMES[num]
        if m.group(2) == "#L":
            return (f"day-of-week {tok!r} is not a form of '#' (the nth weekday, 1 to 5): the "
                    f"last one is 'L{num}'")
        if day.isalpha():
            return (f"day-of-week {tok!r} (Quartz, Spring: the last {name} of the month) is "
                    f"written 'L{num}' here")
        quartz = int(day) - 1  # Quartz's day 1 is Sunday; it has no day 0
        theirs = f": its {t}, the last {_DAY_NAMES[quartz]}, is 'L{quartz}'" if quartz >= 0 else ""
        return (f"day-of-week {tok!r} (Quartz, Spring: the last of weekday {day} in the month) "
                f"is written 'L{num}' here (the last {name}; {_QUARTZ_NUMBERING}{theirs})")
    return ""


def _zone(name: str, field: str) -> ZoneInfo:
    if not name:
        return ZoneInfo("UTC")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(field, f"unknown IANA timezone {name!r}") from None


# --- dialects and previews ---------------------------------------------------------------

_READINGS = {
    CronDialect.SECONDS_LAST: "seconds last (croniter)",
    CronDialect.SECONDS_FIRST: "seconds first (Quartz, Spring, Dkron)",
}
_FIELD_ORDER = {
    CronDialect.SECONDS_LAST: "minute hour day-of-month month day-of-week second",
    CronDialect.SECONDS_FIRST: "second minute hour day-of-month month day-of-week",
}


def _check_dst_fields(schedule: Schedule, field: str) -> None:
    """DST policies: known values, and only on a cron schedule (an interval or a one-shot
    is a UTC instant: DST cannot move it)."""
    for name, value, known in (
        ("dst_nonexistent", schedule.dst_nonexistent, _DST_NONEXISTENT_POLICIES),
        ("dst_ambiguous", schedule.dst_ambiguous, _DST_AMBIGUOUS_POLICIES),
    ):
        if value not in known:
            raise ScheduleError(f"{field}.cron.{name}",
                                f"must be one of {', '.join(k for k in known if k)}, got {value!r}")
        if value and schedule.kind != ScheduleKind.CRON:
            raise ScheduleError(f"{field}.{schedule.kind or 'kind'}",
                                f"a DST policy ({name}) applies to cron schedules only: an "
                                f"{schedule.kind} schedule fires at UTC instants")


def _check_dialect(schedule: Schedule, field: str, hash_id: str, zone: ZoneInfo) -> None:
    """A 6-field expression needs a dialect: refuse it without one, showing both readings."""
    if schedule.dialect not in ("", *_READINGS):
        raise ScheduleError(f"{field}.dialect", f"unknown cron dialect {schedule.dialect!r}")
    if schedule.dialect or len(schedule.expression.split()) != 6:
        return
    now = int(datetime.now(UTC).timestamp() * 1000)
    readings = []
    for dialect, label in _READINGS.items():
        try:
            expr, uses_hash = _normalise(schedule.expression, f"{field}.expression", dialect)
            template = _parse(expr, hash_id if uses_hash else None, f"{field}.expression")
            at, shown = now, []
            for _ in range(3):
                at = _next_with(template, zone, at)
                shown.append(_iso(at, zone))
            readings.append(f"{label}: next {', '.join(shown)}")
        except (ScheduleError, CroniterBadDateError, ValueError, OverflowError) as exc:
            readings.append(f"{label}: invalid ({getattr(exc, 'rule', exc)})")
    raise ScheduleError(
        f"{field}.dialect",
        f"the 6-field expression {schedule.expression!r} needs a dialect, SECONDS_LAST or "
        f"SECONDS_FIRST (croniter and Quartz read it differently). Readings: "
        f"{'; '.join(readings)}",
    )


def _iso(at_ms: int, zone: ZoneInfo) -> str:
    local = (_EPOCH + at_ms * _MS).astimezone(zone)
    text = local.isoformat(timespec="milliseconds" if at_ms % 1000 else "seconds")
    return text.replace("+00:00", "Z") if zone.key == "UTC" else text


def preview(schedule: Schedule, after_ms: int, count: int, *,
            hash_id: str = "") -> tuple[list[tuple[int, str, str, str]], str, str]:
    """The next `count` fires strictly after `after_ms` as (at_ms, UTC ISO, local ISO, DST
    note), the timezone of the local times, and how a cron expression is read."""
    zone = _zone(schedule.timezone, "schedule.cron.timezone") \
        if schedule.kind == ScheduleKind.CRON else ZoneInfo("UTC")
    reading = ""
    expanded = None
    if schedule.kind == ScheduleKind.CRON:
        expr, uses_hash = _normalise(schedule.expression, "schedule.cron.expression",
                                     schedule.dialect)
        if uses_hash and not hash_id:
            raise ScheduleError("name", "the expression uses H: give the job (tenant and name) "
                                "whose hash spreads it")
        template = _parse(expr, hash_id if uses_hash else None, "schedule.cron.expression")
        expanded = template.expanded
        if len(expr.split()) == 6:
            # As written, in its dialect's order (croniter's rotated form is no one's text).
            dialect = schedule.dialect or CronDialect.SECONDS_LAST
            reading = (f"{' '.join(schedule.expression.split())} ({_READINGS[dialect]}: "
                       f"{_FIELD_ORDER[dialect]})")
        else:
            reading = f"{expr} (5 fields)"
    out: list[tuple[int, str, str, str]] = []
    at = after_ms
    while len(out) < count:
        at = first_fire_ms(schedule, at, hash_id=hash_id) if not out and \
            schedule.kind == ScheduleKind.ONCE else next_fire_after(schedule, at, hash_id=hash_id)
        if not at or (out and at <= out[-1][0]) or (schedule.kind == ScheduleKind.ONCE and out):
            break
        note = _dst_note(at, zone, expanded) if expanded is not None else ""
        out.append((at, _iso(at, ZoneInfo("UTC")), _iso(at, zone), note))
    return out, zone.key, reading


def _matches(values: list, value: int) -> bool:
    return values == ["*"] or value in values


def _dst_note(at_ms: int, zone: ZoneInfo, expanded: list) -> str:
    """What DST did to a cron fire at `at_ms`: moved out of a gap, or one of two occurrences."""
    kind, fold = _dst_kind(at_ms, zone, expanded)
    local = (_EPOCH + at_ms * _MS).astimezone(zone)
    if kind == "shifted":
        return (f"the local time it is meant for does not exist on {local.date()} (DST "
                f"starts): fires at the first instant after the gap, "
                f"{local.strftime('%H:%M:%S')} {local.tzname()}")
    if kind == "repeated":
        which = "second" if fold else "first"
        return (f"{local.strftime('%H:%M:%S')} occurs twice on {local.date()} (DST ends): this "
                f"is the {which} occurrence ({local.tzname()}, UTC{local.strftime('%z')})")
    return ""


# --- jitter, spread and bounds (leader side) ---------------------------------------------

_GAP_PROBE_FIRES = 64


@functools.lru_cache(maxsize=4096)
def uses_hash(schedule: Schedule) -> bool:
    """Whether a cron schedule has `H` tokens, i.e. its slots depend on the job's hash id
    (without them one evaluation serves every job with the schedule)."""
    if schedule.kind != ScheduleKind.CRON:
        return False
    return _normalise(schedule.expression, "spec.schedule.cron.expression",
                      schedule.dialect)[1]


def shortest_gap_ms(schedule: Schedule, hash_id: str = "") -> int:
    """The shortest gap between consecutive slots (0: a one-shot): the interval, or for cron
    the least gap among the next fires from a fixed probe instant (a year's calendar
    quirks aside, what jitter must stay below)."""
    if schedule.kind == ScheduleKind.INTERVAL:
        return schedule.interval_ms
    if schedule.kind != ScheduleKind.CRON:
        return 0
    at, gaps = _EXISTENCE_PROBE_MS, []
    for _ in range(_GAP_PROBE_FIRES):
        nxt = next_fire_after(schedule, at, hash_id=hash_id)
        if not nxt:
            break
        if at != _EXISTENCE_PROBE_MS:
            gaps.append(nxt - at)
        at = nxt
    return min(gaps) if gaps else 0


def spread_offset_ms(job_id: str, window_ms: int) -> int:
    """The cluster's spread of a job's fires: a stable offset in [0, window) from a hash of
    its id, so jobs with the same schedule fire over the window instead of at one instant."""
    if window_ms <= 0:
        return 0
    return zlib.crc32(job_id.encode()) % window_ms


def bounded_first(spec: JobSpec, now_ms: int, *, hash_id: str) -> int:
    """The first slot of a new, updated or resumed job within start_at_ms / end_at_ms."""
    after = max(now_ms, spec.start_at_ms - 1) if spec.start_at_ms else now_ms
    if spec.schedule.kind == ScheduleKind.ONCE:
        slot = spec.schedule.at_ms
        if spec.start_at_ms and slot < spec.start_at_ms:
            slot = 0
    else:
        slot = next_fire_after(spec.schedule, after, hash_id=hash_id)
    return _within_end(spec, slot)


def bounded_next(spec: JobSpec, slot_ms: int, *, hash_id: str) -> int:
    """The slot after `slot_ms` within end_at_ms (0: nothing left)."""
    return _within_end(spec, next_fire_after(spec.schedule, slot_ms, hash_id=hash_id))


def _within_end(spec: JobSpec, slot: int) -> int:
    return 0 if spec.end_at_ms and slot > spec.end_at_ms else slot
