"""Bounds of an HTTP port's connections: the node's and the gateway's (DESIGN.md here).

aiohttp's own site (`web.TCPSite` over `loop.create_server`) bounds nothing a client controls:
a connection may take an hour (keepalive_timeout 3630 s) to send its headers and forever to
send its body, any number may be open from anywhere, and when accept fails with EMFILE
asyncio logs the failure up to `backlog` times per second with a traceback. So the port is
served here instead:

- `BoundedListener` owns the listening sockets and the accept loop: a connection over
  `http_max_connections`, over `http_max_connections_per_address` from its address, or that
  would leave fewer than `reserved_descriptors` descriptors free is closed at once (plaintext:
  after a short 503 answer) and counted; an accept that fails (EMFILE, ENFILE, ENOBUFS...)
  pauses accepting for `http_accept_backoff_ms`. Admitted sockets are handed to the aiohttp
  server (`loop.connect_accepted_socket`, with the TLS handshake bounded by the header
  timeout), so `AppRunner.cleanup` still shuts them down.
- `GuardedHandler` (aiohttp's protocol) closes a connection whose request line and headers
  have not all arrived `http_header_timeout_ms` after it opened or after the first byte of a
  following request, one whose body has not all arrived `http_body_timeout_ms` after its
  headers, and one whose response has not all been written `http_write_timeout_ms` after the
  handler answered (a client that stopped reading: aborted, its buffered bytes dropped);
  aiohttp's keep-alive timer is `http_idle_timeout_ms`.
- `bounded_requests(incomplete)` (a middleware inside the server's) tells the protocol when a
  request starts, and turns a body the client did not finish (it went away, or was cut at the
  body timeout) into the port's own 400 (`incomplete(detail)`) instead of an ERROR traceback
  and a 500.
- `RateLimitedLog`: what a flood causes is logged once per `http_error_log_interval_ms` per
  kind, with a count.

The port's owner gives what is its own: where the counts go (`PortEvents`, its metrics) and
the bytes of the 503 that a refused plaintext connection gets (`refusal_bytes`). The messages
name the settings by the names both the node and the gateway use (`http_header_timeout_ms`...).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web
from aiohttp.web_protocol import RequestHandler, RequestPayloadError

from gnomon.httpguard.descriptors import DescriptorBudget, soft_limit

log = logging.getLogger(__name__)

ACCEPT_BATCH = 64  # accepts per readiness event of a listening socket
LISTEN_BACKLOG = 128  # aiohttp's default


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float
    body_timeout_s: float
    idle_timeout_s: float
    write_timeout_s: float
    max_connections: int
    max_per_address: int
    reserved_descriptors: int
    accept_backoff_s: float
    log_interval_s: float

    @classmethod
    def from_config(cls, config: Any) -> ConnectionLimits:
        """From settings named as the node's and the gateway's are (`http_header_timeout_ms`,
        ...)."""
        return cls(header_timeout_s=config.http_header_timeout_ms / 1000,
                   body_timeout_s=config.http_body_timeout_ms / 1000,
                   idle_timeout_s=config.http_idle_timeout_ms / 1000,
                   write_timeout_s=config.http_write_timeout_ms / 1000,
                   max_connections=config.http_max_connections,
                   max_per_address=config.http_max_connections_per_address,
                   reserved_descriptors=config.reserved_descriptors,
                   accept_backoff_s=config.http_accept_backoff_ms / 1000,
                   log_interval_s=config.http_error_log_interval_ms / 1000)


class PortEvents(Protocol):
    """Where a port's counts go (its owner's metrics)."""

    def open_connections(self, count: Callable[[], int]) -> None:
        """`count()` is the number of connections open now."""

    def refused(self, reason: str) -> None:
        """A connection refused at a bound: port, address or descriptors."""

    def timed_out(self, phase: str) -> None:
        """A connection closed at a timeout: handshake, header, body or write."""

    def accept_failed(self) -> None:
        """accept() failed (EMFILE, ENFILE...): the port pauses."""


def refusal_bytes(content_type: str, body: dict[str, Any]) -> bytes:
    """The whole 503 answer a plaintext connection refused at a bound gets, then closed."""
    data = json.dumps(body).encode()
    head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(data)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n")
    return head.encode() + data


class RateLimitedLog:
    """At most one line per `interval_s` per kind: the first event of a quiet kind is logged
    at once; the ones after it in the interval are counted, and at its end one line gives the
    latest with the count (then the next interval starts). Loop thread only."""

    def __init__(self, logger: logging.Logger, interval_s: float,
                 loop: asyncio.AbstractEventLoop, *, level: int = logging.WARNING) -> None:
        self._log = logger
        self._interval_s = interval_s
        self._loop = loop
        self._level = level
        self._held: dict[str, list[Any]] = {}  # kind -> [count since the last line, text]
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def note(self, kind: str, text: str) -> None:
        held = self._held.get(kind)
        if held is not None:
            held[0] += 1
            held[1] = text
            return
        self._log.log(self._level, "%s", text)
        self._hold(kind, text)

    def _hold(self, kind: str, text: str) -> None:
        self._held[kind] = [0, text]
        self._timers[kind] = self._loop.call_later(self._interval_s, self._flush, kind)

    def _flush(self, kind: str) -> None:
        self._timers.pop(kind, None)
        count, text = self._held.pop(kind)
        if count:
            self._log.log(self._level, "%s (%d such in the last %g s; one line per %g s)",
                          text, count, self._interval_s, self._interval_s)
            self._hold(kind, text)

    def close(self) -> None:
        for kind in list(self._timers):
            self._timers.pop(kind).cancel()
            self._flush_now(kind)

    def _flush_now(self, kind: str) -> None:
        count, text = self._held.pop(kind)
        if count:
            self._log.log(self._level, "%s (%d such since the last line)", text, count)


class _Slot:
    """One admitted connection's place in the counts; released once, however it ends."""

    __slots__ = ("_listener", "address", "_held")

    def __init__(self, listener: BoundedListener, address: str) -> None:
        self._listener = listener
        self.address = address
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._listener._release(self.address)


class BoundedListener:
    """The HTTP port's listening sockets and accept loop, with the port's bounds."""

    def __init__(self, server: web.Server, limits: ConnectionLimits, *, events: PortEvents,
                 refusal: bytes, ssl_context: ssl.SSLContext | None = None,
                 descriptors: DescriptorBudget | None = None) -> None:
        """`refusal`: the bytes a plaintext connection refused at a bound gets
        (`refusal_bytes`); `events`: where the counts go."""
        self._loop = asyncio.get_running_loop()
        self._server = server
        self.limits = limits
        self.events = events
        self._refusal_bytes = refusal
        self._ssl = ssl_context
        self._descriptors = descriptors or DescriptorBudget(limits.reserved_descriptors)
        self.errors = RateLimitedLog(log, limits.log_interval_s, self._loop)
        self.timeouts = RateLimitedLog(log, limits.log_interval_s, self._loop,
                                       level=logging.INFO)
        self._socks: list[socket.socket] = []
        self._per_address: dict[str, int] = {}
        self.open = 0
        self._resume: asyncio.TimerHandle | None = None
        self._handshakes: set[asyncio.Task] = set()
        self._closed = False

    # -- listening -----------------------------------------------------------------------------

    def listen(self, host: str, port: int) -> None:
        """Bind every address `host` resolves to (as loop.create_server does) and accept."""
        infos = socket.getaddrinfo(host.strip("[]") or "0.0.0.0", port,
                                   type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        try:
            for family, kind, proto, _, addr in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                self._socks.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(addr)
                sock.listen(LISTEN_BACKLOG)
                sock.setblocking(False)
        except OSError:
            self.close()
            raise
        self._accepting(True)
        self.events.open_connections(lambda: self.open)

    @property
    def ports(self) -> list[int]:
        return [s.getsockname()[1] for s in self._socks]

    def close(self) -> None:
        """Stop accepting; connections still handshaking are dropped (the admitted ones are
        aiohttp's: AppRunner.cleanup shuts them down)."""
        if self._closed:
            return
        self._closed = True
        self._accepting(False)
        if self._resume is not None:
            self._resume.cancel()
        for sock in self._socks:
            sock.close()
        for task in list(self._handshakes):
            task.cancel()
        self.errors.close()
        self.timeouts.close()

    def _accepting(self, on: bool) -> None:
        for sock in self._socks:
            if sock.fileno() < 0:
                continue
            if on:
                self._loop.add_reader(sock.fileno(), self._on_readable, sock)
            else:
                self._loop.remove_reader(sock.fileno())

    def _on_readable(self, sock: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                self._back_off(exc)
                return
            self._admit(conn, addr)

    def _back_off(self, exc: OSError) -> None:
        """Accept failed (the queue stays readable, so retrying at once would spin and log
        at the loop's speed): stop accepting for accept_backoff_s."""
        self.events.accept_failed()
        hint = ""
        if exc.errno == errno.EMFILE:
            hint = (f"; the process is at its open-file limit (RLIMIT_NOFILE {soft_limit()}): "
                    f"raise it (LimitNOFILE=, ulimit -n) or lower http_max_connections")
        elif exc.errno == errno.ENFILE:
            hint = "; the system is out of open files (fs.file-max)"
        self.errors.note("accept", f"HTTP port: accept failed: {exc}; not accepting for "
                                   f"{self.limits.accept_backoff_s:g} s "
                                   f"(http_accept_backoff_ms){hint}")
        self._accepting(False)
        if self._resume is None:
            self._resume = self._loop.call_later(self.limits.accept_backoff_s, self._resumed)

    def _resumed(self) -> None:
        self._resume = None
        if not self._closed:
            self._accepting(True)

    # -- admission -----------------------------------------------------------------------------

    def _admit(self, conn: socket.socket, addr: Any) -> None:
        address = str(addr[0]) if isinstance(addr, tuple) else str(addr)
        reason, why = self._refusal(conn, address)
        if reason:
            self.events.refused(reason)
            self.errors.note(f"refused-{reason}",
                             f"HTTP port: refused a connection from {address}: {why}")
            with contextlib.suppress(OSError):
                conn.setblocking(False)
                if self._ssl is None:
                    conn.send(self._refusal_bytes)
            conn.close()
            return
        self.open += 1
        self._per_address[address] = self._per_address.get(address, 0) + 1
        slot = _Slot(self, address)
        conn.setblocking(False)
        task = self._loop.create_task(self._serve(conn, slot))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    def _refusal(self, conn: socket.socket, address: str) -> tuple[str, str]:
        limits = self.limits
        if self.open >= limits.max_connections:
            return "port", f"{self.open} connections are open (http_max_connections)"
        held = self._per_address.get(address, 0)
        if held >= limits.max_per_address:
            return "address", (f"it has {held} connections open "
                               f"(http_max_connections_per_address)")
        if self._descriptors.short(conn.fileno()):
            return "descriptors", (
                f"fewer than {limits.reserved_descriptors} descriptors would be free "
                f"(reserved_descriptors; RLIMIT_NOFILE {soft_limit()}): they are kept for "
                f"the process's files and its gRPC port")
        return "", ""

    def _release(self, address: str) -> None:
        self.open -= 1
        left = self._per_address.get(address, 0) - 1
        if left > 0:
            self._per_address[address] = left
        else:
            self._per_address.pop(address, None)

    async def _serve(self, conn: socket.socket, slot: _Slot) -> None:
        def protocol() -> GuardedHandler:
            return GuardedHandler(self._server, loop=self._loop, listener=self, slot=slot)

        try:
            await self._loop.connect_accepted_socket(
                protocol, sock=conn, ssl=self._ssl,
                ssl_handshake_timeout=self.limits.header_timeout_s if self._ssl else None)
        except asyncio.CancelledError:
            slot.release()
            conn.close()
            raise
        except Exception as exc:  # noqa: BLE001 - a TLS handshake that failed or took too long
            slot.release()
            conn.close()
            if isinstance(exc, ConnectionAbortedError | TimeoutError):
                self.events.timed_out("handshake")
            log.debug("HTTP port: connection from %s ended before its TLS handshake did: %s",
                      slot.address, exc)

    def timed_out(self, phase: str, address: str, text: str) -> None:
        self.events.timed_out(phase)
        if text:
            self.timeouts.note(f"timeout-{phase}",
                               f"HTTP port: closed a connection from {address}: {text}")


class GuardedHandler(RequestHandler):
    """aiohttp's HTTP/1 protocol with the header and body timeouts and the port's counts."""

    def __init__(self, manager: web.Server, *, loop: asyncio.AbstractEventLoop,
                 listener: BoundedListener, slot: _Slot) -> None:
        super().__init__(manager, loop=loop, keepalive_timeout=listener.limits.idle_timeout_s,
                         access_log=None)  # type: ignore[arg-type]  # None: no access log
        self._listener = listener
        self._slot = slot
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._busy = False  # a request's handler runs (its head arrived)
        self._head_bytes = False  # bytes of the awaited head arrived
        self._data_while_busy = False  # bytes arrived while a handler ran (a pipelined head)

    # -- the protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not data:  # aiohttp re-parses what it buffered
            return
        if self._busy:
            self._data_while_busy = True
            return
        self._head_bytes = True
        if self._head_timer is None:  # the first byte of a following request
            self._arm_head()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_timers()
        self._slot.release()
        super().connection_lost(exc)

    async def finish_response(self, request: web.BaseRequest, resp: web.StreamResponse,
                              start_time: float | None) -> tuple[web.StreamResponse, bool]:
        timer = self._loop.call_later(self._listener.limits.write_timeout_s,
                                      self._write_timeout, request)
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            timer.cancel()
            self._request_ended()

    # -- the bounds ----------------------------------------------------------------------------

    def request_started(self, request: web.BaseRequest) -> None:
        """Its head arrived (bound_requests calls it before the handler)."""
        self._busy = True
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if request.body_exists and not request.content.is_eof() and self._body_timer is None:
            self._body_timer = self._loop.call_later(self._listener.limits.body_timeout_s,
                                                     self._body_timeout, request)

    def _request_ended(self) -> None:
        self._busy = False
        self._head_bytes = False
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        if self._data_while_busy:  # the next request's head (or part of it) is here
            self._data_while_busy = False
            self._head_bytes = True
            self._arm_head()

    def _arm_head(self) -> None:
        if self._head_timer is None and self.transport is not None:
            self._head_timer = self._loop.call_later(self._listener.limits.header_timeout_s,
                                                     self._head_timeout)

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self._busy or self.transport is None:
            return
        text = ""
        if self._head_bytes:  # a connection that sent nothing (a browser's spare) is routine
            text = (f"its request headers did not all arrive within "
                    f"{self._listener.limits.header_timeout_s:g} s (http_header_timeout_ms)")
        self._listener.timed_out("header", self._slot.address, text)
        self.force_close()

    def _body_timeout(self, request: web.BaseRequest) -> None:
        self._body_timer = None
        if request.content.is_eof() or self.transport is None:
            return
        self._listener.timed_out(
            "body", self._slot.address,
            f"the body of {request.method} {request.path} did not all arrive within "
            f"{self._listener.limits.body_timeout_s:g} s of its headers (http_body_timeout_ms)")
        self.force_close()

    def _write_timeout(self, request: web.BaseRequest) -> None:
        transport = self.transport
        if transport is None:
            return
        self._listener.timed_out(
            "write", self._slot.address,
            f"the response to {request.method} {request.path} was not all read within "
            f"{self._listener.limits.write_timeout_s:g} s (http_write_timeout_ms)")
        transport.abort()  # close() would wait for the buffered bytes the client never reads
        self.force_close()

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def bounded_requests(incomplete: Callable[[str], Exception]) -> Any:
    """The middleware (innermost) that starts a request's body timer, and answers a body the
    client did not finish with `incomplete(detail)` raised (the port's own 400: nothing is
    wrong with the server, so no traceback)."""

    @web.middleware
    async def bound_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
        protocol = request.protocol
        if isinstance(protocol, GuardedHandler):
            protocol.request_started(request)
        try:
            return await handler(request)
        except (ConnectionResetError, RequestPayloadError, RuntimeError) as exc:
            # RuntimeError("Connection closed."): a read between our close (the body timer's
            # force_close drops the transport) and aiohttp's connection_lost, which would
            # have failed the read with ConnectionResetError one loop turn later.
            transport = request.transport
            gone = transport is None or transport.is_closing()
            unfinished = request.body_exists and not request.content.is_eof()
            if not isinstance(exc, RequestPayloadError) and not (gone or unfinished):
                raise
            if isinstance(exc, RuntimeError) and not gone:
                raise
            log.debug("HTTP %s %s: the request body is incomplete: %s", request.method,
                      request.path, exc)
            raise incomplete(f"{request.method} {request.path}: the request body is "
                             f"incomplete (the client closed the connection, or did not send "
                             f"it in time): {exc}") from None

    return bound_requests
