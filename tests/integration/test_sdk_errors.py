"""Errors by code, not by text, against real nodes: a stale ``expected_version`` comes back as
FAILED_PRECONDITION with the ``gnomon-reason: VERSION_CONFLICT`` trailer, which the client
reads to raise ``Conflict``; other FAILED_PRECONDITIONs carry no reason."""

from __future__ import annotations

import grpc
import pytest

from gnomon.client import (
    AsyncClient,
    Conflict,
    FailedPrecondition,
    IntervalSchedule,
    JobSpec,
    OnceSchedule,
)
from gnomon.v1 import api_pb2, api_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _servers(cluster) -> str:
    return cluster.servers


async def test_a_stale_version_is_a_conflict_by_its_reason(make_cluster):
    cluster = make_cluster()
    cluster.leader()
    async with AsyncClient(_servers(cluster), timeout_s=30) as client:
        job = await client.create_job(JobSpec.single("versioned", IntervalSchedule(3_600_000)))
        newer = JobSpec.single("versioned", IntervalSchedule(7_200_000))
        with pytest.raises(Conflict) as update:
            await client.update_job(job.job_id, newer, expected_version=job.version + 5)
        with pytest.raises(Conflict) as delete:
            await client.delete_job(job.job_id, expected_version=job.version + 5)
        limits = (await client.cluster_status()).limits_version
        with pytest.raises(Conflict) as set_limits:
            await client.set_limits(max_dead_letters=500, expected_version=limits + 5)
        for err in (update.value, delete.value, set_limits.value):
            assert err.code is grpc.StatusCode.FAILED_PRECONDITION
            assert err.reason == "VERSION_CONFLICT"
        # The same request id for a different request: a wrong state, not a conflict.
        await client.create_job(
            JobSpec.single("one", OnceSchedule(4_102_444_800_000)), request_id="used-once")
        with pytest.raises(FailedPrecondition) as reused:
            await client.create_job(
                JobSpec.single("other", OnceSchedule(4_102_444_800_000)), request_id="used-once"
            )
        assert type(reused.value) is FailedPrecondition
        assert reused.value.reason == "REQUEST_ID_REUSED"


def test_the_reason_is_trailing_metadata(make_cluster):
    # What a client in another language sees: the status and the trailer, no message parsing.
    cluster = make_cluster()
    leader = cluster.leader()
    with grpc.insecure_channel(leader.grpc_addr) as channel:
        jobs = api_pb2_grpc.JobServiceStub(channel)
        spec = api_pb2.CreateJobRequest(request_id="create-raw")
        spec.spec.name = "raw"
        spec.spec.schedule.interval.interval_ms = 3_600_000
        spec.spec.tasks.add(name="main")
        job = jobs.CreateJob(spec, timeout=30).job
        stale = api_pb2.DeleteJobRequest(
            request_id="delete-raw", expected_version=job.version + 1
        )
        stale.job.job_id = job.job_id
        with pytest.raises(grpc.RpcError) as e:
            jobs.DeleteJob(stale, timeout=30)
    assert e.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert ("gnomon-reason", "VERSION_CONFLICT") in tuple(e.value.trailing_metadata())
