"""Weighted fair dispatch and concurrency caps per tenant (node/leader/dispatch.py), on real nodes.

One worker drains a shared queue that two tenants flood: grants alternate by weight (1:3)
while both have work; a tenant capped at max_concurrency never holds more leases than that
and its other tasks wait (counted), then go as leases end.
"""

from __future__ import annotations

import urllib.request

import pytest

from gnomon.client import Client
from gnomon.v1 import api_pb2, types_pb2
from tests.support.cluster import RawWorker

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    from gnomon.node.local.cluster import LocalCluster

    root = tmp_path_factory.mktemp("fair")
    cluster = LocalCluster(root, metrics=True).start()
    try:
        cluster.leader()
        yield cluster
    finally:
        cluster.stop()
        if request.session.testsfailed:
            print(cluster.logs())


def _flood(cluster, tenant: str, queue: str, runs: int) -> None:
    leader = cluster.leader()
    spec = types_pb2.JobSpec(
        name=f"flood-{tenant}-{queue}", tenant=tenant,
        schedule=types_pb2.Schedule(interval=types_pb2.IntervalSchedule(interval_ms=86_400_000)),
        tasks=[types_pb2.TaskSpec(name="main", queue=queue)])
    job = leader.jobs().CreateJob(api_pb2.CreateJobRequest(
        request_id=f"c-{tenant}-{queue}", spec=spec), timeout=10).job
    for i in range(runs):
        leader.jobs().TriggerJob(api_pb2.TriggerJobRequest(
            request_id=f"t-{tenant}-{queue}-{i}", job=api_pb2.JobRef(job_id=job.job_id)),
            timeout=10)


def _over_cap(cluster) -> float:
    total = 0.0
    for node in cluster.nodes:
        text = urllib.request.urlopen(f"http://{node.metrics_addr}/metrics", timeout=5).read()
        for line in text.decode().splitlines():
            if line.startswith("gnomon_tasks_over_cap_total "):
                total += float(line.split()[1])
    return total


def test_weights_share_a_saturated_queue(cluster):
    with Client(cluster.servers) as client:
        client.create_tenant("small", weight=1)
        client.create_tenant("large", weight=3)
    _flood(cluster, "small", "shared", 30)
    _flood(cluster, "large", "shared", 90)
    worker = RawWorker(cluster.leader(), "fair-1", ("shared",))
    seen: list[str] = []
    worker.credits(4)
    while len(seen) < 80:
        assign = worker.next("assign")
        seen.append(assign.tenant)
        worker.complete(assign.lease)
        worker.credits(1)
    worker.close()
    small, large = seen.count("small"), seen.count("large")
    # Both had work throughout the first 80 grants (30 and 90 waiting): 1:3 within 10%.
    assert 0.9 * 3 <= large / small <= 1.1 * 3, (small, large)


def test_a_capped_tenant_holds_at_most_its_cap_and_the_rest_waits(cluster):
    with Client(cluster.servers) as client:
        client.create_tenant("capped", max_concurrency=2)
        assert client.get_tenant("capped").max_concurrency == 2
    before = _over_cap(cluster)
    _flood(cluster, "capped", "capq", 5)
    worker = RawWorker(cluster.leader(), "cap-1", ("capq",))
    worker.credits(10)
    held = [worker.next("assign"), worker.next("assign")]
    with pytest.raises(AssertionError, match="no assign"):
        worker.next("assign", timeout_s=1.5)  # the cap holds while both leases are held
    assert _over_cap(cluster) > before
    done = 0
    while done < 5:
        worker.complete(held.pop(0).lease)
        done += 1
        if done <= 3:
            held.append(worker.next("assign"))  # one more goes as one lease ends
        assert len(held) <= 2
    worker.close()


def test_api_rate_limit_per_tenant_with_retry_after(cluster):
    import grpc

    from gnomon.client import IntervalSchedule, JobSpec, TaskSpec

    with Client(cluster.servers) as client:
        client.create_tenant("chatty", api_rate_per_s=2, api_burst=2)
        job = client.create_job(JobSpec(name="ping", tenant="chatty",
                                        schedule=IntervalSchedule(interval_ms=86_400_000),
                                        tasks=[TaskSpec(name="main")]))
        quiet = client.create_job(JobSpec(name="ping", tenant="quiet",
                                          schedule=IntervalSchedule(interval_ms=86_400_000),
                                          tasks=[TaskSpec(name="main")]))
    stub = cluster.leader().jobs()
    codes, trailers = [], []
    for _ in range(6):
        try:
            stub.GetJob(api_pb2.GetJobRequest(job=api_pb2.JobRef(job_id=job.job_id)), timeout=5)
            codes.append(grpc.StatusCode.OK)
        except grpc.RpcError as exc:
            codes.append(exc.code())
            trailers.append(dict(exc.trailing_metadata() or ()))
    assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes
    assert all(int(t["retry-after-ms"]) > 0 for t in trailers)
    # Another tenant is not slowed by it.
    for _ in range(6):
        stub.GetJob(api_pb2.GetJobRequest(job=api_pb2.JobRef(job_id=quiet.job_id)), timeout=5)
    # The SDK waits as told and gets every answer within its deadline.
    with Client(cluster.servers, timeout_s=20, retries=50) as client:
        for _ in range(6):
            assert client.get_job(job.job_id).spec.tenant == "chatty"


def test_a_queue_cap_bounds_its_leases_whatever_the_tenants(tmp_path):
    from gnomon.node.local.cluster import LocalCluster

    cluster = LocalCluster(tmp_path, overrides={"queue_max_concurrency": "narrow=3"}).start()
    try:
        cluster.leader()
        _flood(cluster, "t1", "narrow", 4)
        _flood(cluster, "t2", "narrow", 4)
        worker = RawWorker(cluster.leader(), "narrow-1", ("narrow",))
        worker.credits(20)
        held = [worker.next("assign") for _ in range(3)]
        with pytest.raises(AssertionError, match="no assign"):
            worker.next("assign", timeout_s=1.5)  # 3 held: the queue's cap
        for _ in range(5):
            worker.complete(held.pop(0).lease)
            held.append(worker.next("assign"))
            assert len(held) == 3
        worker.close()
    finally:
        cluster.stop()


def test_a_malformed_queue_cap_is_refused_naming_it():
    from gnomon.node.config import ConfigError, load

    with pytest.raises(ConfigError, match="queue_max_concurrency"):
        load(["--node-id", "n1", "--member", "n1=127.0.0.1:1,127.0.0.1:2",
              "--raft-tls-cert", "c", "--raft-tls-key", "k", "--raft-tls-ca", "a",
              "--queue-max-concurrency", "narrow=0"], {})


def test_max_queued_tasks_bounds_run_creation_with_retry_after(cluster):
    import grpc

    with Client(cluster.servers) as client:
        client.create_tenant("bounded", max_queued_tasks=3)
    leader = cluster.leader()
    spec = types_pb2.JobSpec(
        name="bounded-job", tenant="bounded",
        schedule=types_pb2.Schedule(interval=types_pb2.IntervalSchedule(interval_ms=86_400_000)),
        tasks=[types_pb2.TaskSpec(name="main", queue="nobody-serves")])
    job = leader.jobs().CreateJob(api_pb2.CreateJobRequest(request_id="c-bounded", spec=spec),
                                  timeout=10).job
    codes = []
    for i in range(6):
        try:
            leader.jobs().TriggerJob(api_pb2.TriggerJobRequest(
                request_id=f"t-bounded-{i}", job=api_pb2.JobRef(job_id=job.job_id)), timeout=10)
            codes.append("OK")
        except grpc.RpcError as exc:
            codes.append(exc.code().name)
            assert int(dict(exc.trailing_metadata())["retry-after-ms"]) > 0
    assert codes[:3] == ["OK"] * 3 and set(codes[3:]) == {"RESOURCE_EXHAUSTED"}, codes


def test_max_active_runs_per_tenant_bounds_triggers(cluster):
    import grpc

    with Client(cluster.servers) as client:
        client.create_tenant("busy", max_active_runs=2)
        assert client.get_tenant("busy").max_active_runs == 2
    leader = cluster.leader()
    spec = types_pb2.JobSpec(
        name="busy-job", tenant="busy",
        schedule=types_pb2.Schedule(interval=types_pb2.IntervalSchedule(interval_ms=86_400_000)),
        tasks=[types_pb2.TaskSpec(name="main", queue="nobody-serves-busy")])
    job = leader.jobs().CreateJob(api_pb2.CreateJobRequest(request_id="c-busy", spec=spec),
                                  timeout=10).job
    codes = []
    for i in range(4):
        try:
            leader.jobs().TriggerJob(api_pb2.TriggerJobRequest(
                request_id=f"t-busy-{i}", job=api_pb2.JobRef(job_id=job.job_id)), timeout=10)
            codes.append("OK")
        except grpc.RpcError as exc:
            codes.append(exc.code().name)
    assert codes == ["OK", "OK", "RESOURCE_EXHAUSTED", "RESOURCE_EXHAUSTED"], codes
