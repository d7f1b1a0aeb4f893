"""Request ids (gRPC `request_id`, HTTP `Idempotency-Key`) on a real secure cluster: a key is
scoped to the caller (its tenants, its token, the RPC), so two tenants' writers that pick the
same key each get their own write and their own answer, never the other's; the same caller
retrying the same request gets the first answer; the same caller reusing a key for a
different request is refused (FAILED_PRECONDITION, reason REQUEST_ID_REUSED; HTTP 422), naming
the key, and nothing changes.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import uuid

import grpc
import pytest

from gnomon.v1 import api_pb2, api_pb2_grpc, types_pb2
from tests.support.cluster import module_cluster

pytestmark = pytest.mark.integration

A, B = "acme", "globex"
# Jobs fire once, far ahead: the only runs are the ones the tests trigger.
FAR = 4_000_000_000_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    with module_cluster(tmp_path_factory.mktemp("request-ids"), request=request, http=True,
                        secure=True) as c:
        yield c


class Caller:
    """One token, on the leader's gRPC port (raw stubs) and its HTTPS port."""

    def __init__(self, cluster, token: str):
        self.cluster, self.token = cluster, token
        files = cluster.client_tls()
        self.creds = grpc.ssl_channel_credentials(*(open(files[k], "rb").read()
                                                    for k in ("ca_file", "key_file",
                                                              "cert_file")))
        self.ssl = ssl.create_default_context(cafile=files["ca_file"])
        self.ssl.load_cert_chain(files["cert_file"], files["key_file"])
        self.metadata = (("authorization", f"Bearer {token}"),)

    def _jobs(self) -> api_pb2_grpc.JobServiceStub:
        channel = grpc.secure_channel(self.cluster.leader().grpc_addr, self.creds)
        return api_pb2_grpc.JobServiceStub(channel)

    def grpc(self, method: str, request):
        return getattr(self._jobs(), method)(request, metadata=self.metadata, timeout=10)

    def grpc_error(self, method: str, request) -> grpc.RpcError:
        with pytest.raises(grpc.RpcError) as caught:
            self.grpc(method, request)
        return caught.value

    def http(self, method: str, path: str, body: dict | None = None, *,
             key: str | None = None) -> tuple[int, dict]:
        host, port = self.cluster.leader().http_addr.split(":")
        conn = http.client.HTTPSConnection(host, int(port), context=self.ssl, timeout=10)
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        if key is not None:
            headers["Idempotency-Key"] = key
        try:
            conn.request(method, path, body=json.dumps(body).encode() if body is not None
                         else None, headers=headers)
            r = conn.getresponse()
            return r.status, json.loads(r.read() or b"{}")
        finally:
            conn.close()


@pytest.fixture(scope="module")
def writers(cluster) -> dict[str, Caller]:
    """A tenant-writer token of each tenant."""
    admin = Caller(cluster, cluster.admin_token())
    out = {}
    for tenant in (A, B):
        admin_stub = api_pb2_grpc.AccessServiceStub(
            grpc.secure_channel(cluster.leader().grpc_addr, admin.creds))
        reply = admin_stub.CreateToken(api_pb2.CreateTokenRequest(
            request_id=f"writer-{tenant}", name=f"{tenant}-writer", role="tenant-writer",
            tenants=[tenant]), metadata=admin.metadata, timeout=10)
        out[tenant] = Caller(cluster, reply.secret)
    return out


def _spec(tenant: str, name: str, payload: bytes = b"") -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        tenant=tenant, name=name,
        schedule=types_pb2.Schedule(once=types_pb2.OnceSchedule(at_ms=FAR)),
        tasks=[types_pb2.TaskSpec(name="main", queue="q", payload=payload)])


def _spec_json(tenant: str, name: str, payload: bytes = b"") -> dict:
    task: dict = {"name": "main", "queue": "q"}
    if payload:  # a JSON string is base64 of the raw bytes
        task["payload"] = base64.b64encode(payload).decode()
    return {"tenant": tenant, "name": name, "schedule": {"once": {"atMs": str(FAR)}},
            "tasks": [task]}


def _key(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"


def _reason(exc: grpc.RpcError) -> str:
    return dict(exc.trailing_metadata() or ()).get("gnomon-reason", "")


def _job(caller: Caller, tenant: str, name: str) -> types_pb2.Job:
    return caller.grpc("GetJob", api_pb2.GetJobRequest(
        job=api_pb2.JobRef(tenant=tenant, name=name))).job


def _absent(caller: Caller, tenant: str, name: str) -> bool:
    try:
        _job(caller, tenant, name)
    except grpc.RpcError as exc:
        return exc.code() == grpc.StatusCode.NOT_FOUND
    return False


def test_create_job_over_http_with_another_tenants_idempotency_key(writers):
    key = _key("release-2026-12-02")
    status, b_body = writers[B].http(
        "POST", "/v1/jobs", {"spec": _spec_json(B, "b-release", b"b-secret")}, key=key)
    assert status == 201, b_body
    status, a_body = writers[A].http("POST", "/v1/jobs", {"spec": _spec_json(A, "a-release")},
                                     key=key)
    # A gets its own job, never B's (tenant, name, payload), and A's job exists.
    assert status == 201, a_body
    assert a_body["job"]["spec"]["tenant"] == A and a_body["job"]["spec"]["name"] == "a-release"
    assert a_body["job"]["jobId"] != b_body["job"]["jobId"]
    assert _job(writers[A], A, "a-release").job_id == a_body["job"]["jobId"]
    assert _job(writers[B], B, "b-release").job_id == b_body["job"]["jobId"]
    # The same caller retrying the same request: the first answer, one job.
    status, again = writers[A].http("POST", "/v1/jobs", {"spec": _spec_json(A, "a-release")},
                                    key=key)
    assert status == 201 and again["job"]["jobId"] == a_body["job"]["jobId"], again
    # The same caller, the same key, another body: 422 naming the key; nothing created.
    status, reused = writers[A].http("POST", "/v1/jobs", {"spec": _spec_json(A, "a-other")},
                                     key=key)
    assert status == 422, reused
    assert reused["code"] == "FAILED_PRECONDITION" and reused["reason"] == "REQUEST_ID_REUSED"
    assert reused["field"] == "request_id" and repr(key) in reused["detail"], reused
    assert _absent(writers[A], A, "a-other")


def test_create_job_over_grpc_with_another_tenants_request_id(writers):
    key = _key("create")
    b_job = writers[B].grpc("CreateJob", api_pb2.CreateJobRequest(
        request_id=key, spec=_spec(B, "b-grpc", b"b-secret"))).job
    a_job = writers[A].grpc("CreateJob", api_pb2.CreateJobRequest(
        request_id=key, spec=_spec(A, "a-grpc"))).job
    assert (a_job.spec.tenant, a_job.spec.name) == (A, "a-grpc")
    assert a_job.job_id != b_job.job_id and a_job.spec.tasks[0].payload == b""
    assert _job(writers[A], A, "a-grpc").job_id == a_job.job_id
    again = writers[A].grpc("CreateJob", api_pb2.CreateJobRequest(
        request_id=key, spec=_spec(A, "a-grpc"))).job
    assert again.job_id == a_job.job_id
    exc = writers[A].grpc_error("CreateJob", api_pb2.CreateJobRequest(
        request_id=key, spec=_spec(A, "a-grpc-other")))
    assert exc.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert _reason(exc) == "REQUEST_ID_REUSED" and repr(key) in exc.details(), exc.details()
    assert _absent(writers[A], A, "a-grpc-other")


def _create(caller: Caller, tenant: str, name: str) -> str:
    return caller.grpc("CreateJob", api_pb2.CreateJobRequest(
        request_id=_key(f"make-{name}"), spec=_spec(tenant, name))).job.job_id


def _trigger(caller: Caller, job_id: str, key: str) -> types_pb2.Run:
    return caller.grpc("TriggerJob", api_pb2.TriggerJobRequest(
        request_id=key, job=api_pb2.JobRef(job_id=job_id))).run


def test_trigger_job_with_another_tenants_request_id(writers):
    a_job, a_other = _create(writers[A], A, "a-trig"), _create(writers[A], A, "a-trig-2")
    b_job = _create(writers[B], B, "b-trig")
    key = _key("trigger")
    b_run = _trigger(writers[B], b_job, key)
    a_run = _trigger(writers[A], a_job, key)
    # A gets a run of its own job, and that run exists.
    assert (a_run.job_id, a_run.tenant) == (a_job, A), a_run
    assert a_run.run_id != b_run.run_id
    got = writers[A].grpc("GetRun", api_pb2.GetRunRequest(run_id=a_run.run_id)).run
    assert got.job_id == a_job and got.state == types_pb2.RUN_STATE_RUNNING
    # A retry: the same run, no second one.
    assert _trigger(writers[A], a_job, key).run_id == a_run.run_id
    runs = writers[A].grpc("ListRuns", api_pb2.ListRunsRequest(
        job=api_pb2.JobRef(job_id=a_job))).runs
    assert [r.run_id for r in runs] == [a_run.run_id]
    # The key on another of A's jobs: refused, no run.
    exc = writers[A].grpc_error("TriggerJob", api_pb2.TriggerJobRequest(
        request_id=key, job=api_pb2.JobRef(job_id=a_other)))
    assert exc.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert _reason(exc) == "REQUEST_ID_REUSED" and repr(key) in exc.details()
    assert not writers[A].grpc("ListRuns", api_pb2.ListRunsRequest(
        job=api_pb2.JobRef(job_id=a_other))).runs


def test_cancel_run_with_another_tenants_request_id(writers):
    a_job, b_job = _create(writers[A], A, "a-cancel"), _create(writers[B], B, "b-cancel")
    a_run = _trigger(writers[A], a_job, _key("t"))
    b_run = _trigger(writers[B], b_job, _key("t"))
    key = _key("cancel")
    got_b = writers[B].grpc("CancelRun", api_pb2.CancelRunRequest(
        request_id=key, run_id=b_run.run_id)).run
    assert got_b.run_id == b_run.run_id and got_b.state == types_pb2.RUN_STATE_CANCELLED
    got_a = writers[A].grpc("CancelRun", api_pb2.CancelRunRequest(
        request_id=key, run_id=a_run.run_id)).run
    # A gets its own run back, cancelled.
    assert (got_a.run_id, got_a.tenant) == (a_run.run_id, A), got_a
    assert got_a.state == types_pb2.RUN_STATE_CANCELLED
    now = writers[A].grpc("GetRun", api_pb2.GetRunRequest(run_id=a_run.run_id)).run
    assert now.state == types_pb2.RUN_STATE_CANCELLED
    # Over HTTP too: the same caller's retry gets the first answer; another run is refused.
    status, again = writers[A].http("POST", f"/v1/runs/{a_run.run_id}/cancel", {}, key=key)
    assert status == 200 and again["run"]["runId"] == a_run.run_id, again
    other = _trigger(writers[A], a_job, _key("t"))
    status, reused = writers[A].http("POST", f"/v1/runs/{other.run_id}/cancel", {}, key=key)
    assert status == 422 and reused["reason"] == "REQUEST_ID_REUSED", reused
    assert repr(key) in reused["detail"]
    still = writers[A].grpc("GetRun", api_pb2.GetRunRequest(run_id=other.run_id)).run
    assert still.state == types_pb2.RUN_STATE_RUNNING
