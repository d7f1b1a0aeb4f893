"""Commit latency of one CreateJob on an idle 3-node cluster, and Fire commands per second
through one leader (a herd of one-shot jobs due in the same instant, no workers).

    .venv/bin/python bench/commit_latency.py [--creates 300] [--herd 20000]

Prints a table and writes bench/results/commit_latency.json. Everything (three nodes and this
client) runs on this machine: the figures are for one shared box, not a deployment.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import grpc

from gnomon.node.local.cluster import LocalCluster, wait_for
from gnomon.v1 import api_pb2, api_pb2_grpc, types_pb2


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _once_spec(name: str, at_ms: int) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        name=name, schedule=types_pb2.Schedule(once=types_pb2.OnceSchedule(at_ms=at_ms)),
        tasks=[types_pb2.TaskSpec(name="main")])


def measure_creates(addr: str, n: int) -> dict:
    stub = api_pb2_grpc.JobServiceStub(grpc.insecure_channel(addr))
    far = int(time.time() * 1000) + 10 * 365 * 86_400_000
    latencies = []
    for i in range(n):
        t0 = time.perf_counter()
        stub.CreateJob(api_pb2.CreateJobRequest(request_id=f"lat-{i}",
                                                spec=_once_spec(f"lat-{i}", far)), timeout=10)
        latencies.append((time.perf_counter() - t0) * 1000)
    return {"creates": n, "p50_ms": round(statistics.median(latencies), 2),
            "p99_ms": round(_pct(latencies, 0.99), 2), "max_ms": round(max(latencies), 2)}


async def _create_herd(addr: str, n: int, at_ms: int, concurrency: int = 64) -> None:
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = api_pb2_grpc.JobServiceStub(channel)
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with sem:
                await stub.CreateJob(api_pb2.CreateJobRequest(
                    request_id=f"herd-{i}", spec=_once_spec(f"herd-{i}", at_ms)), timeout=30)

        await asyncio.gather(*(one(i) for i in range(n)))


def measure_fires(cluster: LocalCluster, addr: str, n: int) -> dict:
    cluster_stub = api_pb2_grpc.ClusterServiceStub(grpc.insecure_channel(addr))
    base = cluster_stub.GetStatus(api_pb2.GetStatusRequest(), timeout=5).active_runs
    t_create = time.time()
    at_ms = int(t_create * 1000) + 5_000 + 4 * n  # due after all creates are in (>= 250/s)
    asyncio.run(_create_herd(addr, n, at_ms))
    created_s = time.time() - t_create
    if time.time() * 1000 > at_ms:
        raise SystemExit(f"herd creation took {created_s:.1f}s and overran the due instant: "
                         "lower --herd")

    def all_fired():
        st = cluster_stub.GetStatus(api_pb2.GetStatusRequest(), timeout=5)
        return st if st.active_runs - base >= n else None

    wait_for(all_fired, timeout_s=300, what=f"{n} fires", interval_s=0.02)
    done_ms = time.time() * 1000
    duration_s = max(0.001, (done_ms - at_ms) / 1000)
    return {"herd": n, "create_s": round(created_s, 2), "all_fired_after_s": round(duration_s, 3),
            "fires_per_s": round(n / duration_s)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--creates", type=int, default=300)
    parser.add_argument("--herd", type=int, default=20_000)
    parser.add_argument("--out", default="bench/results/commit_latency.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gnomon-bench-") as tmp:
        cluster = LocalCluster(Path(tmp), 3, {"max_jobs_per_tenant": "1000000"}).start()
        try:
            leader = cluster.leader()
            print(f"leader {leader.node_id} at {leader.grpc_addr}; measuring ...", flush=True)
            creates = measure_creates(leader.grpc_addr, args.creates)
            print(f"CreateJob: {creates}", flush=True)
            fires = measure_fires(cluster, leader.grpc_addr, args.herd)
            print(f"Fires: {fires}", flush=True)
        finally:
            cluster.stop()
    result = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "platform": platform.platform()},
              "setup": "3 nodes + client on one machine, loopback",
              "create_job": creates, "fire": fires}
    print("\n| measure | value |\n|---|---|")
    print(f"| CreateJob commit latency p50 / p99 (ms, {creates['creates']} sequential) | "
          f"{creates['p50_ms']} / {creates['p99_ms']} |")
    print(f"| Fire commands per second ({fires['herd']} due at once) | {fires['fires_per_s']} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
