"""A worker's stream to the leader: reconnects, one session per stream (Hello -> Welcome, then
reads and heartbeats), every write, and the credits outstanding on it."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import grpc
import grpc.aio

from gnomon.v1 import worker_pb2, worker_pb2_grpc

from .._errors import Unavailable, error_for_status
from .._transport import (
    Backoff,
    ChannelConfig,
    ChannelPool,
    Failover,
    Router,
    leader_hint,
    reason_of,
)
from .leases import HeldLease, LeaseTable, LeaseTiming

if TYPE_CHECKING:
    # WorkerService.Connect: WorkerMessages out, ServerMessages in.
    _Connect = grpc.aio.StreamStreamCall[worker_pb2.WorkerMessage, worker_pb2.ServerMessage]

log = logging.getLogger("gnomon.client.worker")

# Statuses that a reconnect cannot fix: the worker's run() raises them.
_FATAL = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
# After shutdown cancels the remaining tasks: how long their Fail reports and the server's
# acknowledgements may take before the stream is closed regardless.
CLOSE_WAIT_S = 2.0
_WRITE_ERRORS = (grpc.aio.AioRpcError, asyncio.InvalidStateError, grpc.aio.UsageError)


class _StreamStalled(Exception):
    """Heartbeats went unacknowledged for too long: the stream is reopened."""


@dataclass
class _SessionEnd:
    welcomed: bool = False
    error: grpc.aio.AioRpcError | None = None
    detail: str = ""
    hint: str | None = None


# One Reports message holds at most this many reports and about this many bytes (results
# are up to the cluster's max_result_bytes each; the node receives at most 16 MiB).
_MAX_REPORTS_PER_MESSAGE = 256
_MAX_REPORTS_BYTES = 1 << 20


def _as_reports(msgs: list[worker_pb2.WorkerMessage]) -> list[worker_pb2.WorkerMessage]:
    """Complete/Fail messages as few Reports messages (a single one is sent as it is)."""
    if len(msgs) == 1:
        return msgs
    parts: list[list[worker_pb2.WorkerMessage]] = [[]]
    size = 0
    for msg in msgs:
        n = msg.ByteSize()
        if parts[-1] and (len(parts[-1]) >= _MAX_REPORTS_PER_MESSAGE
                          or size + n > _MAX_REPORTS_BYTES):
            parts.append([])
            size = 0
        parts[-1].append(msg)
        size += n
    return [part[0] if len(part) == 1 else worker_pb2.WorkerMessage(reports=worker_pb2.Reports(
        completes=[m.complete for m in part if m.HasField("complete")],
        fails=[m.fail for m in part if m.HasField("fail")])) for part in parts]


@dataclass(frozen=True, slots=True)
class WorkerIdentity:
    """Who the worker is, as its Hello says on every stream."""

    worker_id: str
    queues: tuple[str, ...]
    labels: Mapping[str, str]


class WorkerStream:
    """Owner of the wire: which node to connect to (the client's ``Router`` and ``Backoff``,
    through ``Failover``), the open call, its write lock, heartbeat sends and the acks they
    are matched with, and the credits outstanding on the stream.

    ``prepare_hello`` returns the leases to list as held; ``on_connected`` runs once the
    Welcome was applied; ``handlers`` take the other server messages by kind ("assign",
    "heartbeat_ack", "report_ack", "cancel")."""

    def __init__(
        self,
        *,
        config: ChannelConfig,
        identity: WorkerIdentity,
        hello_timeout_s: float,
        backoff: Backoff,
        rng: random.Random,
        timing: LeaseTiming,
        leases: LeaseTable,
        prepare_hello: Callable[[], Sequence[HeldLease]],
        on_connected: Callable[[], Awaitable[None]],
        handlers: Mapping[str, Callable[[Any], None]],
        connect_timeout_s: float | None = None,
    ) -> None:
        self._config = config
        self._connect_timeout_s = connect_timeout_s
        self._identity = identity
        self._hello_timeout_s = hello_timeout_s
        self._backoff = backoff
        self._rng = rng
        self._timing = timing
        self._leases = leases
        self._prepare_hello = prepare_hello
        self._on_connected = on_connected
        self._handlers = handlers
        self.call: _Connect | None = None
        self.closing = False
        """Set by shutdown: a stream that ends is not reopened."""
        self._write_lock = asyncio.Lock()
        # Reports waiting for the write lock, with what their write came to.
        self._reports: list[tuple[worker_pb2.WorkerMessage, asyncio.Future[bool]]] = []
        self._hb_sent: collections.deque[float] = collections.deque()
        self._outstanding_credits = 0
        self._background: set[asyncio.Task[Any]] = set()
        self._session_over = asyncio.Event()

    @property
    def connected(self) -> bool:
        return self.call is not None

    # --- writing ---------------------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run a write in the background (cancelled when the worker stops)."""
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def cancel_background(self) -> None:
        for task in list(self._background):
            task.cancel()

    async def write(self, msg: worker_pb2.WorkerMessage) -> bool:
        """Write ``msg`` on the current stream; False if there is none or it broke."""
        call = self.call
        if call is None:
            return False
        async with self._write_lock:
            return await self._write_locked(call, [msg])

    async def write_report(self, msg: worker_pb2.WorkerMessage) -> bool:
        """Write a Complete or Fail like ``write``. The reports waiting for the write lock
        at the same moment go out together as ``Reports`` messages: the first to get the
        lock writes them all (nothing waits to fill a batch)."""
        call = self.call
        if call is None:
            return False
        written: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._reports.append((msg, written))
        async with self._write_lock:
            if written.done():  # an earlier report's write took this one along
                return written.result()
            batch, self._reports = self._reports, []
            ok = False
            try:
                ok = await self._write_locked(call, _as_reports([m for m, _ in batch]))
            finally:
                for _, fut in batch:
                    if not fut.done():
                        fut.set_result(ok)
            return ok

    async def _write_locked(self, call: _Connect,
                            msgs: Sequence[worker_pb2.WorkerMessage]) -> bool:
        if self.call is not call:
            return False
        try:
            for msg in msgs:
                await call.write(msg)
        except _WRITE_ERRORS as e:
            log.debug("worker %s: write failed: %r", self._identity.worker_id, e)
            return False
        return True

    def top_up_credits(self) -> None:
        """Keep (free slots) credits outstanding on the current stream."""
        if self.call is None:
            return
        want = self._leases.free_slots() - self._outstanding_credits
        if want > 0:
            self._outstanding_credits += want
            self.spawn(
                self.write(worker_pb2.WorkerMessage(credits=worker_pb2.Credits(credits=want)))
            )

    async def half_close(self) -> None:
        """Tell the server we are done writing and give it a moment to acknowledge the last
        reports and end the stream."""
        call = self.call
        if call is None:
            return
        async with self._write_lock:
            try:
                await call.done_writing()
            except _WRITE_ERRORS:
                return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._session_over.wait(), CLOSE_WAIT_S)

    # --- reconnecting ----------------------------------------------------------------------

    async def serve(self, stop: asyncio.Event) -> None:
        """Open streams until ``stop`` (or ``closing``): follow a leader hint at once, else
        back off and try the next server. Raises GnomonError for a status a reconnect cannot
        fix (bad worker id, authentication)."""
        pool = ChannelPool(self._config)
        failover = Failover(Router(self._config.servers), self._backoff, self._rng)
        address = failover.router.current()
        worker_id = self._identity.worker_id
        started = time.monotonic()
        ever_welcomed = False
        try:
            while not (self.closing or stop.is_set()):
                end = await self._session(pool.get(address), address, stop)
                if self.closing or stop.is_set():
                    break
                if end.welcomed:
                    failover.succeeded(address)
                    ever_welcomed = True
                if end.error is not None and end.error.code() in _FATAL:
                    error = error_for_status(
                        end.error.code(), end.error.details() or "", reason=reason_of(end.error)
                    )
                    log.error("worker %s: %s refused the stream: %s", worker_id, address, error)
                    raise error
                self._check_connect_deadline(started, ever_welcomed, address, end)
                step = failover.next(address, end.hint)
                if step.redirected:
                    log.info("worker %s: %s names %s as leader", worker_id, address, step.address)
                else:
                    log.info(
                        "worker %s: stream to %s ended (%s); reconnecting in %.2fs",
                        worker_id,
                        address,
                        end.detail or "closed",
                        step.delay_s,
                    )
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), step.delay_s)
                address = step.address
        finally:
            await pool.close()

    def _check_connect_deadline(self, started: float, ever_welcomed: bool, address: str,
                                end: _SessionEnd) -> None:
        """A worker no node ever welcomed gives up after ``connect_timeout_s``: a plaintext
        dial of a TLS port, a wrong CA or a wrong address never heals by retrying."""
        limit = self._connect_timeout_s
        if ever_welcomed or limit is None or time.monotonic() - started < limit:
            return
        detail = end.detail or "closed"
        hint = ""
        if "Socket closed" in detail or "handshake" in detail.lower() \
                or "ssl" in detail.lower():
            hint = (" (a TLS port dialled in plaintext, or the wrong CA? give --ca, or "
                    "GNOMON_CA, and --token-file)")
        message = (f"no node accepted worker {self._identity.worker_id}'s stream within "
                   f"{limit:g}s; last: {address}: {detail}{hint}")
        log.error("worker %s: %s", self._identity.worker_id, message)
        raise Unavailable(message)

    # --- one stream ------------------------------------------------------------------------

    async def _session(
        self, channel: grpc.aio.Channel, address: str, stop: asyncio.Event
    ) -> _SessionEnd:
        end = _SessionEnd()
        self._session_over.clear()
        call = worker_pb2_grpc.WorkerServiceStub(channel).Connect(
            metadata=self._config.metadata or None
        )
        helpers: list[asyncio.Task[Any]] = []
        try:
            welcome = await self._greet(call, stop, end)
            if welcome is None:
                return end
            end.welcomed = True
            log.info(
                "worker %s: connected to %s (node %s), queues %s, %d lease(s) resumed",
                self._identity.worker_id,
                address,
                welcome.node_id,
                list(self._identity.queues),
                len(welcome.resumed_tokens),
            )
            self._hb_sent.clear()
            self._outstanding_credits = 0
            self.call = call
            self.top_up_credits()
            await self._on_connected()
            helpers = [
                asyncio.create_task(self._read_loop(call)),
                asyncio.create_task(self._heartbeat_loop()),
                asyncio.create_task(stop.wait()),
            ]
            done, _ = await asyncio.wait(helpers, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()
            end.detail = "stream closed by server" if helpers[0] in done else "stopping"
        except grpc.aio.AioRpcError as e:
            end.error = e
            end.hint = leader_hint(e)
            end.detail = f"{e.code().name}: {e.details()}"
        except _StreamStalled as e:
            end.detail = str(e)
        except (asyncio.InvalidStateError, grpc.aio.UsageError) as e:
            end.detail = f"stream failed: {e!r}"
        finally:
            self.call = None
            for t in helpers:
                t.cancel()
            call.cancel()
            self._session_over.set()
        return end

    async def _greet(
        self, call: _Connect, stop: asyncio.Event, end: _SessionEnd
    ) -> worker_pb2.Welcome | None:
        """Send Hello (with the leases still held), apply the Welcome; None (and
        ``end.detail`` says why) if none came."""
        held = list(self._prepare_hello())
        hello = worker_pb2.Hello(
            worker_id=self._identity.worker_id,
            queues=list(self._identity.queues),
            labels=dict(self._identity.labels),
            held=[ex.ref for ex in held],
            accepts_batches=True,
        )
        hello_at = time.monotonic()
        try:
            await call.write(worker_pb2.WorkerMessage(hello=hello))
        except asyncio.InvalidStateError:
            # The call ended before Hello went out (a follower answers at once): reading it
            # raises its status, with the leader hint of a redirect.
            pass
        read = asyncio.create_task(call.read())
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait(
            {read, stopped}, timeout=self._hello_timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        stopped.cancel()
        if not read.done():
            read.cancel()
            end.detail = "stopping" if stopped.done() else "no Welcome within hello_timeout_s"
            return None
        first = read.result()
        if first is grpc.aio.EOF:
            end.detail = "server closed the stream before Welcome"
            return None
        first = cast(worker_pb2.ServerMessage, first)  # read() is typed object: EOF or this
        if first.WhichOneof("msg") != "welcome":
            end.detail = f"protocol error: expected Welcome, got {first.WhichOneof('msg')}"
            return None
        self._timing.adopt(first.welcome)
        self._leases.resume(held, first.welcome.resumed_tokens, hello_at)
        return first.welcome

    async def _read_loop(self, call: _Connect) -> None:
        while True:
            msg = await call.read()
            if msg is grpc.aio.EOF:
                return
            msg = cast(worker_pb2.ServerMessage, msg)  # read() is typed object: EOF or this
            kind = msg.WhichOneof("msg")
            if kind == "batch":  # queued Assigns and ReportAcks in one message (Hello said so)
                for assign in msg.batch.assigns:
                    self._dispatch("assign", assign)
                for ack in msg.batch.report_acks:
                    self._dispatch("report_ack", ack)
            else:
                self._dispatch(kind or "", getattr(msg, kind) if kind else None)

    def _dispatch(self, kind: str, body: Any) -> None:
        if kind == "assign":
            self._outstanding_credits = max(0, self._outstanding_credits - 1)
        handler = self._handlers.get(kind)
        if handler is None:
            log.warning("worker %s: unexpected %s message ignored", self._identity.worker_id, kind)
        else:
            handler(body)

    def heartbeat_acked(self, ack: worker_pb2.HeartbeatAck) -> None:
        """Renew (or revoke) the leases of the oldest unacknowledged heartbeat."""
        if not self._hb_sent:
            return
        sent_at = self._hb_sent.popleft()
        self._leases.renew(ack.valid_tokens, sent_at)
        self._leases.revoke(ack.revoked_tokens)

    async def _heartbeat_loop(self) -> None:
        # One Heartbeat carries every held lease. Acks come back in order but carry no sequence
        # number, and a leader that cannot prove its leadership sends none: each ack is
        # attributed to the oldest unacknowledged send, which is conservative but lags by one
        # interval per skipped ack. Before that lag could self-fence a healthy lease, reopen the
        # stream: the Welcome re-arms (or reports lost) every held lease and resets the queue.
        stall_after = self._timing.stall_after_s
        while True:
            await asyncio.sleep(self._timing.heartbeat_interval_s)
            now = time.monotonic()
            if self._hb_sent and now - self._hb_sent[0] > stall_after:
                raise _StreamStalled(f"no heartbeat acknowledged for {now - self._hb_sent[0]:.1f}s")
            refs = self._leases.heartbeat_refs()
            self._hb_sent.append(now)
            await self.write(worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat(leases=refs)))
