"""The node's log records: `--log-format json|text`, `--log-level`, one event per line.

Every record carries the node id and, once Raft runs, the current term; records about a job,
a run or a lease carry `job`, `run` and `token` (pass `extra=logs.fields(...)`); with tracing
on, a record written while a span is active carries its `trace_id` and `span_id`. A record that
spans lines (a traceback, a message with newlines) is written on one line: JSON escapes them,
text replaces them with " | ", so a reader that splits on newlines never sees half a record.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable

__all__ = ["FORMATS", "LEVELS", "configure", "fields", "set_term_source", "set_trace_source"]

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")
_FIELDS = ("job", "run", "token", "worker", "http", "trace_id", "span_id")
_term_source: Callable[[], int] | None = None
# The active span's (trace id, span id) in hex, or None; set by ops.tracing when tracing is on
# (this module never imports opentelemetry).
_trace_source: Callable[[], tuple[str, str] | None] | None = None


def set_term_source(source: Callable[[], int] | None) -> None:
    """Where records read the current term from (the Raft node, once it runs)."""
    global _term_source
    _term_source = source


def set_trace_source(source: Callable[[], tuple[str, str] | None] | None) -> None:
    """Where records read the active span's ids from (ops.tracing, while tracing is on)."""
    global _trace_source
    _trace_source = source


def fields(*, job: str | None = None, run: str | None = None, token: int | None = None,
           worker: str | None = None) -> dict:
    """`extra=` for a record about a job, a run, a lease or a worker."""
    return {k: v for k, v in (("job", job), ("run", run), ("token", token), ("worker", worker))
            if v not in (None, "")}


class _Context(logging.Filter):
    def __init__(self, node_id: str) -> None:
        super().__init__()
        self.node_id = node_id

    def filter(self, record: logging.LogRecord) -> bool:
        record.node = self.node_id
        if not hasattr(record, "term") and _term_source is not None:
            try:
                record.term = int(_term_source())
            except Exception:  # noqa: BLE001 - Raft not started or stopping: no term field
                pass
        if _trace_source is not None and not hasattr(record, "trace_id"):
            ids = _trace_source()
            if ids is not None:
                record.trace_id, record.span_id = ids
        return True


def _timestamp(record: logging.LogRecord) -> str:
    t = time.gmtime(record.created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(record.msecs):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, node, term, msg, job/run/token/worker,
    trace_id/span_id, exc."""

    def format(self, record: logging.LogRecord) -> str:
        event = {"ts": _timestamp(record), "level": record.levelname.lower(),
                 "logger": record.name, "node": getattr(record, "node", "")}
        if hasattr(record, "term"):
            event["term"] = record.term
        event["msg"] = record.getMessage()
        for key in _FIELDS:
            if hasattr(record, key):
                event[key] = getattr(record, key)
        if record.exc_info:
            event["exc"] = self.formatException(record.exc_info)
        return json.dumps(event, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """`ts node level logger: msg key=value ...` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), getattr(record, "node", ""), record.levelname,
                 f"{record.name}:", record.getMessage()]
        extra = [f"{k}={getattr(record, k)}" for k in ("term", *_FIELDS) if hasattr(record, k)]
        line = " ".join(parts + extra)
        if record.exc_info:
            line += " | " + self.formatException(record.exc_info)
        return line.replace("\r", "").replace("\n", " | ")


def configure(node_id: str, log_format: str = "text", level: str = "info", *,
              capture_native: bool = True) -> None:
    """Route every record of the process to stderr in `log_format` at `level`.

    `capture_native`: whatever else writes to file descriptor 2 (gRPC's C core, a traceback
    printed by the interpreter) goes through a pipe and comes out as records of the logger
    "native", one per line, so that the stream stays one event per line in either format."""
    stream = _native_capture() if capture_native else sys.stderr
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(_Context(node_id))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.getLogger("pysyncobj").setLevel(logging.ERROR)


def _native_capture():
    """Make fd 2 a pipe read by a daemon thread; return a stream on the original stderr."""
    sys.stderr.flush()
    original = os.dup(2)
    read_fd, write_fd = os.pipe()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    out = os.fdopen(original, "w", buffering=1, encoding="utf-8", errors="replace")
    native = logging.getLogger("native")

    def pump() -> None:
        with os.fdopen(read_fd, "rb") as pipe:
            for raw in pipe:
                text = raw.decode("utf-8", "replace").rstrip()
                if text:
                    native.warning("%s", text)

    thread = threading.Thread(target=pump, name="native-stderr", daemon=True)
    thread.start()

    def drain() -> None:  # at exit: point fd 2 back, let the pump read the rest, then stop
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(original, 2)
        thread.join(timeout=2)

    import atexit

    atexit.register(drain)
    return out
