"""Nemeses: faults, each a start and a stop, recorded in the history as `nemesis` events.

Kinds (selected by name or by group):

    partition  isolate-one, isolate-leader, halves, ring (5 nodes), bridge (5 nodes), worker-cut
    kill       kill-one, kill-minority, kill-leader, kill-all       (kill -9, restart at stop)
    pause      pause-leader, pause-worker (past the lease TTL)      (SIGSTOP / SIGCONT)
    clock      clock-jump, clock-strobe (one node, libfaketime)
    client     client-chaos (attempts time out after ms; the same request id is sent again)

Second tier (outage.py, storage.py, drift.py):

    outage         outage-stop, outage-kill, outage-clock (every node, long; clocks jump
                   forward by minutes), then catch-up
    snapshot-kill  kill -9 one node while it writes a snapshot file
    corrupt        corrupt-snapshot, corrupt-journal, corrupt-meta (one node must refuse to
                   start; healed by wiping its data directory)
    disk-full      fill the tmpfs under one node's data directory (it must stop)
    config-drift   nodes with different local configs; restart one with fresh values
    membership     member-replace: wipe a follower, remove it, add it back empty
                   (membership.py)

Gateways (need `--gateways N`):

    gateway        gateway-kill (kill -9 the gateway holding the most streams, restart at
                   stop), gateway-partition (cut it off from every node, heal at stop)

Node partitions cut node-to-node links only (Raft and node-to-node gRPC): workers and clients
still reach every node, as in Jepsen. `worker-cut` cuts one worker off from every node (and
gateway).
`heal_all()` ends every fault: the final phase calls it before the last reads.
The first faults of a run go through every requested kind once (in a seeded order), so a short
run with several kinds injects each; then kinds are drawn at random.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gnomon.jepsen import drift, membership, outage, storage
from gnomon.jepsen.context import Context, TestOptions
from gnomon.jepsen.disk import DiskError
from gnomon.jepsen.fault import Skip, StartFn, wall_ms
from gnomon.jepsen.history import FAIL, INFO, INVOKE, NEMESIS, OK, History
from gnomon.jepsen.net import NetError, partition_grudge

if TYPE_CHECKING:
    from gnomon.jepsen.db import DB

__all__ = ["ALL_KINDS", "GROUPS", "Nemesis", "Skip", "expand", "prepare"]

log = logging.getLogger(__name__)

GROUPS = {
    "partition": ("isolate-one", "isolate-leader", "halves", "ring", "bridge", "worker-cut"),
    "kill": ("kill-one", "kill-minority", "kill-leader", "kill-all"),
    "pause": ("pause-leader", "pause-worker"),
    "clock": ("clock-jump", "clock-strobe"),
    "client": ("client-chaos",),
    "outage": outage.KINDS,
    "snapshot-kill": ("snapshot-kill",),
    "corrupt": tuple(storage.CORRUPT_FILES),
    "disk-full": ("disk-full",),
    "config-drift": ("config-drift",),
    "membership": membership.KINDS,
    "gateway": ("gateway-kill", "gateway-partition"),
}
FIRST_TIER = ("partition", "kill", "pause", "clock", "client")
SECOND_TIER = ("outage", "snapshot-kill", "corrupt", "disk-full", "config-drift",
               "membership")
GATEWAY_TIER = ("gateway",)
FIVE_ONLY = {"ring", "bridge"}
GATEWAY_KINDS = set(GROUPS["gateway"])
ALL_KINDS = tuple(k for kinds in GROUPS.values() for k in kinds)
# Node flags a kind needs (under the user's --node-flag): snapshots often enough that a run
# sees several, so there is a snapshot file to corrupt and a write to kill.
KIND_NODE_FLAGS = {
    "snapshot-kill": {"snapshot_min_entries": "100", "snapshot_min_time_s": "1"},
    **{k: {"snapshot_min_entries": "200", "snapshot_min_time_s": "2"}
       for k in (*storage.CORRUPT_FILES, *membership.KINDS)},
}
OUTAGE_KINDS = set(outage.KINDS)


def expand(names: tuple[str, ...], nodes: int, gateways: int = 0) -> list[str]:
    """Nemesis names and groups -> fault kinds valid for this cluster size (and gateways)."""
    kinds: list[str] = []
    for name in names:
        if name in ("none", ""):
            continue
        if name in GROUPS:
            kinds += [k for k in GROUPS[name] if nodes >= 5 or k not in FIVE_ONLY]
        elif name in ALL_KINDS:
            if name in FIVE_ONLY and nodes < 5:
                raise ValueError(f"nemesis {name!r} needs 5 nodes")
            kinds.append(name)
        else:
            raise ValueError(f"unknown nemesis {name!r}; groups {sorted(GROUPS)}, "
                             f"kinds {sorted(ALL_KINDS)}")
    wanted = sorted(set(kinds) & GATEWAY_KINDS)
    if wanted and gateways < 1:
        raise ValueError(f"nemesis {', '.join(wanted)} needs gateways: run with --gateways N "
                         "(N >= 1)")
    return list(dict.fromkeys(kinds))


def needs_faketime(kinds: list[str]) -> bool:
    return any(k.startswith("clock") or k == "outage-clock" for k in kinds)


def node_flags_for(kinds: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for kind in kinds:
        out.update(KIND_NODE_FLAGS.get(kind, {}))
    return out


def prepare(opts: TestOptions, kinds: list[str], db: DB, history: History) -> None:
    """What the faults need before the nodes first start: data directories on tmpfs
    (disk-full), per-node configs (config-drift)."""
    if "disk-full" in kinds:
        db.mount_disks(opts.disk_mb)
        history.append(NEMESIS, INFO, "disks", {"tmpfs_mb": opts.disk_mb,
                                                "mounts": [str(n.mount) for n in
                                                           db.nodes.values()]})
    if "config-drift" in kinds:
        drift.prepare(db, random.Random(f"{opts.seed}/config-drift"), history)


@dataclass
class Fault:
    kind: str
    value: dict[str, Any]
    stop: Callable[[], Awaitable[dict[str, Any] | None]]


class Nemesis:
    def __init__(self, ctx: Context, kinds: list[str]):
        self.ctx = ctx
        self.kinds = kinds
        self.rng = ctx.child_rng("nemesis")
        self.active: Fault | None = None
        self.worker_pauses: Counter[str] = Counter()
        self._strobe: asyncio.Task | None = None
        self._order = list(kinds)
        self.rng.shuffle(self._order)
        self._picks: Counter[str] = Counter()

    # -- schedule ----------------------------------------------------------------------------

    async def run(self, deadline: float) -> None:
        """Quiet, fault, quiet, fault... until `deadline` (loop time)."""
        loop = asyncio.get_running_loop()
        opts = self.ctx.opts
        last: str | None = None
        while self.kinds:
            quiet = self.rng.uniform(*(opts.outage_quiet_s if last in OUTAGE_KINDS
                                       else opts.quiet_s))
            if loop.time() + quiet + 1.0 >= deadline:
                break
            await asyncio.sleep(quiet)
            kind = self._order.pop(0) if self._order else self.rng.choice(self.kinds)
            hold = self._duration(kind)
            if loop.time() + hold >= deadline:
                hold = max(1.0, deadline - loop.time() - 0.5)
            fault = await self.start(kind, hold)
            last = kind
            if fault is None:
                continue
            # A start may take a while itself (waiting for a node to refuse a file).
            await asyncio.sleep(max(0.5, min(hold, deadline - loop.time() - 0.5)))
            await self.stop()

    def _duration(self, kind: str) -> float:
        opts = self.ctx.opts
        if kind == "pause-worker":
            # Past the lease TTL, but short enough that the regranted attempt still holds
            # its lease when the paused worker wakes up and reports.
            return opts.lease_ttl_ms / 1000 + self.rng.uniform(1.0, 2.0)
        if kind == "outage-clock":
            # Real seconds; the clock jump makes the outage minutes long to the cluster.
            return self.rng.uniform(*opts.fault_s)
        if kind in OUTAGE_KINDS:
            return self.rng.uniform(*opts.outage_s)
        return self.rng.uniform(*opts.fault_s)

    def pick(self, key: str, count: int) -> int:
        """The i-th pick under `key` out of `count` options: every option once (from a seeded
        start), then round again (corruption modes)."""
        start = random.Random(f"{self.ctx.opts.seed}/{key}").randrange(count)
        i = self._picks[key]
        self._picks[key] += 1
        return (start + i) % count

    async def start(self, kind: str, hold: float) -> Fault | None:
        history = self.ctx.history
        history.append(NEMESIS, INVOKE, "start", {"kind": kind, "hold_s": round(hold, 2)})
        try:
            value, stop = await START[kind](self)
        except Skip as exc:
            history.append(NEMESIS, INFO, "start", {"kind": kind}, error=f"skipped: {exc}")
            return None
        except (NetError, OSError, DiskError) as exc:
            history.append(NEMESIS, FAIL, "start", {"kind": kind}, error=repr(exc))
            return None
        history.append(NEMESIS, OK, "start", {"kind": kind, **value})
        self.active = Fault(kind, value, stop)
        return self.active

    async def stop(self) -> None:
        fault, self.active = self.active, None
        if fault is None:
            return
        history = self.ctx.history
        history.append(NEMESIS, INVOKE, "stop", {"kind": fault.kind})
        try:
            extra = await fault.stop()
            history.append(NEMESIS, OK, "stop", {"kind": fault.kind, **fault.value,
                                                  **(extra or {})})
        except (NetError, OSError, DiskError) as exc:
            history.append(NEMESIS, FAIL, "stop", {"kind": fault.kind}, error=repr(exc))

    async def heal_all(self) -> None:
        """End whatever is going on and undo every possible fault."""
        await self.stop()
        ctx = self.ctx
        ctx.history.append(NEMESIS, INVOKE, "heal", None)
        if self._strobe:
            self._strobe.cancel()
        ctx.chaos = False
        ctx.net.heal()
        for node_id, node in ctx.db.nodes.items():
            if ctx.db.faketime:
                ctx.db.set_clock(node_id, 0)
            if node.paused:
                ctx.db.resume(node_id)
            if not node.alive():
                ctx.db.start(node_id)
        for worker_id, w in ctx.procs.workers.items():
            if w.paused:
                ctx.procs.resume_worker(worker_id)
        if ctx.gateways is not None:
            for name, gw in ctx.gateways.gateways.items():
                if not gw.alive():
                    ctx.gateways.start(name)
        ctx.history.append(NEMESIS, OK, "heal", None)

    # -- helpers -----------------------------------------------------------------------------

    async def leader(self) -> str:
        leader = await self.ctx.db.leader(self.ctx.admin)
        if leader is None:
            raise Skip("no leader known")
        return leader

    def nodes(self) -> list[str]:
        return list(self.ctx.node_ids)

    def gateway_names(self) -> list[str]:
        return list(self.ctx.gateways.gateways) if self.ctx.gateways else []

    async def busiest_gateway(self) -> tuple[str, dict[str, int | None]]:
        """The running gateway holding the most streams (seeded pick among equals), and every
        gateway's count: a fault on a gateway no worker uses would prove little."""
        gws = self.ctx.gateways
        if gws is None:
            raise Skip("no gateways")
        names = sorted(gws.gateways)
        counts = dict(zip(names, await asyncio.gather(*(gws.streams(g) for g in names)),
                          strict=True))
        live = [g for g in names if gws.gateways[g].alive()]
        if not live:
            raise Skip("no gateway running")
        most = max(counts[g] or 0 for g in live)
        return self.rng.choice([g for g in live if (counts[g] or 0) == most]), counts

    async def _partition(self, groups: list[list[str]]) -> tuple[dict, Callable]:
        self.ctx.net.grudge(partition_grudge(groups))
        return {"groups": groups}, self._heal_net

    async def _heal_net(self) -> None:
        self.ctx.net.heal()


# -- partitions ------------------------------------------------------------------------------


async def _isolate_one(n: Nemesis):
    nodes = n.nodes()
    node = n.rng.choice(nodes)
    return await n._partition([[node], [x for x in nodes if x != node]])


async def _isolate_leader(n: Nemesis):
    leader = await n.leader()
    return await n._partition([[leader], [x for x in n.nodes() if x != leader]])


async def _halves(n: Nemesis):
    nodes = n.nodes()
    n.rng.shuffle(nodes)
    half = len(nodes) // 2
    return await n._partition([sorted(nodes[:half]), sorted(nodes[half:])])


async def _ring(n: Nemesis):
    """Every node sees a majority (itself and its ring neighbours), no two the same one."""
    nodes = n.nodes()
    n.rng.shuffle(nodes)
    size = len(nodes)
    grudge = {node: {nodes[(i + k) % size] for k in range(2, size - 1)}
              for i, node in enumerate(nodes)}
    n.ctx.net.grudge(grudge)
    return {"ring": nodes, "grudge": {k: sorted(v) for k, v in grudge.items()}}, n._heal_net


async def _bridge(n: Nemesis):
    """Two halves that only one bridge node connects."""
    nodes = n.nodes()
    n.rng.shuffle(nodes)
    mid = len(nodes) // 2
    left, bridge, right = nodes[:mid], nodes[mid], nodes[mid + 1:]
    grudge = {**{x: set(right) for x in left}, **{x: set(left) for x in right}}
    n.ctx.net.grudge(grudge)
    return {"left": sorted(left), "bridge": bridge, "right": sorted(right)}, n._heal_net


async def _worker_cut(n: Nemesis):
    workers = sorted(n.ctx.procs.workers)
    if not workers:
        raise Skip("no workers")
    worker = n.rng.choice(workers)
    n.ctx.net.drop(worker, n.nodes() + n.gateway_names())
    return {"worker": worker}, n._heal_net


# -- kills -----------------------------------------------------------------------------------


async def _kill(n: Nemesis, victims: list[str]):
    db = n.ctx.db
    for node in victims:
        db.kill(node)
    down = wall_ms()

    async def restart() -> dict[str, Any]:
        up = wall_ms()
        for node in victims:
            db.start(node)
        return {"up_wall_ms": up, "offset_ms": int(db.clock_base_s * 1000)}

    return {"nodes": sorted(victims), "down_wall_ms": down,
            "offset_ms": int(db.clock_base_s * 1000)}, restart


async def _kill_one(n: Nemesis):
    return await _kill(n, [n.rng.choice(n.nodes())])


async def _kill_minority(n: Nemesis):
    nodes = n.nodes()
    return await _kill(n, n.rng.sample(nodes, (len(nodes) - 1) // 2))


async def _kill_leader(n: Nemesis):
    return await _kill(n, [await n.leader()])


async def _kill_all(n: Nemesis):
    return await _kill(n, n.nodes())


# -- gateways --------------------------------------------------------------------------------


async def _gateway_kill(n: Nemesis):
    gateway, streams = await n.busiest_gateway()
    gws = n.ctx.gateways
    assert gws is not None
    gws.kill(gateway)

    async def restart() -> None:
        gws.start(gateway)

    return {"gateway": gateway, "streams": streams}, restart


async def _gateway_partition(n: Nemesis):
    gateway, streams = await n.busiest_gateway()
    # Workers and clients keep their links to it: only its upstream is gone.
    n.ctx.net.grudge(partition_grudge([[gateway], n.nodes()]))
    return {"gateway": gateway, "streams": streams}, n._heal_net


# -- pauses ----------------------------------------------------------------------------------


async def _pause_leader(n: Nemesis):
    leader = await n.leader()
    n.ctx.db.pause(leader)

    async def resume() -> None:
        n.ctx.db.resume(leader)

    return {"node": leader}, resume


async def _pause_worker(n: Nemesis):
    """A worker that holds a lease (the least paused one), stopped past the lease TTL."""
    holders = [w for w in n.ctx.witness.holders() if w in n.ctx.procs.workers]
    if not holders:
        raise Skip("no worker holds a lease")
    fewest = min(n.worker_pauses[w] for w in holders)
    worker = n.rng.choice(sorted(w for w in holders if n.worker_pauses[w] == fewest))
    n.worker_pauses[worker] += 1
    n.ctx.procs.pause_worker(worker)

    async def resume() -> None:
        n.ctx.procs.resume_worker(worker)

    return {"worker": worker, "mode": n.ctx.procs.workers[worker].mode}, resume


# -- clocks ----------------------------------------------------------------------------------


async def _clock_jump(n: Nemesis):
    node = n.rng.choice(n.nodes())
    offset = n.rng.choice((-1, 1)) * round(n.rng.uniform(2.0, 30.0), 1)
    n.ctx.db.set_clock(node, offset)

    async def reset() -> None:
        n.ctx.db.set_clock(node, 0)

    return {"node": node, "offset_s": offset}, reset


async def _clock_strobe(n: Nemesis):
    node = n.rng.choice(n.nodes())
    delta = n.rng.choice((-1, 1)) * round(n.rng.uniform(1.0, 10.0), 1)
    period = round(n.rng.uniform(0.1, 0.5), 2)
    db = n.ctx.db

    async def strobe() -> None:
        on = False
        while True:
            on = not on
            db.set_clock(node, delta if on else 0)
            await asyncio.sleep(period)

    n._strobe = asyncio.create_task(strobe())

    async def reset() -> None:
        if n._strobe:
            n._strobe.cancel()
            n._strobe = None
        db.set_clock(node, 0)

    return {"node": node, "delta_s": delta, "period_s": period}, reset


# -- clients ---------------------------------------------------------------------------------


async def _client_chaos(n: Nemesis):
    n.ctx.chaos = True

    async def calm() -> None:
        n.ctx.chaos = False

    return {}, calm


START: dict[str, StartFn] = {
    "isolate-one": _isolate_one, "isolate-leader": _isolate_leader, "halves": _halves,
    "ring": _ring, "bridge": _bridge, "worker-cut": _worker_cut,
    "kill-one": _kill_one, "kill-minority": _kill_minority, "kill-leader": _kill_leader,
    "kill-all": _kill_all, "pause-leader": _pause_leader, "pause-worker": _pause_worker,
    "clock-jump": _clock_jump, "clock-strobe": _clock_strobe, "client-chaos": _client_chaos,
    "outage-stop": outage.outage_stop, "outage-kill": outage.outage_kill,
    "outage-clock": outage.outage_clock, "snapshot-kill": storage.snapshot_kill,
    **{k: functools.partial(storage.corrupt, kind=k) for k in storage.CORRUPT_FILES},
    "disk-full": storage.disk_full, "config-drift": drift.config_drift,
    "member-replace": membership.member_replace,
    "gateway-kill": _gateway_kill, "gateway-partition": _gateway_partition,
}
