"""The database under test: real `gnomon-node` processes, one per network namespace.

Each node keeps its journal and snapshot under `<run>/<node>/data` across kills and restarts,
and appends its log to `<run>/<node>/node.log`. With clock faults enabled every node runs under
libfaketime, reading its offset from `<run>/<node>/faketime` at every call, so one node's wall
clock can jump or strobe while the others keep real time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnomon.client import AsyncClient, ClusterStatus, GnomonError
from gnomon.jepsen import disk
from gnomon.jepsen.net import Net, libfaketime
from gnomon.node.security.certificates import NodeFiles, ensure_cluster_files

log = logging.getLogger(__name__)

RAFT_PORT = 7801
GRPC_PORT = 7701

# libfaketime with Python 3.11: time.sleep uses clock_nanosleep(TIMER_ABSTIME), which the
# preload breaks (EINVAL); select() with a relative timeout does the same job. Test-only.
SITECUSTOMIZE = '''\
"""gnomon jepsen: loaded only into nodes that run under libfaketime."""
import select
import time


def _sleep(seconds):
    if seconds > 0:
        select.select([], [], [], seconds)


time.sleep = _sleep
'''


@dataclass
class NodeProc:
    node_id: str
    ip: str
    dir: Path
    proc: subprocess.Popen | None = None
    paused: bool = False
    starts: int = 0
    # Set by a nemesis that made this node unable to run (corrupt file, full disk): an exit
    # while it is set is the expected outcome of that fault, not a crash.
    expect_exit: dict[str, Any] | None = None
    # Where the current process's log starts in node.log; every process group ever started.
    log_offset: int = 0
    pgids: list[int] = field(default_factory=list)
    mount: Path | None = None
    exit_noted: bool = False

    @property
    def raft_addr(self) -> str:
        return f"{self.ip}:{RAFT_PORT}"

    @property
    def grpc_addr(self) -> str:
        return f"{self.ip}:{GRPC_PORT}"

    @property
    def member(self) -> str:
        return f"{self.node_id}={self.raft_addr},{self.grpc_addr}"

    @property
    def clock_file(self) -> Path:
        return self.dir / "faketime"

    @property
    def data_dir(self) -> Path:
        return (self.mount or self.dir) / "data"

    @property
    def log_file(self) -> Path:
        return self.dir / "node.log"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class DB:
    run_dir: Path
    net: Net
    node_ids: list[str]
    canaries: tuple[str, ...] = ()
    overrides: dict[str, str] = field(default_factory=dict)
    faketime: bool = False
    nodes: dict[str, NodeProc] = field(default_factory=dict)
    # Per-node flags on top of `overrides` (different local configs).
    node_flags: dict[str, dict[str, str]] = field(default_factory=dict)
    # Flags a fault or the user asked for: config drift does not vary them.
    reserved: frozenset[str] = frozenset()
    # Every process end seen: node, start number, exit code, the fault that expected it.
    exits: list[dict[str, Any]] = field(default_factory=list)
    # Every node's wall clock runs at real time + clock_base_s (+ its own fault offset).
    clock_base_s: float = 0.0
    _tls: dict[str, NodeFiles] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for node_id in self.node_ids:
            self.nodes[node_id] = NodeProc(node_id, self.net.host(node_id).ip,
                                           self.run_dir / node_id)
        if self.faketime:
            site = self.run_dir / "faketime-site"
            site.mkdir(parents=True, exist_ok=True)
            (site / "sitecustomize.py").write_text(SITECUSTOMIZE)

    @property
    def servers(self) -> list[str]:
        return [n.grpc_addr for n in self.nodes.values()]

    def tls_files(self) -> dict[str, NodeFiles]:
        """A throwaway cluster CA and node certificates under the run directory."""
        if not self._tls:
            self._tls.update(ensure_cluster_files(
                self.run_dir / "tls", {n.node_id: [n.ip] for n in self.nodes.values()},
                common_name="gnomon jepsen CA"))
        return self._tls

    # -- processes ---------------------------------------------------------------------------

    def start(self, node_id: str, *, join: bool = False) -> None:
        """Start the node (`join`: a new member, waiting for AddNode; node/raft/DESIGN.md, Membership)."""
        node = self.nodes[node_id]
        self._note_exit(node)
        node.dir.mkdir(parents=True, exist_ok=True)
        args = [*self.net.exec_prefix(node_id), sys.executable, "-m", "gnomon.node.cli",
                "--node-id", node_id, "--data-dir", str(node.data_dir),
                *self.tls_files()[node_id].flags(), *(["--join"] if join else [])]
        for n in self.nodes.values():
            args += ["--member", n.member]
        for key, value in {**self.overrides, **self.node_flags.get(node_id, {})}.items():
            args += ["--" + key.replace("_", "-"), str(value)]
        if self.canaries:
            args += ["--canaries", ",".join(self.canaries)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GNOMON_", "FAKETIME"))}
        env["PYTHONUNBUFFERED"] = "1"
        if self.faketime:
            if not node.clock_file.exists():
                self.set_clock(node_id, 0)
            env.update(self._faketime_env(node, env))
        with open(node.log_file, "ab") as logf:
            logf.write(f"=== start {node.starts + 1}\n".encode())
            logf.flush()
            node.log_offset = logf.tell()
            node.proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        node.pgids.append(node.proc.pid)
        node.exit_noted = False
        node.starts += 1
        node.paused = False

    def _faketime_env(self, node: NodeProc, env: dict[str, str]) -> dict[str, str]:
        return {
            "LD_PRELOAD": libfaketime() or "",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            # Measured: with libfaketime 0.9.10's default monotonic fix, every GIL
            # hand-off between threads can stall for 10-250 ms (pthread_cond_timedwait
            # wrapper): Raft elections flap and commits take seconds. Off, threads hand
            # over in microseconds and clock offsets still apply.
            "FAKETIME_FORCE_MONOTONIC_FIX": "0",
            "FAKETIME_TIMESTAMP_FILE": str(node.clock_file),
            "FAKETIME_NO_CACHE": "1",
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(self.run_dir / "faketime-site"), env.get("PYTHONPATH")) if p),
        }

    def note_exit(self, node_id: str) -> None:
        """Record the end of the node's current process (once), with the fault expecting it."""
        self._note_exit(self.nodes[node_id])

    def _note_exit(self, node: NodeProc) -> None:
        proc = node.proc
        if proc is None or node.exit_noted or proc.poll() is None:
            return
        node.exit_noted = True
        self.exits.append({"node": node.node_id, "start": node.starts,
                           "rc": proc.returncode, "expected": node.expect_exit})

    def start_all(self) -> None:
        for node_id in self.nodes:
            self.start(node_id)

    def kill(self, node_id: str, *, group: bool = True) -> None:
        """kill -9 (the journal is all that survives): the whole process group (the node and
        any child it forked, like a machine crash), or with group=False the main process only."""
        node = self.nodes[node_id]
        if node.alive():
            assert node.proc is not None
            if group:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.proc.pid, signal.SIGKILL)
            else:
                node.proc.send_signal(signal.SIGKILL)
            node.proc.wait(timeout=10)
        self._note_exit(node)
        node.paused = False

    def kill_leftovers(self, node_id: str) -> list[int]:
        """SIGKILL whatever still runs in the node's earlier process groups (orphaned children
        of a killed node); returns their pids."""
        node = self.nodes[node_id]
        live = node.proc.pid if node.alive() and node.proc else None
        killed = []
        for pgid in node.pgids:
            if pgid == live:
                continue
            for pid in disk.group_members(pgid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        return killed

    async def wait_exit(self, node_id: str, timeout_s: float) -> int | None:
        """The node's exit code once its process ended, or None if it still runs after
        `timeout_s` (polled)."""
        node = self.nodes[node_id]
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while node.proc is not None and node.proc.poll() is None and loop.time() < end:
            await asyncio.sleep(0.05)
        if node.proc is None or node.proc.poll() is None:
            return None
        self._note_exit(node)
        return node.proc.returncode

    def log_since_start(self, node_id: str, limit: int = 1 << 20) -> str:
        """What the node's current (or last) process wrote to its log."""
        node = self.nodes[node_id]
        with open(node.log_file, "rb") as f:
            f.seek(node.log_offset)
            return f.read(limit).decode(errors="replace")

    def wipe(self, node_id: str) -> None:
        """Remove the node's data directory (it must not run): a replacement node that the
        leader fills with a snapshot."""
        node = self.nodes[node_id]
        if node.alive():
            raise RuntimeError(f"wipe of running node {node_id}")
        shutil.rmtree(node.data_dir, ignore_errors=True)

    def mount_disks(self, size_mb: int) -> None:
        """Put each node's data directory on its own small tmpfs (before the first start)."""
        for node in self.nodes.values():
            mount = node.dir / "disk"
            disk.mount_tmpfs(mount, size_mb)
            node.mount = mount

    def unmount_disks(self) -> None:
        for node in self.nodes.values():
            if node.mount is not None:
                disk.unmount(node.mount)

    def pause(self, node_id: str) -> None:
        node = self.nodes[node_id]
        if node.alive():
            node.proc.send_signal(signal.SIGSTOP)
            node.paused = True

    def resume(self, node_id: str) -> None:
        node = self.nodes[node_id]
        if node.alive():
            node.proc.send_signal(signal.SIGCONT)
        node.paused = False

    def set_clock(self, node_id: str, offset_s: float) -> None:
        """The node's wall clock becomes real time + clock_base_s + offset_s (libfaketime reads
        the file at every call: FAKETIME_NO_CACHE)."""
        path = self.nodes[node_id].clock_file
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{self.clock_base_s + offset_s:+.3f}\n")
        os.replace(tmp, path)

    def jump_base(self, seconds: float) -> None:
        """Every node's clock moves forward by `seconds`, for the rest of the run."""
        self.clock_base_s += seconds
        for node_id in self.nodes:
            self.set_clock(node_id, 0)

    def stop_all(self) -> None:
        for node in self.nodes.values():
            if node.proc is None:
                continue
            if node.alive():
                node.proc.send_signal(signal.SIGCONT)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.proc.pid, signal.SIGKILL)
            try:
                node.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log.warning("node %s did not die", node.node_id)
            self.kill_leftovers(node.node_id)

    def crashed(self) -> list[str]:
        """Node processes that exited on their own (not killed by the nemesis, not the
        expected end of an injected fault), including ones the heal restarted since."""
        for node in self.nodes.values():
            self._note_exit(node)
        return [f"{e['node']} (exit {e['rc']}, start {e['start']})" for e in self.exits
                if e["rc"] != -signal.SIGKILL and e["expected"] is None]

    # -- observation -------------------------------------------------------------------------

    async def status(self, client: AsyncClient, node_id: str, timeout_s: float = 1.0,
                     include_digest: bool = False) -> ClusterStatus | None:
        node = self.nodes[node_id]
        if not node.alive() or node.paused:
            return None
        try:
            return await client.cluster_status(server=node.grpc_addr, timeout_s=timeout_s,
                                               include_digest=include_digest)
        except GnomonError:
            return None

    async def statuses(self, client: AsyncClient, timeout_s: float = 1.0
                       ) -> dict[str, ClusterStatus]:
        ids = list(self.nodes)
        got = await asyncio.gather(*(self.status(client, i, timeout_s) for i in ids))
        return {i: s for i, s in zip(ids, got, strict=True) if s is not None}

    async def leader(self, client: AsyncClient) -> str | None:
        """The leader most reachable nodes agree on in the highest term seen (None if none)."""
        statuses = await self.statuses(client)
        if not statuses:
            return None
        term = max(s.term for s in statuses.values())
        votes = Counter(s.leader_node_id for s in statuses.values()
                        if s.term == term and s.leader_node_id)
        return votes.most_common(1)[0][0] if votes else None
