"""The database under test: real `gnomon-node` processes, one per network namespace.

Each node keeps its journal and snapshot under `<run>/<node>/data` across kills and restarts,
and appends its log to `<run>/<node>/node.log`. With clock faults enabled every node runs under
libfaketime, reading its offset from `<run>/<node>/faketime` at every call, so one node's wall
clock can jump or strobe while the others keep real time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from gnomon.client import AsyncClient, ClusterStatus, GnomonError
from gnomon.jepsen.net import Net, libfaketime

log = logging.getLogger(__name__)

RAFT_PORT = 7801
GRPC_PORT = 7701
SECRET = "jepsen-cluster-secret"

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

    # -- processes ---------------------------------------------------------------------------

    def start(self, node_id: str) -> None:
        node = self.nodes[node_id]
        node.dir.mkdir(parents=True, exist_ok=True)
        args = [*self.net.exec_prefix(node_id), sys.executable, "-m", "gnomon.node.cli",
                "--node-id", node_id, "--data-dir", str(node.dir / "data"),
                "--cluster-secret", SECRET]
        for n in self.nodes.values():
            args += ["--member", n.member]
        for key, value in self.overrides.items():
            args += ["--" + key.replace("_", "-"), str(value)]
        if self.canaries:
            args += ["--canaries", ",".join(self.canaries)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GNOMON_", "FAKETIME"))}
        env["PYTHONUNBUFFERED"] = "1"
        if self.faketime:
            if not node.clock_file.exists():
                node.clock_file.write_text("+0\n")
            env.update(
                LD_PRELOAD=libfaketime() or "",
                FAKETIME_DONT_FAKE_MONOTONIC="1",
                # Measured: with libfaketime 0.9.10's default monotonic fix, every GIL
                # hand-off between threads can stall for 10-250 ms (pthread_cond_timedwait
                # wrapper): Raft elections flap and commits take seconds. Off, threads hand
                # over in microseconds and clock offsets still apply.
                FAKETIME_FORCE_MONOTONIC_FIX="0",
                FAKETIME_TIMESTAMP_FILE=str(node.clock_file),
                FAKETIME_NO_CACHE="1",
                PYTHONPATH=os.pathsep.join(
                    p for p in (str(self.run_dir / "faketime-site"), env.get("PYTHONPATH"))
                    if p),
            )
        with open(node.dir / "node.log", "ab") as logf:
            logf.write(f"=== start {node.starts + 1}\n".encode())
            logf.flush()
            node.proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        node.starts += 1
        node.paused = False

    def start_all(self) -> None:
        for node_id in self.nodes:
            self.start(node_id)

    def kill(self, node_id: str) -> None:
        """kill -9 (the journal is all that survives)."""
        node = self.nodes[node_id]
        if node.alive():
            node.proc.send_signal(signal.SIGKILL)
            node.proc.wait(timeout=10)
        node.paused = False

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
        """The node's wall clock becomes real time + offset_s (libfaketime reads the file at
        every call: FAKETIME_NO_CACHE)."""
        path = self.nodes[node_id].clock_file
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{offset_s:+.3f}\n")
        os.replace(tmp, path)

    def stop_all(self) -> None:
        for node in self.nodes.values():
            if node.proc is None:
                continue
            if node.alive():
                node.proc.send_signal(signal.SIGCONT)
                node.proc.send_signal(signal.SIGKILL)
            try:
                node.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log.warning("node %s did not die", node.node_id)

    def crashed(self) -> list[str]:
        """Nodes whose process exited on its own (not killed by the nemesis)."""
        out = []
        for node in self.nodes.values():
            rc = node.proc.poll() if node.proc else None
            if rc is not None and rc != -signal.SIGKILL:
                out.append(f"{node.node_id} (exit {rc})")
        return out

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
