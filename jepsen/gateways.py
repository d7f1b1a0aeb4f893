"""Gateways beside the nodes: `gnomon-gateway` processes, one per network namespace.

Gateway g1.. listens at 10.77.0.51..:7700 in its own namespace (`gj-g1`), in front of every
node, so a partition can cut it off from the nodes while workers and clients still reach it.
Its Prometheus port (:9700, same address) tells the nemesis how many streams it holds. The
nodes run without authentication, so the relay's token file holds any word (the gateway
requires one with `--worker-upstream relay`; gateway/DESIGN.md, The relay).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc.aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gnomon.jepsen.net import SUBNET, Net

GRPC_PORT = 7700
METRICS_PORT = 9700
FIRST_IP = 51
STREAMS = re.compile(r"^gnomon_gateway_streams (\S+)$", re.M)


def gateway_hosts(count: int) -> list[tuple[str, str]]:
    """(name, ip) of each gateway: g1 at 10.77.0.51, ..."""
    return [(f"g{i + 1}", f"{SUBNET}.{FIRST_IP + i}") for i in range(count)]


@dataclass
class GatewayProc:
    name: str
    ip: str
    proc: subprocess.Popen | None = None
    starts: int = 0

    @property
    def addr(self) -> str:
        return f"{self.ip}:{GRPC_PORT}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.ip}:{METRICS_PORT}/metrics"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class Gateways:
    run_dir: Path
    net: Net
    names: list[str]
    servers: list[str]
    relay: bool = False
    gateways: dict[str, GatewayProc] = field(default_factory=dict)
    # Every process end seen: gateway, start number, exit code.
    exits: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in self.names:
            self.gateways[name] = GatewayProc(name, self.net.host(name).ip)

    @property
    def addrs(self) -> list[str]:
        return [g.addr for g in self.gateways.values()]

    def token_file(self) -> Path:
        """The relay's token (0600); any word does against nodes without authentication."""
        path = self.run_dir / "gateway.token"
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(32) + "\n")
        return path

    def argv(self, gw: GatewayProc) -> list[str]:
        argv = [*self.net.exec_prefix(gw.name), sys.executable, "-m", "gnomon.gateway",
                "--listen", gw.addr, "--servers", ",".join(self.servers),
                "--metrics-listen", f"{gw.ip}:{METRICS_PORT}"]
        if self.relay:
            argv += ["--worker-upstream", "relay", "--relay-token-file", str(self.token_file())]
        return argv

    def start(self, name: str) -> None:
        gw = self.gateways[name]
        self._note_exit(gw)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GNOMON_", "FAKETIME", "LD_PRELOAD"))}
        env["PYTHONUNBUFFERED"] = "1"
        with open(self.run_dir / f"{name}.log", "ab") as logf:
            logf.write(f"=== start {gw.starts + 1}\n".encode())
            logf.flush()
            gw.proc = subprocess.Popen(self.argv(gw), stdout=logf, stderr=subprocess.STDOUT,
                                       env=env, start_new_session=True)
        gw.starts += 1

    def start_all(self) -> None:
        for name in self.gateways:
            self.start(name)

    def kill(self, name: str) -> None:
        """kill -9 of the gateway's process group."""
        gw = self.gateways[name]
        if gw.alive():
            assert gw.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(gw.proc.pid, signal.SIGKILL)
            gw.proc.wait(timeout=10)
        self._note_exit(gw)

    def stop_all(self) -> None:
        for name in self.gateways:
            self.kill(name)

    def _note_exit(self, gw: GatewayProc) -> None:
        proc = gw.proc
        if proc is None or proc.poll() is None or any(
                e["gateway"] == gw.name and e["start"] == gw.starts for e in self.exits):
            return
        self.exits.append({"gateway": gw.name, "start": gw.starts, "rc": proc.returncode})

    def crashed(self) -> list[str]:
        """Gateway processes that exited on their own (not by our SIGKILL)."""
        for gw in self.gateways.values():
            self._note_exit(gw)
        return [f"{e['gateway']} (exit {e['rc']}, start {e['start']})" for e in self.exits
                if e["rc"] != -signal.SIGKILL]

    # -- observation -------------------------------------------------------------------------

    async def serving(self, name: str, timeout_s: float = 1.0) -> bool:
        """Whether the gateway's health service says JobService serves (it has a leader)."""
        request = health_pb2.HealthCheckRequest(service="gnomon.v1.JobService")
        try:
            async with grpc.aio.insecure_channel(self.gateways[name].addr) as channel:
                stub: Any = health_pb2_grpc.HealthStub(channel)
                answer = await stub.Check(request, timeout=timeout_s)
        except grpc.aio.AioRpcError:
            return False
        return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)

    async def streams(self, name: str) -> int | None:
        """Streams the gateway holds now (its metrics), None if it does not answer."""
        gw = self.gateways[name]
        if not gw.alive():
            return None
        try:
            text = await asyncio.to_thread(_fetch, gw.metrics_url)
        except OSError:
            return None
        found = STREAMS.search(text)
        return int(float(found.group(1))) if found else None


def _fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=1.0) as resp:
        return str(resp.read().decode())
