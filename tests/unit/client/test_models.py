"""Model conveniences: defaults, normalisation, helpers."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from gnomon.client import (
    Attempt,
    AttemptOutcome,
    ClusterLimits,
    CronSchedule,
    DeadLetter,
    IntervalSchedule,
    InvalidArgument,
    JobSpec,
    MisfirePolicy,
    OnceSchedule,
    RetryPolicy,
    Run,
    RunState,
    TaskInstance,
    TaskRef,
    TaskSpec,
    TaskState,
    json_payload,
    task,
)


def test_single_task_job():
    spec = JobSpec.single(
        "nightly",
        CronSchedule("0 3 * * *", "Europe/Berlin"),
        queue="reports",
        payload={"b": 1, "a": 2},
    )
    assert spec.tenant == "default"
    assert spec.misfire_policy is MisfirePolicy.RUN_ALL
    (only,) = spec.tasks
    assert only.name == "main"
    assert only.queue == "reports"
    assert only.payload == b'{"a":2,"b":1}'
    assert only.retry == RetryPolicy()


def test_specs_are_frozen_hashable_and_normalised():
    t = TaskSpec("a", depends_on=["x", "y"], queue="")  # type: ignore[arg-type]
    assert t.depends_on == ("x", "y") and t.queue == "default"
    spec = JobSpec("j", IntervalSchedule(1000), [t], tenant="")  # type: ignore[arg-type]
    assert spec.tasks == (t,) and spec.tenant == "default"
    assert hash(spec) == hash(JobSpec("j", IntervalSchedule(1000), (t,)))
    with pytest.raises(AttributeError):
        spec.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        TaskSpec("a", depends_on="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        TaskSpec("a", payload=42)  # type: ignore[arg-type]


def test_schedule_helpers():
    assert IntervalSchedule.every(timedelta(minutes=5)) == IntervalSchedule(300_000)
    assert IntervalSchedule.every(1.5, anchor_ms=7) == IntervalSchedule(1500, 7)
    when = datetime(2024, 1, 1, tzinfo=UTC)
    assert OnceSchedule.at(when) == OnceSchedule(1_704_067_200_000)
    with pytest.raises(ValueError):
        OnceSchedule.at(datetime(2024, 1, 1))
    assert CronSchedule("@daily", "").timezone == "UTC"


def test_json_payload_is_canonical():
    assert json_payload({"b": [1, 2], "a": "é"}) == '{"a":"é","b":[1,2]}'.encode()
    assert json.loads(json_payload({"x": None})) == {"x": None}


def test_run_helpers():
    run = Run(
        "j1@0",
        "j1",
        state=RunState.SUCCEEDED,
        tasks=[TaskInstance("a", state=TaskState.SUCCEEDED)],  # type: ignore[arg-type]
    )
    assert run.done and run.task("a").state.is_terminal
    with pytest.raises(KeyError):
        run.task("b")
    assert not RunState.RUNNING.is_terminal
    assert DeadLetter("j1@0", "a").ref == TaskRef("j1@0", "a") == ("j1@0", "a")


def test_task_definition_spec():
    @task(name="load", queue="etl")
    def load(ctx):
        return None

    spec = load.spec(depends_on=["extract"], payload={"k": 1}, timeout_ms=500)
    assert spec == TaskSpec(
        "load", queue="etl", depends_on=("extract",), payload=b'{"k":1}', timeout_ms=500
    )


def test_attempt_records():
    first = Attempt(1, fencing_token=4, outcome="failed", exit_code=3, output_tail="boom\n")
    second = Attempt(2, fencing_token=9, outcome=AttemptOutcome.EXPIRED, started_ms=1000)
    ti = TaskInstance("a", attempts=[first, second])  # type: ignore[arg-type]
    assert ti.attempts == (first, second) and hash(ti.attempts)
    assert first.outcome is AttemptOutcome.FAILED
    assert ti.last_attempt is second
    # The latest output there is, even if the last attempt (an expiry) has none.
    assert ti.output_tail == "boom\n"
    assert TaskInstance("b").last_attempt is None and TaskInstance("b").output_tail == ""
    assert second.started == datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert second.finished is None


def test_cluster_limits_items_are_in_declaration_order():
    limits = ClusterLimits(max_queue_circuits_per_tenant=5)
    assert limits.items()[-1] == ("max_queue_circuits_per_tenant", 5)
    assert [name for name, _ in limits.items()][0] == "dedupe_capacity"
    assert all(value is None for _, value in limits.items()[:-1])


def test_schedules_take_and_give_aware_datetimes_and_timedeltas():
    berlin = timezone(timedelta(hours=1))
    when = datetime(2024, 1, 1, 1, 0, tzinfo=berlin)
    once = OnceSchedule(at=when)
    assert once == OnceSchedule(1_704_067_200_000) == OnceSchedule.at(when)
    assert once.when == datetime(2024, 1, 1, tzinfo=UTC) and once.when.tzinfo is UTC
    every = IntervalSchedule(
        every=timedelta(minutes=5), anchor=datetime(1970, 1, 1, 0, 0, 7, tzinfo=UTC)
    )
    assert every == IntervalSchedule(300_000, 7_000)
    assert every.interval == timedelta(minutes=5) and every.anchor.timestamp() == 7
    assert IntervalSchedule(1000).anchor == datetime(1970, 1, 1, tzinfo=UTC)


def test_specs_take_timedeltas_beside_the_ms_fields():
    retry = RetryPolicy(3, initial_backoff=timedelta(seconds=1), max_backoff=timedelta(minutes=1))
    assert retry == RetryPolicy(3, 1000, 60_000)
    assert (retry.initial_backoff, retry.max_backoff) == (
        timedelta(seconds=1),
        timedelta(minutes=1),
    )
    t = TaskSpec("a", timeout=timedelta(milliseconds=1500))
    assert t == TaskSpec("a", timeout_ms=1500) and t.timeout == timedelta(seconds=1.5)
    spec = JobSpec.single(
        "j",
        IntervalSchedule(1000),
        timeout=timedelta(seconds=2),
        misfire_grace=timedelta(seconds=3),
    )
    assert spec.tasks[0].timeout_ms == 2000 and spec.misfire_grace_ms == 3000
    assert spec.misfire_grace == timedelta(seconds=3)
    assert replace(spec, misfire_grace_ms=5).misfire_grace_ms == 5


def test_naive_datetimes_are_refused_naming_the_parameter():
    with pytest.raises(InvalidArgument, match=r"OnceSchedule\(at=...\): .* naive datetime"):
        OnceSchedule(at=datetime(2024, 1, 1))
    with pytest.raises(InvalidArgument, match=r"IntervalSchedule\(anchor=...\)"):
        IntervalSchedule(every=timedelta(seconds=1), anchor=datetime(2024, 1, 1))
    with pytest.raises(TypeError, match="at_ms or at, not both"):
        OnceSchedule(5, at=datetime(2024, 1, 1, tzinfo=UTC))
    with pytest.raises(TypeError, match=r"TaskSpec\(timeout=...\): expected a timedelta"):
        TaskSpec("a", timeout=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="give interval_ms or every"):
        IntervalSchedule()


def test_records_read_as_aware_datetimes_and_timedeltas():
    run = Run("j1@1000", "j1", scheduled_for_ms=1000, created_ms=1500)
    assert run.scheduled_for == datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert run.created is not None and run.created.tzinfo is UTC and run.finished is None
    ti = TaskInstance("a", ready_ms=1, retry_at_ms=0, lease_ttl_ms=30_000)
    assert ti.ready is not None and ti.retry_at is None and ti.lease_ttl == timedelta(seconds=30)
    assert Attempt(1, duration_ms=250).duration == timedelta(milliseconds=250)
    assert DeadLetter("j1@0", "a", dead_ms=2000).dead == datetime(1970, 1, 1, 0, 0, 2, tzinfo=UTC)
    assert ClusterLimits(dedupe_max_age_ms=60_000).dedupe_max_age == timedelta(minutes=1)
    assert ClusterLimits().dedupe_max_age is None
