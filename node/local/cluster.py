"""A local cluster of real gnomon-node processes on 127.0.0.1 (tests, bench, `gnomon dev`)."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import grpc

from gnomon.node.security.certificates import NodeFiles, ensure_cluster_files
from gnomon.v1 import api_pb2, api_pb2_grpc, worker_pb2_grpc

T = TypeVar("T")

def stop_process(proc: subprocess.Popen, timeout_s: float = 20.0) -> int:
    """SIGTERM, then SIGKILL after `timeout_s`; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def wait_for(predicate: Callable[[], T | None], *, timeout_s: float, what: str,
             interval_s: float = 0.05) -> T:
    """Poll until predicate returns a truthy value, or fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    last_exc: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except grpc.RpcError as exc:
            last_exc = exc
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last error: {last_exc})")


async def wait_for_async(predicate: Callable[[], T | None], *, timeout_s: float, what: str,
                         interval_s: float = 0.001) -> T:
    """`wait_for` on an event loop: poll `predicate` every `interval_s` (it must not block)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(interval_s)


@dataclass
class NodeProc:
    node_id: str
    raft_addr: str
    grpc_addr: str
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen | None = None
    channel: grpc.Channel | None = None
    # "127.0.0.1:port" of /metrics when the cluster was made with metrics=True.
    metrics_addr: str = ""
    # "127.0.0.1:port" of the HTTP API and dashboard (node/api/http) when made with http=True.
    http_addr: str = ""
    # TLS (and the admin's identity) of the gRPC port when the cluster is secure.
    credentials: grpc.ChannelCredentials | None = None

    @property
    def member(self) -> str:
        http = f",{self.http_addr}" if self.http_addr else ""
        return f"{self.node_id}={self.raft_addr},{self.grpc_addr}{http}"

    @property
    def url(self) -> str:
        """The base URL of this node's HTTP API and dashboard (https on a secure cluster:
        the HTTP port uses the gRPC port's TLS)."""
        return f"{'https' if self.credentials is not None else 'http'}://{self.http_addr}"

    def jobs(self) -> api_pb2_grpc.JobServiceStub:
        return api_pb2_grpc.JobServiceStub(self._channel())

    def cluster(self) -> api_pb2_grpc.ClusterServiceStub:
        return api_pb2_grpc.ClusterServiceStub(self._channel())

    def workers(self) -> worker_pb2_grpc.WorkerServiceStub:
        return worker_pb2_grpc.WorkerServiceStub(self._channel())

    def access(self) -> api_pb2_grpc.AccessServiceStub:
        return api_pb2_grpc.AccessServiceStub(self._channel())

    def operations(self) -> api_pb2_grpc.OperationsServiceStub:
        return api_pb2_grpc.OperationsServiceStub(self._channel())

    def _channel(self) -> grpc.Channel:
        if self.channel is None:
            if self.credentials is not None:
                self.channel = grpc.secure_channel(self.grpc_addr, self.credentials)
            else:
                self.channel = grpc.insecure_channel(self.grpc_addr)
        return self.channel

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None



def _write_secret(path: Path, secret: str) -> None:
    """`secret` in a new file readable by its owner only (0600 whatever the umask)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secret + "\n")

@dataclass
class LocalCluster:
    root: Path
    size: int = 3
    overrides: dict[str, str] = field(default_factory=dict)
    nodes: list[NodeProc] = field(default_factory=list)
    # Extra environment of every node process (e.g. LD_PRELOAD of libfaketime in tests).
    env: dict[str, str] = field(default_factory=dict)
    # Give every node a /metrics port (NodeProc.metrics_addr).
    metrics: bool = False
    # Give every node an HTTP API and dashboard port (NodeProc.http_addr, NodeProc.url).
    http: bool = False
    # Mutual TLS and authentication on the gRPC port too (clients need `client_tls()` and
    # `admin_token()`, or a token made with it).
    secure: bool = False
    # With `secure`: clients must present a certificate of the cluster CA (mutual TLS).
    mutual_tls: bool = True
    _tls: dict[str, NodeFiles] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._place_nodes()
        if self.secure:
            self._secure_clients()

    def _place_nodes(self) -> None:
        """Each node's ports and paths (free ports on 127.0.0.1)."""
        ports = free_ports(2 * self.size)
        for i in range(self.size):
            node_id = f"n{i + 1}"
            self.nodes.append(NodeProc(
                node_id, f"127.0.0.1:{ports[2 * i]}", f"127.0.0.1:{ports[2 * i + 1]}",
                self.root / node_id, self.root / f"{node_id}.log",
            ))
        if self.metrics:
            for node, port in zip(self.nodes, free_ports(self.size), strict=True):
                node.metrics_addr = f"127.0.0.1:{port}"
        if self.http:
            for node, port in zip(self.nodes, free_ports(self.size), strict=True):
                node.http_addr = f"127.0.0.1:{port}"

    def _secure_clients(self) -> None:
        """Every node's channel speaks TLS with the cluster CA and carries the admin token."""
        client = self.client_tls()
        files = [Path(client[k]).read_bytes() if k in client else None
                 for k in ("ca_file", "key_file", "cert_file")]
        creds = grpc.composite_channel_credentials(
            grpc.ssl_channel_credentials(*files),
            grpc.access_token_call_credentials(self.admin_token()))
        for node in self.nodes:
            node.credentials = creds

    def admin_token(self) -> str:
        """The bootstrap admin token of a secure cluster (`root/tls/admin.token`, 0600)."""
        path = self.root / "tls" / "admin.token"
        if not path.exists():
            _write_secret(path, secrets.token_urlsafe(32))
        return path.read_text().strip()

    def gateway_token_file(self) -> Path:
        """A file (0600) holding a `gateway` token for gateways' relays, made once with the
        admin token on the leader. Without `secure` the nodes authenticate nobody: any word
        does, and the file holds one."""
        path = self.root / "tls" / "gateway.token"
        if path.exists():
            return path
        secret = secrets.token_urlsafe(32)
        if self.secure:
            request = api_pb2.CreateTokenRequest(request_id=secrets.token_hex(8),
                                                 name="local-gateway", role="gateway")
            secret = self.leader().access().CreateToken(request, timeout=20).secret
        _write_secret(path, secret)
        return path

    def client_tls(self) -> dict[str, str]:
        """TLSConfig fields for a client of a secure cluster: the CA and a client certificate
        (the first node's: it carries clientAuth)."""
        files = self.tls_files()[self.nodes[0].node_id]
        if not self.mutual_tls:
            return {"ca_file": str(files.ca)}
        return {"ca_file": str(files.ca), "cert_file": str(files.cert),
                "key_file": str(files.key)}

    def tls_files(self) -> dict[str, NodeFiles]:
        """The cluster CA and each node's certificate under `root/tls` (made once, reused)."""
        if self._tls is None:
            self._tls = ensure_cluster_files(
                self.root / "tls", {n.node_id: [n.raft_addr.rsplit(":", 1)[0]]
                                    for n in self.nodes})
        return self._tls

    @property
    def servers(self) -> str:
        """Every node's gRPC address, comma-separated (what clients and the CLI take)."""
        return ",".join(n.grpc_addr for n in self.nodes)

    def start(self) -> LocalCluster:
        for node in self.nodes:
            self.start_node(node.node_id)
        return self

    def node(self, node_id: str) -> NodeProc:
        return next(n for n in self.nodes if n.node_id == node_id)

    def new_node(self, node_id: str) -> NodeProc:
        """A node that is no member yet (ports, data directory, certificate): start it with
        `start_node(node_id, join=True)`, then add it (`gnomon cluster add-node`)."""
        if any(n.node_id == node_id for n in self.nodes):
            raise ValueError(f"{node_id} exists")
        raft, grpc_port, metrics_port, http_port = free_ports(4)
        node = NodeProc(node_id, f"127.0.0.1:{raft}", f"127.0.0.1:{grpc_port}",
                        self.root / node_id, self.root / f"{node_id}.log",
                        metrics_addr=f"127.0.0.1:{metrics_port}" if self.metrics else "",
                        http_addr=f"127.0.0.1:{http_port}" if self.http else "",
                        credentials=self.nodes[0].credentials if self.nodes else None)
        self.nodes.append(node)
        self._tls = None  # issue the new node's certificate (the others are reused)
        return node

    def forget(self, node_id: str) -> None:
        """Stop a node and drop it from this cluster's list (after `cluster remove-node`)."""
        self.kill(node_id, sig=signal.SIGTERM)
        self.nodes = [n for n in self.nodes if n.node_id != node_id]

    def start_node(self, node_id: str, *, join: bool = False) -> None:
        node = self.node(node_id)
        args = [sys.executable, "-m", "gnomon.node.cli", "--node-id", node.node_id,
                "--data-dir", str(node.data_dir), *self.tls_files()[node.node_id].flags()]
        if join:
            args.append("--join")
        for n in self.nodes:
            args += ["--member", n.member]
        if node.metrics_addr:
            args += ["--metrics-addr", node.metrics_addr]
        if node.http_addr:
            args += ["--http-addr", node.http_addr]
        if self.secure:
            files = self.tls_files()[node.node_id]
            self.admin_token()
            args += ["--tls-cert", str(files.cert), "--tls-key", str(files.key),
                     "--admin-token-file", str(self.root / "tls" / "admin.token")]
            if self.mutual_tls:
                args += ["--tls-client-ca", str(files.ca)]
        for key, value in self.overrides.items():
            args += ["--" + key.replace("_", "-"), str(value)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("GNOMON_")}
        env.update(self.env)
        node.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(node.log_path, "ab")  # noqa: SIM115 - owned by the child
        node.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()

    def kill(self, node_id: str, sig: int = signal.SIGKILL) -> None:
        node = self.node(node_id)
        if node.alive():
            assert node.proc is not None  # alive: started
            node.proc.send_signal(sig)
            node.proc.wait(timeout=30)
        if node.channel is not None:
            node.channel.close()
            node.channel = None

    def stop(self) -> None:
        for node in self.nodes:
            if node.alive():
                assert node.proc is not None  # alive: started
                node.proc.send_signal(signal.SIGTERM)
        for node in self.nodes:
            if node.proc is not None:
                try:
                    node.proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    node.proc.wait()
            if node.channel is not None:
                node.channel.close()
                node.channel = None

    def status(self, node: NodeProc, include_digest: bool = True) -> api_pb2.GetStatusResponse:
        return node.cluster().GetStatus(api_pb2.GetStatusRequest(include_digest=include_digest),
                                        timeout=2)

    def leader(self, timeout_s: float = 30.0, exclude: Set[str] = frozenset()) -> NodeProc:
        """The node that leads and accepts writes (its barrier committed)."""

        def probe() -> NodeProc | None:
            for node in self.nodes:
                if not node.alive() or node.node_id in exclude:
                    continue
                try:
                    node.jobs().ListJobs(api_pb2.ListJobsRequest(limit=1), timeout=2)
                    return node
                except grpc.RpcError:
                    continue
            return None

        return wait_for(probe, timeout_s=timeout_s, what="a leader accepting writes")

    def logs(self) -> str:
        return "\n".join(f"--- {n.node_id} ---\n" + n.log_path.read_text(errors="replace")[-4000:]
                         for n in self.nodes if n.log_path.exists())

