"""The decode guard: a request whose bytes do not parse is INVALID_ARGUMENT, not UNKNOWN.

grpc deserializes a request before any servicer code runs; a `DecodeError` there (invalid
UTF-8 in a string field, a truncated message) becomes UNKNOWN "Unexpected DecodeError". The
`DecodeGuard` interceptor wraps every method's `request_deserializer` so that a failure is a
value (`Malformed`), and the method's behaviour aborts with INVALID_ARGUMENT and a message that
names the field and the rule: `spec.tasks[0].queue: not valid UTF-8 (byte 0xff at offset 3)`.
On a request stream the bad message ends the stream the same way, once the client stopped
writing (`refuse_stream`: what it still sends is read and dropped, up to its half-close or a
time bound): a status sent while one of its writes is in flight fails that write, and an
asyncio client then reports INTERNAL "Internal error from Core" instead of the status.

The parser only says *that* the bytes are bad; `explain` walks the wire format driven by the
message descriptor to say *where*. It runs only for bytes the parser already refused.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, NoReturn, Protocol

import grpc
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError

from gnomon.node.api.grpc import handlers

__all__ = ["DecodeGuard", "Malformed", "drain", "explain", "guard_handler", "refuse_stream"]

log = logging.getLogger(__name__)

# Wire types.
VARINT, I64, LEN, SGROUP, EGROUP, I32 = 0, 1, 2, 3, 4, 5
MAX_DEPTH = 100  # upb's default recursion limit
# The default of Config.stream_refusal_drain_ms, in seconds.
DEFAULT_DRAIN_S = 1.0
_F = FieldDescriptor
_FIXED64 = {_F.TYPE_DOUBLE, _F.TYPE_FIXED64, _F.TYPE_SFIXED64}
_FIXED32 = {_F.TYPE_FLOAT, _F.TYPE_FIXED32, _F.TYPE_SFIXED32}
_LEN_TYPES = {_F.TYPE_STRING, _F.TYPE_BYTES, _F.TYPE_MESSAGE}


class Malformed:
    """What the guarded deserializer returns for bytes that do not parse."""

    __slots__ = ("detail",)

    def __init__(self, detail: str) -> None:
        self.detail = detail

    def __repr__(self) -> str:
        return f"Malformed({self.detail!r})"


class WireError(Exception):
    """Where the walk stopped: `path` (a field path, "" for the top level) and the rule."""

    def __init__(self, path: str, rule: str, utf8: bool = False) -> None:
        super().__init__(f"{path}: {rule}")
        self.path, self.rule, self.utf8 = path, rule, utf8


# --- the wire-format walker ----------------------------------------------------------------


def explain(descriptor: Descriptor | None, data: bytes) -> str:
    """Why `data` is not a valid `descriptor` message, as `"<field>: <rule>"`.

    Invalid UTF-8 names the string field (`spec.name: not valid UTF-8 (byte 0xff at offset
    3)`); anything else is `request: not a valid <Message> (<where>: <what>)`.
    """
    name = descriptor.full_name if descriptor is not None else "message"
    try:
        _walk(descriptor, data, 0, len(data), "", 0, None)
    except WireError as exc:
        if exc.utf8:
            return f"{exc.path}: {exc.rule}"
        where = f"{exc.path}: " if exc.path else ""
        return f"request: not a valid {name} ({where}{exc.rule})"
    # The parser refused what the walker accepts (a rule it does not model).
    return f"request: not a valid {name} (malformed protobuf)"


def _walk(desc: Descriptor | None, data: bytes, pos: int, end: int, path: str, depth: int,
          group: int | None) -> int:
    """Check the fields in data[pos:end]; return where the message (or group) ended."""
    if depth > MAX_DEPTH:
        raise WireError(path, f"nested deeper than {MAX_DEPTH} levels")
    seen: dict[int, int] = {}
    while pos < end:
        tag_at = pos
        tag, pos = _varint(data, pos, end, path, max_bytes=5)
        if tag >> 32:
            raise WireError(path, f"tag at byte {tag_at} does not fit 32 bits")
        number, wire = tag >> 3, tag & 7
        if wire == EGROUP:
            if number == group:
                return pos
            raise WireError(path, f"unexpected end-group tag at byte {tag_at}")
        if number == 0:
            raise WireError(path, f"field number 0 at byte {tag_at}")
        field = desc.fields_by_number.get(number) if desc is not None else None
        if field is None or not _wire_matches(field, wire):
            # The parser keeps it as an unknown field: only its framing must be sound.
            pos = _skip(data, pos, end, wire, number, path, depth, tag_at)
            continue
        index = seen.get(number, 0)
        seen[number] = index + 1
        pos = _field(field, data, pos, end, _path(path, field, index), depth, wire)
    if group is not None:
        raise WireError(path, f"group {group} is not closed before byte {end}")
    return pos


def _path(parent: str, field: FieldDescriptor, index: int) -> str:
    name = f"{parent}.{field.name}" if parent else field.name
    return f"{name}[{index}]" if field.is_repeated else name


def _wire_matches(field: FieldDescriptor, wire: int) -> bool:
    if field.type in _LEN_TYPES:
        return wire == LEN
    if field.type == _F.TYPE_GROUP:
        return wire == SGROUP
    natural = I64 if field.type in _FIXED64 else I32 if field.type in _FIXED32 else VARINT
    return wire == natural or (field.is_repeated and wire == LEN)  # packed


def _field(field: FieldDescriptor, data: bytes, pos: int, end: int, path: str, depth: int,
           wire: int) -> int:
    if wire == SGROUP:
        return _walk(field.message_type, data, pos, end, path, depth + 1, field.number)
    if wire != LEN:
        return _skip(data, pos, end, wire, field.number, path, depth, pos)
    start, stop = _length(data, pos, end, path)
    if field.type == _F.TYPE_STRING:
        _check_utf8(data[start:stop], path)
    elif field.type == _F.TYPE_MESSAGE:
        _walk(field.message_type, data, start, stop, path, depth + 1, None)
    elif field.type != _F.TYPE_BYTES:
        _packed(field, data, start, stop, path)
    return stop


def _packed(field: FieldDescriptor, data: bytes, pos: int, end: int, path: str) -> None:
    # Packed varints must each be whole. (gnomon has no packed fixed-width fields; a ragged
    # one would get the generic "malformed protobuf" answer.)
    if field.type in _FIXED64 or field.type in _FIXED32:
        return
    while pos < end:
        _, pos = _varint(data, pos, end, path)


def _check_utf8(value: bytes, path: str) -> None:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireError(path, f"not valid UTF-8 (byte 0x{value[exc.start]:02x} at offset "
                              f"{exc.start})", utf8=True) from None


def _skip(data: bytes, pos: int, end: int, wire: int, number: int, path: str, depth: int,
          tag_at: int) -> int:
    if wire == VARINT:
        return _varint(data, pos, end, path)[1]
    if wire in (I64, I32):
        size = 8 if wire == I64 else 4
        if pos + size > end:
            raise WireError(path, f"truncated {size}-byte value at byte {pos}")
        return pos + size
    if wire == LEN:
        return _length(data, pos, end, path)[1]
    if wire == SGROUP:
        return _walk(None, data, pos, end, path, depth + 1, number)
    raise WireError(path, f"invalid wire type {wire} at byte {tag_at}")


def _length(data: bytes, pos: int, end: int, path: str) -> tuple[int, int]:
    at = pos
    size, pos = _varint(data, pos, end, path, max_bytes=5)
    if pos + size > end:
        raise WireError(path, f"length {size} at byte {at} runs past the end at byte {end}")
    return pos, pos + size


def _varint(data: bytes, pos: int, end: int, path: str, max_bytes: int = 10) -> tuple[int, int]:
    at, value, shift = pos, 0, 0
    while pos < end and pos - at < max_bytes:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value & ((1 << 64) - 1), pos
        shift += 7
    raise WireError(path, f"{'truncated' if pos >= end else 'over-long'} varint at byte {at}")


# --- the interceptor -----------------------------------------------------------------------


def guard_handler(handler: grpc.RpcMethodHandler, descriptor: Descriptor | None,
                  drain_s: float = DEFAULT_DRAIN_S) -> grpc.RpcMethodHandler:
    """`handler` whose requests that do not parse end the call with INVALID_ARGUMENT (on a
    request stream after `drain`ing it for at most `drain_s`).

    Synchronous behaviours (none in gnomon) are returned unchanged.
    """
    behaviour = handlers.behaviour(handler)
    request_deserializer = handler.request_deserializer
    if request_deserializer is None:
        return handler  # requests arrive as bytes: nothing parses them
    if not (inspect.iscoroutinefunction(behaviour) or inspect.isasyncgenfunction(behaviour)):
        return handler
    deserialize = _guarded_deserializer(request_deserializer, descriptor)
    wrapped = (_stream_behaviour(behaviour, drain_s) if handler.request_streaming
               else _unary_behaviour(behaviour))
    return handlers.rebuild(handler, wrapped, request_deserializer=deserialize)


def _guarded_deserializer(deserialize: Callable[[bytes], Any],
                          descriptor: Descriptor | None) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except DecodeError:
            return Malformed(explain(descriptor, data))

    return parse


async def _refuse(context: grpc.aio.ServicerContext, bad: Malformed) -> None:
    log.debug("malformed request refused: %s", bad.detail)
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, bad.detail)


async def drain(requests: AsyncIterator, timeout_s: float) -> None:
    """Read and drop what is left of a request stream: up to the client's half-close, for
    at most `timeout_s` (a client that keeps its stream open and idle is not waited for)."""
    if timeout_s <= 0:
        return
    try:
        async with asyncio.timeout(timeout_s):
            async for _ in requests:
                pass
    except TimeoutError:
        pass
    except grpc.aio.AbortError:
        raise
    except Exception:  # noqa: BLE001 - the stream broke: there is nothing left to wait for
        pass


class Aborting(Protocol):
    """What refuse_stream needs of a call: a grpc.aio context, or a relayed stream."""

    async def abort(self, code: grpc.StatusCode, details: str = "",
                    trailing_metadata: Any = ()) -> NoReturn: ...


async def refuse_stream(requests: AsyncIterator, context: Aborting,
                        detail: str, drain_s: float,
                        code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT) -> NoReturn:
    """End a request stream with `code` once the client stopped writing (see `drain`).
    Raises what `context.abort` raises."""
    await drain(requests, drain_s)
    await context.abort(code, detail)


def _unary_behaviour(behaviour: Callable) -> Callable:
    if inspect.isasyncgenfunction(behaviour):
        async def stream_out(request, context):
            if isinstance(request, Malformed):
                await _refuse(context, request)
            async for response in behaviour(request, context):
                yield response

        return stream_out

    async def unary_out(request, context):
        if isinstance(request, Malformed):
            await _refuse(context, request)
        return await behaviour(request, context)

    return unary_out


def _stream_behaviour(behaviour: Callable, drain_s: float) -> Callable:
    async def checked(requests: AsyncIterator, context) -> AsyncIterator:
        # abort() sends the status at once, even if the handler swallows the AbortError.
        async for request in requests:
            if isinstance(request, Malformed):
                log.debug("malformed request refused: %s", request.detail)
                await refuse_stream(requests, context, request.detail, drain_s)
            yield request

    if inspect.isasyncgenfunction(behaviour):
        async def stream_out(requests, context):
            async for response in behaviour(checked(requests, context), context):
                yield response

        return stream_out

    async def unary_out(requests, context):
        return await behaviour(checked(requests, context), context)

    return unary_out


def _input_type(method: str) -> Descriptor | None:
    """The request type of "/package.Service/Method" from the default descriptor pool."""
    service, _, name = method.lstrip("/").partition("/")
    try:
        return descriptor_pool.Default().FindServiceByName(service).methods_by_name[name] \
            .input_type
    except KeyError:
        return None


class DecodeGuard(grpc.aio.ServerInterceptor):
    """Server interceptor: every method's undecodable requests become INVALID_ARGUMENT."""

    def __init__(self, drain_s: float = DEFAULT_DRAIN_S) -> None:
        self._drain_s = drain_s
        self._cache: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        method = handler_call_details.method
        cached = self._cache.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        guarded = guard_handler(handler, _input_type(method), self._drain_s)
        self._cache[method] = (handler, guarded)
        return guarded
