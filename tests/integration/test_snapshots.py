"""Log compaction into LMDB snapshots: restart from a snapshot, and a wiped follower that
catches up by receiving the leader's snapshot file."""

from __future__ import annotations

import shutil
import signal

import pytest

from gnomon.v1 import api_pb2
from tests.integration.cluster import wait_for
from tests.integration.test_cluster import every_second_job, runs_of

pytestmark = pytest.mark.integration

COMPACT_OFTEN = {
    "snapshot_min_entries": "20",
    "snapshot_min_time_s": "0.5",
    "runs_retained_per_job": "3",
}


def _stale(node, job_id):
    req = api_pb2.ListRunsRequest(
        job=api_pb2.JobRef(job_id=job_id), limit=1000, consistency=api_pb2.CONSISTENCY_STALE
    )
    return {r.run_id for r in node.jobs().ListRuns(req, timeout=5).runs}


def test_snapshot_restore_and_install_on_a_wiped_follower(make_cluster):
    cluster = make_cluster(**COMPACT_OFTEN)
    leader = cluster.leader()
    job = (
        leader.jobs()
        .CreateJob(
            api_pb2.CreateJobRequest(request_id="c", spec=every_second_job("tick")), timeout=5
        )
        .job
    )
    follower = next(n for n in cluster.nodes if n is not leader)
    wait_for(
        lambda: (follower.data_dir / "snapshot.lmdb").exists(),
        timeout_s=60,
        what="a snapshot file on the follower",
    )
    # Runs beyond runs_retained_per_job left memory for the history store and stay listed.
    wait_for(lambda: len(runs_of(leader, job.job_id)) >= 6, timeout_s=30, what="6 runs")

    cluster.kill(follower.node_id, signal.SIGKILL)
    shutil.rmtree(follower.data_dir)
    wait_for(
        lambda: (leader.data_dir / "snapshot.lmdb").exists(),
        timeout_s=60,
        what="a snapshot file on the leader",
    )
    expected = {r.run_id for r in runs_of(leader, job.job_id)}
    cluster.start_node(follower.node_id)
    wait_for(
        lambda: expected <= _stale(follower, job.job_id),
        timeout_s=60,
        what="the wiped follower to hold every run, history included",
    )

    for node in cluster.nodes:
        cluster.kill(node.node_id, signal.SIGKILL)
    for node in cluster.nodes:
        cluster.start_node(node.node_id)
    leader = cluster.leader()
    assert expected <= {r.run_id for r in runs_of(leader, job.job_id)}

    def converged():
        st = [cluster.status(n) for n in cluster.nodes]
        return len({(s.applied_index, s.state_digest) for s in st}) == 1

    wait_for(converged, timeout_s=30, what="equal state digests on all replicas")
