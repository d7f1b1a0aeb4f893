"""Per-request telemetry of the HTTP port: a duration histogram by method, route template and
status (always), a SERVER span per request when tracing is on (continuing a `traceparent`
header), and with `http_access_log` one log line per request (node/ops/DESIGN.md, "Tracing").

Labels and span names use the route's template (`/v1/jobs/{job_id}`), never the raw path, and
only the methods aiohttp knows (others are "OTHER"): a caller cannot grow the label set.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from gnomon.node.ops import metrics, tracing

__all__ = ["telemetry_middleware"]

access_log = logging.getLogger("gnomon.http.access")

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def route_template(request: web.Request) -> str:
    """The template of the route that matched `request`, or "unmatched"."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def telemetry_middleware(*, access_log_on: bool) -> Callable[..., Awaitable[web.StreamResponse]]:
    """The outermost middleware: times each request, traces it, logs it when asked."""

    @web.middleware
    async def telemetry(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        method = request.method if request.method in _METHODS else "OTHER"
        route = route_template(request)
        status = 500
        span_cm = None
        if tracing.enabled():
            carrier = {k: request.headers[k] for k in ("traceparent", "tracestate")
                       if k in request.headers}
            span_cm = tracing.server_span(f"{method} {route}", carrier,
                                          {"http.request.method": method, "http.route": route})
            span = span_cm.__enter__()
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            seconds = time.perf_counter() - started
            metrics.HTTP_SECONDS.labels(method, route, str(status)).observe(seconds)
            if access_log_on:
                access_log.info("%s %s %d %.1fms", method, request.path[:512], status,
                                seconds * 1000,
                                extra=_access_fields(request, method, route, status, seconds))
            if span_cm is not None:
                span.set_attribute("http.response.status_code", status)
                span.finish(str(status), error=status >= 500)
                span_cm.__exit__(None, None, None)

    return telemetry


def _access_fields(request: web.Request, method: str, route: str, status: int,
                   seconds: float) -> dict:
    """`extra=` of an access line (JSON keys with --log-format json)."""
    return {"http": {"method": method, "route": route, "path": request.path[:512],
                     "status": status, "duration_ms": round(seconds * 1000, 1),
                     "remote": request.remote or ""}}
