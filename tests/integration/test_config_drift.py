"""Config drift cannot split replicas (issue 8 item 3): every value that changes what apply
does travels in the log, so nodes started with different local limits stay identical."""

from __future__ import annotations

import grpc
import pytest

from gnomon.node.local.cluster import LocalCluster
from gnomon.v1 import api_pb2, types_pb2
from tests.support.cluster import wait_for
from tests.support.jobs import every_second_job

pytestmark = pytest.mark.integration

# What each node's own config says (n2 keeps the defaults).
DRIFT = {
    "n1": {"dedupe_capacity": "2", "runs_retained_per_job": "1", "max_dead_letters": "1"},
    "n2": {},
    "n3": {"dedupe_capacity": "50", "runs_retained_per_job": "7", "dedupe_max_age_ms": "1"},
}


@pytest.fixture
def drifted(tmp_path):
    cluster = LocalCluster(tmp_path / "c", 3, {})
    for node in cluster.nodes:
        cluster.overrides = DRIFT[node.node_id]
        cluster.start_node(node.node_id)
    yield cluster
    cluster.stop()


def _converged(cluster: LocalCluster):
    statuses = [cluster.status(n) for n in cluster.nodes]
    return len({(s.applied_index, s.state_digest) for s in statuses}) == 1 and statuses


def test_nodes_with_different_local_limits_keep_equal_digests(drifted):
    """Seen: dedupe_capacity and runs_retained_per_job came from each node's config: a
    retried request was deduped on one node and applied on another, and ids diverged."""
    leader = drifted.leader()
    jobs = leader.jobs()
    for i in range(6):
        jobs.CreateJob(api_pb2.CreateJobRequest(
            request_id=f"r{i}", spec=every_second_job(f"tick{i}")), timeout=5)
    # Retry the oldest requests: a node remembering only 2 ids would apply them again.
    for i in range(3):
        try:
            jobs.CreateJob(api_pb2.CreateJobRequest(
                request_id=f"r{i}", spec=every_second_job(f"tick{i}")), timeout=5)
        except grpc.RpcError as exc:  # the cluster's limits forgot the id: applied again
            assert exc.code() == grpc.StatusCode.ALREADY_EXISTS, exc
    jobs.CreateJob(api_pb2.CreateJobRequest(request_id="last", spec=every_second_job("last")),
                   timeout=5)
    # Runs finish and are evicted (retention) while the jobs keep firing.
    statuses = wait_for(lambda: _converged(drifted), timeout_s=60,
                        what="equal digests on all replicas")
    # The first leader proposed its own config's limits, once; every node applies those.
    assert {s.limits_version for s in statuses} == {1}
    assert len({s.limits.SerializeToString() for s in statuses}) == 1
    assert statuses[0].limits.dedupe_capacity in (2, 100_000, 50)
    names = [j.spec.name for j in jobs.ListJobs(api_pb2.ListJobsRequest(), timeout=5).jobs]
    assert sorted(names) == sorted([f"tick{i}" for i in range(6)] + ["last"])


def test_set_limits_changes_every_replica_alike(drifted):
    leader = drifted.leader()
    reply = leader.cluster().SetLimits(api_pb2.SetLimitsRequest(
        request_id="s1", limits=types_pb2.ClusterLimits(runs_retained_per_job=2)), timeout=5)
    assert reply.limits.runs_retained_per_job == 2
    statuses = wait_for(lambda: _converged(drifted), timeout_s=30, what="equal digests")
    assert {s.limits.runs_retained_per_job for s in statuses} == {2}
    assert {s.limits_version for s in statuses} == {reply.limits_version}
