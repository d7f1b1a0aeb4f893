"""Storage faults on one node: a corrupt or truncated file, a full disk, a kill -9 while a
snapshot file is being written.

    corrupt-snapshot  kill one node, damage snapshot.lmdb, restart it: it must exit non-zero
    corrupt-journal   naming the file (modes in disk.MODES); the others carry on. Stop: wipe
    corrupt-meta      its data directory and restart it (the leader sends it a snapshot).
    disk-full         fill the tmpfs under one node's data directory: it must exit non-zero.
                      Stop: free the space, restart it.
    snapshot-kill     kill -9 the first node whose data directory gets a snapshot temp file
                      (inotify on every running node), or one after a bounded wait. Stop:
                      restart it.

Every node exit these faults cause is marked expected on the node (`NodeProc.expect_exit`);
any other exit stays a crash. The start event carries the evidence (exit code, the log line
naming the file, bytes written, whether a temp file existed when the node died).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gnomon.jepsen import disk
from gnomon.jepsen.fault import Skip, Started, await_refusal, last_lines, wait_rejoined

if TYPE_CHECKING:
    from gnomon.jepsen.nemesis import Nemesis

CORRUPT_FILES = {"corrupt-snapshot": disk.SNAPSHOT, "corrupt-journal": disk.JOURNAL,
                 "corrupt-meta": disk.META}
# Snapshot temp files: pysyncobj's `snapshot.lmdb.tmp` (and `.1.tmp` for one received from
# the leader), or whatever a forked writer names its file, as long as it starts so.
SNAPSHOT_TMP = r"^snapshot.*tmp"
SNAPSHOT_WAIT_S = 15.0
ORPHAN_WAIT_S = 10.0
DISK_EXIT_S = 20.0
NO_SPACE = re.compile(r"No space left|ENOSPC|Errno 28|MDB_MAP_FULL|disk full", re.I)


def _live_nodes(n: Nemesis) -> list[str]:
    return [i for i in n.nodes() if n.ctx.db.nodes[i].alive() and not n.ctx.db.nodes[i].paused]


# -- corrupt ---------------------------------------------------------------------------------


async def corrupt(n: Nemesis, kind: str) -> Started:
    """Kill a node, damage one of its files at a seeded offset, restart it and see it refuse."""
    db = n.ctx.db
    file_name = CORRUPT_FILES[kind]
    nodes = n.nodes()
    node_id = nodes[n.pick("node", len(nodes))]
    node = db.nodes[node_id]
    path = node.data_dir / file_name
    modes = sorted(disk.MODES[file_name])
    mode = modes[n.pick(kind, len(modes))]
    if not path.exists():
        raise Skip(f"{node_id} has no {file_name} yet")
    db.kill(node_id)
    try:
        done = disk.corrupt(path, mode, n.rng)
    except disk.DiskError as exc:
        db.start(node_id)
        raise Skip(str(exc)) from None
    expect = disk.MODES[file_name][mode]
    node.expect_exit = {"fault": kind, "file": file_name, "mode": mode}
    db.start(node_id)
    outcome = await await_refusal(n, node_id, file_name)

    async def heal() -> dict[str, Any]:
        db.kill(node_id)
        db.note_exit(node_id)
        node.expect_exit = None
        db.wipe(node_id)
        db.start(node_id)
        return await wait_rejoined(n, node_id)

    return {"node": node_id, **done, "expect": expect, **outcome}, heal


# -- disk full -------------------------------------------------------------------------------


async def disk_full(n: Nemesis) -> Started:
    """Fill one node's tmpfs and wait (bounded) for the node to stop."""
    db = n.ctx.db
    candidates = [i for i in _live_nodes(n) if db.nodes[i].mount is not None]
    if not candidates:
        raise Skip("no running node with its data on a tmpfs")
    node_id = candidates[n.pick("node", len(candidates)) % len(candidates)]
    node = db.nodes[node_id]
    assert node.mount is not None
    filler = node.mount / "filler"
    node.expect_exit = {"fault": "disk-full", "file": None}
    filled = await asyncio.to_thread(disk.fill, filler)
    rc = await db.wait_exit(node_id, DISK_EXIT_S)
    text = db.log_since_start(node_id)
    line = next((ln.strip()[:400] for ln in text.splitlines() if NO_SPACE.search(ln)), None)

    async def heal() -> dict[str, Any]:
        filler.unlink(missing_ok=True)
        free = disk.free_bytes(node.mount)
        db.note_exit(node_id)
        node.expect_exit = None
        if not node.alive():
            db.start(node_id)
        return {"freed_to_bytes": free, **await wait_rejoined(n, node_id)}

    return {"node": node_id, **filled, "rc": rc, "stopped": rc not in (None, 0),
            "no_space_line": line, "log_tail": last_lines(text)}, heal


# -- kill during a snapshot write ------------------------------------------------------------


async def snapshot_kill(n: Nemesis) -> Started:
    """kill -9 the first node that creates a snapshot temp file (every running node watched;
    bounded wait, else one of them at a random moment). Group mode kills the node with any
    forked writer; parent mode kills the main process only and lets an orphaned writer finish
    (bounded) before the restart."""
    db = n.ctx.db
    candidates = _live_nodes(n)
    if not candidates:
        raise Skip("no running node")
    group = n.rng.random() >= 0.25
    fallback = candidates[n.pick("node", len(candidates)) % len(candidates)]
    killed: list[str] = []
    lock = threading.Lock()

    def killer(node_id: str, pid: int) -> Callable[[str], None]:
        def kill(_name: str) -> None:
            with lock:
                if killed:
                    return
                killed.append(node_id)
                with contextlib.suppress(ProcessLookupError):
                    if group:
                        os.killpg(pid, signal.SIGKILL)
                    else:
                        os.kill(pid, signal.SIGKILL)
        return kill

    watches = {i: disk.CreateWatch(db.nodes[i].data_dir, SNAPSHOT_TMP,
                                   killer(i, db.nodes[i].proc.pid)) for i in candidates}
    try:
        loop = asyncio.get_running_loop()
        end = loop.time() + SNAPSHOT_WAIT_S
        while not killed and loop.time() < end:
            await asyncio.sleep(0.02)
    finally:
        for w in watches.values():
            w.close()
    with lock:
        node_id = killed[0] if killed else fallback
        killed.append(node_id)
    hit = watches[node_id].hit
    pid = db.nodes[node_id].proc.pid
    db.kill(node_id, group=group)
    at_death = _snapshot_files(db.nodes[node_id].data_dir)
    value: dict[str, Any] = {
        "node": node_id, "mode": "group" if group else "parent",
        "trigger": "inotify" if hit else "timeout", "tmp_file": hit.name if hit else None,
        "files_at_death": at_death,
        "hit": bool(hit) and any(re.search(SNAPSHOT_TMP, f) for f in at_death)}
    if not group:
        value.update(await _orphans(n, node_id, pid))

    async def restart() -> dict[str, Any]:
        db.kill_leftovers(node_id)
        db.start(node_id)
        return await wait_rejoined(n, node_id)

    return value, restart


def _snapshot_files(data_dir: Path) -> dict[str, int]:
    out = {}
    for name in sorted(os.listdir(data_dir)) if data_dir.exists() else ():
        if name.startswith("snapshot"):
            try:
                out[name] = os.path.getsize(data_dir / name)
            except OSError:
                continue
    return out


async def _orphans(n: Nemesis, node_id: str, pgid: int) -> dict[str, Any]:
    """Children of the killed main process: wait (bounded) for them to finish, then kill."""
    seen = disk.group_members(pgid)
    loop = asyncio.get_running_loop()
    end = loop.time() + ORPHAN_WAIT_S
    while disk.group_members(pgid) and loop.time() < end:
        await asyncio.sleep(0.05)
    left = disk.group_members(pgid)
    n.ctx.db.kill_leftovers(node_id)
    return {"orphans": len(seen), "orphans_killed": len(left),
            "files_after_orphans": _snapshot_files(n.ctx.db.nodes[node_id].data_dir)}
