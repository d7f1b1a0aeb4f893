"""Model conveniences: defaults, normalisation, helpers."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from gnomon.client import (
    Attempt,
    AttemptOutcome,
    ClusterLimits,
    CronSchedule,
    DeadLetter,
    IntervalSchedule,
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
    limits = ClusterLimits(max_attempt_records=5)
    assert limits.items()[-1] == ("max_attempt_records", 5)
    assert [name for name, _ in limits.items()][0] == "dedupe_capacity"
    assert all(value is None for _, value in limits.items()[:-1])
