"""`python -m gnomon.jepsen run ...` / `python -m gnomon.jepsen matrix ...` (and `gnomon jepsen`).

Exit status: 0 no anomalies, 1 anomalies found, 2 inconclusive, 3 the harness could not run.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from gnomon.jepsen.context import WORKLOADS, TestOptions
from gnomon.jepsen.nemesis import FIRST_TIER, GATEWAY_TIER, GROUPS, SECOND_TIER
from gnomon.jepsen.net import NetError

DEFAULT_OUT = "store/jepsen"


def _csv(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _ints(text: str) -> list[int]:
    return [int(x) for x in _csv(text)]


TIERS = {"tier1": FIRST_TIER, "tier2": SECOND_TIER}
# The matrix's default: every group that runs without gateways.
MATRIX_GROUPS = tuple(g for g in GROUPS if g not in GATEWAY_TIER)


def _node_flags(items: list[str]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """`key=value` for every node, `n2:key=value` for one node."""
    common: dict[str, str] = {}
    per_node: dict[str, dict[str, str]] = {}
    for item in items:
        key, _, value = item.partition("=")
        if not value:
            raise SystemExit(f"gnomon jepsen: --node-flag {item!r}: expected [node:]key=value")
        node, _, key = key.rpartition(":")
        key = key.strip().lstrip("-").replace("-", "_")
        (per_node.setdefault(node.strip(), {}) if node else common)[key] = value
    return common, per_node


def _tiers(names: tuple[str, ...]) -> tuple[str, ...]:
    """Nemesis names with `tier1` / `tier2` expanded into their groups."""
    return tuple(dict.fromkeys(g for n in names for g in TIERS.get(n, (n,))))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gnomon jepsen", description=(
        "Fault-injection tests of a gnomon cluster in network namespaces (needs root)."))
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="one test")
    run.add_argument("--workload", type=_csv, default=("fire", "lease", "register"),
                     help=f"comma-separated: {','.join(WORKLOADS)}")
    run.add_argument("--nemesis", type=_csv, default=("partition",),
                     help=f"comma-separated groups ({','.join(GROUPS)}) or fault kinds, "
                          "or none")
    run.add_argument("--nodes", type=int, choices=(3, 5), default=3)
    run.add_argument("--seed", type=int, default=0)
    _common(run)
    run.add_argument("--canaries", type=_csv, default=(),
                     help="test-only node switches that break a promise on purpose")
    matrix = sub.add_parser("matrix", help="every nemesis with every workload, 3 and 5 nodes, "
                                           "several seeds")
    matrix.add_argument("--workload", type=_csv, default=WORKLOADS)
    matrix.add_argument("--nemesis", type=_csv, default=MATRIX_GROUPS,
                        help="one run per group or kind; tier1, tier2 stand for their groups "
                             f"(tier2: {','.join(SECOND_TIER)}); gateway needs --gateways")
    matrix.add_argument("--nodes", type=_ints, default=[3, 5])
    matrix.add_argument("--seeds", type=_ints, default=[1, 2, 3])
    _common(matrix, time_limit=60.0)
    return p


def _common(p: argparse.ArgumentParser, time_limit: float = 120.0) -> None:
    p.add_argument("--time-limit", type=float, default=time_limit,
                   help="seconds of load and faults (setup and final reads come on top)")
    p.add_argument("--out", type=Path, default=Path(DEFAULT_OUT),
                   help="where run directories go")
    p.add_argument("--sdk-workers", type=int, default=2)
    p.add_argument("--zombies", type=int, default=1,
                   help="lease workers that never self-fence")
    p.add_argument("--node-flag", action="append", default=[], metavar="[NODE:]KEY=VALUE",
                   help="extra gnomon-node flag for every node, or for one (n2:key=value); "
                        "repeatable")
    p.add_argument("--fire-jobs", type=int, default=0,
                   help="jobs of the fire workload (default 6, 300 with an outage nemesis)")
    p.add_argument("--disk-mb", type=int, default=96,
                   help="disk-full: size of the tmpfs under each node's data directory")
    p.add_argument("--gateways", type=int, default=0, metavar="N",
                   help="N gnomon-gateway processes beside the nodes; workers and clients dial "
                        "them instead of the nodes (needed by the gateway nemeses)")
    p.add_argument("--gateway-relay", action="store_true",
                   help="run the gateways with --worker-upstream relay")
    p.add_argument("-v", "--verbose", action="store_true")


def options(args: argparse.Namespace, *, workloads: tuple[str, ...], nemeses: tuple[str, ...],
            nodes: int, seed: int) -> TestOptions:
    bad = [w for w in workloads if w not in WORKLOADS]
    if bad:
        raise SystemExit(f"gnomon jepsen: unknown workload {bad[0]!r}; known: {WORKLOADS}")
    common, per_node = _node_flags(args.node_flag)
    return TestOptions(
        workloads=workloads, nemeses=nemeses, nodes=nodes, time_limit_s=args.time_limit,
        seed=seed, out_dir=args.out, canaries=tuple(getattr(args, "canaries", ())),
        sdk_workers=args.sdk_workers, zombies=args.zombies, node_overrides=common,
        node_flags=per_node, fire_jobs=args.fire_jobs, disk_mb=args.disk_mb,
        gateways=args.gateways, gateway_relay=args.gateway_relay)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.gateway_relay and args.gateways < 1:
        raise SystemExit("gnomon jepsen: --gateway-relay needs --gateways N (N >= 1)")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from gnomon.jepsen.runner import HarnessError, run_test

    try:
        if args.command == "run":
            results = run_test(options(args, workloads=args.workload,
                                       nemeses=_tiers(args.nemesis), nodes=args.nodes,
                                       seed=args.seed))
            print(results["summary"])
            return exit_code([results])
        return run_matrix(args, run_test, errors=(HarnessError, NetError))
    except (HarnessError, NetError, ValueError) as exc:
        print(f"gnomon jepsen: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("gnomon jepsen: interrupted; everything was torn down", file=sys.stderr)
        return 130


def exit_code(results: list[dict[str, Any]]) -> int:
    if any(r["valid"] is False for r in results):
        return 1
    if any(r["valid"] != True for r in results):  # noqa: E712 - "unknown" is a str
        return 2
    return 0


def run_matrix(args: argparse.Namespace, run_test, errors: tuple[type[Exception], ...] = ()
               ) -> int:
    """Every (nodes, nemesis, seed) in turn; a run the harness could not complete is a row
    with its error, and the matrix goes on."""
    rows, results = [], []
    started = time.strftime("%Y%m%dT%H%M%S")
    for nodes in args.nodes:
        for nemesis in _tiers(args.nemesis):
            for seed in args.seeds:
                opts = options(args, workloads=args.workload, nemeses=(nemesis,), nodes=nodes,
                               seed=seed)
                try:
                    r = run_test(opts)
                except errors as exc:
                    print(f"gnomon jepsen: {opts.label()}: {exc}", file=sys.stderr, flush=True)
                    r = failed_run(opts, exc)
                results.append(r)
                rows.append(matrix_row(r))
                print(r["summary"], flush=True)
    table = format_table(rows)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"matrix-{started}.json").write_text(json.dumps(rows, indent=1))
    (out / f"matrix-{started}.txt").write_text(table + "\n")
    return exit_code(results)


def failed_run(opts: TestOptions, exc: Exception) -> dict[str, Any]:
    return {"valid": "error", "test": opts.to_json(), "run_dir": "", "operations": 0,
            "faults": [], "checkers": {}, "summary": f"{opts.label()}: harness error: {exc}"}


def matrix_row(r: dict[str, Any]) -> dict[str, Any]:
    t = r["test"]
    return {"nodes": t["nodes"], "nemesis": "+".join(t["nemeses"]),
            "workloads": "+".join(t["workloads"]), "seed": t["seed"],
            "operations": r["operations"], "faults": len(r["faults"]),
            "anomalies": sum(len(c["anomalies"]) for c in r["checkers"].values()),
            "valid": r["valid"], "run_dir": r["run_dir"]}


def _grid(rows: list[dict[str, Any]], cols: list[str]) -> list[str]:
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) if rows else len(c)
              for c in cols}
    line = " | ".join(c.ljust(widths[c]) for c in cols)
    sep = "-+-".join("-" * widths[c] for c in cols)
    return [line, sep, *(" | ".join(str(r[c]).ljust(widths[c]) for c in cols) for r in rows)]


def grouped(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (nodes, nemesis): runs and the sums over their seeds."""
    out: dict[tuple[int, str], dict[str, Any]] = {}
    for r in rows:
        g = out.setdefault((r["nodes"], r["nemesis"]), {
            "nodes": r["nodes"], "nemesis": r["nemesis"], "runs": 0, "operations": 0,
            "faults": 0, "anomalies": 0, "valid": "yes"})
        g["runs"] += 1
        for k in ("operations", "faults", "anomalies"):
            g[k] += r[k]
        if r["valid"] is not True:
            g["valid"] = "no" if r["valid"] is False or g["valid"] == "no" else "unknown"
    return list(out.values())


def format_table(rows: list[dict[str, Any]]) -> str:
    per_run = _grid(rows, ["nodes", "nemesis", "workloads", "seed", "operations", "faults",
                           "anomalies", "valid"])
    per_group = _grid(grouped(rows), ["nodes", "nemesis", "runs", "operations", "faults",
                                      "anomalies", "valid"])
    total = (f"total: {len(rows)} runs, {sum(r['operations'] for r in rows)} operations, "
             f"{sum(r['faults'] for r in rows)} faults, "
             f"{sum(r['anomalies'] for r in rows)} anomalies")
    return "\n".join([*per_run, "", *per_group, total])


if __name__ == "__main__":
    sys.exit(main())
