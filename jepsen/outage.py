"""Whole-cluster outages, long next to the schedules, then catch-up.

    outage-stop   SIGSTOP every node (8-15 s; the fast jobs fire every 1-5 s), then SIGCONT
    outage-kill   kill -9 every node, restart them all at the stop
    outage-clock  SIGSTOP every node, and at the stop move every node's clock forward by
                  minutes (for the rest of the run) before SIGCONT: to the cluster the outage
                  lasted minutes

Each start records `down_wall_ms` (real time after the last node stopped) and each stop
`up_wall_ms` (real time before the first node came back) and `offset_ms`, every node's clock
offset then: the schedule checker knows that no fire was decided between the two, so a slot
due in between was at least `up - slot` late when it fired.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from gnomon.jepsen import disk
from gnomon.jepsen.fault import Started, wall_ms

if TYPE_CHECKING:
    from gnomon.jepsen.nemesis import Nemesis

KINDS = ("outage-stop", "outage-kill", "outage-clock")
STOP_SEEN_S = 2.0


def _offset_ms(n: Nemesis) -> int:
    return int(n.ctx.db.clock_base_s * 1000)


def _stopped(n: Nemesis) -> list[str]:
    db = n.ctx.db
    return sorted(i for i in n.nodes() if db.nodes[i].proc is not None
                  and disk.process_state(db.nodes[i].proc.pid) == "T")


async def _pause_all(n: Nemesis) -> dict[str, Any]:
    """SIGSTOP every node; `down_wall_ms` once all of them are seen stopped (bounded)."""
    db = n.ctx.db
    for node_id in n.nodes():
        db.pause(node_id)
    loop = asyncio.get_running_loop()
    end = loop.time() + STOP_SEEN_S
    while len(_stopped(n)) < len(n.nodes()) and loop.time() < end:
        await asyncio.sleep(0.005)
    return {"nodes": n.nodes(), "down_wall_ms": wall_ms(), "offset_ms": _offset_ms(n),
            "stopped": _stopped(n)}


def _resume_all(n: Nemesis) -> dict[str, Any]:
    up = wall_ms()
    for node_id in n.nodes():
        n.ctx.db.resume(node_id)
    return {"up_wall_ms": up, "offset_ms": _offset_ms(n)}


async def outage_stop(n: Nemesis) -> Started:
    """SIGSTOP every node; SIGCONT at the stop."""
    value = await _pause_all(n)

    async def resume() -> dict[str, Any]:
        return _resume_all(n)

    return value, resume


async def outage_kill(n: Nemesis) -> Started:
    """kill -9 every node; restart them all at the stop."""
    db = n.ctx.db
    for node_id in n.nodes():
        db.kill(node_id)
    value = {"nodes": n.nodes(), "down_wall_ms": wall_ms(), "offset_ms": _offset_ms(n),
             "stopped": sorted(i for i in n.nodes() if not db.nodes[i].alive())}

    async def restart() -> dict[str, Any]:
        up = wall_ms()
        for node_id in n.nodes():
            db.start(node_id)
        return {"up_wall_ms": up, "offset_ms": _offset_ms(n)}

    return value, restart


async def outage_clock(n: Nemesis) -> Started:
    """SIGSTOP every node; at the stop every clock jumps forward (for good), then SIGCONT."""
    jump_s = round(n.rng.uniform(*n.ctx.opts.outage_jump_s), 1)
    value = {**await _pause_all(n), "jump_s": jump_s}

    async def jump_and_resume() -> dict[str, Any]:
        db = n.ctx.db
        db.jump_base(jump_s)
        files = {i: db.nodes[i].clock_file.read_text().strip() for i in n.nodes()}
        return {**_resume_all(n), "jump_s": jump_s, "clock_files": files}

    return value, jump_and_resume
