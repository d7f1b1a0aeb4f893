"""Scenario 2, trigger accuracy. Lateness = task start at the worker - scheduled_for.

- Steady state: 1,000 interval jobs every second with spread phases (1,000 fires/s).
  Goal p99 <= 100 ms. Peers: Celery beat, RedBeat, APScheduler on the same job set.
- Midnight herd: 100,000 one-shot jobs due in the same second, workers with spare capacity.
  Goal: all started within 30 s, none lost; p50 / p99 / max and the drain curve. The peers run
  a herd of 10,000 (as does gnomon, for the ratio): at 100,000 celery beat compares its whole
  schedule on every tick and APScheduler inserts jobs one transaction at a time, which would
  take far beyond the ten minutes a scenario may run.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from gnomon.bench import Options
from gnomon.bench.harness import profile_text, run_gnomon, run_gnomon_herd
from gnomon.bench.peers import JobSet, not_installed, run_apscheduler, run_celery
from gnomon.bench.report import Report, log, now_ms, plot
from gnomon.bench.stats import median, summary

PEERS = {"celery beat": "celery", "RedBeat": "redbeat", "APScheduler": "apscheduler"}
GOAL_P50_MS, GOAL_P99_MS = 20, 100
GOAL_HERD_S = 15


def _steady_peer(name: str, jobs: JobSet, root: Path, warmup: float, measure: float
                 ) -> dict[str, Any]:
    if name == "APScheduler":
        return run_apscheduler(jobs, root, warmup_s=warmup, measure_s=measure)
    return run_celery(jobs, root, scheduler="redbeat" if name == "RedBeat" else "beat",
                      warmup_s=warmup, measure_s=measure)


def _herd_peer(name: str, count: int, root: Path, timeout_s: float) -> dict[str, Any]:
    lead_s = 8 + count / 2000
    due = now_ms() + int(lead_s * 1000)
    jobs = JobSet("once", count, at_ms=due)
    if name == "APScheduler":
        r = run_apscheduler(jobs, root, warmup_s=0, measure_s=timeout_s, until=count)
    else:
        r = run_celery(jobs, root, scheduler="beat", warmup_s=0, measure_s=timeout_s,
                       until=count)
    lateness = sorted(st - due for _s, st in r.get("raw", []))
    started = len(lateness)
    return {"count": count, "started": started, "lost_or_late": count - started,
            "lateness_ms": summary(lateness), "lateness_sorted": lateness,
            "all_started_s": round(lateness[-1] / 1000, 2) if started >= count else None,
            "cpu": r.get("cpu"), "setup": r.get("setup"), "error": r.get("error"),
            "add_s": r.get("add_s")}


def run(opts: Options) -> Report:
    quick = opts.quick
    steady = JobSet("interval", count=100 if quick else 1000, interval_ms=1000)
    warmup, measure = (2.0, 3.0) if quick else (5.0, 20.0)
    herd_n = 500 if quick else 100_000
    herd_peer_n = 500 if quick else 10_000
    herd_timeout = 30.0 if quick else 120.0
    report = Report("accuracy", quick, "trigger lateness (task start at the worker - slot)")
    report.setup.append(
        f"Steady: {steady.count:,} interval jobs every {steady.interval_ms} ms, spread phases "
        f"({steady.offered_per_s:,.0f} fires/s), window {measure:.0f}s after {warmup:.0f}s; "
        f"herd: {herd_n:,} one-shot jobs due at one instant (peers and the ratio: "
        f"{herd_peer_n:,}); {opts.n_rounds()} alternating round(s) of the steady run.")
    peers = {n: not_installed(k) for n, k in PEERS.items()} if opts.peers else \
        {n: "skipped (--no-peers)" for n in PEERS}
    steady_res: dict[str, list[dict[str, Any]]] = {"gnomon": [], **{p: [] for p in PEERS}}
    herd: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="gnomon-bench-acc-") as tmp:
        root = Path(tmp)
        for rnd in range(opts.n_rounds()):
            log(f"steady round {rnd + 1}: gnomon")
            r = run_gnomon(steady, root / f"g{rnd}", warmup_s=warmup, measure_s=measure,
                           drain_s=1.0 if quick else 3.0,
                           profile_s=10.0 if (rnd == 0 and not quick) else 0.0)
            steady_res["gnomon"].append(r)
            log(f"gnomon: lateness {r['lateness_ms']} ({r['completions_per_s']}/s)")
            for name in PEERS:
                if peers[name]:
                    continue
                log(f"steady round {rnd + 1}: {name}")
                try:
                    pr = _steady_peer(name, steady, root / f"p{rnd}", warmup, measure)
                except Exception as exc:  # noqa: BLE001
                    pr = {"error": repr(exc)}
                steady_res[name].append(pr)
                log(f"{name}: lateness {pr.get('lateness_ms')} ({pr.get('completions_per_s')}/s)")
        # Herds: gnomon at the goal size, then every system at the peers' size.
        log(f"herd: gnomon, {herd_n:,} jobs")
        herd["gnomon"] = run_gnomon_herd(herd_n, root / "herd-g", timeout_s=herd_timeout,
                                         profile_s=0 if quick else 30)
        log(f"gnomon herd: {_herd_line(herd['gnomon'])}")
        if herd_peer_n != herd_n:
            log(f"herd: gnomon, {herd_peer_n:,} jobs")
            herd["gnomon (peer size)"] = run_gnomon_herd(herd_peer_n, root / "herd-g2",
                                                         timeout_s=herd_timeout)
            log(f"gnomon herd: {_herd_line(herd['gnomon (peer size)'])}")
        for name in ("celery beat", "APScheduler"):
            if peers[name]:
                continue
            log(f"herd: {name}, {herd_peer_n:,} jobs")
            try:
                herd[name] = _herd_peer(name, herd_peer_n, root / f"herd-{name[:3]}",
                                        herd_timeout)
            except Exception as exc:  # noqa: BLE001
                herd[name] = {"error": repr(exc)}
            log(f"{name} herd: {_herd_line(herd[name])}")

    def med(system: str, q: str) -> float | None:
        vals = [r["lateness_ms"].get(q) for r in steady_res[system]
                if isinstance(r.get("lateness_ms"), dict) and r["lateness_ms"].get("n")]
        return median(vals) if vals else None

    report.add("steady: gnomon lateness p50 / p99 per round (ms)", " ; ".join(
        f"{r['lateness_ms'].get('p50')} / {r['lateness_ms'].get('p99')}"
        for r in steady_res["gnomon"]))
    g50, g99 = med("gnomon", "p50"), med("gnomon", "p99")
    report.add(f"steady {steady.offered_per_s:,.0f}/s: lateness p50 (ms)", g50,
               goal=f"<= {GOAL_P50_MS}", met=g50 is not None and g50 <= GOAL_P50_MS)
    report.add(f"steady {steady.offered_per_s:,.0f}/s: lateness p99 (ms)", g99,
               goal=f"<= {GOAL_P99_MS}", met=g99 is not None and g99 <= GOAL_P99_MS)
    for name in PEERS:
        for q in ("p50", "p99"):
            report.add(f"steady: lateness {q} (ms, lower is better) vs {name}", med("gnomon", q),
                       peer=name, peer_value=peers[name] or _err(steady_res[name]) or med(name, q))
        rates = [r.get("completions_per_s") for r in steady_res[name] if "completions_per_s" in r]
        if rates:
            report.add(f"steady: tasks started/s vs {name}",
                       median(r["completions_per_s"] for r in steady_res["gnomon"]), peer=name,
                       peer_value=median(rates))
    g = herd["gnomon"]
    report.add(f"herd {herd_n:,}: all started after (s)", g.get("all_started_s") or
               f"not all in {herd_timeout:.0f}s", goal=f"<= {GOAL_HERD_S}",
               met=bool(g.get("all_started_s")) and g["all_started_s"] <= GOAL_HERD_S)
    report.add(f"herd {herd_n:,}: started within {herd_timeout:.0f}s / at all (of {herd_n:,})",
               f"{g['started_within_timeout']:,} / {g['started']:,}")
    report.add(f"herd {herd_n:,}: lost (never started) / doubled (2 fires of a slot)",
               f"{g['lost']} / {g['doubled']}", goal="0 / 0",
               met=g["lost"] == 0 and g["doubled"] == 0)
    report.add(f"herd {herd_n:,}: tasks re-executed (attempt > 1) / leader sessions",
               f"{g['reexecuted']} / {g['leader_sessions']}")
    if g["snapshots"]:
        report.notes.append(f"herd {herd_n:,}: snapshots written by the nodes during the run "
                            "(node, jobs, runs, ms): " + "; ".join(
                                " ".join(str(x) for x in s) for s in g["snapshots"]))
    for q in ("p50", "p99", "max"):
        report.add(f"herd {herd_n:,}: lateness {q} (s)",
                   round(g["lateness_ms"].get(q, float("nan")) / 1000, 2))
    if g.get("created_after_due_s"):
        report.notes.append(f"herd jobs were still being created {g['created_after_due_s']}s "
                            "after the due instant: those started late for that reason too")
    gp = herd.get("gnomon (peer size)", g)
    for name in ("celery beat", "APScheduler"):
        p = herd.get(name, {})
        status = peers[name] or (f"error: {p['error']}" if p.get("error") else "")
        for q in ("p50", "max"):
            report.add(f"herd {herd_peer_n:,}: lateness {q} (s, lower is better) vs {name}",
                       round(gp["lateness_ms"].get(q, float("nan")) / 1000, 2), peer=name,
                       peer_value=status or round(p["lateness_ms"].get(q, float("nan")) / 1000, 2)
                       if p.get("lateness_ms", {}).get("n") else status or "none started")
        if not status and p:
            report.add(f"herd {herd_peer_n:,}: started within {herd_timeout:.0f}s vs {name}",
                       gp["started"], peer=name, peer_value=p["started"])
    s0 = steady_res["gnomon"][0]
    per_task = [(r.get("cpu_ms_per_task") or {}).get("all") for r in steady_res["gnomon"]]
    report.add("steady: CPU per task, all gnomon processes (ms; per round)",
               " ; ".join(str(x) for x in per_task))
    report.add(f"herd {herd_n:,}: CPU per task started, all gnomon processes (ms)",
               (g.get("cpu_ms_per_task") or {}).get("all"))
    report.add("steady: CPU % of one core, leader (round 1)",
               next(v["core_pct"] for k, v in s0["cpu"].items() if "leader" in k))
    report.setup.append(s0["setup"] + ". Herd: " + g["setup"] + ".")
    for name in PEERS:
        if steady_res[name] and steady_res[name][0].get("setup"):
            report.setup.append(f"{name}: {steady_res[name][0]['setup']}.")
    if s0.get("profile"):
        report.notes.append("steady-state leader profile (py-spy, 10 s after the window):\n"
                            + profile_text(s0["profile"]))
    if g.get("profile"):
        report.notes.append("herd leader profile (py-spy during the drain, first 30 s):\n"
                            + profile_text(g["profile"]))
    report.data = {"steady": {k: [{kk: vv for kk, vv in r.items() if kk not in ("per_100ms",
                                                                                "raw")}
                                  for r in v] for k, v in steady_res.items()},
                   "herd": {k: {kk: vv for kk, vv in v.items() if kk != "lateness_sorted"}
                            for k, v in herd.items()}}
    # Plots: the drain curve of the herd (tasks started vs time since the due instant) and the
    # steady lateness distribution per system.
    curves = {}
    for name, h in herd.items():
        lat = h.get("lateness_sorted") or []
        if lat:
            curves[f"{name} ({h['count']:,})"] = ([x / 1000 for x in lat],
                                                  [100 * (i + 1) / h["count"]
                                                   for i in range(len(lat))])
    plot(report, opts.out, "herd_drain", "Herd drain: share of tasks started",
         "seconds after the due instant", "% of the herd started", curves)
    plot(report, opts.out, "herd_cdf_gnomon", f"gnomon herd {herd_n:,}: tasks started",
         "seconds after the due instant", "tasks started",
         {"gnomon": ([x / 1000 for x in g.get("lateness_sorted", [])],
                     list(range(1, len(g.get("lateness_sorted", [])) + 1)))})
    return report


def _err(runs: list[dict[str, Any]]) -> str:
    return f"error: {runs[0]['error']}" if runs and runs[0].get("error") else ""


def _herd_line(h: dict[str, Any]) -> str:
    if h.get("error"):
        return f"error {h['error']}"
    return (f"started {h.get('started')}/{h.get('count')}, all after {h.get('all_started_s')}s, "
            f"lateness {h.get('lateness_ms')}")


if __name__ == "__main__":  # pragma: no cover
    from gnomon.bench import main

    raise SystemExit(main(["accuracy", *sys.argv[1:]]))

