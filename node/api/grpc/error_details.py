"""Rich error details: google.rpc.Status beside the gnomon trailers, made in one place.

Every failed call keeps its trailers (`gnomon-reason`, `gnomon-leader`, `retry-after-ms`) and
also carries `grpc-status-details-bin`: a google.rpc.Status (code, message) whose details are

- ErrorInfo (domain "gnomon.dev") when the failure has a reason: the `gnomon-reason`, or
  NOT_LEADER on an UNAVAILABLE that names the leader (metadata `leader`);
- RetryInfo when a retry delay is known: `retry-after-ms` (rate limits, admission control),
  or 1 s on UNAVAILABLE (no leader yet, or ask the leader);
- BadRequest on INVALID_ARGUMENT whose message is "field: rule" (the field and the rule).

`RichErrorDetails` (the outermost server interceptor) hands every handler a context whose
`abort` adds the trailer, so no servicer builds details; the HTTP port builds the same
Status from a Problem (node/api/http/problems.py). grpcio-status's
`rpc_status.from_call(call)` decodes it on the client.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]

from gnomon.node.api.grpc import handlers
from gnomon.node.api.grpc.errors import LEADER_METADATA_KEY, REASON_METADATA_KEY
from gnomon.node.security.admission import RETRY_AFTER_KEY

DETAILS_KEY = "grpc-status-details-bin"
DOMAIN = "gnomon.dev"
NOT_LEADER = "NOT_LEADER"
# What a client waits before retrying an UNAVAILABLE (the HTTP port's Retry-After: 1).
UNAVAILABLE_RETRY_MS = 1000

_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\[\]-]*$")


def split_detail(detail: str) -> tuple[str, str]:
    """("field", "rule") of a "field: rule" message; ("", detail) when it names no field."""
    head, sep, rest = detail.partition(": ")
    if sep and _FIELD.match(head):
        return head, rest
    return "", detail


def rich_status(code: grpc.StatusCode, message: str, *, reason: str = "", leader: str = "",
                retry_after_ms: int | None = None) -> status_pb2.Status:
    """The google.rpc.Status of a failure (its details as the module docstring says)."""
    status = status_pb2.Status(code=code.value[0], message=message)
    for detail in _details(code, message, reason, leader, retry_after_ms):
        packed = any_pb2.Any()
        packed.Pack(detail)
        status.details.append(packed)
    return status


def _details(code: grpc.StatusCode, message: str, reason: str, leader: str,
             retry_after_ms: int | None) -> list[Any]:
    out: list[Any] = []
    if not reason and code == grpc.StatusCode.UNAVAILABLE and leader:
        reason = NOT_LEADER
    if reason:
        info = error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN)
        if leader:
            info.metadata["leader"] = leader
        out.append(info)
    if retry_after_ms is None and code == grpc.StatusCode.UNAVAILABLE:
        retry_after_ms = UNAVAILABLE_RETRY_MS
    if retry_after_ms is not None:
        delay = duration_pb2.Duration()
        delay.FromMilliseconds(retry_after_ms)
        out.append(error_details_pb2.RetryInfo(retry_delay=delay))
    field, rule = split_detail(message)
    if code == grpc.StatusCode.INVALID_ARGUMENT and field:
        out.append(error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=field, description=rule)]))
    return out


def retry_after_ms(metadata: dict[str, Any]) -> int | None:
    value = metadata.get(RETRY_AFTER_KEY)
    return int(value) if isinstance(value, str) and value.isdigit() else None


def with_details(code: grpc.StatusCode, message: str, trailing: tuple) -> tuple:
    """`trailing` and the grpc-status-details-bin trailer of this failure."""
    md = dict(trailing)
    if DETAILS_KEY in md or code == grpc.StatusCode.OK:
        return trailing
    status = rich_status(code, message, reason=md.get(REASON_METADATA_KEY, ""),
                         leader=md.get(LEADER_METADATA_KEY, ""),
                         retry_after_ms=retry_after_ms(md))
    return (*trailing, (DETAILS_KEY, status.SerializeToString()))


class RichContext:
    """A servicer context whose abort adds the details trailer; everything else is the
    wrapped context's."""

    def __init__(self, context: Any):
        self._context = context
        self._trailing: tuple = ()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    def set_trailing_metadata(self, metadata) -> None:
        self._trailing = tuple(metadata)
        self._context.set_trailing_metadata(metadata)

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata=()):
        trailing = tuple(trailing_metadata or ()) or self._trailing
        await self._context.abort(code, details, with_details(code, details, trailing))


class RichErrorDetails(grpc.aio.ServerInterceptor):
    """Server interceptor (outermost): every handler's aborts carry the rich details."""

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        behaviour = handlers.behaviour(handler)
        if inspect.isasyncgenfunction(behaviour):
            async def stream_out(request, context):
                async for response in behaviour(request, RichContext(context)):
                    yield response

            wrapped = stream_out
        else:  # a unary answer, or a stream the handler writes with context.write()
            async def answer(request, context):
                return await behaviour(request, RichContext(context))

            wrapped = answer
        return handlers.rebuild(handler, wrapped)
