"""Tenant fairness and the cost of TLS + authentication (issue 10), on 3 real nodes.

    python -m gnomon.bench fairness [--quick]

1. Shares: tenants "light" (weight 1) and "heavy" (weight 3) each queue thousands of tasks on
   one queue; worker streams in this process complete every task at once. Completions by
   tenant are counted while both still have work: the ratio should be 3 within 10%.
2. Interactive latency: tenant "bulk" queues 50,000 tasks (500 runs of 100 tasks); while
   they drain, tenant "interactive" triggers a one-task run, five times: trigger to Assign.
3. TLS + auth: sequential CreateJob latency and tasks completed per second through the same
   worker streams, on a plaintext cluster and on one with mutual TLS and bearer tokens.

Workers: raw worker.proto streams (grpc.aio) in this process, credits topped up per
completion; they take every tenant's tasks (admin token when the cluster authenticates).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import grpc

from gnomon.bench import Options
from gnomon.bench.cluster import NODE_DEFAULTS, BenchCluster
from gnomon.bench.report import Report, log
from gnomon.v1 import api_pb2, types_pb2, worker_pb2, worker_pb2_grpc

TASKS_PER_RUN = 100
QUEUE = "fair"


def _spec(name: str, tenant: str, tasks: int) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        name=name, tenant=tenant,
        schedule=types_pb2.Schedule(interval=types_pb2.IntervalSchedule(interval_ms=86_400_000)),
        tasks=[types_pb2.TaskSpec(name=f"t{i}", queue=QUEUE) for i in range(tasks)])


def _job(cluster: BenchCluster, tenant: str, tasks: int) -> str:
    leader = cluster.find_leader()
    return leader.jobs().CreateJob(api_pb2.CreateJobRequest(
        request_id=f"job-{tenant}-{tasks}", spec=_spec(f"{tenant}-{tasks}", tenant, tasks)),
        timeout=30).job.job_id


def _trigger(cluster: BenchCluster, job_id: str, runs: int, tag: str) -> None:
    stub = cluster.find_leader().jobs()
    for i in range(runs):
        stub.TriggerJob(api_pb2.TriggerJobRequest(request_id=f"{tag}-{i}",
                                                  job=api_pb2.JobRef(job_id=job_id)), timeout=30)


class Workers:
    """Worker streams that complete at once; counts completions by tenant, notes assigns."""

    def __init__(self, cluster: BenchCluster, streams: int, credits: int):
        self.cluster, self.streams, self.credits = cluster, streams, credits
        self.done: Counter[str] = Counter()
        self.assigned_at: dict[str, float] = {}  # run_id -> first Assign seen (monotonic)
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        leader = self.cluster.find_leader()
        for i in range(self.streams):
            self._tasks.append(asyncio.create_task(self._stream(leader, f"bench-w{i}")))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _stream(self, leader, worker_id: str) -> None:
        if leader.credentials is not None:
            channel = grpc.aio.secure_channel(leader.grpc_addr, leader.credentials)
        else:
            channel = grpc.aio.insecure_channel(leader.grpc_addr)
        out: asyncio.Queue = asyncio.Queue()
        await out.put(worker_pb2.WorkerMessage(hello=worker_pb2.Hello(worker_id=worker_id,
                                                                       queues=[QUEUE])))
        await out.put(worker_pb2.WorkerMessage(credits=worker_pb2.Credits(credits=self.credits)))

        async def requests():
            while True:
                yield await out.get()

        async with channel:
            call = worker_pb2_grpc.WorkerServiceStub(channel).Connect(requests())
            async for msg in call:
                if msg.WhichOneof("msg") != "assign":
                    continue
                a = msg.assign
                self.assigned_at.setdefault(a.lease.run_id, time.monotonic())
                await out.put(worker_pb2.WorkerMessage(complete=worker_pb2.Complete(
                    lease=a.lease, result=b"ok")))
                await out.put(worker_pb2.WorkerMessage(credits=worker_pb2.Credits(credits=1)))
                self.done[a.tenant] += 1


async def _until(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return False


def _new_cluster(root: Path, secure: bool) -> BenchCluster:
    cluster = BenchCluster(root, 3, dict(NODE_DEFAULTS), secure=secure).start()
    cluster.find_leader()
    return cluster


async def _shares(cluster: BenchCluster, runs: int, window: int) -> dict:
    leader = cluster.find_leader()
    access = _access_stub(leader)
    for name, weight in (("light", 1), ("heavy", 3)):
        access.CreateTenant(api_pb2.SetTenantRequest(
            request_id=f"tenant-{name}", tenant=types_pb2.Tenant(name=name, weight=weight)),
            timeout=10)
    for name in ("light", "heavy"):
        _trigger(cluster, _job(cluster, name, TASKS_PER_RUN), runs, f"share-{name}")
    workers = Workers(cluster, streams=4, credits=50)
    t0 = time.monotonic()
    await workers.start()
    await _until(lambda: sum(workers.done.values()) >= window, timeout_s=600)
    elapsed = time.monotonic() - t0
    counts = dict(workers.done)
    await workers.stop()
    return {"light": counts.get("light", 0), "heavy": counts.get("heavy", 0),
            "window": window, "seconds": round(elapsed, 2)}


def _access_stub(node):
    from gnomon.v1 import api_pb2_grpc

    return api_pb2_grpc.AccessServiceStub(node._channel())


async def _interactive(cluster: BenchCluster, bulk_runs: int, probes: int) -> dict:
    bulk = _job(cluster, "bulk", TASKS_PER_RUN)
    quick = _job(cluster, "interactive", 1)
    log(f"queueing {bulk_runs * TASKS_PER_RUN:,} tasks of tenant bulk")
    _trigger(cluster, bulk, bulk_runs, "bulk")
    workers = Workers(cluster, streams=4, credits=50)
    await workers.start()
    await _until(lambda: workers.done["bulk"] >= 2000, timeout_s=300)
    stub = cluster.find_leader().jobs()
    latencies = []
    for i in range(probes):
        t0 = time.monotonic()
        run = stub.TriggerJob(api_pb2.TriggerJobRequest(
            request_id=f"probe-{i}", job=api_pb2.JobRef(job_id=quick)), timeout=10).run
        await _until(lambda r=run.run_id: r in workers.assigned_at, timeout_s=60)
        latencies.append((workers.assigned_at.get(run.run_id, float("nan")) - t0) * 1000)
        await asyncio.sleep(0.5)
    bulk_done = workers.done["bulk"]
    await workers.stop()
    return {"trigger_to_assign_ms": [round(x, 1) for x in latencies],
            "bulk_tasks_done_meanwhile": bulk_done, "bulk_tasks": bulk_runs * TASKS_PER_RUN}


async def _cost(cluster: BenchCluster, creates: int, runs: int) -> dict:
    stub = cluster.find_leader().jobs()
    far = int(time.time() * 1000) + 10 * 365 * 86_400_000
    lat = []
    for i in range(creates):
        spec = types_pb2.JobSpec(name=f"lat-{i}", schedule=types_pb2.Schedule(
            once=types_pb2.OnceSchedule(at_ms=far)), tasks=[types_pb2.TaskSpec(name="main")])
        t0 = time.perf_counter()
        stub.CreateJob(api_pb2.CreateJobRequest(request_id=f"lat-{i}", spec=spec), timeout=10)
        lat.append((time.perf_counter() - t0) * 1000)
    _trigger(cluster, _job(cluster, "cost", TASKS_PER_RUN), runs, "cost")
    workers = Workers(cluster, streams=4, credits=50)
    t0 = time.monotonic()
    await workers.start()
    total = runs * TASKS_PER_RUN
    await _until(lambda: sum(workers.done.values()) >= total, timeout_s=600)
    elapsed = time.monotonic() - t0
    await workers.stop()
    lat.sort()
    return {"create_p50_ms": round(statistics.median(lat), 2),
            "create_p99_ms": round(lat[int(0.99 * (len(lat) - 1))], 2),
            "tasks_per_s": round(sum(workers.done.values()) / elapsed, 1)}


def run(opts: Options) -> Report:
    report = Report("fairness", opts.quick, title="tenant shares, interactive latency under "
                    "a backfill, the cost of TLS + auth")
    share_runs, window = (10, 1000) if opts.quick else (60, 8000)
    bulk_runs, probes = (20, 3) if opts.quick else (500, 5)
    creates, cost_runs = (50, 10) if opts.quick else (300, 60)
    with tempfile.TemporaryDirectory(prefix="gnomon-bench-fair-") as tmp:
        cluster = _new_cluster(Path(tmp) / "plain", secure=False)
        try:
            log("shares: weights 1 and 3 on one queue")
            shares = asyncio.run(_shares(cluster, share_runs, window))
            log("interactive trigger while another tenant drains a backlog")
            inter = asyncio.run(_interactive(cluster, bulk_runs, probes))
            log("plaintext, no auth: CreateJob latency and throughput")
            plain = asyncio.run(_cost(cluster, creates, cost_runs))
        finally:
            cluster.kill_all()
        cluster = _new_cluster(Path(tmp) / "secure", secure=True)
        try:
            log("mutual TLS + bearer tokens: CreateJob latency and throughput")
            secure = asyncio.run(_cost(cluster, creates, cost_runs))
        finally:
            cluster.kill_all()
    ratio = shares["heavy"] / max(1, shares["light"])
    report.add("heavy:light completions (weights 3:1), both busy", round(ratio, 2),
               goal="3 within 10%", met=2.7 <= ratio <= 3.3)
    worst = max(inter["trigger_to_assign_ms"])
    report.add("interactive trigger -> assign during the backlog, max (ms)", round(worst, 1),
               goal="<= 1000", met=worst <= 1000)
    report.add("CreateJob p50 (ms), TLS+auth vs plaintext", secure["create_p50_ms"],
               peer="plaintext", peer_value=plain["create_p50_ms"])
    report.add("CreateJob p99 (ms), TLS+auth vs plaintext", secure["create_p99_ms"],
               peer="plaintext", peer_value=plain["create_p99_ms"])
    report.add("tasks completed/s, TLS+auth vs plaintext", secure["tasks_per_s"],
               peer="plaintext", peer_value=plain["tasks_per_s"])
    report.data.update(shares=shares, interactive=inter, plain=plain, secure=secure)
    report.setup.append(f"3 nodes on this machine; 4 worker streams x 50 credits in the bench "
                        f"process; {TASKS_PER_RUN} tasks per run.")
    return report
