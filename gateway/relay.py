"""The relay: every worker stream of this gateway over one stream to the leader (relay.proto).

A worker's `WorkerService.Connect` ends here; its messages go up as frames of the gateway's
one `GatewayService.Relay` stream, as the bytes the worker sent (the leader parses and
authenticates them, with the worker's own metadata), and the leader's frames come down to it.
One writer sends whatever the workers queued while the last write was out as one RelayUp:
the heartbeats, credits and reports of many workers in one message, so the leader pays the
per-message cost of gRPC per batch, not per worker. A worker's Heartbeat goes up parsed, as
`UpFrame.heartbeat`, when the leader offered it: the leader renews and answers it as it takes
the message, without waking the worker's stream servicer (the rest of a heartbeat's cost on
the leader, which stays the only judge of every lease).

Rules:
- The relay call carries the gateway's own token (`relay_token_file`, a `gateway` or admin
  token): the leader authenticates it before it reads a frame. Each worker stream still
  carries its worker's metadata, and the leader authenticates it as a direct Connect: the
  gateway's token gives no worker any right.
- A stream opens only on a relay that the leader accepted (its first, empty RelayDown).
- When the relay ends (leader change, the leader unreachable, the gateway stopping), every
  worker's call ends with UNAVAILABLE and `gnomon-leader` = this gateway: the workers come
  back here at once and list their leases in Hello (`held`); the relay dials the new leader.
- Bounds: a worker has at most `stream_buffer_messages` messages queued up and not yet written
  to the relay (then its call is not read: HTTP/2 flow control pushes back on it alone), and
  at most `relay_worker_buffer_messages` messages queued down and not yet read by it (beyond,
  its call ends RESOURCE_EXHAUSTED: it does not read). One RelayUp carries at most
  `relay_batch_frames` frames and about MAX_BATCH_BYTES (a larger frame goes alone).

Loop thread only.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import grpc
import grpc.aio
from google.protobuf.message import DecodeError

from gnomon.gateway.config import GatewayConfig
from gnomon.gateway.metrics import GatewayMetrics
from gnomon.gateway.upstream import (
    LEADER_KEY,
    STATUS_BY_NUMBER,
    Upstream,
    caller_trailers,
    leader_hint,
)
from gnomon.v1 import relay_pb2, worker_pb2

log = logging.getLogger("gnomon.gateway")

RELAY = "/gnomon.v1.GatewayService/Relay"
# How long a worker that connects while no relay is up waits for one before UNAVAILABLE.
READY_WAIT_S = 5.0
RETRY_MIN_S, RETRY_MAX_S = 0.05, 1.0
# Bytes of frames in one RelayUp, about: the nodes take messages of at most 16 MiB.
MAX_BATCH_BYTES = 4 << 20
_REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
# A WorkerMessage whose first field is its heartbeat (field 3, length-delimited): only such
# messages are parsed here.
_HEARTBEAT_TAG = bytes([3 << 3 | 2])


@dataclass(eq=False)
class _Worker:
    """One worker call relayed: its budget up, its queue down."""

    stream_id: int
    budget: asyncio.Semaphore
    down: asyncio.Queue[Any]
    relay: _Link | None = None


@dataclass(eq=False)
class _Link:
    """One relay stream to one node, while it lasts."""

    call: Any
    addr: str
    heartbeat_frames: bool  # the leader takes UpFrame.heartbeat (its first RelayDown said)
    workers: dict[int, _Worker] = field(default_factory=dict)
    up: asyncio.Queue[tuple[relay_pb2.UpFrame, _Worker | None]] = field(
        default_factory=asyncio.Queue)  # bounded by the workers' budgets


class Relay:
    """The gateway's relay to the leader, and the workers' Connect calls on it."""

    def __init__(self, cfg: GatewayConfig, upstream: Upstream, metrics: GatewayMetrics,
                 token: str):
        """`token`: the relay call's bearer token (config relay_token_file)."""
        self.cfg = cfg
        self.upstream = upstream
        self.metrics = metrics
        self._metadata = (("authorization", f"Bearer {token}"),)
        self.link: _Link | None = None
        self._ready = asyncio.Event()
        self._ids = itertools.count(1)

    # --- the relay stream ------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Keep one relay to the leader up until `stop`."""
        delay = RETRY_MIN_S
        while not stop.is_set():
            addr = self.upstream.target()
            if await self._hold(addr):
                delay = RETRY_MIN_S
                continue
            try:
                await asyncio.wait_for(stop.wait(), delay)
            except TimeoutError:
                pass
            delay = min(RETRY_MAX_S, delay * 2)

    async def _hold(self, addr: str) -> bool:
        """Open a relay on `addr` and serve it until it ends; True if it was accepted or
        named the leader (try again at once)."""
        method = self.upstream.channel(addr).stream_stream(
            RELAY, request_serializer=relay_pb2.RelayUp.SerializeToString,
            response_deserializer=relay_pb2.RelayDown.FromString)
        call = method(metadata=self._metadata)
        try:
            first = await call.read()
        except grpc.aio.AioRpcError as err:
            hint = leader_hint(err.trailing_metadata())
            call.cancel()
            if err.code() == grpc.StatusCode.UNAVAILABLE and hint and hint != addr:
                self.upstream.learn(hint)
                return True
            if err.code() in _REFUSED:  # the node is up; our token is not good enough
                log.warning("gateway: relay to %s refused: %s %s (relay_token_file)", addr,
                            err.code().name, err.details())
                return False
            log.debug("gateway: relay to %s refused: %s", addr, err.code().name)
            self.upstream.unreachable(addr)
            return False
        if first is grpc.aio.EOF:
            call.cancel()
            return False
        frames = self.cfg.relay_heartbeats == "frames"
        link = _Link(call, addr, frames and cast(relay_pb2.RelayDown, first).heartbeat_frames)
        self.link = link
        self._ready.set()
        self.metrics.relay_connected.set(1)
        log.info("gateway: relay to the leader %s up", addr)
        writer = asyncio.create_task(self._write(link))
        try:
            await self._read(link)
        except grpc.aio.AioRpcError as err:
            if hint := leader_hint(err.trailing_metadata()):
                self.upstream.learn(hint)
            else:
                self.upstream.unreachable(addr)
            log.info("gateway: relay to %s ended: %s %s", addr, err.code().name, err.details())
        finally:
            self._ready.clear()
            self.link = None
            self.metrics.relay_connected.set(0)
            writer.cancel()
            call.cancel()
            self._end_workers(link)
        return True

    async def _write(self, link: _Link) -> None:
        """The workers' frames, as few messages as the writes allow."""
        limit = self.cfg.relay_batch_frames
        while True:
            items = [await link.up.get()]
            size = items[0][0].ByteSize()
            while len(items) < limit and not link.up.empty() and size < MAX_BATCH_BYTES:
                items.append(link.up.get_nowait())
                size += items[-1][0].ByteSize()
            await link.call.write(relay_pb2.RelayUp(frames=[f for f, _ in items]))
            self.metrics.relay_batches.labels("up").inc()
            self.metrics.relay_batch_frames.labels("up").observe(len(items))
            for _, worker in items:
                if worker is not None:
                    worker.budget.release()

    async def _read(self, link: _Link) -> None:
        while True:
            down = await link.call.read()
            if down is grpc.aio.EOF:
                return
            self.metrics.relay_batches.labels("down").inc()
            self.metrics.relay_batch_frames.labels("down").observe(len(down.frames))
            for frame in down.frames:
                worker = link.workers.get(frame.stream_id)
                if worker is None:
                    continue  # its call ended here
                if frame.WhichOneof("frame") == "end":
                    link.workers.pop(frame.stream_id, None)
                    worker.down.put_nowait(frame.end)  # an end always has its place
                elif worker.down.qsize() >= self.cfg.relay_worker_buffer_messages:
                    self._overflow(link, worker)
                else:
                    worker.down.put_nowait(frame.message)

    def _overflow(self, link: _Link, worker: _Worker) -> None:
        link.workers.pop(worker.stream_id, None)
        link.up.put_nowait((relay_pb2.UpFrame(stream_id=worker.stream_id,
                                              close=relay_pb2.RelayClose(cancelled=True)), None))
        self.metrics.refused.labels("relay_worker_buffer_messages").inc()
        worker.down.put_nowait(relay_pb2.RelayEnd(
            code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
            details=f"gateway: {self.cfg.relay_worker_buffer_messages} messages queued for "
                    "this worker and not read (relay_worker_buffer_messages)"))

    def _end_workers(self, link: _Link) -> None:
        """The relay ended: every worker on it is told to come back here."""
        ended = relay_pb2.RelayEnd(
            code=grpc.StatusCode.UNAVAILABLE.value[0],
            details="gateway: the relay to the leader ended; reconnect",
            trailers=[relay_pb2.RelayHeader(key=LEADER_KEY, value=self.cfg.hint_addr)])
        for worker in list(link.workers.values()):
            worker.down.put_nowait(ended)
        link.workers.clear()

    # --- one worker's call -----------------------------------------------------------------

    async def connect(self, requests: AsyncIterator[bytes], context: Any,
                      metadata: tuple[tuple[str, Any], ...]) -> AsyncIterator[bytes]:
        """Serve a worker's Connect over the relay: its messages up, the leader's down."""
        link = await self._link()
        if link is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                "gateway: no leader to relay to yet; retry",
                                trailing_metadata=((LEADER_KEY, self.cfg.hint_addr),))
            return
        worker = _Worker(next(self._ids), asyncio.Semaphore(self.cfg.stream_buffer_messages),
                         asyncio.Queue(), link)
        link.workers[worker.stream_id] = worker
        self.metrics.relayed_streams.inc()
        link.up.put_nowait((relay_pb2.UpFrame(stream_id=worker.stream_id, open=relay_pb2.RelayOpen(
            metadata=[relay_pb2.RelayHeader(key=k, value=v if isinstance(v, str) else v.decode(
                "latin-1")) for k, v in metadata])), None))
        pump = asyncio.create_task(self._pump(requests, link, worker))
        try:
            while True:
                item = await worker.down.get()
                if isinstance(item, relay_pb2.RelayEnd):
                    await self._end_call(context, item)
                    return
                yield item
        finally:
            pump.cancel()
            self.metrics.relayed_streams.dec()
            if link.workers.pop(worker.stream_id, None) is not None:  # the worker went away
                link.up.put_nowait((relay_pb2.UpFrame(
                    stream_id=worker.stream_id, close=relay_pb2.RelayClose(cancelled=True)), None))

    async def _link(self) -> _Link | None:
        """The relay, once up (at most READY_WAIT_S from now); None if it is not."""
        deadline = asyncio.get_running_loop().time() + READY_WAIT_S
        while self.link is None:
            remaining = deadline - asyncio.get_running_loop().time()
            try:
                await asyncio.wait_for(self._ready.wait(), max(remaining, 0))
            except TimeoutError:
                return None
        return self.link

    async def _pump(self, requests: AsyncIterator[bytes], link: _Link, worker: _Worker) -> None:
        """The worker's messages up, each once its budget has room."""
        async for message in requests:
            await worker.budget.acquire()
            if worker.stream_id not in link.workers:
                return
            link.up.put_nowait((self._up_frame(link, worker.stream_id, message), worker))
        if worker.stream_id in link.workers:
            link.up.put_nowait((relay_pb2.UpFrame(stream_id=worker.stream_id,
                                                  close=relay_pb2.RelayClose()), None))

    def _up_frame(self, link: _Link, stream_id: int, message: bytes) -> relay_pb2.UpFrame:
        """A worker's message as a frame: a heartbeat parsed (the leader answers it without
        waking the stream's servicer), anything else as the bytes the worker sent."""
        if link.heartbeat_frames and message[:1] == _HEARTBEAT_TAG:
            try:
                msg = worker_pb2.WorkerMessage.FromString(message)
            except DecodeError:
                msg = None  # the leader refuses it, named, as from a direct stream
            if msg is not None and msg.WhichOneof("msg") == "heartbeat":
                self.metrics.relay_heartbeat_frames.inc()
                return relay_pb2.UpFrame(stream_id=stream_id, heartbeat=msg.heartbeat)
        return relay_pb2.UpFrame(stream_id=stream_id, message=message)

    async def _end_call(self, context: Any, end: relay_pb2.RelayEnd) -> None:
        trailers = caller_trailers(((h.key, h.value) for h in end.trailers),
                                   self.cfg.hint_addr)
        code = STATUS_BY_NUMBER.get(end.code, grpc.StatusCode.UNKNOWN)
        if code != grpc.StatusCode.OK:
            await context.abort(code, end.details, trailing_metadata=trailers)
        context.set_trailing_metadata(trailers)

