"""Scenario 5, workers: 10,000 concurrent worker streams on the leader, from a few processes.

Phase 1: every stream heartbeats at the server's interval (heartbeat_interval_ms, 2 s):
heartbeats acknowledged per second, leader CPU, leader memory per stream, time to open them.
Phase 2: the same streams heartbeat every 0.25 s (offered 40,000/s): the acknowledgements per
second the leader sustains. Streams hold no task (no credits): this is the cost of idle
workers. Peer: etcd 3.4 LeaseKeepAlive per second at saturation (one keep-alive renews one
lease; a gnomon heartbeat renews every lease of its worker, none here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gnomon.bench import Options
from gnomon.bench.cluster import log_offsets, node_log_lines, running_cluster
from gnomon.bench.etcd_peer import EtcdCluster
from gnomon.bench.harness import node_groups, profile, profile_text
from gnomon.bench.load import WorkerFleet
from gnomon.bench.meters import CpuMeter, rss_bytes
from gnomon.bench.peers import not_installed
from gnomon.bench.report import Report, log, now_ms, plot
from gnomon.bench.stats import rate_in_window, rate_series
from gnomon.node.local.gateway import GatewayProc

CONNECT_TIMEOUT_S = 60.0


def _relay_args(relay: bool) -> list[str]:
    """GNOMON_BENCH_RELAY_HEARTBEATS=messages: the relay's heartbeats as the workers' own
    messages (the gateway's --relay-heartbeats), to set against heartbeat frames."""
    how = os.environ.get("GNOMON_BENCH_RELAY_HEARTBEATS", "")
    return ["--relay-heartbeats", how] if relay and how else []


def _phase(root: Path, name: str, procs: int, per_proc: int, hb_s: float, measure_s: float,
           prof_s: float = 0.0, connect_timeout_s: float = CONNECT_TIMEOUT_S,
           via_gateway: bool = False, relay: bool = False,
           overrides: dict[str, str] | None = None,
           gateway_args: tuple[str, ...] = (), connect_rate: float = 400.0) -> dict[str, Any]:
    """A fresh cluster and `procs` x `per_proc` idle streams on its leader (through two
    gateways with `via_gateway`, relaying with `relay`)."""
    with running_cluster(overrides) as (cluster, leader):
        since = log_offsets(cluster)
        gateways = []
        try:
            if via_gateway:
                gateways = [GatewayProc(cluster, root / f"{name}-gw{i}.log", *_relay_args(relay),
                                        *gateway_args, relay=relay) for i in (1, 2)]
                for gw in gateways:
                    gw.wait_serving()
                    # GNOMON_BENCH_GATEWAY_NICE=N: gateways stand in for machines of their own;
                    # niced, they leave the nodes the cores first.
                    if os.environ.get("GNOMON_BENCH_GATEWAY_NICE"):
                        os.setpriority(os.PRIO_PROCESS, gw.proc.pid,
                                       int(os.environ["GNOMON_BENCH_GATEWAY_NICE"]))
            out = _streams(cluster, leader, root, name, procs, per_proc, hb_s, measure_s,
                           prof_s, connect_timeout_s, gateways, connect_rate)
        finally:
            for gw in gateways:
                gw.stop()
        out["leader_sessions"] = len(node_log_lines(cluster, r"leading \(session", since))
        out["terms"] = max([int(m.group(1)) for _, m in node_log_lines(
            cluster, r"leading \(session \d+, term (\d+)\)", since)] or [0])
    return out


def _streams(cluster, leader, root: Path, name: str, procs: int, per_proc: int, hb_s: float,
             measure_s: float, prof_s: float, connect_timeout_s: float,
             gateways: list[GatewayProc], connect_rate: float = 400.0) -> dict[str, Any]:
    streams = procs * per_proc
    rss0 = rss_bytes(leader.proc.pid)
    servers = [gw.addr for gw in gateways] or [leader.grpc_addr]
    fleet = WorkerFleet(servers, root / name, processes=procs, streams=per_proc,
                        credits=0, record="none", heartbeat_s=hb_s,
                        # GNOMON_BENCH_STREAMS_PER_CONNECTION (default 10): HTTP/2 streams
                        # per worker connection.
                        channels=max(1, per_proc // int(os.environ.get(
                            "GNOMON_BENCH_STREAMS_PER_CONNECTION", 10))),
                        name=name, connect_rate=connect_rate,
                        max_s=measure_s + prof_s + 300, spread=True).start()
    try:
        t0 = time.monotonic()
        peak = 0
        while time.monotonic() - t0 < connect_timeout_s:
            peak = max(peak, fleet.progress().get("welcomed", 0))
            if peak >= streams:
                break
            time.sleep(0.2)
        connect_s = time.monotonic() - t0
        log(f"{name}: {peak} of {streams} streams open after {connect_s:.1f}s")
        time.sleep(4.0)  # every stream past its first (randomly phased) heartbeat
        gateway_pids = {"gateways": lambda: [gw.proc.pid for gw in gateways]} if gateways else {}
        meter = CpuMeter({**node_groups(cluster, leader.node_id),
                          "raw workers": fleet.pids, **gateway_pids}).start()
        w0 = now_ms()
        time.sleep(measure_s)
        w1 = now_ms()
        cpu = meter.stop()
        rss1 = rss_bytes(leader.proc.pid)
        prof = profile(leader.proc.pid, prof_s, root / f"{name}.folded") if prof_s else None
        connected = fleet.progress().get("welcomed", 0)
        counts_window = fleet.progress()
    finally:
        res = fleet.stop(timeout_s=60)
    hb = {int(k): v for k, v in res["hb_per_100ms"].items()}
    return {"streams": streams, "connected_at_end": connected, "connected_peak": peak,
            "connect_s": round(connect_s, 1) if peak >= streams else None,
            "worker_errors": res["errors"], "counts_at_window_end": counts_window,
            "offered_hb_per_s": round(streams / (hb_s or 2.0), 0),
            "hb_acks_per_s": round(rate_in_window(hb, w0, w1), 0), "cpu": cpu,
            "leader_rss_mib": [round(rss0 / 2**20, 1), round(rss1 / 2**20, 1)],
            "leader_kib_per_stream": round((rss1 - rss0) / 1024 / max(1, streams), 1),
            "counts": res["counts"], "profile": prof, "series": rate_series(hb, w0)}


def etcd_keepalives(root: Path, seconds: float, leases: int, processes: int = 2
                    ) -> dict[str, Any]:
    cluster = EtcdCluster(root / "etcd").start()
    try:
        leader = cluster.leader()
        meter = CpuMeter({f"{m.name}{' (leader)' if m is leader else ''}":
                          (lambda m=m: [m.proc.pid]) for m in cluster.members}).start()
        procs = [subprocess.Popen([sys.executable, "-m", "gnomon.bench.etcd_peer", "keepalive",
                                   "--endpoint", leader.endpoint, "--seconds", str(seconds),
                                   "--leases", str(leases // processes), "--streams", "50",
                                   "--window", "32", "--out", str(root / f"ka{i}.json")])
                 for i in range(processes)]
        for p in procs:
            p.wait(timeout=seconds + 120)
        cpu = meter.stop()
        docs = [json.loads((root / f"ka{i}.json").read_text()) for i in range(processes)]
        return {"keepalives_per_s": round(sum(d["acks"] / d["seconds"] for d in docs), 0),
                "cpu": cpu, "setup": f"{processes} load processes x 50 LeaseKeepAlive streams "
                                     f"(window 32) over {leases:,} leases, to the leader"}
    finally:
        cluster.stop()


def run(opts: Options) -> Report:
    if os.environ.get("GNOMON_BENCH_WORKERS_HOLD_S") and not opts.quick:
        return hold(opts, float(os.environ["GNOMON_BENCH_WORKERS_HOLD_S"]))
    quick = opts.quick
    procs, per_proc = (2, 100) if quick else (4, 2500)
    # GNOMON_BENCH_WORKER_STREAMS: another stream count (2,500 per process), e.g. the 20,000
    # of issue 14's goal.
    streams = int(os.environ.get("GNOMON_BENCH_WORKER_STREAMS", 0))
    if streams and not quick:
        procs, per_proc = max(1, -(-streams // 2500)), min(streams, 2500)
    measure = 4.0 if quick else 20.0
    via = opts.via_gateway
    mode = "relay" if opts.relay else "gateway"
    report = Report(f"workers-via-{mode}" if via else "workers", quick,
                    "idle worker streams: heartbeats, leader CPU and memory"
                    + (f", through two gateways ({'relay' if opts.relay else 'a stream each'})"
                       if via else ""))
    report.setup.append(
        f"{procs * per_proc:,} streams from {procs} raw-protocol worker processes (10 streams "
        "per HTTP/2 connection), "
        + ("through two gnomon-gateway processes (each process dials one first) to the "
           "leader" + (", each over one relay; " if opts.relay else "; ")
           if via else "all on the leader; ")
        + "no credits (idle workers); heartbeat interval 2 s (server default) then 0.25 s; "
        "node defaults otherwise.")
    with tempfile.TemporaryDirectory(prefix="gnomon-bench-wk-") as tmp:
        root = Path(tmp)
        log(f"workers: {procs * per_proc:,} streams, heartbeats at the server's interval")
        p1 = _phase(root, "hb2s", procs, per_proc, 0.0, measure, prof_s=0 if quick else 10,
                    via_gateway=via, relay=opts.relay)
        log(f"workers: {p1['hb_acks_per_s']} acks/s, peak {p1['connected_peak']} streams, "
            f"{p1['leader_sessions']} leader sessions")
        held = p1
        if p1["connected_peak"] < p1["streams"] or p1["leader_sessions"] > 1:
            procs, per_proc = max(1, procs // 2), per_proc
            log(f"workers: {procs * per_proc:,} streams (half), server's interval")
            held = _phase(root, "hb2s-half", procs, per_proc, 0.0, measure, via_gateway=via,
                          relay=opts.relay)
            log(f"workers: {held['hb_acks_per_s']} acks/s, peak {held['connected_peak']}, "
                f"{held['leader_sessions']} leader sessions")
        log(f"workers: {procs * per_proc:,} streams, heartbeats every 0.25 s")
        p2 = _phase(root, "hb250ms", procs, per_proc, 0.25, measure, via_gateway=via,
                    relay=opts.relay)
        log(f"workers: {p2['hb_acks_per_s']} acks/s")
        etcd_status = not_installed("etcd") if opts.peers else "skipped (--no-peers)"
        etcd = None
        if not etcd_status:
            log("etcd: keep-alives")
            etcd = etcd_keepalives(root, 3.0 if quick else 10.0, 1000 if quick else 10_000)
            log(f"etcd: {etcd['keepalives_per_s']} keep-alives/s")
    lead = lambda p: next(v for k, v in p["cpu"].items() if "leader" in k)  # noqa: E731
    stable = p1["connected_peak"] >= p1["streams"] and p1["leader_sessions"] <= 1
    report.add(f"{p1['streams']:,} streams: held on one leader (peak open / leader changes)",
               f"{p1['connected_peak']:,} / {p1['leader_sessions']}",
               goal=f"{p1['streams']:,} / 1", met=stable)
    report.add("time to open every stream (s)", p1["connect_s"] or
               f"not all in {CONNECT_TIMEOUT_S:.0f} s (peak {p1['connected_peak']:,})")
    report.add("stream sessions / reconnects / errors (phase 1)",
               f"{p1['counts']['sessions']:,} / {p1['counts']['reconnects']:,} / "
               f"{p1['counts']['errors']:,}")
    if p1["worker_errors"]:
        report.notes.append("phase 1 stream errors seen by the workers: "
                            + json.dumps(p1["worker_errors"]))
    report.add(f"heartbeats acked/s at 2 s interval (offered {p1['offered_hb_per_s']:,.0f}/s)",
               p1["hb_acks_per_s"])
    report.add(f"leader CPU % of a core, {p1['streams']:,} streams at 2 s interval",
               lead(p1)["core_pct"])
    if held is not p1:
        report.add(f"{held['streams']:,} streams, 2 s interval: peak open / leader changes / "
                   "heartbeats acked/s",
                   f"{held['connected_peak']:,} / {held['leader_sessions']} / "
                   f"{held['hb_acks_per_s']:,.0f}")
        report.add(f"{held['streams']:,} streams: leader CPU % / memory per stream (KiB)",
                   f"{lead(held)['core_pct']} / {held['leader_kib_per_stream']}")
    if stable:
        report.add("leader RSS before / with the streams (MiB)",
                   f"{p1['leader_rss_mib'][0]} / {p1['leader_rss_mib'][1]}")
        report.add("leader memory per stream (KiB)", p1["leader_kib_per_stream"])
    report.add(f"{p2['streams']:,} streams at 0.25 s: heartbeats acked/s (offered "
               f"{p2['offered_hb_per_s']:,.0f}/s; peak open {p2['connected_peak']:,}; leader changes "
               f"{p2['leader_sessions']}) vs "
               "etcd keep-alives/s at saturation", p2["hb_acks_per_s"], peer="etcd 3.4",
               peer_value=etcd_status or etcd["keepalives_per_s"])
    report.add("leader CPU % of a core at 0.25 s interval", lead(p2)["core_pct"])
    report.add("raw worker processes CPU % of a core (0.25 s interval)",
               p2["cpu"]["raw workers"]["core_pct"])
    if via:
        report.add("gateways CPU % of a core, 2 s / 0.25 s interval (both gateways)",
                   f"{p1['cpu']['gateways']['core_pct']} / {p2['cpu']['gateways']['core_pct']}")
    if etcd:
        report.setup.append(f"etcd: 3 members; {etcd['setup']}.")
    if p1.get("profile"):
        report.notes.append(f"leader profile with {p1['streams']:,} streams at the 2 s interval "
                            "(py-spy):\n"
                            + profile_text(p1["profile"]))
    report.data = {"hb_2s": {k: v for k, v in p1.items() if k != "series"},
                   "hb_2s_held": {k: v for k, v in held.items() if k != "series"},
                   "hb_250ms": {k: v for k, v in p2.items() if k != "series"}, "etcd": etcd}
    plot(report, opts.out, "heartbeats", "Heartbeat acknowledgements per second",
         "seconds into the window", "acks/s",
         {"2 s interval": p1["series"], "0.25 s interval": p2["series"]})
    return report


def hold(opts: Options, hold_s: float) -> Report:
    """GNOMON_BENCH_WORKERS_HOLD_S: one phase only, GNOMON_BENCH_WORKER_STREAMS streams held
    for that long at the interval GNOMON_BENCH_HEARTBEAT_MS (default 10,000: the design
    documents' fleet heartbeats every 10 s), lease TTL three intervals."""
    streams = int(os.environ.get("GNOMON_BENCH_WORKER_STREAMS", 50_000))
    interval_ms = int(os.environ.get("GNOMON_BENCH_HEARTBEAT_MS", 10_000))
    procs, per_proc = max(1, -(-streams // 2500)), min(streams, 2500)
    report = Report("workers-hold", False, f"{procs * per_proc:,} idle worker streams held for "
                    f"{hold_s:.0f} s, heartbeats every {interval_ms / 1000:g} s")
    report.setup.append(
        f"{procs} raw-protocol worker processes x {per_proc:,} streams"
        + (", through two relaying gateways" if opts.via_gateway and opts.relay else
           ", through two gateways" if opts.via_gateway else ", on the leader")
        + f"; heartbeat_interval_ms {interval_ms}, lease_ttl_ms {3 * interval_ms}.")
    with tempfile.TemporaryDirectory(prefix="gnomon-bench-hold-") as tmp:
        p = _phase(Path(tmp), "hold", procs, per_proc, interval_ms / 1000, hold_s,
                   connect_timeout_s=max(CONNECT_TIMEOUT_S, procs * per_proc / 200),
                   via_gateway=opts.via_gateway, relay=opts.relay,
                   overrides={"heartbeat_interval_ms": str(interval_ms),
                              "lease_ttl_ms": str(3 * interval_ms)},
                   # Half the streams each, and room: max_calls counts every stream.
                   gateway_args=("--max-calls", str(procs * per_proc + 1_000)),
                   # Opening 8,000 streams a second (20 processes at 400) starved the leader's
                   # tick thread: elections, then every stream again. GNOMON_BENCH_CONNECT_RATE:
                   # streams opened per second over every process (default 500).
                   connect_rate=float(os.environ.get("GNOMON_BENCH_CONNECT_RATE", 500)) / procs)
    lead = next(v for k, v in p["cpu"].items() if "leader" in k)
    report.add("streams: peak open / open at the end / leader changes",
               f"{p['connected_peak']:,} / {p['connected_at_end']:,} / {p['leader_sessions']}",
               goal=f"{p['streams']:,} / {p['streams']:,} / 1",
               met=p["connected_at_end"] >= p["streams"] and p["leader_sessions"] <= 1)
    report.add("time to open every stream (s)", p["connect_s"] or "not all")
    report.add(f"heartbeats acked/s (offered {p['offered_hb_per_s']:,.0f}/s)",
               p["hb_acks_per_s"])
    report.add("stream sessions / reconnects / errors", f"{p['counts']['sessions']:,} / "
               f"{p['counts']['reconnects']:,} / {p['counts']['errors']:,}")
    report.add("leader CPU % of a core / memory per stream (KiB)",
               f"{lead['core_pct']} / {p['leader_kib_per_stream']}")
    if "gateways" in p["cpu"]:
        report.add("gateways CPU % of a core (both)", p["cpu"]["gateways"]["core_pct"])
    report.add("raw worker processes CPU % of a core", p["cpu"]["raw workers"]["core_pct"])
    report.data = {"hold": {k: v for k, v in p.items() if k != "series"}}
    return report


if __name__ == "__main__":  # pragma: no cover
    from gnomon.bench import main

    raise SystemExit(main(["workers", *sys.argv[1:]]))
