"""A secure cluster (mutual TLS and bearer tokens on the gRPC port): the HTTP port speaks the
same TLS and asks the same AccessGuard, so the same token gets the same answer on both ports;
a follower's redirect names the leader's https address."""

from __future__ import annotations

import http.client
import json
import ssl

import grpc
import pytest

from gnomon.node.local.cluster import LocalCluster, wait_for
from gnomon.v1 import api_pb2, api_pb2_grpc, types_pb2
from tests.support.cluster import _port_up
from tests.support.resources import attack

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    c = LocalCluster(tmp_path_factory.mktemp("https"), 3, secure=True, http=True).start()
    try:
        c.leader()
        wait_for(lambda: all(_port_up(n.http_addr) for n in c.nodes), timeout_s=30,
                 what="every node's HTTP port")
        yield c
    finally:
        c.stop()
        if request.session.testsfailed:
            print(c.logs())


def _context(cluster, *, client_cert: bool = True) -> ssl.SSLContext:
    files = cluster.client_tls()
    ctx = ssl.create_default_context(cafile=files["ca_file"])
    if client_cert:
        ctx.load_cert_chain(files["cert_file"], files["key_file"])
    return ctx


def _call(cluster, node, method: str, path: str, body: dict | None = None, *,
          token: str | None = None, ctx: ssl.SSLContext | None = None,
          extra: dict[str, str] | None = None):
    host, port = node.http_addr.split(":")
    conn = http.client.HTTPSConnection(host, int(port), context=ctx or _context(cluster),
                                       timeout=10)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if body is not None:
        headers["Content-Type"] = "application/json"
    headers.update(extra or {})
    try:
        conn.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                     headers=headers)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), json.loads(r.read() or b"{}")
    finally:
        conn.close()


def _spec(name: str) -> dict:
    return {"spec": {"name": name, "schedule": {"once": {"atMs": "1"}},
                     "tasks": [{"name": "main"}]}}


def test_the_admin_token_over_https_and_the_redirect_names_https(cluster):
    leader = cluster.leader()
    admin = cluster.admin_token()
    assert leader.url.startswith("https://")
    status, _, body = _call(cluster, leader, "GET", "/v1/cluster", token=admin)
    assert status == 200 and body["leaderNodeId"] == leader.node_id
    who = _call(cluster, leader, "GET", "/v1/whoami", token=admin)[2]
    assert who["role"] == "admin" and who["authenticationRequired"] is True
    follower = next(n for n in cluster.nodes if n is not leader)
    status, headers, _ = _call(cluster, follower, "POST", "/v1/jobs", _spec("tls"), token=admin)
    assert status == 307 and headers["Location"] == f"{leader.url}/v1/jobs"


def test_no_token_and_a_reader_token_get_the_grpc_answers(cluster):
    leader = cluster.leader()
    status, headers, body = _call(cluster, leader, "GET", "/v1/jobs")
    assert status == 401 and body["code"] == "UNAUTHENTICATED", body
    assert headers["WWW-Authenticate"] == 'Bearer realm="gnomon"'  # RFC 6750
    creds = grpc.ssl_channel_credentials(*(open(cluster.client_tls()[k], "rb").read()
                                           for k in ("ca_file", "key_file", "cert_file")))
    with grpc.secure_channel(leader.grpc_addr, creds) as channel:
        with pytest.raises(grpc.RpcError) as err:
            api_pb2_grpc.JobServiceStub(channel).ListJobs(api_pb2.ListJobsRequest(), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert body["detail"] == err.value.details()

    status, _, made = _call(cluster, leader, "POST", "/v1/tokens", {
        "name": "reader", "role": "tenant-reader", "tenants": ["default"]},
        token=cluster.admin_token())
    assert status == 200, made
    reader = made["secret"]
    # The administrative call made over HTTP is in the audit log (written after the answer).
    wait_for(lambda: any("CreateToken" in json.dumps(e) for e in _call(
        cluster, leader, "GET", "/v1/audit", token=cluster.admin_token())[2]["entries"]),
        timeout_s=20, what="the CreateToken audit entry")
    assert _call(cluster, leader, "GET", "/v1/tenants/default/jobs", token=reader)[0] == 200
    status, _, denied = _call(cluster, leader, "POST", "/v1/jobs", _spec("nope"), token=reader)
    assert status == 403 and denied["code"] == "PERMISSION_DENIED", denied
    stub = api_pb2_grpc.JobServiceStub(grpc.secure_channel(leader.grpc_addr, creds))
    with pytest.raises(grpc.RpcError) as err:
        stub.CreateJob(api_pb2.CreateJobRequest(spec=types_pb2.JobSpec(
            name="nope", schedule=types_pb2.Schedule(once=types_pb2.OnceSchedule(at_ms=1)),
            tasks=[types_pb2.TaskSpec(name="main")])), timeout=5,
            metadata=(("authorization", f"Bearer {reader}"),))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert denied["detail"] == err.value.details()
    # The event stream names every tenant's runs: admin only.
    status, _, body = _call(cluster, leader, "GET", f"/v1/events?access_token={reader}")
    assert status == 403 and body["code"] == "PERMISSION_DENIED"


def test_with_authentication_any_origin_may_call_but_only_with_json(cluster):
    """A node that authenticates answers CORS `*` (a page must hold a token: the browser
    never attaches one by itself, and `*` admits no credentialed request); a body that is
    not application/json is still 415, token or not, and changes nothing."""
    leader = cluster.leader()
    admin = cluster.admin_token()
    evil = {"Origin": "https://evil.example"}
    status, headers, _ = _call(cluster, leader, "OPTIONS", "/v1/jobs", extra={
        **evil, "Access-Control-Request-Method": "POST"})
    assert status == 204 and headers["Access-Control-Allow-Origin"] == "*", headers
    assert "Access-Control-Allow-Credentials" not in headers
    assert "Authorization" in headers["Access-Control-Allow-Headers"]
    status, headers, _ = _call(cluster, leader, "GET", "/v1/jobs", extra=evil)
    assert status == 401 and headers["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in headers
    for token in (None, admin):
        status, _, body = _call(cluster, leader, "POST", "/v1/jobs", _spec("plain"),
                                token=token, extra={**evil, "Content-Type": "text/plain"})
        assert status == 415 and body["field"] == "Content-Type", body
    status, _, _ = _call(cluster, leader, "GET", "/v1/tenants/default/jobs/plain", token=admin)
    assert status == 404


def test_no_client_certificate_or_plaintext_is_refused(cluster):
    leader = cluster.leader()
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _call(cluster, leader, "GET", "/v1/cluster", ctx=_context(cluster, client_cert=False))
    host, port = leader.http_addr.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            conn.request("GET", "/v1/cluster")
            conn.getresponse()
    finally:
        conn.close()


def _raw(cluster, node, body: bytes, *, token: str | None = None,
         path: str = "/v1/jobs") -> tuple[int, dict]:
    host, port = node.http_addr.split(":")
    conn = http.client.HTTPSConnection(host, int(port), context=_context(cluster), timeout=30)
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        try:
            conn.request("POST", path, body=body, headers=headers)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the node answered before reading the body and closed: read the answer
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        conn.close()


@pytest.mark.resources
def test_an_unauthenticated_body_is_not_read(cluster):
    """Bodies were parsed before authentication: one unauthenticated 16 MiB body of 5.5M
    empty arrays cost the leader +408 MiB and 1.9 s, and moved the term; bad JSON without a
    token got 400, not 401."""
    leader = cluster.leader()
    assert _raw(cluster, leader, b"{not json")[0] == 401
    flood = b"[" + b"[]," * (5_500_000) + b"[]]"
    # Not the +408 MiB a parse cost, nor the term it moved; an honest caller is answered.
    with attack("HTTP: 3 unauthenticated 16 MiB JSON bodies", leader,
                honest=lambda: _honest_list(cluster, leader)):
        for _ in range(3):
            status, body = _raw(cluster, leader, flood)
            assert status == 401 and body["code"] == "UNAUTHENTICATED", body


def test_connect_and_the_generic_route_authenticate_before_reading_the_body(cluster):
    """Bad JSON without a token is 401 on Connect's path (its error JSON) and on /v1/rpc:
    the body was never parsed; with the admin token the same path answers."""
    leader = cluster.leader()
    status, body = _raw(cluster, leader, b"{not json", path="/gnomon.v1.JobService/CreateJob")
    assert (status, body["code"]) == (401, "unauthenticated"), body
    status, body = _raw(cluster, leader, b"{not json", path="/v1/rpc/JobService/CreateJob")
    assert (status, body["code"]) == (401, "UNAUTHENTICATED"), body
    status, body = _raw(cluster, leader, b"{}", path="/gnomon.v1.ClusterService/GetStatus",
                        token=cluster.admin_token())
    assert status == 200 and body["leaderNodeId"] == leader.node_id, body


def _honest_list(cluster, node) -> None:
    status, _headers, body = _call(cluster, node, "GET", "/v1/jobs?limit=1",
                                   token=cluster.admin_token())
    assert status == 200, body


@pytest.mark.resources
def test_a_body_over_the_parse_budget_or_too_deep_is_a_400_not_a_500(cluster):
    leader, admin = cluster.leader(), cluster.admin_token()
    with attack("HTTP: JSON nested 50,000 deep, 150,000 containers (authenticated)", leader,
                honest=lambda: _honest_list(cluster, leader)):
        status, body = _raw(cluster, leader, b"[" * 50_000 + b"]" * 50_000, token=admin)
        assert status == 400 and body["detail"] == "body: JSON nested too deeply", body
        status, body = _raw(cluster, leader,
                            b'{"spec": {"tasks": [' + b"{}," * 150_000 + b"{}]}}", token=admin)
        assert status == 400 and "http_max_json_containers" in body["detail"], body
    assert _raw(cluster, leader, b"[" * 100_000, token=None)[0] == 401
