"""Errors as application/problem+json (RFC 9457), from the gRPC status a servicer gave.

The `detail` is the gRPC status message verbatim, so the same bad input reads the same over
both ports; `field` and `rule` split it at the first ": " when it names a field
("spec.schedule.cron.timezone: unknown timezone 'Mars/Base'").
"""

from __future__ import annotations

import json
from http import HTTPStatus

import grpc
from aiohttp import web
from google.protobuf import json_format

from gnomon.node.api.grpc.error_details import rich_status, split_detail
from gnomon.node.api.grpc.errors import Reason

__all__ = ["HTTP_STATUS", "HTTP_STATUS_BY_REASON", "PROBLEM_TYPE", "Problem", "split_detail"]

PROBLEM_TYPE = "application/problem+json"
# A body that is not application/json (server.py): INVALID_ARGUMENT, HTTP 415.
UNSUPPORTED_MEDIA_TYPE = "UNSUPPORTED_MEDIA_TYPE"

# The HTTP status of each gRPC code: the mapping of google.rpc.Code (and grpc-gateway).
HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.UNAUTHENTICATED: 401,
}

# Failures whose HTTP status is not their code's: the same caller reusing an Idempotency-Key
# (request_id) for a different request is FAILED_PRECONDITION over gRPC, 422 here (the IETF
# Idempotency-Key draft's answer to a key reused with another payload).
HTTP_STATUS_BY_REASON: dict[str, int] = {
    Reason.REQUEST_ID_REUSED: 422,
    # A stale expected_version: 409 Conflict, as HTTP APIs answer an edit of a changed thing
    # (FAILED_PRECONDITION with this reason over gRPC).
    Reason.VERSION_CONFLICT: 409,
    UNSUPPORTED_MEDIA_TYPE: 415,
}

class Problem(Exception):
    """An error answer: a gRPC code, its message, and what else the status carried."""

    def __init__(self, code: grpc.StatusCode, detail: str, *, reason: str = "",
                 leader: str = "", headers: dict[str, str] | None = None,
                 retry_after_ms: int | None = None):
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.reason = reason
        self.leader = leader
        self.headers = dict(headers or {})
        self.retry_after_ms = retry_after_ms

    def status_proto(self):
        """The google.rpc.Status the same failure carries over gRPC (error_details.py)."""
        return rich_status(self.code, self.detail, reason=self.reason, leader=self.leader,
                           retry_after_ms=self.retry_after_ms)

    @property
    def status(self) -> int:
        return HTTP_STATUS_BY_REASON.get(self.reason) or HTTP_STATUS.get(self.code, 500)

    def body(self) -> dict:
        field, rule = split_detail(self.detail)
        out = {
            "type": f"urn:gnomon:problem:{self.code.name.lower().replace('_', '-')}",
            "title": HTTPStatus(self.status).phrase if self.status != 499 else "Client Closed",
            "status": self.status,
            "detail": self.detail,
            "code": self.code.name,
            "field": field,
            "rule": rule,
        }
        if self.reason:
            out["reason"] = self.reason
        if self.leader:
            out["leader"] = self.leader
        # google.rpc's JSON form ("@type": type.googleapis.com/google.rpc.ErrorInfo, ...), as
        # grpc-gateway writes a status's details.
        details = [json_format.MessageToDict(d) for d in self.status_proto().details]
        if details:
            out["details"] = details
        return out

    def response(self) -> web.Response:
        headers = dict(self.headers)
        if self.status == 401:  # RFC 6750: say which scheme the credentials must use
            headers.setdefault("WWW-Authenticate", 'Bearer realm="gnomon"')
        return web.Response(status=self.status, text=json.dumps(self.body()),
                            content_type=PROBLEM_TYPE, headers=headers)
