"""Scenario 4, scale: 10k, 100k and 1,000,000 active jobs.

By default the jobs are created end to end through the API, with the bulk CreateJobs call
(1,000 specs per call and Raft entry), timed; the cluster then restarts from the snapshots
its nodes wrote. With GNOMON_BENCH_SCALE_SEED=snapshot (the way before CreateJobs existed:
one CreateJob per job took most of an hour for 1M here) the jobs are put in by the node's
own code, offline: the cluster is started
once so every node has a snapshot file, stopped, and each node's snapshot is replaced by one
whose state is the same empty state plus N CreateJob commands applied by `core.apply_batch`
(the replicated state machine), keeping the node's own Raft data (index, term, members).
The log entries after each node's snapshot are leadership barriers only, so every replica
still reaches the same state. Each snapshot is written by `ForkSnapshotter` over
`Replica.write_snapshot`, the code a node runs: the fork pause (what the tick thread waits)
and the child's write time are measured in this process, which holds the same state.

The jobs are daily interval jobs with phases spread over 23 hours, none due in the coming
hour (so they are active, but the fires measured are the herd's). Figures per size:
snapshot fork pause, child write time and size; restart to serving (all three nodes verify
and decode their snapshot) and each node's load time; resident memory per node; snapshots
written by the running nodes (fork pause, child time) with a probe committing a write every
200 ms meanwhile: elections and the slowest commit while they were written; the cost of one
fire: a herd of one-shot jobs due at one instant, fires committed per second and leader CPU
per fire (no workers: fires only). Goals: <= 2 GiB per node at 1M; restart to serving
<= 20 s at 1M; no election while a snapshot is written; the fire cost stays flat as the job
count grows.
"""

from __future__ import annotations

import gc
import os
import pickle
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc

from gnomon.bench import Options
from gnomon.bench.cluster import NODE_DEFAULTS, BenchCluster, log_offsets, node_log_lines
from gnomon.bench.load import create_jobs, create_jobs_bulk, interval_spec, once_spec
from gnomon.bench.meters import CpuMeter, cpu_ms_per_task, cpu_seconds, rss_bytes
from gnomon.bench.report import Report, log, now_ms, plot
from gnomon.bench.stats import summary
from gnomon.node.local.cluster import wait_for
from gnomon.v1 import api_pb2, api_pb2_grpc

GOAL_RSS_GIB = 1.0
# GNOMON_BENCH_SCALE_SEED=snapshot: the jobs are put into the snapshots offline (the old way)
# instead of being created through the API.
SEEDED = os.environ.get("GNOMON_BENCH_SCALE_SEED") == "snapshot"
DAY_MS = 86_400_000
HOUR_MS = 3_600_000


def build_state(n: int, now: int):
    """The replicated state after N CreateJob commands (applied by core.apply_batch)."""
    from gnomon.node.core import apply_batch, new_state
    from gnomon.node.core.commands import Batch, CreateJob
    from gnomon.node.core.model import JobSpec, Schedule, TaskSpec
    from gnomon.node.spec.schedules import first_fire_ms

    state = new_state()
    task = (TaskSpec(name="main"),)
    chunk = 10_000
    for start in range(0, n, chunk):
        cmds = []
        for i in range(start, min(n, start + chunk)):
            sched = Schedule(kind="interval", interval_ms=DAY_MS,
                             anchor_ms=now + HOUR_MS + (i * (23 * HOUR_MS)) // n)
            spec = JobSpec(tenant="default", name=f"s-{i}", schedule=sched, tasks=task)
            cmds.append(CreateJob("", spec, first_fire_ms(sched, now)))
        replies, _ = apply_batch(state, Batch(now_ms=now, commands=tuple(cmds)))
        bad = [r for r in replies if type(r).__name__ == "Rejected"]
        if bad:
            raise RuntimeError(f"bulk CreateJob rejected: {bad[0]}")
    return state


def seed(root: Path, overrides: dict[str, str]) -> BenchCluster:
    """Start a cluster until every node has written a snapshot; stop it (kill -9)."""
    cluster = BenchCluster(root, 3, {**NODE_DEFAULTS, **overrides, "snapshot_min_time_s": "1"})
    cluster.start()
    try:
        cluster.find_leader()
        wait_for(lambda: all((n.data_dir / "snapshot.lmdb").exists() for n in cluster.nodes),
                 timeout_s=60, what="a snapshot on every node", interval_s=0.2)
        time.sleep(0.5)
    finally:
        cluster.kill_all()
    cluster.overrides = {**NODE_DEFAULTS, **overrides}
    return cluster


def install(cluster: BenchCluster, state, scratch: Path) -> dict[str, Any]:
    """Write each node's snapshot (its own raft data, the big state) with the node's code."""
    from pysyncobj.config import SERIALIZER_STATE

    from gnomon.node.raft.snapshotter import ForkSnapshotter
    from gnomon.node.replica import Replica
    from gnomon.node.storage.history import HistoryStore
    from gnomon.node.storage.history_sink import HistorySink
    from gnomon.node.storage.snapshot_file import read_snapshot

    (scratch / "history").mkdir(parents=True, exist_ok=True)
    history = HistorySink(HistoryStore(str(scratch / "history"), map_size=64 << 20))
    replica = Replica(history, crash=lambda reason: None)
    replica.state = state
    figures = []
    try:
        for node in cluster.nodes:
            path = str(node.data_dir / "snapshot.lmdb")
            with read_snapshot(path) as old:
                raft_data = pickle.loads(old.raft_data)
            snapshots = ForkSnapshotter(path, replica, crash=lambda reason: None)
            snapshots.serialize((None, *raft_data), raft_data[1][1])
            while (done := snapshots.checkSerializing()[0]) == SERIALIZER_STATE.SERIALIZING:
                time.sleep(0.02)
            if done != SERIALIZER_STATE.SUCCESS:
                raise RuntimeError(f"snapshot for {node.node_id} failed (see the log above)")
            figures.append(snapshots.figures)
    finally:
        history.close()
    return {"snapshot_fork_ms": [round(f.fork_ms, 1) for f in figures],
            "snapshot_child_s": [round(f.child_ms / 1000, 2) for f in figures],
            "snapshot_bytes": figures[0].bytes,
            "bench_rss_mib": round(rss_bytes(os.getpid()) / 2**20)}


SNAPSHOT_LINE = (r"snapshot at index \d+: (\d+) jobs, (\d+) runs; tick thread paused ([\d.]+) ms "
                 r"\(fork\), child wrote (\d+) bytes in (\d+) ms")
# Nodes of the measured cluster snapshot this often (so that they do while measured).
SNAPSHOT_EVERY_S = 30
# --quick (the suite's run): the same steps, snapshots 6x as often (each size waits for two).
QUICK_SNAPSHOT_EVERY_S = 5


def measure(cluster: BenchCluster, n: int, herd: int, root: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"jobs": n}
    since = log_offsets(cluster)
    t0 = time.monotonic()
    cluster.start()
    wait_for(lambda: _serving(cluster), timeout_s=900, what="a leader serving", interval_s=0.2)
    out["restart_to_serving_s"] = round(time.monotonic() - t0, 1)
    # CPU each node spent to get there (mostly its load): what a node with a core of its own
    # would take, whatever else this shared machine runs.
    out["cpu_to_serving_s"] = {nid: round(cpu_seconds(pid), 1)
                               for nid, pid in cluster.pids().items()}
    leader = cluster.find_leader(timeout_s=60)
    log(f"scale {n:,}: serving {out['restart_to_serving_s']}s after the restart")
    out["load_s"] = {nid: round(int(m.group(1)) / 1000, 1) for nid, m in node_log_lines(
        cluster, r"read snapshot \S+ at index \d+: \d+ jobs, \d+ runs in (\d+) ms", since)}
    out["restored_jobs"] = {nid: int(m.group(1)) for nid, m in node_log_lines(
        cluster, r"restored snapshot at index \d+: (\d+) jobs", since)}
    time.sleep(3)
    pids = cluster.pids()
    out["rss_mib"] = {nid: round(rss_bytes(pid) / 2**20, 1) for nid, pid in pids.items()}
    out.update(snapshots_while_probing(cluster, timeout_s=120 + n / 2_000))
    leader = cluster.find_leader(timeout_s=120)
    out.update(fire_herd(cluster, leader, herd))
    out["rss_after_mib"] = {nid: round(rss_bytes(pid) / 2**20, 1)
                            for nid, pid in cluster.pids().items()}
    out["leader_sessions"] = len(node_log_lines(cluster, r"leading \(session", since))
    return out


def _serving(cluster: BenchCluster) -> bool:
    """A node answers as the ready leader (GetJob of a missing job: NOT_FOUND only there).

    A new channel per probe: a channel refused while the nodes load backs off for up to
    ~20 s before it tries again, which would be measured as restart time."""
    for node in cluster.nodes:
        with grpc.insecure_channel(node.grpc_addr) as channel:
            try:
                api_pb2_grpc.JobServiceStub(channel).GetJob(
                    api_pb2.GetJobRequest(job=api_pb2.JobRef(job_id="j0")), timeout=2)
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    return True
    return False


def snapshots_while_probing(cluster: BenchCluster, timeout_s: float) -> dict[str, Any]:
    """Wait for one snapshot by every node while a probe commits a write every 200 ms;
    the elections (any node becoming candidate) and the slowest probe commit meanwhile."""
    since = log_offsets(cluster)
    probe = _Probe(cluster)
    probe.start()
    try:
        wait_for(lambda: {nid for nid, _ in node_log_lines(cluster, SNAPSHOT_LINE, since)}
                 >= {x.node_id for x in cluster.nodes}, timeout_s=timeout_s,
                 what="a snapshot written by every node", interval_s=0.5)
    finally:
        probe.stop()
    snaps = node_log_lines(cluster, SNAPSHOT_LINE, since)
    return {
        "node_snapshots": [{"node": nid, "fork_ms": float(m.group(3)),
                            "child_s": round(int(m.group(5)) / 1000, 2),
                            "bytes": int(m.group(4))} for nid, m in snaps],
        "elections_during_snapshots": len(node_log_lines(cluster, r"-> candidate", since)),
        "probe_commit_ms": summary(probe.latencies_ms),
        "probe_failures": probe.failures,
    }


class _Probe:
    """One CreateJob every 200 ms on the current leader (a write must commit)."""

    def __init__(self, cluster: BenchCluster) -> None:
        self._cluster = cluster
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.latencies_ms: list[float] = []
        self.failures = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        far = now_ms() + 50 * 365 * DAY_MS
        i = 0
        while not self._stop.wait(0.2):
            req = api_pb2.CreateJobRequest(request_id=f"probe-{i}", spec=once_spec(f"p-{i}", far))
            t = time.perf_counter()
            for node in self._cluster.nodes:
                try:
                    node.jobs().CreateJob(req, timeout=10)
                    self.latencies_ms.append((time.perf_counter() - t) * 1000)
                    break
                except grpc.RpcError:
                    continue
            else:
                self.failures += 1
            i += 1


def fire_herd(cluster: BenchCluster, leader, herd: int) -> dict[str, Any]:
    """A herd of one-shot jobs due at one instant: fires/s and leader CPU per fire."""
    out: dict[str, Any] = {}
    servers = [leader.grpc_addr] + [x.grpc_addr for x in cluster.nodes if x is not leader]
    # The herd: create (timed: CreateJob latency at this job count), then fire all at once.
    far = now_ms() + 50 * 365 * DAY_MS
    calib = create_jobs(servers, [once_spec(f"cal-{i}", far) for i in range(200)],
                        concurrency=32, prefix="cal")
    # Due well after the creates end (a herd created late fires as misfires, not runs).
    due = now_ms() + int(1000 * (herd / max(50.0, calib["per_s"]) * 3 + 10))
    created = create_jobs(servers, [once_spec(f"h-{i}", due) for i in range(herd)],
                          concurrency=64, prefix="herd")
    out["create_job_ms_at_n"] = created["latency_ms"]
    out["creates_per_s_at_n"] = created["per_s"]
    base = cluster.scrape(leader.node_id).get('gnomon_fires_total{outcome="run"}', 0.0)
    wait = (due - now_ms()) / 1000
    if wait > 0:
        time.sleep(wait)
    else:
        out["herd_created_late_s"] = round(-wait, 1)
    cpu0 = cpu_seconds(leader.proc.pid)
    t_due = time.monotonic() - max(0.0, -wait)
    done = None
    while time.monotonic() - t_due < 300:
        fired = cluster.scrape(leader.node_id).get('gnomon_fires_total{outcome="run"}', 0) - base
        if fired >= herd:
            done = time.monotonic()
            break
        time.sleep(0.05)
    cpu1 = cpu_seconds(leader.proc.pid)
    if done is not None:
        out["herd_fire_s"] = round(done - t_due, 2)
        out["fires_per_s"] = round(herd / max(1e-3, done - t_due), 1)
        out["leader_cpu_ms_per_fire"] = round(1000 * (cpu1 - cpu0) / herd, 3)
    return out


GOAL_RESTART_S = 20.0


def run(opts: Options) -> Report:
    quick = opts.quick
    sizes = [1_000, 5_000] if quick else [10_000, 100_000, 1_000_000]
    herd = 300 if quick else 10_000
    # One size alone (e.g. 1000000), a smaller herd: GNOMON_BENCH_SCALE_SIZES, _HERD.
    if os.environ.get("GNOMON_BENCH_SCALE_SIZES"):
        sizes = [int(x) for x in os.environ["GNOMON_BENCH_SCALE_SIZES"].split(",")]
    herd = int(os.environ.get("GNOMON_BENCH_SCALE_HERD", herd))
    report = Report("scale", quick, "memory, snapshot, restart and fire cost vs job count")
    every_s = QUICK_SNAPSHOT_EVERY_S if quick else SNAPSHOT_EVERY_S
    how = ("put into every node's snapshot by the node's own apply/snapshot code (see the "
           "module docstring)") if SEEDED else (
        "created end to end through the API (CreateJobs, 1,000 per call, 4 calls in flight, "
        "one client process), then every node's snapshot of them waited for and the cluster "
        "killed -9")
    report.setup.append(
        f"Sizes {', '.join(f'{s:,}' for s in sizes)} daily interval jobs (one task each) "
        f"{how}; then 3 nodes restarted from it (snapshot_min_time_s {every_s}: "
        "they snapshot again while measured); fire cost: a herd of "
        f"{herd:,} one-shot jobs created through the API, due at one instant, no workers.")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gnomon-bench-scale-") as tmp:
        for n in sizes:
            one = _one_size if SEEDED else _one_size_api
            rows.append(one(n, herd, Path(tmp) / f"n{n}", every_s))
    by_n = {r["jobs"]: r for r in rows}
    top = by_n[sizes[-1]]
    max_rss = max(top["rss_after_mib"].values()) / 1024
    report.add(f"resident memory per node at {sizes[-1]:,} jobs, max (GiB)", round(max_rss, 2),
               goal=f"<= {GOAL_RSS_GIB}" if not quick else "", met=max_rss <= GOAL_RSS_GIB
               if not quick else None)
    report.add(f"restart to serving at {sizes[-1]:,} jobs (s)", top["restart_to_serving_s"],
               goal="" if quick else f"<= {GOAL_RESTART_S:.0f}",
               met=None if quick else top["restart_to_serving_s"] <= GOAL_RESTART_S)
    elections = sum(by_n[n]["elections_during_snapshots"] for n in sizes)
    report.add("elections while the nodes wrote snapshots (all sizes)", elections,
               goal="0", met=elections == 0)
    for n in sizes:
        _rows_for(report, by_n[n], herd)
    costs = [by_n[n].get("leader_cpu_ms_per_fire") for n in sizes]
    if all(c is not None for c in costs) and costs[0]:
        growth = costs[-1] / costs[0]
        report.add(f"fire cost growth {sizes[0]:,} -> {sizes[-1]:,} jobs (x)", round(growth, 2),
                   goal="" if quick else "flat (< 1.5x)", met=None if quick else growth < 1.5)
    report.data = {"sizes": rows}
    xs = sizes
    plot(report, opts.out, "fire_cost", "Leader CPU per fire vs job count", "jobs",
         "ms of leader CPU per fire", {"gnomon": (xs, [by_n[n].get("leader_cpu_ms_per_fire")
                                                        or float("nan") for n in xs])},
         kind="bar")
    plot(report, opts.out, "memory", "Resident memory per node vs job count", "jobs",
         "MiB (max of the 3 nodes)",
         {"gnomon": (xs, [max(by_n[n]["rss_after_mib"].values()) for n in xs])}, kind="bar")
    return report


def _one_size_api(n: int, herd: int, root: Path, every_s: int) -> dict[str, Any]:
    """N jobs created end to end through the API (CreateJobs, 1,000 specs per call, 4 calls
    in flight) on a fresh cluster; once every node wrote a snapshot holding them, the
    cluster is killed (-9) and measured like a seeded one (restart, memory, fire cost)."""
    cluster = BenchCluster(root / "cluster", 3, {**NODE_DEFAULTS,
                                                 "snapshot_min_time_s": str(every_s)})
    cluster.start()
    try:
        leader = cluster.find_leader()
        servers = [leader.grpc_addr] + [x.grpc_addr for x in cluster.nodes if x is not leader]
        now = now_ms()
        specs = [interval_spec(f"s-{i}", DAY_MS, now + HOUR_MS + (i * (23 * HOUR_MS)) // n,
                               tenant="default") for i in range(n)]
        since = log_offsets(cluster)
        meter = CpuMeter({x.node_id: (lambda x=x: [x.proc.pid]) for x in cluster.nodes}).start()
        log(f"scale {n:,}: creating the jobs through the API (CreateJobs)")
        created = create_jobs_bulk(servers, specs, per_call=1000, concurrency=4,
                                   prefix=f"scale{n}", progress_every=max(1, n // 10_000))
        cpu = meter.stop()
        del specs
        log(f"scale {n:,}: created {created['created']:,} in {created['seconds']}s "
            f"({created['per_s']:,.0f}/s)")
        info = {"create_s": created["seconds"], "creates_per_s": created["per_s"],
                "create_failed": created["failed"], "create_errors": created["errors"],
                "create_call_ms": created["call_latency_ms"],
                "create_node_cpu_ms_per_job": cpu_ms_per_task(cpu, created["created"]),
                "create_cpu": cpu,
                "rss_created_mib": {x.node_id: round(rss_bytes(x.proc.pid) / 2**20, 1)
                                    for x in cluster.nodes}}
        def full_snapshots() -> list:
            return [(nid, m) for nid, m in node_log_lines(cluster, SNAPSHOT_LINE, since)
                    if int(m.group(1)) >= n]

        wait_for(lambda: {nid for nid, _ in full_snapshots()} >= {x.node_id
                                                                  for x in cluster.nodes},
                 timeout_s=300 + n / 1_000, what="a snapshot of every node with all the jobs",
                 interval_s=1.0)
        snaps = full_snapshots()
        info["snapshot_fork_ms"] = [float(m.group(3)) for _nid, m in snaps]
        info["snapshot_child_s"] = [round(int(m.group(5)) / 1000, 2) for _nid, m in snaps]
        info["snapshot_bytes"] = max(int(m.group(4)) for _nid, m in snaps)
    finally:
        cluster.kill_all()
    try:
        m = measure(cluster, n, herd, root)
    finally:
        cluster.kill_all()
    m.update(info)
    log(f"scale {n:,}: {m}")
    return m


def _one_size(n: int, herd: int, root: Path, every_s: int) -> dict[str, Any]:
    log(f"scale {n:,}: seeding a cluster")
    cluster = seed(root / "cluster", {"snapshot_min_time_s": str(every_s)})
    t0 = time.perf_counter()
    state = build_state(n, now_ms())
    build_s = time.perf_counter() - t0
    log(f"scale {n:,}: state built in {build_s:.1f}s; writing snapshots")
    info = install(cluster, state, root / "scratch")
    del state
    gc.collect()
    log(f"scale {n:,}: snapshot {info['snapshot_bytes'] / 2**20:.0f} MiB: fork "
        f"{info['snapshot_fork_ms']} ms, child {info['snapshot_child_s']} s")
    try:
        m = measure(cluster, n, herd, root)
    finally:
        cluster.kill_all()
    m.update(info, build_s=round(build_s, 1))
    log(f"scale {n:,}: {m}")
    return m


def _rows_for(report: Report, r: dict[str, Any], herd: int) -> None:
    n = r["jobs"]
    if "create_s" in r:
        report.add(f"{n:,} jobs: created through the API (CreateJobs): s / jobs per s / node "
                   "CPU per job (ms, 3 nodes summed)",
                   f"{r['create_s']} / {r['creates_per_s']:,.0f} / "
                   f"{r['create_node_cpu_ms_per_job']}")
    report.add(f"{n:,} jobs: RSS per node after the herd (MiB)",
               " / ".join(f"{v:.0f}" for v in r["rss_after_mib"].values()))
    report.add(f"{n:,} jobs: snapshot: tick-thread pause (fork, ms) / child write (s) / MiB",
               f"{max(r['snapshot_fork_ms'])} / {max(r['snapshot_child_s'])} / "
               f"{r['snapshot_bytes'] / 2**20:.0f}")
    report.add(f"{n:,} jobs: restart to serving (s); load per node (s); node CPU until then (s)",
               f"{r['restart_to_serving_s']}; " + ", ".join(
                   f"{nid} {s}" for nid, s in sorted(r["load_s"].items())) + "; " + ", ".join(
                   f"{nid} {s}" for nid, s in sorted(r["cpu_to_serving_s"].items())))
    snaps = r["node_snapshots"]
    report.add(f"{n:,} jobs: snapshots by the running nodes: fork ms / child s",
               ", ".join(f"{x['node']} {x['fork_ms']:.0f} / {x['child_s']}" for x in snaps))
    report.add(f"{n:,} jobs: meanwhile: elections / probe commit p50, max (ms) / failed",
               f"{r['elections_during_snapshots']} / {r['probe_commit_ms'].get('p50')}, "
               f"{r['probe_commit_ms'].get('max')} / {r['probe_failures']}")
    report.add(f"{n:,} jobs: fires committed/s (herd of {herd:,})", r.get("fires_per_s"))
    report.add(f"{n:,} jobs: leader CPU per fire (ms)", r.get("leader_cpu_ms_per_fire"))
    report.add(f"{n:,} jobs: CreateJob p50 / p99 (ms, 64 concurrent)",
               f"{r['create_job_ms_at_n'].get('p50')} / {r['create_job_ms_at_n'].get('p99')}")
    if r["leader_sessions"] > 1:
        report.notes.append(f"{n:,} jobs: {r['leader_sessions']} leader sessions after the "
                            "restart (a leader change happened while measuring)")


if __name__ == "__main__":  # pragma: no cover
    from gnomon.bench import main

    raise SystemExit(main(["scale", *sys.argv[1:]]))
