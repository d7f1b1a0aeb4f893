"""The nodes behind a gateway: one channel per node, and which of them leads.

The leader is learnt from the nodes' own answers: a follower refuses a leader's call with
UNAVAILABLE and the leader's address in `gnomon-leader`, before it does anything, so a call
refused that way is sent again to the named node (`learn`). A node whose channel cannot
connect is passed over until it can. Health: the gateway serves while some node says it
knows a leader with a fresh proof (the nodes' `gnomon.v1.JobService` health, which needs no
token).

Loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
import grpc.aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gnomon.gateway.config import GatewayConfig

log = logging.getLogger("gnomon.gateway")

LEADER_KEY = "gnomon-leader"
CHANNEL_OPTIONS = (
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.max_receive_message_length", 16 << 20),
    ("grpc.max_send_message_length", 16 << 20),
)


# A status code by its number (RelayEnd.code, an aborted context's code()).
STATUS_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}


def caller_trailers(metadata: Any, hint_addr: str) -> tuple[tuple[str, str | bytes], ...]:
    """A node's trailers for the caller: a leader hint names this gateway, not the node."""
    return tuple((key, hint_addr if key == LEADER_KEY else value)
                 for key, value in metadata or ())

def leader_hint(metadata: object) -> str:
    """The `gnomon-leader` address a node's trailing metadata names, or ""."""
    for key, value in metadata or ():  # type: ignore[attr-defined]
        if key == LEADER_KEY:
            return value if isinstance(value, str) else value.decode()
    return ""


def _credentials(cfg: GatewayConfig) -> grpc.ChannelCredentials | None:
    if not cfg.upstream_ca:
        return None

    def read(path: str) -> bytes | None:
        if not path:
            return None
        with open(path, "rb") as fh:
            return fh.read()

    return grpc.ssl_channel_credentials(read(cfg.upstream_ca), read(cfg.upstream_key),
                                        read(cfg.upstream_cert))


class Upstream:
    """Channels to the nodes and the gateway's belief about who leads."""

    def __init__(self, cfg: GatewayConfig):
        self.cfg = cfg
        creds = _credentials(cfg)
        self.channels: dict[str, grpc.aio.Channel] = {}
        for addr in cfg.servers:
            self.channels[addr] = (grpc.aio.secure_channel(addr, creds, CHANNEL_OPTIONS) if creds
                                   else grpc.aio.insecure_channel(addr, CHANNEL_OPTIONS))
        self.leader = ""  # "" until a node names one
        self._logged = ""
        self._next = 0
        self.serving = False

    def target(self) -> str:
        """Where the next call goes: the known leader, else the next node that can connect."""
        if self.leader:
            return self.leader
        order = list(self.cfg.servers)
        for i in range(len(order)):
            addr = order[(self._next + i) % len(order)]
            if self.channels[addr].get_state() != grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                self._next = (self._next + i + 1) % len(order)
                return addr
        self._next = (self._next + 1) % len(order)
        return order[self._next]

    def channel(self, addr: str) -> grpc.aio.Channel:
        """The channel to `addr`; a node named by a hint but not configured gets one too."""
        if addr not in self.channels:
            creds = _credentials(self.cfg)
            self.channels[addr] = (grpc.aio.secure_channel(addr, creds, CHANNEL_OPTIONS)
                                   if creds else grpc.aio.insecure_channel(addr, CHANNEL_OPTIONS))
        return self.channels[addr]

    def learn(self, hint: str) -> None:
        # Logged once per leader: during an election followers keep naming the old one.
        if hint != self._logged:
            log.info("gateway: the leader is %s (was %s)", hint, self._logged or "unknown")
            self._logged = hint
        self.leader = hint

    def unreachable(self, addr: str) -> None:
        """`addr` could not be reached: stop believing it leads."""
        if addr == self.leader:
            log.debug("gateway: leader %s unreachable; asking the others", addr)
            self.leader = ""

    async def probe(self, stop: asyncio.Event) -> None:
        """Keep `serving` current: true while some node knows a fresh leader."""
        interval_s = self.cfg.probe_interval_ms / 1000
        request = health_pb2.HealthCheckRequest(service="gnomon.v1.JobService")
        while not stop.is_set():
            serving = False
            for addr in self.cfg.servers:
                stub: Any = health_pb2_grpc.HealthStub(self.channels[addr])
                try:
                    answer = await stub.Check(request, timeout=interval_s)
                except grpc.aio.AioRpcError:
                    continue
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    serving = True
                    break
            if serving != self.serving:
                log.info("gateway: upstream %s", "has a leader" if serving else "has no leader")
            self.serving = serving
            try:
                await asyncio.wait_for(stop.wait(), interval_s)
            except TimeoutError:
                pass

    async def close(self) -> None:
        for channel in self.channels.values():
            await channel.close()
