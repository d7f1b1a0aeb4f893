"""Scenario 1, throughput: interval jobs firing continuously above what the system can do;
tasks leased to worker processes and completed. Figure: committed completions per second at
saturation (gnomon: ReportAck{accepted} received by the workers), CPU per process.

Peers, same job set, alternating with gnomon in the same invocation: Celery (beat, RedBeat)
with a Redis broker and Celery workers; APScheduler with a SQLite job store. etcd's
LeaseGrant rate is set against gnomon's lease grants (every gnomon task is one committed
lease grant). Goal: >= 5,000 tasks/s end to end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gnomon.bench import Options
from gnomon.bench.etcd_peer import EtcdCluster
from gnomon.bench.harness import profile_text, run_gnomon
from gnomon.bench.meters import cpu_ms_per_task
from gnomon.bench.peers import JobSet, not_installed, run_apscheduler, run_celery
from gnomon.bench.report import Report, log, plot
from gnomon.bench.stats import median, rate_series, summary

GOAL_TASKS_PER_S = 5000
GOAL_VS_APSCHEDULER = 1.0  # gnomon's completions/s >= this x APScheduler's, in the same run
# gnomon alone, fresh cluster per step: where completions stop keeping up with fires.
RAMP = (250, 500, 1000, 1500, 2000, 4000)
PEERS = {"celery beat": "celery", "RedBeat": "redbeat", "APScheduler": "apscheduler"}


def _run_peer(name: str, jobs: JobSet, root: Path, warmup: float, measure: float
              ) -> dict[str, Any]:
    if name == "celery beat":
        return run_celery(jobs, root, scheduler="beat", warmup_s=warmup, measure_s=measure)
    if name == "RedBeat":
        return run_celery(jobs, root, scheduler="redbeat", warmup_s=warmup, measure_s=measure)
    return run_apscheduler(jobs, root, warmup_s=warmup, measure_s=measure)


def etcd_grants(root: Path, seconds: float, processes: int = 2, concurrency: int = 64
                ) -> dict[str, Any]:
    """LeaseGrant calls per second against the etcd leader from `processes` load processes."""
    from gnomon.bench.meters import CpuMeter

    cluster = EtcdCluster(root / "etcd").start()
    try:
        leader = cluster.leader()
        meter = CpuMeter({f"{m.name}{' (leader)' if m is leader else ''}":
                          (lambda m=m: [m.proc.pid]) for m in cluster.members}).start()
        procs = [subprocess.Popen([sys.executable, "-m", "gnomon.bench.etcd_peer", "grant",
                                   "--endpoint", leader.endpoint, "--seconds", str(seconds),
                                   "--concurrency", str(concurrency),
                                   "--out", str(root / f"grant{i}.json")])
                 for i in range(processes)]
        for p in procs:
            p.wait(timeout=seconds + 60)
        cpu = meter.stop()
        docs = [json.loads((root / f"grant{i}.json").read_text()) for i in range(processes)]
        done = sum(d["done"] for d in docs)
        lat = [x for d in docs for x in d["latency_ms"]]
        return {"grants_per_s": round(done / max(d["seconds"] for d in docs), 1),
                "errors": sum(d["errors"] for d in docs), "latency_ms": summary(lat, 2),
                "cpu": cpu, "setup": f"3 etcd members; {processes} load processes x "
                                     f"{concurrency} concurrent LeaseGrant(TTL=60) to the leader"}
    finally:
        cluster.stop()


def run(opts: Options) -> Report:
    quick = opts.quick
    jobs = JobSet("interval", count=40 if quick else 800, interval_ms=100)
    warmup, measure = (2.0, 3.0) if quick else (5.0, 20.0)
    report = Report("throughput", quick, "tasks completed per second at saturation")
    report.setup.append(
        f"Job set: {jobs.count} interval jobs every {jobs.interval_ms} ms, phases spread "
        f"(offered {jobs.offered_per_s:,.0f} fires/s); window {measure:.0f}s after a "
        f"{warmup:.0f}s warm-up; {opts.n_rounds()} alternating round(s).")
    peers = {name: not_installed(key) for name, key in PEERS.items()} if opts.peers else \
        {name: "skipped (--no-peers)" for name in PEERS}
    results: dict[str, list[dict[str, Any]]] = {"gnomon": [], **{p: [] for p in PEERS}}
    with tempfile.TemporaryDirectory(prefix="gnomon-bench-tp-") as tmp:
        root = Path(tmp)
        for rnd in range(opts.n_rounds()):
            log(f"round {rnd + 1}: gnomon")
            results["gnomon"].append(run_gnomon(
                jobs, root / f"g{rnd}", warmup_s=warmup, measure_s=measure,
                drain_s=1.0 if quick else 3.0,
                profile_s=10.0 if (rnd == 0 and not quick) else 0.0))
            g = results["gnomon"][-1]
            log(f"gnomon: {g['completions_per_s']} completions/s, lateness {g['lateness_ms']}")
            for name in PEERS:
                if peers[name]:
                    continue
                log(f"round {rnd + 1}: {name}")
                try:
                    r = _run_peer(name, jobs, root / f"p{rnd}", warmup, measure)
                except Exception as exc:  # noqa: BLE001 - a broken peer is reported, not fatal
                    r = {"error": repr(exc)}
                results[name].append(r)
                log(f"{name}: {r.get('completions_per_s')} /s, lateness {r.get('lateness_ms')}")
        ramp = []
        for rate in ([] if quick else RAMP):
            log(f"ramp: gnomon at {rate:,} fires/s offered")
            r = run_gnomon(JobSet("interval", count=rate // 10, interval_ms=100),
                           root / f"ramp{rate}", warmup_s=4.0, measure_s=8.0)
            ramp.append({"offered_per_s": rate, **{k: r[k] for k in (
                "completions_per_s", "lateness_ms", "cpu", "cpu_ms_per_task")}})
            log(f"ramp {rate:,}/s: {r['completions_per_s']} completions/s, p99 "
                f"{r['lateness_ms'].get('p99')} ms")
        etcd = None
        if opts.peers and not not_installed("etcd"):
            log("etcd: LeaseGrant load")
            etcd = etcd_grants(root / "etcd", 3.0 if quick else 10.0)
            log(f"etcd: {etcd['grants_per_s']} grants/s")

    def med(system: str, key: str, sub: str | None = None) -> float | None:
        vals = []
        for r in results[system]:
            v = r.get(key)
            if sub is not None and isinstance(v, dict):
                v = v.get(sub)
            if isinstance(v, int | float):
                vals.append(float(v))
        return median(vals) if vals else None

    g_rate = med("gnomon", "completions_per_s")
    report.add("committed task completions/s (gnomon, median of rounds)", g_rate,
               goal=f">= {GOAL_TASKS_PER_S:,}", met=(g_rate or 0) >= GOAL_TASKS_PER_S)
    for name in PEERS:
        status = peers[name] or ("error: " + results[name][0]["error"]
                                 if results[name] and "error" in results[name][0] else "")
        peer_rate = None if status else med(name, "completions_per_s")
        goal = {} if name != "APScheduler" or not peer_rate else {
            "goal": f">= {GOAL_VS_APSCHEDULER:g}x",
            "met": (g_rate or 0) >= GOAL_VS_APSCHEDULER * peer_rate}
        report.add(f"tasks completed/s vs {name}", g_rate, peer=name,
                   peer_value=status or peer_rate, **goal)
    for q in ("p50", "p99"):
        report.add(f"lateness {q} in the window (ms; saturated systems fall behind)",
                   med("gnomon", "lateness_ms", q), peer="celery beat",
                   peer_value=peers["celery beat"] or med("celery beat", "lateness_ms", q))
    _cpu_rows(report, results, peers, measure, med)
    g_grants = med("gnomon", "assigns_per_s")
    report.add("lease grants/s (gnomon: committed GrantLeases per task; etcd: LeaseGrant)",
               g_grants, peer="etcd 3.4",
               peer_value=(etcd or {}).get("grants_per_s") if etcd else
               (not_installed("etcd") or "skipped (--no-peers)"))
    if ramp:
        kept = [r["offered_per_s"] for r in ramp
                if r["completions_per_s"] >= 0.95 * r["offered_per_s"]
                and (r["lateness_ms"].get("p99") or 1e9) < 1000]
        report.add("gnomon sustained fires/s (ramp: >= 95% completed, p99 lateness < 1 s)",
                   max(kept) if kept else None)
        report.add("gnomon ramp, completions/s per offered rate", ", ".join(
            f"{r['offered_per_s']:,}: {r['completions_per_s']:,.0f} (p99 "
            f"{r['lateness_ms'].get('p99', float('nan')):,.0f} ms, "
            f"{(r.get('cpu_ms_per_task') or {}).get('all')} ms CPU/task)" for r in ramp))
    g0 = results["gnomon"][0]
    for proc_name, c in g0["cpu"].items():
        if not proc_name.startswith("_"):
            report.add(f"CPU % of one core: {proc_name} (round 1)", c["core_pct"])
    report.setup.append(g0["setup"] + ".")
    for name in PEERS:
        if results[name] and "setup" in results[name][0]:
            cpu = ", ".join(f"{k} {v['core_pct']}%" for k, v in results[name][0]["cpu"].items()
                            if not k.startswith("_"))
            report.setup.append(f"{name}: {results[name][0]['setup']} (CPU of a core: {cpu}).")
    if etcd:
        report.setup.append(f"etcd: {etcd['setup']}.")
    if g0.get("profile"):
        report.notes.append("leader profile (py-spy, 10 s after the window):\n"
                            + profile_text(g0["profile"]))
    if g0.get("profile_follower"):
        report.notes.append("follower profile (py-spy, the same 10 s):\n"
                            + profile_text(g0["profile_follower"]))
    report.data = {"job_set": jobs.__dict__, "results": _strip(results), "etcd": etcd,
                   "ramp": ramp}
    if ramp:
        plot(report, opts.out, "ramp", "gnomon: completions vs offered fires (fresh cluster each)",
             "offered fires/s", "completed tasks/s",
             {"completed": ([r["offered_per_s"] for r in ramp],
                            [r["completions_per_s"] for r in ramp]),
              "offered": ([r["offered_per_s"] for r in ramp],
                          [r["offered_per_s"] for r in ramp])})
    series = {}
    for name, runs in results.items():
        if runs and "per_100ms" in runs[-1]:
            r = runs[-1]
            xs, ys = rate_series({int(k): v for k, v in r["per_100ms"].items()},
                                 r["window"][0] - int(warmup * 1000))
            series[name] = (xs, ys)
    plot(report, opts.out, "rate", "Completions per second (last round)",
         "seconds since the warm-up began", "tasks/s", series)
    return report


GOAL_CPU_MS_PER_TASK = 0.2


def _cpu_rows(report: Report, results: dict[str, list[dict[str, Any]]], peers: dict[str, str],
              measure: float, med) -> None:
    """CPU per completed task: gnomon's processes summed (nodes + workers; nodes alone), and
    each peer's (all its processes: scheduler, workers, broker) over the same window."""
    for r in results["gnomon"]:
        r["cpu_ms_all"] = (r.get("cpu_ms_per_task") or {}).get("all")
        r["cpu_ms_nodes"] = (r.get("cpu_ms_per_task") or {}).get("nodes")
    for name in PEERS:
        for r in results[name]:
            if "cpu" in r and r.get("completions_per_s"):
                r["cpu_ms_per_task"] = cpu_ms_per_task(r["cpu"], r["completions_per_s"] * measure)
    g_all = med("gnomon", "cpu_ms_all")
    report.add("CPU per completed task, all gnomon processes (3 nodes + workers; ms)", g_all,
               goal=f"<= {GOAL_CPU_MS_PER_TASK}", met=g_all is not None
               and g_all <= GOAL_CPU_MS_PER_TASK)
    report.add("CPU per completed task, the 3 nodes only (ms)", med("gnomon", "cpu_ms_nodes"))
    for name in PEERS:
        report.add(f"CPU per completed task (ms, lower is better) vs {name}", g_all, peer=name,
                   peer_value=peers[name] or med(name, "cpu_ms_per_task"))


def _strip(results: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    return {k: [{kk: vv for kk, vv in r.items() if kk not in ("per_100ms", "raw")} for r in v]
            for k, v in results.items()}


if __name__ == "__main__":  # pragma: no cover
    from gnomon.bench import main

    raise SystemExit(main(["throughput", *sys.argv[1:]]))
