"""Gateway processes for the tests: `python -m gnomon.gateway` in front of a LocalCluster."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gnomon.node.local.cluster import LocalCluster, free_ports, wait_for
from gnomon.node.security.certificates import ensure_gateway_files


def gateway_certificate(cluster: LocalCluster) -> tuple[str, str]:
    """The gateway's serving certificate from the cluster CA: (cert, key) paths."""
    cluster.tls_files()
    files = ensure_gateway_files(cluster.root / "tls", "gateway", ["127.0.0.1"])
    return str(files.cert), str(files.key)


class GatewayProc:
    """One gateway process; `servers` in the order given (a follower first tests redirects)."""

    def __init__(self, cluster: LocalCluster, log: Path, *extra: str,
                 servers: list[str] | None = None, http: bool = False) -> None:
        """`servers`: node ids in the order the gateway is given them (default: n1..)."""
        self.cluster = cluster
        grpc_port, http_port, metrics_port = free_ports(3)
        self.addr = f"127.0.0.1:{grpc_port}"
        self.http_addr = f"127.0.0.1:{http_port}" if http else ""
        self.metrics_addr = f"127.0.0.1:{metrics_port}"
        self.log = log
        nodes = [cluster.node(i) for i in servers] if servers else cluster.nodes
        argv = [sys.executable, "-m", "gnomon.gateway", "--listen", self.addr,
                "--servers", ",".join(n.grpc_addr for n in nodes),
                "--metrics-listen", self.metrics_addr, *extra]
        if http:
            argv += ["--http-listen", self.http_addr,
                     "--http-servers", ",".join(n.http_addr for n in nodes)]
        if cluster.secure:
            cert, key = gateway_certificate(cluster)
            argv += ["--tls-cert", cert, "--tls-key", key,
                     "--upstream-ca", cluster.client_tls()["ca_file"]]
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
            stub = health_pb2_grpc.HealthStub(channel)

            def serving() -> bool:
                assert self.proc.poll() is None, self.log.read_text()[-3000:]
                try:
                    answer = stub.Check(request, timeout=1)
                except grpc.RpcError:
                    return False
                return answer.status == health_pb2.HealthCheckResponse.SERVING

            wait_for(serving, timeout_s=timeout_s, what=f"gateway {self.addr} serving")
        return self

    def metric(self, name: str, **labels: str) -> float:
        """One sample of the gateway's /metrics (0 when absent)."""
        from urllib.request import urlopen

        from prometheus_client.parser import text_string_to_metric_families

        with urlopen(f"http://{self.metrics_addr}/metrics", timeout=10) as r:
            text = r.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v
                                               for k, v in labels.items()):
                    return sample.value
        return 0.0

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._fh.close()
        return self.proc.returncode
