"""The HTTP port of a gateway: the nodes' HTTP API, dashboard and HTTP worker protocol,
forwarded to the leader's HTTP port.

Rules (as for gRPC, proxy.py):
- The request goes as it came (method, path, query, body, the caller's Authorization), so the
  node authenticates, validates and answers; its status, headers and body come back as they
  are. One HTTP implementation, the node's; the gateway parses nothing.
- A node's 307 to the leader is followed here (at most `max_hops` and once per node), with
  the body sent again: a node redirects before it acts. The caller never sees a node's
  address. A 307 naming an address the gateway was not given (`http_servers`) sends the
  request to the next node given instead.
- A node that cannot be connected to is passed over (nothing was sent to it).
- An `Origin` that is this gateway's own (its dashboard page) is sent as the node's own
  origin: the page came from the cluster, through its front door. Any other origin goes as
  it is, and the node answers CORS for it by its own rules.
- Bounds: `http_max_body_bytes` per request (413 beyond, unread), `max_calls` requests in
  flight with the gRPC calls (429 beyond); the connection bounds of a node's HTTP port
  (gnomon.httpguard: header, body, write and idle timeouts, caps per port and per address,
  the descriptor reserve). Server-sent event streams are relayed chunk by
  chunk, never buffered whole.

Loop thread only.
"""

from __future__ import annotations

import json
import logging
import ssl
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from gnomon.gateway.config import GatewayConfig
from gnomon.gateway.metrics import HttpPortEvents
from gnomon.gateway.proxy import Proxy
from gnomon.httpguard.connections import (
    BoundedListener,
    ConnectionLimits,
    bounded_requests,
    refusal_bytes,
)

log = logging.getLogger("gnomon.gateway")

# RFC 9110 7.6.1 hop-by-hop headers, and those aiohttp sets itself.
_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
        "trailer", "transfer-encoding", "upgrade", "host", "content-length"}
_PROBLEM = "application/problem+json"


def _problem_body(status: int, code: str, detail: str) -> dict[str, Any]:
    return {"type": f"urn:gnomon:problem:{code.lower()}", "title": code, "status": status,
            "code": code, "detail": detail, "field": "", "rule": detail}


def _problem(status: int, code: str, detail: str, **headers: str) -> web.Response:
    return web.json_response(_problem_body(status, code, detail), status=status,
                             content_type=_PROBLEM, headers=headers)


def _incomplete_body(detail: str) -> web.HTTPException:
    """A body the client did not finish (it went away, or was cut at the body timeout)."""
    return web.HTTPBadRequest(text=json.dumps(_problem_body(400, "INVALID_ARGUMENT", detail)),
                              content_type=_PROBLEM)


REFUSAL = refusal_bytes(_PROBLEM, _problem_body(
    503, "UNAVAILABLE", "the gateway's HTTP port is at its connection bound; retry later"))


class HttpForwarder:
    """The gateway's HTTP port (start() / stop())."""

    def __init__(self, cfg: GatewayConfig, proxy: Proxy):
        self.cfg = cfg
        self.proxy = proxy  # its in_flight count is the one bound for both ports
        self.scheme = "https" if cfg.tls_cert else "http"
        self.upstream_scheme = "https" if cfg.upstream_ca else "http"
        self.leader = ""  # host:port of the leader's HTTP port, once a node named it
        self._next = 0
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._listener: BoundedListener | None = None

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Serve on http_listen_addr within the connection bounds (gnomon.httpguard), as a
        node's HTTP port does: the port's own accept loop hands admitted sockets to aiohttp."""
        app = web.Application(client_max_size=self.cfg.http_max_body_bytes,
                              middlewares=[bounded_requests(_incomplete_body)])
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        host, port = self.cfg.http_listen_addr.rsplit(":", 1)
        assert self._runner.server is not None  # made by setup()
        self._listener = BoundedListener(
            self._runner.server, ConnectionLimits.from_config(self.cfg),
            events=HttpPortEvents(self.proxy.metrics), refusal=REFUSAL, ssl_context=self._serving_tls())
        self._listener.listen(host, int(port))
        client_tls: ssl.SSLContext | bool = False
        if self.cfg.upstream_ca:
            client_tls = ssl.create_default_context(cafile=self.cfg.upstream_ca)
            if self.cfg.upstream_cert:
                client_tls.load_cert_chain(self.cfg.upstream_cert, self.cfg.upstream_key)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=client_tls, limit=0),
            auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None, connect=5))
        log.info("gateway: HTTP on %s://%s in front of %s", self.scheme,
                 self.cfg.http_listen_addr, ",".join(self.cfg.http_servers))

    def _serving_tls(self) -> ssl.SSLContext | None:
        if not self.cfg.tls_cert:
            return None
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cfg.tls_cert, self.cfg.tls_key)
        return ctx

    async def stop(self) -> None:
        if self._listener is not None:  # no new connections; cleanup() ends the open ones
            self._listener.close()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    # --- forwarding ------------------------------------------------------------------------

    def _target(self) -> str:
        if self.leader:
            return self.leader
        servers = self.cfg.http_servers
        addr = servers[self._next % len(servers)]
        self._next = (self._next + 1) % len(servers)
        return addr

    def _headers(self, request: web.Request, target: str) -> dict[str, str]:
        out = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        own = f"{self.scheme}://{self.cfg.http_advertise_addr}"
        if out.get("Origin") == own:
            out["Origin"] = f"{self.upstream_scheme}://{target}"
        return out

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if not self.proxy.admit():
            return _problem(429, "RESOURCE_EXHAUSTED", self.proxy.refusal(),
                            **{"Retry-After": "1"})
        try:
            return await self._forward(request)
        finally:
            self.proxy.release()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _problem(413, "INVALID_ARGUMENT",
                            f"body: more than http_max_body_bytes "
                            f"({self.cfg.http_max_body_bytes}) bytes")
        assert self._session is not None
        tried_unreachable = 0
        for _hop in range(self.cfg.max_hops + len(self.cfg.http_servers) + 1):
            target = self._target()
            url = f"{self.upstream_scheme}://{target}{request.rel_url}"
            try:
                upstream = await self._session.request(
                    request.method, url, data=body or None, allow_redirects=False,
                    headers=self._headers(request, target))
            except aiohttp.ClientConnectorError:
                self.leader = "" if self.leader == target else self.leader
                tried_unreachable += 1
                if tried_unreachable > len(self.cfg.http_servers):
                    break
                continue
            if upstream.status == 307 and "Location" in upstream.headers:
                named = urlsplit(upstream.headers["Location"]).netloc
                upstream.release()
                if named != target:
                    self.proxy.metrics.redirects.labels("http").inc()
                    # A leader address the gateway was not given may be one only callers
                    # outside can reach (compose publishes 127.0.0.1:760N): ask the others
                    # in turn instead; one of them leads.
                    known = named if named in self.cfg.http_servers else ""
                    if known and known != self.leader:
                        log.info("gateway: the HTTP leader is %s", known)
                    self.leader = known
                    continue
            return await self._relay(request, upstream)
        return _problem(503, "UNAVAILABLE", "gateway: no node's HTTP port answered; try again",
                        **{"Retry-After": "1"})

    async def _relay(self, request: web.Request, upstream: Any) -> web.StreamResponse:
        """The node's answer, streamed (an event stream stays open as long as the node's)."""
        async with upstream:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in _HOP:
                    response.headers.add(key, value)
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response
