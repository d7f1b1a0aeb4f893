"""What tracing costs a node: the same sequential unary calls (GetStatus) and a burst of
triggered runs served by a 1-node cluster with tracing off and with `--tracing otlp` exporting
to a sink in this process; the node's CPU time per call (from /proc) and the calls' latency.

    .venv/bin/python bench/tracing_overhead.py [--calls 2000] [--runs 300]

Prints a table and writes bench/results/tracing_overhead.json. Everything runs on this
machine: compare the two columns with each other, not with a deployment.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc

from gnomon.node.local.cluster import LocalCluster, wait_for
from gnomon.v1 import api_pb2, api_pb2_grpc, types_pb2


class Sink:
    """Accepts OTLP/HTTP exports and counts their bytes (decodes nothing)."""

    def __init__(self) -> None:
        self.bytes = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                sink.bytes += len(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(tracing: str, calls: int, runs: int) -> dict:
    sink = Sink()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.server.server_address[1]}"}
    cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="trace-bench-")), 1,
                           {"tracing": tracing}, env=env).start()
    try:
        node = cluster.leader()
        stub = api_pb2_grpc.JobServiceStub(grpc.insecure_channel(node.grpc_addr))
        pid = node.proc.pid
        status = api_pb2_grpc.ClusterServiceStub(grpc.insecure_channel(node.grpc_addr))
        latencies = []
        cpu0, wall0 = _cpu_s(pid), time.perf_counter()
        for _ in range(calls):
            t0 = time.perf_counter()
            status.GetStatus(api_pb2.GetStatusRequest(), timeout=10)
            latencies.append((time.perf_counter() - t0) * 1000)
        busy_s, wall_s = _cpu_s(pid) - cpu0, time.perf_counter() - wall0
        # The node's CPU while idle for as long (proof entries, health loop), subtracted.
        cpu0 = _cpu_s(pid)
        time.sleep(wall_s)  # a measurement window, not a synchronisation
        call_cpu_us = (busy_s - (_cpu_s(pid) - cpu0)) / calls * 1e6
        far = int(time.time() * 1000) + 10 * 365 * 86_400_000
        spec = types_pb2.JobSpec(name="bench", schedule=types_pb2.Schedule(
            once=types_pb2.OnceSchedule(at_ms=far)), tasks=[types_pb2.TaskSpec(name="main")])
        job = stub.CreateJob(api_pb2.CreateJobRequest(request_id="bench", spec=spec), timeout=10)
        cpu0, wall0 = _cpu_s(pid), time.perf_counter()
        for i in range(runs):  # runs with no worker: a trigger span each, no attempts
            stub.TriggerJob(api_pb2.TriggerJobRequest(
                request_id=f"t{i}", job=api_pb2.JobRef(job_id=job.job.job_id)), timeout=10)
        busy_s, wall_s = _cpu_s(pid) - cpu0, time.perf_counter() - wall0
        cpu0 = _cpu_s(pid)
        time.sleep(wall_s)
        trigger_cpu_us = (busy_s - (_cpu_s(pid) - cpu0)) / runs * 1e6
        if tracing != "none":
            wait_for(lambda: sink.bytes > 0, timeout_s=30, what="an export")
        return {"tracing": tracing, "calls": calls,
                "status_p50_ms": round(statistics.median(latencies), 3),
                "status_p99_ms": round(_pct(latencies, 0.99), 3),
                "status_cpu_us_per_call": round(call_cpu_us, 1),
                "trigger_cpu_us_per_call": round(trigger_cpu_us, 1),
                "exported_bytes": sink.bytes}
    finally:
        cluster.stop()
        sink.server.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    rows = [measure(mode, args.calls, args.runs) for mode in ("none", "otlp", "none", "otlp")]
    keys = list(rows[0])
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(str(row[k]) for k in keys))
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "tracing_overhead.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
