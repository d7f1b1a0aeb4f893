"""The midnight herd with and without the cluster's fire spread (issue 9).

N daily cron jobs with one expression (`M H * * *`, the same minute for all: a midnight
stand-in) on a 3-node cluster, once with `fire_spread_window_ms` 0 and once with a window
(default 60 s). No workers: fires only. The minute is chosen after the creation rate was
measured on a calibration set (3x the expected creation time + 30 s ahead; jobs are created in
CreateJobs calls of 1,000), so every job
exists before its slot (`creates_done_before_slot_s`). Measured per run: the peak of fires
committed per second (gnomon_fires_total summed over the nodes, sampled every 100 ms, the
highest 1-second window: a leader change during the herd is counted whole), leader changes,
the time from the slot to the last fire, and the lateness of a sample of runs against the
instant each was due (Run.created_ms - (slot + fire_delay_ms): the spread's own delay is not
lateness).

    python -m gnomon.bench.spread            # GNOMON_BENCH_SPREAD_JOBS (default 10000),
                                             # GNOMON_BENCH_SPREAD_WINDOW_MS (default 60000),
                                             # GNOMON_BENCH_SPREAD_RUNS (0,spread: both)
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc

from gnomon.bench.cluster import running_cluster
from gnomon.bench.load import create_jobs_bulk
from gnomon.bench.stats import summary
from gnomon.v1 import api_pb2, types_pb2

FIRES = 'gnomon_fires_total{outcome="run"}'
LEADER_CHANGES = "gnomon_leader_changes_total"
SAMPLE_RUNS = 1_000
# The slot leaves this multiple of the calibrated creation time: on the shared machine the
# creation rate varied 3x between the calibration and the creates (622/s then 214/s).
CREATE_MARGIN = 3.0


def _scrape(cluster, node_id: str) -> dict[str, float] | None:
    """The node's FIRES and LEADER_CHANGES samples (its /metrics; BenchCluster.metrics is
    shadowed by LocalCluster's `metrics` flag field); None when the scrape did not answer
    in time (a node busy with the herd: that sample is left out)."""
    url = f"http://{cluster.metrics_addrs[node_id]}/metrics"
    out = {FIRES: 0.0, LEADER_CHANGES: 0.0}
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback
            for line in resp.read().decode().splitlines():
                name, _, value = line.rpartition(" ")
                if name in out:
                    out[name] = float(value)
    except OSError:
        return None
    return out


def _fired(cluster) -> tuple[float, float] | None:
    """Fires committed so far by any node as leader (each counts its own), and leader
    changes seen by the nodes, summed over the nodes: a herd that moves the leadership is
    still counted whole."""
    fires = changes = 0.0
    for node in cluster.nodes:
        got = _scrape(cluster, node.node_id)
        if got is None:
            return None
        fires, changes = fires + got[FIRES], changes + got[LEADER_CHANGES]
    return fires, changes


def _slot_after(t_s: float) -> int:
    """The first whole minute at or after `t_s` (seconds since the epoch)."""
    return int(-(-t_s // 60) * 60)


def _spec(i: int, minute: int, hour: int, *, tenant: str = "herd",
          paused: bool = False) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        tenant=tenant, name=f"midnight-{i}", paused=paused,
        schedule=types_pb2.Schedule(cron=types_pb2.CronSchedule(
            expression=f"{minute} {hour} * * *", timezone="UTC")),
        tasks=[types_pb2.TaskSpec(name="main", queue="nobody")])


def measure(n: int, window_ms: int) -> dict[str, Any]:
    with running_cluster({"fire_spread_window_ms": str(window_ms)}) as (cluster, leader):
        servers = [leader.grpc_addr] + [x.grpc_addr for x in cluster.nodes if x is not leader]
        # The slot: a whole minute after the creates will have landed. Their rate is
        # measured first on a calibration set (paused jobs of another tenant), so the slot
        # is chosen from a measured rate, not a guess; a run whose creates still ended
        # after the slot says so (created_late_s) and is not a valid measurement.
        calib = min(5_000, max(500, n // 20))
        rate = create_jobs_bulk(servers, [_spec(i, 0, 0, tenant="calib", paused=True)
                                          for i in range(calib)],
                                prefix=f"calib-{window_ms}")["per_s"]
        slot_s = _slot_after(time.time() + n / max(rate, 1.0) * CREATE_MARGIN + 30)
        gm = time.gmtime(slot_s)
        created = create_jobs_bulk(servers, [_spec(i, gm.tm_min, gm.tm_hour)
                                             for i in range(n)],
                                   prefix=f"herd-{window_ms}",
                                   deadline_s=max(600.0, slot_s - time.time()))
        out: dict[str, Any] = {"jobs": created["created"], "window_ms": window_ms,
                               "creates_per_s": created["per_s"],
                               "calibration_creates_per_s": round(rate, 1),
                               "creates_done_before_slot_s": round(slot_s - time.time(), 1)}
        if time.time() > slot_s - 2:
            out["created_late_s"] = round(time.time() - slot_s, 1)
        print(json.dumps({"progress": out}), file=sys.stderr, flush=True)
        base = None
        while base is None:
            base = _fired(cluster)
        samples: list[tuple[float, float]] = []
        changes = 0.0
        deadline = slot_s + window_ms / 1000 + 300
        while time.time() < deadline:
            got = _fired(cluster)
            if got is None:
                time.sleep(0.1)
                continue
            fired, changes = got[0] - base[0], got[1] - base[1]
            samples.append((time.time(), fired))
            if fired >= created["created"]:
                break
            time.sleep(0.1)
        peak = 0.0
        for i, (t, f) in enumerate(samples):
            j = i
            while j + 1 < len(samples) and samples[j + 1][0] - t <= 1.0:
                j += 1
            if samples[j][0] > t:
                peak = max(peak, (samples[j][1] - f) / (samples[j][0] - t))
        out["peak_fires_per_s"] = round(peak, 1)
        # Leader changes the nodes saw from the end of the creates to the last fire.
        out["leader_changes"] = int(changes)
        out["last_fire_after_slot_s"] = round(samples[-1][0] - slot_s, 2) if samples else None
        out["fired"] = int(samples[-1][1]) if samples else 0
        out["lateness_ms"] = _lateness(leader, slot_s * 1000)
    return out


def _lateness(leader, slot_ms: int) -> dict[str, float]:
    """Run.created_ms - (slot + fire_delay_ms) for the first SAMPLE_RUNS jobs."""
    jobs = leader.jobs()
    page = jobs.ListJobs(api_pb2.ListJobsRequest(tenant="herd", limit=SAMPLE_RUNS,
                                                 consistency=api_pb2.CONSISTENCY_STALE),
                         timeout=30)
    late: list[float] = []
    for job in page.jobs:
        try:
            run = jobs.GetRun(api_pb2.GetRunRequest(
                run_id=f"{job.job_id}@{slot_ms}", consistency=api_pb2.CONSISTENCY_STALE),
                timeout=10).run
        except grpc.RpcError:
            continue
        late.append(run.created_ms - (run.scheduled_for_ms + run.fire_delay_ms))
    return summary(late, 1)


def main() -> None:
    n = int(os.environ.get("GNOMON_BENCH_SPREAD_JOBS", 10_000))
    window = int(os.environ.get("GNOMON_BENCH_SPREAD_WINDOW_MS", 60_000))
    # "0", "spread" or both (default): which of the two runs to make.
    which = os.environ.get("GNOMON_BENCH_SPREAD_RUNS", "0,spread").split(",")
    results = []
    for w in [w for w, key in ((0, "0"), (window, "spread")) if key in which]:
        results.append(measure(n, w))
        print(json.dumps(results[-1]), flush=True)
    out = Path(__file__).resolve().parent / "results" / "spread.json"
    if len(sys.argv) > 1:
        out = Path(sys.argv[1])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
