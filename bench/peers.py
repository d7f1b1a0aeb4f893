"""Peers the benchmarks compare against, each started and stopped by the benchmark itself on
loopback: Redis (broker) + Celery workers + celery beat or RedBeat, APScheduler with a SQLite
job store, etcd (see etcd_peer.py).

A peer that is not installed is reported as "not installed"; `install_all()` (--install)
installs the Python packages with pip and redis-server / etcd-server with apt-get.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gnomon.bench.cluster import (
    apt_install,
    have_binary,
    have_module,
    pip_install,
    terminate,
    wait_port,
)
from gnomon.bench.meters import CpuMeter
from gnomon.bench.report import log, now_ms
from gnomon.node.local.cluster import free_ports

PIP_PACKAGES = ["celery[redis]>=5.3,<6", "redis>=5", "celery-redbeat>=2.2",
                "apscheduler>=3.10,<4", "sqlalchemy>=2", "matplotlib>=3.7"]
APT_PACKAGES = ["redis-server", "etcd-server"]


def missing(peer: str) -> str | None:
    """None when `peer` can run here, else what is missing."""
    need = {
        "celery": (["celery", "redis"], ["redis-server"]),
        "redbeat": (["celery", "redis", "redbeat"], ["redis-server"]),
        "apscheduler": (["apscheduler", "sqlalchemy"], []),
        "etcd": ([], ["etcd"]),
    }[peer]
    absent = [m for m in need[0] if not have_module(m)] + [b for b in need[1]
                                                           if not have_binary(b)]
    return ", ".join(absent) if absent else None


def install_all() -> None:
    if any(missing(p) for p in ("celery", "redbeat", "apscheduler")):
        pip_install(PIP_PACKAGES)
    if not have_binary("redis-server") or not have_binary("etcd"):
        apt_install(APT_PACKAGES)


def not_installed(peer: str) -> str:
    what = missing(peer)
    return f"not installed ({what}; run with --install)" if what else ""


# -- Redis ------------------------------------------------------------------------------------


@dataclass
class Redis:
    root: Path
    port: int = 0
    proc: subprocess.Popen | None = None

    def start(self) -> Redis:
        self.port = free_ports(1)[0]
        shutil.rmtree(self.root, ignore_errors=True)  # no data from an earlier run
        self.root.mkdir(parents=True, exist_ok=True)
        # Durability comparable to a production broker: append-only file, fsync every second.
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "yes", "--appendfsync", "everysec", "--dir", str(self.root),
             "--protected-mode", "yes", "--daemonize", "no", "--loglevel", "warning"],
            stdout=open(self.root / "redis.log", "ab"), stderr=subprocess.STDOUT)  # noqa: SIM115
        wait_port(self.port)
        return self

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self):
        import redis

        return redis.Redis.from_url(self.url)

    def stop(self) -> None:
        terminate(self.proc)


# -- Celery ------------------------------------------------------------------------------------


@dataclass
class JobSet:
    """The benchmark's job set, the same for every system."""

    kind: str  # "interval" | "once"
    count: int
    interval_ms: int = 1000
    anchor_ms: int = 0
    at_ms: int = 0

    @property
    def offered_per_s(self) -> float:
        return self.count * 1000 / self.interval_ms if self.kind == "interval" else 0.0


def records_to_result(records: list[tuple[float, float]], t0_ms: int, t1_ms: int,
                      offered: float) -> dict[str, Any]:
    """Standard figures from (scheduled_for_ms, start_ms) records."""
    from gnomon.bench.stats import summary

    in_window = [(s, st) for s, st in records if t0_ms <= st < t1_ms]
    buckets: dict[int, int] = {}
    for _, st in records:
        b = int(st) // 100
        buckets[b] = buckets.get(b, 0) + 1
    return {"offered_per_s": offered,
            "completions_per_s": round(len(in_window) / max(1e-9, (t1_ms - t0_ms) / 1000), 1),
            "lateness_ms": summary([st - s for s, st in in_window]),
            "records": len(records), "per_100ms": buckets}


def run_celery(jobs: JobSet, root: Path, *, scheduler: str = "beat", warmup_s: float,
               measure_s: float, worker_procs: int = 1, concurrency: int = 2,
               drain_s: float = 0.0, start_at_ms: int = 0, until: int = 0) -> dict[str, Any]:
    """Celery workers + beat (or RedBeat) + Redis for `jobs`; window [start+warmup, +measure).

    For interval jobs the phase anchor is set when beat starts; for a herd (once) jobs.at_ms.
    """
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    redis_srv = Redis(root / "redis").start()
    procs: list[subprocess.Popen] = []
    try:
        env = {**os.environ, "GNOMON_BENCH_BROKER": redis_srv.url,
               "GNOMON_BENCH_JOBS": str(jobs.count), "GNOMON_BENCH_KIND": jobs.kind,
               "GNOMON_BENCH_INTERVAL_MS": str(jobs.interval_ms),
               "GNOMON_BENCH_AT_MS": str(jobs.at_ms)}
        app = "gnomon.bench.celery_app"
        for w in range(worker_procs):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", app, "worker", "-Q", "bench",
                 "-c", str(concurrency), "-P", "prefork", "-n", f"bench{w}@%h",
                 "--without-gossip", "--without-mingle", "--without-heartbeat",
                 "-l", "WARNING"],
                env=env, stdout=open(root / f"worker{w}.log", "ab"),  # noqa: SIM115
                stderr=subprocess.STDOUT))
        # Beat starts now; the first slots are 3 s away (the workers start meanwhile; tasks
        # wait in Redis until they consume) and the warm-up follows.
        anchor = now_ms() + 3000 if jobs.kind == "interval" else jobs.at_ms
        env["GNOMON_BENCH_ANCHOR_MS"] = str(anchor)
        sched = ("gnomon.bench.celery_redbeat:BenchRedBeatScheduler" if scheduler == "redbeat"
                 else "gnomon.bench.celery_app:BenchScheduler")
        t_beat = time.time()
        beat = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", app, "beat", "-S", sched,
             "-s", str(root / "beat-schedule"), "--pidfile", str(root / "beat.pid"),
             "-l", "WARNING"],
            env=env, stdout=open(root / "beat.log", "ab"), stderr=subprocess.STDOUT)  # noqa: SIM115
        procs.append(beat)
        groups = {"celery workers": lambda: [p.pid for p in procs[:worker_procs]],
                  "beat": lambda: [beat.pid], "redis": lambda: [redis_srv.proc.pid]}
        start_ms = max(anchor, start_at_ms) if jobs.kind == "interval" else jobs.at_ms
        wait = (start_ms + warmup_s * 1000 - now_ms()) / 1000
        if wait > 0:
            time.sleep(wait)
        meter = CpuMeter(groups).start()
        t0 = now_ms()
        client = redis_srv.client()
        t_end = time.monotonic() + measure_s
        while time.monotonic() < t_end:
            time.sleep(min(0.25, max(0.0, t_end - time.monotonic())))
            if until and client.llen("bench:lat") >= until:
                break
        t1 = now_ms()
        cpu = meter.stop()
        if drain_s:
            time.sleep(drain_s)
        raw = client.lrange("bench:lat", 0, -1)
        records = []
        for item in raw:
            s, st = item.decode().split(",")
            records.append((float(s) * 1000, float(st) * 1000))
        out = records_to_result(records, t0, t1, jobs.offered_per_s)
        out.update(cpu=cpu, beat_start_s=round(anchor / 1000 - t_beat, 2), window=[t0, t1],
                   raw=records if jobs.kind == "once" else [],
                   setup=f"{worker_procs} celery worker process(es) x prefork -c {concurrency}, "
                         f"{'RedBeat' if scheduler == 'redbeat' else 'celery beat (shelve)'}, "
                         "redis-server (appendfsync everysec)")
        return out
    finally:
        for p in reversed(procs):
            terminate(p)
        redis_srv.stop()


def run_apscheduler(jobs: JobSet, root: Path, *, warmup_s: float, measure_s: float,
                    threads: int = 20, drain_s: float = 0.0, add_timeout_s: float = 600,
                    until: int = 0) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    db = root / "aps.sqlite"
    db.unlink(missing_ok=True)
    ready = root / "aps.ready"
    ready.unlink(missing_ok=True)
    out_path = root / "aps.json"
    anchor = jobs.anchor_ms or (now_ms() + 3000)
    if jobs.kind == "once":
        run_s = (jobs.at_ms - now_ms()) / 1000 + warmup_s + measure_s + drain_s + 1
    else:
        run_s = warmup_s + measure_s + drain_s + 4
    proc = subprocess.Popen(
        [sys.executable, "-m", "gnomon.bench.aps_runner", "--db", str(db), "--kind", jobs.kind,
         "--jobs", str(jobs.count), "--interval-ms", str(jobs.interval_ms),
         "--anchor-ms", str(anchor), "--at-ms", str(jobs.at_ms), "--threads", str(threads),
         "--run-s", str(max(1.0, run_s)), "--ready-file", str(ready), "--out", str(out_path),
         "--until", str(until)],
        stdout=open(root / "aps.log", "ab"), stderr=subprocess.STDOUT)  # noqa: SIM115
    try:
        deadline = time.monotonic() + add_timeout_s
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if not ready.exists():
            return {"error": "APScheduler did not finish adding jobs"}
        ready_ms = float(ready.read_text()) * 1000
        start_ms = max(ready_ms, anchor) if jobs.kind == "interval" else jobs.at_ms
        if jobs.kind == "once" and ready_ms > jobs.at_ms:
            log(f"APScheduler added its jobs {(ready_ms - jobs.at_ms) / 1000:.1f}s after the "
                "due instant")
        wait = (start_ms + warmup_s * 1000 - now_ms()) / 1000
        if wait > 0:
            time.sleep(wait)
        meter = CpuMeter({"apscheduler": lambda: [proc.pid]}).start()
        t0 = now_ms()
        t_end = time.monotonic() + measure_s
        while time.monotonic() < t_end and proc.poll() is None:
            time.sleep(0.1)
        t1 = now_ms()
        cpu = meter.stop()
        proc.wait(timeout=run_s + 120)
        doc = json.loads(out_path.read_text())
        records = [(s * 1000, st * 1000) for s, st in doc["records"]]
        out = records_to_result(records, t0, t1, jobs.offered_per_s)
        out.update(cpu=cpu, add_s=doc["add_s"], window=[t0, t1],
                   raw=records if jobs.kind == "once" else [],
                   setup=f"one APScheduler 3 process: BackgroundScheduler, SQLAlchemyJobStore "
                         f"(SQLite file), ThreadPoolExecutor({threads})")
        return out
    finally:
        terminate(proc)
