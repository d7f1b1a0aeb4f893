"""How a ``gnomon`` command ends: its exit code and its one-line error message."""

from __future__ import annotations

import re
from typing import Any

from .._errors import (
    AlreadyExists,
    Cancelled,
    Conflict,
    DeadlineExceeded,
    FailedPrecondition,
    GnomonError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from .dev import DEFAULT_SERVERS
from .values import UsageError

__all__ = [
    "EXIT_CODES",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_RUN_NOT_SUCCEEDED",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "error_json",
    "error_line",
    "exit_code_for",
]

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_RUN_NOT_SUCCEEDED = 4
EXIT_INTERRUPTED = 130

EXIT_CODES = """\
exit codes:
  0    success
  1    the cluster refused the request; the message names the error class
       (not found, already exists, invalid argument, failed precondition, conflict,
       resource exhausted, unauthenticated, ...)
  2    usage error: bad flags or spec file; nothing was sent
  3    unavailable: no node answered, or there was no leader, before --timeout
  4    --wait: the run ended without succeeding, or was still running at --wait-timeout
  130  interrupted (Ctrl-C)"""

_ERROR_LABELS: list[tuple[type[GnomonError], str]] = [
    (NotFound, "not found"),
    (AlreadyExists, "already exists"),
    (InvalidArgument, "invalid argument"),
    (Conflict, "conflict"),
    (FailedPrecondition, "failed precondition"),
    (Unavailable, "unavailable"),
    (ResourceExhausted, "resource exhausted"),
    (Unauthenticated, "unauthenticated"),
    (PermissionDenied, "permission denied"),
    (DeadlineExceeded, "deadline exceeded"),
    (Cancelled, "cancelled"),
]


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def exit_code_for(err: BaseException) -> int:
    """The documented exit code for an error that ended a command."""
    if isinstance(err, UsageError):
        return EXIT_USAGE
    if isinstance(err, Unavailable | DeadlineExceeded):
        return EXIT_UNAVAILABLE
    if isinstance(err, InvalidArgument) and err.code is None:
        return EXIT_USAGE  # raised by the client library before sending anything
    if isinstance(err, GnomonError):
        return EXIT_REFUSED
    if isinstance(err, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return EXIT_REFUSED


def error_line(err: BaseException, *, servers: str | None = None) -> str:
    """``gnomon: <error class>: <server's message>``, on one line."""
    if isinstance(err, UsageError):
        return f"gnomon: {_one_line(str(err))}"
    if isinstance(err, KeyboardInterrupt):
        return "gnomon: interrupted"
    if not isinstance(err, GnomonError):
        return f"gnomon: {type(err).__name__}: {_one_line(str(err))}"
    label = next((text for cls, text in _ERROR_LABELS if isinstance(err, cls)), None)
    if label is None:
        label = err.code.name.lower().replace("_", " ") if err.code is not None else "error"
    line = f"gnomon: {label}: {_one_line(err.message) or 'no details'}"
    if isinstance(err, Unavailable | DeadlineExceeded) and servers:
        line += f" (servers {servers}"
        line += "; start a local cluster with `gnomon dev`)" if servers == DEFAULT_SERVERS else ")"
    return line


# "spec.tasks[0].queue: not valid UTF-8", "--token-file: cannot be read": the field a
# message names comes first, before ": " (the servers' and the CLI's rule for messages).
_FIELD = re.compile(r"^(-{0,2}[A-Za-z_][\w.\[\]-]*): ")


def error_json(err: BaseException, *, servers: str | None = None) -> dict[str, Any]:
    """The error of a command run with --json, as one JSON object for stderr: ``code`` (the
    gRPC status name, ``USAGE`` for a usage error, ``INTERRUPTED``), ``reason`` (the
    server's gnomon-reason or null), ``field`` (the field or flag the message names, or
    null), ``message`` (the line the command prints without --json) and ``exit_code``."""
    if isinstance(err, UsageError):
        code, reason, message = "USAGE", None, _one_line(str(err))
    elif isinstance(err, GnomonError):
        code = err.code.name if err.code is not None else (
            "INVALID_ARGUMENT" if isinstance(err, InvalidArgument) else "UNKNOWN")
        reason, message = err.reason or None, _one_line(err.message)
    elif isinstance(err, KeyboardInterrupt):
        code, reason, message = "INTERRUPTED", None, "interrupted"
    else:
        code, reason, message = "UNKNOWN", None, _one_line(str(err))
    field = _FIELD.match(message)
    return {"code": code, "reason": reason, "field": field.group(1) if field else None,
            "message": error_line(err, servers=servers), "exit_code": exit_code_for(err)}
