"""The node's HTTP server (aiohttp on the node's event loop): the API, events and dashboard."""

from __future__ import annotations

import json
import logging
import ssl
from pathlib import Path
from typing import Any

import grpc
from aiohttp import web
from google.protobuf.message import Message

from gnomon.httpguard.connections import BoundedListener, ConnectionLimits, bounded_requests
from gnomon.node.api.grpc.access import AccessServicer
from gnomon.node.api.grpc.cluster import ClusterServicer
from gnomon.node.api.grpc.jobs import JobServicer
from gnomon.node.api.grpc.operations import OperationsServicer
from gnomon.node.api.http import connect
from gnomon.node.api.http.api import HttpContext, Route, all_routes, build_request, to_json
from gnomon.node.api.http.auth import authorize, authorize_events, principal
from gnomon.node.api.http.events import EventHub
from gnomon.node.api.http.openapi import document
from gnomon.node.api.http.patch import merged_update
from gnomon.node.api.http.port import REFUSAL, NodePortEvents, incomplete_body
from gnomon.node.api.http.problems import PROBLEM_TYPE, UNSUPPORTED_MEDIA_TYPE, Problem
from gnomon.node.api.http.telemetry import telemetry_middleware
from gnomon.node.config import web_origin
from gnomon.node.security.grpc_tls import is_loopback
from gnomon.node.security.reload import ServingCertificate

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
MAX_BODY_BYTES = 16 << 20  # as gRPC's max_receive_message_length on the node
# CORS (node/security/DESIGN.md, "Web pages"): a node that authenticates answers every
# origin `*` (a browser never attaches the bearer token by itself, and `*` admits no
# credentialed request); one that does not answers only the cluster's own origins (every
# member's http_addr) and http_cors_origins, never "null" (a redirected cross-origin
# request's). Every answer says `Vary: Origin`.
CORS_EXPOSE = {"Access-Control-Expose-Headers": "Location, Retry-After"}
PREFLIGHT = {
    "Access-Control-Allow-Methods": "GET, POST, PUT, PATCH, DELETE, OPTIONS",
    "Access-Control-Allow-Headers": "Content-Type, Idempotency-Key, Authorization, "
                                    "traceparent, tracestate, Connect-Protocol-Version",
    "Access-Control-Max-Age": "600",
}
# The one type a body may have: anything else (text/plain, a form, none) is what a page of
# another origin can send without a preflight, so such a request never reaches a servicer.
JSON_TYPE = "application/json"


def ssl_context(serving: ServingCertificate | None) -> ssl.SSLContext | None:
    """The gRPC port's TLS for the HTTP port: the same certificate and key (reloaded with
    them: HttpServer.reload_tls), and with tls_client_ca the same mutual TLS (clients present
    a certificate of that CA)."""
    if serving is None:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    serving.load_into(ctx)
    if serving.paths[2]:
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class HttpServer:
    def __init__(self, node):
        self.node = node
        self.servicers = {"JobService": JobServicer(node), "ClusterService": ClusterServicer(node),
                          "OperationsService": OperationsServicer(node),
                          "AccessService": AccessServicer(node, node.authenticator),
                          "WorkerService": node.worker_servicer}
        self.events = EventHub(node, max_streams=node.config.http_max_event_streams)
        # Outermost first: telemetry times and traces what _middleware answers too.
        telemetry = telemetry_middleware(access_log_on=node.config.http_access_log)
        self.app = web.Application(middlewares=[telemetry, self._middleware],
                                   client_max_size=MAX_BODY_BYTES)
        routes = all_routes()
        for route in routes:
            self.app.router.add_route(route.method, route.path, self._handler(route))
        for path in dict.fromkeys(r.path for r in routes):
            self.app.router.add_route("OPTIONS", path, self._preflight)
        self.app.router.add_get("/", self._index)
        self.app.router.add_static("/ui/", STATIC)
        self._runner: web.AppRunner | None = None
        self._openapi = json.dumps(document())

    _listener: BoundedListener | None = None

    async def start(self) -> None:
        """Serve on http_addr within the connection bounds (gnomon.httpguard): the port's own
        accept loop hands admitted sockets to aiohttp's server."""
        addr = self.node.config.http_addr
        host, _, port = addr.rpartition(":")
        # Innermost: it starts a request's body timer, and a body its client did not finish
        # is a 400 problem for _middleware to answer (not a traceback).
        self.app.middlewares.append(bounded_requests(incomplete_body))
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False,
                                     shutdown_timeout=2.0)
        await self._runner.setup()
        tls = self._tls = ssl_context(self.node.serving)
        assert self._runner.server is not None  # made by setup()
        self._listener = BoundedListener(self._runner.server,
                                         ConnectionLimits.from_config(self.node.config),
                                         events=NodePortEvents(), refusal=REFUSAL,
                                         ssl_context=tls)
        try:
            self._listener.listen(host, int(port))
        except OSError as exc:
            raise SystemExit(f"http_addr: cannot bind {addr}: {exc}") from None
        self.events.start()
        log.info("node %s serving HTTP on %s://%s/", self.node.config.node_id, self.scheme, addr)
        if tls is None and not is_loopback(addr):
            log.warning("the HTTP port %s listens beyond loopback WITHOUT TLS: anyone who "
                        "reaches it reads and changes every job. Set --tls-cert and --tls-key "
                        "(the HTTP port uses the gRPC port's TLS).", addr)

    @property
    def scheme(self) -> str:
        return "https" if self.node.config.tls_cert else "http"

    _tls: ssl.SSLContext | None = None

    def reload_tls(self) -> None:
        """The node's certificate changed: new handshakes present the new one."""
        if self._tls is not None and self.node.serving is not None:
            self.node.serving.load_into(self._tls)

    async def stop(self) -> None:
        if self._listener is not None:  # no new connections; cleanup() ends the open ones
            self._listener.close()
        await self.events.stop()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- plumbing ---------------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler):
        # Connect's paths (/gnomon.v1.<Service>/<Method>) are API too; their failures are
        # Connect's error JSON, never redirected (connect.py), whatever raised them.
        on_connect = request.path.startswith(connect.PATH_PREFIX)
        api = on_connect or request.path.startswith("/v1/")
        try:
            resp = await handler(request)
        except Problem as p:
            resp = connect.error_response(p) if on_connect else (
                self._redirect(request, p) or p.response())
        except web.HTTPException as exc:
            if not api or exc.status < 400:
                raise
            code = {404: grpc.StatusCode.NOT_FOUND, 405: grpc.StatusCode.UNIMPLEMENTED,
                    413: grpc.StatusCode.RESOURCE_EXHAUSTED}.get(exc.status,
                                                                 grpc.StatusCode.INVALID_ARGUMENT)
            what = {404: "no such route", 405: "method not allowed on this route",
                    413: f"body larger than {MAX_BODY_BYTES} bytes"}.get(exc.status, exc.reason)
            problem = Problem(code, f"{request.method} {request.path}: {what}")
            body = problem.body() | {"status": exc.status, "title": exc.reason}
            # 405 keeps aiohttp's Allow header (the methods the route has; RFC 9110).
            allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
            resp = connect.error_response(problem) if on_connect else web.Response(
                status=exc.status, text=json.dumps(body), content_type=PROBLEM_TYPE,
                headers=allow)
        except NotImplementedError:  # an RPC in the proto whose servicer is not written yet
            problem = Problem(grpc.StatusCode.UNIMPLEMENTED,
                              f"{request.path}: not implemented by this node")
            resp = connect.error_response(problem) if on_connect else problem.response()
        except Exception:
            log.exception("HTTP %s %s failed", request.method, request.path)
            problem = Problem(grpc.StatusCode.INTERNAL, "internal error; the node's log has it")
            resp = connect.error_response(problem) if on_connect else problem.response()
        if api and not resp.prepared:
            resp.headers.update(self._cors(request, resp.headers.get("Vary", "")))
        elif not resp.prepared:  # the dashboard's page and files
            resp.headers.update(self.page_headers())
        return resp

    def page_headers(self) -> dict[str, str]:
        """The dashboard's Content-Security-Policy: its own scripts and styles only, nothing
        inline, no frames; it may call this node and the other members (writes go to the
        leader's origin)."""
        members = " ".join(sorted(web_origin(self.scheme, m.http_addr)
                                  for m in self.node.raft.membership.members() if m.http_addr))
        policy = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                  f"connect-src 'self' {members}; base-uri 'none'; form-action 'none'; "
                  "frame-ancestors 'none'")
        return {"Content-Security-Policy": policy, "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer"}

    def _cors(self, request: web.Request, vary: str = "") -> dict[str, str]:
        """The CORS headers of an answer to `request` (`vary`: the answer's own Vary)."""
        headers = {"Vary": vary if "origin" in vary.lower() else
                   ", ".join(filter(None, (vary, "Origin")))}
        allow = self._allowed_origin(request.headers.get("Origin", ""))
        if allow:
            headers |= {"Access-Control-Allow-Origin": allow} | CORS_EXPOSE
        return headers

    def _allowed_origin(self, origin: str) -> str:
        """Access-Control-Allow-Origin for a request from `origin`, or "" (none)."""
        if self.node.config.admin_token_file:
            return "*"
        if not origin or origin == "null":
            return ""
        return origin if origin in self.allowed_origins() else ""

    def allowed_origins(self) -> set[str]:
        """The origins a node without authentication answers CORS to: every member's HTTP
        address with this node's scheme, and http_cors_origins."""
        own = {web_origin(self.scheme, m.http_addr)
               for m in self.node.raft.membership.members() if m.http_addr}
        return own | set(self.node.config.http_cors_origins)

    def _redirect(self, request: web.Request, p: Problem) -> web.Response | None:
        """A follower's UNAVAILABLE naming the leader -> 307 to the leader's HTTP address."""
        if p.code != grpc.StatusCode.UNAVAILABLE:
            return None
        p.headers.setdefault("Retry-After", "1")
        if not p.leader:
            return None
        http = next((m.http_addr for m in self.node.raft.membership.members()
                     if m.grpc_addr == p.leader and m.http_addr), "")
        if not http:
            return None
        body = p.body() | {"status": 307, "title": "Temporary Redirect"}
        return web.Response(status=307, text=json.dumps(body), content_type=PROBLEM_TYPE,
                            headers={"Location": f"{self.scheme}://{http}{request.path_qs}"})

    async def _preflight(self, request: web.Request) -> web.Response:
        cors = self._cors(request)
        if "Access-Control-Allow-Origin" in cors:
            cors |= PREFLIGHT
        return web.Response(status=204, headers=cors)

    async def _index(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    def _handler(self, route: Route):
        if route.rpc:
            servicer = self.servicers[route.service]
            method = getattr(servicer, route.method_name)

            async def call(request: web.Request) -> web.Response:
                if route.protocol == "connect":  # its failures: the middleware
                    return connect.answer(await served(request))
                reply: Any = await served(request)  # Any: the route's own response type
                resp = web.json_response(to_json(reply), status=route.status)
                if route.rpc == "JobService.CreateJob" and route.status == 201:
                    resp.headers["Location"] = f"/v1/jobs/{reply.job.job_id}"
                return resp

            async def served(request: web.Request) -> Message:
                """The servicer's reply to this request (Problem for a failure)."""
                if route.protocol == "connect":
                    connect.check_version(request)
                if route.body:
                    _require_json(route, request)
                # Who calls, before a byte of the body is read: an unauthenticated body
                # costs nothing (16 MiB of JSON cost the leader 1.9 s and its term).
                who, metadata = principal(self.node, request)
                msg = await build_request(
                    route, request,
                    max_json_containers=self.node.config.http_max_json_containers)
                if route.update_mask:  # PATCH: the job's spec with the masked fields changed
                    msg = await merged_update(self.node, servicer, request, msg)
                context = HttpContext()
                access = await authorize(self.node, route.service, route.method_name, request,
                                         msg, context, who=who, metadata=metadata)
                context.metadata = access.metadata
                reply = await method(msg, context)
                await access.succeeded(msg)
                return reply

            return call
        if route.path == "/v1/events":
            async def events(request: web.Request) -> web.StreamResponse:
                authorize_events(self.node, request)
                return await self.events.stream(request, headers=self._cors(request))
            return events
        if route.path == "/v1/openapi.json":
            async def openapi(request: web.Request) -> web.Response:
                return web.Response(text=self._openapi, content_type="application/json")
            return openapi
        raise ValueError(f"route {route.method} {route.path}: no handler")


def _require_json(route: Route, request: web.Request) -> None:
    """A route with a body takes application/json only (415 otherwise, body unread)."""
    sent = request.headers.get("Content-Type", "")
    if request.content_type == JSON_TYPE and sent:
        return
    got = f"got {sent!r}" if sent else "the request has none"
    raise Problem(grpc.StatusCode.INVALID_ARGUMENT,
                  f"Content-Type: must be {JSON_TYPE} on {route.method} {route.path} (the "
                  f"body is the request message's JSON, even when empty); {got}",
                  reason=UNSUPPORTED_MEDIA_TYPE, headers={"Accept": JSON_TYPE})
