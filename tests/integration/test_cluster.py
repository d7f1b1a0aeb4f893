"""Three real node processes on 127.0.0.1: firing, failover, leases, restart."""

from __future__ import annotations

import signal
import time

import pytest

from gnomon.v1 import api_pb2, types_pb2
from tests.support.cluster import RawWorker, wait_for
from tests.support.jobs import every_second_job, once_job, runs_of

pytestmark = pytest.mark.integration

FAST = {"lease_ttl_ms": "2000", "heartbeat_interval_ms": "500"}








def test_job_every_second_fires_each_slot_on_time(make_cluster):
    cluster = make_cluster()
    leader = cluster.leader()
    job = leader.jobs().CreateJob(
        api_pb2.CreateJobRequest(request_id="c1", spec=every_second_job("tick")), timeout=5).job
    runs = wait_for(lambda: (r := runs_of(leader, job.job_id)) and len(r) >= 4 and r,
                    timeout_s=20, what="4 runs")
    slots = sorted(r.scheduled_for_ms for r in runs)
    assert all(s % 1000 == 0 for s in slots)
    assert slots == list(range(slots[0], slots[-1] + 1000, 1000)), "a slot was skipped"
    for r in runs:
        assert r.run_id == f"{job.job_id}@{r.scheduled_for_ms}"
        assert r.trigger == types_pb2.RUN_TRIGGER_SCHEDULE
        # Fired at its slot: never early, and well within the misfire grace.
        assert r.scheduled_for_ms <= r.created_ms < r.scheduled_for_ms + 5_000


def test_leader_kill_catches_up_missed_slots_without_doubles(make_cluster):
    cluster = make_cluster()
    leader = cluster.leader()
    job = leader.jobs().CreateJob(
        api_pb2.CreateJobRequest(request_id="c1", spec=every_second_job("tick")), timeout=5).job
    wait_for(lambda: len(runs_of(leader, job.job_id)) >= 2, timeout_s=20, what="2 runs")
    cluster.kill(leader.node_id, signal.SIGKILL)
    killed_at_ms = int(time.time() * 1000)
    new_leader = cluster.leader(exclude={leader.node_id})
    assert new_leader.node_id != leader.node_id

    def caught_up():
        runs = runs_of(new_leader, job.job_id)
        return runs if max(r.scheduled_for_ms for r in runs) >= killed_at_ms + 3000 else None

    runs = wait_for(caught_up, timeout_s=30, what="fires after the failover")
    slots = [r.scheduled_for_ms for r in runs]
    assert len(slots) == len(set(slots)), "a slot was fired twice"
    ordered = sorted(slots)
    assert ordered == list(range(ordered[0], ordered[-1] + 1000, 1000)), "a slot was lost"
    assert all(r.state != types_pb2.RUN_STATE_SKIPPED for r in runs)
    # The same history on the restarted old leader, once it caught up.
    cluster.start_node(leader.node_id)
    wait_for(lambda: {r.run_id for r in runs} <= {
        r.run_id for r in leader.jobs().ListRuns(api_pb2.ListRunsRequest(
            job=api_pb2.JobRef(job_id=job.job_id), limit=1000,
            consistency=api_pb2.CONSISTENCY_STALE), timeout=5).runs},
        timeout_s=30, what="the restarted node to replicate the runs")


def test_silent_worker_loses_lease_and_stale_completion_is_rejected(make_cluster):
    cluster = make_cluster(**FAST)
    leader = cluster.leader()
    spec = once_job("lease-me", retry=types_pb2.RetryPolicy(initial_backoff_ms=100, jitter=-1))
    job = leader.jobs().CreateJob(api_pb2.CreateJobRequest(request_id="c1", spec=spec),
                                  timeout=5).job
    silent = RawWorker(leader, "silent")
    silent.credits(1)
    first = silent.next("assign")
    assert first.idempotency_key == f"{first.lease.run_id}:main"
    assert first.job_id == job.job_id and first.attempt == 1
    # No heartbeat from `silent`: after the TTL the lease expires and another worker gets it.
    other = RawWorker(leader, "other")
    other.credits(1)
    second = other.next("assign", timeout_s=30)
    assert second.lease.run_id == first.lease.run_id
    assert second.lease.fencing_token > first.lease.fencing_token
    assert second.attempt == 2
    silent.complete(first.lease, b"zombie")
    ack = silent.next("report_ack")
    assert not ack.accepted and "fencing token" in ack.detail
    other.heartbeat([second.lease])
    hb = other.next("heartbeat_ack")
    assert second.lease.fencing_token in hb.valid_tokens
    other.complete(second.lease, b"done")
    assert other.next("report_ack").accepted
    run = leader.jobs().GetRun(api_pb2.GetRunRequest(run_id=first.lease.run_id), timeout=5).run
    assert run.state == types_pb2.RUN_STATE_SUCCEEDED
    assert run.tasks[0].result == b"done"
    assert run.tasks[0].fencing_token == second.lease.fencing_token
    silent.close()
    other.close()


def test_full_restart_keeps_jobs_runs_and_dead_letters(make_cluster):
    cluster = make_cluster(**FAST)
    leader = cluster.leader()
    jobs = leader.jobs()
    tick = jobs.CreateJob(api_pb2.CreateJobRequest(request_id="a", spec=every_second_job("tick")),
                          timeout=5).job
    doomed = jobs.CreateJob(api_pb2.CreateJobRequest(
        request_id="b", spec=once_job("doomed", queue="doom")), timeout=5).job
    worker = RawWorker(leader, "w1", queues=("doom",))
    worker.credits(1)
    assign = worker.next("assign")
    worker.fail(assign.lease, "boom: bad input", retryable=False)
    assert worker.next("report_ack").accepted
    worker.close()
    dead = jobs.ListDeadLetters(api_pb2.ListDeadLettersRequest(), timeout=5).dead_letters
    assert [(d.job_id, d.last_error) for d in dead] == [(doomed.job_id, "boom: bad input")]
    wait_for(lambda: len(runs_of(leader, tick.job_id)) >= 2, timeout_s=20, what="2 runs")
    jobs.PauseJob(api_pb2.PauseJobRequest(request_id="p", job=api_pb2.JobRef(job_id=tick.job_id)),
                  timeout=5)
    before = {r.run_id: r.state for r in runs_of(leader, tick.job_id)}

    for node in cluster.nodes:
        cluster.kill(node.node_id, signal.SIGKILL)
    for node in cluster.nodes:
        cluster.start_node(node.node_id)
    leader = cluster.leader()
    jobs = leader.jobs()
    listed = jobs.ListJobs(api_pb2.ListJobsRequest(), timeout=5).jobs
    assert sorted(j.spec.name for j in listed) == ["doomed", "tick"]
    assert {r.run_id: r.state for r in runs_of(leader, tick.job_id)} == before
    dead = jobs.ListDeadLetters(api_pb2.ListDeadLettersRequest(), timeout=5).dead_letters
    assert [(d.job_id, d.last_error) for d in dead] == [(doomed.job_id, "boom: bad input")]
    # Replaying the dead letter gives the task a fresh attempt series on the new leader.
    replayed = jobs.ReplayDeadLetters(
        api_pb2.ReplayDeadLettersRequest(request_id="r", all=True), timeout=5).replayed
    assert [(t.run_id, t.task_name) for t in replayed] == [(assign.lease.run_id, "main")]
    worker = RawWorker(leader, "w2", queues=("doom",))
    worker.credits(1)
    again = worker.next("assign")
    assert again.lease.run_id == assign.lease.run_id and again.attempt == 1
    assert again.lease.fencing_token > assign.lease.fencing_token
    worker.close()


def test_sigterm_hands_leadership_over_and_exits_cleanly(make_cluster):
    cluster = make_cluster()
    leader = cluster.leader()
    leader.jobs().CreateJob(api_pb2.CreateJobRequest(request_id="c", spec=once_job("x")),
                            timeout=5)
    leader.proc.send_signal(signal.SIGTERM)
    assert leader.proc.wait(timeout=20) == 0
    log = leader.log_path.read_text()
    assert "shutting down" in log and "stopped" in log
    new_leader = cluster.leader(exclude={leader.node_id})
    jobs = new_leader.jobs().ListJobs(api_pb2.ListJobsRequest(), timeout=5).jobs
    assert [j.spec.name for j in jobs] == ["x"]
