"""The gateway's Prometheus metrics, in a registry of its own (`--metrics-listen`).

Labels are bounded: `method` is one of the gnomon.v1 methods the gateway registers, `code`
one of gRPC's status names, `port` grpc or http.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.in_flight = Gauge("gnomon_gateway_calls_in_flight",
                               "Calls and streams in flight (gRPC and HTTP), bounded by "
                               "max_calls", registry=r)
        self.streams = Gauge("gnomon_gateway_streams",
                             "Streams held now (worker streams and server streams)",
                             registry=r)
        self.calls = Counter("gnomon_gateway_calls",
                             "Calls forwarded, by method and the status the caller got",
                             ["method", "code"], registry=r)
        self.forward_seconds = Histogram(
            "gnomon_gateway_forward_seconds",
            "Unary calls: from the caller's request to the node's answer, redirects included",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r)
        self.redirects = Counter("gnomon_gateway_redirects",
                                 "Refusals with a leader hint followed to the named node",
                                 ["port"], registry=r)
        self.refused = Counter("gnomon_gateway_refused",
                               "Calls refused at a bound, by bound", ["bound"], registry=r)
        self.upstream_serving = Gauge("gnomon_gateway_upstream_serving",
                                      "1 while some node reports a leader with a fresh proof",
                                      registry=r)

        self.relay_connected = Gauge("gnomon_gateway_relay_connected",
                                     "1 while the relay to the leader is up", registry=r)
        self.relayed_streams = Gauge("gnomon_gateway_relayed_streams",
                                     "Worker streams relayed now", registry=r)
        self.relay_batches = Counter("gnomon_gateway_relay_batches",
                                     "Relay messages, by direction (up: to the leader)",
                                     ["direction"], registry=r)
        # frames / batches is the coalescing ratio: worker messages per relay message.
        self.relay_batch_frames = Histogram(
            "gnomon_gateway_relay_batch_frames", "Frames in one relay message, by direction",
            ["direction"], buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096),
            registry=r)
        # Per up batch: the heartbeats the leader renewed in one message.
        self.relay_heartbeat_frames = Counter(
            "gnomon_gateway_relay_heartbeat_frames",
            "Worker heartbeats sent up as heartbeat frames (answered by the leader as it "
            "takes the relay message)", registry=r)

        self.http_connections = Gauge("gnomon_gateway_http_connections",
                                      "Connections open on the HTTP port", registry=r)
        self.http_refused = Counter(
            "gnomon_gateway_http_connections_refused",
            "HTTP connections refused at a bound: port (http_max_connections), address "
            "(http_max_connections_per_address), descriptors (reserved_descriptors)",
            ["reason"], registry=r)
        self.http_timed_out = Counter(
            "gnomon_gateway_http_connections_timed_out",
            "HTTP connections closed at a timeout, by phase: handshake, header, body, write",
            ["phase"], registry=r)
        self.http_accept_errors = Counter("gnomon_gateway_http_accept_errors",
                                          "accept() failures on the HTTP port (it pauses)",
                                          registry=r)

    def serve(self, addr: str) -> None:
        """/metrics on `addr` (host:port), from a thread of prometheus-client's."""
        host, port = addr.rsplit(":", 1)
        start_http_server(int(port), host, registry=self.registry)


class HttpPortEvents:
    """The HTTP port's counts (gnomon.httpguard.connections.PortEvents) as gateway metrics."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self.metrics = metrics

    def open_connections(self, count: Callable[[], int]) -> None:
        self.metrics.http_connections.set_function(count)

    def refused(self, reason: str) -> None:
        self.metrics.http_refused.labels(reason).inc()

    def timed_out(self, phase: str) -> None:
        self.metrics.http_timed_out.labels(phase).inc()

    def accept_failed(self) -> None:
        self.metrics.http_accept_errors.inc()
