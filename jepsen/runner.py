"""One test run, start to finish: set up, load and faults, final heal, final reads, check,
report, tear down (also after an error or Ctrl-C).

    net.setup -> witness -> nodes -> leader -> workload setup -> workers, agents
    -> clients + nemesis until the time limit -> heal everything -> leader (none within 60 s:
    an anomaly, the run goes on) -> each workload's final phase -> runs settle -> workers stop
    -> final reads -> replica digests -> stop -> checkers -> report
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import logging
import random
import re
import signal
import time
from pathlib import Path
from typing import Any

from gnomon.client import AsyncClient
from gnomon.jepsen import report
from gnomon.jepsen.checkers import common, lease
from gnomon.jepsen.checkers import faults as fault_checks
from gnomon.jepsen.context import Context, TestOptions
from gnomon.jepsen.db import DB
from gnomon.jepsen.gateways import Gateways, gateway_hosts
from gnomon.jepsen.generator import Workload, run_clients
from gnomon.jepsen.history import FAIL, FINAL, INVOKE, OK, History
from gnomon.jepsen.nemesis import (
    GROUPS,
    SECOND_TIER,
    Nemesis,
    expand,
    needs_faketime,
    node_flags_for,
    prepare,
)
from gnomon.jepsen.net import BRIDGE_IP, SUBNET, Host, Net, NetError, RunLock, missing_tools
from gnomon.jepsen.net import require_root as _require_root
from gnomon.jepsen.procs import Procs
from gnomon.jepsen.witness import Witness
from gnomon.jepsen.workerproc import FIRE_QUEUE, LEASE_QUEUE
from gnomon.jepsen.workloads import make

log = logging.getLogger(__name__)

AGENTS = 2
WITNESS_PORT = 7900
CANARY_OVERRIDES = {
    # A deposed leader must keep believing it leads long enough to act on the belief
    # (pysyncobj's own default is 30 s).
    "fire-on-isleader": {"leader_fallback_timeout_s": "20"},
}


SECOND_TIER_KINDS = {k for g in SECOND_TIER for k in GROUPS[g]}


def worker_concurrency(opts: TestOptions, kinds: list[str]) -> int:
    """Tasks an SDK worker runs at once: 8, or 32 with an outage (a catch-up is hundreds of
    short tasks at once; the workers must not be what limits it)."""
    if opts.worker_concurrency:
        return opts.worker_concurrency
    return 32 if any(k.startswith("outage") for k in kinds) else 8


class HarnessError(RuntimeError):
    """The harness could not run the test (not an anomaly of the system under test)."""


def require_root() -> None:
    try:
        _require_root()
    except NetError as exc:
        raise HarnessError(str(exc)) from None


def preflight(opts: TestOptions) -> list[str]:
    """The fault kinds to use; raises HarnessError naming what is missing."""
    require_root()
    kinds = expand(opts.nemeses, opts.nodes, opts.gateways)
    missing = missing_tools(needs_faketime(kinds))
    if missing:
        raise HarnessError(f"missing Debian packages: {' '.join(missing)} "
                           f"(apt-get install -y {' '.join(missing)} faketime)")
    return kinds


def run_test(opts: TestOptions) -> dict[str, Any]:
    """Run one test; returns the results (also written to the run directory)."""
    kinds = preflight(opts)
    run_dir = Path(opts.out_dir) / f"{time.strftime('%Y%m%dT%H%M%S')}-{opts.label()}"
    run_dir.mkdir(parents=True, exist_ok=True)
    with RunLock():
        return asyncio.run(_main(opts, kinds, run_dir))


async def _main(opts: TestOptions, kinds: list[str], run_dir: Path) -> dict[str, Any]:
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    assert task is not None
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    node_ids = [f"n{i + 1}" for i in range(opts.nodes)]
    sdk = [f"w{i + 1}" for i in range(opts.sdk_workers)]
    zombies = [f"z{i + 1}" for i in range(opts.zombies)] if "lease" in opts.workloads else []
    agents = [f"c{i + 1}" for i in range(AGENTS)]
    hosts = ([Host(n, f"{SUBNET}.{11 + i}") for i, n in enumerate(node_ids)]
             + [Host(w, f"{SUBNET}.{21 + i}") for i, w in enumerate(sdk)]
             + [Host(z, f"{SUBNET}.{31 + i}") for i, z in enumerate(zombies)]
             + [Host(c, f"{SUBNET}.{41 + i}") for i, c in enumerate(agents)]
             + [Host(g, ip) for g, ip in gateway_hosts(opts.gateways)])
    net = Net(hosts)
    history = History(run_dir / "history.jsonl")
    overrides = opts.node_config()
    overrides.update(node_flags_for(kinds))
    for canary in opts.canaries:
        overrides.update(CANARY_OVERRIDES.get(canary, {}))
    overrides.update(opts.node_overrides)
    db = DB(run_dir, net, node_ids, tuple(opts.canaries), overrides, needs_faketime(kinds),
            node_flags=copy.deepcopy(opts.node_flags),
            reserved=frozenset(node_flags_for(kinds)) | frozenset(opts.node_overrides))
    witness = Witness(history, BRIDGE_IP, WITNESS_PORT)
    gateways = (Gateways(run_dir, net, [g for g, _ in gateway_hosts(opts.gateways)],
                         db.servers, relay=opts.gateway_relay) if opts.gateways else None)
    # With gateways, workers and clients dial them only; the harness's own reads (status,
    # digests, leader) still go to each node.
    procs = Procs(run_dir, net, gateways.addrs if gateways else db.servers, witness.url,
                  opts.seed)
    admin: AsyncClient | None = None
    timings: dict[str, float] = {}
    mark = [loop.time()]

    def phase(name: str) -> None:
        now = loop.time()
        timings[name] = round(now - mark[0], 2)
        mark[0] = now

    try:
        net.setup()
        witness.start()
        prepare(opts, kinds, db, history)
        db.start_all()
        admin = AsyncClient(db.servers, timeout_s=5.0, attempt_timeout_s=2.0, retries=20,
                            backoff_max_s=0.5)
        ctx = Context(opts, run_dir, history, net, db, procs, witness, admin,
                      random.Random(opts.seed), node_ids, kinds=kinds, gateways=gateways)
        await wait_for_leader(ctx, 60)
        if gateways is not None:
            await start_gateways(gateways, 30)
        phase("cluster-up")
        workloads = [make(w) for w in opts.workloads]
        for w in workloads:
            await w.setup(ctx)
        queues = ",".join(q for q, w in ((FIRE_QUEUE, "fire"), (LEASE_QUEUE, "lease"))
                          if w in opts.workloads) or FIRE_QUEUE
        for w in sdk:
            procs.start_worker(w, "sdk", queues, worker_concurrency(opts, kinds))
        for z in zombies:
            procs.start_worker(z, "zombie", LEASE_QUEUE)
        handles = [await procs.start_agent(c) for c in agents]
        await asyncio.wait_for(asyncio.gather(*(h.ready for h in handles)), 60)
        await wait_until(lambda: set(sdk + zombies) <= witness.workers, 60, "workers up",
                         failed=lambda: procs.crashed_workers())
        phase("clients-up")
        ctx.start_wall_ms = int(time.time() * 1000)
        started = loop.time()
        deadline = started + opts.time_limit_s
        nemesis = Nemesis(ctx, kinds)
        await asyncio.gather(run_clients(ctx, workloads, handles, deadline),
                             nemesis.run(deadline))
        duration = loop.time() - started
        phase("load")
        await nemesis.heal_all()
        await leader_after_heal(ctx, 60)
        ctx.heal_wall_ms = int(time.time() * 1000)
        phase("heal")
        for w in workloads:
            await w.final(ctx)
        await settle(ctx, ctx.heal_wall_ms / 1000 + opts.heal_bound_s)
        crashed_workers = procs.crashed_workers()
        await procs.stop()
        for w in workloads:
            final_read = getattr(w, "final_read", None)
            if final_read is not None:
                await final_read(ctx)
        phase("final-reads")
        ctx.digests = await collect_digests(ctx, 30)
        ctx.limits = await collect_limits(ctx)
        phase("digests")
        crashed = db.crashed() + crashed_workers + (gateways.crashed() if gateways else [])
        db.stop_all()
        witness.stop()
        history.flush()
        phase("stop")
        results = check(ctx, workloads, kinds, duration, crashed)
        results["node_logs"] = log_signals(db)
        results["limits"] = ctx.limits
        phase("check")
        results["timings_s"] = timings
        report.write(run_dir, ctx, results)
        return results
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(procs.stop(), 10)
        procs.kill_workers()
        if gateways is not None:
            gateways.stop_all()
        db.stop_all()
        db.unmount_disks()
        witness.stop()
        if admin is not None:
            with contextlib.suppress(Exception):
                await admin.close()
        history.close()
        net.teardown()


LOG_SIGNALS = {
    "critical": re.compile(r" CRITICAL "),
    "fatal": re.compile(r"FATAL"),
    "traceback": re.compile(r"^Traceback"),
    "snapshot_failed": re.compile(r"snapshot at index \d+ failed"),
    "child_killed_by_signal": re.compile(r"child exited with -\d+"),
}


def log_signals(db: DB) -> dict[str, dict[str, int]]:
    """Per node, how many log lines look like trouble (information for the report, not a
    verdict: expected faults log FATAL lines too)."""
    out = {}
    for node_id, node in db.nodes.items():
        counts = dict.fromkeys(LOG_SIGNALS, 0)
        if node.log_file.exists():
            for line in node.log_file.read_text(errors="replace").splitlines():
                for name, pattern in LOG_SIGNALS.items():
                    counts[name] += bool(pattern.search(line))
        out[node_id] = {k: v for k, v in counts.items() if v}
    return out


async def wait_until(pred, timeout_s: float, what: str, failed=lambda: None) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while not pred():
        broken = failed()
        if broken:
            raise HarnessError(f"while waiting for {what}: {broken} (see the run's logs)")
        if loop.time() > end:
            raise HarnessError(f"timed out after {timeout_s:g}s waiting for {what}")
        await asyncio.sleep(0.1)


async def start_gateways(gateways: Gateways, timeout_s: float) -> None:
    """Start every gateway and wait until each serves JobService (it sees a leader)."""
    gateways.start_all()
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    waiting = set(gateways.gateways)
    while waiting:
        if gateways.crashed():
            raise HarnessError(f"gateway exited: {gateways.crashed()} (see gN.log)")
        if loop.time() > end:
            raise HarnessError(f"gateways {sorted(waiting)} not serving after {timeout_s:g}s")
        serving = await asyncio.gather(*(gateways.serving(g) for g in sorted(waiting)))
        waiting -= {g for g, ok in zip(sorted(waiting), serving, strict=True) if ok}
        await asyncio.sleep(0.1)


async def wait_for_leader(ctx: Context, timeout_s: float) -> str:
    """Until a leader accepts linearizable reads (its term's barrier committed)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while True:
        try:
            await ctx.admin.list_jobs(limit=1, timeout_s=2.0)
            leader = await ctx.db.leader(ctx.admin)
            if leader:
                return leader
        except Exception as exc:  # noqa: BLE001 - retried until the deadline
            last = exc
        else:
            last = None
        if loop.time() > end:
            crashed = ctx.db.crashed()
            raise HarnessError(f"no leader within {timeout_s:g}s (last error {last!r}; "
                               f"crashed nodes: {crashed or 'none'}; see node logs)")
        await asyncio.sleep(0.2)


async def settle(ctx: Context, deadline: float) -> None:
    """Until the leader reports no active run, or the deadline (wall seconds): after it the
    workers stop, so the final reads see every completion a worker was told about."""
    started = time.time()
    ctx.history.append(FINAL, INVOKE, "settle", None)
    active = None
    while time.time() < deadline:
        leader = await ctx.db.leader(ctx.admin)
        status = await ctx.db.status(ctx.admin, leader, timeout_s=2.0) if leader else None
        active = status.active_runs if status else active
        if active == 0:
            break
        await asyncio.sleep(0.3)
    ctx.history.append(FINAL, OK, "settle", {"active_runs": active,
                                             "waited_s": round(time.time() - started, 2)})


async def leader_after_heal(ctx: Context, timeout_s: float) -> None:
    """After the heal a leader must serve linearizable reads within the bound; if none does,
    that is the cluster's failure (availability), not the harness's: the run goes on to its
    final phase (bounded retries) and the checkers."""
    ctx.history.append(FINAL, INVOKE, "leader", None)
    try:
        leader = await wait_for_leader(ctx, timeout_s)
    except HarnessError as exc:
        ctx.history.append(FINAL, FAIL, "leader", None, error=str(exc))
        return
    ctx.history.append(FINAL, OK, "leader", {"node": leader})


async def collect_digests(ctx: Context, timeout_s: float) -> dict[str, dict[int, str]]:
    """(applied index -> digest) per node, from a status read with the digest and one after it
    at the same applied index, all nodes sampled at once each round, until every node has a
    sample at a common index."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    samples: dict[str, dict[int, str]] = {n: {} for n in ctx.node_ids}
    while loop.time() < end:
        got = await asyncio.gather(*(_stable_digest(ctx, n) for n in ctx.node_ids))
        for node_id, sample in zip(ctx.node_ids, got, strict=True):
            if sample is not None:
                samples[node_id][sample[0]] = sample[1]
        if all(samples.values()) and set.intersection(*(set(s) for s in samples.values())):
            break
        await asyncio.sleep(0.05)
    return {n: s for n, s in samples.items() if s}


async def _stable_digest(ctx: Context, node_id: str) -> tuple[int, str] | None:
    """A digest whose applied index did not move while it was computed: GetStatus reads the
    index before it computes the digest, so a second (cheap) read must show the same index."""
    a = await ctx.db.status(ctx.admin, node_id, timeout_s=5.0, include_digest=True)
    b = await ctx.db.status(ctx.admin, node_id, timeout_s=5.0)
    if a and b and a.state_digest and a.applied_index == b.applied_index:
        return a.applied_index, a.state_digest
    return None


async def collect_limits(ctx: Context) -> dict[str, dict[str, Any]]:
    """The replicated limits (and their version) every reachable node reports."""
    out = {}
    for node_id in ctx.node_ids:
        status = await ctx.db.status(ctx.admin, node_id, timeout_s=2.0)
        limits = getattr(status, "limits", None)
        if limits is not None:
            out[node_id] = {**dataclasses.asdict(limits),
                            "limits_version": status.limits_version}
    return out


def check(ctx: Context, workloads: list[Workload], kinds: list[str], duration_s: float,
          crashed: list[str]) -> dict[str, Any]:
    events = ctx.history.snapshot()
    checkers: dict[str, dict[str, Any]] = {}
    for w in workloads:
        try:
            checkers[w.name] = w.check(ctx)
        except Exception as exc:  # noqa: BLE001 - a checker bug must not hide the others
            log.exception("checker %s failed", w.name)
            checkers[w.name] = {"valid": "unknown", "anomalies": [], "error": repr(exc)}
    final_runs = {r[0] for f in ctx.finals.values() if isinstance(f, dict)
                  for rs in (f.get("runs") or {}).values() for r in rs}
    checkers["fencing-tokens"] = lease.check_tokens(events)
    checkers["terminal-states"] = common.check_terminal_states(events)
    if final_runs:
        checkers["lost-runs"] = common.check_lost_runs(events, final_runs)
    checkers["request-ids"] = common.check_request_ids(events)
    checkers["replicas"] = common.check_digests(ctx.digests, ctx.node_ids)
    checkers["vacuity"] = common.check_vacuity(
        events, workloads=[w.name for w in workloads], requested=list(ctx.opts.nemeses),
        duration_s=duration_s, min_ok_rate=ctx.opts.min_ok_rate)
    checkers["crashes"] = common.check_crashes(crashed)
    checkers["availability"] = common.check_availability(events)
    if set(kinds) & SECOND_TIER_KINDS:
        checkers["faults"] = fault_checks.check(events, kinds, nodes=len(ctx.node_ids),
                                                limits=ctx.limits)
    valid: bool | str = True
    for c in checkers.values():
        if c["valid"] is False:
            valid = False
            break
        if c["valid"] == "unknown":
            valid = "unknown"
    counts = common.op_counts(events)
    faults = [e.value["kind"] for e in events
              if e.process == "nemesis" and e.f == "start" and e.type == "ok"]
    return {
        "valid": valid,
        "test": {**ctx.opts.to_json(), "fault_kinds": kinds, "label": ctx.opts.label()},
        "run_dir": str(ctx.run_dir),
        "duration_s": round(duration_s, 1),
        "operations": sum(counts.values()),
        "op_counts": counts,
        "faults": faults,
        "checkers": checkers,
    }
