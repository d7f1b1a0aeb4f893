"""Gateway processes in front of a LocalCluster (tests, bench, gnomon dev): `python -m
gnomon.gateway` as a subprocess; nothing of the gateway is imported here."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gnomon.node.local.cluster import LocalCluster, NodeProc, free_ports, stop_process, wait_for
from gnomon.node.security.certificates import ensure_gateway_files


def gateway_argv(cluster: LocalCluster, listen: str, *, nodes: list[NodeProc] | None = None,
                 http_listen: str = "", metrics_listen: str = "", relay: bool = False) -> list[str]:
    """The command line of a gateway at `listen` in front of `nodes` (default: every node, in
    order); with TLS and the dev CA's serving certificate when the cluster is secure; with
    `relay`, its workers over one relay to the leader, with the cluster's gateway token."""
    nodes = nodes or cluster.nodes
    argv = [sys.executable, "-m", "gnomon.gateway", "--listen", listen,
            "--servers", ",".join(n.grpc_addr for n in nodes)]
    if relay:
        argv += ["--worker-upstream", "relay",
                 "--relay-token-file", str(cluster.gateway_token_file())]
    if http_listen:
        argv += ["--http-listen", http_listen,
                 "--http-servers", ",".join(n.http_addr for n in nodes)]
    if metrics_listen:
        argv += ["--metrics-listen", metrics_listen]
    if cluster.secure:
        cluster.tls_files()
        # A serving certificate of the cluster CA that names no node: it cannot join Raft.
        files = ensure_gateway_files(cluster.root / "tls", "gateway", ["127.0.0.1"])
        argv += ["--tls-cert", str(files.cert), "--tls-key", str(files.key),
                 "--upstream-ca", str(files.ca)]
    return argv


class GatewayProc:
    """One gateway process; `servers` in the order given (a follower first tests redirects)."""

    def __init__(self, cluster: LocalCluster, log: Path, *extra: str,
                 servers: list[str] | None = None, http: bool = False,
                 relay: bool = False) -> None:
        """`servers`: node ids in the order the gateway is given them (default: n1..);
        `relay`: worker streams over the relay (gateway_argv)."""
        self.cluster = cluster
        grpc_port, http_port, metrics_port = free_ports(3)
        self.addr = f"127.0.0.1:{grpc_port}"
        self.http_addr = f"127.0.0.1:{http_port}" if http else ""
        self.metrics_addr = f"127.0.0.1:{metrics_port}"
        self.log = log
        nodes = [cluster.node(i) for i in servers] if servers else None
        argv = [*gateway_argv(cluster, self.addr, nodes=nodes, http_listen=self.http_addr,
                              metrics_listen=self.metrics_addr, relay=relay), *extra]
        self._fh = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, stdout=self._fh, stderr=subprocess.STDOUT)

    @property
    def url(self) -> str:
        return f"{'https' if self.cluster.secure else 'http'}://{self.http_addr}"

    def channel(self) -> grpc.Channel:
        if not self.cluster.secure:
            return grpc.insecure_channel(self.addr)
        with open(self.cluster.client_tls()["ca_file"], "rb") as fh:
            return grpc.secure_channel(self.addr, grpc.ssl_channel_credentials(fh.read()))

    def wait_serving(self, timeout_s: float = 30) -> GatewayProc:
        request = health_pb2.HealthCheckRequest(service="gnomon.v1.JobService")
        with self.channel() as channel:
            stub: Any = health_pb2_grpc.HealthStub(channel)  # its stub types lack Check

            def serving() -> bool:
                assert self.proc.poll() is None, self.log.read_text()[-3000:]
                try:
                    answer = stub.Check(request, timeout=1)
                except grpc.RpcError:
                    return False
                return answer.status == health_pb2.HealthCheckResponse.SERVING

            wait_for(serving, timeout_s=timeout_s, what=f"gateway {self.addr} serving")
        return self

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        code = stop_process(self.proc)
        self._fh.close()
        return code
