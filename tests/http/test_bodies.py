"""JSON payloads and PATCH against real node processes: a bytes field is a JSON value over
HTTP both ways (base64 strings still read), a malformed one is a 400 naming the field, and
PATCH changes the fields its updateMask names and keeps every other."""

from __future__ import annotations

import base64
from urllib.parse import quote

import grpc
import pytest

from gnomon.node.api.http.problems import Problem
from gnomon.v1 import api_pb2
from tests.support.cluster import RawWorker
from tests.support.http import call

pytestmark = pytest.mark.integration

PAYLOAD = {"source": "orders", "tables": ["a", "b"], "limit": 10, "dry": False,
           "nested": {"ü": None}}


def _spec(name: str, **task) -> dict:
    return {"name": name, "schedule": {"interval": {"intervalMs": "3600000"}}, "paused": True,
            "tasks": [{"name": "main", **task}]}


def _create(node, spec: dict) -> dict:
    r = call(node.url, "POST", "/v1/jobs", {"spec": spec})
    assert r.status == 201, r.text
    return r.json["job"]


def _follower(cluster):
    leader = cluster.leader()
    return leader, next(n for n in cluster.nodes if n is not leader and n.alive())


def _grpc_job(node, job_id: str):
    return node.jobs().GetJob(api_pb2.GetJobRequest(job=api_pb2.JobRef(job_id=job_id)),
                              timeout=10, wait_for_ready=True).job


def test_a_json_object_payload_round_trips_as_json(cluster):
    leader = cluster.leader()
    job = _create(leader, _spec("json-payload", payload=PAYLOAD))
    assert job["spec"]["tasks"][0]["payload"] == PAYLOAD
    assert "payloadBase64" not in job["spec"]["tasks"][0]
    got = call(leader.url, "GET", f"/v1/jobs/{job['jobId']}").json["job"]
    assert got["spec"]["tasks"][0]["payload"] == PAYLOAD
    # Stored as the CLI and the client store a JSON payload: compact, sorted keys, UTF-8.
    stored = _grpc_job(leader, job["jobId"]).spec.tasks[0].payload
    assert stored == ('{"dry":false,"limit":10,"nested":{"ü":null},"source":"orders",'
                      '"tables":["a","b"]}').encode()
    # The answer's spec, sent back whole, is the same spec (PUT replaces).
    put = call(leader.url, "PUT", f"/v1/jobs/{job['jobId']}",
               {"spec": got["spec"], "expectedVersion": got["version"]})
    assert put.status == 200, put.text
    assert put.json["job"]["spec"] == got["spec"]
    assert _grpc_job(leader, job["jobId"]).spec.tasks[0].payload == stored
    # A run's task gets those bytes; its parameters and its result are JSON too.
    run = call(leader.url, "POST", f"/v1/jobs/{job['jobId']}/trigger",
               {"paramsJson": '{"date": "2026-01-01"}'})
    assert run.status == 200, run.text
    assert run.json["run"]["params"] == {"date": "2026-01-01"}


def test_a_task_result_is_shown_as_json(cluster):
    leader = cluster.leader()
    job = _create(leader, _spec("json-result", queue="results", payload={"n": 1}))
    run_id = call(leader.url, "POST", f"/v1/jobs/{job['jobId']}/trigger", {}).json["run"]["runId"]
    worker = RawWorker(leader, "w-results", ("results",))
    try:
        worker.credits(1)
        assign = worker.next("assign")
        assert assign.payload == b'{"n":1}'
        worker.complete(assign.lease, b'{"rows": 3}')
        worker.next("report_ack")
    finally:
        worker.close()
    run = call(leader.url, "GET", f"/v1/runs/{quote(run_id, safe='')}").json["run"]
    assert run["tasks"][0]["result"] == {"rows": 3}
    assert run["params"] is None  # none given


def test_base64_payloads_still_read_and_bytes_that_are_not_json_stay_base64(cluster):
    leader = cluster.leader()
    # A client of the base64 shape (canonical proto JSON) sends a string.
    old = _create(leader, _spec("old-client", payload=base64.b64encode(b'{"a":1}').decode()))
    assert old["spec"]["tasks"][0]["payload"] == {"a": 1}
    raw = b"\x00\x01binary\xff"
    binary = _create(leader, _spec("binary", payloadBase64=base64.b64encode(raw).decode()))
    task = binary["spec"]["tasks"][0]
    assert "payload" not in task and base64.b64decode(task["payloadBase64"]) == raw
    assert _grpc_job(leader, binary["jobId"]).spec.tasks[0].payload == raw
    legacy = _create(leader, _spec("legacy-binary", payload=base64.b64encode(raw).decode()))
    assert legacy["spec"]["tasks"][0]["payloadBase64"] == task["payloadBase64"]
    generic = call(leader.url, "POST", "/v1/rpc/JobService/GetJob",
                   {"job": {"jobId": binary["jobId"]}})
    assert generic.json["job"]["spec"]["tasks"][0] == task


@pytest.mark.parametrize(("task", "field", "rule"), [
    ({"payload": "orders"}, "spec.tasks[0].payload", "is not base64"),
    ({"payloadBase64": "not base64!"}, "spec.tasks[0].payload_base64", "not base64"),
    ({"payloadBase64": {"a": 1}}, "spec.tasks[0].payload_base64", "must be a base64 string"),
    ({"payload": {"a": 1}, "payload_base64": "AA=="}, "spec.tasks[0].payload_base64",
     "not both"),
], ids=["text", "bad-base64", "object-as-base64", "both"])
def test_a_malformed_payload_is_a_problem_naming_the_field(cluster, task, field, rule):
    r = call(cluster.leader().url, "POST", "/v1/jobs", {"spec": _spec("malformed", **task)})
    assert r.status == 400, r.text
    assert r.content_type == "application/problem+json"
    assert (r.json["code"], r.json["field"]) == ("INVALID_ARGUMENT", field), r.json
    assert rule in r.json["rule"] and "Error" not in r.text, r.json


def test_a_payload_over_the_limit_is_the_servicers_message(cluster):
    big = {"blob": "x" * (64 * 1024)}
    r = call(cluster.leader().url, "POST", "/v1/jobs", {"spec": _spec("too-big", payload=big)})
    assert r.status == 400 and r.json["field"] == "spec.tasks[0].payload", r.text
    assert "max_payload_bytes" in r.json["rule"]


FULL = {"name": "patched", "paused": True, "priority": 3,
        "schedule": {"cron": {"expression": "0 3 * * *", "timezone": "Europe/Berlin",
                              "dstNonexistent": "DST_NONEXISTENT_POLICY_SHIFT_FORWARD",
                              "dstAmbiguous": "DST_AMBIGUOUS_POLICY_LAST"}},
        "overlapPolicy": "OVERLAP_POLICY_SKIP", "misfireGraceMs": "90000", "jitterMs": "5000",
        "maxRuns": "40", "circuitBreaker": {"windowRuns": 10, "failurePercent": 50,
                                            "cooldownMs": "600000"},
        "tasks": [{"name": "main", "payload": PAYLOAD, "retry": {
            "maxAttempts": 5, "initialBackoffMs": "1000", "maxBackoffMs": "60000",
            "multiplier": 2.0, "jitter": 0.2}}]}


def test_patch_changes_the_masked_fields_and_keeps_every_other(cluster):
    leader, follower = _follower(cluster)
    job = _create(leader, FULL)
    # On a follower: redirected to the leader like any write (307 keeps method and body).
    r = call(follower.url, "PATCH", f"/v1/jobs/{job['jobId']}",
             {"updateMask": "priority", "spec": {"priority": 7}})
    assert r.status == 307, r.text
    r = call(leader.url, "PATCH", r.headers["location"],
             {"updateMask": "priority,schedule.cron.timezone",
              "spec": {"priority": 7, "schedule": {"cron": {"timezone": "UTC"}}}})
    assert r.status == 200, r.text
    want = job["spec"] | {"priority": 7}
    want["schedule"] = {"cron": job["spec"]["schedule"]["cron"] | {"timezone": "UTC"}}
    assert r.json["job"]["spec"] == want
    assert r.json["job"]["version"] == "2"
    got = call(leader.url, "GET", f"/v1/jobs/{job['jobId']}").json["job"]
    assert got["spec"] == want
    # A list is replaced whole; a named field the body leaves out is cleared.
    r = call(leader.url, "PATCH", f"/v1/jobs/{job['jobId']}",
             {"updateMask": ["tasks", "circuit_breaker"], "expectedVersion": "2",
              "spec": {"tasks": [{"name": "other", "payload": [1, 2]}]}})
    assert r.status == 200, r.text
    spec = r.json["job"]["spec"]
    assert [t["name"] for t in spec["tasks"]] == ["other"]
    assert spec["tasks"][0]["payload"] == [1, 2]
    assert "circuitBreaker" not in spec
    assert spec["overlapPolicy"] == "OVERLAP_POLICY_SKIP" and spec["maxRuns"] == "40"


def test_patch_is_conditional_and_a_bad_mask_is_a_problem(cluster):
    leader = cluster.leader()
    job = _create(leader, _spec("patch-rules"))
    stale = call(leader.url, "PATCH", f"/v1/jobs/{job['jobId']}",
                 {"updateMask": "priority", "spec": {"priority": 1}, "expectedVersion": "9"})
    # As a PUT's stale version is answered (the status is problems.py's to map).
    conflict = Problem(grpc.StatusCode.FAILED_PRECONDITION, "", reason="VERSION_CONFLICT")
    assert stale.status == conflict.status, stale.text
    assert (stale.json["code"], stale.json["reason"]) == ("FAILED_PRECONDITION",
                                                          "VERSION_CONFLICT"), stale.text
    for body, field, rule in [
        ({"spec": {"priority": 1}}, "updateMask", "required"),
        ({"updateMask": "colour", "spec": {}}, "updateMask", "has no field 'colour'"),
        ({"updateMask": "priority", "spec": {"priority": 1, "jitterMs": "5"}},
         "spec.jitter_ms", "not named in updateMask"),
        ({"updateMask": "tasks", "spec": {"tasks": [{"name": "m", "payload": "orders"}]}},
         "spec.tasks[0].payload", "not base64"),
    ]:
        r = call(leader.url, "PATCH", f"/v1/jobs/{job['jobId']}", body)
        assert r.status == 400 and r.content_type == "application/problem+json", r.text
        assert r.json["field"] == field and rule in r.json["rule"], r.json
    missing = call(leader.url, "PATCH", "/v1/jobs/j999999",
                   {"updateMask": "priority", "spec": {"priority": 1}})
    assert missing.status == 404, missing.text
    assert call(leader.url, "GET", f"/v1/jobs/{job['jobId']}").json["job"]["version"] == "1"


def test_openapi_describes_json_payloads_and_patch(cluster):
    doc = call(cluster.leader().url, "GET", "/v1/openapi.json").json
    task = doc["components"]["schemas"]["gnomon.v1.TaskSpec"]["properties"]
    assert "type" not in task["payload"] and "JSON value" in task["payload"]["description"]
    assert task["payloadBase64"]["contentEncoding"] == "base64"
    result = doc["components"]["schemas"]["gnomon.v1.TaskInstance"]["properties"]
    assert "resultBase64" in result and "JSON value" in result["result"]["description"]
    patch = doc["paths"]["/v1/jobs/{job_id}"]["patch"]
    assert patch["x-grpc-method"] == "gnomon.v1.JobService.UpdateJob"
    ref = patch["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert body["required"] == ["updateMask"] and "spec" in body["properties"]
