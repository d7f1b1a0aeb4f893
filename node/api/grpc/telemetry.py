"""Per-call telemetry of the gRPC port: a duration histogram by service, method and status code
(always), and a SERVER span per call when tracing is on (node/ops/DESIGN.md, "Tracing").

The outermost interceptor, so a call refused by the decode or access guard is measured too.
Only registered methods are labelled by name (an unknown one is "unknown"): a caller cannot
grow the label set. A call whose request is one message gets a span active while it runs
(the servicers' spans and log lines join it); a request stream (the worker stream, the relay)
gets one span for its whole life, not made current.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

import grpc

from gnomon.node.api.grpc import handlers
from gnomon.node.ops import metrics, tracing

__all__ = ["CallTelemetry"]

_PROPAGATED = ("traceparent", "tracestate")


class CallTelemetry(grpc.aio.ServerInterceptor):
    """Server interceptor: time every call; with tracing on, a span per call."""

    def __init__(self) -> None:
        # Per registered method (a bounded set: unknown methods never get here). Only what
        # the name decides is kept: the interceptors inside hand on a new handler per call.
        self._calls: dict[str, _Call] = {}

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None:
            metrics.GRPC_SECONDS.labels("unknown", "unknown", "UNIMPLEMENTED").observe(0)
            return handler
        call = self._calls.get(method)
        if call is None:
            service, _, name = method.lstrip("/").rpartition("/")
            call = self._calls[method] = _Call(service, name,
                                               current=not handler.request_streaming)
        return _measured(handler, call)


def _measured(handler: grpc.RpcMethodHandler, call: _Call) -> grpc.RpcMethodHandler:
    behaviour = handlers.behaviour(handler)
    if not (inspect.iscoroutinefunction(behaviour) or inspect.isasyncgenfunction(behaviour)):
        return handler  # synchronous behaviours (none served here) are left alone
    if inspect.isasyncgenfunction(behaviour):
        async def streamed(request, context):
            with call.observe(context):
                async for response in behaviour(request, context):
                    yield response

        wrapped: Callable[..., Any] = streamed
    else:
        async def answered(request, context):
            with call.observe(context):
                return await behaviour(request, context)

        wrapped = answered
    return handlers.rebuild(handler, wrapped)


class _Call:
    """One method's measuring: `with call.observe(context):` around its behaviour."""

    __slots__ = ("service", "name", "current")

    def __init__(self, service: str, name: str, *, current: bool) -> None:
        self.service, self.name, self.current = service, name, current

    def observe(self, context: Any) -> _Observed:
        return _Observed(self, context)


class _Observed:
    """The context manager of one call: the span (if tracing) and the histogram."""

    __slots__ = ("call", "context", "started", "span_cm", "span")

    def __init__(self, call: _Call, context: Any) -> None:
        self.call, self.context = call, context
        self.span_cm: Any = None
        self.span: tracing.ServerSpan | None = None

    def __enter__(self) -> None:
        self.started = time.perf_counter()
        if tracing.enabled():
            carrier = {k: v for k, v in self.context.invocation_metadata() or ()
                       if k in _PROPAGATED and isinstance(v, str)}
            self.span_cm = tracing.server_span(
                f"{self.call.service}/{self.call.name}", carrier,
                {"rpc.system": "grpc", "rpc.service": self.call.service,
                 "rpc.method": self.call.name}, current=self.call.current)
            self.span = self.span_cm.__enter__()

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        code = _status(self.context, exc)
        metrics.GRPC_SECONDS.labels(self.call.service, self.call.name, code).observe(
            time.perf_counter() - self.started)
        if self.span is not None:
            self.span.set_attribute("rpc.grpc.status_code", _CODE_NUMBERS.get(code, 2))
            self.span.finish(code, error=code not in _OK_CODES)
            self.span_cm.__exit__(None, None, None)


_CODE_NUMBERS = {c.name: c.value[0] for c in grpc.StatusCode}
_CODE_NAMES = {number: name for name, number in _CODE_NUMBERS.items()}
# Codes that are an answer, not a fault of the server (OpenTelemetry's gRPC convention
# marks only server-side faults as errors).
_OK_CODES = frozenset({"OK", "CANCELLED", "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS",
                       "PERMISSION_DENIED", "FAILED_PRECONDITION", "OUT_OF_RANGE",
                       "UNAUTHENTICATED", "RESOURCE_EXHAUSTED", "ABORTED"})


def _status(context: Any, exc: BaseException | None) -> str:
    """The call's status code name: what the behaviour set or aborted with, CANCELLED for a
    call cancelled under it, UNKNOWN for an exception it raised, else OK."""
    try:
        code = context.code()
    except Exception:  # noqa: BLE001 - a context without code(): judge by the exception
        code = None
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(code, int):
        return _CODE_NAMES.get(code, "UNKNOWN")
    if isinstance(exc, asyncio.CancelledError | GeneratorExit):
        return "CANCELLED"
    return "OK" if exc is None else "UNKNOWN"
