"""The errors of the gnomon client and worker SDK.

Every error the client raises for a call is a ``GnomonError``; ``str(err)`` is the server's
message (it names the field and the rule), ``err.code`` the gRPC status code (``None`` when the
error was raised locally) and ``err.reason`` the server's machine-readable ``gnomon-reason``
trailer, if any::

    GnomonError
     +-- NotFound                 NOT_FOUND: no such job, run or dead letter
     +-- AlreadyExists            ALREADY_EXISTS: a job of that name exists in the tenant
     +-- InvalidArgument          INVALID_ARGUMENT: malformed input (also a ValueError)
     +-- FailedPrecondition       FAILED_PRECONDITION: wrong state for the operation
     |    +-- Conflict            stale ``expected_version`` (reason VERSION_CONFLICT); ABORTED
     +-- Unavailable              UNAVAILABLE: no leader or no node reachable before the deadline
     +-- ResourceExhausted        RESOURCE_EXHAUSTED: a limit or admission control; retry later
     +-- Unauthenticated          UNAUTHENTICATED: no token, or a bad, expired or revoked one
     +-- PermissionDenied         PERMISSION_DENIED: the token's role or tenants do not allow it
     +-- DeadlineExceeded         DEADLINE_EXCEEDED: the deadline passed (also a TimeoutError)
     +-- Cancelled                CANCELLED
     +-- RunFailed                a run ended without succeeding (``RunHandle.result``)

Any other status code raises ``GnomonError`` itself.

Task code raises ``NonRetryableError`` (not a ``GnomonError``) to fail an attempt for good: the
task goes straight to the dead-letter queue. Every other exception is retried per the task's
``RetryPolicy``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

if TYPE_CHECKING:
    from ._models import Run

__all__ = [
    "AlreadyExists",
    "Cancelled",
    "Conflict",
    "DeadlineExceeded",
    "FailedPrecondition",
    "GnomonError",
    "InvalidArgument",
    "NonRetryableError",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "RunFailed",
    "Unauthenticated",
    "Unavailable",
    "error_for_status",
]

REASON_METADATA_KEY = "gnomon-reason"
# The `gnomon-reason` of a FAILED_PRECONDITION that is a stale `expected_version`: the status
# code alone cannot tell it from a wrong state, and the message is for people.
VERSION_CONFLICT = "VERSION_CONFLICT"


class GnomonError(Exception):
    """Base of every error raised by the client for a failed call."""

    def __init__(
        self, message: str, *, code: grpc.StatusCode | None = None, reason: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        code = self.code.name if self.code is not None else None
        return f"{type(self).__name__}({self.message!r}, code={code}, reason={self.reason!r})"


class NotFound(GnomonError):
    pass


class AlreadyExists(GnomonError):
    pass


class InvalidArgument(GnomonError, ValueError):
    pass


class FailedPrecondition(GnomonError):
    pass


class Conflict(FailedPrecondition):
    pass


class Unavailable(GnomonError):
    pass


class ResourceExhausted(GnomonError):
    pass


class Unauthenticated(GnomonError):
    pass


class PermissionDenied(GnomonError):
    pass


class DeadlineExceeded(GnomonError, TimeoutError):
    pass


class Cancelled(GnomonError):
    pass


class RunFailed(GnomonError):
    """A run ended without succeeding (failed, cancelled or skipped), raised by
    ``RunHandle.result()``; ``run`` is the run as it ended."""

    def __init__(self, run: Run) -> None:
        failed = [t for t in run.tasks if t.last_error]
        why = f": task {failed[0].task_name}: {failed[0].last_error}" if failed else ""
        super().__init__(f"run {run.run_id} ended {run.state.value}{why}")
        self.run = run


class NonRetryableError(Exception):
    """Raised by task code: this attempt failed and retrying cannot help (dead-letter it)."""


STATUS_ERRORS: dict[grpc.StatusCode, type[GnomonError]] = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ABORTED: Conflict,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.CANCELLED: Cancelled,
}


def error_for_status(
    code: grpc.StatusCode, message: str, *, reason: str | None = None
) -> GnomonError:
    """The typed error for a failed call's status code, message and ``gnomon-reason``."""
    cls = STATUS_ERRORS.get(code, GnomonError)
    if cls is FailedPrecondition and reason == VERSION_CONFLICT:
        cls = Conflict
    return cls(message, code=code, reason=reason)
