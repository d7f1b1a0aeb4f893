"""Channels, leader following and backoff, shared by the client and the worker."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio

from ._errors import REASON_METADATA_KEY, InvalidArgument
from ._version import VERSION

LEADER_METADATA_KEY = "gnomon-leader"
RETRY_AFTER_METADATA_KEY = "retry-after-ms"
USER_AGENT = f"gnomon-python/{VERSION}"
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# A follower may point at a node that itself just lost leadership; after this many immediate
# redirects in a row, fall back to backoff so two confused nodes cannot make us spin.
MAX_IMMEDIATE_REDIRECTS = 3


@dataclass(frozen=True, slots=True)
class TLSConfig:
    """TLS to the nodes' gRPC port: the CA that signed their certificates (None: the
    system's roots), and a client certificate and key for mutual TLS (files, PEM).
    ``server_name`` overrides the name checked against the node certificates."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        if bool(self.cert_file) != bool(self.key_file):
            raise InvalidArgument("tls: cert_file and key_file are given together (or neither)")
        return grpc.ssl_channel_credentials(
            root_certificates=_read_file("tls.ca_file", self.ca_file),
            private_key=_read_file("tls.key_file", self.key_file),
            certificate_chain=_read_file("tls.cert_file", self.cert_file))


def _read_file(name: str, path: str | None) -> bytes | None:
    if not path:
        return None
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise InvalidArgument(f"{name}: {path!r} cannot be read ({exc.strerror})") from None


def security_options(tls: TLSConfig | bool | None, token: str | None,
                     credentials: grpc.ChannelCredentials | None,
                     metadata: Sequence[tuple[str, str]]):
    """(credentials, metadata, extra channel options) from the client's security options."""
    if tls and credentials is not None:
        raise InvalidArgument("tls and credentials: give one of them")
    options: tuple[tuple[str, Any], ...] = ()
    if tls:
        config = tls if isinstance(tls, TLSConfig) else TLSConfig()
        credentials = config.credentials()
        if config.server_name:
            options = (("grpc.ssl_target_name_override", config.server_name),)
    meta = tuple(metadata)
    if token is not None:
        token = token.strip()
        if not token or any(ch.isspace() for ch in token):
            raise InvalidArgument("token: must be one word without spaces")
        meta += (("authorization", f"Bearer {token}"),)
    return credentials, meta, options


def parse_servers(servers: Sequence[str] | str) -> tuple[str, ...]:
    """``"h1:p,h2:p"`` or ``["h1:p", "h2:p"]`` -> unique addresses in order."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out: list[str] = []
    for item in items:
        addr = item.strip()
        if addr and addr not in out:
            out.append(addr)
    if not out:
        raise InvalidArgument("no server address given (expected 'host:port[,host:port...]')")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ChannelConfig:
    """How channels are dialled; copied by a Worker built from a client."""

    servers: tuple[str, ...]
    credentials: grpc.ChannelCredentials | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    keepalive_time_s: float = 10.0
    keepalive_timeout_s: float = 5.0
    extra_options: tuple[tuple[str, Any], ...] = field(default=())

    def options(self) -> list[tuple[str, Any]]:
        keepalive_ms = int(self.keepalive_time_s * 1000)
        timeout_ms = int(self.keepalive_timeout_s * 1000)
        return [
            # Keepalive alone took a minute to notice a frozen peer; the ping timeout makes it
            # seconds (DEPENDENCY-NOTES). The server must allow pings this often without data.
            ("grpc.keepalive_time_ms", keepalive_ms),
            ("grpc.keepalive_timeout_ms", timeout_ms),
            ("grpc.http2.ping_timeout_ms", timeout_ms),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            # A restarted node must be redialled within a failover, not after grpc's default
            # reconnect backoff of up to two minutes.
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.min_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", 2000),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.primary_user_agent", USER_AGENT),
            *self.extra_options,
        ]


class ChannelPool:
    """One ``grpc.aio`` channel per address, created on first use in the running loop."""

    def __init__(self, config: ChannelConfig) -> None:
        self.config = config
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._closed = False

    def get(self, address: str) -> grpc.aio.Channel:
        if self._closed:
            raise RuntimeError("the gnomon client is closed")
        channel = self._channels.get(address)
        if channel is None:
            options = self.config.options()
            if self.config.credentials is not None:
                channel = grpc.aio.secure_channel(address, self.config.credentials, options)
            else:
                channel = grpc.aio.insecure_channel(address, options)
            self._channels[address] = channel
        return channel

    async def close(self) -> None:
        self._closed = True
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()


class Router:
    """Which node to try next: the last node that answered or was named leader, else the
    configured servers in turn."""

    def __init__(self, servers: Sequence[str]) -> None:
        self.servers = tuple(servers)
        self._preferred: str | None = None
        self._index = 0

    def current(self) -> str:
        return self._preferred or self.servers[self._index]

    def follow(self, leader: str) -> None:
        self._preferred = leader

    def succeeded(self, address: str) -> None:
        self._preferred = address

    def failed(self, address: str) -> None:
        """``address`` did not help: move on to the next configured server."""
        if self._preferred == address:
            self._preferred = None
        if address in self.servers:
            self._index = (self.servers.index(address) + 1) % len(self.servers)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Jittered exponential backoff: attempt n waits a uniform draw in [d/2, d] with
    d = min(initial * multiplier**n, maximum), so many clients retrying together spread out."""

    initial_s: float = 0.05
    maximum_s: float = 2.0
    multiplier: float = 2.0

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        d = min(self.initial_s * self.multiplier ** min(attempt, 64), self.maximum_s)
        return (rng or random).uniform(d / 2, d)


@dataclass(frozen=True, slots=True)
class NextAttempt:
    """Where the next attempt goes and how long to wait before it (0 after a redirect)."""

    address: str
    delay_s: float
    redirected: bool


class Failover:
    """What to do after an attempt failed: try the leader a follower named at once (at most
    ``MAX_IMMEDIATE_REDIRECTS`` in a row), else move the router on to the next server and wait
    a jittered backoff. One per client call, one per worker (across its reconnects); a
    ``pinned`` failover never leaves its address."""

    def __init__(
        self, router: Router, backoff: Backoff, rng: random.Random, *, pinned: bool = False
    ) -> None:
        self.router = router
        self._backoff = backoff
        self._rng = rng
        self._pinned = pinned
        self._redirects = 0
        self._backoffs = 0

    def succeeded(self, address: str) -> None:
        """``address`` answered: prefer it, and start counting afresh."""
        if not self._pinned:
            self.router.succeeded(address)
        self._redirects = self._backoffs = 0

    def next(self, address: str, leader_hint: str | None) -> NextAttempt:
        """The next attempt after one at ``address`` failed (``leader_hint``: the leader that
        node named, if any)."""
        hint = None if self._pinned else leader_hint
        if hint and hint != address and self._redirects < MAX_IMMEDIATE_REDIRECTS:
            self._redirects += 1
            self.router.follow(hint)
            return NextAttempt(hint, 0.0, redirected=True)
        if not self._pinned:
            self.router.failed(address)
            address = self.router.current()
        self._redirects = 0
        delay = self._backoff.delay(self._backoffs, self._rng)
        self._backoffs += 1
        return NextAttempt(address, delay, redirected=False)


def metadata_value(metadata: Any, key: str) -> str | None:
    """The last value of ``key`` in gRPC metadata (any iterable of pairs), as str."""
    found: str | None = None
    for item in metadata or ():
        k, v = item
        if k == key:
            found = v.decode() if isinstance(v, bytes) else str(v)
    return found


def leader_hint(error: grpc.aio.AioRpcError) -> str | None:
    """The leader address a follower named in its UNAVAILABLE answer, if any."""
    if error.code() != grpc.StatusCode.UNAVAILABLE:
        return None
    return metadata_value(error.trailing_metadata(), LEADER_METADATA_KEY) or None


def reason_of(error: grpc.aio.AioRpcError) -> str | None:
    """The ``gnomon-reason`` trailer of a failed call, if the node sent one."""
    return metadata_value(error.trailing_metadata(), REASON_METADATA_KEY) or None


def retry_after_s(error: grpc.aio.AioRpcError) -> float | None:
    """Seconds a RESOURCE_EXHAUSTED answer asked us to wait (``retry-after-ms``), if any."""
    if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    for key, value in error.trailing_metadata() or ():
        if key == RETRY_AFTER_METADATA_KEY:
            try:
                return max(0.0, int(value) / 1000)
            except ValueError:
                return None
    return None
