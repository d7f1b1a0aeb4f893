"""Runs of gnomon itself for a job set (cluster + raw workers + measurement window), and
py-spy profiles of a node process summarised into their top frames."""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gnomon.bench.cluster import BenchCluster, log_offsets, node_log_lines, start_cluster
from gnomon.bench.load import WorkerFleet, create_jobs_bulk, spec_for
from gnomon.bench.meters import CpuMeter, cpu_ms_per_task
from gnomon.bench.peers import JobSet
from gnomon.bench.report import log, now_ms
from gnomon.bench.stats import rate_in_window, summary
from gnomon.node.local.gateway import GatewayProc

# -- py-spy ---------------------------------------------------------------------------------------


def py_spy() -> str | None:
    exe = Path(sys.executable).with_name("py-spy")
    return str(exe) if exe.exists() else shutil.which("py-spy")


def profile(pid: int, seconds: float, out: Path, rate: int = 100) -> dict[str, Any] | None:
    """Sample `pid` with py-spy for `seconds` (raw folded stacks in `out`); the top frames."""
    exe = py_spy()
    if exe is None:
        return None
    proc = subprocess.run([exe, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", str(rate),
                           "-f", "raw", "-o", str(out), "--threads", "--nonblocking"],
                          capture_output=True, text=True, timeout=seconds + 60)
    if proc.returncode != 0 or not out.exists():
        return {"error": (proc.stderr or proc.stdout)[-500:]}
    return fold_top(out)


def profile_many(pids: list[int], seconds: float, outs: list[Path]) -> list[dict | None]:
    """py-spy on several processes at once (same seconds); the top frames of each."""
    procs = [_profile_async(pid, seconds, out) for pid, out in zip(pids, outs, strict=True)]
    result: list[dict | None] = []
    for proc, out in zip(procs, outs, strict=True):
        if proc is None:
            result.append(None)
            continue
        proc.wait(timeout=seconds + 60)
        result.append(fold_top(out) if out.exists() else {"error": "py-spy wrote nothing"})
    return result


_LOC = re.compile(r" \((.*?):\d+\)$")
_ROOT = str(Path(__file__).resolve().parent.parent) + "/"


def _frame(frame: str) -> str:
    """'fn (path:line)' -> 'fn (short/path)' (site-packages and repository prefixes dropped)."""
    m = _LOC.search(frame)
    if not m:
        return frame
    path = m.group(1).split("site-packages/", 1)[-1].removeprefix(_ROOT)
    return f"{frame[:m.start()]} ({path})"


def fold_top(path: Path, n: int = 25) -> dict[str, Any]:
    """Share of samples per thread, per innermost frame (self) and per frame anywhere on the
    stack (inclusive), from py-spy's raw (folded) output."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        k = int(count)
        frames = stack.split(";")
        threads[re.sub(r"\s*\(\d+\)", "", frames[0]).replace("thread ", "").strip(": ")] += k
        names = [_frame(f) for f in frames[1:]]
        total += k
        if names:
            own[names[-1]] += k
        for name in set(names):
            incl[name] += k

    def top(c: collections.Counter[str], m: int) -> list[list]:
        return [[round(100 * v / max(1, total), 1), name] for name, v in c.most_common(m)]

    skip = ("_bootstrap", "run_forever", "_run_once", "Runner.run", "<module>", "_run_code",
            "_run_module_as_main", "run_until_complete", "Thread.run", "main (node/cli.py)",
            "run (asyncio/runners.py)", "Handle._run", "_autoTickThread")
    incl_f = collections.Counter({k: v for k, v in incl.items() if not any(s in k for s in skip)})
    return {"samples": total, "threads": top(threads, 8), "self": top(own, n),
            "inclusive": top(incl_f, n)}


def profile_text(prof: dict[str, Any] | None, n: int = 12) -> str:
    if not prof or "self" not in prof:
        return f"(no profile: {prof.get('error') if prof else 'py-spy not installed'})"
    lines = [f"{prof['samples']} samples; threads: "
             + ", ".join(f"{name} {p}%" for p, name in prof["threads"])]
    lines.append("self: " + "; ".join(f"{p}% {name}" for p, name in prof["self"][:n]))
    lines.append("inclusive: " + "; ".join(f"{p}% {name}" for p, name in prof["inclusive"][:n]))
    return "\n".join(lines)


# -- gnomon runs ----------------------------------------------------------------------------------


def node_groups(cluster: BenchCluster, leader_id: str) -> dict[str, Any]:
    groups = {}
    for n in cluster.nodes:
        role = "leader" if n.node_id == leader_id else "follower"
        groups[f"{n.node_id} ({role})"] = (lambda node=n: [node.proc.pid] if node.alive() else [])
    return groups


def run_gnomon(jobs: JobSet, root: Path, *, warmup_s: float, measure_s: float,
               worker_procs: int = 2, streams: int = 4, credits: int = 500,
               overrides: dict[str, str] | None = None, profile_s: float = 0.0,
               drain_s: float = 3.0, record: str = "lateness", gateways: int = 0,
               kill_gateway_at_s: float | None = None) -> dict[str, Any]:
    """A fresh 3-node cluster, `worker_procs` raw worker processes, the job set created
    through the API; figures from the window [first slot + warmup, + measure).

    `gateways`: that many relaying gnomon-gateway processes between the workers and the
    nodes (worker process i dials gateway i first); `kill_gateway_at_s`: the first gateway
    is killed (-9) that far into the window, and the time until every stream is welcomed
    again (through the others) is measured."""
    root.mkdir(parents=True, exist_ok=True)
    cluster, leader = start_cluster(root / "cluster", overrides)
    since = log_offsets(cluster)
    fleet = None
    fronts: list[GatewayProc] = []
    try:
        servers = [leader.grpc_addr] + [n.grpc_addr for n in cluster.nodes if n is not leader]
        fronts = [GatewayProc(cluster, root / f"gw{i}.log", relay=True).wait_serving()
                  for i in range(gateways)]
        fleet = WorkerFleet([g.addr for g in fronts] or servers, root / "workers",
                            processes=worker_procs, streams=streams, spread=bool(fronts),
                            credits=credits, record=record, drain_s=drain_s,
                            max_s=warmup_s + measure_s + profile_s + 600).start()
        fleet.wait_connected(worker_procs * streams)
        anchor = now_ms() + 1000
        params = {"interval_ms": jobs.interval_ms, "anchor_ms": anchor, "at_ms": jobs.at_ms,
                  "prefix": "j", "count": jobs.count}
        specs = [spec_for(jobs.kind, i, params) for i in range(jobs.count)]
        created = create_jobs_bulk(servers, specs, per_call=200, prefix="bench")
        log(f"gnomon: created {created['created']} jobs in {created['seconds']}s")
        start_ms = max(now_ms(), anchor) if jobs.kind == "interval" else jobs.at_ms
        wait = (start_ms + warmup_s * 1000 - now_ms()) / 1000
        if wait > 0:
            time.sleep(wait)
        groups = {**node_groups(cluster, leader.node_id), "raw workers": fleet.pids}
        if fronts:
            groups["gateways"] = lambda: [g.proc.pid for g in fronts if g.proc.poll() is None]
        meter = CpuMeter(groups).start()
        raft_before = raft_counts(cluster)
        t0 = now_ms()
        recovery_s = None
        if kill_gateway_at_s is not None:
            time.sleep(kill_gateway_at_s)
            on_first = streams * len(range(0, worker_procs, gateways))
            recovery_s = _kill_gateway(fronts[0], fleet, worker_procs * streams, on_first)
            time.sleep(max(0.0, (t0 + measure_s * 1000 - now_ms()) / 1000))
        else:
            time.sleep(measure_s)
        t1 = now_ms()
        cpu = meter.stop()
        raft_after = raft_counts(cluster)
        prof = prof_follower = None
        if profile_s:
            log(f"gnomon: profiling the leader and a follower for {profile_s:.0f}s (py-spy)")
            follower = next(n for n in cluster.nodes if n is not leader)
            prof, prof_follower = profile_many(
                [leader.proc.pid, follower.proc.pid], profile_s,
                [root / "leader.folded", root / "follower.folded"])
        res = fleet.stop()
        fleet = None
        in_window = [r for r in res["assigns"] if t0 <= r[1] < t1]
        rate = rate_in_window(res["acks_per_100ms"], t0, t1)
        tasks = rate * (t1 - t0) / 1000
        return {
            "offered_per_s": jobs.offered_per_s,
            "raft": raft_work(raft_before, raft_after, leader.node_id, tasks),
            "completions_per_s": round(rate, 1),
            "tasks_in_window": round(tasks),
            "cpu_ms_per_task": task_cpu(cpu, tasks),
            "assigns_per_s": round(rate_in_window(res["assigns_per_100ms"], t0, t1), 1),
            "lateness_ms": summary([r[1] - r[0] for r in in_window]),
            "cpu": cpu, "counts": res["counts"], "created": created, "profile": prof,
            "profile_follower": prof_follower,
            "window": [t0, t1], "per_100ms": res["acks_per_100ms"],
            "node_log": node_log_summary(cluster, since),
            "gateway_recovery_s": recovery_s,
            # Tasks leased again (a lease lost: expired, or ended with its stream).
            "retried_assigns": sum(1 for r in res["assigns"] if len(r) > 2 and r[2] > 1),
            # With record="full": tasks a worker received more than once (run twice).
            "received_twice": _received_twice(res["assigns"]) if record == "full" else None,
            "setup": f"3 gnomon nodes; {worker_procs} raw-protocol worker processes x "
                     f"{streams} streams x {credits} credits"
                     + (f" through {gateways} relaying gateways" if gateways else "")
                     + "; 1 bench driver process",
        }
    finally:
        if fleet is not None:
            fleet.stop(timeout_s=10)
        for front in fronts:
            front.stop()
        cluster.kill_all()


def raft_counts(cluster: BenchCluster) -> dict[str, dict[str, float]]:
    """Each node's counters of replicated work: commands by type, entries applied, journal
    entries and fsyncs (a node that does not answer is left out)."""
    out: dict[str, dict[str, float]] = {}
    for node in cluster.nodes:
        try:
            metrics = cluster.scrape(node.node_id)
        except OSError:
            continue
        out[node.node_id] = {k: v for k, v in metrics.items()
                             if k.startswith(("gnomon_commands_total", "gnomon_applied_entries",
                                              "gnomon_raft_journal_", "gnomon_raft_tick_gaps",
                                              "gnomon_raft_longest_tick_gap",
                                              "gnomon_raft_pre_vote_rounds"))}
    return out


def raft_work(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]],
              leader_id: str, tasks: float) -> dict[str, Any]:
    """What one completed task cost in replicated work over the window, on the leader
    (commands by type, entries) and on each node (journal entries per fsync)."""
    def delta(node_id: str, key: str) -> float:
        return after.get(node_id, {}).get(key, 0.0) - before.get(node_id, {}).get(key, 0.0)

    per_task = max(tasks, 1.0)
    lead = after.get(leader_id, {})
    commands = {k.split('command="', 1)[1].rstrip('"}'): round(delta(leader_id, k) / per_task, 3)
                for k in sorted(lead) if k.startswith("gnomon_commands_total{")}
    entries_per_fsync = {}
    for node_id in sorted(after):
        fsyncs = delta(node_id, "gnomon_raft_journal_fsyncs_total")
        entries = delta(node_id, "gnomon_raft_journal_entries_total")
        entries_per_fsync[node_id] = round(entries / fsyncs, 2) if fsyncs else None
    gaps = {node_id: {bound: int(delta(node_id, f'gnomon_raft_tick_gaps_total{{over_seconds="{bound}"}}'))
                      for bound in ("0.1", "0.25", "0.5")} for node_id in sorted(after)}
    return {"commands_per_task": {k: v for k, v in commands.items() if v},
            "tick_gaps_over_s": gaps,
            "longest_tick_gap_s_since_start": {
                node_id: after[node_id].get("gnomon_raft_longest_tick_gap_seconds")
                for node_id in sorted(after)},
            "pre_vote_rounds": {node_id: int(delta(node_id, "gnomon_raft_pre_vote_rounds_total"))
                                for node_id in sorted(after)},
            "entries_per_task": round(delta(leader_id, "gnomon_applied_entries_total")
                                      / per_task, 4),
            "journal_entries_per_fsync": entries_per_fsync}


def _received_twice(assigns: list[list[Any]]) -> int:
    """Runs (one task each) whose task reached a worker more than once."""
    seen = collections.Counter(r[3] for r in assigns if len(r) > 3)
    return sum(1 for n in seen.values() if n > 1)


def _kill_gateway(front: GatewayProc, fleet: WorkerFleet, streams: int, on_front: int,
                  timeout_s: float = 60.0) -> float | None:
    """Kill -9 `front`, which holds `on_front` of the fleet's `streams`; seconds until those
    were welcomed again elsewhere and every stream is in a session (None: not within
    timeout_s). The workers report every 0.2 s: the figure is that coarse."""
    log(f"gnomon: kill -9 of the gateway {front.addr}")
    sessions = fleet.progress().get("sessions", 0)
    killed = time.monotonic()
    front.kill()
    while time.monotonic() - killed < timeout_s:
        now = fleet.progress()
        if now.get("sessions", 0) >= sessions + on_front and now.get("welcomed", 0) >= streams:
            return round(time.monotonic() - killed, 2)
        time.sleep(0.05)
    return None


def task_cpu(cpu: dict[str, Any], tasks: float) -> dict[str, float | None]:
    """CPU ms per completed task: every gnomon process (3 nodes + raw workers) and the
    nodes alone, summed from /proc over the window (the bench driver is not counted)."""
    return {"all": cpu_ms_per_task(cpu, tasks), "nodes": cpu_ms_per_task(cpu, tasks, ("(leader)", "(follower)"))}


def node_log_summary(cluster: BenchCluster, since: dict[str, int]) -> dict[str, Any]:
    """Leader sessions started and snapshots written (node, jobs, runs, ms) since `since`."""
    snaps = node_log_lines(cluster, r"snapshot at index \d+: (\d+) jobs, (\d+) runs in (\d+) ms",
                           since)
    slow = node_log_lines(cluster, r"(a Raft tick took|GCPAUSE) .*", since)
    return {"leader_sessions": len(node_log_lines(cluster, r"leading \(session", since)),
            "slow_ticks": [f"{nid}: {m.group(0)[:90]}" for nid, m in slow[:30]],
            "snapshots": [[nid, int(m.group(1)), int(m.group(2)), int(m.group(3))]
                          for nid, m in snaps]}


def run_gnomon_herd(count: int, root: Path, *, timeout_s: float = 120.0, worker_procs: int = 2,
                    streams: int = 8, credits: int = 1000, profile_s: float = 0.0,
                    create_procs: int = 2) -> dict[str, Any]:
    """`count` one-shot jobs due at the same instant T; workers record when each task starts.

    T is set from a create rate measured first on 1,000 never-due jobs, so that every herd job
    is in before T. Figures: start - T per task, lost (never started) and doubled fires.
    """
    from gnomon.bench.load import once_spec

    root.mkdir(parents=True, exist_ok=True)
    cluster, leader = start_cluster(root / "cluster")
    since = log_offsets(cluster)
    fleet = None
    try:
        servers = [leader.grpc_addr] + [n.grpc_addr for n in cluster.nodes if n is not leader]
        calib_n = min(1000, max(100, count // 10))
        far = now_ms() + 100 * 365 * 86_400_000
        calib = create_jobs_bulk(servers, [once_spec(f"calib-{i}", far)
                                           for i in range(calib_n)], prefix="calib")
        rate = max(50.0, calib["per_s"])
        due = now_ms() + int(1000 * (count / rate * 1.3 + 5))
        log(f"gnomon herd: {count} jobs due in {(due - now_ms()) / 1000:.0f}s "
            f"(calibrated create rate {calib['per_s']}/s)")
        fleet = WorkerFleet(servers, root / "workers", processes=worker_procs, streams=streams,
                            credits=credits, record="full",
                            max_s=(due - now_ms()) / 1000 + timeout_s + 120).start()
        fleet.wait_connected(worker_procs * streams)
        t_create = time.monotonic()
        created = create_jobs_bulk(servers, [once_spec(f"h-{i}", due) for i in range(count)],
                                   prefix="herd")
        create_s = time.monotonic() - t_create
        late_by = (now_ms() - due) / 1000
        log(f"gnomon herd: created {created['created']} in {create_s:.0f}s"
            + (f" ({late_by:.1f}s AFTER the due instant)" if late_by > 0 else ""))
        wait = (due - now_ms()) / 1000
        if wait > 0:
            time.sleep(wait)
        meter = CpuMeter({**node_groups(cluster, leader.node_id), "raw workers": fleet.pids}
                         ).start()
        t_end = time.monotonic() + timeout_s
        prof_proc = None
        if profile_s:
            prof_proc = _profile_async(leader.proc.pid, profile_s, root / "herd-leader.folded")
        while time.monotonic() < t_end and fleet.progress().get("assigns", 0) < count:
            time.sleep(0.2)
        cpu = meter.stop()
        # Late is not lost: past the timeout, wait (up to as long again) for the rest.
        t_more = time.monotonic() + timeout_s
        while time.monotonic() < t_more and fleet.progress().get("assigns", 0) < count:
            time.sleep(0.5)
        prof = None
        if prof_proc is not None:
            prof_proc.wait(timeout=profile_s + 60)
            prof = fold_top(root / "herd-leader.folded") if (root / "herd-leader.folded"
                                                             ).exists() else None
        res = fleet.stop()
        fleet = None
        herd = res["assigns"]
        firsts: dict[str, int] = {}
        first_attempts: dict[str, int] = {}
        reexecuted = 0
        for sched, recv, attempt, run_id, *_ in herd:
            if sched != due:
                continue
            if attempt > 1:
                reexecuted += 1
            else:
                first_attempts[run_id] = first_attempts.get(run_id, 0) + 1
            firsts[run_id] = min(firsts.get(run_id, recv), recv)
        # Two attempt-1 starts of one slot would mean two fires (or a grant delivered twice).
        doubled = sum(1 for n in first_attempts.values() if n > 1)
        lateness = sorted(v - due for v in firsts.values())
        within = sum(1 for x in lateness if x <= timeout_s * 1000)
        sessions = node_log_lines(cluster, r"leading \(session", since)
        snaps = node_log_lines(cluster, r"snapshot at index \d+: (\d+) jobs, (\d+) runs in (\d+) ms",
                               since)
        return {"count": count, "started_within_timeout": within, "timeout_s": timeout_s,
                "leader_sessions": len(sessions),
                "snapshots": [[nid, int(m.group(1)), int(m.group(2)), int(m.group(3))]
                              for nid, m in snaps], "due_ms": due, "created": created, "create_s": round(create_s, 1),
                "created_after_due_s": round(max(0.0, late_by), 1),
                "started": len(firsts), "lost": count - len(firsts), "doubled": doubled,
                "reexecuted": reexecuted,
                "lateness_ms": summary(lateness), "lateness_sorted": lateness,
                "all_started_s": round(lateness[-1] / 1000, 2) if len(firsts) == count else None,
                "cpu": cpu, "cpu_ms_per_task": task_cpu(cpu, len(firsts)),
                "counts": res["counts"], "worker_errors": res["errors"],
                "profile": prof,
                "setup": f"3 gnomon nodes; {worker_procs} raw-protocol worker processes x "
                         f"{streams} streams x {credits} credits; the jobs created with "
                         "CreateJobs (1,000 per call) before the due instant"}
    finally:
        if fleet is not None:
            fleet.stop(timeout_s=10)
        cluster.kill_all()


def _profile_async(pid: int, seconds: float, out: Path) -> subprocess.Popen | None:
    exe = py_spy()
    if exe is None:
        return None
    return subprocess.Popen([exe, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "100",
                             "-f", "raw", "-o", str(out), "--threads", "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
