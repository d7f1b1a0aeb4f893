"""Log compaction into LMDB snapshots: restart from a snapshot, and a wiped follower that
catches up by receiving the leader's snapshot file and copies the run history it lacks from a
peer (the history store is not part of the snapshot)."""

from __future__ import annotations

import shutil
import signal

import pytest

from gnomon.v1 import api_pb2
from tests.support.cluster import wait_for
from tests.support.jobs import create_jobs, finished_runs, runs_of

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
    (job_id,) = create_jobs(leader, ["j"])
    follower = next(n for n in cluster.nodes if n is not leader)
    wait_for(
        lambda: (follower.data_dir / "snapshot.lmdb").exists(),
        timeout_s=60,
        what="a snapshot file on the follower",
    )
    # Finished runs beyond runs_retained_per_job leave memory for the history store.
    finished_runs(leader, job_id, 8, "a")

    cluster.kill(follower.node_id, signal.SIGKILL)
    shutil.rmtree(follower.data_dir)
    wait_for(
        lambda: (leader.data_dir / "snapshot.lmdb").exists(),
        timeout_s=60,
        what="a snapshot file on the leader",
    )
    expected = {r.run_id for r in runs_of(leader, job_id)}
    assert len(expected) == 8
    cluster.start_node(follower.node_id)
    wait_for(
        lambda: expected <= _stale(follower, job_id),
        timeout_s=60,
        what="the wiped follower to hold every run, history included",
    )
    # The copied runs are readable before the backfill logs that it is complete.
    wait_for(lambda: "history backfill from" in follower.log_path.read_text(), timeout_s=30,
             what="the follower to log its history backfill")

    for node in cluster.nodes:
        cluster.kill(node.node_id, signal.SIGKILL)
    for node in cluster.nodes:
        cluster.start_node(node.node_id)
    leader = cluster.leader()
    assert expected <= {r.run_id for r in runs_of(leader, job_id)}

    def converged():
        st = [cluster.status(n) for n in cluster.nodes]
        return len({(s.applied_index, s.state_digest) for s in st}) == 1

    wait_for(converged, timeout_s=30, what="equal state digests on all replicas")
