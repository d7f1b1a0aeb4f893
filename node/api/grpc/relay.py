"""GatewayService.Relay: the worker streams of one gateway over one stream (relay.proto).

Each relayed stream is served by `WorkerServicer.serve`, exactly as a worker's own Connect,
with a `_RelayedCall` as its call: its messages are parsed only once its Open authenticated
(with the worker's own metadata and the Connect rule: a gateway never speaks for a worker);
its answers and its end go to the relay's down queue, which one writer sends as batches (one
RelayDown for whatever the streams queued meanwhile). The gateway's many heartbeats, credits
and reports arrive in few messages; the leader's per-message cost of gRPC is per batch.
A heartbeat the gateway sends as a frame (`UpFrame.heartbeat`, offered in the first
RelayDown) is renewed and answered as the RelayUp is taken, with no task switch to the
stream's reader and writer: its cost on the leader is a lookup, a renewal and a write into
the relay's down queue. It renews only the leases of the stream's own session, after the
stream's token is checked again, as a direct stream's heartbeat does.

The Relay call itself needs a `gateway` (or admin) token: the access guard (RULES) refuses
any other caller before a frame is read, so an unauthenticated caller can neither hold one
of the `max_relays` places nor make this node parse frames.

Bounds (config): `max_relays` relays at once (RESOURCE_EXHAUSTED beyond);
`relay_max_streams` streams open on one relay (an Open beyond is ended RESOURCE_EXHAUSTED);
`relay_max_frames` frames in one RelayUp (more ends the relay INVALID_ARGUMENT);
`relay_stream_buffer_messages` messages of one stream not yet taken by its servicer (beyond,
that stream ends RESOURCE_EXHAUSTED and the others go on: one flooding worker slows no other);
`relay_down_max_frames` frames queued towards the gateway (a full queue makes the streams'
writes wait: the gateway's flow control reaches them); a RelayDown carries at most
`relay_max_frames` frames and about MAX_BATCH_BYTES.

The relay ends with UNAVAILABLE and `gnomon-leader` when this node stops leading, after
every stream on it was ended so (their workers reconnect, with `held`).
Loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, NoReturn

import grpc
from google.protobuf.message import DecodeError

from gnomon.node.api.grpc.access import current_principal, set_principal
from gnomon.node.api.grpc.base import NodeApi
from gnomon.node.api.grpc.decode import explain, refuse_stream
from gnomon.node.api.grpc.errors import NotLeader, abort
from gnomon.node.api.grpc.worker import WorkerServicer
from gnomon.node.security.admission import RETRY_AFTER_KEY
from gnomon.node.security.auth import AuthError, Principal
from gnomon.v1 import relay_pb2, relay_pb2_grpc, worker_pb2

log = logging.getLogger(__name__)

# The worker stream's method: a relayed stream passes its access rule.
CONNECT = "/gnomon.v1.WorkerService/Connect"
_CLOSED = object()  # the worker finished sending, went away, or its stream ended here
# Bytes of frames in one RelayDown, about: a gateway takes messages of at most 16 MiB.
MAX_BATCH_BYTES = 4 << 20

Authenticate = Callable[[tuple[tuple[str, str], ...], str], Principal]


class _Refused(Exception):
    """A frame that breaks the relay's rules: the relay ends INVALID_ARGUMENT."""


class _RelayedCall:
    """What WorkerServicer.serve calls on a gRPC context, for one relayed stream."""

    def __init__(self, relay: _Relay, stream_id: int, limit: int):
        self.relay = relay
        self.stream_id = stream_id
        self.limit = limit
        self.inbox: asyncio.Queue[Any] = asyncio.Queue()  # bounded by `limit` in `take`
        self.ended = False
        self.task: asyncio.Task[None] | None = None
        self.stream: Any = None  # the servicer's stream, once its Welcome is queued

    async def write(self, msg: worker_pb2.ServerMessage) -> None:
        if self.ended:
            raise asyncio.CancelledError  # as grpc.aio does once the call is over
        await self.relay.send(relay_pb2.DownFrame(stream_id=self.stream_id,
                                                  message=msg.SerializeToString()))

    async def abort(self, code: grpc.StatusCode, details: str = "",
                    trailing_metadata: Any = ()) -> NoReturn:
        await self.end(code, details, trailing_metadata)
        raise grpc.aio.AbortError(details)

    async def end(self, code: grpc.StatusCode, details: str = "",
                  trailing_metadata: Any = ()) -> None:
        """Send this stream's end once (the gateway ends the worker's call with it)."""
        if self.ended:
            return
        self.ended = True
        self.relay.forget(self.stream_id)
        trailers = [relay_pb2.RelayHeader(key=k, value=v if isinstance(v, str) else v.decode())
                    for k, v in trailing_metadata or ()]
        await self.relay.send(relay_pb2.DownFrame(stream_id=self.stream_id, end=relay_pb2.RelayEnd(
            code=code.value[0], details=details, trailers=trailers)))

    def take(self, item: Any) -> bool:
        """Queue a frame's message for the servicer; False at the stream's bound."""
        if self.inbox.qsize() >= self.limit and item is not _CLOSED:
            return False
        self.inbox.put_nowait(item)
        return True

    async def requests(self) -> AsyncIterator[worker_pb2.WorkerMessage]:
        """The stream's messages, parsed; a malformed one ends it as the decode guard does."""
        drain_s = self.relay.drain_s
        while True:
            item = await self.inbox.get()
            if item is _CLOSED:
                return
            try:
                msg = worker_pb2.WorkerMessage.FromString(item)
            except DecodeError:
                await refuse_stream(self.requests(), self, explain(
                    worker_pb2.WorkerMessage.DESCRIPTOR, item), drain_s)  # type: ignore[arg-type]
            yield msg


class _Relay:
    """One gateway's relay: its open streams and the queue towards the gateway."""

    def __init__(self, node: NodeApi, down_limit: int):
        self.node = node
        self.calls: dict[int, _RelayedCall] = {}
        self.down: asyncio.Queue[relay_pb2.DownFrame] = asyncio.Queue(down_limit)
        self.drain_s = node.config.stream_refusal_drain_ms / 1000
        self.opened = 0  # the highest stream id opened: ids are never reused on a relay

    async def send(self, frame: relay_pb2.DownFrame) -> None:
        await self.down.put(frame)

    def forget(self, stream_id: int) -> None:
        self.calls.pop(stream_id, None)

    async def write_loop(self, context: Any, max_frames: int) -> None:
        """Send the down queue in batches: whatever is queued when a write can go out."""
        while True:
            frames = [await self.down.get()]
            size = frames[0].ByteSize()
            while len(frames) < max_frames and not self.down.empty() and size < MAX_BATCH_BYTES:
                frames.append(self.down.get_nowait())
                size += frames[-1].ByteSize()
            await context.write(relay_pb2.RelayDown(frames=frames))


class RelayServicer(relay_pb2_grpc.GatewayServiceServicer):
    def __init__(self, node: NodeApi, workers: WorkerServicer, authenticate: Authenticate):
        """`authenticate(metadata, method)` is the access guard's: the principal a stream's
        own metadata stands for, checked against `method`'s rule; raises AuthError."""
        self.node = node
        self.workers = workers
        self.authenticate = authenticate
        self.relays: set[_Relay] = set()
        self._lost = asyncio.Event()

    def leader_lost(self) -> None:
        """This node stopped leading: every relay ends (after its streams did)."""
        self._lost.set()
        self._lost = asyncio.Event()

    async def Relay(self, request_iterator, context):  # noqa: N802
        """One gateway's relay (the access guard admitted its gateway or admin token)."""
        cfg = self.node.config
        if not self.node.leadership.fresh():
            await abort(context, NotLeader(self.node.leader_grpc_addr()))
        if len(self.relays) >= cfg.max_relays:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"relay: {len(self.relays)} relays open, the most max_relays "
                                f"({cfg.max_relays}) allows",
                                trailing_metadata=((RETRY_AFTER_KEY, "1000"),))
        relay = _Relay(self.node, cfg.relay_down_max_frames)
        self.relays.add(relay)  # before any await: two relays never both take the last place
        try:
            # Accepted: the gateway opens streams, and may send heartbeats as frames.
            await context.write(relay_pb2.RelayDown(heartbeat_frames=True))
            await self._serve_relay(relay, request_iterator, context, current_principal())
        finally:
            self.relays.discard(relay)
        if not self.node.leadership.ready:
            await abort(context, NotLeader(self.node.leader_grpc_addr()))

    async def _serve_relay(self, relay: _Relay, requests: Any, context: Any,
                           gateway: Principal) -> None:
        """Until the gateway stops sending, the relay breaks, its token is revoked or
        expires, or this node stops leading."""
        lost = asyncio.ensure_future(self._lost.wait())
        writer = asyncio.create_task(relay.write_loop(context, self.node.config.relay_max_frames))
        reader = asyncio.create_task(self._read(relay, requests, context, gateway))
        try:
            await asyncio.wait({writer, reader, lost}, return_when=asyncio.FIRST_COMPLETED)
            if reader.done() and not reader.cancelled() and reader.exception() is not None:
                raise reader.exception()  # type: ignore[misc]
        finally:
            for task in (reader, lost):
                task.cancel()
            self._end_all(relay)
            writer.cancel()

    async def _read(self, relay: _Relay, requests: Any, context: Any,
                    gateway: Principal) -> None:
        limit = self.node.config.relay_max_frames
        async for up in requests:
            try:  # at every message, as a worker stream at every heartbeat
                self.workers.revalidate(gateway)
            except AuthError as exc:
                await refuse_stream(requests, context, f"relay: {exc}", relay.drain_s,
                                    grpc.StatusCode.UNAUTHENTICATED)
            if len(up.frames) > limit:
                await refuse_stream(requests, context, f"frames: {len(up.frames)} frames in "
                                    f"one message; at most {limit} (relay_max_frames)",
                                    relay.drain_s)
            try:
                for frame in up.frames:
                    await self._take(relay, frame)
            except _Refused as exc:
                await refuse_stream(requests, context, str(exc), relay.drain_s)

    async def _take(self, relay: _Relay, frame: relay_pb2.UpFrame) -> None:
        kind = frame.WhichOneof("frame")
        call = relay.calls.get(frame.stream_id)
        if kind == "open":
            if frame.stream_id <= relay.opened:
                raise _Refused(f"frames.stream_id: {frame.stream_id} opened after "
                               f"{relay.opened}; ids increase and are never reused on a relay")
            relay.opened = frame.stream_id
            await self._open(relay, frame)
        elif call is None:
            return  # ended here already: the gateway learns it from the end frame
        elif kind == "message":
            await self._message(call, frame.message)
        elif kind == "heartbeat":
            await self._heartbeat(call, frame.heartbeat)
        elif kind == "close":
            call.take(_CLOSED)

    async def _message(self, call: _RelayedCall, message: bytes) -> None:
        if not call.take(message):
            await self._overflow(call)

    async def _heartbeat(self, call: _RelayedCall, heartbeat: worker_pb2.Heartbeat) -> None:
        """Renew now and queue the ack towards the gateway; a heartbeat before the stream's
        Welcome (or one the servicer must refuse) goes the way of its other messages."""
        if call.stream is not None and not call.ended:
            ack = self.workers.relayed_heartbeat(call.stream, heartbeat)
            if ack is not None:
                await call.write(ack)
                return
        await self._message(call, worker_pb2.WorkerMessage(
            heartbeat=heartbeat).SerializeToString())

    async def _open(self, relay: _Relay, frame: relay_pb2.UpFrame) -> None:
        cfg = self.node.config
        call = _RelayedCall(relay, frame.stream_id, cfg.relay_stream_buffer_messages)
        if len(relay.calls) >= cfg.relay_max_streams:
            call.relay.calls[frame.stream_id] = call
            await call.end(grpc.StatusCode.RESOURCE_EXHAUSTED,
                           f"relay: {len(relay.calls) - 1} worker streams on this relay, the "
                           f"most relay_max_streams ({cfg.relay_max_streams}) allows")
            return
        metadata = tuple((h.key, h.value) for h in frame.open.metadata)
        relay.calls[frame.stream_id] = call
        try:
            principal = self.authenticate(metadata, CONNECT)
        except AuthError as exc:
            await call.end(getattr(grpc.StatusCode, exc.code), str(exc))
            return
        call.task = self.node.supervisor.spawn(self._serve(call, principal),
                                               name=f"relayed-{frame.stream_id}")

    async def _serve(self, call: _RelayedCall, principal: Principal) -> None:
        set_principal(principal, CONNECT)
        try:
            await self.workers.serve(call.requests(), call, principal,
                                     welcomed=lambda stream: setattr(call, "stream", stream))
        except grpc.aio.AbortError:
            return  # its end is sent
        except asyncio.CancelledError:
            return  # the relay ended
        except Exception as exc:  # noqa: BLE001 - as grpc.aio would: the stream ends UNKNOWN
            log.exception("relayed worker stream %d failed", call.stream_id)
            await call.end(grpc.StatusCode.UNKNOWN, f"relayed stream failed: {exc!r}")
            return
        await call.end(grpc.StatusCode.OK)

    async def _overflow(self, call: _RelayedCall) -> None:
        detail = (f"worker stream: {call.limit} messages relayed and not yet taken "
                  "(relay_stream_buffer_messages); the worker sends faster than the leader "
                  "takes its messages")
        log.warning("relayed worker stream %d ended: %s", call.stream_id, detail)
        call.take(_CLOSED)
        await call.end(grpc.StatusCode.RESOURCE_EXHAUSTED, detail)

    @staticmethod
    def _end_all(relay: _Relay) -> None:
        """Stop serving every stream of a relay that ends (the gateway ends their workers'
        calls: they reconnect with `held`, as after any lost stream)."""
        for call in sorted(relay.calls.values(), key=lambda c: c.stream_id):
            call.ended = True
            call.take(_CLOSED)
            if call.task is not None:
                call.task.cancel()
        relay.calls.clear()
