"""OpenTelemetry tracing of a node: the one module of the node that imports opentelemetry.

Off by default (`tracing = "none"`): nothing is imported, `enabled()` is False and every hook
of the callers is that one dict lookup. `configure("otlp" | "console")` needs the `otel` extra;
the exporter reads the standard variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_
[TRACES_]PROTOCOL, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_BSP_* for the bounded
export queue). node/ops/DESIGN.md "Tracing" says which spans exist and why their ids are
derived, not drawn.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from gnomon.node.ops import logs
from gnomon.node.ops.run_spans import SpanRecord, span_id, trace_id

__all__ = ["MODES", "ServerSpan", "configure", "current_span", "emit", "enabled",
           "mode_from_env", "server_span", "shutdown"]

log = logging.getLogger(__name__)

MODES = ("none", "otlp", "console")
_state: dict[str, Any] = {}  # "tracer", "provider", "ids", "otel" (the API module)


def enabled() -> bool:
    return "tracer" in _state


def mode_from_env(configured: str, env: Mapping[str, str] = os.environ) -> str:
    """The node's `tracing` setting, else OTEL_TRACES_EXPORTER when it names a mode, else
    "none" (off)."""
    if configured:
        return configured
    wanted = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    return wanted if wanted in MODES else "none"


def configure(mode: str, node_id: str) -> bool:
    """Start tracing with the `mode` exporter; False when it is "none". Raises ImportError,
    naming the extra, when opentelemetry is not installed, ValueError for OTEL_BSP_* values
    the SDK refuses."""
    if mode == "none":
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ImportError(f"tracing: {mode!r} needs the otel extra (pip install "
                          f"'gnomon[otel]'): {exc}") from exc
    ids = _derived_ids()
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME")
                                or "gnomon-node", "service.instance.id": node_id})
    # Stopped by shutdown() within a bound, not by the SDK's unbounded handler at exit.
    provider = TracerProvider(resource=resource, id_generator=ids, shutdown_on_exit=False)
    try:
        processor = BatchSpanProcessor(_exporter(mode))
    except ValueError as exc:  # the SDK's check of OTEL_BSP_* values
        raise ValueError(f"tracing: {exc} (the OTEL_BSP_* variables)") from None
    provider.add_span_processor(processor)
    _state.update(tracer=provider.get_tracer("gnomon.node"), provider=provider, ids=ids,
                  otel=trace)
    logs.set_trace_source(_current_ids)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_SdkLogLimit())
    log.info("tracing: on, exporter %s", mode)
    return True


SHUTDOWN_WAIT_S = 2.0


def shutdown(wait_s: float = SHUTDOWN_WAIT_S) -> None:
    """Export what is queued and stop, waiting at most `wait_s`: the SDK's own shutdown waits
    out the exporter's retries (tens of seconds with the collector gone), which would hold the
    node's bounded shutdown until it gives up."""
    provider = _state.get("provider")
    _state.clear()
    logs.set_trace_source(None)
    if provider is None:
        return
    flusher = threading.Thread(target=provider.shutdown, name="tracing-shutdown", daemon=True)
    flusher.start()
    flusher.join(wait_s)
    if flusher.is_alive():
        log.warning("tracing: queued spans not exported within %.1fs of stopping (is the "
                    "collector reachable?); they are dropped", wait_s)


def _exporter(mode: str) -> Any:
    if mode == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[assignment]
            OTLPSpanExporter,
        )
    return OTLPSpanExporter()


class _SdkLogLimit(logging.Filter):
    """At most one line per message of the SDK per `interval_s`: it warns once per dropped
    span ("Queue full, dropping Span."), which a gone collector turns into a line per call.
    The next line let through says how many were held back."""

    def __init__(self, interval_s: float = 10.0) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._last: dict[object, tuple[float, int]] = {}  # one key per message template

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("opentelemetry"):
            return True
        key = record.msg if isinstance(record.msg, str) else repr(record.msg)
        at, held = self._last.get(key, (float("-inf"), 0))
        if record.created - at < self.interval_s:
            self._last[key] = (at, held + 1)
            return False
        self._last[key] = (record.created, 0)
        if held:
            record.msg, record.args = f"{record.getMessage()} ({held} more held back)", ()
        return True


def _current_ids() -> tuple[str, str] | None:
    """(trace id, span id) in hex of the span active in this context, for log records."""
    otel = _state.get("otel")
    if otel is None:
        return None
    ctx = otel.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def _derived_ids() -> Any:
    """The SDK's id generator, except for the span being started by `emit`, whose ids come
    from the run (run_spans.py): set `forced.trace_id`/`forced.span_id` just before starting
    it. Per thread: emit runs on the event loop thread only."""
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class DerivedIds(RandomIdGenerator):
        def __init__(self) -> None:
            self.forced = threading.local()

        def generate_span_id(self) -> int:
            forced = getattr(self.forced, "span_id", 0)
            self.forced.span_id = 0
            return forced or super().generate_span_id()

        def generate_trace_id(self) -> int:
            forced = getattr(self.forced, "trace_id", 0)
            self.forced.trace_id = 0
            return forced or super().generate_trace_id()

    return DerivedIds()


def emit(records: list[SpanRecord]) -> None:
    """Record the spans of runs (fire, run, task attempt) with their derived ids and the
    replicated times. A no-op when tracing is off."""
    tracer = _state.get("tracer")
    if tracer is None:
        return
    from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags
    from opentelemetry.trace import set_span_in_context as in_context

    ids = _state["ids"]
    for r in records:
        parent = None
        if r.parent_span_id:
            parent = in_context(NonRecordingSpan(SpanContext(
                r.trace_id, r.parent_span_id, is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED))))
        ids.forced.trace_id, ids.forced.span_id = r.trace_id, r.span_id
        try:
            span = tracer.start_span(r.name, context=parent, attributes=r.attributes,
                                     start_time=r.start_ms * 1_000_000)
        finally:  # never lend these ids to another span
            ids.forced.trace_id = ids.forced.span_id = 0
        if r.error:
            span.set_status(Status(StatusCode.ERROR, r.error[:512]))
        span.end(end_time=r.end_ms * 1_000_000)


class ServerSpan:
    """The span of one API call (gRPC or HTTP): what the caller may add to it."""

    __slots__ = ("span",)

    def __init__(self, span: Any) -> None:
        self.span = span

    def set_attribute(self, key: str, value: Any) -> None:
        self.span.set_attribute(key, value)

    def finish(self, status: str, error: bool) -> None:
        """Record the call's outcome (a gRPC code name or an HTTP status)."""
        from opentelemetry.trace import Status, StatusCode

        self.span.set_attribute("gnomon.status", status)
        if error:
            self.span.set_status(Status(StatusCode.ERROR, status))

    def link_run(self, run_id: str) -> None:
        """Link this call to the trace of the run it created (its ids are the run's)."""
        from opentelemetry.trace import SpanContext, TraceFlags

        self.span.add_link(SpanContext(trace_id(run_id), span_id(run_id, "fire"), is_remote=True,
                                       trace_flags=TraceFlags(TraceFlags.SAMPLED)),
                           {"gnomon.run_id": run_id})


@contextlib.contextmanager
def server_span(name: str, carrier: Mapping[str, str], attributes: dict[str, Any],
                *, current: bool = True) -> Iterator[ServerSpan]:
    """A SERVER span for one call, continuing the caller's trace when `carrier` (gRPC
    metadata or HTTP headers, lower-case keys) holds a W3C traceparent; active in this
    context while it runs unless `current` is False (a stream's span)."""
    from opentelemetry.trace import SpanKind, use_span
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = TraceContextTextMapPropagator().extract(carrier)
    span = _state["tracer"].start_span(name, context=parent, kind=SpanKind.SERVER,
                                       attributes=attributes)
    if not current:
        try:
            yield ServerSpan(span)
        finally:
            span.end()
        return
    with use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
        yield ServerSpan(span)


def current_span() -> ServerSpan | None:
    """The API call's span active in this context (None when tracing is off or outside a
    call): a servicer adds to it (`link_run`)."""
    otel = _state.get("otel")
    if otel is None:
        return None
    span = otel.get_current_span()
    return ServerSpan(span) if span.get_span_context().is_valid else None
