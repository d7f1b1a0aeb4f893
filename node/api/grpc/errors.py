"""One table from domain errors to gRPC status codes; servicers only translate."""

from __future__ import annotations

import grpc

from gnomon.node.core.errors import Code, Rejected
from gnomon.node.raft.errors import LeadershipLost, NotCommitted, Overloaded
from gnomon.node.security.auth import AuthError
from gnomon.node.spec.validate import ValidationError

LEADER_METADATA_KEY = "gnomon-leader"
# A stable, machine-readable reason for the failures clients tell apart (api.proto, "Errors");
# clients branch on it, never on the message text.
REASON_METADATA_KEY = "gnomon-reason"


class Reason:
    """The values of `gnomon-reason` (and of `ReportAck.reason` on the worker stream)."""

    VERSION_CONFLICT = "VERSION_CONFLICT"  # expected_version is not the current version
    STALE_LEASE = "STALE_LEASE"  # the fencing token is not the task's current lease
    RECORDED_AS_FAILURE = "RECORDED_AS_FAILURE"  # ReportAck: a Complete kept as a failure
    NOT_RECORDED = "NOT_RECORDED"  # ReportAck: not committed; report again
    NOT_YOURS = "NOT_YOURS"  # ReportAck: the lease was not granted to this worker
    # The caller used this request_id for a different request (HTTP: 422, problems.py)
    REQUEST_ID_REUSED = "REQUEST_ID_REUSED"


# (status code, the field the detail names first: "field: rule") -> reason. The core's
# Rejected names the field it is about, so the reason follows from code and field.
REASONS: dict[tuple[grpc.StatusCode, str], str] = {
    (grpc.StatusCode.FAILED_PRECONDITION, "expected_version"): Reason.VERSION_CONFLICT,
    (grpc.StatusCode.FAILED_PRECONDITION, "fencing_token"): Reason.STALE_LEASE,
    (grpc.StatusCode.FAILED_PRECONDITION, "request_id"): Reason.REQUEST_ID_REUSED,
}

REJECTED_CODES: dict[str, grpc.StatusCode] = {
    Code.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    Code.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Code.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    Code.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    Code.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


class NotLeader(Exception):
    """This node does not lead (or its term is not committed yet)."""

    def __init__(self, leader_grpc_addr: str | None):
        super().__init__(
            f"not the leader; the leader is {leader_grpc_addr}" if leader_grpc_addr
            else "no leader elected yet; retry shortly"
        )
        self.leader_grpc_addr = leader_grpc_addr


class ServiceError(Exception):
    """A request-level error raised by servicers (code + message)."""

    def __init__(self, code: grpc.StatusCode, detail: str):
        super().__init__(detail)
        self.code = code


EXCEPTION_CODES: dict[type, grpc.StatusCode] = {
    ValidationError: grpc.StatusCode.INVALID_ARGUMENT,  # and ScheduleError, a subclass
    Overloaded: grpc.StatusCode.RESOURCE_EXHAUSTED,
    NotCommitted: grpc.StatusCode.UNAVAILABLE,
    NotLeader: grpc.StatusCode.UNAVAILABLE,
    LeadershipLost: grpc.StatusCode.UNAVAILABLE,
}


def reason_for(code: grpc.StatusCode, detail: str) -> str:
    """The `gnomon-reason` of a failure with this code and detail ("" if none applies)."""
    return REASONS.get((code, detail.split(":", 1)[0].strip()), "")


def rejected_reason(reply: Rejected) -> str:
    """The reason of a core Rejected (for ReportAck.reason)."""
    return reason_for(REJECTED_CODES[reply.code], reply.detail)


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str] | None:
    if isinstance(exc, ServiceError):
        return exc.code, str(exc)
    if isinstance(exc, AuthError):
        return getattr(grpc.StatusCode, exc.code), str(exc)
    for cls, code in EXCEPTION_CODES.items():
        if isinstance(exc, cls):
            return code, str(exc)
    return None


async def abort(context: grpc.aio.ServicerContext, exc: BaseException):
    """End the call with the status of `exc` (re-raise anything unexpected)."""
    mapped = status_of(exc)
    if mapped is None:
        raise exc
    trailing: tuple = ()
    if isinstance(exc, NotLeader) and exc.leader_grpc_addr:
        trailing = ((LEADER_METADATA_KEY, exc.leader_grpc_addr),)
    if reason := reason_for(*mapped):
        trailing = (*trailing, (REASON_METADATA_KEY, reason))
    # abort() replaces trailing metadata set earlier: pass it here.
    await context.abort(*mapped, trailing_metadata=trailing)


def check(reply: object) -> object:
    """Raise ServiceError for a Rejected reply; return any other reply."""
    if isinstance(reply, Rejected):
        raise ServiceError(REJECTED_CODES[reply.code], reply.detail)
    return reply
