"""Scenario gateway: tasks through two relaying gnomon-gateway processes, side by side with
workers straight on the leader, and a gateway killed (-9) under load.

Same job set, fresh cluster per run, alternating: completions/s at saturation and CPU per
completed task over every process (nodes, workers and, through gateways, the gateways).
Then HTTP workers beside stream workers on the leader (each kind on a queue of its own, the
same fires offered to each): completions/s and fire-to-start lateness. Then the same load
through two gateways with the first killed in the middle of the window:
leases lost by its workers (a lost lease is a task run again after its TTL: goal 0), the
leases they resumed through the other gateway, and the time until every stream was welcomed
again.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gnomon.bench import Options
from gnomon.bench.cluster import NODE_DEFAULTS, BenchCluster
from gnomon.bench.harness import run_gnomon
from gnomon.bench.load import WorkerFleet, create_jobs_bulk, interval_spec
from gnomon.bench.peers import JobSet
from gnomon.bench.report import Report, log, now_ms
from gnomon.bench.stats import median, rate_in_window, summary

KILL_LEASES = {"lease_ttl_ms": "4000", "heartbeat_interval_ms": "1000"}


def run(opts: Options) -> Report:
    quick = opts.quick
    jobs = JobSet("interval", count=40 if quick else 800, interval_ms=100)
    warmup, measure = (2.0, 4.0) if quick else (5.0, 20.0)
    report = Report("gateway", quick, "tasks direct and through relaying gateways; a gateway "
                                      "killed under load")
    report.setup.append(
        f"Job set: {jobs.count} interval jobs every {jobs.interval_ms} ms (offered "
        f"{jobs.offered_per_s:,.0f} fires/s); 2 raw-protocol worker processes x 4 streams; "
        f"window {measure:.0f}s after a {warmup:.0f}s warm-up; {opts.n_rounds()} alternating "
        "round(s) of direct and through 2 gateways (--worker-upstream relay), then one run "
        f"through 2 gateways with the first killed (-9) {measure / 2:.0f}s into the window.")
    runs: dict[str, list[dict[str, Any]]] = {"direct": [], "gateways": []}
    with tempfile.TemporaryDirectory(prefix="gnomon-bench-gw-") as tmp:
        root = Path(tmp)
        # --quick runs the kill alone: it crosses the gateways too, and the direct run is
        # the throughput scenario's.
        for rnd in range(0 if quick else opts.n_rounds()):
            for how, gateways in (("direct", 0), ("gateways", 2)):
                log(f"round {rnd + 1}: {how}")
                r = run_gnomon(jobs, root / f"{how}{rnd}", warmup_s=warmup, measure_s=measure,
                               drain_s=1.0 if quick else 3.0, gateways=gateways)
                runs[how].append(r)
                log(f"{how}: {r['completions_per_s']} completions/s, "
                    f"{r['cpu_ms_per_task']['all']} ms CPU per task")
        log("HTTP workers and stream workers, side by side")
        side = _http_and_stream(root / "http", workers=20 if quick else 200,
                                jobs_per_queue=10 if quick else 50, warmup_s=warmup,
                                measure_s=measure)
        log("gateway kill -9 under load")
        # A lease the kill lost would be granted again within the window: TTL < half of it.
        kill = run_gnomon(jobs, root / "kill", warmup_s=warmup, measure_s=measure,
                          drain_s=1.0 if quick else 3.0, gateways=2,
                          kill_gateway_at_s=measure / 2, overrides=KILL_LEASES, record="full")

    def med(how: str, *path: str) -> float | None:
        vals = []
        for r in runs[how]:
            v: Any = r
            for key in path:
                v = v.get(key) if isinstance(v, dict) else None
            if isinstance(v, int | float):
                vals.append(float(v))
        return median(vals) if vals else None

    for label, path in (("completed tasks/s at saturation", ("completions_per_s",)),
                        ("CPU ms per task, all processes", ("cpu_ms_per_task", "all")),
                        ("CPU ms per task, the nodes", ("cpu_ms_per_task", "nodes")),
                        ("leader sessions (elections) in the run", ("node_log", "leader_sessions"))):
        report.add(f"{label}: direct / through 2 gateways (median of rounds)",
                   f"{_fmt(med('direct', *path))} / {_fmt(med('gateways', *path))}")
    counts = kill["counts"]
    report.add("gateway kill -9 (lease TTL 4 s): tasks run twice (received by workers twice)",
               kill["received_twice"], goal="0", met=kill["received_twice"] == 0)
    report.add("gateway kill -9: tasks leased again (attempt > 1: granted into the dead "
               "gateway and never received, or expired)", kill["retried_assigns"])
    report.add("gateway kill -9: completions unacknowledged when it died, then listed in "
               "Hello: resumed / no longer held (recorded meanwhile, or expired)",
               f"{counts.get('resumed', 0)} / {counts.get('lost_leases', 0)}")
    report.add("gateway kill -9: seconds until every stream was welcomed again",
               kill["gateway_recovery_s"])
    report.add("gateway kill -9: completed tasks/s over the window", kill["completions_per_s"])
    for how in ("stream", "http"):
        r = side[how]
        report.add(f"{side['workers'] // 2} {how} workers (capacity 1), {side['offered']:,} "
                   "fires/s offered to their queue: completed tasks/s / fire-to-start ms "
                   "p50 / p99", f"{r['completions_per_s']:,} / {r['lateness_ms'].get('p50')} / "
                                f"{r['lateness_ms'].get('p99')}")
    report.data = {"runs": runs, "kill": kill, "http_and_stream": side}
    return report


def _http_and_stream(root: Path, *, workers: int, jobs_per_queue: int, warmup_s: float,
                     measure_s: float) -> dict[str, Any]:
    """`workers` / 2 stream workers and as many HTTP workers (each capacity 1) on the leader,
    each kind on its own queue with `jobs_per_queue` interval jobs every 100 ms."""
    root.mkdir(parents=True, exist_ok=True)
    cluster = BenchCluster(root / "cluster", 3, dict(NODE_DEFAULTS), http=True).start()
    half, procs = workers // 2, 2
    stop_file = root / "http.stop"
    http_procs: list[subprocess.Popen] = []
    fleet = None
    try:
        leader = cluster.find_leader()
        servers = [leader.grpc_addr] + [n.grpc_addr for n in cluster.nodes if n is not leader]
        fleet = WorkerFleet(servers, root / "stream", processes=procs, streams=half // procs,
                            credits=1, queue="stream", name="s",
                            max_s=warmup_s + measure_s + 600).start()
        http_procs = [subprocess.Popen([
            sys.executable, "-m", "gnomon.bench.httpworker", "--url", leader.url,
            "--workers", str(half // procs), "--queue", "http", "--id", f"h{p}",
            "--max-s", str(warmup_s + measure_s + 600), "--stop-file", str(stop_file),
            "--out", str(root / f"h{p}.json")]) for p in range(procs)]
        fleet.wait_connected(half)
        anchor = now_ms() + 1000
        specs = [interval_spec(f"{q}{i}", 100, anchor + i * 100 // jobs_per_queue, queue=q)
                 for q in ("stream", "http") for i in range(jobs_per_queue)]
        create_jobs_bulk(servers, specs, per_call=200, prefix="bench")
        time.sleep(max(0.0, (anchor + warmup_s * 1000 - now_ms()) / 1000))
        t0 = now_ms()
        time.sleep(measure_s)
        t1 = now_ms()
        stream = fleet.stop()
        fleet = None
        stop_file.touch()
        for proc in http_procs:
            proc.wait(60)
        docs = [json.loads((root / f"h{p}.json").read_text()) for p in range(procs)]
        http = {"assigns": [a for d in docs for a in d["assigns"]], "acks_per_100ms": {
            int(b): sum(int(d["acks_per_100ms"].get(b, 0)) for d in docs)
            for d in docs for b in d["acks_per_100ms"]},
            "counts": {k: sum(d["counts"].get(k, 0) for d in docs) for k in docs[0]["counts"]}}
        return {"workers": workers, "offered": jobs_per_queue * 10,
                "stream": _figures(stream, t0, t1), "http": _figures(http, t0, t1)}
    finally:
        if fleet is not None:
            fleet.stop(timeout_s=10)
        stop_file.touch()
        for proc in http_procs:
            if proc.poll() is None:
                proc.kill()
        cluster.kill_all()


def _figures(res: dict[str, Any], t0: int, t1: int) -> dict[str, Any]:
    in_window = [r for r in res["assigns"] if t0 <= r[1] < t1]
    return {"completions_per_s": round(rate_in_window(res["acks_per_100ms"], t0, t1), 1),
            "lateness_ms": summary([r[1] - r[0] for r in in_window]),
            "counts": res["counts"]}


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.3f}".rstrip("0").rstrip(".")
