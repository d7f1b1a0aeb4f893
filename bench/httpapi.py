"""Scenario httpapi: the HTTP/JSON API's latency next to gRPC's for the same calls, one client,
sequential, on an idle 3-node cluster (issue 12). Both ports are served by the same servicers
on the leader's event loop; what differs is the framing (HTTP/1.1 keep-alive + canonical proto
JSON vs HTTP/2 + protobuf) and the server library (aiohttp vs grpc.aio).

Calls: CreateJob (a Raft write), GetJob (linearizable: a barrier entry first), GetJob STALE
(a local read: pure API overhead), GetStatus. gRPC and HTTP alternate in rounds; the client
encodes and decodes in both cases (protobuf objects vs JSON text). Then 50 concurrent clients
in the bench process (grpc.aio on one channel vs aiohttp with 50 connections) for CreateJob
and GetJob STALE: calls/s and latency (the one client process shares the cores with the
nodes, so these say more about the pair than about a deployment).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grpc
from google.protobuf import json_format

from gnomon.bench import Options
from gnomon.bench.cluster import NODE_DEFAULTS, BenchCluster
from gnomon.bench.load import interval_spec
from gnomon.bench.report import Report, log
from gnomon.bench.stats import summary
from gnomon.v1 import api_pb2, api_pb2_grpc

CALLS = ("CreateJob", "GetJob", "GetJob STALE", "GetStatus")
CONCURRENT_CLIENTS = 50


def _timed(fn: Callable[[int], object], n: int, start: int) -> list[float]:
    lat = []
    for i in range(start, start + n):
        t0 = time.perf_counter()
        fn(i)
        lat.append((time.perf_counter() - t0) * 1000)
    return lat


class GrpcCalls:
    def __init__(self, addr: str, job_id: str):
        self.channel = grpc.insecure_channel(addr)
        self.jobs = api_pb2_grpc.JobServiceStub(self.channel)
        self.cluster = api_pb2_grpc.ClusterServiceStub(self.channel)
        self.ref = api_pb2.JobRef(job_id=job_id)

    def call(self, name: str) -> Callable[[int], object]:
        if name == "CreateJob":
            return lambda i: self.jobs.CreateJob(api_pb2.CreateJobRequest(
                request_id=f"g-{i}", spec=interval_spec(f"g-{i}", 3_600_000, 0)), timeout=10)
        if name == "GetJob":
            return lambda i: self.jobs.GetJob(api_pb2.GetJobRequest(job=self.ref), timeout=10)
        if name == "GetJob STALE":
            return lambda i: self.jobs.GetJob(api_pb2.GetJobRequest(
                job=self.ref, consistency=api_pb2.CONSISTENCY_STALE), timeout=10)
        return lambda i: self.cluster.GetStatus(api_pb2.GetStatusRequest(), timeout=10)

    def close(self) -> None:
        self.channel.close()


class HttpCalls:
    """One keep-alive HTTP/1.1 connection, JSON in and out."""

    def __init__(self, addr: str, job_id: str):
        self.conn = http.client.HTTPConnection(addr, timeout=10)
        self.job_id = job_id

    def _req(self, method: str, path: str, body: dict | None = None, headers=None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        hdrs = {"Content-Type": "application/json", **(headers or {})} if data else {}
        self.conn.request(method, path, body=data, headers=hdrs)
        r = self.conn.getresponse()
        doc = json.loads(r.read())
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: {r.status} {doc}")
        return doc

    def call(self, name: str) -> Callable[[int], object]:
        if name == "CreateJob":
            return lambda i: self._req("POST", "/v1/jobs", {"spec": json_format.MessageToDict(
                interval_spec(f"h-{i}", 3_600_000, 0))}, {"Idempotency-Key": f"h-{i}"})
        if name == "GetJob":
            return lambda i: self._req("GET", f"/v1/jobs/{self.job_id}")
        if name == "GetJob STALE":
            return lambda i: self._req("GET", f"/v1/jobs/{self.job_id}?consistency=STALE")
        return lambda i: self._req("GET", "/v1/cluster")

    def close(self) -> None:
        self.conn.close()


def _merge(rounds: list[dict]) -> dict:
    lat = [x for r in rounds for x in r["lat"]]
    return {"per_s": round(sum(r["done"] for r in rounds) / sum(r["seconds"] for r in rounds), 1),
            "latency_ms": summary(lat, 2), "errors": sum(r["errors"] for r in rounds)}


async def _concurrent(port: str, addr: str, job_id: str, call: str, clients: int,
                      seconds: float, round_no: int) -> dict:
    """`clients` concurrent callers in this process for `seconds`: calls/s and latency."""
    import aiohttp

    lat: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds
    if port == "gRPC":
        channel = grpc.aio.insecure_channel(addr)
        stub = api_pb2_grpc.JobServiceStub(channel)
        ref = api_pb2.JobRef(job_id=job_id)

        async def one(i: int) -> None:
            if call == "CreateJob":
                await stub.CreateJob(api_pb2.CreateJobRequest(
                    request_id=f"cg{round_no}-{i}",
                    spec=interval_spec(f"cg{round_no}-{i}", 3_600_000, 0)),
                    timeout=10)
            else:
                await stub.GetJob(api_pb2.GetJobRequest(
                    job=ref, consistency=api_pb2.CONSISTENCY_STALE), timeout=10)
        close = channel.close
    else:
        session = aiohttp.ClientSession(f"http://{addr}",
                                        connector=aiohttp.TCPConnector(limit=clients))

        async def one(i: int) -> None:
            if call == "CreateJob":
                key = f"ch{round_no}-{i}"
                body = {"spec": json_format.MessageToDict(interval_spec(key, 3_600_000, 0))}
                r = await session.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})
            else:
                r = await session.get(f"/v1/jobs/{job_id}?consistency=STALE")
            await r.json(content_type=None)
            if r.status >= 300:
                raise RuntimeError(r.status)
        close = session.close

    counter = iter(range(10**9))

    async def client() -> None:
        nonlocal errors
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            try:
                await one(next(counter))
                lat.append((time.perf_counter() - t0) * 1000)
            except Exception:  # noqa: BLE001 - counted
                errors += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - t0
    await close()
    return {"done": len(lat), "seconds": elapsed, "lat": lat, "errors": errors,
            "per_s": round(len(lat) / elapsed, 1)}


def run(opts: Options) -> Report:
    n = 50 if opts.quick else 500
    conc_seconds = 1.0 if opts.quick else 5.0
    rounds = opts.n_rounds()
    report = Report("httpapi", opts.quick, "HTTP/JSON API latency next to gRPC, same calls")
    report.setup.append(
        f"One client in the bench process, sequential calls to the leader of an idle 3-node "
        f"cluster on this machine: {rounds} round(s) of {n} calls per call and port, gRPC and "
        f"HTTP alternating; 20 warm-up calls each first. HTTP: one keep-alive connection "
        f"(http.client), JSON bodies; gRPC: one channel. Then {CONCURRENT_CLIENTS} concurrent "
        f"clients for {conc_seconds:g}s per call, port and round (asyncio: grpc.aio, aiohttp), the "
        f"order of the ports swapped every round.")
    lat: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="gnomon-bench-http-") as tmp:
        cluster = BenchCluster(Path(tmp), 3, dict(NODE_DEFAULTS), http=True).start()
        try:
            leader = cluster.find_leader()
            seed = api_pb2_grpc.JobServiceStub(grpc.insecure_channel(leader.grpc_addr))
            job_id = seed.CreateJob(api_pb2.CreateJobRequest(
                request_id="seed", spec=interval_spec("seed", 3_600_000, 0)), timeout=10).job.job_id
            ports = {"gRPC": GrpcCalls(leader.grpc_addr, job_id),
                     "HTTP": HttpCalls(leader.http_addr, job_id)}
            start = 0
            for name in CALLS:
                for calls in ports.values():
                    _timed(calls.call(name), 20, start)
                    start += 20
            for _ in range(rounds):
                for name in CALLS:
                    for port, calls in ports.items():
                        lat.setdefault((name, port), []).extend(
                            _timed(calls.call(name), n, start))
                        start += n
            for calls in ports.values():
                calls.close()
            conc: dict[tuple[str, str], dict] = {}
            for r in range(rounds):
                for name in ("CreateJob", "GetJob STALE"):
                    pairs = (("gRPC", leader.grpc_addr), ("HTTP", leader.http_addr))
                    for port, addr in pairs if r % 2 == 0 else pairs[::-1]:
                        got = asyncio.run(_concurrent(port, addr, job_id, name,
                                                      CONCURRENT_CLIENTS, conc_seconds, r))
                        log(f"{name} {port} x{CONCURRENT_CLIENTS} round {r + 1}: "
                            f"{got['per_s']}/s, {got['errors']} errors")
                        conc.setdefault((name, port), []).append(got)
            conc = {k: _merge(v) for k, v in conc.items()}
        finally:
            cluster.kill_all()
    data = {}
    for name in CALLS:
        g, h = summary(lat[(name, "gRPC")], 2), summary(lat[(name, "HTTP")], 2)
        data[name] = {"grpc_ms": g, "http_ms": h}
        log(f"{name}: gRPC {g}  HTTP {h}")
        report.add(f"{name} p50 (ms): gRPC, peer column HTTP", g["p50"], peer="HTTP/JSON",
                   peer_value=h["p50"])
        report.add(f"{name} p99 (ms): gRPC, peer column HTTP", g["p99"], peer="HTTP/JSON",
                   peer_value=h["p99"])
    for name in ("CreateJob", "GetJob STALE"):
        g, h = conc[(name, "gRPC")], conc[(name, "HTTP")]
        data[f"{name} x{CONCURRENT_CLIENTS}"] = {"grpc": g, "http": h}
        report.add(f"{name}/s, {CONCURRENT_CLIENTS} concurrent clients: gRPC, peer column HTTP",
                   g["per_s"], peer="HTTP/JSON", peer_value=h["per_s"], higher_is_better=True)
        report.add(f"{name} p50 (ms), {CONCURRENT_CLIENTS} clients: gRPC, peer column HTTP",
                   g["latency_ms"].get("p50"), peer="HTTP/JSON",
                   peer_value=h["latency_ms"].get("p50"))
        if g["errors"] or h["errors"]:
            report.add(f"{name} errors, {CONCURRENT_CLIENTS} clients: gRPC, peer column HTTP",
                       g["errors"], peer="HTTP/JSON", peer_value=h["errors"])
    report.notes.append("the peer column is gnomon's own HTTP port, not another system")
    report.data = data
    return report


if __name__ == "__main__":  # pragma: no cover
    from gnomon.bench import main

    raise SystemExit(main(["httpapi", *sys.argv[1:]]))
