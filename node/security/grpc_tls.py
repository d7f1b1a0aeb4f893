"""TLS of the gRPC port (clients, workers, other nodes): how a node dials another's, and the
warning a plaintext port beyond loopback deserves. Its server credentials follow the
certificate files: reload.py."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from pathlib import Path

import grpc
import grpc.aio

from gnomon.node.config import Config
from gnomon.node.security.auth import read_admin_token

log = logging.getLogger(__name__)


def _read(name: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SystemExit(f"gnomon-node: {name}: {path!r} cannot be read ({exc.strerror})") \
            from None


def peer_channel(config: Config) -> Callable[[str], grpc.aio.Channel]:
    """How this node dials another node's gRPC port (history backfill): TLS trusting the
    cluster CA with this node's Raft certificate as its client certificate when the port
    speaks TLS, and the bootstrap admin token when authentication is on."""
    token = read_admin_token(config.admin_token_file) if config.admin_token_file else None
    if not config.tls_cert:
        interceptors = [_BearerToken(token)] if token else None
        return lambda address: grpc.aio.insecure_channel(address, interceptors=interceptors)
    creds = grpc.ssl_channel_credentials(
        root_certificates=_read("raft_tls_ca", config.raft_tls_ca),
        private_key=_read("raft_tls_key", config.raft_tls_key),
        certificate_chain=_read("raft_tls_cert", config.raft_tls_cert))
    if token:
        creds = grpc.composite_channel_credentials(
            creds, grpc.access_token_call_credentials(token))
    return lambda address: grpc.aio.secure_channel(address, creds)


class _BearerToken(grpc.aio.UnaryStreamClientInterceptor):
    """Adds `authorization: Bearer` on a plaintext channel (call credentials need TLS)."""

    def __init__(self, token: str):
        self._header = ("authorization", f"Bearer {token}")

    async def intercept_unary_stream(self, continuation, details, request):
        metadata = (*(details.metadata or ()), self._header)
        return await continuation(details._replace(metadata=metadata), request)


def is_loopback(address: str) -> bool:
    """Whether `host:port` binds only loopback (a name other than localhost counts as not)."""
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def warn_if_exposed(config: Config) -> None:
    """Say loudly that a plaintext gRPC port beyond loopback lets anyone who reaches it read
    and change every job (and take every queue's tasks)."""
    addr = config.self_member.grpc_addr
    if config.tls_cert or is_loopback(addr):
        return
    log.warning("!" * 78)
    log.warning("the gRPC port %s listens beyond loopback WITHOUT TLS: anyone who reaches it "
                "reads and changes every job and takes every queue's tasks in plaintext. Set "
                "--tls-cert and --tls-key (and --tls-client-ca for mutual TLS).", addr)
    log.warning("!" * 78)
