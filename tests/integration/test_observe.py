"""What an operator sees of real nodes: every metric moves, `promtool check metrics` is clean,
health is NOT_SERVING without a leader, reflection lists the services, logs are one JSON
event per line."""

from __future__ import annotations

import json
import shutil
import subprocess

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from gnomon.client import (
    Client,
    Conflict,
    IntervalSchedule,
    JobSpec,
    OnceSchedule,
    RetryPolicy,
    TaskSpec,
)
from gnomon.node.local.cluster import LocalCluster, wait_for
from tests.support.cluster import RawWorker, module_cluster
from tests.support.metrics import samples, scrape, total

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

FAR_FUTURE_MS = 4_102_444_800_000
OVERRIDES = {
    "lease_ttl_ms": "2000",
    "heartbeat_interval_ms": "500",
    "snapshot_min_entries": "30",
    "snapshot_min_time_s": "0.5",
    "log_format": "json",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    with module_cluster(tmp_path_factory.mktemp("observe"), OVERRIDES, request=request,
                        metrics=True) as c:
        yield c








def _spec(name: str, queue: str, schedule, *, attempts: int = 1) -> JobSpec:
    return JobSpec(name=name, schedule=schedule,
                   tasks=[TaskSpec(name="main", queue=queue,
                                   retry=RetryPolicy(max_attempts=attempts))])


def test_every_metric_moves(cluster):
    leader = cluster.leader()
    before = samples(scrape(leader.metrics_addr))
    with Client(cluster.servers, timeout_s=20) as client:
        client.create_job(_spec("fast", "q-observe", IntervalSchedule(interval_ms=300)))
        client.create_job(_spec("nobody", "q-nobody", IntervalSchedule(interval_ms=300)))
        # A SetLimits at a stale version is rejected by the state machine (every replica).
        with pytest.raises(Conflict):
            client.set_limits(dedupe_capacity=50_000, expected_version=999)
        worker = RawWorker(leader, "w-observe", ("q-observe",))
        worker.credits(5)
        ok = worker.next("assign")
        worker.heartbeat([ok.lease])
        worker.complete(ok.lease)
        bad = worker.next("assign")
        worker.fail(bad.lease, "boom", retryable=False)  # one attempt: dead-lettered
        held = worker.next("assign")
        worker.heartbeat([held.lease])
        during = samples(scrape(leader.metrics_addr))
        worker.close()  # the lease it still holds expires

        def moved() -> dict[str, float] | None:
            s = samples(scrape(leader.metrics_addr))
            return s if (total(s, "gnomon_leases_expired_total") > 0
                         and total(s, "gnomon_snapshots_total") > 0
                         and s.get('gnomon_runs_ended_total{outcome="failed"}', 0) > 0) else None

        after = wait_for(moved, timeout_s=60, what="lease expiry, a snapshot, a failed run")
        client.delete_job(name="fast")
        client.delete_job(name="nobody")

    grew = [
        "gnomon_applied_entries_total", "gnomon_commands_total", "gnomon_rejected_total",
        "gnomon_batch_commands_count", "gnomon_commit_seconds_count", "gnomon_fires_total",
        "gnomon_fire_lateness_seconds_count", "gnomon_runs_ended_total",
        "gnomon_leases_granted_total", "gnomon_leases_expired_total",
        "gnomon_leases_renewed_total", "gnomon_snapshots_total", "process_cpu_seconds_total",
        "gnomon_raft_journal_entries_total", "gnomon_raft_journal_fsyncs_total",
    ]
    for name in grew:
        assert total(after, name) > total(before, name), name
    assert after['gnomon_rejected_total{code="FAILED_PRECONDITION"}'] >= 1
    assert after['gnomon_runs_ended_total{outcome="succeeded"}'] >= 1
    # Gauges and scrape-time figures: non-zero while the work was there.
    assert during["gnomon_workers_connected"] >= 1
    assert during["gnomon_leases_held"] >= 1
    assert after['gnomon_queue_ready_tasks{queue="q-nobody"}'] >= 1
    assert after['gnomon_queue_oldest_ready_age_seconds{queue="q-nobody"}'] > 0
    assert after["gnomon_ready_tasks"] >= 1
    assert after['gnomon_tasks{state="ready"}'] >= 1
    assert after['gnomon_runs{state="running"}'] >= 1
    assert after["gnomon_dead_letters"] >= 1
    assert after["gnomon_jobs"] == 2
    for name in ("gnomon_raft_term", "gnomon_raft_commit_index", "gnomon_raft_applied_index",
                 "gnomon_leader_changes_total", "gnomon_is_leader", "gnomon_health_serving",
                 "gnomon_raft_has_leader", "gnomon_raft_members", "gnomon_snapshot_size_bytes",
                 "gnomon_snapshot_index", "gnomon_history_store_bytes",
                 "gnomon_data_dir_free_bytes", "process_resident_memory_bytes"):
        assert after[name] > 0, name
    assert after["gnomon_snapshot_duration_seconds"] > 0
    assert "gnomon_pending_proposals" in after  # moves: tests/unit/node/test_observe.py
    assert total(after, "python_gc_collections_total") > 0
    assert total(after, "gnomon_dead_letters_evicted_total") == 0


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (Debian package prometheus; .ci/run installs it)")
def test_promtool_check_metrics_is_clean(cluster):
    for node in cluster.nodes:
        text = scrape(node.metrics_addr)
        out = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                             capture_output=True, timeout=30)
        assert out.returncode == 0 and not out.stdout.strip() and not out.stderr.strip(), (
            out.stdout.decode() + out.stderr.decode())


def _health(node, service: str = "") -> int:
    stub = health_pb2_grpc.HealthStub(node._channel())
    return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2).status


def test_health_per_service_and_reflection(cluster):
    serving = health_pb2.HealthCheckResponse.SERVING
    for node in cluster.nodes:
        wait_for(lambda n=node: _health(n) == serving, timeout_s=20, what=f"{node.node_id} serving")
        for service in ("gnomon.v1.JobService", "gnomon.v1.WorkerService",
                        "gnomon.v1.ClusterService"):
            assert _health(node, service) == serving
    stub = reflection_pb2_grpc.ServerReflectionStub(cluster.nodes[0]._channel())
    reply = next(stub.ServerReflectionInfo(iter([
        reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5))
    names = {s.name for s in reply.list_services_response.service}
    assert {"gnomon.v1.JobService", "gnomon.v1.ClusterService", "gnomon.v1.WorkerService",
            "grpc.health.v1.Health"} <= names
    reply = next(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(
        file_containing_symbol="gnomon.v1.JobService")]), timeout=5))
    assert reply.file_descriptor_response.file_descriptor_proto


def test_json_logs_one_event_per_line_with_fields(cluster):
    with Client(cluster.servers, timeout_s=20) as client:
        job = client.create_job(_spec("logged", "q-log", OnceSchedule(at_ms=FAR_FUTURE_MS)))
        client.delete_job(job.job_id)
    text = cluster.nodes[0].log_path.read_text()
    events = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert events, "no log lines"
    for event in events:
        assert {"ts", "level", "logger", "msg", "node"} <= set(event), event
    assert any("term" in e for e in events)
    assert all(e["node"] == "n1" for e in events)
    # The lease that expired in test_every_metric_moves was logged by the leader with its
    # job, run and token.
    everywhere = [json.loads(line) for n in cluster.nodes
                  for line in n.log_path.read_text().splitlines() if line.strip()]
    expired = [e for e in everywhere if "expired" in e["msg"] and "token" in e]
    assert expired and {"job", "run", "token"} <= set(expired[0]), expired[:1]


def test_health_not_serving_without_a_leader(tmp_path):
    """Two of three nodes stopped: the one left has no quorum and says NOT_SERVING, while
    ClusterService (liveness) still serves."""
    c = LocalCluster(tmp_path, 3, {"log_format": "text"}).start()
    try:
        c.leader()
        survivor = c.nodes[0]
        wait_for(lambda: _health(survivor) == health_pb2.HealthCheckResponse.SERVING,
                 timeout_s=20, what="serving")
        c.kill("n2")
        c.kill("n3")
        wait_for(lambda: _health(survivor) == health_pb2.HealthCheckResponse.NOT_SERVING,
                 timeout_s=30, what="NOT_SERVING without quorum")
        assert _health(survivor, "gnomon.v1.JobService") == \
            health_pb2.HealthCheckResponse.NOT_SERVING
        assert _health(survivor, "gnomon.v1.ClusterService") == \
            health_pb2.HealthCheckResponse.SERVING
        c.start_node("n2")
        wait_for(lambda: _health(survivor) == health_pb2.HealthCheckResponse.SERVING,
                 timeout_s=30, what="serving again with quorum")
        # Text logs: one record per line, the node's id on each.
        lines = [ln for ln in survivor.log_path.read_text().splitlines() if ln.strip()]
        assert lines and all(" n1 " in ln for ln in lines), lines[:5]
    except grpc.RpcError:
        print(c.logs())
        raise
    finally:
        c.stop()
