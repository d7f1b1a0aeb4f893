"""Where a failover's time goes: kill -9 the leader and read the survivors' logs.

    python -m gnomon.bench.failover_breakdown [--kills 6] [--set KEY=VALUE ...]

For each kill, prints the time to the first fire committed by a survivor (its
`gnomon_fires_total` polled every 10 ms) and the survivors' log lines for the steps in
between: follower -> candidate (the election timeout ran out), candidate -> leader, and
"leading" (this term's barrier committed, node/leader/session.py); plus how many times each
node truncated entries it had applied ("truncating already-applied log entries"). Load:
200 interval jobs every second, one raw worker process with 2 streams. Nothing is timed
against a goal here; `failover` is the benchmark.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path

from gnomon.bench.cluster import BenchCluster, log_offsets, node_log_lines, start_cluster
from gnomon.bench.failover import _fires
from gnomon.bench.load import WorkerFleet, create_jobs, spec_for
from gnomon.bench.report import now_ms

STEPS = r"raft role|leading \(session"


def _fires_when_up(cluster: BenchCluster, node_id: str, timeout_s: float = 10.0) -> float:
    """The node's fire counter, waiting for a node restarted after the previous kill."""
    deadline = time.monotonic() + timeout_s
    while (value := _fires(cluster, node_id)) < 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    return value


def _kill_once(cluster: BenchCluster, k: int) -> None:
    leader = cluster.find_leader()
    survivors = [n.node_id for n in cluster.nodes if n is not leader]
    base = {nid: _fires_when_up(cluster, nid) for nid in survivors}
    offsets = log_offsets(cluster)
    t_kill = time.time()
    cluster.kill(leader.node_id)
    first = None
    while first is None and time.time() < t_kill + 20:
        for nid in survivors:
            if _fires(cluster, nid) > base[nid] >= 0:
                first = time.time() - t_kill
                break
        time.sleep(0.01)
    stamp = time.strftime("%H:%M:%S", time.gmtime(t_kill)) + f".{int(t_kill % 1 * 1000):03d}"
    took = f"first fire after {first:.3f}s" if first else "no fire within 20 s"
    print(f"kill {k}: {leader.node_id} killed at {stamp}Z; {took}")
    for nid, m in node_log_lines(cluster, STEPS, offsets):
        print("   ", nid, m.string[:24], m.string[m.start():])
    cluster.start_node(leader.node_id)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--kills", type=int, default=6)
    p.add_argument("--settle-s", type=float, default=5.0)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="node config override")
    args = p.parse_args()
    overrides = dict(kv.split("=", 1) for kv in args.set) or None
    with tempfile.TemporaryDirectory(prefix="gnomon-fo-breakdown-") as tmp:
        root = Path(tmp)
        cluster, _ = start_cluster(root / "cluster", overrides=overrides)
        fleet = WorkerFleet(cluster.servers, root / "workers", processes=1, streams=2,
                            credits=500, record="none", max_s=args.kills * 30 + 60).start()
        try:
            fleet.wait_connected(2)
            params = {"interval_ms": 1000, "anchor_ms": now_ms(), "prefix": "f", "count": 200}
            create_jobs(cluster.servers, [spec_for("interval", i, params) for i in range(200)])
            time.sleep(args.settle_s)
            for k in range(1, args.kills + 1):
                _kill_once(cluster, k)
                time.sleep(args.settle_s)
            counts = Counter(nid for nid, _ in node_log_lines(cluster,
                                                              "truncating already-applied"))
            print("follower truncations of applied entries:",
                  {n.node_id: counts.get(n.node_id, 0) for n in cluster.nodes})
        finally:
            fleet.stop(timeout_s=10)
            cluster.kill_all()


if __name__ == "__main__":
    main()
