"""Load the benchmarks offer: job specs, bulk job creation, a fleet of raw-protocol workers.

Everything runs on this machine and talks to 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from gnomon.bench.stats import summary
from gnomon.node.local.cluster import wait_for
from gnomon.v1 import api_pb2, api_pb2_grpc, types_pb2

# -- job specs and bulk creation ------------------------------------------------------------


def interval_spec(name: str, interval_ms: int, anchor_ms: int, *, queue: str = "",
                  tenant: str = "") -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        tenant=tenant, name=name,
        schedule=types_pb2.Schedule(interval=types_pb2.IntervalSchedule(
            interval_ms=interval_ms, anchor_ms=anchor_ms)),
        tasks=[types_pb2.TaskSpec(name="main", queue=queue)])


def once_spec(name: str, at_ms: int, *, queue: str = "") -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        name=name, schedule=types_pb2.Schedule(once=types_pb2.OnceSchedule(at_ms=at_ms)),
        tasks=[types_pb2.TaskSpec(name="main", queue=queue)])


def _follow_leader(leader: dict[str, str], servers: Sequence[str],
                   exc: grpc.aio.AioRpcError) -> None:
    """After a retryable failure: the leader the node named, else the next server."""
    hint = dict(exc.trailing_metadata() or ()).get("gnomon-leader")
    if hint:
        leader["addr"] = hint
    elif exc.code() == grpc.StatusCode.UNAVAILABLE:
        i = servers.index(leader["addr"]) if leader["addr"] in servers else -1
        leader["addr"] = servers[(i + 1) % len(servers)]


_RETRY = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
          grpc.StatusCode.DEADLINE_EXCEEDED}


async def create_jobs_async(servers: Sequence[str], specs: Sequence[types_pb2.JobSpec], *,
                            concurrency: int = 64, prefix: str = "bench",
                            deadline_s: float = 600.0, channels: int = 4) -> dict[str, Any]:
    """CreateJob for every spec (request ids `<prefix>-<i>`), following the leader and
    retrying UNAVAILABLE / RESOURCE_EXHAUSTED with the same request id."""
    leader = {"addr": servers[0]}
    chans: dict[str, list[grpc.aio.Channel]] = {}

    def stub(i: int) -> api_pb2_grpc.JobServiceStub:
        addr = leader["addr"]
        if addr not in chans:
            chans[addr] = [grpc.aio.insecure_channel(addr) for _ in range(channels)]
        return api_pb2_grpc.JobServiceStub(chans[addr][i % channels])

    t_end = time.monotonic() + deadline_s
    sem = asyncio.Semaphore(concurrency)
    stats = {"created": 0, "retries": 0, "failed": 0}
    latencies: list[float] = []

    async def one(i: int, spec: types_pb2.JobSpec) -> None:
        async with sem:
            attempt = 0
            while time.monotonic() < t_end:
                t0 = time.perf_counter()
                try:
                    await stub(i).CreateJob(api_pb2.CreateJobRequest(
                        request_id=f"{prefix}-{i}", spec=spec), timeout=20)
                    latencies.append((time.perf_counter() - t0) * 1000)
                    stats["created"] += 1
                    return
                except grpc.aio.AioRpcError as exc:
                    if exc.code() == grpc.StatusCode.ALREADY_EXISTS:
                        stats["created"] += 1
                        return
                    if exc.code() not in _RETRY:
                        stats["failed"] += 1
                        return
                    stats["retries"] += 1
                    _follow_leader(leader, servers, exc)
                    attempt += 1
                    await asyncio.sleep(min(1.0, 0.02 * 2 ** min(attempt, 6)))
            stats["failed"] += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i, s) for i, s in enumerate(specs)))
    elapsed = time.perf_counter() - t0
    for group in chans.values():
        for ch in group:
            await ch.close()
    return {**stats, "seconds": round(elapsed, 2),
            "per_s": round(stats["created"] / max(elapsed, 1e-9), 1),
            "latency_ms": summary(latencies, 2)}


async def create_jobs_bulk_async(servers: Sequence[str], specs: Sequence[types_pb2.JobSpec],
                                 *, per_call: int = 1000, concurrency: int = 4,
                                 prefix: str = "bulk", deadline_s: float = 3600.0,
                                 progress_every: int = 0) -> dict[str, Any]:
    """CreateJobs calls of `per_call` specs (request ids `<prefix>-<k>`), `concurrency` in
    flight, following the leader and retrying with the same request id; an item refused as
    ALREADY_EXISTS counts as created (a retry after an unknown outcome)."""
    leader = {"addr": servers[0]}
    chans: dict[str, grpc.aio.Channel] = {}

    def stub() -> api_pb2_grpc.JobServiceStub:
        addr = leader["addr"]
        if addr not in chans:
            chans[addr] = grpc.aio.insecure_channel(addr, options=[
                ("grpc.max_send_message_length", 64 << 20)])
        return api_pb2_grpc.JobServiceStub(chans[addr])

    t_end = time.monotonic() + deadline_s
    sem = asyncio.Semaphore(concurrency)
    stats = {"created": 0, "retries": 0, "failed": 0, "calls": 0}
    errors: dict[str, int] = {}
    latencies: list[float] = []
    t0 = time.perf_counter()

    async def one(k: int, chunk: Sequence[types_pb2.JobSpec]) -> None:
        req = api_pb2.CreateJobsRequest(request_id=f"{prefix}-{k}", specs=chunk)
        async with sem:
            attempt = 0
            while time.monotonic() < t_end:
                t = time.perf_counter()
                try:
                    resp = await stub().CreateJobs(req, timeout=60)
                except grpc.aio.AioRpcError as exc:
                    if exc.code() not in _RETRY:
                        stats["failed"] += len(chunk)
                        errors[exc.code().name] = errors.get(exc.code().name, 0) + 1
                        return
                    stats["retries"] += 1
                    _follow_leader(leader, servers, exc)
                    attempt += 1
                    await asyncio.sleep(min(1.0, 0.02 * 2 ** min(attempt, 6)))
                    continue
                latencies.append((time.perf_counter() - t) * 1000)
                stats["calls"] += 1
                for r in resp.results:
                    if r.HasField("job") or r.error.code == "ALREADY_EXISTS":
                        stats["created"] += 1
                    else:
                        stats["failed"] += 1
                        errors[r.error.code] = errors.get(r.error.code, 0) + 1
                if progress_every and stats["calls"] % progress_every == 0:
                    el = time.perf_counter() - t0
                    print(f"[bench] created {stats['created']:,} jobs in {el:.0f}s "
                          f"({stats['created'] / max(el, 1e-9):,.0f}/s)", flush=True)
                return
            stats["failed"] += len(chunk)

    chunks = [specs[i:i + per_call] for i in range(0, len(specs), per_call)]
    await asyncio.gather(*(one(k, c) for k, c in enumerate(chunks)))
    elapsed = time.perf_counter() - t0
    for ch in chans.values():
        await ch.close()
    return {**stats, "errors": errors, "seconds": round(elapsed, 2),
            "per_s": round(stats["created"] / max(elapsed, 1e-9), 1),
            "call_latency_ms": summary(latencies, 2), "per_call": per_call,
            "concurrency": concurrency}


def create_jobs_bulk(servers: Sequence[str], specs: Sequence[types_pb2.JobSpec], **kw: Any
                     ) -> dict[str, Any]:
    return asyncio.run(create_jobs_bulk_async(servers, specs, **kw))


def create_jobs(servers: Sequence[str], specs: Sequence[types_pb2.JobSpec], **kw: Any
                ) -> dict[str, Any]:
    return asyncio.run(create_jobs_async(servers, specs, **kw))


def create_jobs_parallel(servers: Sequence[str], kind: str, params: dict[str, Any], count: int,
                         processes: int, run_dir: Path, concurrency: int = 64) -> dict[str, Any]:
    """Create `count` jobs from `processes` client processes (see jobgen.py); each process
    builds its share of the specs itself."""
    run_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    t0 = time.perf_counter()
    for p in range(processes):
        out = run_dir / f"jobgen-{p}.json"
        args = [sys.executable, "-m", "gnomon.bench.jobgen", "--servers", ",".join(servers),
                "--kind", kind, "--params", json.dumps(params), "--count", str(count),
                "--part", str(p), "--parts", str(processes), "--concurrency", str(concurrency),
                "--out", str(out)]
        procs.append((subprocess.Popen(args), out))
    results = []
    for proc, out in procs:
        proc.wait(timeout=1800)
        results.append(json.loads(out.read_text()) if out.exists() else {"created": 0})
    elapsed = time.perf_counter() - t0
    created = sum(r.get("created", 0) for r in results)
    return {"created": created, "failed": sum(r.get("failed", 0) for r in results),
            "seconds": round(elapsed, 2), "per_s": round(created / max(elapsed, 1e-9), 1),
            "processes": processes}


def spec_for(kind: str, i: int, params: dict[str, Any]) -> types_pb2.JobSpec:
    """Job number i of a named job set (shared by jobgen.py and the scenarios)."""
    name = f"{params.get('prefix', kind)}-{i}"
    if kind == "interval":
        count = params["count"]
        interval = params["interval_ms"]
        return interval_spec(name, interval, params.get("anchor_ms", 0)
                             + (i * interval) // count, queue=params.get("queue", ""))
    if kind == "once":
        return once_spec(name, params["at_ms"], queue=params.get("queue", ""))
    raise ValueError(kind)


# -- raw-protocol worker fleet --------------------------------------------------------------


class WorkerFleet:
    """Worker processes running bench/rawworker.py; merged results once stopped."""

    def __init__(self, servers: Sequence[str], run_dir: Path, *, processes: int = 2,
                 streams: int = 4, credits: int = 200, record: str = "lateness",
                 max_s: float = 300.0, heartbeat_s: float = 0.0, channels: int = 0,
                 name: str = "w", connect_rate: float = 500.0, drain_s: float = 3.0,
                 spread: bool = False, queue: str = "default"):
        """`spread`: process i dials servers[i % n] first (gateways share the streams)."""
        self.servers, self.run_dir = list(servers), run_dir
        self.spread = spread
        self.queue = queue
        self.processes, self.streams, self.credits = processes, streams, credits
        self.record, self.max_s, self.heartbeat_s = record, max_s, heartbeat_s
        self.channels = channels or streams
        self.name = name
        self.connect_rate = connect_rate
        self.drain_s = drain_s
        self.procs: list[subprocess.Popen] = []
        self.stop_file = run_dir / f"{name}.stop"

    def start(self) -> WorkerFleet:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.stop_file.unlink(missing_ok=True)
        for p in range(self.processes):
            first = p % len(self.servers) if self.spread else 0
            servers = self.servers[first:] + self.servers[:first]
            args = [sys.executable, "-m", "gnomon.bench.rawworker",
                    "--servers", ",".join(servers), "--streams", str(self.streams),
                    "--channels", str(self.channels), "--credits", str(self.credits),
                    "--record", self.record, "--max-s", str(self.max_s),
                    "--heartbeat-s", str(self.heartbeat_s), "--id", f"{self.name}{p}",
                    "--connect-rate", str(self.connect_rate), "--drain-s", str(self.drain_s),
                    "--queue", self.queue,
                    "--out", str(self.run_dir / f"{self.name}{p}.json"),
                    "--progress", str(self.run_dir / f"{self.name}{p}.progress"),
                    "--stop-file", str(self.stop_file)]
            if os.environ.get("GNOMON_BENCH_WORKER_BATCHES", "1") == "0":  # for A/B runs
                args.append("--no-batches")
            # GNOMON_BENCH_WORKER_NICE=N: the load generators stand in for other machines;
            # niced, they leave the cores to the nodes and gateways under test first.
            nice = int(os.environ.get("GNOMON_BENCH_WORKER_NICE", 0))
            self.procs.append(subprocess.Popen(args, preexec_fn=(lambda n=nice: os.nice(n))
                                               if nice else None))
        return self

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.poll() is None]

    def progress(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for p in range(self.processes):
            path = self.run_dir / f"{self.name}{p}.progress"
            with contextlib.suppress(OSError, ValueError):
                for k, v in json.loads(path.read_text()).items():
                    total[k] = total.get(k, 0) + int(v)
        return total

    def wait_connected(self, n: int, timeout_s: float = 60.0) -> None:
        wait_for(lambda: self.progress().get("welcomed", 0) >= n, timeout_s=timeout_s,
                 what=f"{n} worker streams welcomed", interval_s=0.1)

    def stop(self, timeout_s: float = 60.0) -> dict[str, Any]:
        self.stop_file.touch()
        deadline = time.monotonic() + timeout_s
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        return self.results()

    def results(self) -> dict[str, Any]:
        merged: dict[str, Any] = {"counts": {}, "errors": {}, "assigns": [], "acks_per_100ms": {},
                                  "assigns_per_100ms": {}, "hb_per_100ms": {}}
        for p in range(self.processes):
            path = self.run_dir / f"{self.name}{p}.json"
            if not path.exists():
                continue
            doc = json.loads(path.read_text())
            for k, v in doc["counts"].items():
                merged["counts"][k] = merged["counts"].get(k, 0) + v
            for k, v in doc.get("errors", {}).items():
                merged["errors"][k] = merged["errors"].get(k, 0) + v
            merged["assigns"].extend(doc.get("assigns", []))
            for key in ("acks_per_100ms", "assigns_per_100ms", "hb_per_100ms"):
                for b, v in doc.get(key, {}).items():
                    merged[key][int(b)] = merged[key].get(int(b), 0) + v
        return merged
