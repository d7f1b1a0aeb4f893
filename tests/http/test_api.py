"""The HTTP/JSON API against real node processes: shapes are the proto messages' canonical
JSON, errors are problems with the gRPC code and the same message as over gRPC, followers
redirect writes to the leader, Idempotency-Key dedupes, events stream and are bounded; rich
error details (google.rpc.Status in grpc-status-details-bin) over gRPC and in problems, and
Connect's unary protocol."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import uuid

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from gnomon.node.local.cluster import wait_for
from gnomon.v1 import api_pb2, types_pb2
from tests.support.http import call

pytestmark = pytest.mark.integration


def _spec(name: str, **schedule) -> dict:
    return {"name": name, "schedule": schedule or {"interval": {"intervalMs": "3600000"}},
            "tasks": [{"name": "main"}]}


def _follower(cluster):
    leader = cluster.leader()
    return leader, next(n for n in cluster.nodes if n is not leader and n.alive())


def _create(node, name: str, **schedule) -> dict:
    r = call(node.url, "POST", "/v1/jobs", {"spec": _spec(name, **schedule)})
    assert r.status == 201, r.text
    return r.json["job"]


def test_create_answers_the_create_response_json_and_get_matches_grpc(cluster):
    leader = cluster.leader()
    r = call(leader.url, "POST", "/v1/jobs", {"spec": _spec("shape")})
    assert r.status == 201, r.text
    assert r.content_type == "application/json"
    job = r.json["job"]
    assert r.headers["location"] == f"/v1/jobs/{job['jobId']}"
    assert job["spec"]["name"] == "shape" and job["version"] == "1"  # int64 as a string
    got = call(leader.url, "GET", f"/v1/jobs/{job['jobId']}")
    assert got.status == 200
    over_grpc = leader.jobs().GetJob(api_pb2.GetJobRequest(
        job=api_pb2.JobRef(job_id=job["jobId"])), timeout=10, wait_for_ready=True)
    canonical = json_format.MessageToDict(over_grpc, always_print_fields_with_no_presence=True)
    # Canonical proto JSON but for bytes fields: JSON values (null: none; test_bodies.py).
    assert canonical["job"]["spec"]["tasks"][0]["payload"] == ""
    canonical["job"]["spec"]["tasks"][0]["payload"] = None
    assert got.json == canonical
    generic = call(leader.url, "POST", "/v1/rpc/JobService/GetJob", {"job": {"jobId": job["jobId"]}})
    assert generic.status == 200 and generic.json == got.json
    by_name = call(leader.url, "GET", "/v1/tenants/default/jobs/shape")
    assert by_name.status == 200 and by_name.json == got.json
    listed = call(leader.url, "GET", "/v1/tenants/default/jobs?limit=1000")
    assert job["jobId"] in [j["jobId"] for j in listed.json["jobs"]]


BAD = [
    (_spec("tz", cron={"expression": "0 0 * * *", "timezone": "Mars/Base"}),
     "spec.schedule.cron.timezone"),
    (_spec("expr", cron={"expression": "0 0 30 2 *"}), "spec.schedule.cron.expression"),
    ({"name": "cycle", "schedule": {"once": {"atMs": "1"}},
      "tasks": [{"name": "a", "dependsOn": ["b"]}, {"name": "b", "dependsOn": ["a"]}]}, None),
    ({"name": "bad name!", "schedule": {"once": {"atMs": "1"}}, "tasks": [{"name": "m"}]},
     "spec.name"),
    ({"name": "noschedule", "tasks": [{"name": "m"}]}, None),
]


@pytest.mark.parametrize(("spec", "field"), BAD, ids=[b[0]["name"] for b in BAD])
def test_bad_input_is_a_problem_with_the_grpc_code_and_message(cluster, spec, field):
    leader = cluster.leader()
    r = call(leader.url, "POST", "/v1/jobs", {"spec": spec})
    assert r.status == 400, r.text
    assert r.content_type == "application/problem+json"
    p = r.json
    with pytest.raises(grpc.RpcError) as err:
        leader.jobs().CreateJob(api_pb2.CreateJobRequest(
            spec=json_format.ParseDict(spec, types_pb2.JobSpec())), timeout=10, wait_for_ready=True)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert p["code"] == "INVALID_ARGUMENT" and p["status"] == 400
    assert p["detail"] == err.value.details()
    assert f"{p['field']}: {p['rule']}" == p["detail"] if p["field"] else p["rule"] == p["detail"]
    if field:
        assert p["field"] == field


@pytest.mark.parametrize(("method", "path", "body", "raw", "status", "code", "field"), [
    ("GET", "/v1/jobs/j999999", None, None, 404, "NOT_FOUND", "job.job_id"),
    ("GET", "/v1/runs/j1@1", None, None, 404, "NOT_FOUND", "run_id"),
    ("GET", "/v1/no-such-thing", None, None, 404, "NOT_FOUND", ""),
    ("PATCH", "/v1/jobs", None, None, 405, "UNIMPLEMENTED", ""),
    ("POST", "/v1/jobs", None, b"{not json", 400, "INVALID_ARGUMENT", "body"),
    ("POST", "/v1/jobs", None, b"[1]", 400, "INVALID_ARGUMENT", "body"),
    ("POST", "/v1/jobs", {"spec": {"nmae": "x"}}, None, 400, "INVALID_ARGUMENT", "body"),
    ("GET", "/v1/jobs?limit=lots", None, None, 400, "INVALID_ARGUMENT", "limit"),
    ("GET", "/v1/jobs?limit=-1", None, None, 400, "INVALID_ARGUMENT", "limit"),
    ("GET", "/v1/jobs?colour=red", None, None, 400, "INVALID_ARGUMENT", "colour"),
    # Found by schemathesis (test_schemathesis.py): numbers beyond the field's type, and a
    # negative audit cursor, were 500s.
    ("GET", "/v1/jobs?limit=99999999999", None, None, 400, "INVALID_ARGUMENT", "limit"),
    ("GET", "/v1/jobs?consistency=99999999999", None, None, 400, "INVALID_ARGUMENT",
     "consistency"),
    ("GET", "/v1/audit?before_ms=-1", None, None, 400, "INVALID_ARGUMENT", "before_ms"),
    ("GET", "/v1/jobs?consistency=sometimes", None, None, 400, "INVALID_ARGUMENT",
     "consistency"),
    ("POST", "/v1/dlq/replay", {}, None, 400, "INVALID_ARGUMENT", "tasks"),
    # The HTTP worker protocol: the field and the rule, and nothing leased or renewed.
    ("POST", "/v1/worker/lease", {"workerId": "w", "capacity": 0}, None, 400,
     "INVALID_ARGUMENT", "capacity"),
    ("POST", "/v1/worker/lease", {"workerId": "w", "capacity": 1, "waitMs": "86400000"}, None,
     400, "INVALID_ARGUMENT", "wait_ms"),
    ("POST", "/v1/worker/lease", {"workerId": "a b", "capacity": 1}, None, 400,
     "INVALID_ARGUMENT", "worker_id"),
    ("POST", "/v1/worker/heartbeat", {"workerId": "w", "leaseIds": ["j1@1/main"]}, None, 400,
     "INVALID_ARGUMENT", "lease_ids"),
    ("POST", "/v1/worker/complete", {"leaseId": "nope"}, None, 400, "INVALID_ARGUMENT",
     "lease_id"),
    ("GET", "/v1/worker/lease", None, None, 405, "UNIMPLEMENTED", ""),
])
def test_error_statuses_and_problem_bodies(cluster, method, path, body, raw, status, code,
                                           field):
    r = call(cluster.leader().url, method, path, body, raw=raw)
    assert r.status == status, r.text
    assert r.content_type == "application/problem+json"
    p = r.json
    assert (p["status"], p["code"], p["field"]) == (status, code, field), p
    assert p["detail"] and p["title"] and p["type"].startswith("urn:gnomon:problem:")
    if status == 405:  # RFC 9110: the methods the route has
        assert set(r.headers["allow"].split(",")) >= {"POST"}, r.headers


def test_version_conflict_carries_the_reason(cluster):
    leader = cluster.leader()
    job = _create(leader, "versioned")
    r = call(leader.url, "PUT", f"/v1/jobs/{job['jobId']}",
             {"spec": _spec("versioned"), "expectedVersion": "7"})
    assert r.status == 409, r.text  # Conflict, as HTTP APIs answer an edit of a changed thing
    assert r.json["code"] == "FAILED_PRECONDITION"
    assert r.json["reason"] == "VERSION_CONFLICT" and r.json["field"] == "expected_version"
    ok = call(leader.url, "PUT", f"/v1/jobs/{job['jobId']}",
              {"spec": _spec("versioned"), "expectedVersion": job["version"]})
    assert ok.status == 200 and ok.json["job"]["version"] == "2"


def test_follower_redirects_writes_to_the_leader_http_address(cluster):
    leader, follower = _follower(cluster)
    job = _create(leader, "redirected")
    path = f"/v1/jobs/{job['jobId']}/trigger"
    r = call(follower.url, "POST", path, {})
    assert r.status == 307, r.text
    assert r.headers["location"] == f"{leader.url}{path}"
    assert r.json["code"] == "UNAVAILABLE" and r.json["leader"] == leader.grpc_addr
    again = call(follower.url, "POST", r.headers["location"], {})
    assert again.status == 200 and again.json["run"]["jobId"] == job["jobId"]
    # Reads: linearizable ones go to the leader too; stale ones are served where asked.
    assert call(follower.url, "GET", f"/v1/jobs/{job['jobId']}").status == 307
    stale = wait_for(lambda: call(follower.url, "GET",
                                  f"/v1/jobs/{job['jobId']}?consistency=STALE").status == 200,
                     timeout_s=10, what="the follower to apply the job")
    assert stale
    # A follower's own status is its own (no redirect).
    st = call(follower.url, "GET", "/v1/cluster")
    assert st.status == 200 and st.json["nodeId"] == follower.node_id
    assert st.json["leaderNodeId"] == leader.node_id


def test_the_http_worker_protocol_leases_renews_and_completes_through_a_redirect(cluster):
    leader, follower = _follower(cluster)
    spec = _spec("polled")
    spec["tasks"][0].update(queue="polled", payload={"table": "orders"})
    job = call(leader.url, "POST", "/v1/jobs", {"spec": spec}).json["job"]
    run = call(leader.url, "POST", f"/v1/jobs/{job['jobId']}/trigger", {}).json["run"]
    ask = {"workerId": "poller", "queues": ["polled"], "capacity": 4, "waitMs": "10000"}
    r = call(follower.url, "POST", "/v1/worker/lease", ask)
    assert r.status == 307 and r.headers["location"] == f"{leader.url}/v1/worker/lease", r.text
    r = call(leader.url, "POST", "/v1/worker/lease", ask, timeout=15)
    assert r.status == 200, r.text
    [task] = r.json["tasks"]
    assert task["runId"] == run["runId"] and task["payload"] == {"table": "orders"}
    assert task["leaseId"] == f"{run['runId']}/main/{task['fencingToken']}"
    assert task["idempotencyKey"] == f"{run['runId']}:main" and task["attempt"] == 1
    assert int(r.json["heartbeatIntervalMs"]) > 0 and int(task["ttlMs"]) > 0
    beat = call(leader.url, "POST", "/v1/worker/heartbeat",
                {"workerId": "poller", "leaseIds": [task["leaseId"]]}).json
    assert [(b["leaseId"], b["status"]) for b in beat["leases"]] == [(task["leaseId"], "ok")]
    # Another worker id holds nothing: its heartbeat and its report are refused.
    other = call(leader.url, "POST", "/v1/worker/heartbeat",
                 {"workerId": "intruder", "leaseIds": [task["leaseId"]]}).json
    assert other["leases"][0]["status"] == "revoked"
    refused = call(leader.url, "POST", "/v1/worker/complete",
                   {"leaseId": task["leaseId"], "workerId": "intruder"}).json
    assert refused == {**refused, "accepted": False, "reason": "NOT_YOURS"}
    done = call(leader.url, "POST", "/v1/worker/complete",
                {"leaseId": task["leaseId"], "workerId": "poller", "result": {"rows": 3},
                 "exitCode": 0, "durationMs": "12"})
    assert done.status == 200 and done.json["accepted"] is True, done.text
    got = call(leader.url, "GET", f"/v1/runs/{run['runId']}").json["run"]
    assert got["state"] == "RUN_STATE_SUCCEEDED" and got["tasks"][0]["result"] == {"rows": 3}
    again = call(leader.url, "POST", "/v1/worker/complete", {"leaseId": task["leaseId"]}).json
    assert again["accepted"] is False and again["reason"] == "STALE_LEASE", again


def test_a_followers_status_does_not_show_lag_it_cannot_know(cluster):
    """A follower showed match index 0 (or a stale one) for the leader and the other
    follower: "lag 2556" on a healthy cluster. It marks what only the leader knows."""
    leader, follower = _follower(cluster)
    nodes = {n["nodeId"]: n for n in call(follower.url, "GET", "/v1/cluster").json["nodes"]}
    assert nodes[follower.node_id].get("matchIndexKnown") is True
    for node_id, n in nodes.items():
        if node_id != follower.node_id:
            assert not n.get("matchIndexKnown") and n.get("matchIndex", "0") == "0", n
    led = call(leader.url, "GET", "/v1/cluster").json
    assert all(n.get("matchIndexKnown") for n in led["nodes"]), led["nodes"]
    assert all(int(n.get("matchIndex", 0)) > 0 for n in led["nodes"]), led["nodes"]


def test_idempotency_key_is_the_request_id(cluster):
    leader = cluster.leader()
    key = {"Idempotency-Key": f"k-{uuid.uuid4()}"}
    first = call(leader.url, "POST", "/v1/jobs", {"spec": _spec("once-only")}, headers=key)
    second = call(leader.url, "POST", "/v1/jobs", {"spec": _spec("once-only")}, headers=key)
    assert first.status == second.status == 201
    assert first.json == second.json  # the first answer again, one job
    # The same key with another body: 422 naming the key (gRPC: FAILED_PRECONDITION, reason
    # REQUEST_ID_REUSED); nothing is created.
    reused = call(leader.url, "POST", "/v1/jobs", {"spec": _spec("not-made")}, headers=key)
    assert reused.status == 422 and reused.json["field"] == "request_id", reused.text
    assert reused.json["code"] == "FAILED_PRECONDITION"
    assert reused.json["reason"] == "REQUEST_ID_REUSED"
    assert repr(key["Idempotency-Key"]) in reused.json["detail"]
    assert call(leader.url, "GET", "/v1/tenants/default/jobs/not-made").status == 404
    # A key is scoped to the caller and the RPC: on another RPC it is another request.
    another = _create(leader, "another")
    other = call(leader.url, "POST", f"/v1/jobs/{another['jobId']}/pause", {}, headers=key)
    assert other.status == 200 and other.json["job"]["paused"] is True, other.text
    # Without a key a create is not deduped: the name is taken.
    dup = call(leader.url, "POST", "/v1/jobs", {"spec": _spec("once-only")})
    assert dup.status == 409 and dup.json["code"] == "ALREADY_EXISTS", dup.text
    clash = call(leader.url, "POST", "/v1/jobs", {"spec": _spec("x"), "requestId": "a"},
                 headers={"Idempotency-Key": "b"})
    assert clash.status == 400 and clash.json["field"] == "request_id"
    read = call(leader.url, "GET", "/v1/jobs", headers={"Idempotency-Key": "c"})
    assert read.status == 400 and read.json["field"] == "Idempotency-Key"


def test_trigger_cancel_and_dead_letter_routes(cluster):
    leader = cluster.leader()
    job = _create(leader, "runs-here")
    run = call(leader.url, "POST", f"/v1/jobs/{job['jobId']}/trigger", {}).json["run"]
    assert run["state"] == "RUN_STATE_RUNNING" and run["trigger"] == "RUN_TRIGGER_MANUAL"
    runs = call(leader.url, "GET", f"/v1/jobs/{job['jobId']}/runs?limit=5").json["runs"]
    assert run["runId"] in [r["runId"] for r in runs]
    got = call(leader.url, "GET", f"/v1/runs/{run['runId']}")
    assert got.status == 200 and got.json["run"]["tasks"][0]["taskName"] == "main"
    cancelled = call(leader.url, "POST", f"/v1/runs/{run['runId']}/cancel", {"reason": "test"})
    assert cancelled.status == 200 and cancelled.json["run"]["state"] == "RUN_STATE_CANCELLED"
    # RetryTask: a cancelled task runs again (the run reopens); CancelTask: cancelled again.
    retry = call(leader.url, "POST", f"/v1/runs/{run['runId']}/tasks/main/retry", {})
    assert retry.status == 200, retry.text
    assert retry.json["run"]["state"] == "RUN_STATE_RUNNING"
    assert retry.json["run"]["tasks"][0]["state"] == "TASK_STATE_READY"
    again = call(leader.url, "POST", f"/v1/runs/{run['runId']}/tasks/main/cancel",
                 {"reason": "again"})
    assert again.status == 200, again.text
    assert again.json["run"]["tasks"][0]["state"] == "TASK_STATE_CANCELLED"
    rerun = call(leader.url, "POST", f"/v1/runs/{run['runId']}/rerun", {})
    assert rerun.status == 200 and rerun.json["run"]["state"] == "RUN_STATE_RUNNING", rerun.text
    replay = call(leader.url, "POST", "/v1/dlq/replay",
                  {"tasks": [{"runId": run["runId"], "taskName": "main"}]})
    assert replay.status == 404 and replay.json["field"] == "tasks[0]", replay.text
    dlq = call(leader.url, "GET", "/v1/dlq")
    assert dlq.status == 200 and "deadLetters" in dlq.json
    assert call(leader.url, "GET", "/v1/tenants/default/dlq").status == 200
    queues = call(leader.url, "GET", "/v1/queues")
    assert queues.status == 200 and queues.json["fromLeader"] is True, queues.text
    assert any(q["queue"] == "default" for q in queues.json["queues"])
    assert call(leader.url, "GET", "/v1/workers").json["fromLeader"] is True
    active = call(leader.url, "GET", "/v1/active-runs?limit=1000").json["runs"]
    assert run["runId"] in [r["runId"] for r in active]  # re-run above


def test_schedule_preview_routes(cluster):
    leader, follower = _follower(cluster)
    job = _create(leader, "previewed")
    r = call(leader.url, "GET", f"/v1/jobs/{job['jobId']}/schedule/preview?count=3")
    assert r.status == 200 and len(r.json["fires"]) == 3, r.text
    bad = {"schedule": {"cron": {"expression": "0 0 * * *", "timezone": "Mars/Base"}}}
    p = call(follower.url, "POST", "/v1/schedules/preview", bad)  # any node answers
    assert p.status == 400 and p.json["field"] == "schedule.cron.timezone", p.text
    with pytest.raises(grpc.RpcError) as err:
        follower.jobs().PreviewSchedule(json_format.ParseDict(
            bad, api_pb2.PreviewScheduleRequest()), timeout=10, wait_for_ready=True)
    assert p.json["detail"] == err.value.details()


def _preflight(node, origin: str, method: str = "POST"):
    return call(node.url, "OPTIONS", "/v1/jobs", headers={
        "Origin": origin, "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "content-type,idempotency-key"})


def test_cors_answers_the_clusters_own_origins_only(cluster):
    """A node without authentication: a page of another origin (or a redirected request's
    `null`) may not drive it; the dashboard of any member may (it writes to the leader)."""
    leader, follower = _follower(cluster)
    for origin in (follower.url, leader.url, "https://dashboard.example"):  # conftest's extra
        r = _preflight(leader, origin, "PATCH")
        assert r.status == 204
        assert r.headers["access-control-allow-origin"] == origin, (origin, r.headers)
        assert "PATCH" in r.headers["access-control-allow-methods"]
        assert "idempotency-key" in r.headers["access-control-allow-headers"].lower()
        assert "origin" in r.headers["vary"].lower()
        got = call(leader.url, "GET", "/v1/cluster", headers={"Origin": origin})
        assert got.headers["access-control-allow-origin"] == origin
        assert "Location" in got.headers["access-control-expose-headers"]
    for origin in ("https://evil.example", "null", "http://127.0.0.1:1", "https://dashboard.example.evil"):
        r = _preflight(leader, origin)
        assert "access-control-allow-origin" not in r.headers, (origin, r.headers)
        assert "access-control-allow-methods" not in r.headers
        assert "origin" in r.headers["vary"].lower()
        for node, path in ((leader, "/v1/jobs"), (follower, "/v1/cluster")):
            got = call(node.url, "GET", path, headers={"Origin": origin})
            assert got.status == 200 and "access-control-allow-origin" not in got.headers
            assert "origin" in got.headers["vary"].lower()
    # The event stream too (it names every tenant's runs and jobs).
    for origin, allowed in (("https://evil.example", False), (follower.url, True)):
        head = _stream_head(leader, origin)
        assert head.startswith(b"HTTP/1.1 200"), head
        assert (f"access-control-allow-origin: {origin}".encode() in head.lower()) is allowed
        assert b"vary: origin" in head.lower()


def _stream_head(node, origin: str) -> bytes:
    """The status line and headers of /v1/events asked from `origin` (then hung up)."""
    host, port = node.http_addr.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"GET /v1/events HTTP/1.1\r\nHost: {node.http_addr}\r\n"
                     f"Origin: {origin}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
    return head.split(b"\r\n\r\n")[0]


# A web page's "simple" requests: no preflight, so the type is all that stops them.
NOT_JSON = [("text/plain", b'{"spec": %s}'), ("text/plain;charset=UTF-8", b'{"spec": %s}'),
            ("application/x-www-form-urlencoded", b'{"spec": %s}'),
            ("multipart/form-data; boundary=x", b'{"spec": %s}'), (None, b'{"spec": %s}')]


@pytest.mark.parametrize(("content_type", "template"), NOT_JSON,
                         ids=[str(c).split(";")[0] for c, _ in NOT_JSON])
def test_a_write_that_is_not_json_is_415_and_changes_nothing(cluster, content_type, template):
    """Seen: a text/plain POST from https://evil.example created a job with argv
    ["touch", "pwned"] on a node without authentication."""
    leader, follower = _follower(cluster)
    name = f"pwned-{uuid.uuid4().hex[:8]}"
    spec = {"name": name, "schedule": {"interval": {"intervalMs": "3600000"}},
            "tasks": [{"name": "main", "queue": "shell",
                       "payload": {"argv": ["touch", "pwned"]}}]}
    raw = template % json.dumps(spec).encode()
    for node in (leader, follower):
        hdrs = {"Origin": "https://evil.example"}
        if content_type:
            hdrs["Content-Type"] = content_type
        conn = http.client.HTTPConnection(node.http_addr, timeout=10)
        try:
            conn.putrequest("POST", "/v1/jobs", skip_accept_encoding=True)
            for k, v in {**hdrs, "Content-Length": str(len(raw))}.items():
                conn.putheader(k, v)
            conn.endheaders(raw)
            r = conn.getresponse()
            status, headers, body = r.status, dict(r.getheaders()), json.loads(r.read())
        finally:
            conn.close()
        assert status == 415, (node.node_id, status, body)
        assert headers["Content-Type"].startswith("application/problem+json")
        assert body["field"] == "Content-Type" and "application/json" in body["rule"], body
        assert body["code"] == "INVALID_ARGUMENT" and body["reason"] == "UNSUPPORTED_MEDIA_TYPE"
        assert "Access-Control-Allow-Origin" not in headers
    assert call(leader.url, "GET", f"/v1/tenants/default/jobs/{name}").status == 404


def test_a_bodyless_write_without_the_json_type_is_415(cluster):
    """POST /pause with no body is what a page's `fetch(url, {method: "POST", mode:
    "no-cors"})` sends: refused too; with the type (and an empty body) it pauses."""
    leader = cluster.leader()
    job = _create(leader, f"bodyless-{uuid.uuid4().hex[:8]}")
    r = call(leader.url, "POST", f"/v1/jobs/{job['jobId']}/pause", raw=b"",
             headers={"Content-Type": ""})
    assert r.status == 415 and "has none" in r.json["rule"], r.text
    assert call(leader.url, "GET", f"/v1/jobs/{job['jobId']}").json["job"]["paused"] is False
    r = call(leader.url, "POST", f"/v1/jobs/{job['jobId']}/pause", raw=b"",
             headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status == 200 and r.json["job"]["paused"] is True, r.text
    # DELETE has no body and is never a simple request (a page must be allowed a preflight).
    r = _preflight(leader, "https://evil.example", "DELETE")
    assert "access-control-allow-origin" not in r.headers


def _read_events(sock_file, until, limit: int = 200):
    """Events from an open stream until `until(name, data)` is true (bounded by `limit`
    events and the socket timeout)."""
    name = None
    for _ in range(limit * 4):
        line = sock_file.readline().decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
            if until(name, data):
                return name, data
    raise AssertionError("no matching event")


def _open_stream(node):
    host, port = node.http_addr.split(":")
    sock = socket.create_connection((host, int(port)), timeout=15)
    # HTTP/1.0: the stream is the body as is (no chunked framing to parse).
    sock.sendall(f"GET /v1/events HTTP/1.0\r\nHost: {node.http_addr}\r\n"
                 "Accept: text/event-stream\r\n\r\n".encode())
    f = sock.makefile("rb")
    status = f.readline().decode()
    while f.readline() not in (b"\r\n", b""):
        pass
    return sock, f, status


def test_events_stream_changed_runs_on_a_follower_and_are_bounded(cluster):
    leader, follower = _follower(cluster)
    job = _create(leader, "evented")
    sock, f, status = _open_stream(follower)
    try:
        assert " 200 " in status, status
        _read_events(f, lambda n, d: n == "cluster" and d["leaderNodeId"] == leader.node_id)
        run = call(leader.url, "POST", f"/v1/jobs/{job['jobId']}/trigger", {}).json["run"]
        _read_events(f, lambda n, d: n == "changes" and run["runId"] in d["runIds"])
        # http_max_event_streams=2 in this module: a third stream is refused, bounded.
        second = _open_stream(follower)
        try:
            assert " 200 " in second[2]
            third = call(follower.url, "GET", "/v1/events")
            assert third.status == 429 and third.json["code"] == "RESOURCE_EXHAUSTED"
            assert third.json["field"] == "events"
        finally:
            second[0].close()
    finally:
        sock.close()


def test_transfer_leadership_from_a_follower_follows_the_redirect(cluster):
    """Last in the module: the leader changes."""
    leader, follower = _follower(cluster)
    r = call(follower.url, "POST", "/v1/cluster/transfer-leadership", {})
    assert r.status == 307, r.text
    moved = call(follower.url, "POST", r.headers["location"], {"timeoutMs": "10000"})
    assert moved.status == 200, moved.text
    assert moved.json["previousLeaderNodeId"] == leader.node_id
    assert moved.json["leaderNodeId"] not in ("", leader.node_id)


# -- rich error details and Connect's unary protocol --------------------------------------

BAD_ZONE = {"name": "details-bad-zone", "tasks": [{"name": "main"}],
            "schedule": {"cron": {"expression": "* * * * *", "timezone": "Mars/Base"}}}
ZONE_FIELD = "spec.schedule.cron.timezone"


def _unpacked(status, cls):
    out = []
    for packed in status.details:
        if packed.Is(cls.DESCRIPTOR):
            msg = cls()
            packed.Unpack(msg)
            out.append(msg)
    return out


def _bad_zone_request() -> api_pb2.CreateJobRequest:
    spec = types_pb2.JobSpec(name=BAD_ZONE["name"], tasks=[types_pb2.TaskSpec(name="main")])
    spec.schedule.cron.expression = "* * * * *"
    spec.schedule.cron.timezone = "Mars/Base"
    return api_pb2.CreateJobRequest(spec=spec)


def test_a_bad_create_job_carries_bad_request_naming_the_field(cluster):
    leader = cluster.leader()
    call_ = leader.jobs().CreateJob.with_call  # a unary call whose status we decode
    with pytest.raises(grpc.RpcError) as info:
        call_(_bad_zone_request(), timeout=10)
    status = rpc_status.from_call(info.value)
    assert status is not None and status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert status.message == info.value.details()
    [bad] = _unpacked(status, error_details_pb2.BadRequest)
    [violation] = bad.field_violations
    assert violation.field == ZONE_FIELD and "Mars/Base" in violation.description
    # The HTTP problem carries the same details, in google.rpc's JSON form; nothing created.
    r = call(leader.url, "POST", "/v1/jobs", {"spec": BAD_ZONE})
    assert r.status == 400 and r.json["field"] == ZONE_FIELD, r.text
    [detail] = r.json["details"]
    assert detail["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    assert detail["fieldViolations"][0]["field"] == ZONE_FIELD
    assert call(leader.url, "GET", "/v1/tenants/default/jobs/details-bad-zone").status == 404


def test_a_version_conflict_carries_error_info_beside_the_trailer(cluster):
    leader = cluster.leader()
    spec = {"name": "details-versioned", "tasks": [{"name": "main"}],
            "schedule": {"interval": {"intervalMs": "3600000"}}}
    job = call(leader.url, "POST", "/v1/jobs", {"spec": spec}).json["job"]
    request = api_pb2.DeleteJobRequest(job=api_pb2.JobRef(job_id=job["jobId"]),
                                       expected_version=int(job["version"]) + 5)
    with pytest.raises(grpc.RpcError) as info:
        leader.jobs().DeleteJob.with_call(request, timeout=10)
    assert dict(info.value.trailing_metadata())["gnomon-reason"] == "VERSION_CONFLICT"
    [error] = _unpacked(rpc_status.from_call(info.value), error_details_pb2.ErrorInfo)
    assert (error.reason, error.domain) == ("VERSION_CONFLICT", "gnomon.dev")


def test_a_rate_limited_call_carries_retry_info(cluster):
    leader = cluster.leader()
    tenant = types_pb2.Tenant(name="details-slow", weight=1, api_rate_per_s=1, api_burst=1)
    leader.access().CreateTenant(api_pb2.SetTenantRequest(tenant=tenant), timeout=10)
    request = api_pb2.ListJobsRequest(tenant="details-slow")
    refused = None
    for _ in range(10):  # the bucket holds one call a second: the second within it is refused
        try:
            leader.jobs().ListJobs.with_call(request, timeout=10)
        except grpc.RpcError as exc:
            refused = exc
            break
    assert refused is not None and refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    wait_ms = int(dict(refused.trailing_metadata())["retry-after-ms"])
    [retry] = _unpacked(rpc_status.from_call(refused), error_details_pb2.RetryInfo)
    assert retry.retry_delay.ToMilliseconds() == wait_ms > 0


def test_a_follower_says_not_leader_with_the_leader_and_a_retry_delay(cluster):
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes if n is not leader and n.alive())
    request = api_pb2.PauseJobRequest(job=api_pb2.JobRef(job_id="no-such-job"))
    with pytest.raises(grpc.RpcError) as info:
        follower.jobs().PauseJob.with_call(request, timeout=10)
    status = rpc_status.from_call(info.value)
    [error] = _unpacked(status, error_details_pb2.ErrorInfo)
    assert error.reason == "NOT_LEADER" and error.metadata["leader"] == leader.grpc_addr
    [retry] = _unpacked(status, error_details_pb2.RetryInfo)
    assert retry.retry_delay.ToMilliseconds() == 1000


def test_connect_unary_answers_the_message_and_connect_errors(cluster):
    leader = cluster.leader()
    headers = {"Connect-Protocol-Version": "1"}
    r = call(leader.url, "POST", "/gnomon.v1.ClusterService/GetStatus", {}, headers=headers)
    assert r.status == 200 and r.json["nodeId"] == leader.node_id, r.text
    r = call(leader.url, "POST", "/gnomon.v1.JobService/GetJob",
             {"job": {"jobId": "no-such-job"}}, headers=headers)
    assert r.status == 404 and r.content_type == "application/json", r.text
    assert r.json["code"] == "not_found" and "no-such-job" in r.json["message"]
    r = call(leader.url, "POST", "/gnomon.v1.JobService/CreateJob", {"spec": BAD_ZONE},
             headers=headers)
    assert r.status == 400 and r.json["code"] == "invalid_argument", r.text
    [detail] = r.json["details"]
    assert detail["type"] == "google.rpc.BadRequest"
    bad = error_details_pb2.BadRequest.FromString(
        base64.b64decode(detail["value"] + "=" * (-len(detail["value"]) % 4)))
    assert bad.field_violations[0].field == ZONE_FIELD
    # Not JSON: 415 (Connect's rule), the body unread; a protocol version it does not speak.
    r = call(leader.url, "POST", "/gnomon.v1.ClusterService/GetStatus", raw=b"\x00",
             headers={"Content-Type": "application/proto"})
    assert r.status == 415 and r.json["code"] == "invalid_argument", r.text
    r = call(leader.url, "POST", "/gnomon.v1.ClusterService/GetStatus", {},
             headers={"Connect-Protocol-Version": "2"})
    assert r.status == 400 and r.json["message"].startswith("Connect-Protocol-Version: "), r.text
    # What fails outside the servicer is Connect's error JSON too (a body over the bound
    # was aiohttp's plain text), and an answer is an API answer (no dashboard page headers).
    r = call(leader.url, "POST", "/gnomon.v1.ClusterService/GetStatus",
             raw=b"{" + b" " * (16 << 20) + b"}", headers={"Content-Type": "application/json"})
    assert r.content_type == "application/json", r.text[:300]
    assert r.json["code"] == "resource_exhausted" and "body larger than" in r.json["message"]
    r = call(leader.url, "POST", "/gnomon.v1.ClusterService/GetStatus", {}, headers=headers)
    assert "content-security-policy" not in r.headers
    # The generic route still answers, as before.
    r = call(leader.url, "POST", "/v1/rpc/ClusterService/GetStatus", {})
    assert r.status == 200 and r.json["nodeId"] == leader.node_id
