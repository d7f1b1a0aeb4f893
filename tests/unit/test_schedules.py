"""Fire instants (cron, interval, once), schedule checks and the misfire decision."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gnomon.node.core.model import (
    DEFAULT_MISFIRE_GRACE_MS,
    JobSpec,
    MisfirePolicy,
    Schedule,
    ScheduleKind,
    TaskSpec,
)
from gnomon.node.spec import schedules
from gnomon.node.spec.schedules import (
    ScheduleError,
    check_schedule,
    decide_fire,
    first_fire_ms,
    job_hash_id,
    next_fire_after,
)

NY = "America/New_York"


def ms(iso: str) -> int:
    """UTC ms of an ISO-8601 instant; a naive one is read as UTC."""
    dt = datetime.fromisoformat(iso)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return round(dt.timestamp() * 1000)


def cron(expression: str, timezone: str = "") -> Schedule:
    return Schedule(kind=ScheduleKind.CRON, expression=expression, timezone=timezone)


def fires(schedule: Schedule, after: str, n: int, hash_id: str = "") -> list[int]:
    out, t = [], ms(after)
    for _ in range(n):
        t = next_fire_after(schedule, t, hash_id=hash_id)
        out.append(t)
    return out


# --- cron -----------------------------------------------------------------------------------


def test_cron_five_fields_strictly_after() -> None:
    s = cron("*/15 * * * *")
    assert next_fire_after(s, ms("2026-01-01T12:07:00")) == ms("2026-01-01T12:15:00")
    assert next_fire_after(s, ms("2026-01-01T12:15:00")) == ms("2026-01-01T12:30:00")
    assert next_fire_after(s, ms("2026-01-01T12:14:59.999")) == ms("2026-01-01T12:15:00")
    assert next_fire_after(s, ms("2026-01-01T12:15:00.001")) == ms("2026-01-01T12:30:00")


def test_cron_six_fields_has_seconds_last() -> None:
    assert fires(cron("0 0 * * * 30"), "2026-01-01T00:00:00", 2) == [
        ms("2026-01-01T00:00:30"),
        ms("2026-01-02T00:00:30"),
    ]
    assert fires(cron("* * * * * */20"), "2026-01-01T00:00:00.500", 3) == [
        ms("2026-01-01T00:00:20"),
        ms("2026-01-01T00:00:40"),
        ms("2026-01-01T00:01:00"),
    ]


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        ("@hourly", "2026-01-01T01:00:00"),
        ("@daily", "2026-01-02T00:00:00"),
        ("@midnight", "2026-01-02T00:00:00"),
        ("@weekly", "2026-01-04T00:00:00"),  # the first Sunday
        ("@monthly", "2026-02-01T00:00:00"),
        ("@yearly", "2027-01-01T00:00:00"),
        ("@annually", "2027-01-01T00:00:00"),
        ("@DAILY", "2026-01-02T00:00:00"),
    ],
)
def test_cron_aliases(alias: str, expected: str) -> None:
    after = ms("2026-01-01T00:00:00")
    assert next_fire_after(cron(alias), after) == ms(expected)
    # A hash_id must not turn aliases into hashed expressions (croniter would).
    assert next_fire_after(cron(alias), after, hash_id="acme/report") == ms(expected)


def test_cron_timezone() -> None:
    s = cron("0 9 * * *", "Europe/Berlin")
    assert next_fire_after(s, ms("2026-01-15T00:00:00")) == ms("2026-01-15T08:00:00")  # CET
    assert next_fire_after(s, ms("2026-07-15T00:00:00")) == ms("2026-07-15T07:00:00")  # CEST
    assert next_fire_after(cron("0 9 * * *"), ms("2026-07-15T00:00:00")) == ms(
        "2026-07-15T09:00:00"
    )
    assert next_fire_after(cron("0 9 * * *", "UTC"), ms("2026-07-15T00:00:00")) == ms(
        "2026-07-15T09:00:00"
    )


def test_dst_spring_forward_fires_at_next_existing_instant() -> None:
    # 2026-03-08 02:00 EST -> 03:00 EDT: 02:30 does not exist and fires at 03:00 EDT.
    assert fires(cron("30 2 * * *", NY), "2026-03-07T12:00:00", 3) == [
        ms("2026-03-08T03:00:00-04:00"),
        ms("2026-03-09T02:30:00-04:00"),
        ms("2026-03-10T02:30:00-04:00"),
    ]
    # Every 30 minutes: 01:30 EST is followed by 03:00 EDT, 30 real minutes later.
    assert fires(cron("*/30 * * * *", NY), "2026-03-08T01:00:00-05:00", 3) == [
        ms("2026-03-08T01:30:00-05:00"),
        ms("2026-03-08T03:00:00-04:00"),
        ms("2026-03-08T03:30:00-04:00"),
    ]


def test_dst_fall_back_fires_twice() -> None:
    # 2026-11-01 02:00 EDT -> 01:00 EST: 01:30 occurs twice and fires at both UTC instants.
    assert fires(cron("30 1 * * *", NY), "2026-10-31T12:00:00", 3) == [
        ms("2026-11-01T01:30:00-04:00"),
        ms("2026-11-01T01:30:00-05:00"),
        ms("2026-11-02T01:30:00-05:00"),
    ]
    # From between the two occurrences, only the second one is left.
    assert next_fire_after(cron("30 1 * * *", NY), ms("2026-11-01T01:45:00-04:00")) == ms(
        "2026-11-01T01:30:00-05:00"
    )
    assert fires(cron("0 * * * *", NY), "2026-11-01T00:30:00-04:00", 3) == [
        ms("2026-11-01T01:00:00-04:00"),
        ms("2026-11-01T01:00:00-05:00"),
        ms("2026-11-01T02:00:00-05:00"),
    ]


def test_hash_is_deterministic_per_hash_id() -> None:
    s = cron("H H * * *")
    after = ms("2026-01-01T00:00:00")
    first = next_fire_after(s, after, hash_id="t/job")
    schedules._parse_cached.cache_clear()
    assert next_fire_after(s, after, hash_id="t/job") == first
    # crc32 of the id: the same value in every process (pinned for this croniter version).
    assert first == ms("2026-01-01T16:32:00")
    others = {next_fire_after(s, after, hash_id=f"t/job{i}") for i in range(10)}
    assert len(others) > 1


def test_hash_without_hash_id_is_an_error() -> None:
    with pytest.raises(ScheduleError, match="H needs a hash_id"):
        next_fire_after(cron("H * * * *"), ms("2026-01-01T00:00:00"))


def test_job_hash_id() -> None:
    assert job_hash_id("acme", "nightly") == "acme/nightly"


def test_cron_without_a_next_fire_returns_zero() -> None:
    # Past croniter's search horizon / datetime's range: nothing left to fire.
    assert next_fire_after(cron("0 0 1 1 *"), ms("9999-12-31T12:00:00")) == 0


# --- interval and once ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("interval", "anchor", "after", "expected"),
    [
        (60_000, 0, 0, 60_000),
        (60_000, 0, 59_999, 60_000),
        (60_000, 0, 60_000, 120_000),
        (60_000, 5, 1_000_000, 1_020_005),  # past anchor
        (60_000, 10_000_000, 1_000_000, 1_060_000),  # future anchor: k is negative
        (60_000, 10_000_000, 9_999_999, 10_000_000),
        (60_000, 10_000_000, 10_000_000, 10_060_000),
        (7, -3, -3, 4),
    ],
)
def test_interval(interval: int, anchor: int, after: int, expected: int) -> None:
    s = Schedule(kind=ScheduleKind.INTERVAL, interval_ms=interval, anchor_ms=anchor)
    assert next_fire_after(s, after) == expected


def test_interval_not_positive_raises() -> None:
    with pytest.raises(ScheduleError):
        next_fire_after(Schedule(kind=ScheduleKind.INTERVAL, interval_ms=0), 1)


def test_once() -> None:
    s = Schedule(kind=ScheduleKind.ONCE, at_ms=5_000)
    assert next_fire_after(s, 4_999) == 5_000
    assert next_fire_after(s, 5_000) == 0
    assert next_fire_after(s, 6_000) == 0


def test_first_fire() -> None:
    once = Schedule(kind=ScheduleKind.ONCE, at_ms=5_000)
    assert first_fire_ms(once, 1_000) == 5_000
    assert first_fire_ms(once, 9_000) == 5_000  # in the past: fires as soon as possible
    every = Schedule(kind=ScheduleKind.INTERVAL, interval_ms=1_000, anchor_ms=0)
    assert first_fire_ms(every, 9_000) == 10_000
    assert first_fire_ms(cron("0 * * * *"), ms("2026-01-01T00:00:00")) == ms("2026-01-01T01:00:00")


# --- check_schedule -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        "0 0 29 2 *",
        "0 0 30 2 mon",
        "0 0 * 2 5#5",
        "0 0 L 2 *",
        "@weekly",
        "H H * * *",
        "0 9 ? * 1-5",
    ],
)
def test_check_accepts(expression: str) -> None:
    check_schedule(cron(expression, NY), min_interval_ms=100)


@pytest.mark.parametrize("expression", ["0 0 30 2 *", "0 0 31 2 *", "0 0 31 4,6,9,11 *"])
def test_check_rejects_impossible(expression: str) -> None:
    with pytest.raises(ScheduleError, match="never fires") as err:
        check_schedule(cron(expression), min_interval_ms=100)
    assert err.value.field == "spec.schedule.cron.expression"
    assert str(err.value).startswith("spec.schedule.cron.expression: ")


@pytest.mark.parametrize(
    ("expression", "rule"),
    [
        ("", "0 fields"),
        ("* * * *", "4 fields"),
        ("* * * * * * *", "7 fields"),
        ("61 * * * *", "out of range"),
        ("*/0 * * * *", "invalid cron expression"),
        ("foo bar baz qux quux", "invalid cron expression"),
        ("0 0 * * funday", "invalid cron expression"),
        ("@reboot", "unknown alias"),
        ("R * * * *", "R \\(random\\) is not supported"),
        ("0 " * 200, "longer than 256"),
    ],
)
def test_check_rejects_malformed(expression: str, rule: str) -> None:
    with pytest.raises(ScheduleError, match=rule) as err:
        check_schedule(cron(expression), min_interval_ms=100)
    assert err.value.field == "spec.schedule.cron.expression"


@pytest.mark.parametrize("tz", ["Mars/Base", "America", "../etc/passwd", "/etc/localtime", "utc"])
def test_check_rejects_unknown_timezone(tz: str) -> None:
    with pytest.raises(ScheduleError) as err:
        check_schedule(cron("* * * * *", tz), min_interval_ms=100)
    assert str(err.value) == f"spec.schedule.cron.timezone: unknown IANA timezone {tz!r}"
    assert err.value.field == "spec.schedule.cron.timezone"


def test_check_hash_depends_on_hash_id() -> None:
    # crc32 picks day 31 for "default/job11" and day 24 for "default/job1".
    with pytest.raises(ScheduleError, match="never fires"):
        check_schedule(cron("0 0 H 2 *"), min_interval_ms=100, hash_id="default/job11")
    check_schedule(cron("0 0 H 2 *"), min_interval_ms=100, hash_id="default/job1")


@pytest.mark.parametrize(
    ("schedule", "field", "rule"),
    [
        (Schedule(kind=ScheduleKind.INTERVAL, interval_ms=99), "interval.interval_ms", "below"),
        (Schedule(kind=ScheduleKind.INTERVAL, interval_ms=0), "interval.interval_ms", "> 0"),
        (Schedule(kind=ScheduleKind.INTERVAL, interval_ms=-5), "interval.interval_ms", "> 0"),
        (Schedule(kind=ScheduleKind.ONCE, at_ms=0), "once.at_ms", "> 0"),
        (Schedule(kind=ScheduleKind.ONCE, at_ms=-1), "once.at_ms", "> 0"),
    ],
)
def test_check_rejects_interval_and_once(schedule: Schedule, field: str, rule: str) -> None:
    with pytest.raises(ScheduleError, match=rule) as err:
        check_schedule(schedule, min_interval_ms=100, field="job.schedule")
    assert err.value.field == f"job.schedule.{field}"


def test_check_accepts_interval_and_once() -> None:
    check_schedule(Schedule(kind=ScheduleKind.INTERVAL, interval_ms=100), min_interval_ms=100)
    check_schedule(Schedule(kind=ScheduleKind.ONCE, at_ms=1), min_interval_ms=100)


@pytest.mark.parametrize("kind", ["", "weekly"])
def test_check_rejects_kind(kind: str) -> None:
    with pytest.raises(ScheduleError) as err:
        check_schedule(Schedule(kind=kind), min_interval_ms=100)
    assert err.value.field == "spec.schedule"


# --- misfire --------------------------------------------------------------------------------


def spec_with(policy: str, grace_ms: int = 0) -> JobSpec:
    return JobSpec(
        tenant="t",
        name="j",
        schedule=Schedule(kind=ScheduleKind.INTERVAL, interval_ms=1_000),
        tasks=(TaskSpec(name="a"),),
        misfire_policy=policy,
        misfire_grace_ms=grace_ms,
    )


G = DEFAULT_MISFIRE_GRACE_MS
ALL, LATEST, SKIP = MisfirePolicy.RUN_ALL, MisfirePolicy.RUN_LATEST, MisfirePolicy.SKIP


@pytest.mark.parametrize(
    ("policy", "grace", "slot", "now", "next_slot", "skip"),
    [
        # On time (lateness <= grace): every policy runs.
        (SKIP, 0, 1_000, 1_000, 2_000, False),
        (SKIP, 0, 1_000, 1_000 + G, 2_000, False),
        (LATEST, 0, 1_000, 1_000 + G, 2_000, False),
        (SKIP, 500, 1_000, 1_500, 2_000, False),
        # Late.
        (SKIP, 0, 1_000, 1_001 + G, 0, True),
        (SKIP, 500, 1_000, 1_501, 99_999, True),
        (ALL, 0, 1_000, 1_001 + G, 2_000, False),
        (ALL, 500, 1_000, 10_000_000, 2_000, False),
        ("", 0, 1_000, 10_000_000, 2_000, False),  # unspecified means RUN_ALL
        (LATEST, 500, 1_000, 5_000, 2_000, True),  # a later slot is due too
        (LATEST, 500, 1_000, 5_000, 5_000, True),  # next slot due exactly now
        (LATEST, 500, 1_000, 5_000, 5_001, False),  # the latest due slot
        (LATEST, 500, 1_000, 5_000, 0, False),  # no next slot
    ],
)
def test_decide_fire(
    policy: str, grace: int, slot: int, now: int, next_slot: int, skip: bool
) -> None:
    assert decide_fire(spec_with(policy, grace), slot, now, next_slot) is skip


# --- properties -----------------------------------------------------------------------------

EXPRESSIONS = [
    "* * * * *",
    "*/7 * * * *",
    "30 2 * * *",
    "30 1 * * *",
    "0 0 * * 0",
    "15,45 0-3 * * mon-fri",
    "0 0 29 2 *",
    "59 23 L * *",
    "*/20 * * * * */15",
    "@monthly",
    "H H * * *",
]
ZONES = ["", "UTC", NY, "Europe/Berlin", "Australia/Lord_Howe", "Europe/Dublin", "Asia/Kolkata"]

schedules_st = st.one_of(
    st.builds(cron, st.sampled_from(EXPRESSIONS), st.sampled_from(ZONES)),
    st.builds(
        lambda i, a: Schedule(kind=ScheduleKind.INTERVAL, interval_ms=i, anchor_ms=a),
        st.integers(1, 10**10),
        st.integers(-(10**13), 10**13),
    ),
)


@settings(max_examples=300, deadline=None)
@given(schedule=schedules_st, after=st.integers(0, ms("2090-01-01T00:00:00")))
def test_next_fire_strictly_increases(schedule: Schedule, after: int) -> None:
    t = after
    for _ in range(6):
        nxt = next_fire_after(schedule, t, hash_id="acme/prop")
        assert nxt > t
        t = nxt


# --- dialects and previews (issue 9) ---------------------------------------------------------


def dialect_cron(expression: str, dialect: str, timezone: str = "") -> Schedule:
    return Schedule(kind=ScheduleKind.CRON, expression=expression, timezone=timezone,
                    dialect=dialect)


def test_seconds_first_is_rotated_into_croniters_form() -> None:
    quartz = dialect_cron("*/10 * * * * *", "seconds_first")
    assert fires(quartz, "2026-01-01T00:00:00", 3) == [
        ms("2026-01-01T00:00:10"), ms("2026-01-01T00:00:20"), ms("2026-01-01T00:00:30")]
    # The same text seconds-last: every second of every tenth minute.
    croniter_reading = dialect_cron("*/10 * * * * *", "seconds_last")
    assert fires(croniter_reading, "2026-01-01T00:00:00", 3) == [
        ms("2026-01-01T00:00:01"), ms("2026-01-01T00:00:02"), ms("2026-01-01T00:00:03")]
    assert fires(dialect_cron("30 0 9 * * *", "seconds_first"), "2026-01-01T00:00:00", 1) == [
        ms("2026-01-01T09:00:30")]


def test_a_six_field_expression_without_a_dialect_is_refused_with_both_readings() -> None:
    with pytest.raises(ScheduleError) as e:
        check_schedule(cron("*/10 * * * * *"), min_interval_ms=100)
    assert e.value.field == "spec.schedule.cron.dialect"
    assert "needs a dialect, SECONDS_LAST or SECONDS_FIRST" in e.value.rule
    assert "seconds last (croniter): next" in e.value.rule
    assert "seconds first (Quartz, Spring, Dkron): next" in e.value.rule
    # One reading may be impossible: it says so, and the dialect is still required.
    with pytest.raises(ScheduleError, match=r"seconds first .*: invalid"):
        check_schedule(cron("0 0 * * * 30"), min_interval_ms=100)
    for dialect in ("seconds_last", "seconds_first"):
        check_schedule(dialect_cron("*/10 * * * * *", dialect), min_interval_ms=100)
    check_schedule(cron("*/10 * * * *"), min_interval_ms=100)  # 5 fields need none
    with pytest.raises(ScheduleError, match="Quartz's year field is not supported"):
        check_schedule(dialect_cron("0 0 0 * * ? 2030", "seconds_first"), min_interval_ms=100)
    with pytest.raises(ScheduleError, match="unknown cron dialect"):
        check_schedule(dialect_cron("* * * * *", "seconds_middle"), min_interval_ms=100)


def test_a_stored_six_field_job_without_a_dialect_keeps_reading_seconds_last() -> None:
    assert fires(cron("0 0 * * * 30"), "2026-01-01T00:00:00", 1) == [ms("2026-01-01T00:00:30")]


def test_preview_lists_utc_and_local_times_with_dst_notes() -> None:
    out, zone, reading = schedules.preview(cron("30 2 * * *", "Europe/Berlin"),
                                           ms("2026-03-28T00:00:00"), 3)
    assert (zone, reading) == ("Europe/Berlin", "30 2 * * * (5 fields)")
    assert [(utc, local) for _, utc, local, _ in out] == [
        ("2026-03-28T01:30:00Z", "2026-03-28T02:30:00+01:00"),
        ("2026-03-29T01:00:00Z", "2026-03-29T03:00:00+02:00"),
        ("2026-03-30T00:30:00Z", "2026-03-30T02:30:00+02:00")]
    notes = [note for *_, note in out]
    assert notes[0] == notes[2] == ""
    assert "does not exist on 2026-03-29 (DST starts)" in notes[1]
    out, _, _ = schedules.preview(cron("30 1 * * *", NY), ms("2026-11-01T00:00:00"), 2)
    assert ["first occurrence (EDT" in out[0][3], "second occurrence (EST" in out[1][3]] == [
        True, True]


def test_preview_of_other_schedules_and_hash() -> None:
    out, zone, reading = schedules.preview(
        Schedule(kind=ScheduleKind.INTERVAL, interval_ms=60_000), ms("2026-01-01T00:00:30"), 2)
    assert [at for at, *_ in out] == [ms("2026-01-01T00:01:00"), ms("2026-01-01T00:02:00")]
    assert (zone, reading) == ("UTC", "")
    once = Schedule(kind=ScheduleKind.ONCE, at_ms=ms("2026-01-02T00:00:00"))
    assert [at for at, *_ in schedules.preview(once, ms("2026-01-01T00:00:00"), 5)[0]] == [
        ms("2026-01-02T00:00:00")]
    hashed = cron("H 9 * * *")
    with pytest.raises(ScheduleError, match="uses H"):
        schedules.preview(hashed, ms("2026-01-01T00:00:00"), 1)
    out, _, _ = schedules.preview(hashed, ms("2026-01-01T00:00:00"), 1, hash_id="acme/etl")
    assert out[0][0] == next_fire_after(hashed, ms("2026-01-01T00:00:00"), hash_id="acme/etl")
    out, _, reading = schedules.preview(dialect_cron("0 */10 * * * *", "seconds_first"),
                                        ms("2026-01-01T00:00:00"), 1)
    assert reading == ("0 */10 * * * * (seconds first (Quartz, Spring, Dkron): second minute "
                       "hour day-of-month month day-of-week)")


# --- DST policies (issue 9): real transitions in five zones -----------------------------------

BERLIN, LORD_HOWE, SANTIAGO, TOKYO = (
    "Europe/Berlin", "Australia/Lord_Howe", "America/Santiago", "Asia/Tokyo")


def dst_cron(expression: str, timezone: str, nonexistent: str = "", ambiguous: str = "") -> Schedule:
    return Schedule(kind=ScheduleKind.CRON, expression=expression, timezone=timezone,
                    dst_nonexistent=nonexistent, dst_ambiguous=ambiguous)


def local_fires(schedule: Schedule, after: str, n: int) -> list[str]:
    zone = schedules._zone(schedule.timezone, "tz")
    return [datetime.fromtimestamp(t / 1000, UTC).astimezone(zone).isoformat()
            for t in fires(schedule, after, n)]


# (expression, zone, after (UTC), the local fires for SHIFT_FORWARD, for SKIP)
GAPS = [
    ("30 2 * * *", BERLIN, "2026-03-28T00:00:00",
     ["2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"],
     ["2026-03-28T02:30:00+01:00", "2026-03-30T02:30:00+02:00", "2026-03-31T02:30:00+02:00"]),
    ("30 2 * * *", NY, "2026-03-07T00:00:00",
     ["2026-03-07T02:30:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"],
     ["2026-03-07T02:30:00-05:00", "2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00"]),
    # A 30-minute shift: 02:00 -> 02:30 on the first Sunday of October.
    ("15 2 * * *", LORD_HOWE, "2026-10-02T00:00:00",
     ["2026-10-03T02:15:00+10:30", "2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"],
     ["2026-10-03T02:15:00+10:30", "2026-10-05T02:15:00+11:00", "2026-10-06T02:15:00+11:00"]),
    # Midnight does not exist on the first Sunday of September.
    ("0 0 * * *", SANTIAGO, "2026-09-04T12:00:00",
     ["2026-09-05T00:00:00-04:00", "2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00"],
     ["2026-09-05T00:00:00-04:00", "2026-09-07T00:00:00-03:00", "2026-09-08T00:00:00-03:00"]),
]


@pytest.mark.parametrize(("expression", "zone", "after", "shifted", "skipped"), GAPS,
                         ids=[g[1] for g in GAPS])
def test_nonexistent_local_times(expression, zone, after, shifted, skipped) -> None:
    assert local_fires(dst_cron(expression, zone), after, 3) == shifted
    assert local_fires(dst_cron(expression, zone, "shift_forward"), after, 3) == shifted
    assert local_fires(dst_cron(expression, zone, "skip"), after, 3) == skipped


# (expression, zone, after (UTC), the local fires for BOTH, FIRST, LAST)
OVERLAPS = [
    ("30 2 * * *", BERLIN, "2026-10-24T12:00:00",
     ["2026-10-25T02:30:00+02:00", "2026-10-25T02:30:00+01:00", "2026-10-26T02:30:00+01:00"],
     ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00", "2026-10-27T02:30:00+01:00"],
     ["2026-10-25T02:30:00+01:00", "2026-10-26T02:30:00+01:00", "2026-10-27T02:30:00+01:00"]),
    ("*/30 1 * * *", NY, "2026-11-01T04:50:00",
     ["2026-11-01T01:00:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:00:00-05:00"],
     ["2026-11-01T01:00:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-02T01:00:00-05:00"],
     ["2026-11-01T01:00:00-05:00", "2026-11-01T01:30:00-05:00", "2026-11-02T01:00:00-05:00"]),
    # 02:00 -> 01:30 on the first Sunday of April: only 01:30-02:00 repeats.
    ("*/15 1 * * *", LORD_HOWE, "2026-04-04T14:10:00",
     ["2026-04-05T01:15:00+11:00", "2026-04-05T01:30:00+11:00", "2026-04-05T01:45:00+11:00",
      "2026-04-05T01:30:00+10:30", "2026-04-05T01:45:00+10:30"],
     ["2026-04-05T01:15:00+11:00", "2026-04-05T01:30:00+11:00", "2026-04-05T01:45:00+11:00",
      "2026-04-06T01:00:00+10:30", "2026-04-06T01:15:00+10:30"],
     ["2026-04-05T01:15:00+11:00", "2026-04-05T01:30:00+10:30", "2026-04-05T01:45:00+10:30",
      "2026-04-06T01:00:00+10:30", "2026-04-06T01:15:00+10:30"]),
    # 00:00 -> 23:00 on the first Sunday of April: 23:30 on Saturday occurs twice.
    ("30 23 * * *", SANTIAGO, "2026-04-04T12:00:00",
     ["2026-04-04T23:30:00-03:00", "2026-04-04T23:30:00-04:00", "2026-04-05T23:30:00-04:00"],
     ["2026-04-04T23:30:00-03:00", "2026-04-05T23:30:00-04:00", "2026-04-06T23:30:00-04:00"],
     ["2026-04-04T23:30:00-04:00", "2026-04-05T23:30:00-04:00", "2026-04-06T23:30:00-04:00"]),
]


@pytest.mark.parametrize(("expression", "zone", "after", "both", "first", "last"), OVERLAPS,
                         ids=[o[1] for o in OVERLAPS])
def test_ambiguous_local_times(expression, zone, after, both, first, last) -> None:
    n = len(both)
    assert local_fires(dst_cron(expression, zone), after, n) == both
    assert local_fires(dst_cron(expression, zone, ambiguous="both"), after, n) == both
    assert local_fires(dst_cron(expression, zone, ambiguous="first"), after, n) == first
    assert local_fires(dst_cron(expression, zone, ambiguous="last"), after, n) == last


def test_a_zone_without_dst_is_unaffected_by_the_policies() -> None:
    plain = fires(dst_cron("30 2 * * *", TOKYO), "2026-03-28T00:00:00", 5)
    for nonexistent, ambiguous in (("skip", "first"), ("shift_forward", "last")):
        assert fires(dst_cron("30 2 * * *", TOKYO, nonexistent, ambiguous),
                     "2026-03-28T00:00:00", 5) == plain


def test_seconds_schedule_skips_a_whole_repeated_hour() -> None:
    s = Schedule(kind=ScheduleKind.CRON, expression="* * * * * */10", timezone=NY,
                 dialect="seconds_last", dst_ambiguous="first")
    # 01:59:50 EDT, then the repeated hour (EST) is left out: 02:00:00 EST.
    assert next_fire_after(s, ms("2026-11-01T05:59:45")) == ms("2026-11-01T05:59:50")
    assert next_fire_after(s, ms("2026-11-01T05:59:50")) == ms("2026-11-01T07:00:00")


def test_dst_policy_fields_are_validated() -> None:
    with pytest.raises(ScheduleError, match=r"spec\.schedule\.interval: a DST policy "
                                            r"\(dst_ambiguous\) applies to cron schedules only"):
        check_schedule(Schedule(kind=ScheduleKind.INTERVAL, interval_ms=60_000,
                                dst_ambiguous="first"), min_interval_ms=100)
    with pytest.raises(ScheduleError, match=r"spec\.schedule\.cron\.dst_nonexistent: must be "
                                            r"one of skip, shift_forward"):
        check_schedule(dst_cron("0 2 * * *", BERLIN, "later"), min_interval_ms=100)
    check_schedule(dst_cron("0 2 * * *", BERLIN, "skip", "last"), min_interval_ms=100)


DST_ZONES = [BERLIN, NY, LORD_HOWE, SANTIAGO, TOKYO]


@settings(max_examples=150, deadline=None)
@given(
    expression=st.sampled_from(["30 2 * * *", "*/15 0-3 * * *", "0 0 * * *", "30 23 * * *",
                                "45 1 * * 0", "15,45 * * * *"]),
    zone=st.sampled_from(DST_ZONES),
    nonexistent=st.sampled_from(["", "skip", "shift_forward"]),
    ambiguous=st.sampled_from(["", "first", "last", "both"]),
    start=st.sampled_from(["2026-03-06T00:00:00", "2026-03-27T00:00:00", "2026-04-03T00:00:00",
                           "2026-09-04T00:00:00", "2026-10-02T00:00:00", "2026-10-23T00:00:00",
                           "2026-10-30T00:00:00"]),
)
def test_dst_policies_property(expression, zone, nonexistent, ambiguous, start) -> None:
    """With any policy: fires strictly increase; SKIP leaves no shifted fire, FIRST/LAST no
    local time twice; every fire a policy keeps is one the default schedule has, and the
    default's other fires are exactly the ones the policy leaves out."""
    policed = dst_cron(expression, zone, nonexistent, ambiguous)
    default = dst_cron(expression, zone)
    got = fires(policed, start, 12)
    assert got == sorted(set(got))
    template = schedules._parse(expression, None, "e")
    tz = schedules._zone(zone, "tz")
    kinds = [schedules._dst_kind(t, tz, template.expanded) for t in got]
    if nonexistent == "skip":
        assert all(kind != "shifted" for kind, _ in kinds)
    if ambiguous in ("first", "last"):
        locals_ = [datetime.fromtimestamp(t / 1000, UTC).astimezone(tz).replace(tzinfo=None)
                   for t in got]
        assert len(set(locals_)) == len(locals_)
    base = fires(default, start, 40)
    assert set(got) <= set(base) or got[-1] > base[-1]
    kept = [t for t in base if t <= got[-1]]
    left_out = [t for t in kept if t not in got]
    assert all(schedules._dst_leaves_out(t, tz, template.expanded, nonexistent, ambiguous)
               for t in left_out)


def test_uses_hash_tells_h_tokens_from_day_names():
    # The trigger keys its per-schedule cache by job only where H makes slots per job.
    assert schedules.uses_hash(cron("H * * * *"))
    assert schedules.uses_hash(cron("0 H(0-5) * * *"))
    assert not schedules.uses_hash(cron("0 0 * * THU"))
    assert not schedules.uses_hash(Schedule(kind=ScheduleKind.INTERVAL, interval_ms=1000))
    # Without H, every job's gap is the schedule's: the shared ("") evaluation is right.
    assert schedules.shortest_gap_ms(cron("30 4 * * *")) == 86_400_000


# --- seconds in a DST gap, readings, the day rule, what other schedulers write ---------------

PACIFIC = "US/Pacific"


@pytest.mark.parametrize(("expression", "dialect"), [("33 33 2 * * *", "seconds_first"),
                                                     ("33 2 * * * 33", "seconds_last")])
def test_a_seconds_fire_shifted_out_of_a_gap_fires_at_the_first_instant_after_it(
        expression, dialect) -> None:
    # 2026-03-08 02:00 PST -> 03:00 PDT: 02:33:33 does not exist. croniter's answer is
    # 03:00:33 (it keeps the seconds); the first instant after the gap is 03:00:00.
    s = dialect_cron(expression, dialect, PACIFIC)
    assert local_fires(s, "2026-03-07T12:00:00", 3) == [
        "2026-03-08T03:00:00-07:00", "2026-03-09T02:33:33-07:00", "2026-03-10T02:33:33-07:00"]
    # From the shifted fire (or just after it) the next is the next day's: no second fire.
    assert next_fire_after(s, ms("2026-03-08T03:00:00-07:00")) == ms("2026-03-09T02:33:33-07:00")
    assert next_fire_after(s, ms("2026-03-08T03:00:10-07:00")) == ms("2026-03-09T02:33:33-07:00")
    skip = replace(s, dst_nonexistent="skip")
    assert local_fires(skip, "2026-03-07T12:00:00", 2) == [
        "2026-03-09T02:33:33-07:00", "2026-03-10T02:33:33-07:00"]
    out, _, _ = schedules.preview(s, ms("2026-03-07T12:00:00"), 1)
    assert out[0][2] == "2026-03-08T03:00:00-07:00"
    assert out[0][3] == ("the local time it is meant for does not exist on 2026-03-08 (DST "
                         "starts): fires at the first instant after the gap, 03:00:00 PDT")


def test_seconds_in_a_half_hour_gap_and_in_a_repeated_hour() -> None:
    # Australia/Lord_Howe 02:00 -> 02:30: 02:15:33 fires at 02:30:00.
    s = dialect_cron("33 15 2 * * *", "seconds_first", LORD_HOWE)
    assert local_fires(s, "2026-10-02T00:00:00", 2) == [
        "2026-10-03T02:15:33+10:30", "2026-10-04T02:30:00+11:00"]
    # A repeated local time keeps its seconds, and the note shows them.
    out, _, _ = schedules.preview(dialect_cron("33 30 1 * * *", "seconds_first", NY),
                                  ms("2026-11-01T00:00:00"), 2)
    assert [note.split(" occurs")[0] for *_, note in out] == ["01:30:33", "01:30:33"]


def test_the_preview_shows_a_seconds_first_expression_in_its_own_order() -> None:
    out, _, reading = schedules.preview(dialect_cron("0 */10 * * * *", "seconds_first"),
                                        ms("2026-01-01T00:00:00"), 2)
    assert reading == ("0 */10 * * * * (seconds first (Quartz, Spring, Dkron): second minute "
                       "hour day-of-month month day-of-week)")
    assert [utc for _, utc, *_ in out] == ["2026-01-01T00:10:00Z", "2026-01-01T00:20:00Z"]
    _, _, reading = schedules.preview(dialect_cron("0  */10 * * *  5", "seconds_last"), 0, 1)
    assert reading == ("0 */10 * * * 5 (seconds last (croniter): minute hour day-of-month "
                       "month day-of-week second)")
    # A stored 6-field job without a dialect is read seconds last, and says so.
    assert schedules.preview(cron("0 0 * * * 30"), 0, 1)[2].endswith(
        "(seconds last (croniter): minute hour day-of-month month day-of-week second)")


def test_day_of_month_and_day_of_week_restricted_means_either_even_for_a_step() -> None:
    # croniter's rule: `*/2` restricts the day of month (odd days), so `0 0 */2 * 1` is odd
    # days OR Mondays. Vixie cron and cronie read a field starting with `*` as unrestricted
    # and would fire on odd Mondays only (2026-01-05, 2026-01-19).
    assert local_fires(cron("0 0 */2 * 1"), "2026-01-02T00:00:00", 5) == [
        "2026-01-03T00:00:00+00:00", "2026-01-05T00:00:00+00:00", "2026-01-07T00:00:00+00:00",
        "2026-01-09T00:00:00+00:00", "2026-01-11T00:00:00+00:00"]
    assert ms("2026-01-12T00:00:00") in fires(cron("0 0 */2 * 1"), "2026-01-02T00:00:00", 8)
    # `*` (or `?`) leaves a field unrestricted: day of week alone.
    assert fires(cron("0 0 * * 1"), "2026-01-02T00:00:00", 2) == fires(
        cron("0 0 ? * 1"), "2026-01-02T00:00:00", 2) == [
        ms("2026-01-05T00:00:00"), ms("2026-01-12T00:00:00")]


def refused(expression: str, dialect: str = "", timezone: str = "") -> ScheduleError:
    with pytest.raises(ScheduleError) as e:
        check_schedule(dialect_cron(expression, dialect, timezone), min_interval_ms=100)
    assert e.value.field == "spec.schedule.cron.expression"
    return e.value


def test_every_is_refused_as_cron_with_the_interval_spelling() -> None:
    rule = refused("@every 1h30m").rule
    assert rule == ("'@every 1h30m' is an interval (robfig/cron, Dkron), not a cron expression: "
                    "send an interval schedule, interval_ms 5400000 (spec files and the CLI's "
                    "--cron take @every and send it as one)")
    assert "interval_ms 1500" in refused("@every 1.5s").rule
    assert "interval_ms 90000" in refused("@EVERY 1m30s").rule
    # Not a Go duration: the rule still names the interval kind.
    assert "not a duration" in refused("@every soon").rule
    assert "interval schedule" in refused("@every soon").rule


@pytest.mark.parametrize("prefix", ["CRON_TZ", "TZ"])
def test_a_timezone_prefix_is_refused_with_the_timezone_field(prefix: str) -> None:
    # Six words: it used to be refused as "needs a dialect".
    e = refused(f"{prefix}=Europe/Berlin 0 0 * * *")
    assert e.rule == (f"the {prefix}=Europe/Berlin prefix (robfig/cron, Kubernetes CronJob) is "
                      "not part of a gnomon expression: set spec.schedule.cron.timezone to "
                      "'Europe/Berlin' and the expression to '0 0 * * *' (spec files and the "
                      "CLI's --cron take the prefix)")
    assert "set spec.schedule.cron.timezone" in refused(
        f"{prefix}=Europe/Berlin 0 0 0 * * *", "seconds_first").rule


@pytest.mark.parametrize(
    ("expression", "dialect", "part"),
    [
        ("0 0 LW * *", "", "day-of-month 'LW' (Quartz: the last weekday, Monday to Friday, of "
                           "the month) is not supported: nearest: 'L', the last day"),
        ("0 0 L-2 * *", "", "day-of-month 'L-2' (Quartz: 2 days before the last day of the "
                            "month) is not supported: nearest: 'L', the last day"),
        ("0 0 0 L-3W * ?", "seconds_first", "day-of-month 'L-3W' (Quartz: the weekday nearest "
                                            "3 days before the last day of the month)"),
        ("0 0 5L * *", "", "day-of-month '5L' is not a day-of-month form (Quartz's 5L is a "
                           "day-of-week: the last of weekday 5 in the month)"),
        ("0 0 * * L", "", "day-of-week 'L' alone (Quartz: 7, Saturday) is not supported: "
                          "write 'sat'"),
        ("0 0 * * 5L", "", "day-of-week '5L' (Quartz, Spring: the last of weekday 5 in the "
                           "month) is written 'L5' here (the last Friday; weekdays are 0 or 7 "
                           "Sunday to 6 Saturday, Quartz numbers 1 Sunday to 7 Saturday: its "
                           "5L, the last Thursday, is 'L4')"),
        ("0 0 0 ? * FRIL", "seconds_first", "day-of-week 'FRIL' (Quartz, Spring: the last "
                                            "Friday of the month) is written 'L5' here"),
        ("0 0 * * 5#L", "", "day-of-week '5#L' is not a form of '#' (the nth weekday, 1 to 5): "
                            "the last one is 'L5'"),
        ("0 0 * * mon,5L", "", "day-of-week '5L'"),
    ],
)
def test_quartz_last_day_forms_are_refused_naming_the_field_and_a_spelling(
        expression: str, dialect: str, part: str) -> None:
    assert part in refused(expression, dialect).rule


def test_quartz_forms_croniter_reads_as_quartz_does() -> None:
    # `#` (the nth weekday), `W` (the nearest weekday, not crossing the month), `L` (the
    # last day of the month), `?`.
    quartz = "seconds_first"
    assert local_fires(dialect_cron("0 0 12 ? * FRI#3", quartz), "2026-01-01T00:00:00", 2) == [
        "2026-01-16T12:00:00+00:00", "2026-02-20T12:00:00+00:00"]
    assert local_fires(cron("0 0 1W * *"), "2026-07-15T00:00:00", 1) == [
        "2026-08-03T00:00:00+00:00"]  # the 1st is a Saturday: Monday the 3rd
    assert local_fires(cron("0 0 L * *"), "2026-02-01T00:00:00", 1) == [
        "2026-02-28T00:00:00+00:00"]
    assert local_fires(cron("0 0 * * L5"), "2026-01-01T00:00:00", 1) == [
        "2026-01-30T00:00:00+00:00"]
