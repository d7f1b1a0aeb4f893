"""Leases converge under leader churn (issue 8 item 12): a task held by a dead worker is
re-offered within about one lease TTL plus one election however often the leader changes,
and a reconnecting worker's Hello expires at once the leases it does not list."""

from __future__ import annotations

import signal
import time

import pytest

from gnomon.v1 import api_pb2, types_pb2
from tests.support.cluster import RawWorker
from tests.support.jobs import once_job

pytestmark = pytest.mark.integration

TTL_MS = 6_000
TIMING = {"lease_ttl_ms": str(TTL_MS), "heartbeat_interval_ms": "1000",
          "snapshot_min_entries": "50", "snapshot_min_time_s": "2"}
NO_RETRY_WAIT = types_pb2.RetryPolicy(initial_backoff_ms=1, max_backoff_ms=1, jitter=-1)


def _task(node, run_id: str) -> types_pb2.TaskInstance:
    return node.jobs().GetRun(api_pb2.GetRunRequest(run_id=run_id), timeout=5).run.tasks[0]


def test_dead_workers_lease_expires_under_leader_churn(make_cluster):
    """Seen: with a leader change every ~10 s a task whose worker died re-ran only after
    133 s: every new leader re-armed the lease at a full TTL (plus an election) before
    expiring anything. Here the leader is killed every 3 s, half the TTL."""
    cluster = make_cluster(**TIMING)
    leader = cluster.leader()
    job = leader.jobs().CreateJob(api_pb2.CreateJobRequest(
        request_id="c1", spec=once_job("held", retry=NO_RETRY_WAIT)), timeout=5).job
    worker = RawWorker(leader, "doomed")
    worker.credits(1)
    lease = worker.next("assign").lease
    assert lease.run_id.startswith(job.job_id)
    worker.close()  # the worker dies holding the lease: no report, no heartbeat
    died = time.monotonic()

    expired_after = None
    while time.monotonic() - died < 45:
        time.sleep(3)  # churn period (the fault schedule, not a synchronisation)
        current = cluster.leader(timeout_s=30)
        if _task(current, lease.run_id).fencing_token == lease.fencing_token and \
                _task(current, lease.run_id).state == types_pb2.TASK_STATE_LEASED:
            cluster.kill(current.node_id, signal.SIGKILL)
            cluster.start_node(current.node_id)
            continue
        expired_after = time.monotonic() - died
        break
    assert expired_after is not None, "the lease never expired while leaders kept changing"
    task = _task(cluster.leader(), lease.run_id)
    assert task.attempts[0].outcome == types_pb2.ATTEMPT_OUTCOME_EXPIRED
    assert task.attempts[0].fencing_token == lease.fencing_token
    # About one TTL plus one election (and the churn period we look at it with; every kill
    # also costs the survivors new TLS links on the Raft port): 18.2 s was seen on a loaded
    # machine. A leader that restarted every lease from a full TTL would never get there.
    assert expired_after < 4 * TTL_MS / 1000, expired_after


def test_hello_expires_the_leases_a_reconnecting_worker_does_not_list(make_cluster):
    cluster = make_cluster(**TIMING)
    leader = cluster.leader()
    leader.jobs().CreateJob(api_pb2.CreateJobRequest(
        request_id="c1", spec=once_job("held", retry=NO_RETRY_WAIT)), timeout=5)
    first = RawWorker(leader, "restarting")
    first.credits(1)
    lease = first.next("assign").lease
    first.close()
    # The worker process restarted and lost the task: its Hello lists nothing.
    again = RawWorker(leader, "restarting")
    assert list(again.welcome.resumed_tokens) == []
    again.credits(1)
    reassigned = again.next("assign", timeout_s=TTL_MS / 2000)  # well before the TTL
    assert reassigned.lease.run_id == lease.run_id
    assert reassigned.lease.fencing_token > lease.fencing_token
    again.close()
