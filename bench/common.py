"""Shared pieces of the benchmarks: the report (table + JSON + plots), process CPU/memory
meters read from /proc, a local cluster with per-node metrics endpoints, job specs, bulk job
creation and the raw-protocol worker fleet.

Everything runs on this machine and talks to 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from gnomon.node.localcluster import LocalCluster, NodeProc, free_ports, wait_for
from gnomon.v1 import api_pb2, api_pb2_grpc, types_pb2

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

# Node settings every scenario uses unless it says otherwise (documented in the JSON).
NODE_DEFAULTS: dict[str, str] = {"max_jobs_per_tenant": "2000000"}


def now_ms() -> int:
    return int(time.time() * 1000)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- statistics ----------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1]) of unsorted values; nan when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))])


def summary(values: Sequence[float], digits: int = 1) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {"n": len(ordered), "p50": round(pct(ordered, 0.5), digits),
            "p90": round(pct(ordered, 0.9), digits), "p99": round(pct(ordered, 0.99), digits),
            "max": round(ordered[-1], digits),
            "mean": round(sum(ordered) / len(ordered), digits)}


def median(values: Iterable[float]) -> float:
    """The median (mean of the middle two for an even count); nan when empty."""
    vals = sorted(v for v in values if v == v)
    if not vals:
        return float("nan")
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b or a != a or b != b:
        return None
    return round(a / b, 2)


# -- machine ----------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    mem = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    commit = ""
    with contextlib.suppress(Exception):
        commit = subprocess.run(["git", "-C", str(BENCH_DIR), "describe", "--always", "--dirty"],
                                capture_output=True, text=True, timeout=5).stdout.strip()
    return {"cpus": os.cpu_count(), "mem_gib": round(mem / 2**30, 1),
            "python": platform.python_version(), "platform": platform.platform(),
            "loadavg": [round(x, 2) for x in os.getloadavg()], "git": commit,
            "time": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}


# -- /proc meters ---------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of one process (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_bytes(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def process_tree(pid: int) -> list[int]:
    """pid and all its descendants (Celery's prefork children, for example)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


class CpuMeter:
    """CPU used by named groups of processes between start() and stop(), and peak RSS.

    `groups` maps a name to a callable returning the group's root pids (children included).
    """

    def __init__(self, groups: dict[str, Callable[[], list[int]]], sample_s: float = 0.5):
        self.groups = groups
        self.sample_s = sample_s
        self._start: dict[str, dict[int, float]] = {}
        self._last: dict[str, dict[int, float]] = {}
        self.peak_rss: dict[str, int] = {}
        self._t0 = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _pids(self, name: str) -> list[int]:
        return [p for root in self.groups[name]() for p in process_tree(root)]

    def _sample(self) -> None:
        for name in self.groups:
            pids = self._pids(name)
            last = self._last.setdefault(name, {})
            for p in pids:
                last[p] = cpu_seconds(p)
            rss = sum(rss_bytes(p) for p in pids)
            self.peak_rss[name] = max(self.peak_rss.get(name, 0), rss)

    def start(self) -> CpuMeter:
        self._t0 = time.monotonic()
        for name in self.groups:
            self._start[name] = {p: cpu_seconds(p) for p in self._pids(name)}
        self._sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.sample_s):
            self._sample()

    def stop(self) -> dict[str, dict[str, float]]:
        self._stop.set()
        if self._thread:
            self._thread.join()
        self._sample()
        wall = max(1e-6, time.monotonic() - self._t0)
        out = {}
        for name in self.groups:
            first, last = self._start.get(name, {}), self._last.get(name, {})
            used = sum(last[p] - first.get(p, 0.0) for p in last)
            out[name] = {"cpu_s": round(used, 2), "core_pct": round(100 * used / wall, 1),
                         "peak_rss_mib": round(self.peak_rss.get(name, 0) / 2**20, 1)}
        out["_wall_s"] = {"wall_s": round(wall, 2)}
        return out


# -- the report -----------------------------------------------------------------------------


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != value:
            return "-"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}".rstrip("0").rstrip(".")
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


@dataclass
class Row:
    measure: str
    gnomon: Any
    peer: str = ""
    peer_value: Any = None
    ratio: float | None = None
    goal: str = ""
    met: bool | None = None


@dataclass
class Report:
    """What a scenario prints and writes: a table, raw data, plots, notes on what ran where."""

    name: str
    quick: bool
    title: str = ""
    rows: list[Row] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    plots: list[str] = field(default_factory=list)
    machine_before: dict[str, Any] = field(default_factory=machine_info)
    started: float = field(default_factory=time.time)

    def add(self, measure: str, gnomon: Any, *, peer: str = "", peer_value: Any = None,
            higher_is_better: bool | None = None, goal: str = "", met: bool | None = None) -> None:
        r = None
        if isinstance(gnomon, int | float) and isinstance(peer_value, int | float):
            r = ratio(float(gnomon), float(peer_value))
        self.rows.append(Row(measure, gnomon, peer, peer_value, r, goal, met))

    def render(self) -> str:
        lines = [f"## {self.name}{' (--quick)' if self.quick else ''}: {self.title}", ""]
        lines += ["| measure | gnomon | peer | peer value | gnomon/peer | goal | met |",
                  "|---|---|---|---|---|---|---|"]
        for r in self.rows:
            met = "" if r.met is None else ("yes" if r.met else "**no**")
            lines.append(f"| {r.measure} | {fmt(r.gnomon)} | {r.peer} | {fmt(r.peer_value)} | "
                         f"{fmt(r.ratio)} | {r.goal} | {met} |")
        if self.setup:
            lines += ["", "Setup: " + " ".join(self.setup)]
        for n in self.notes:
            lines.append(f"- {n}")
        return "\n".join(lines)

    def write(self, out_dir: Path) -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"{self.name}.json"
        doc = {
            "scenario": self.name, "quick": self.quick, "title": self.title,
            "command": " ".join(["python -m gnomon.bench", *sys.argv[1:]]),
            "machine_before": self.machine_before, "machine_after": machine_info(),
            "duration_s": round(time.time() - self.started, 1),
            "setup": self.setup, "notes": self.notes,
            "rows": [r.__dict__ for r in self.rows], "data": self.data, "plots": self.plots,
            "table": self.render(),
        }
        path.write_text(json.dumps(doc, indent=1, default=str))
        return path


# -- plots (matplotlib, Agg; optional) ------------------------------------------------------


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        return None
    if matplotlib is None:  # blocked (sys.modules entry None)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(report: Report, out_dir: Path, stem: str, title: str, xlabel: str, ylabel: str,
         series: dict[str, tuple[Sequence[float], Sequence[float]]], *, kind: str = "line",
         logy: bool = False) -> None:
    """One PNG with a line (or step/bar) per series; noted in the report when matplotlib is
    missing."""
    plt = _pyplot()
    if plt is None:
        if "matplotlib missing: no PNG plots" not in report.notes:
            report.notes.append("matplotlib missing: no PNG plots (pip install '.[bench]')")
        return
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    for label, (xs, ys) in series.items():
        if kind == "bar":
            ax.bar([str(x) for x in xs], ys, label=label)
        elif kind == "step":
            ax.step(xs, ys, where="post", label=label)
        else:
            ax.plot(xs, ys, label=label, marker="." if len(xs) < 40 else None)
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if len(series) > 1:
        ax.legend()
    fig.tight_layout()
    path = out_dir / f"{report.name}_{stem}.png"
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    report.plots.append(path.name)


def cdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    ordered = sorted(values)
    n = len(ordered)
    if n > 2000:  # thin out for plotting
        step = n / 2000
        idx = [int(i * step) for i in range(2000)] + [n - 1]
        return [ordered[i] for i in idx], [100 * (i + 1) / n for i in idx]
    return ordered, [100 * (i + 1) / n for i in range(n)]


# -- cluster --------------------------------------------------------------------------------


@dataclass
class BenchCluster(LocalCluster):
    """LocalCluster whose nodes also serve /metrics on their own loopback port."""

    metrics_addrs: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        ports = free_ports(self.size)
        self.metrics_addrs = {n.node_id: f"127.0.0.1:{p}" for n, p in zip(self.nodes, ports,
                                                                            strict=True)}

    def start_node(self, node_id: str) -> None:
        saved = self.overrides
        self.overrides = {**saved, "metrics_addr": self.metrics_addrs[node_id]}
        try:
            super().start_node(node_id)
        finally:
            self.overrides = saved

    def kill_all(self) -> None:
        """Tear down fast (SIGKILL): benchmark data directories are thrown away."""
        for node in self.nodes:
            self.kill(node.node_id)

    @property
    def servers(self) -> list[str]:
        return [n.grpc_addr for n in self.nodes]

    def pids(self) -> dict[str, int]:
        return {n.node_id: n.proc.pid for n in self.nodes if n.alive()}

    def metrics(self, node_id: str, timeout: float = 2.0) -> dict[str, float]:
        """Scrape one node's metrics: {'name{labels}': value}."""
        url = f"http://{self.metrics_addrs[node_id]}/metrics"
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback
            text = resp.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    out[key] = float(value)
        return out

    def find_leader(self, timeout_s: float = 60.0, exclude: frozenset[str] = frozenset()
                    ) -> NodeProc:
        """The node whose leader session is ready: GetJob of a missing job answers NOT_FOUND
        only there (O(1), unlike ListJobs which sorts every job id)."""

        def probe() -> NodeProc | None:
            for node in self.nodes:
                if not node.alive() or node.node_id in exclude:
                    continue
                try:
                    node.jobs().GetJob(api_pb2.GetJobRequest(job=api_pb2.JobRef(job_id="j0")),
                                       timeout=3)
                    return node
                except grpc.RpcError as exc:
                    if exc.code() == grpc.StatusCode.NOT_FOUND:
                        return node
            return None

        return wait_for(probe, timeout_s=timeout_s, what="a leader serving writes", interval_s=0.05)


def start_cluster(root: Path, overrides: dict[str, str] | None = None, size: int = 3
                  ) -> tuple[BenchCluster, NodeProc]:
    cluster = BenchCluster(root, size, {**NODE_DEFAULTS, **(overrides or {})}).start()
    try:
        leader = cluster.find_leader()
    except BaseException:
        cluster.kill_all()
        raise
    return cluster, leader


@contextlib.contextmanager
def running_cluster(overrides: dict[str, str] | None = None, size: int = 3
                    ) -> Iterator[tuple[BenchCluster, NodeProc]]:
    with tempfile.TemporaryDirectory(prefix="gnomon-bench-") as tmp:
        cluster, leader = start_cluster(Path(tmp), overrides, size)
        try:
            yield cluster, leader
        finally:
            cluster.kill_all()


# -- job specs and bulk creation ------------------------------------------------------------


def interval_spec(name: str, interval_ms: int, anchor_ms: int, *, queue: str = "",
                  tenant: str = "") -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        tenant=tenant, name=name,
        schedule=types_pb2.Schedule(interval=types_pb2.IntervalSchedule(
            interval_ms=interval_ms, anchor_ms=anchor_ms)),
        tasks=[types_pb2.TaskSpec(name="main", queue=queue)])


def once_spec(name: str, at_ms: int, *, queue: str = "") -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        name=name, schedule=types_pb2.Schedule(once=types_pb2.OnceSchedule(at_ms=at_ms)),
        tasks=[types_pb2.TaskSpec(name="main", queue=queue)])


_RETRY = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
          grpc.StatusCode.DEADLINE_EXCEEDED}


async def create_jobs_async(servers: Sequence[str], specs: Sequence[types_pb2.JobSpec], *,
                            concurrency: int = 64, prefix: str = "bench",
                            deadline_s: float = 600.0, channels: int = 4) -> dict[str, Any]:
    """CreateJob for every spec (request ids `<prefix>-<i>`), following the leader and
    retrying UNAVAILABLE / RESOURCE_EXHAUSTED with the same request id."""
    leader = {"addr": servers[0]}
    chans: dict[str, list[grpc.aio.Channel]] = {}

    def stub(i: int) -> api_pb2_grpc.JobServiceStub:
        addr = leader["addr"]
        if addr not in chans:
            chans[addr] = [grpc.aio.insecure_channel(addr) for _ in range(channels)]
        return api_pb2_grpc.JobServiceStub(chans[addr][i % channels])

    t_end = time.monotonic() + deadline_s
    sem = asyncio.Semaphore(concurrency)
    stats = {"created": 0, "retries": 0, "failed": 0}
    latencies: list[float] = []

    async def one(i: int, spec: types_pb2.JobSpec) -> None:
        async with sem:
            attempt = 0
            while time.monotonic() < t_end:
                t0 = time.perf_counter()
                try:
                    await stub(i).CreateJob(api_pb2.CreateJobRequest(
                        request_id=f"{prefix}-{i}", spec=spec), timeout=20)
                    latencies.append((time.perf_counter() - t0) * 1000)
                    stats["created"] += 1
                    return
                except grpc.aio.AioRpcError as exc:
                    if exc.code() == grpc.StatusCode.ALREADY_EXISTS:
                        stats["created"] += 1
                        return
                    if exc.code() not in _RETRY:
                        stats["failed"] += 1
                        return
                    stats["retries"] += 1
                    hint = dict(exc.trailing_metadata() or ()).get("gnomon-leader")
                    if hint:
                        leader["addr"] = hint
                    elif exc.code() == grpc.StatusCode.UNAVAILABLE:
                        leader["addr"] = servers[(servers.index(leader["addr"]) + 1)
                                                 % len(servers)] if leader["addr"] in servers \
                            else servers[0]
                    attempt += 1
                    await asyncio.sleep(min(1.0, 0.02 * 2 ** min(attempt, 6)))
            stats["failed"] += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i, s) for i, s in enumerate(specs)))
    elapsed = time.perf_counter() - t0
    for group in chans.values():
        for ch in group:
            await ch.close()
    return {**stats, "seconds": round(elapsed, 2),
            "per_s": round(stats["created"] / max(elapsed, 1e-9), 1),
            "latency_ms": summary(latencies, 2)}


def create_jobs(servers: Sequence[str], specs: Sequence[types_pb2.JobSpec], **kw: Any
                ) -> dict[str, Any]:
    return asyncio.run(create_jobs_async(servers, specs, **kw))


def create_jobs_parallel(servers: Sequence[str], kind: str, params: dict[str, Any], count: int,
                         processes: int, run_dir: Path, concurrency: int = 64) -> dict[str, Any]:
    """Create `count` jobs from `processes` client processes (see jobgen.py); each process
    builds its share of the specs itself."""
    run_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    t0 = time.perf_counter()
    for p in range(processes):
        out = run_dir / f"jobgen-{p}.json"
        args = [sys.executable, "-m", "gnomon.bench.jobgen", "--servers", ",".join(servers),
                "--kind", kind, "--params", json.dumps(params), "--count", str(count),
                "--part", str(p), "--parts", str(processes), "--concurrency", str(concurrency),
                "--out", str(out)]
        procs.append((subprocess.Popen(args), out))
    results = []
    for proc, out in procs:
        proc.wait(timeout=1800)
        results.append(json.loads(out.read_text()) if out.exists() else {"created": 0})
    elapsed = time.perf_counter() - t0
    created = sum(r.get("created", 0) for r in results)
    return {"created": created, "failed": sum(r.get("failed", 0) for r in results),
            "seconds": round(elapsed, 2), "per_s": round(created / max(elapsed, 1e-9), 1),
            "processes": processes}


def spec_for(kind: str, i: int, params: dict[str, Any]) -> types_pb2.JobSpec:
    """Job number i of a named job set (shared by jobgen.py and the scenarios)."""
    name = f"{params.get('prefix', kind)}-{i}"
    if kind == "interval":
        count = params["count"]
        interval = params["interval_ms"]
        return interval_spec(name, interval, params.get("anchor_ms", 0)
                             + (i * interval) // count, queue=params.get("queue", ""))
    if kind == "once":
        return once_spec(name, params["at_ms"], queue=params.get("queue", ""))
    raise ValueError(kind)


# -- raw-protocol worker fleet --------------------------------------------------------------


class WorkerFleet:
    """Worker processes running bench/rawworker.py; merged results once stopped."""

    def __init__(self, servers: Sequence[str], run_dir: Path, *, processes: int = 2,
                 streams: int = 4, credits: int = 200, record: str = "lateness",
                 max_s: float = 300.0, heartbeat_s: float = 0.0, channels: int = 0,
                 name: str = "w", connect_rate: float = 500.0, drain_s: float = 3.0):
        self.servers, self.run_dir = list(servers), run_dir
        self.processes, self.streams, self.credits = processes, streams, credits
        self.record, self.max_s, self.heartbeat_s = record, max_s, heartbeat_s
        self.channels = channels or streams
        self.name = name
        self.connect_rate = connect_rate
        self.drain_s = drain_s
        self.procs: list[subprocess.Popen] = []
        self.stop_file = run_dir / f"{name}.stop"

    def start(self) -> WorkerFleet:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.stop_file.unlink(missing_ok=True)
        for p in range(self.processes):
            args = [sys.executable, "-m", "gnomon.bench.rawworker",
                    "--servers", ",".join(self.servers), "--streams", str(self.streams),
                    "--channels", str(self.channels), "--credits", str(self.credits),
                    "--record", self.record, "--max-s", str(self.max_s),
                    "--heartbeat-s", str(self.heartbeat_s), "--id", f"{self.name}{p}",
                    "--connect-rate", str(self.connect_rate), "--drain-s", str(self.drain_s),
                    "--out", str(self.run_dir / f"{self.name}{p}.json"),
                    "--progress", str(self.run_dir / f"{self.name}{p}.progress"),
                    "--stop-file", str(self.stop_file)]
            self.procs.append(subprocess.Popen(args))
        return self

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.poll() is None]

    def progress(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for p in range(self.processes):
            path = self.run_dir / f"{self.name}{p}.progress"
            with contextlib.suppress(OSError, ValueError):
                for k, v in json.loads(path.read_text()).items():
                    total[k] = total.get(k, 0) + int(v)
        return total

    def wait_connected(self, n: int, timeout_s: float = 60.0) -> None:
        wait_for(lambda: self.progress().get("welcomed", 0) >= n, timeout_s=timeout_s,
                 what=f"{n} worker streams welcomed", interval_s=0.1)

    def stop(self, timeout_s: float = 60.0) -> dict[str, Any]:
        self.stop_file.touch()
        deadline = time.monotonic() + timeout_s
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        return self.results()

    def results(self) -> dict[str, Any]:
        merged: dict[str, Any] = {"counts": {}, "errors": {}, "assigns": [], "acks_per_100ms": {},
                                  "assigns_per_100ms": {}, "hb_per_100ms": {}}
        for p in range(self.processes):
            path = self.run_dir / f"{self.name}{p}.json"
            if not path.exists():
                continue
            doc = json.loads(path.read_text())
            for k, v in doc["counts"].items():
                merged["counts"][k] = merged["counts"].get(k, 0) + v
            for k, v in doc.get("errors", {}).items():
                merged["errors"][k] = merged["errors"].get(k, 0) + v
            merged["assigns"].extend(doc.get("assigns", []))
            for key in ("acks_per_100ms", "assigns_per_100ms", "hb_per_100ms"):
                for b, v in doc.get(key, {}).items():
                    merged[key][int(b)] = merged[key].get(int(b), 0) + v
        return merged


def rate_in_window(buckets: dict[int, int], t0_ms: int, t1_ms: int) -> float:
    """Events per second in [t0, t1) from counts per 100 ms bucket (bucket = ms // 100)."""
    total = sum(v for b, v in buckets.items() if t0_ms // 100 <= b < t1_ms // 100)
    return total / max(1e-9, (t1_ms - t0_ms) / 1000)


def rate_series(buckets: dict[int, int], t0_ms: int, width_ms: int = 1000
                ) -> tuple[list[float], list[float]]:
    """(seconds since t0, events/s) per `width_ms` window, for plots."""
    if not buckets:
        return [], []
    per: dict[int, int] = {}
    for b, v in buckets.items():
        w = (b * 100 - t0_ms) // width_ms
        per[w] = per.get(w, 0) + v
    lo, hi = min(per), max(per)
    xs = [w * width_ms / 1000 for w in range(lo, hi + 1)]
    return xs, [per.get(w, 0) * 1000 / width_ms for w in range(lo, hi + 1)]


# -- peers: availability and helpers --------------------------------------------------------


def have_module(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError, AttributeError):
        return False


def have_binary(name: str) -> bool:
    return shutil.which(name) is not None


def pip_install(packages: Sequence[str]) -> bool:
    log(f"installing {' '.join(packages)} with pip")
    return subprocess.run([sys.executable, "-m", "pip", "install", "-q", *packages]).returncode == 0


def apt_install(packages: Sequence[str]) -> bool:
    log(f"installing {' '.join(packages)} with apt-get (services are not started)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "RUNLEVEL": "1"}
    subprocess.run(["apt-get", "update", "-qq"], env=env)
    return subprocess.run(["apt-get", "install", "-y", "-qq", *packages], env=env).returncode == 0


def wait_port(port: int, timeout_s: float = 20.0) -> None:
    import socket

    def ok() -> bool:
        with socket.socket() as s:
            s.settimeout(0.2)
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_for(ok, timeout_s=timeout_s, what=f"port {port}", interval_s=0.05)


def terminate(proc: subprocess.Popen | None, timeout_s: float = 10.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def log_offsets(cluster: LocalCluster) -> dict[str, int]:
    """Current size of every node log (pass to node_log_lines to read only what follows)."""
    return {n.node_id: n.log_path.stat().st_size if n.log_path.exists() else 0
            for n in cluster.nodes}


def node_log_lines(cluster: LocalCluster, pattern: str, since: dict[str, int] | None = None
                   ) -> list[tuple[str, re.Match[str]]]:
    """(node_id, match) for every line of every node log matching `pattern`."""
    rx = re.compile(pattern)
    out = []
    for n in cluster.nodes:
        if n.log_path.exists():
            with open(n.log_path, "rb") as fh:
                fh.seek((since or {}).get(n.node_id, 0))
                text = fh.read().decode(errors="replace")
            for line in text.splitlines():
                m = rx.search(line)
                if m:
                    out.append((n.node_id, m))
    return out
