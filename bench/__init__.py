"""gnomon benchmarks: each scenario prints a table and writes bench/results/<name>.json + PNGs.

    python -m gnomon.bench NAME [--quick] [--install] [--no-peers] [--out DIR]
    python -m gnomon.bench all            # every scenario, then results/all.md

Scenarios: throughput, accuracy, failover, scale, workers, gateway, api, ... (see each
module's docstring).
Peers (Celery + beat/RedBeat + Redis, APScheduler, etcd) run in the same invocation,
alternating with gnomon; a peer that is not installed shows "not installed" in the table
(`--install` installs it with pip / apt-get first). The CLI entry point is `main(argv)`.
"""

from __future__ import annotations

import argparse
import importlib
import time
from dataclasses import dataclass
from pathlib import Path

SCENARIOS: dict[str, str] = {
    "api": "CreateJob latency (one client) and throughput (100 concurrent clients)",
    "throughput": "tasks fired, leased and completed per second at saturation",
    "accuracy": "trigger lateness at 1,000 fires/s and in a 100,000-job midnight herd",
    "failover": "kill -9 the leader under load: time to the new leader's first fire",
    "scale": "1,000,000 jobs: memory, snapshot, restart, cost of one fire vs job count",
    "workers": "10,000 worker streams: heartbeats per second, leader CPU and memory",
    "gateway": "tasks direct and through relaying gateways; a gateway killed -9 under load",
    "transport": "CPU per Raft message: pickle+zlib+Fernet against the codec over TLS",
    "fairness": "tenant shares by weight, an interactive trigger under a backlog, TLS+auth cost",
    "httpapi": "HTTP/JSON API latency next to gRPC for the same calls (one client)",
}


@dataclass(frozen=True)
class Options:
    quick: bool = False
    install: bool = False
    peers: bool = True
    out: Path = Path(__file__).resolve().parent / "results"
    rounds: int = 0  # 0: the scenario's default (2 full, 1 quick)
    via_gateway: bool = False  # workers: streams through two gateways, not to the leader
    relay: bool = False  # with via_gateway: the gateways relay (--worker-upstream relay)

    def n_rounds(self) -> int:
        return self.rounds or (1 if self.quick else 2)


def run_scenario(name: str, opts: Options) -> str:
    """Run one scenario; print and return its table."""
    from gnomon.bench.report import log

    module = importlib.import_module(f"gnomon.bench.{name}")
    log(f"scenario {name}{' --quick' if opts.quick else ''}: {SCENARIOS[name]}")
    report = module.run(opts)
    path = report.write(opts.out)
    table = report.render()
    print("\n" + table + "\n", flush=True)
    log(f"wrote {path}" + (f" and {', '.join(report.plots)}" if report.plots else ""))
    return table


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m gnomon.bench` (and of `gnomon bench`)."""
    parser = argparse.ArgumentParser(prog="gnomon bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("name", choices=[*SCENARIOS, "all", "list"])
    parser.add_argument("--quick", action="store_true", help="small sizes (the test uses this)")
    parser.add_argument("--install", action="store_true",
                        help="install missing peers first (pip; apt-get for redis/etcd)")
    parser.add_argument("--no-peers", action="store_true", help="skip the peer comparisons")
    parser.add_argument("--out", type=Path, default=Options.out, help="results folder")
    parser.add_argument("--rounds", type=int, default=0,
                        help="alternating gnomon/peer rounds (default 2, 1 with --quick)")
    parser.add_argument("--via-gateway", action="store_true",
                        help="workers: the streams go through two gnomon-gateway processes "
                             "instead of straight to the leader")
    parser.add_argument("--relay", action="store_true",
                        help="with --via-gateway: the gateways multiplex their workers over one "
                             "relay each (--worker-upstream relay)")
    args = parser.parse_args(argv)
    if args.relay and not args.via_gateway:
        parser.error("--relay: goes with --via-gateway")
    if args.name == "list":
        for name, what in SCENARIOS.items():
            print(f"{name:12} {what}")
        return 0
    opts = Options(quick=args.quick, install=args.install, peers=not args.no_peers,
                   out=args.out, rounds=args.rounds, via_gateway=args.via_gateway,
                   relay=args.relay)
    if args.install:
        from gnomon.bench import peers

        peers.install_all()
    names = list(SCENARIOS) if args.name == "all" else [args.name]
    tables = []
    t0 = time.time()
    for name in names:
        tables.append(run_scenario(name, opts))
    if args.name == "all":
        from gnomon.bench.report import machine_info

        opts.out.mkdir(parents=True, exist_ok=True)
        (opts.out / "all.md").write_text(
            f"# gnomon benchmarks ({'quick' if opts.quick else 'full'})\n\n"
            f"machine at the end: {machine_info()}\n\nwall time {time.time() - t0:.0f} s\n\n"
            + "\n\n".join(tables) + "\n")
    return 0
