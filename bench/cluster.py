"""Local processes the benchmarks run on loopback: a gnomon cluster with per-node metrics endpoints, its logs, and the helpers that find, install, start and stop peers.

Everything runs on this machine and talks to 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from gnomon.bench.report import log
from gnomon.node.local.cluster import LocalCluster, NodeProc, free_ports, stop_process, wait_for
from gnomon.v1 import api_pb2

# Node settings every scenario uses unless it says otherwise (documented in the JSON).
NODE_DEFAULTS: dict[str, str] = {"max_jobs_per_tenant": "2000000"}


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

    def scrape(self, node_id: str, timeout: float = 2.0) -> dict[str, float]:
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
    if proc is not None:
        stop_process(proc, timeout_s)


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
