"""Tracing hooks of the client and the worker SDK: the one client module that imports
opentelemetry, and only when the application already did (the client does not depend on it;
`pip install 'gnomon[otel]'` for the ready-made workers' ``--tracing``).

- A call of ``AsyncClient`` carries the caller's active span as W3C ``traceparent`` metadata,
  so the node's span of the call joins the caller's trace.
- The worker opens an execution span, child of the attempt's ``traceparent`` (sent by a tracing
  cluster with each task), and exports it through the application's tracer provider; the
  span's ``traceparent`` is what the task sees (``TaskContext.traceparent``), what the shell
  worker puts in ``TRACEPARENT`` and the HTTP worker in its request's ``traceparent`` header.
  Without opentelemetry the attempt's ``traceparent`` is handed on unchanged.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import os
import sys
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

__all__ = ["EXPORTERS", "active", "carried", "configure_exporter", "execution_span",
           "outgoing_metadata"]

T = TypeVar("T")

EXPORTERS = ("none", "otlp", "console")
_PROPAGATED = ("traceparent", "tracestate")
# The caller's trace context, carried by the blocking Client's calls onto its loop thread
# (where the caller's active span is not the current one).
_carried: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar(
    "gnomon_carried_trace", default=())


def active() -> bool:
    """Whether the application uses OpenTelemetry (imported its API): only then can a span be
    active, so only then is it worth importing anything."""
    return "opentelemetry.trace" in sys.modules


def outgoing_metadata() -> tuple[tuple[str, str], ...]:
    """``traceparent``/``tracestate`` of the span active in this context, as gRPC metadata;
    () when there is none."""
    if not active():
        return ()
    carried_here = _carried.get()
    if carried_here:
        return carried_here
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return tuple((k, v) for k, v in carrier.items() if k in _PROPAGATED)


def carried(coro: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]:
    """``coro`` carrying this thread's trace context to the thread that will run it (the
    blocking Client's loop); ``coro`` itself when the application does not trace."""
    metadata = outgoing_metadata()
    if not metadata:
        return coro

    async def with_context() -> T:
        _carried.set(metadata)  # this task's own context: nothing to reset
        return await coro

    return with_context()


def configure_exporter(mode: str, service_name: str) -> None:
    """Install a global tracer provider exporting with ``mode`` ("otlp": the standard
    OTEL_EXPORTER_OTLP_* variables; "console"); "none" does nothing. For the ``gnomon
    worker`` commands; an application configures OpenTelemetry itself. Raises ImportError
    naming the extra when it is not installed."""
    if mode == "none":
        return
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError as exc:
        raise ImportError(f"--tracing {mode} needs the otel extra (pip install "
                          f"'gnomon[otel]'): {exc}") from exc
    exporter: Any
    if mode == "console":
        exporter = ConsoleSpanExporter()
    elif (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
          or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")) == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        exporter = HttpExporter()
    name = os.environ.get("OTEL_SERVICE_NAME") or service_name
    # The SDK's own handler at exit waits out the exporter's retries (tens of seconds with
    # the collector gone): the worker waits at most SHUTDOWN_WAIT_S instead.
    provider = TracerProvider(resource=Resource.create({"service.name": name}),
                              shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    atexit.register(_bounded_shutdown, provider, SHUTDOWN_WAIT_S)


SHUTDOWN_WAIT_S = 2.0


def _bounded_shutdown(provider: Any, wait_s: float) -> None:
    flusher = threading.Thread(target=provider.shutdown, name="tracing-shutdown", daemon=True)
    flusher.start()
    flusher.join(wait_s)


@contextlib.contextmanager
def execution_span(received: str, name: str, attributes: dict[str, Any]) -> Iterator[str]:
    """The worker's span of one task execution, child of ``received`` (the attempt's
    traceparent, maybe empty), active in this context while it runs; yields the traceparent
    to hand on (the span's, or ``received`` when nothing traces here)."""
    if not active():
        yield received
        return
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    propagator = TraceContextTextMapPropagator()
    parent = propagator.extract({"traceparent": received}) if received else None
    tracer = trace.get_tracer("gnomon.worker")
    with tracer.start_as_current_span(name, context=parent, kind=trace.SpanKind.CONSUMER,
                                      attributes=attributes, record_exception=True) as span:
        if not span.get_span_context().is_valid:
            yield received  # no SDK provider: nothing records; hand the attempt's on
            return
        carrier: dict[str, str] = {}
        propagator.inject(carrier)
        yield carrier.get("traceparent", received)
