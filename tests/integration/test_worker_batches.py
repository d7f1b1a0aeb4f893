"""Batched worker messages (issue 14) against real nodes: a worker whose Hello sets
accepts_batches gets the Assigns queued for it at one moment in one ServerBatch, a Reports
message is recorded and acknowledged report by report, and a worker that did not ask gets
the one-message-per-Assign protocol unchanged."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gnomon.v1 import api_pb2, types_pb2
from tests.support.cluster import LocalCluster, RawWorker, module_cluster, wait_for

pytestmark = pytest.mark.integration

TASKS = 20
FAR_FUTURE_MS = 4_102_444_800_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request) -> Iterator[LocalCluster]:
    with module_cluster(tmp_path_factory.mktemp("batches"), request=request) as c:
        yield c


def _ready_runs(cluster: LocalCluster, queue: str) -> list[str]:
    """TASKS runs whose one task waits on `queue` (manual triggers of one job)."""
    jobs = cluster.leader().jobs()
    spec = types_pb2.JobSpec(
        name=queue, tenant="batches",
        schedule=types_pb2.Schedule(once=types_pb2.OnceSchedule(at_ms=FAR_FUTURE_MS)),
        tasks=[types_pb2.TaskSpec(name="main", queue=queue)])
    job = jobs.CreateJob(api_pb2.CreateJobRequest(request_id=f"create-{queue}", spec=spec),
                         timeout=30).job
    return [jobs.TriggerJob(api_pb2.TriggerJobRequest(
        request_id=f"{queue}-{i}", job=api_pb2.JobRef(job_id=job.job_id),
        overlap_policy=types_pb2.OVERLAP_POLICY_ALLOW_ALL), timeout=30).run.run_id
        for i in range(TASKS)]


def _run_states(cluster: LocalCluster, run_ids: list[str]) -> set[int]:
    jobs = cluster.leader().jobs()
    return {jobs.GetRun(api_pb2.GetRunRequest(run_id=r), timeout=10).run.state for r in run_ids}


def test_a_batching_worker_gets_one_server_batch_and_its_reports_are_each_acked(cluster):
    run_ids = _ready_runs(cluster, "batched")
    worker = RawWorker(cluster.leader(), "batcher", ("batched",), batches=True)
    try:
        worker.credits(TASKS)  # one dispatch round grants all of them at once
        leases = [worker.next("assign").lease for _ in range(TASKS)]
        assert sorted(lease.run_id for lease in leases) == sorted(run_ids)
        assert worker.batch_sizes and max(worker.batch_sizes) > 1, worker.batch_sizes

        worker.reports(leases[:-1], fails=[(leases[-1], "boom", False)])
        acks = [worker.next("report_ack") for _ in range(TASKS)]
        assert [a.accepted for a in acks] == [True] * TASKS
        assert sorted(a.lease.fencing_token for a in acks) == sorted(
            lease.fencing_token for lease in leases)
        wait_for(lambda: _run_states(cluster, [leases[-1].run_id])
                 == {types_pb2.RUN_STATE_FAILED}, timeout_s=30, what="the failed report")
        done = [lease.run_id for lease in leases[:-1]]
        wait_for(lambda: _run_states(cluster, done) == {types_pb2.RUN_STATE_SUCCEEDED},
                 timeout_s=30, what="every completed report recorded")
    finally:
        worker.close()


def test_a_worker_that_did_not_ask_gets_no_batch(cluster):
    run_ids = _ready_runs(cluster, "plain")
    worker = RawWorker(cluster.leader(), "plain", ("plain",))
    try:
        worker.credits(TASKS)
        leases = [worker.next("assign").lease for _ in range(TASKS)]
        for lease in leases:
            worker.complete(lease)
        assert all(worker.next("report_ack").accepted for _ in range(TASKS))
        wait_for(lambda: _run_states(cluster, run_ids) == {types_pb2.RUN_STATE_SUCCEEDED},
                 timeout_s=30, what="every run succeeded")
        assert worker.batch_sizes == []
    finally:
        worker.close()
