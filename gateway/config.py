"""The gateway's settings, checked at start: a bad one names its flag and the rule."""

from __future__ import annotations

from dataclasses import dataclass


class ConfigError(ValueError):
    """A setting that breaks its rule; the message names the setting."""


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """Where the gateway listens, which nodes it fronts, and its bounds."""

    listen_addr: str
    # The nodes' gRPC addresses; any order (leader hints are followed).
    servers: tuple[str, ...]
    # The address callers reach this gateway at: sent as the leader hint when a call ends on
    # a leader change, so a worker reconnects here at once. Default: listen_addr.
    advertise_addr: str = ""
    # TLS towards callers (PEM files); none: plaintext.
    tls_cert: str = ""
    tls_key: str = ""
    # TLS towards the nodes: their CA, and a client certificate where they ask for one.
    upstream_ca: str = ""
    upstream_cert: str = ""
    upstream_key: str = ""
    # Calls in flight at once (streams and unary calls); beyond: RESOURCE_EXHAUSTED.
    max_calls: int = 20_000
    # Client messages of one stream read ahead of the node's answer (per-stream budget).
    stream_buffer_messages: int = 64
    # Worker streams: "relay" (every worker over one multiplexed stream to the leader,
    # relay.py) or "stream" (each its own stream to the leader).
    worker_upstream: str = "stream"
    # The relay's own bearer token (a `gateway` or admin token), read from this file at start;
    # required with worker_upstream "relay" (gateway/DESIGN.md, "The relay").
    relay_token_file: str = ""
    # Frames in one relay message at most, and messages queued for one relayed worker and not
    # yet read by it (beyond: its call ends RESOURCE_EXHAUSTED).
    relay_batch_frames: int = 1_024
    # How workers' heartbeats go up the relay: "frames" (parsed here, renewed and answered by
    # the leader as it takes the relay message) or "messages" (as the bytes the worker sent,
    # through the leader's stream servicer like any message). "frames" falls back to
    # "messages" on a leader that does not offer it.
    relay_heartbeats: str = "frames"
    relay_worker_buffer_messages: int = 2_048
    # A call redirected this many times by leader hints is answered with the last hint.
    max_hops: int = 3
    # How often the nodes' health is probed (the gateway's own health follows it).
    probe_interval_ms: int = 1000
    # The HTTP port ("" = none) and the nodes' HTTP addresses it forwards to.
    http_listen_addr: str = ""
    http_servers: tuple[str, ...] = ()
    # The address callers reach the HTTP port at (its web origin). Default: http_listen_addr.
    http_advertise: str = ""
    http_max_body_bytes: int = 4 << 20
    # The HTTP port's connection bounds, as the node's (gnomon.httpguard): a request's line
    # and headers within http_header_timeout_ms of the connection (or of the first byte of a
    # following request), its body within http_body_timeout_ms of its headers, its response
    # read within http_write_timeout_ms; idle keep-alive connections closed after
    # http_idle_timeout_ms. At most http_max_connections open, http_max_connections_per_address
    # from one address (a gateway behind a load balancer sees one address: raise it there),
    # and none admitted while fewer than reserved_descriptors descriptors would be free.
    http_header_timeout_ms: int = 10_000
    http_body_timeout_ms: int = 30_000
    http_idle_timeout_ms: int = 60_000
    http_write_timeout_ms: int = 30_000
    http_max_connections: int = 4_096
    http_max_connections_per_address: int = 1_024
    reserved_descriptors: int = 128
    http_accept_backoff_ms: int = 1_000
    http_error_log_interval_ms: int = 10_000
    # Prometheus /metrics ("" = none).
    metrics_listen_addr: str = ""
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        _check_addr("listen_addr", self.listen_addr)
        if not self.servers:
            raise ConfigError("servers: at least one node's gRPC address (host:port)")
        for addr in self.servers:
            _check_addr("servers", addr)
        if self.advertise_addr:
            _check_addr("advertise_addr", self.advertise_addr)
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("tls_cert and tls_key: give both (or neither)")
        if bool(self.upstream_cert) != bool(self.upstream_key):
            raise ConfigError("upstream_cert and upstream_key: give both (or neither)")
        if (self.upstream_cert or self.upstream_key) and not self.upstream_ca:
            raise ConfigError("upstream_cert: needs upstream_ca (mutual TLS is TLS)")
        if self.http_listen_addr:
            _check_addr("http_listen_addr", self.http_listen_addr)
            if not self.http_servers:
                raise ConfigError("http_servers: the nodes' HTTP addresses, for http_listen_addr")
        for addr in self.http_servers:
            _check_addr("http_servers", addr)
        if self.http_advertise:
            _check_addr("http_advertise", self.http_advertise)
        if self.metrics_listen_addr:
            _check_addr("metrics_listen_addr", self.metrics_listen_addr)
        if self.worker_upstream not in ("relay", "stream"):
            raise ConfigError(f"worker_upstream: 'relay' or 'stream', not {self.worker_upstream!r}")
        if self.relay_heartbeats not in ("frames", "messages"):
            raise ConfigError(f"relay_heartbeats: 'frames' or 'messages', not "
                              f"{self.relay_heartbeats!r}")
        if self.worker_upstream == "relay" and not self.relay_token_file:
            raise ConfigError("relay_token_file: required with worker_upstream 'relay' (a file "
                              "holding a gateway token: gnomon token create NAME --role gateway)")
        for name in ("max_calls", "stream_buffer_messages", "max_hops", "probe_interval_ms",
                     "http_max_body_bytes", "relay_batch_frames",
                     "relay_worker_buffer_messages", "http_header_timeout_ms",
                     "http_body_timeout_ms", "http_idle_timeout_ms", "http_write_timeout_ms",
                     "http_max_connections", "http_max_connections_per_address",
                     "reserved_descriptors", "http_accept_backoff_ms",
                     "http_error_log_interval_ms"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be at least 1, not {getattr(self, name)}")

    def relay_token(self) -> str:
        """The relay's bearer token: relay_token_file's content, stripped. Raises ConfigError."""
        try:
            with open(self.relay_token_file, encoding="utf-8") as fh:
                token = fh.read().strip()
        except OSError as exc:
            raise ConfigError(f"relay_token_file: {self.relay_token_file!r} cannot be read "
                              f"({exc.strerror})") from None
        if not token or any(ch.isspace() for ch in token):
            raise ConfigError(f"relay_token_file: {self.relay_token_file!r} must hold one "
                              "token (one word)")
        return token

    @property
    def hint_addr(self) -> str:
        return self.advertise_addr or self.listen_addr

    @property
    def http_advertise_addr(self) -> str:
        return self.http_advertise or self.http_listen_addr


def _check_addr(name: str, addr: str) -> None:
    host, sep, port = addr.rpartition(":")
    if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
        raise ConfigError(f"{name}: {addr!r} is not host:port")
