"""The Raft port's transport for pysyncobj: mutual TLS with one cluster CA, length-prefixed
frames and gnomon's own codec (node/raft/wire.py) instead of pickle + zlib + Fernet.

Plugged into `SyncObj(transportClass=...)` by raft.py; design, limits and thread rules in
node/raft/DESIGN.md. In short:

- pysyncobj's semantics are kept: a node is its ``host:port`` string, the node with the greater
  address dials, `_onNodeConnected` / `_onNodeDisconnected` / `_onMessageReceived` are called
  on the tick thread, and a message handed to `send` on a live link arrives in order or the
  link is closed.
- Everything runs on pysyncobj's tick thread: sockets are non-blocking and registered with
  pysyncobj's poller; TLS runs over memory BIOs (`ssl.SSLObject`), so the bytes the socket
  delivered are decrypted at once and nothing waits inside the SSL object where poll cannot
  see it. `send` from another thread (pysyncobj's `transferLeadership`) is queued for the next
  tick.
- A peer is authenticated (TLS handshake verified against the cluster CA, then its
  certificate's node URI checked against the members) before any application byte of it is
  decoded. Until then a connection is bounded in time, in count and in the bytes it may send.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import socket
import ssl
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from pysyncobj.dns_resolver import globalDnsResolver
from pysyncobj.monotonic import monotonic
from pysyncobj.node import Node
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.transport import Transport, TransportNotReadyError

from gnomon.node.raft import wire
from gnomon.node.security.certificates import peer_node_ids
from gnomon.node.security.reload import PeerCertificate

__all__ = ["NOT_DURABLE", "PROTOCOL_VERSION", "Durable", "TlsTransport", "TransportLimits",
           "TransportSettings"]

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
HELLO_MAX_BYTES = 1024  # the only frame an accepted peer may send before it is known
RECV_BYTES = 256 << 10
READ_BUDGET_BYTES = 1 << 20  # per poll event and connection: others get their turn
ACCEPT_BUDGET = 64  # accepts per poll event
HOUSEKEEPING_S = 0.05  # deadlines, pings and dials are looked at this often
PING_FRACTION = 4  # an idle link sends a ping after peer_timeout / 4 without sending
WARN_EVERY_S = 5.0  # at most one warning per kind this often (attacks must not flood logs)
ACCEPT_PAUSE_S = 0.1  # after EMFILE and the like, before accepting again

_READ, _WRITE, _ERROR = POLL_EVENT_TYPE.READ, POLL_EVENT_TYPE.WRITE, POLL_EVENT_TYPE.ERROR
_CONNECTING, _HANDSHAKE, _HELLO, _OPEN, _CLOSED = range(5)


class Durable(Protocol):
    """What the transport needs of the journal for group commit (DurableJournal has it)."""

    def defer_sync(self) -> None: ...  # pragma: no cover
    def sync(self) -> None: ...  # pragma: no cover


class _NotDurable:
    def defer_sync(self) -> None:
        pass

    def sync(self) -> None:
        pass


NOT_DURABLE: Durable = _NotDurable()


@dataclass(frozen=True)
class TransportLimits:
    """Every bound of the transport (node/config.py has them as raft_* settings)."""

    max_frame_bytes: int
    handshake_timeout_s: float
    unauthenticated_idle_s: float
    listen_backlog: int
    max_unauthenticated: int
    peer_timeout_s: float
    max_send_buffer_bytes: int
    send_backlog_bytes: int
    connect_retry_s: float


@dataclass(frozen=True)
class TransportSettings:
    """What the transport needs besides pysyncobj's objects."""

    tls: PeerCertificate  # .current: the certificate new connections present
    node_id: str
    members: Mapping[str, str]  # node id -> Raft address, this node included
    bind_host: str
    limits: TransportLimits


class _Conn:
    """One socket: dialed (to `node`) or accepted (its node known once authenticated)."""

    __slots__ = ("sock", "fileno", "ssl", "bio_in", "bio_out", "frames", "out", "state",
                 "server_side", "node", "peer_id", "label", "deadline", "last_rx", "last_tx",
                 "mask", "callback")

    def __init__(self, sock: socket.socket, tls: ssl.SSLObject, bio_in: ssl.MemoryBIO,
                 bio_out: ssl.MemoryBIO, *, server_side: bool, node: Node | None, label: str,
                 frame_limit: int, now: float, deadline: float, state: int):
        self.sock = sock
        self.fileno = sock.fileno()
        self.ssl = tls
        self.bio_in = bio_in
        self.bio_out = bio_out
        self.frames = wire.FrameReader(frame_limit)
        self.out = bytearray()  # ciphertext the kernel did not take yet
        self.state = state
        self.server_side = server_side
        self.node = node
        self.peer_id: str | None = None
        self.label = label
        self.deadline = deadline
        self.last_rx = now
        self.last_tx = now
        self.mask = 0
        self.callback: Callable[[int, int], None] | None = None  # the poller's, once watched

    def who(self) -> str:
        return f"{self.peer_id} ({self.label})" if self.peer_id else self.label


class TlsTransport(Transport):
    """pysyncobj transport over mutual TLS (construct with `functools.partial(TlsTransport,
    settings=...)` as `transportClass`)."""

    def __init__(self, syncObj, selfNode, otherNodes, *, settings: TransportSettings):  # noqa: N803 - pysyncobj's names
        super().__init__(syncObj, selfNode, otherNodes)
        if selfNode is None:
            raise ValueError("TlsTransport: read-only nodes are not supported")
        self._sync = syncObj
        self._poller = syncObj._poller
        self._conf = syncObj.conf
        self._settings = settings
        self._limits = settings.limits
        self._self = selfNode
        # Who may connect, and as which node: changed by membership entries (set_member).
        self._members = dict(settings.members)
        self._id_by_addr = {addr: node_id for node_id, addr in settings.members.items()}
        self._nodes: dict[str, Node] = {}  # peer address -> pysyncobj's node object
        self._links: dict[Node, _Conn] = {}  # the one connection per peer (dialing or open)
        self._unauth: set[_Conn] = set()  # accepted, not authenticated yet
        self._last_dial: dict[Node, float] = {}
        self._listener: socket.socket | None = None
        self._accept_paused_until = 0.0
        self._ready = False
        self._bound = threading.Event()
        self._last_bind = float("-inf")
        self._bind_attempts = 0
        self._tick_ident: int | None = None
        self._foreign: deque = deque()  # (node, message) sent from other threads
        self._next_housekeeping = 0.0
        self._warned: dict[str, tuple[float, int]] = {}
        # Group commit (node/raft/DESIGN.md): while held, no byte of an open link leaves; the
        # release makes the journal durable first, so no reply ever acknowledges an entry
        # that is not on disk, and the entries of one batch share one fsync.
        self.durable: Durable = NOT_DURABLE
        self._hold_depth = 0
        self._held: dict[_Conn, None] = {}  # open links with ciphertext waiting in bio_out
        syncObj.addOnTickCallback(self._on_tick)
        for node in otherNodes:
            self.addNode(node)

    # -- pysyncobj's Transport interface --------------------------------------------------

    def tryGetReady(self):  # noqa: N802 - pysyncobj's name
        """Bind the listening socket (retried every bindRetryTime, as pysyncobj does)."""
        self._tick_ident = threading.get_ident()
        self._maybe_bind()

    @property
    def ready(self) -> bool:
        return self._ready

    def waitReady(self):  # noqa: N802 - pysyncobj's name
        self._bound.wait()
        if not self._ready:
            raise TransportNotReadyError

    def addNode(self, node):  # noqa: N802 - pysyncobj's name
        self._nodes[node.address] = node

    def dropNode(self, node):  # noqa: N802 - pysyncobj's name
        self._nodes.pop(node.address, None)
        self._last_dial.pop(node, None)
        conn = self._links.get(node)
        if conn is not None:
            self._close(conn, "node dropped", kind="info")

    def set_member(self, node_id: str, raft_addr: str) -> None:
        """Accept `node_id`'s certificate at `raft_addr` (tick thread; before `addNode`)."""
        old = self._members.pop(node_id, None)
        if old is not None:
            self._id_by_addr.pop(old, None)
        self._members[node_id] = raft_addr
        self._id_by_addr[raft_addr] = node_id

    def drop_member(self, node_id: str) -> None:
        """Refuse `node_id` from now on (tick thread; after `dropNode`)."""
        addr = self._members.pop(node_id, None)
        if addr is not None:
            self._id_by_addr.pop(addr, None)

    def send(self, node, message) -> bool:
        """Queue `message` on the link to `node`; False when there is no live link."""
        if threading.get_ident() != self._tick_ident:
            # Socket work stays on the tick thread; delivered by the next tick (<= 50 ms).
            self._foreign.append((node, message))
            return True
        conn = self._links.get(node)
        if conn is None or conn.state != _OPEN:
            return False
        if message.get("type") == "append_entries" and \
                len(conn.out) + conn.bio_out.pending > self._limits.send_backlog_bytes:
            # The peer reads slower than we append (a follower catching up): drop this append
            # instead of queueing ever more. Raft tolerates the loss: the follower answers
            # the gap with its next index and we resend from there once the queue drained.
            # Queueing it all would end at max_send_buffer_bytes with the link closed and
            # everything sent again: a follower that never catches up.
            return False
        if "transmission" in message:
            # An entry above appendEntriesBatchSizeBytes: config.py keeps every entry below.
            log.error("refusing to send a log entry in pickled pieces to %s (raise "
                      "raft_append_batch_bytes on every node)", conn.who())
            return False
        try:
            data = wire.encode_frame(message)
        except wire.CodecError as exc:
            log.error("cannot encode a %r message for %s: %s", _kind(message), conn.who(), exc)
            self._close(conn, "a message could not be encoded", kind="info")
            return False
        if len(data) - 4 > self._limits.max_frame_bytes:
            # The peer would refuse it and close the link; say which limit to raise instead.
            log.error("a %r message of %d bytes for %s exceeds raft_max_frame_bytes (%d): "
                      "the link is closed (raise raft_max_frame_bytes on every node)",
                      _kind(message), len(data) - 4, conn.who(), self._limits.max_frame_bytes)
            self._close(conn, "message larger than raft_max_frame_bytes", kind="info")
            return False
        self._write_frame(conn, data)
        return conn.state == _OPEN

    def hold(self) -> None:
        """Start (or nest in) a batch: the journal defers its fsyncs, open links keep their
        ciphertext until `release`."""
        self._hold_depth += 1
        if self._hold_depth == 1:
            self.durable.defer_sync()

    def release(self) -> None:
        """End the batch: one fsync for what it appended, then what it wrote goes out."""
        self._hold_depth -= 1
        if self._hold_depth:
            return
        self.durable.sync()
        held, self._held = self._held, {}
        for conn in held:
            if conn.state == _OPEN:
                self._flush_tls(conn)

    def destroy(self):
        self.setOnMessageReceivedCallback(None)
        self.setOnNodeConnectedCallback(None)
        self.setOnNodeDisconnectedCallback(None)
        for conn in [*self._links.values(), *self._unauth]:
            self._close(conn, "transport destroyed", kind="quiet", notify=False)
        if self._listener is not None:
            self._unwatch_listener()
            self._listener.close()
            self._listener = None
        self._ready = False

    # -- listening --------------------------------------------------------------------------

    def _maybe_bind(self) -> None:
        if self._ready or monotonic() < self._last_bind + self._conf.bindRetryTime:
            return
        self._last_bind = monotonic()
        host = self._settings.bind_host or "0.0.0.0"
        port = int(self._self.address.rsplit(":", 1)[1])
        if host not in ("0.0.0.0", "::"):
            host = globalDnsResolver().resolve(host) or host
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                             socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setblocking(False)
            sock.bind((host, port))
            sock.listen(self._limits.listen_backlog)
        except OSError as exc:
            sock.close()
            self._bind_attempts += 1
            self._warn("bind", f"cannot listen on the Raft port {host}:{port}: {exc.strerror} "
                               f"(retrying every {self._conf.bindRetryTime:g} s)")
            if self._conf.maxBindRetries and self._bind_attempts >= self._conf.maxBindRetries:
                self._bound.set()
                raise TransportNotReadyError from None
            return
        self._listener = sock
        self._watch_listener()
        self._ready = True
        self._bound.set()

    def _watch_listener(self) -> None:
        assert self._listener is not None
        self._poller.subscribe(self._listener.fileno(), self._on_accept, _READ | _ERROR)

    def _unwatch_listener(self) -> None:
        if self._listener is not None:
            self._poller.unsubscribe(self._listener.fileno())

    def _on_accept(self, descr: int, event: int) -> None:
        listener = self._listener
        if listener is None or descr != listener.fileno():
            return
        if event & _ERROR and not event & _READ:
            # Rebound by pysyncobj's next tick (it calls tryGetReady while not ready).
            self._warn("listen", "error on the Raft listening socket; listening again")
            self._unwatch_listener()
            listener.close()
            self._listener = None
            self._ready = False
            return
        now = monotonic()
        for _ in range(ACCEPT_BUDGET):
            try:
                sock, addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno == errno.ECONNABORTED:
                    continue
                # EMFILE, ENFILE, ENOBUFS...: the queue stays readable; pause, do not spin.
                self._warn("accept", f"cannot accept Raft connections: {exc.strerror}; "
                                     f"pausing {ACCEPT_PAUSE_S:g} s")
                self._unwatch_listener()
                self._accept_paused_until = now + ACCEPT_PAUSE_S
                return
            label = f"{addr[0]}:{addr[1]}"
            if len(self._unauth) >= self._limits.max_unauthenticated:
                sock.close()
                self._warn("refused", f"refused a Raft connection from {label}: "
                                      f"{len(self._unauth)} connections are authenticating "
                                      f"already (raft_max_unauthenticated)")
                continue
            conn = self._new_conn(sock, server_side=True, node=None, label=label, now=now,
                                  state=_HANDSHAKE)
            if conn is not None:
                self._unauth.add(conn)

    # -- dialing ----------------------------------------------------------------------------

    def _should_dial(self, node: Node) -> bool:
        return self._self.address > node.address  # pysyncobj's rule

    def _dial(self, node: Node, now: float) -> None:
        self._last_dial[node] = now
        ip = node.ip
        if ip is None:
            log.debug("cannot resolve %s", node.address)
            return
        sock = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        err = sock.connect_ex((ip, node.port))
        if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            sock.close()
            log.debug("dialing %s failed: %s", node.address, os.strerror(err))
            return
        conn = self._new_conn(sock, server_side=False, node=node, label=node.address, now=now,
                              state=_CONNECTING)
        if conn is not None:
            conn.peer_id = self._id_by_addr.get(node.address)
            self._links[node] = conn

    # -- connections ------------------------------------------------------------------------

    def _new_conn(self, sock: socket.socket, *, server_side: bool, node: Node | None,
                  label: str, now: float, state: int) -> _Conn | None:
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            sock.close()
            return None
        tls = self._settings.tls.current
        bio_in, bio_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = (tls.server if server_side else tls.client).wrap_bio(
            bio_in, bio_out, server_side=server_side)
        conn = _Conn(sock, obj, bio_in, bio_out, server_side=server_side, node=node, label=label,
                     frame_limit=HELLO_MAX_BYTES if server_side else self._limits.max_frame_bytes,
                     now=now, deadline=now + self._limits.handshake_timeout_s, state=state)
        conn.callback = functools.partial(self._on_event, conn)
        self._watch(conn)
        return conn

    def _watch(self, conn: _Conn) -> None:
        if conn.state == _CONNECTING:
            mask = _WRITE | _ERROR
        else:
            mask = _READ | _ERROR | (_WRITE if conn.out else 0)
        if mask != conn.mask:
            conn.mask = mask
            self._poller.subscribe(conn.fileno, conn.callback, mask)

    def _on_event(self, conn: _Conn, descr: int, event: int) -> None:
        # pysyncobj's poll loop may hand us an event of a socket closed earlier in the same
        # round (or of a reused descriptor): the state and descriptor checks drop it.
        if conn.state == _CLOSED or descr != conn.fileno:
            return
        self.hold()
        try:
            self._handle_event(conn, event)
        finally:
            self.release()

    def _handle_event(self, conn: _Conn, event: int) -> None:
        if conn.state == _CONNECTING:
            err = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err or not event & _WRITE:
                self._close(conn, f"connect failed: {os.strerror(err) if err else 'hang-up'}",
                            kind="quiet")
                return
            conn.state = _HANDSHAKE
            self._handshake(conn)  # sends the ClientHello
        else:
            if event & _READ:
                self._read(conn)
            if conn.state != _CLOSED and event & _WRITE:
                self._send_out(conn)
            if conn.state != _CLOSED and event & _ERROR and not event & _READ:
                self._close(conn, "socket error or hang-up", kind=self._failure_kind(conn))
        if conn.state != _CLOSED:
            self._watch(conn)

    def _read(self, conn: _Conn) -> None:
        budget = READ_BUDGET_BYTES
        while True:
            try:
                data = conn.sock.recv(RECV_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._close(conn, f"read failed: {exc.strerror}", kind=self._failure_kind(conn))
                return
            if not data:
                self._close(conn, "closed by the peer", kind=self._failure_kind(conn, eof=True))
                return
            conn.last_rx = monotonic()
            conn.bio_in.write(data)
            if conn.state == _HANDSHAKE:
                self._handshake(conn)
            if conn.state in (_HELLO, _OPEN):
                self._decrypt(conn)
            if conn.state == _CLOSED:
                return
            budget -= len(data)
            if budget <= 0 or len(data) < RECV_BYTES:
                return

    def _handshake(self, conn: _Conn) -> None:
        try:
            conn.ssl.do_handshake()
        except ssl.SSLWantReadError:
            self._flush_tls(conn)
            return
        except ssl.SSLError as exc:
            self._flush_tls(conn)  # our alert tells the peer why
            self._close(conn, f"TLS handshake failed: {_reason(exc)}", kind="warn",
                        key="handshake")
            return
        self._flush_tls(conn)
        if conn.state != _CLOSED:
            self._authenticate(conn)

    def _authenticate(self, conn: _Conn) -> None:
        """The TLS handshake verified the chain; now the certificate must name the member."""
        ids = peer_node_ids(conn.ssl.getpeercert())
        if not conn.server_side:
            assert conn.node is not None
            expected = self._id_by_addr.get(conn.node.address)
            if ids != [expected]:
                self._close(conn, f"its certificate names {ids or 'no node'}, but the members "
                                  f"list has {expected!r} at {conn.node.address}",
                            kind="warn", key="identity")
                return
            conn.peer_id = expected
            self._write_frame(conn, wire.encode_frame(
                {"type": "hello", "version": PROTOCOL_VERSION, "node": self._self.address}))
            if conn.state != _CLOSED:
                self._open(conn)
            return
        if len(ids) != 1:
            self._close(conn, f"its certificate must name one cluster member by a "
                              f"{'urn:gnomon:node:<id>'!r} URI; it names {ids or 'none'}",
                        kind="warn", key="identity")
            return
        peer_id = ids[0]
        addr = self._members.get(peer_id)
        node = self._nodes.get(addr) if addr is not None else None
        if node is None:
            self._close(conn, f"its certificate names {peer_id!r}, which is not a peer of "
                              f"this node", kind="warn", key="identity")
            return
        if self._should_dial(node):
            self._close(conn, f"{peer_id} ({addr}) dialed, but this node dials it (the node "
                              f"with the greater address dials): do the member lists differ?",
                        kind="warn", key="identity")
            return
        conn.peer_id, conn.node = peer_id, node
        conn.state = _HELLO

    def _on_hello(self, conn: _Conn, payload: bytes) -> None:
        try:
            hello = wire.decode(payload)
        except wire.CodecError as exc:
            self._close(conn, f"malformed hello: {exc}", kind="warn", key="hello")
            return
        assert conn.node is not None
        if type(hello) is not dict or hello.get("type") != "hello":
            self._close(conn, "the first frame is not a hello", kind="warn", key="hello")
        elif hello.get("version") != PROTOCOL_VERSION:
            self._close(conn, f"it speaks transport version {hello.get('version')!r}, this "
                              f"node {PROTOCOL_VERSION}", kind="warn", key="hello")
        elif hello.get("node") != conn.node.address:
            self._close(conn, f"it says it is {hello.get('node')!r}, the members list has "
                              f"{conn.peer_id} at {conn.node.address}: do the member lists "
                              f"differ?", kind="warn", key="hello")
        else:
            self._open(conn)

    def _open(self, conn: _Conn) -> None:
        assert conn.node is not None
        conn.state = _OPEN
        conn.frames.limit = self._limits.max_frame_bytes
        conn.last_rx = monotonic()
        self._unauth.discard(conn)
        old = self._links.get(conn.node)
        if old is not None and old is not conn:
            # The peer dialed again (it restarted, or its side of the old link died first).
            self._close(old, "replaced by a new connection", kind="quiet", notify=False)
        self._links[conn.node] = conn
        log.info("Raft link with %s up (%s, %s)", conn.who(), conn.ssl.version(),
                 (conn.ssl.cipher() or ("?",))[0])
        self._onNodeConnected(conn.node)

    def _decrypt(self, conn: _Conn) -> None:
        # Drain the SSL object completely: poll only sees the socket, not what it holds.
        while conn.state in (_HELLO, _OPEN):
            try:
                data = conn.ssl.read(RECV_BYTES)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self._close(conn, "the peer ended the TLS session", kind=self._failure_kind(conn))
                return
            except ssl.SSLError as exc:
                self._close(conn, f"TLS error: {_reason(exc)}", kind="warn", key="tls")
                return
            if not data:
                self._close(conn, "the peer ended the TLS session", kind=self._failure_kind(conn))
                return
            conn.frames.push(data)
            while conn.state in (_HELLO, _OPEN):
                try:
                    payload = conn.frames.pop()
                except wire.FrameTooLarge as exc:
                    limit = "raft_max_frame_bytes" if conn.state == _OPEN else \
                        f"{HELLO_MAX_BYTES} before the hello"
                    self._close(conn, f"{exc} ({limit})", kind="warn", key="frame")
                    return
                if payload is None:
                    break
                self._on_frame(conn, payload)
        if conn.state != _CLOSED and conn.bio_out.pending:
            self._flush_tls(conn)  # e.g. a TLS 1.3 KeyUpdate answer

    def _on_frame(self, conn: _Conn, payload: bytes) -> None:
        if not payload:
            return  # a ping: last_rx is all it is for
        if conn.state == _HELLO:
            self._on_hello(conn, payload)
            return
        try:
            message = wire.check_message(wire.decode(payload))
        except wire.CodecError as exc:
            self._close(conn, f"malformed message: {exc}", kind="warn", key="message")
            return
        self._onMessageReceived(conn.node, message)

    # -- writing ----------------------------------------------------------------------------

    def _write_frame(self, conn: _Conn, data: bytes | bytearray) -> None:
        try:
            conn.ssl.write(data)
        except ssl.SSLError as exc:
            self._close(conn, f"TLS error while writing: {_reason(exc)}", kind="info")
            return
        conn.last_tx = monotonic()
        self._flush_tls(conn)

    def _flush_tls(self, conn: _Conn) -> None:
        if self._hold_depth and conn.state == _OPEN:
            self._held[conn] = None
            return
        data = conn.bio_out.read()
        if not data:
            return
        if not conn.out:
            try:
                sent = conn.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._close(conn, f"write failed: {exc.strerror}", kind=self._failure_kind(conn))
                return
            if sent == len(data):
                return
            conn.out += memoryview(data)[sent:]
        else:
            conn.out += data
        if len(conn.out) > self._limits.max_send_buffer_bytes:
            self._close(conn, f"{len(conn.out)} bytes wait to be sent: it does not read "
                              f"(raft_max_send_buffer_bytes {self._limits.max_send_buffer_bytes})",
                        kind="warn", key="send-buffer")
            return
        self._watch(conn)

    def _send_out(self, conn: _Conn) -> None:
        if not conn.out:
            return
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(conn, f"write failed: {exc.strerror}", kind=self._failure_kind(conn))
            return
        del conn.out[:sent]

    # -- closing ----------------------------------------------------------------------------

    def _failure_kind(self, conn: _Conn, *, eof: bool = False) -> str:
        if conn.state == _OPEN:
            return "info"
        if conn.server_side:
            return "warn"
        # Dialing a node that is down or restarting is routine; a peer that accepts and
        # then hangs up during the handshake most likely refused our certificate.
        return "warn" if eof and conn.state == _HANDSHAKE else "quiet"

    def _close(self, conn: _Conn, reason: str, *, kind: str, key: str = "",
               notify: bool = True) -> None:
        if conn.state == _CLOSED:
            return
        was = conn.state
        conn.state = _CLOSED
        self._poller.unsubscribe(conn.fileno)
        try:
            conn.sock.close()
        except OSError:
            pass
        conn.out = bytearray()
        self._unauth.discard(conn)
        node = conn.node
        if node is not None and self._links.get(node) is conn:
            del self._links[node]
            if was == _OPEN and notify:
                self._onNodeDisconnected(node)
        side = "accepted from" if conn.server_side else "dialed to"
        text = f"Raft connection {side} {conn.who()} closed: {reason}"
        if kind == "info":
            log.info("%s", text)
        elif kind == "warn":
            self._warn(key or ("open" if was == _OPEN else "unauthenticated"), text)
        else:
            log.debug("%s", text)

    def _warn(self, key: str, text: str) -> None:
        now = monotonic()
        until, suppressed = self._warned.get(key, (0.0, 0))
        if now < until:
            self._warned[key] = (until, suppressed + 1)
            return
        self._warned[key] = (now + WARN_EVERY_S, 0)
        if suppressed:
            text += f" ({suppressed} more like it in the last {WARN_EVERY_S:g} s not logged)"
        log.warning("%s", text)

    # -- the tick ---------------------------------------------------------------------------

    def _on_tick(self) -> None:
        self._tick_ident = threading.get_ident()
        while self._foreign:
            node, message = self._foreign.popleft()
            self.send(node, message)
        now = monotonic()
        if now < self._next_housekeeping:
            return
        self._next_housekeeping = now + HOUSEKEEPING_S
        lim = self._limits
        if self._accept_paused_until and now >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            if self._listener is not None:
                self._watch_listener()
        for conn in list(self._unauth):
            if now > conn.deadline:
                self._close(conn, f"not authenticated within {lim.handshake_timeout_s:g} s "
                                  f"(raft_handshake_timeout_ms)", kind="warn", key="slow")
            elif now - conn.last_rx > lim.unauthenticated_idle_s:
                self._close(conn, f"nothing received for {lim.unauthenticated_idle_s:g} s "
                                  f"before authentication (raft_unauthenticated_idle_ms)",
                            kind="warn", key="idle")
        for conn in list(self._links.values()):
            if conn.state == _OPEN:
                if now - conn.last_rx > lim.peer_timeout_s:
                    self._close(conn, f"nothing received for {lim.peer_timeout_s:g} s "
                                      f"(raft_peer_timeout_ms)", kind="info")
                elif now - conn.last_tx > lim.peer_timeout_s / PING_FRACTION:
                    self._write_frame(conn, wire.PING)
            elif now > conn.deadline:
                self._close(conn, f"not connected and authenticated within "
                                  f"{lim.handshake_timeout_s:g} s (raft_handshake_timeout_ms)",
                            kind="warn" if conn.state == _HANDSHAKE else "quiet", key="slow")
        for node in list(self._nodes.values()):
            if (node not in self._links and self._should_dial(node)
                    and now - self._last_dial.get(node, float("-inf")) >= lim.connect_retry_s):
                self._dial(node, now)


def _kind(message: object) -> object:
    return message.get("type") if isinstance(message, dict) else type(message).__name__


def _reason(exc: ssl.SSLError) -> str:
    return exc.reason or exc.strerror or str(exc)
