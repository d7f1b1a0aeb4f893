"""Scenario 6, API: CreateJob latency with one client on an idle cluster (goal p50 <= 5 ms),
and CreateJob throughput with 100 concurrent clients (2 processes x 50, one channel each).

Reference peer: etcd 3.4 Put (a durable Raft write on the same machine) measured the same way.
The older bench/commit_latency.py (CreateJob latency + a fire herd) still runs on its own.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from gnomon.bench import Options
from gnomon.bench.cluster import running_cluster
from gnomon.bench.harness import node_groups, profile, profile_text
from gnomon.bench.load import create_jobs_bulk, interval_spec
from gnomon.bench.meters import CpuMeter
from gnomon.bench.peers import not_installed
from gnomon.bench.report import Report, log, plot
from gnomon.bench.stats import summary
from gnomon.v1 import api_pb2, api_pb2_grpc

GOAL_P50_MS = 5.0


def sequential_gnomon(addr: str, n: int) -> list[float]:
    channel = grpc.insecure_channel(addr)
    stub = api_pb2_grpc.JobServiceStub(channel)
    lat = []
    for i in range(n):
        t0 = time.perf_counter()
        stub.CreateJob(api_pb2.CreateJobRequest(request_id=f"seq-{i}",
                                                spec=interval_spec(f"seq-{i}", 3_600_000, 0)),
                       timeout=10)
        lat.append((time.perf_counter() - t0) * 1000)
    channel.close()
    return lat


def sequential_etcd(endpoint: str, n: int) -> list[float]:
    from gnomon.bench.etcd_peer import PB, EtcdClient

    async def go() -> list[float]:
        c = EtcdClient(endpoint)
        lat = []
        for i in range(n):
            t0 = time.perf_counter()
            await c.put(PB["PutRequest"](key=f"seq/{i}".encode(), value=b"x"), timeout=10)
            lat.append((time.perf_counter() - t0) * 1000)
        await c.close()
        return lat

    return asyncio.run(go())


def concurrent(kind: str, target: str, root: Path, seconds: float, procs: int = 2,
               clients: int = 50, groups: dict | None = None) -> dict[str, Any]:
    meter = CpuMeter(groups or {}).start()
    ps = [subprocess.Popen([sys.executable, "-m", "gnomon.bench.apiload", kind,
                            "--target", target, "--clients", str(clients),
                            "--seconds", str(seconds), "--out", str(root / f"{kind}{i}.json")])
          for i in range(procs)]
    for p in ps:
        p.wait(timeout=seconds + 120)
    cpu = meter.stop()
    docs = [json.loads((root / f"{kind}{i}.json").read_text()) for i in range(procs)]
    lat = [x for d in docs for x in d["latency_ms"]]
    errors: dict[str, int] = {}
    for d in docs:
        for k, v in d["errors"].items():
            errors[k] = errors.get(k, 0) + v
    return {"per_s": round(sum(d["done"] for d in docs) / max(d["seconds"] for d in docs), 1),
            "latency_ms": summary(lat, 2), "errors": errors, "cpu": cpu,
            "clients": procs * clients}


def run(opts: Options) -> Report:
    quick = opts.quick
    n_seq = 100 if quick else 1000
    seconds = 3.0 if quick else 15.0
    report = Report("api", quick, "CreateJob latency and throughput")
    report.setup.append(
        f"One client: {n_seq} sequential CreateJob (interval job, one task) on an idle 3-node "
        f"cluster, from the bench process. 100 clients: 2 processes x 50 concurrent clients, "
        f"one channel each, CreateJob in a loop for {seconds:.0f}s. All on this machine.")
    etcd_status = not_installed("etcd") if opts.peers else "skipped (--no-peers)"
    with tempfile.TemporaryDirectory(prefix="gnomon-bench-api-") as tmp:
        root = Path(tmp)
        with running_cluster() as (cluster, leader):
            sequential_gnomon(leader.grpc_addr, 20)  # warm up
            seq = sequential_gnomon(leader.grpc_addr, n_seq)
            log(f"gnomon sequential CreateJob: {summary(seq, 2)}")
            prof = None
            conc = concurrent("gnomon", leader.grpc_addr, root, seconds,
                              groups=node_groups(cluster, leader.node_id))
            log(f"gnomon 100 clients: {conc['per_s']}/s {conc['latency_ms']}")
            bulk = create_jobs_bulk([leader.grpc_addr] + [n.grpc_addr for n in cluster.nodes
                                                          if n is not leader],
                                    [interval_spec(f"bulk-{i}", 3_600_000, 0)
                                     for i in range(5_000 if quick else 50_000)],
                                    prefix="apibulk")
            log(f"gnomon CreateJobs: {bulk['per_s']} jobs/s")
            if not quick:
                log("gnomon: profiling the leader under 100 clients (py-spy)")
                ps = subprocess.Popen([sys.executable, "-m", "gnomon.bench.apiload", "gnomon",
                                       "--target", leader.grpc_addr, "--clients", "100",
                                       "--seconds", "12", "--out", str(root / "prof-load.json")])
                time.sleep(1)
                prof = profile(leader.proc.pid, 10, root / "api-leader.folded")
                ps.wait(timeout=120)
        e_seq = e_conc = None
        if not etcd_status:
            from gnomon.bench.etcd_peer import EtcdCluster

            ec = EtcdCluster(root / "etcd").start()
            try:
                el = ec.leader()
                sequential_etcd(el.endpoint, 20)
                e_seq = sequential_etcd(el.endpoint, n_seq)
                e_conc = concurrent("etcd", el.endpoint, root, seconds)
                log(f"etcd: sequential {summary(e_seq, 2)}; 100 clients {e_conc['per_s']}/s")
            finally:
                ec.stop()
    s = summary(seq, 2)
    es = summary(e_seq, 2) if e_seq else None
    peer_v = (lambda key: etcd_status or (es or {}).get(key))  # noqa: E731
    report.add("CreateJob p50, one client, idle cluster (ms)", s["p50"], peer="etcd Put",
               peer_value=peer_v("p50"), goal=f"<= {GOAL_P50_MS:g}", met=s["p50"] <= GOAL_P50_MS)
    report.add("CreateJob p99, one client (ms)", s["p99"], peer="etcd Put",
               peer_value=peer_v("p99"))
    report.add("CreateJob/s with 100 concurrent clients", conc["per_s"], peer="etcd Put",
               peer_value=etcd_status or (e_conc or {}).get("per_s"))
    report.add("CreateJob p50 / p99 with 100 clients (ms)",
               f"{conc['latency_ms'].get('p50')} / {conc['latency_ms'].get('p99')}",
               peer="etcd Put", peer_value=etcd_status or
               f"{e_conc['latency_ms'].get('p50')} / {e_conc['latency_ms'].get('p99')}")
    report.add("jobs created/s with CreateJobs (1,000 per call, 4 calls in flight, one client "
               "process) vs etcd Put/s with 100 clients", bulk["per_s"], peer="etcd Put",
               peer_value=etcd_status or (e_conc or {}).get("per_s"))
    if conc["errors"]:
        report.add("errors with 100 clients", json.dumps(conc["errors"]))
    lead = next(v for k, v in conc["cpu"].items() if "leader" in k)
    report.add("leader CPU % of a core with 100 clients", lead["core_pct"])
    if prof:
        report.notes.append("leader profile under 100 clients (py-spy, 10 s):\n"
                            + profile_text(prof))
    report.data = {"sequential_ms": s, "concurrent": conc, "bulk": bulk, "etcd_sequential_ms": es,
                   "etcd_concurrent": e_conc, "profile": prof}
    series = {"gnomon CreateJob": (sorted(seq), [100 * (i + 1) / len(seq)
                                                 for i in range(len(seq))])}
    if e_seq:
        series["etcd Put"] = (sorted(e_seq), [100 * (i + 1) / len(e_seq)
                                              for i in range(len(e_seq))])
    plot(report, opts.out, "latency_cdf", "One client, sequential writes: latency CDF", "ms",
         "% of requests", series)
    return report


if __name__ == "__main__":  # pragma: no cover
    from gnomon.bench import main

    raise SystemExit(main(["api", *sys.argv[1:]]))
