"""Spec files and flags -> JobSpec: the schema, its errors, and the JSON form reading back."""

from __future__ import annotations

import json

import pytest

from gnomon.client import (
    CronSchedule,
    IntervalSchedule,
    JobSpec,
    MisfirePolicy,
    OnceSchedule,
    RetryPolicy,
    TaskSpec,
)
from gnomon.client.cli.spec import (
    UsageError,
    bytes_to_data,
    load_spec_file,
    parse_duration_ms,
    parse_instant_ms,
    spec_from_data,
    spec_to_data,
)

DAG_YAML = """
name: etl
tenant: analytics
schedule:
  cron: "30 3 * * *"
  timezone: Europe/Berlin
priority: 5
misfire_policy: RUN_LATEST
misfire_grace_ms: 2m
defaults:
  queue: etl
  timeout_ms: 10m
  retry: {max_attempts: 5, initial_backoff_ms: 1s}
tasks:
  - name: extract
    payload: {table: users}
  - name: transform-a
    depends_on: extract
  - name: transform-b
    depends_on: [extract]
    queue: heavy
  - name: load
    depends_on: [transform-a, transform-b]
    retry: {max_attempts: 9}
"""


def test_yaml_dag_with_defaults(tmp_path):
    path = tmp_path / "etl.yaml"
    path.write_text(DAG_YAML)
    spec = load_spec_file(str(path))
    assert spec.name == "etl" and spec.tenant == "analytics" and spec.priority == 5
    assert spec.schedule == CronSchedule("30 3 * * *", "Europe/Berlin")
    assert spec.misfire_policy == MisfirePolicy.RUN_LATEST
    assert spec.misfire_grace_ms == 120_000
    by_name = {t.name: t for t in spec.tasks}
    assert [t.name for t in spec.tasks] == ["extract", "transform-a", "transform-b", "load"]
    assert by_name["extract"].payload == b'{"table":"users"}'
    assert by_name["transform-a"].depends_on == ("extract",)
    assert by_name["transform-b"].queue == "heavy"
    assert by_name["load"].queue == "etl"
    assert by_name["load"].depends_on == ("transform-a", "transform-b")
    assert by_name["extract"].timeout_ms == 600_000
    assert by_name["extract"].retry == RetryPolicy(max_attempts=5, initial_backoff_ms=1000)
    # A task's retry is merged key by key over the defaults' retry.
    assert by_name["load"].retry == RetryPolicy(max_attempts=9, initial_backoff_ms=1000)


def test_json_file_and_single_task_shorthand(tmp_path):
    path = tmp_path / "once.json"
    path.write_text(
        json.dumps(
            {
                "name": "once",
                "schedule": {"at_ms": "2026-11-30T10:41:02Z"},
                "task": {"queue": "shell", "payload": {"argv": ["true"]}},
            }
        )
    )
    spec = load_spec_file(str(path))
    assert spec.schedule == OnceSchedule(at_ms=1796035262000)
    assert spec.tasks == (TaskSpec(name="main", queue="shell", payload=b'{"argv":["true"]}'),)


def test_interval_schedule_with_anchor():
    spec = spec_from_data({"name": "i", "schedule": {"interval_ms": "1m30s", "anchor_ms": 1000}})
    assert spec.schedule == IntervalSchedule(interval_ms=90_000, anchor_ms=1000)
    assert spec.tasks == (TaskSpec(name="main"),)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"schedule": {"cron": "* * * * *"}}, "spec.name: required"),
        ({"name": "x"}, "spec.schedule: required"),
        (
            {
                "name": "x",
                "schedule": {"cron": "* * * * *"},
                "tasks": [{"name": "a", "dependson": []}],
            },
            "spec.tasks[0].dependson: unknown key (did you mean 'depends_on'?)",
        ),
        (
            {"name": "x", "schedule": {"cron": "* * * * *", "interval_ms": 5}},
            "spec.schedule: set exactly one of cron, interval_ms, at_ms (found cron, interval_ms)",
        ),
        (
            {"name": "x", "schedule": {"interval_ms": 5000, "timezone": "UTC"}},
            "spec.schedule.timezone: does not apply to an interval schedule",
        ),
        (
            {"name": "x", "schedule": {"at_ms": "2026-11-30 10:41:02"}},
            "spec.schedule.at_ms: 2026-11-30 10:41:02 has no timezone: add Z or an offset",
        ),
        (
            {"name": "x", "schedule": {"cron": "* * * * *"}, "tasks": []},
            "spec.tasks: expected a non-empty list of tasks",
        ),
        (
            {"name": "x", "schedule": {"cron": "* * * * *"}, "task": {}, "tasks": [{"name": "a"}]},
            "spec: set tasks (a DAG) or task (a single task), not both",
        ),
        (
            {"name": "x", "schedule": {"cron": "* * * * *"}, "tasks": [{"queue": "q"}]},
            "spec.tasks[0].name: required",
        ),
        (
            {"name": "x", "schedule": {"cron": "* * * * *"}, "task": {"timeout_ms": "soon"}},
            "spec.task.timeout_ms: 'soon' is not a duration",
        ),
        (
            {
                "name": "x",
                "schedule": {"cron": "* * * * *"},
                "task": {"retry": {"max_attempts": "x"}},
            },
            "spec.task.retry.max_attempts: expected an integer, got the string 'x'",
        ),
        (
            {"name": "x", "schedule": {"cron": "* * * * *"}, "misfire_policy": "sometimes"},
            "spec.misfire_policy: 'sometimes' is not one of run_all, run_latest, skip",
        ),
        (
            {"name": "x", "schedule": {"cron": "* * * * *"}, "paused": "yes please"},
            "spec.paused: expected true or false",
        ),
        (
            {
                "name": "x",
                "schedule": {"cron": "* * * * *"},
                "task": {"payload": "a", "payload_base64": "YQ=="},
            },
            "spec.task: set payload or payload_base64, not both",
        ),
    ],
)
def test_bad_specs_name_the_key(data, message):
    with pytest.raises(UsageError) as err:
        spec_from_data(data)
    assert str(err.value).startswith(message), str(err.value)


def test_payload_forms():
    def payload(task):
        return (
            spec_from_data({"name": "x", "schedule": {"cron": "@daily"}, "task": task})
            .tasks[0]
            .payload
        )

    assert payload({"payload": "raw text"}) == b"raw text"
    assert payload({"payload": [1, 2]}) == b"[1,2]"
    assert payload({"payload": {"b": 1, "a": 2}}) == b'{"a":2,"b":1}'
    assert payload({"payload_base64": "AAEC"}) == b"\x00\x01\x02"
    assert payload({"payload": None}) == b""


def test_file_errors_are_one_line_and_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nschedule: {cron: [\n")
    with pytest.raises(UsageError) as err:
        load_spec_file(str(bad))
    assert str(err.value).startswith(f"{bad}: invalid YAML: ")
    assert "\n" not in str(err.value)
    two = tmp_path / "two.yaml"
    two.write_text("name: a\n---\nname: b\n")
    with pytest.raises(UsageError, match="expected one job spec, found 2 documents"):
        load_spec_file(str(two))
    with pytest.raises(UsageError, match="cannot read"):
        load_spec_file(str(tmp_path / "missing.yaml"))
    unknown = tmp_path / "unknown.json"
    unknown.write_text('{"name": "x", "schedule": {"cron": "@daily"}, "tsks": []}')
    with pytest.raises(
        UsageError, match=r"unknown\.json: spec\.tsks: unknown key \(did you mean 'tasks'\?\)"
    ):
        load_spec_file(str(unknown))


def test_stdin_spec():
    spec = load_spec_file("-", stdin_text="name: s\nschedule: {interval_ms: 5s}\n")
    assert spec.schedule == IntervalSchedule(5000)


def test_cyclic_dag_is_left_to_the_server():
    # The cluster is the authority on DAG rules (and names the cycle); the file only needs
    # to be well-formed.
    spec = spec_from_data(
        {
            "name": "cyclic",
            "schedule": {"cron": "@daily"},
            "tasks": [{"name": "a", "depends_on": ["b"]}, {"name": "b", "depends_on": ["a"]}],
        }
    )
    assert [t.depends_on for t in spec.tasks] == [("b",), ("a",)]


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        (250, 250),
        ("250", 250),
        ("500ms", 500),
        ("30s", 30_000),
        ("1m30s", 90_000),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("1.5s", 1500),
    ],
)
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("bad", ["", "5 minutes", "s", "-5", -5, 1.5, True])
def test_bad_durations(bad):
    with pytest.raises(UsageError):
        parse_duration_ms(bad, "x")


def test_instants():
    now = 1_000_000
    assert parse_instant_ms("now", now_ms=now) == now
    assert parse_instant_ms("+10s", now_ms=now) == now + 10_000
    assert parse_instant_ms("2026-11-30T10:41:02Z") == 1796035262000
    assert parse_instant_ms("2026-11-30 11:41:02+01:00") == 1796035262000
    assert parse_instant_ms(1796035262000) == 1796035262000
    with pytest.raises(UsageError, match="is not a time"):
        parse_instant_ms("tomorrow", "--at")


RICH = JobSpec(
    name="rich",
    tenant="t1",
    schedule=IntervalSchedule(60_000, anchor_ms=5),
    tasks=(
        TaskSpec(
            "a",
            queue="q",
            payload=b'{"k":[1,2]}',
            timeout_ms=5,
            retry=RetryPolicy(3, 10, 20, 1.5, -1.0),
        ),
        TaskSpec("b", depends_on=("a",), payload=b"\xff\x00binary"),
        TaskSpec("c", depends_on=("a", "b"), payload=b'"a json string"'),
        TaskSpec("d", payload=b"plain text"),
    ),
    priority=-3,
    misfire_policy=MisfirePolicy.SKIP,
    misfire_grace_ms=7,
    paused=True,
)


def test_json_form_reads_back_as_the_same_spec():
    data = json.loads(json.dumps(spec_to_data(RICH)))
    assert spec_from_data(data) == RICH
    for spec in (
        JobSpec.single("c", CronSchedule("0 3 * * *", "Asia/Tokyo")),
        JobSpec.single("o", OnceSchedule(123)),
    ):
        assert spec_from_data(json.loads(json.dumps(spec_to_data(spec)))) == spec


def test_bytes_to_data():
    assert bytes_to_data("payload", b"") == {}
    assert bytes_to_data("payload", b'{"a":1}') == {"payload": {"a": 1}}
    assert bytes_to_data("payload", b"hi there") == {"payload": "hi there"}
    assert bytes_to_data("payload", b'"quoted"') == {"payload": '"quoted"'}
    assert bytes_to_data("result", b"\xff") == {"result_base64": "/w=="}


# --- what other schedulers write: @every and a timezone prefix --------------------------------


def schedule_of(schedule: dict) -> object:
    return spec_from_data({"name": "x", "schedule": schedule}).schedule


@pytest.mark.parametrize(("text", "ms"), [("@every 1h30m", 5_400_000), ("@every 90s", 90_000),
                                          ("@EVERY 1.5h", 5_400_000), ("@every  2h0m5s", 7_205_000),
                                          ("@every 2000000us", 2_000)])
def test_every_is_an_interval_schedule(text, ms):
    # robfig/cron and Dkron: every <Go duration>; gnomon's interval (anchored at the epoch).
    assert schedule_of({"cron": text}) == IntervalSchedule(interval_ms=ms)


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ({"cron": "@every 1500ms"}, "spec.schedule.cron: robfig/cron and Dkron round @every down "
         "to whole seconds (at least 1s): '@every 1500ms' is not every 1500 ms there; write "
         "whole seconds, or interval_ms: 1500ms"),
        ({"cron": "@every 0s"}, "spec.schedule.cron: '@every 0s': must be at least 1s"),
        ({"cron": "@every 500ms"}, "spec.schedule.cron: robfig/cron and Dkron round @every down"),
        ({"cron": "@every 90"}, "spec.schedule.cron: '@every 90': '90' is not a duration "
         "(Go's, as robfig/cron and Dkron read @every: 90s, 1h30m, 1.5h)"),
        ({"cron": "@every"}, "spec.schedule.cron: '@every': '' is not a duration"),
        ({"cron": "@every 1h", "timezone": "Europe/Berlin"},
         "spec.schedule.timezone: does not apply to @every (an interval schedule: it fires at "
         "UTC instants)"),
        ({"cron": "@every 1h", "dialect": "seconds_first"},
         "spec.schedule.dialect: does not apply to @every"),
        ({"cron": "CRON_TZ=Europe/Berlin @every 1h"},
         "spec.schedule.cron: a CRON_TZ= prefix does not apply to @every (an interval schedule: "
         "it fires at UTC instants); write '@every 1h'"),
    ],
)
def test_every_refusals_name_the_key_and_the_rule(schedule, message):
    with pytest.raises(UsageError) as err:
        schedule_of(schedule)
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize("prefix", ["CRON_TZ", "TZ"])
def test_a_timezone_prefix_is_the_schedules_timezone(prefix):
    # robfig/cron, Kubernetes CronJob: `CRON_TZ=<zone> <expression>`.
    berlin = CronSchedule("0 3 * * *", "Europe/Berlin")
    assert schedule_of({"cron": f"{prefix}=Europe/Berlin 0 3 * * *"}) == berlin
    assert schedule_of({"cron": f"{prefix}=Europe/Berlin  0 3 * * *",
                        "timezone": "Europe/Berlin"}) == berlin
    with pytest.raises(UsageError) as err:
        schedule_of({"cron": f"{prefix}=Europe/Berlin 0 3 * * *", "timezone": "UTC"})
    assert str(err.value) == (f"spec.schedule.timezone: 'UTC' contradicts the cron's "
                              f"{prefix}=Europe/Berlin prefix: give the timezone once")
    with pytest.raises(UsageError, match=f"spec.schedule.cron: no timezone after {prefix}="):
        schedule_of({"cron": f"{prefix}= 0 3 * * *"})
