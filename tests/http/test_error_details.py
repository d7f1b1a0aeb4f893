"""Rich error details (google.rpc.Status in grpc-status-details-bin) over gRPC, the same
details in the HTTP problem, and Connect's unary protocol, against real nodes."""

from __future__ import annotations

import base64

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from gnomon.v1 import api_pb2, types_pb2
from tests.support.http import call

pytestmark = pytest.mark.integration

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
    # The generic route still answers, as before.
    r = call(leader.url, "POST", "/v1/rpc/ClusterService/GetStatus", {})
    assert r.status == 200 and r.json["nodeId"] == leader.node_id
