"""One saturated gnomon round, nothing else (no peers, no ramp): for A/B comparisons of two
checkouts at the same moment on the same machine.

    python -m gnomon.bench.saturate [--jobs 800] [--measure-s 15] [--profile-s 0] [--credits 500]
                                    [--set KEY=VALUE ...]
                                    [--out F]

GNOMON_BENCH_WORKER_BATCHES=0 makes the raw workers send and ask for one message per Assign,
ack and Complete (the protocol before ServerBatch / Reports), for A/B runs.

Prints one JSON line: completions/s, lateness, CPU per completed task (all gnomon processes,
and the nodes alone), CPU % per process, the load average before and after, and (with
--profile-s) the leader's and a follower's top py-spy frames.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

from gnomon.bench.harness import run_gnomon
from gnomon.bench.peers import JobSet


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=800)
    p.add_argument("--interval-ms", type=int, default=100)
    p.add_argument("--warmup-s", type=float, default=5.0)
    p.add_argument("--measure-s", type=float, default=15.0)
    p.add_argument("--profile-s", type=float, default=0.0)
    p.add_argument("--credits", type=int, default=500, help="per worker stream (8 streams)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a node config override, e.g. fire_admission_max_ready=0 (repeatable)")
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    overrides = dict(item.split("=", 1) for item in a.set)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="gnomon-bench-sat-") as tmp:
        r = run_gnomon(JobSet("interval", count=a.jobs, interval_ms=a.interval_ms), Path(tmp),
                       warmup_s=a.warmup_s, measure_s=a.measure_s, profile_s=a.profile_s,
                       credits=a.credits, overrides=overrides)
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, cwd=Path(__file__).parent).stdout.strip()
    out = {"rev": rev, "overrides": overrides, "offered_per_s": r["offered_per_s"],
           "completions_per_s": r["completions_per_s"], "lateness_ms": r["lateness_ms"],
           "cpu_ms_per_task": r["cpu_ms_per_task"], "raft": r["raft"],
           "node_log": r["node_log"],
           "core_pct": {k: v["core_pct"] for k, v in r["cpu"].items() if not k.startswith("_")},
           "load_before": [round(x, 2) for x in load_before],
           "load_after": [round(x, 2) for x in os.getloadavg()],
           "profile": r.get("profile"), "profile_follower": r.get("profile_follower")}
    line = json.dumps(out)
    if a.out:
        a.out.write_text(line + "\n")
    print(json.dumps({k: v for k, v in out.items() if not k.startswith("profile")}))


if __name__ == "__main__":
    main()
