"""Forwarding: every method of the gnomon.v1 services, as bytes, to the leader.

Rules:
- Bodies are forwarded as they came (no parsing, no re-encoding): the node validates them and
  answers with the field and the rule, as it does to a direct caller.
- The caller's metadata (its bearer token, request ids) goes with the call; the node decides.
- A call refused with a leader hint is sent again to the named node, at most `max_hops`
  times: a node refuses so before it does anything. Any other failure is the caller's answer,
  with the node's status, details and trailers (the SDK's errors read `gnomon-field` & co.).
- A stream is redirected only while the node has answered nothing yet: the client messages
  sent so far (a worker's Hello) are sent again to the leader. Once the node has answered,
  the stream is the caller's; when the node ends it on a leader change, the caller is told to
  come back here at once (`gnomon-leader` = this gateway), never to go to a node.
- Bounds: `max_calls` in flight (RESOURCE_EXHAUSTED beyond); a stream reads at most
  `stream_buffer_messages` of the caller's messages ahead of the node (then it stops reading:
  back-pressure to the caller, not memory).

Loop thread only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import grpc.aio

from gnomon.gateway.config import GatewayConfig
from gnomon.gateway.metrics import GatewayMetrics
from gnomon.gateway.relay import Relay
from gnomon.gateway.upstream import (
    LEADER_KEY,
    STATUS_BY_NUMBER,
    Upstream,
    caller_trailers,
    leader_hint,
)
from gnomon.v1 import api_pb2, worker_pb2

log = logging.getLogger("gnomon.gateway")

# Metadata that belongs to one hop (HTTP/2 pseudo-headers, gRPC's own, the transport's).
_HOP_KEYS = ("user-agent", "content-type", "te", "host", "grpc-", ":")
_END = object()  # the caller finished sending
CONNECT = "/gnomon.v1.WorkerService/Connect"


def forwarded(metadata: Any) -> tuple[tuple[str, str | bytes], ...]:
    """The caller's metadata a node should see."""
    return tuple((k, v) for k, v in metadata or () if not k.startswith(_HOP_KEYS))


def _redirect(err: grpc.aio.AioRpcError, addr: str) -> str:
    """The leader a refusal names, if it is a refusal to follow."""
    if err.code() != grpc.StatusCode.UNAVAILABLE:
        return ""
    hint = leader_hint(err.trailing_metadata())
    return hint if hint and hint != addr else ""


class Proxy:
    """The generic handler's methods (server.py registers them for every RPC)."""

    def __init__(self, cfg: GatewayConfig, upstream: Upstream,
                 metrics: GatewayMetrics | None = None, relay: Relay | None = None):
        """`relay`: worker streams go over it (relay.py); without, each is a stream of its
        own to the leader, forwarded as any other."""
        self.cfg = cfg
        self.upstream = upstream
        self.metrics = metrics or GatewayMetrics()
        self.relay = relay
        self.in_flight = 0

    def admit(self) -> bool:
        """Count a call in (False: at max_calls, refused and counted as such)."""
        if self.in_flight >= self.cfg.max_calls:
            self.metrics.refused.labels("max_calls").inc()
            return False
        self.in_flight += 1
        self.metrics.in_flight.set(self.in_flight)
        return True

    def release(self) -> None:
        self.in_flight -= 1
        self.metrics.in_flight.set(self.in_flight)

    def refusal(self) -> str:
        return (f"gateway: {self.in_flight} calls in flight, the most max_calls "
                f"({self.cfg.max_calls}) allows; retry later")

    @contextlib.asynccontextmanager
    async def _admitted(self, context: Any, path: str, stream: bool) -> AsyncIterator[None]:
        if not self.admit():
            self.metrics.calls.labels(path, "RESOURCE_EXHAUSTED").inc()
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, self.refusal(),
                                trailing_metadata=(("retry-after-ms", "1000"),))
        if stream:
            self.metrics.streams.inc()
        code = "OK"
        try:
            yield
        except grpc.aio.AbortError:
            code = _last_code(context)
            raise
        except (asyncio.CancelledError, GeneratorExit):  # the caller went away
            code = "CANCELLED"
            raise
        finally:
            self.release()
            if stream:
                self.metrics.streams.dec()
            self.metrics.calls.labels(path, code).inc()

    async def _fail(self, context: Any, err: grpc.aio.AioRpcError) -> None:
        await context.abort(err.code(), err.details() or "",
                            trailing_metadata=caller_trailers(err.trailing_metadata(),
                                                        self.cfg.hint_addr))

    async def _follow_or_fail(self, err: grpc.aio.AioRpcError, addr: str, context: Any,
                              replayable: bool = True) -> None:
        """Returns when `err` is a refusal to follow (the leader it names is learnt: send
        again); otherwise the caller gets `err` (abort raises)."""
        hint = _redirect(err, addr)
        if hint and replayable:
            self.metrics.redirects.labels("grpc").inc()
            self.upstream.learn(hint)
            return
        self._note(err, addr)
        await self._fail(context, err)
        raise AssertionError("abort returned")

    async def _too_many_hops(self, context: Any) -> None:
        await context.abort(grpc.StatusCode.UNAVAILABLE,
                            f"gateway: redirected {self.cfg.max_hops} times; try again",
                            trailing_metadata=((LEADER_KEY, self.cfg.hint_addr),))

    def _method(self, addr: str, path: str, kind: str) -> Any:
        """The node's multi-callable for `path`, bytes in and out (no serializers)."""
        return getattr(self.upstream.channel(addr), kind)(path)

    def _note(self, err: grpc.aio.AioRpcError, addr: str) -> None:
        if err.code() == grpc.StatusCode.UNAVAILABLE and not leader_hint(err.trailing_metadata()):
            self.upstream.unreachable(addr)

    # --- unary -----------------------------------------------------------------------------

    async def unary_unary(self, path: str, request: bytes, context: Any) -> bytes:
        started = time.monotonic()
        async with self._admitted(context, path, False):
            metadata = forwarded(context.invocation_metadata())
            for _hop in range(self.cfg.max_hops + 1):
                addr = self.upstream.target()
                call: Any = self._method(addr, path, "unary_unary")(
                    request, metadata=metadata, timeout=context.time_remaining())
                try:
                    response = await call
                except grpc.aio.AioRpcError as err:
                    await self._follow_or_fail(err, addr, context)
                    continue
                context.set_trailing_metadata(caller_trailers(await call.trailing_metadata(),
                                                        self.cfg.hint_addr))
                self.metrics.forward_seconds.observe(time.monotonic() - started)
                return response
            await self._too_many_hops(context)
            raise AssertionError("abort returned")

    async def unary_stream(self, path: str, request: bytes, context: Any) -> AsyncIterator[bytes]:
        async with self._admitted(context, path, True):
            metadata = forwarded(context.invocation_metadata())
            for _hop in range(self.cfg.max_hops + 1):
                addr = self.upstream.target()
                call: Any = self._method(addr, path, "unary_stream")(
                    request, metadata=metadata, timeout=context.time_remaining())
                try:
                    first = await call.read()
                except grpc.aio.AioRpcError as err:
                    await self._follow_or_fail(err, addr, context)
                    continue
                try:
                    message = first
                    while message is not grpc.aio.EOF:
                        yield message
                        message = await call.read()
                except grpc.aio.AioRpcError as err:
                    await self._fail(context, err)
                return
            await self._too_many_hops(context)

    # --- bidirectional ---------------------------------------------------------------------

    async def stream_stream(self, path: str, requests: AsyncIterator[bytes],
                            context: Any) -> AsyncIterator[bytes]:
        async with self._admitted(context, path, True):
            if path == CONNECT and self.relay is not None:  # the multiplexed upstream
                metadata = forwarded(context.invocation_metadata())
                async for message in self.relay.connect(requests, context, metadata):
                    yield message
                return
            inbox: asyncio.Queue[Any] = asyncio.Queue(self.cfg.stream_buffer_messages)
            reader = asyncio.create_task(_read_into(requests, inbox))
            try:
                async for message in self._relay(path, inbox, context):
                    yield message
            finally:
                reader.cancel()

    async def _relay(self, path: str, inbox: asyncio.Queue[Any],
                     context: Any) -> AsyncIterator[bytes]:
        metadata = forwarded(context.invocation_metadata())
        replay = _Replay(self.cfg.stream_buffer_messages)
        for _hop in range(self.cfg.max_hops + 1):
            addr = self.upstream.target()
            call: Any = self._method(addr, path, "stream_stream")(
                metadata=metadata, timeout=context.time_remaining())
            writer = asyncio.create_task(_write_from(inbox, call, replay))
            try:
                try:
                    first = await call.read()
                    if first is grpc.aio.EOF:
                        code = await call.code()
                        if code != grpc.StatusCode.OK:
                            raise grpc.aio.AioRpcError(
                                code, await call.initial_metadata(),
                                await call.trailing_metadata(), await call.details())
                except grpc.aio.AioRpcError as err:
                    await self._follow_or_fail(err, addr, context, replay.replayable)
                    continue
                if first is grpc.aio.EOF:
                    await self._ended(call, context)
                    return
                replay.answered()
                try:
                    message = first
                    while message is not grpc.aio.EOF:  # read(): the API the writer mixes in
                        yield message
                        message = await call.read()
                except grpc.aio.AioRpcError as err:
                    self._note(err, addr)
                    await self._fail(context, err)
                    return
                await self._ended(call, context)
                return
            finally:
                await _stop(writer)
                call.cancel()
        await self._too_many_hops(context)

    async def _ended(self, call: Any, context: Any) -> None:
        """The node ended the stream: the caller gets its status and trailers."""
        code = await call.code()
        trailers = caller_trailers(await call.trailing_metadata(), self.cfg.hint_addr)
        if code != grpc.StatusCode.OK:
            await context.abort(code, await call.details() or "", trailing_metadata=trailers)
        context.set_trailing_metadata(trailers)


def _last_code(context: Any) -> str:
    """The status an aborted call ended with (grpc.aio keeps it on the context)."""
    code = context.code() if hasattr(context, "code") else None
    if isinstance(code, grpc.StatusCode):
        return code.name
    known = STATUS_BY_NUMBER.get(code) if isinstance(code, int) else None
    return known.name if known is not None else "UNKNOWN"


class _Replay:
    """The caller's messages sent before the node's first answer: sent again to the leader
    when the node refuses with a hint. At most `limit`; beyond, the stream is not replayed."""

    def __init__(self, limit: int):
        self.limit = limit
        self.messages: list[Any] = []
        self.recording = True
        self.replayable = True

    def record(self, message: Any) -> None:
        if not self.recording:
            return
        if len(self.messages) >= self.limit:
            self.recording = self.replayable = False
            self.messages.clear()
            return
        self.messages.append(message)

    def answered(self) -> None:
        self.recording = self.replayable = False
        self.messages.clear()


async def _read_into(requests: AsyncIterator[bytes], inbox: asyncio.Queue[Any]) -> None:
    """The caller's messages into `inbox` (bounded: a full inbox stops the reading)."""
    async for message in requests:
        await inbox.put(message)
    await inbox.put(_END)


async def _write_from(inbox: asyncio.Queue[Any], call: Any, replay: _Replay) -> None:
    """What an earlier node refused (replay), then `inbox`, to the node's call."""
    for message in list(replay.messages):
        if message is _END:
            await call.done_writing()
            return
        await call.write(message)
    while True:
        message = await inbox.get()
        replay.record(message)
        if message is _END:
            await call.done_writing()
            return
        await call.write(message)


async def _stop(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError,
                             asyncio.InvalidStateError):
        await task


def rpc_handlers(proxy: Proxy) -> list[grpc.GenericRpcHandler]:
    """One generic handler per gnomon.v1 service, every method forwarded as bytes."""
    handlers = []
    for module in (api_pb2, worker_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            methods = {m.name: _handler(proxy, f"/{service.full_name}/{m.name}", m)
                       for m in service.methods}
            handlers.append(grpc.method_handlers_generic_handler(service.full_name, methods))
    return handlers


def _handler(proxy: Proxy, path: str, method: Any) -> grpc.RpcMethodHandler:
    def bind(fn: Callable[..., Any]) -> Callable[..., Any]:
        # A partial, not a lambda: grpc.aio looks through it to see a coroutine or async
        # generator function.
        return functools.partial(fn, path)

    if method.client_streaming and method.server_streaming:
        return grpc.stream_stream_rpc_method_handler(bind(proxy.stream_stream))
    if method.server_streaming:
        return grpc.unary_stream_rpc_method_handler(bind(proxy.unary_stream))
    if method.client_streaming:
        raise AssertionError(f"{path}: client streaming is not in gnomon.v1")
    return grpc.unary_unary_rpc_method_handler(bind(proxy.unary_unary))
