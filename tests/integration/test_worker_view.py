"""The worker's view is the truth (issue 8 items 5-8), against real node processes and a
worker that speaks the stream protocol by hand (no SDK, no fake server)."""

from __future__ import annotations

import grpc
import pytest

from gnomon.v1 import api_pb2, types_pb2, worker_pb2
from tests.support.cluster import RawWorker, wait_for
from tests.support.jobs import once_job, runs_of

pytestmark = pytest.mark.integration

# Heartbeats far apart: anything the worker learns quickly, it learned from a push.
SLOW_HEARTBEATS = {"lease_ttl_ms": "30000", "heartbeat_interval_ms": "10000",
                   "max_result_bytes": "100", "max_output_tail_bytes": "16"}


@pytest.fixture
def cluster(make_cluster):
    return make_cluster(**SLOW_HEARTBEATS)


def _leased(cluster, name: str, queue: str = "default"):
    leader = cluster.leader()
    job = leader.jobs().CreateJob(api_pb2.CreateJobRequest(
        request_id=f"c-{name}", spec=once_job(name, queue=queue)), timeout=5).job
    worker = RawWorker(leader, f"w-{name}", (queue,))
    worker.credits(1)
    return leader, job, worker, worker.next("assign")


def test_cancel_run_is_pushed_to_the_worker_holding_the_lease(cluster):
    """Seen: the lease ended before the dispatcher looked up its holder, so no Cancel was
    sent; the worker only learned at its next heartbeat."""
    leader, _job, worker, assign = _leased(cluster, "cancel-me")
    leader.jobs().CancelRun(api_pb2.CancelRunRequest(
        request_id="x", run_id=assign.lease.run_id, reason="operator"), timeout=5)
    cancel = worker.next("cancel", timeout_s=5)  # no heartbeat was ever sent
    assert cancel.lease.fencing_token == assign.lease.fencing_token
    assert cancel.reason == "operator"
    worker.close()


def test_delete_with_cancel_running_pushes_cancel(cluster):
    leader, job, worker, assign = _leased(cluster, "delete-me")
    leader.jobs().DeleteJob(api_pb2.DeleteJobRequest(
        request_id="d", job=api_pb2.JobRef(job_id=job.job_id), cancel_running=True), timeout=5)
    cancel = worker.next("cancel", timeout_s=5)
    assert cancel.lease.fencing_token == assign.lease.fencing_token
    assert cancel.reason == "job deleted"
    worker.close()


def test_oversized_result_is_answered_not_accepted_with_the_reason(cluster):
    """Seen: a result over max_result_bytes dead-lettered the task while the worker was told
    accepted=true."""
    leader, _job, worker, assign = _leased(cluster, "too-big")
    worker.complete(assign.lease, b"x" * 101)
    ack = worker.next("report_ack")
    assert not ack.accepted and not ack.retry and ack.reason == "RECORDED_AS_FAILURE"
    assert "max_result_bytes" in ack.detail
    run = leader.jobs().GetRun(api_pb2.GetRunRequest(run_id=assign.lease.run_id), timeout=5).run
    assert run.tasks[0].state == types_pb2.TASK_STATE_DEAD
    # A stale report (the task is no longer leased) is refused for good, not "try again".
    worker.complete(assign.lease, b"ok")
    again = worker.next("report_ack")
    assert not again.accepted and not again.retry and again.reason == "STALE_LEASE"
    worker.close()


def test_output_tail_exit_code_and_duration_are_stored_with_the_attempt(cluster):
    """Seen: workers sent output_tail; the node never stored it and nothing returned it."""
    leader, _job, worker, assign = _leased(cluster, "talkative")
    worker._out.put(worker_pb2.WorkerMessage(fail=worker_pb2.Fail(
        lease=assign.lease, error="exit status 3", retryable=False,
        output_tail="line one\nline two: the end", exit_code=3, duration_ms=1234)))
    assert worker.next("report_ack").accepted
    run = leader.jobs().GetRun(api_pb2.GetRunRequest(run_id=assign.lease.run_id), timeout=5).run
    attempt = run.tasks[0].attempts[-1]
    assert attempt.outcome == types_pb2.ATTEMPT_OUTCOME_FAILED
    assert (attempt.exit_code, attempt.duration_ms) == (3, 1234)
    assert attempt.output_tail == "ine two: the end"  # the newest 16 bytes (the limit)
    assert attempt.fencing_token == assign.lease.fencing_token
    assert attempt.worker_id == "w-talkative" and attempt.error == "exit status 3"
    worker.close()


def test_deleting_a_job_cancels_its_queued_runs_and_keeps_them_listable(cluster):
    """Seen: a deleted job's queued runs stayed active forever when no worker served the
    queue; run list on the deleted job said NOT_FOUND; ListRuns on an unknown job said OK."""
    leader = cluster.leader()
    job = leader.jobs().CreateJob(api_pb2.CreateJobRequest(
        request_id="c", spec=once_job("orphan", queue="nobody-serves-this")), timeout=5).job
    wait_for(lambda: runs_of(leader, job.job_id), timeout_s=20, what="the one-shot's run")
    leader.jobs().DeleteJob(api_pb2.DeleteJobRequest(
        request_id="d", job=api_pb2.JobRef(job_id=job.job_id)), timeout=5)
    runs = runs_of(leader, job.job_id)
    assert [r.state for r in runs] == [types_pb2.RUN_STATE_CANCELLED]
    assert runs[0].tasks[0].state == types_pb2.TASK_STATE_CANCELLED
    status = leader.cluster().GetStatus(api_pb2.GetStatusRequest(), timeout=5)
    assert status.active_runs == 0
    with pytest.raises(grpc.RpcError) as err:
        runs_of(leader, "j999")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "job.job_id" in err.value.details()


def test_a_drained_worker_gets_no_new_lease_and_finishes_the_one_it_holds(cluster):
    """DrainWorker: the leader grants the worker nothing more though it has credit; the
    lease it holds is still renewed and its completion accepted; ListWorkers shows it
    draining. An id not connected is NOT_FOUND."""
    leader, job, worker, assign = _leased(cluster, "drain-me", queue="drainq")
    ops = leader.operations()
    drained = ops.DrainWorker(api_pb2.DrainWorkerRequest(worker_id="w-drain-me"), timeout=5)
    assert drained.worker.draining and drained.worker.leases_held == 1
    worker.credits(1)
    run = leader.jobs().TriggerJob(api_pb2.TriggerJobRequest(
        request_id="t-drain", job=api_pb2.JobRef(job_id=job.job_id)), timeout=5).run
    other = RawWorker(leader, "w-drain-other", ("drainq",))
    other.credits(1)
    assert other.next("assign").lease.run_id == run.run_id
    worker.heartbeat([assign.lease])
    assert list(worker.next("heartbeat_ack").valid_tokens) == [assign.lease.fencing_token]
    worker.complete(assign.lease)
    assert worker.next("report_ack").accepted
    listed = {w.worker_id: w for w in ops.ListWorkers(api_pb2.ListWorkersRequest(),
                                                       timeout=5).workers}
    assert listed["w-drain-me"].draining and listed["w-drain-me"].leases_held == 0
    assert listed["w-drain-me"].credits == 1  # the credit announced after the drain: unused
    assert not listed["w-drain-other"].draining
    with pytest.raises(grpc.RpcError) as err:
        ops.DrainWorker(api_pb2.DrainWorkerRequest(worker_id="nobody"), timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "worker_id: no worker 'nobody'" in err.value.details()
    worker.close()
    other.close()
