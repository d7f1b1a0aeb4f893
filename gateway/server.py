"""The gateway process: a gRPC server whose every gnomon.v1 method is forwarded (proxy.py),
beside a health service that follows the nodes' (upstream.py)."""

from __future__ import annotations

import asyncio
import logging
import signal

import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from gnomon.gateway.config import GatewayConfig
from gnomon.gateway.http import HttpForwarder
from gnomon.gateway.metrics import GatewayMetrics
from gnomon.gateway.proxy import Proxy, rpc_handlers
from gnomon.gateway.relay import Relay
from gnomon.gateway.upstream import CHANNEL_OPTIONS, Upstream

log = logging.getLogger("gnomon.gateway")
# Health names whose status follows whether the nodes have a leader (as on a node).
LEADER_SERVICES = ("", "gnomon.v1.JobService", "gnomon.v1.WorkerService")


def _server_credentials(cfg: GatewayConfig) -> grpc.ServerCredentials | None:
    if not cfg.tls_cert:
        return None
    with open(cfg.tls_key, "rb") as key, open(cfg.tls_cert, "rb") as cert:
        return grpc.ssl_server_credentials([(key.read(), cert.read())])


class Gateway:
    """One gateway: start(), then wait() until stop()."""

    def __init__(self, cfg: GatewayConfig):
        self.cfg = cfg
        self.metrics = GatewayMetrics()
        self.upstream = Upstream(cfg)
        self.relay = (Relay(cfg, self.upstream, self.metrics, cfg.relay_token())
                      if cfg.worker_upstream == "relay" else None)
        self.proxy = Proxy(cfg, self.upstream, self.metrics, self.relay)
        self.stopping = asyncio.Event()
        self._health = health.aio.HealthServicer()
        self._server: grpc.aio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.http = HttpForwarder(cfg, self.proxy) if cfg.http_listen_addr else None

    async def start(self) -> None:
        # max_calls bounds the calls (proxy.py answers beyond it); HTTP/2's per-connection
        # stream limit stays gRPC's default, so a call beyond the bound is refused, not queued.
        server = grpc.aio.server(options=[
            *CHANNEL_OPTIONS,
            # As on a node: the SDK pings idle connections every 10 s.
            ("grpc.http2.min_ping_interval_without_data_ms", 5_000)])
        server.add_generic_rpc_handlers(rpc_handlers(self.proxy))
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        creds = _server_credentials(self.cfg)
        addr = self.cfg.listen_addr
        bound = server.add_secure_port(addr, creds) if creds else server.add_insecure_port(addr)
        if bound == 0:
            raise SystemExit(f"listen_addr: cannot bind {addr}")
        await server.start()
        self._server = server
        if self.cfg.metrics_listen_addr:
            self.metrics.serve(self.cfg.metrics_listen_addr)
        if self.http is not None:
            await self.http.start()
        for name in LEADER_SERVICES:
            await self._health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self._health.set("gnomon.v1.ClusterService", health_pb2.HealthCheckResponse.SERVING)
        self._tasks = [asyncio.create_task(self.upstream.probe(self.stopping)),
                       asyncio.create_task(self._follow_health())]
        if self.relay is not None:
            self._tasks.append(asyncio.create_task(self.relay.run(self.stopping)))
        log.info("gateway: serving %s (%s) in front of %s", addr, "TLS" if creds else "plaintext",
                 ",".join(self.cfg.servers))

    async def _follow_health(self) -> None:
        last: bool | None = None
        while not self.stopping.is_set():
            serving = self.upstream.serving
            self.metrics.upstream_serving.set(1 if serving else 0)
            if serving != last:
                status = (health_pb2.HealthCheckResponse.SERVING if serving
                          else health_pb2.HealthCheckResponse.NOT_SERVING)
                for name in LEADER_SERVICES:
                    await self._health.set(name, status)
                last = serving
            try:
                await asyncio.wait_for(self.stopping.wait(), 0.1)
            except TimeoutError:
                pass

    def stop(self) -> None:
        self.stopping.set()

    async def wait(self) -> None:
        await self.stopping.wait()
        if self.http is not None:
            await self.http.stop()
        if self._server is not None:
            # Streams get a moment to end; their workers reconnect elsewhere with `held`.
            await self._server.stop(grace=2)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.upstream.close()


async def serve(cfg: GatewayConfig) -> None:
    gateway = Gateway(cfg)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, gateway.stop)
    await gateway.start()
    await gateway.wait()
