"""The HTTP layer's own body rules, without a node: bytes fields as JSON (jsonbytes.py) and
PATCH's update mask (patch.py). The same rules against a real node: tests/http."""

from __future__ import annotations

import base64

import pytest
from google.protobuf import json_format

from gnomon.client._specs import json_payload
from gnomon.node.api.http.api import to_json
from gnomon.node.api.http.jsonbytes import answer_out, as_json, request_in
from gnomon.node.api.http.patch import check_body, merge, parse_mask
from gnomon.node.api.http.problems import Problem
from gnomon.v1 import api_pb2, types_pb2

CREATE = api_pb2.CreateJobRequest.DESCRIPTOR


def _parsed(body: dict) -> api_pb2.CreateJobRequest:
    return json_format.ParseDict(request_in(CREATE, body), api_pb2.CreateJobRequest())


def _task(**task) -> dict:
    return {"spec": {"name": "j", "tasks": [{"name": "main", **task}]}}


@pytest.mark.parametrize("value", [{"source": "orders", "n": [1, 2.5, None]}, [1, "a"], 7,
                                   True, {"ü": "ß"}])
def test_a_json_value_is_stored_as_the_clients_json_bytes_and_answered_as_json(value):
    msg = _parsed(_task(payload=value))
    assert msg.spec.tasks[0].payload == json_payload(value)  # the CLI's and client's bytes
    answered = to_json(msg)["spec"]["tasks"][0]
    assert answered["payload"] == value and "payloadBase64" not in answered


def test_null_or_no_payload_is_no_bytes_and_answered_as_null():
    assert _parsed(_task(payload=None)).spec.tasks[0].payload == b""
    assert to_json(_parsed(_task()))["spec"]["tasks"][0]["payload"] is None


@pytest.mark.parametrize("key", ["payload", "payloadBase64", "payload_base64"])
def test_a_base64_string_is_raw_bytes_as_before(key):
    raw = b"\x00\xffbin"
    for text in (base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()
                 .rstrip("=")):
        assert _parsed(_task(**{key: text})).spec.tasks[0].payload == raw


@pytest.mark.parametrize(("raw", "shown"), [
    (b"\x00\xff", None), (b'"a string"', None), (b"null", None), (b"not json", None),
    (b"NaN", None), (b'{"a":1,"a":2}', None), (b'{"a": 1}', {"a": 1})])
def test_answers_show_json_bytes_as_json_and_other_bytes_as_base64(raw, shown):
    task = to_json(api_pb2.CreateJobRequest(spec=types_pb2.JobSpec(
        tasks=[types_pb2.TaskSpec(name="t", payload=raw)])))["spec"]["tasks"][0]
    if shown is None:
        assert "payload" not in task and base64.b64decode(task["payloadBase64"]) == raw
        assert _parsed({"spec": {"tasks": [task]}}).spec.tasks[0].payload == raw
    else:
        assert task["payload"] == shown and "payloadBase64" not in task


def test_results_and_run_parameters_are_json_too():
    run = types_pb2.Run(run_id="j1@1", params=b'{"date":"2026-01-01"}',
                        tasks=[types_pb2.TaskInstance(task_name="t", result=b'{"rows":3}')])
    shown = answer_out(run.DESCRIPTOR, json_format.MessageToDict(run))
    assert shown["params"] == {"date": "2026-01-01"}
    assert shown["tasks"][0]["result"] == {"rows": 3}
    assert as_json(b"\x01") == (False, "AQ==")


@pytest.mark.parametrize(("task", "field", "rule"), [
    ({"payload": "orders"}, "spec.tasks[0].payload", "is not base64"),
    ({"payloadBase64": "***"}, "spec.tasks[0].payload_base64", "not base64"),
    ({"payloadBase64": {"a": 1}}, "spec.tasks[0].payload_base64", "must be a base64 string"),
    ({"payload": {"a": 1}, "payloadBase64": "AA=="}, "spec.tasks[0].payload_base64",
     "not both"),
    ({"payload": {"a": float("nan")}}, "spec.tasks[0].payload", "not representable as JSON"),
])
def test_a_malformed_payload_is_a_400_naming_the_field(task, field, rule):
    with pytest.raises(Problem) as err:
        _parsed(_task(**task))
    assert err.value.status == 400
    body = err.value.body()
    assert body["field"] == field and rule in body["rule"], body


SPEC = types_pb2.JobSpec(
    tenant="t", name="n", priority=3, overlap_policy=types_pb2.OVERLAP_POLICY_SKIP,
    max_active_runs=2, jitter_ms=500,
    schedule=types_pb2.Schedule(cron=types_pb2.CronSchedule(
        expression="0 3 * * *", timezone="Europe/Berlin",
        dst_ambiguous=types_pb2.DST_AMBIGUOUS_POLICY_LAST)),
    circuit_breaker=types_pb2.CircuitBreaker(window_runs=10, failure_percent=50),
    tasks=[types_pb2.TaskSpec(name="a", payload=b"{}")])


def test_a_mask_changes_the_fields_it_names_and_keeps_every_other():
    body = types_pb2.JobSpec(priority=7, schedule=types_pb2.Schedule(
        cron=types_pb2.CronSchedule(timezone="UTC")), tasks=[types_pb2.TaskSpec(name="b")])
    paths = parse_mask("priority,schedule.cron.timezone,tasks,maxActiveRuns,circuit_breaker")
    assert paths == ("priority", "schedule.cron.timezone", "tasks", "max_active_runs",
                     "circuit_breaker")
    check_body(body, paths)
    out = merge(SPEC, body, paths)
    want = types_pb2.JobSpec()
    want.CopyFrom(SPEC)
    want.priority = 7
    want.schedule.cron.timezone = "UTC"  # expression and DST policy kept
    del want.tasks[:]
    want.tasks.add(name="b")
    want.ClearField("max_active_runs")  # named, not in the body: cleared
    want.ClearField("circuit_breaker")
    assert out == want


@pytest.mark.parametrize(("mask", "rule"), [
    (None, "required"), ("", "names no field"), (7, "must be a string"),
    ("nope", "has no field 'nope'"), ("tasks.name", "tasks is a list"),
    ("priority.x", "priority has no fields")])
def test_a_bad_mask_is_a_400_naming_update_mask(mask, rule):
    with pytest.raises(Problem) as err:
        parse_mask(mask)
    assert err.value.body()["field"] == "updateMask" and rule in err.value.detail


def test_a_field_set_outside_the_mask_is_a_400_not_ignored():
    body = types_pb2.JobSpec(priority=7, schedule=types_pb2.Schedule(
        cron=types_pb2.CronSchedule(timezone="UTC", expression="* * * * *")))
    with pytest.raises(Problem) as err:
        check_body(body, parse_mask("priority,schedule.cron.timezone"))
    assert err.value.body()["field"] == "spec.schedule.cron.expression"
    check_body(body, parse_mask("priority,schedule"))
