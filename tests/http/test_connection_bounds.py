"""The HTTP port's connection bounds against real node processes (node/api/http/DESIGN.md,
"Connections"): slow and silent connections are closed at the header timeout, a body that
does not arrive in time is cut, a client that drops mid-body is a quiet 400 (no traceback),
connections over the per-address and per-port caps are refused while other clients are
answered, and at a low open-file limit idle connections neither stop gRPC nor the journal nor
flood the log.

Clients take source addresses in 127.0.0.0/8 (all loopback on Linux) to be several clients."""

from __future__ import annotations

import contextlib
import resource
import socket
import ssl
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import grpc
import pytest

from gnomon.node.local.cluster import LocalCluster, NodeProc, wait_for
from gnomon.v1 import api_pb2, api_pb2_grpc
from tests.support.cluster import module_cluster
from tests.support.http import call
from tests.support.jobs import create_jobs
from tests.support.metrics import samples, scrape
from tests.support.resources import attack

pytestmark = pytest.mark.integration

HEADER_S = 1.0
OVERRIDES = {"http_header_timeout_ms": "1000", "http_body_timeout_ms": "1000",
             "http_write_timeout_ms": "1000",
             "http_max_connections": "24", "http_max_connections_per_address": "5"}


@pytest.fixture(scope="module")
def node(tmp_path_factory, request) -> Iterator[NodeProc]:
    with module_cluster(tmp_path_factory.mktemp("conns"), OVERRIDES, request=request, size=1,
                        http=True, metrics=True) as cluster:
        yield cluster.leader()


@pytest.fixture(autouse=True)
def _no_connection_left(request) -> Iterator[None]:
    """Each test starts with the port empty (the last one's sockets closed and seen)."""
    yield
    if "node" in request.fixturenames:
        node = request.getfixturevalue("node")
        wait_for(lambda: _metric(node, "gnomon_http_connections") == 0, timeout_s=10,
                 what="the HTTP port to have no connection open")


# -- helpers -------------------------------------------------------------------------------


def _connect(node: NodeProc, source: str = "127.0.0.1") -> socket.socket:
    host, port = node.http_addr.rsplit(":", 1)
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(5)
    sock.connect((host, int(port)))
    sock.setblocking(False)
    return sock


def _closed(sock: socket.socket) -> bool:
    """The node closed it (what it sent first, if anything, is read and dropped)."""
    try:
        while sock.recv(65536):
            pass
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def _answer(sock: socket.socket, timeout_s: float = 5.0) -> bytes:
    """Everything the node sends until it closes the connection."""
    sock.settimeout(timeout_s)
    out = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            out += chunk
    return out


def _kept_alive(node: NodeProc, source: str) -> socket.socket:
    """A connection that had one request answered and is kept alive (idle)."""
    sock = _connect(node, source)
    sock.settimeout(5)
    sock.sendall(b"GET /v1/openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    body = head.split(b"\r\n\r\n", 1)[1]
    while len(body) < length:
        body += sock.recv(65536)
    sock.setblocking(False)
    return sock


def _metric(node: NodeProc, key: str) -> float:
    return samples(scrape(node.metrics_addr)).get(key, 0.0)


def _log_tail(node: NodeProc, since: int) -> str:
    with open(node.log_path, "rb") as fh:
        fh.seek(since)
        return fh.read().decode(errors="replace")


def _no_error_since(node: NodeProc, since: int) -> None:
    tail = _log_tail(node, since)
    bad = [line for line in tail.splitlines() if " ERROR " in line or "Traceback" in line]
    assert not bad, bad[:3]


# -- timeouts ------------------------------------------------------------------------------


def _honest(node: NodeProc) -> None:
    r = call(node.url, "GET", "/v1/cluster", timeout=5)
    assert r.status == 200, r.text


@pytest.mark.resources
def test_slow_and_silent_connections_are_closed_after_the_header_timeout(node):
    with attack("HTTP: 10 silent and 10 slow-header connections (slowloris)", node,
                honest=lambda: _honest(node)):
        silent = [_connect(node, f"127.0.2.{1 + i % 2}") for i in range(10)]
        slow = [_connect(node, f"127.0.2.{3 + i % 2}") for i in range(10)]
        started = time.monotonic()
        for sock in slow:
            sock.send(b"GET /v1/cluster HTTP/1.1\r\nHost: x\r\n")

        def all_closed() -> bool:
            for sock in slow:  # a byte at a time: no byte extends the deadline
                with contextlib.suppress(OSError):
                    sock.send(b"X")
            return all(_closed(s) for s in silent + slow)

        wait_for(all_closed, timeout_s=10 * HEADER_S, what="the slow and silent connections "
                 "to be closed", interval_s=0.1)
        elapsed = time.monotonic() - started
        for sock in silent + slow:
            sock.close()
    assert elapsed >= 0.9 * HEADER_S, f"closed after {elapsed:.2f} s, before the timeout"
    assert _metric(node, 'gnomon_http_connections_timed_out_total{phase="header"}') >= 20


def test_a_body_that_does_not_arrive_in_time_is_cut_quietly(node):
    since = node.log_path.stat().st_size
    sock = _connect(node)
    started = time.monotonic()
    sock.send(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 1000\r\n\r\n{")

    def closed() -> bool:
        with contextlib.suppress(OSError):
            sock.send(b" ")
        return _closed(sock)

    wait_for(closed, timeout_s=10 * HEADER_S, what="the slow body's connection to be closed",
             interval_s=0.1)
    assert time.monotonic() - started >= 0.9 * HEADER_S
    sock.close()
    assert call(node.url, "GET", "/v1/cluster").status == 200
    wait_for(lambda: _metric(node, 'gnomon_http_connections_timed_out_total{phase="body"}') >= 1,
             timeout_s=5, what="the body timeout counted")
    _no_error_since(node, since)


def test_a_client_that_stops_reading_its_responses_is_cut_at_the_write_timeout(node):
    """Pipelined requests whose answers (megabytes) are never read: once the socket buffers
    are full the node's write waits; it used to wait for ever, holding the connection and the
    answers in memory. At http_write_timeout_ms the connection is aborted."""
    since = node.log_path.stat().st_size
    key = 'gnomon_http_connections_timed_out_total{phase="write"}'
    before = _metric(node, key)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
    host, port = node.http_addr.rsplit(":", 1)
    sock.settimeout(5)
    sock.connect((host, int(port)))
    sock.sendall(b"GET /v1/openapi.json HTTP/1.1\r\nHost: x\r\n\r\n" * 400)
    assert call(node.url, "GET", "/v1/cluster").status == 200  # others are answered
    wait_for(lambda: _metric(node, key) > before, timeout_s=10 * HEADER_S,
             what="the unread responses' connection to be cut", interval_s=0.1)
    wait_for(lambda: _metric(node, "gnomon_http_connections") == 0, timeout_s=10,
             what="the connection to be closed")
    assert "was not all read within 1 s (http_write_timeout_ms)" in _log_tail(node, since)
    sock.close()


def test_a_client_that_drops_mid_body_leaves_no_traceback(node):
    since = node.log_path.stat().st_size
    head = (b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n{\"spec\": ")
    for reset in (True, True, True, False):
        sock = _connect(node)
        sock.setblocking(True)
        sock.sendall(head)
        if reset:  # gone at once
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:  # half-closed: the node closes its side too (asyncio's way with an EOF)
            sock.shutdown(socket.SHUT_WR)
            assert not _answer(sock).startswith(b"HTTP/1.1 5")
        sock.close()
    wait_for(lambda: _metric(node, "gnomon_http_connections") == 0, timeout_s=10,
             what="the dropped connections to be gone")
    assert call(node.url, "GET", "/v1/cluster").status == 200
    _no_error_since(node, since)


# -- caps ----------------------------------------------------------------------------------


def test_connections_over_the_per_address_cap_are_refused_others_are_answered(node):
    refused_before = _metric(node, 'gnomon_http_connections_refused_total{reason="address"}')
    held = [_kept_alive(node, "127.0.3.1") for _ in range(5)]
    extra = [_connect(node, "127.0.3.1") for _ in range(3)]
    for sock in extra:  # at once: a 503, then closed
        answer = _answer(sock, timeout_s=5)
        assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
        sock.close()
    r = call(node.url, "GET", "/v1/cluster")  # another address
    assert r.status == 200, r.text
    assert not any(_closed(s) for s in held)  # the ones within the cap stay served
    refused = _metric(node, 'gnomon_http_connections_refused_total{reason="address"}')
    assert refused - refused_before == 3
    for sock in held:
        sock.close()
    # Below the cap again: the address is served.
    wait_for(lambda: _metric(node, "gnomon_http_connections") == 0, timeout_s=10,
             what="the held connections to be gone")
    _kept_alive(node, "127.0.3.1").close()


def test_connections_over_the_port_cap_are_refused_until_some_close(node):
    held = [_kept_alive(node, f"127.0.4.{1 + i // 5}") for i in range(24)]  # 5 per address
    over = _connect(node, "127.0.4.9")
    assert _answer(over).startswith(b"HTTP/1.1 503")
    over.close()
    assert _metric(node, 'gnomon_http_connections_refused_total{reason="port"}') >= 1
    held.pop().close()
    wait_for(lambda: _metric(node, "gnomon_http_connections") == 23, timeout_s=10,
             what="one connection to be gone")
    assert call(node.url, "GET", "/v1/cluster").status == 200
    for sock in held:
        sock.close()


# -- descriptors ---------------------------------------------------------------------------

NOFILE = 256
IDLE = 400  # connections opened: more than the node may have descriptors


class LimitedCluster(LocalCluster):
    """Nodes started with RLIMIT_NOFILE soft = hard = NOFILE (as `prlimit --nofile`)."""

    def start_node(self, node_id: str, *, join: bool = False) -> None:
        popen = subprocess.Popen

        def limited(args, **kwargs):
            kwargs["preexec_fn"] = lambda: resource.setrlimit(resource.RLIMIT_NOFILE,
                                                              (NOFILE, NOFILE))
            return popen(args, **kwargs)

        with mock.patch.object(subprocess, "Popen", limited):
            super().start_node(node_id, join=join)


def _fresh_status(node: NodeProc) -> float:
    """Seconds one GetStatus takes on a channel of its own (a new connection to the node)."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    with grpc.insecure_channel(node.grpc_addr, options=options) as channel:
        started = time.monotonic()
        api_pb2_grpc.ClusterServiceStub(channel).GetStatus(api_pb2.GetStatusRequest(),
                                                           timeout=3)
        return time.monotonic() - started


@pytest.mark.resources
def test_at_a_low_open_file_limit_idle_connections_do_not_stop_the_node(tmp_path: Path):
    overrides = {"http_max_connections": "1024", "http_max_connections_per_address": "1024",
                 "http_header_timeout_ms": "60000", "http_idle_timeout_ms": "60000"}
    cluster = LimitedCluster(tmp_path, 1, overrides, http=True, metrics=True).start()
    socks: list[socket.socket] = []
    try:
        node = cluster.leader()
        assert node.proc is not None
        since = node.log_path.stat().st_size
        with attack(f"HTTP: {IDLE} idle connections at a {NOFILE}-descriptor limit", node,
                    honest=lambda: _fresh_status(node)):
            socks = [_connect(node, "127.0.5.1") for _ in range(IDLE)]
            # Every connection is admitted or refused; none waits in the accept queue.
            wait_for(lambda: (_metric(node, "gnomon_http_connections") + _metric(
                node, 'gnomon_http_connections_refused_total{reason="descriptors"}')) >= IDLE,
                timeout_s=20, what="the node to admit or refuse every connection")
            admitted = _metric(node, "gnomon_http_connections")
            assert 0 < admitted < NOFILE - 128 + 1, admitted  # reserved_descriptors stay free
            # gRPC clients are still answered, and the journal still writes.
            latencies = [_fresh_status(node) for _ in range(5)]
            assert max(latencies) < 1.0, latencies
            [job_id] = create_jobs(node, ["at-the-limit"])
            assert job_id
            logged = node.log_path.stat().st_size - since
            assert logged < 16 << 10, f"{logged} bytes logged: {_log_tail(node, since)[-2000:]}"
            assert "refused a connection" in _log_tail(node, since)
            assert node.alive(), node.proc.poll()
            # Once the idle connections go, HTTP clients are served again.
            for sock in socks:
                sock.close()
            socks = []
        wait_for(lambda: call(node.url, "GET", "/v1/cluster", timeout=2).status == 200,
                 timeout_s=10, what="HTTP to answer again")
        assert node.alive()
    finally:
        for sock in socks:
            sock.close()
        cluster.stop()


# -- TLS -----------------------------------------------------------------------------------


def test_a_tls_connection_that_never_handshakes_is_closed_at_the_header_timeout(tmp_path):
    cluster = LocalCluster(tmp_path, 1, {"http_header_timeout_ms": "1000"}, secure=True,
                           http=True).start()
    try:
        node = cluster.leader()
        silent = _connect(node)
        started = time.monotonic()
        wait_for(lambda: _closed(silent), timeout_s=10, what="the silent TLS connection to "
                 "be closed", interval_s=0.1)
        assert time.monotonic() - started >= 0.9
        silent.close()
        files = cluster.client_tls()
        ctx = ssl.create_default_context(cafile=files["ca_file"])
        ctx.load_cert_chain(files["cert_file"], files["key_file"])
        host, port = node.http_addr.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(b"GET /v1/openapi.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert tls.recv(12) == b"HTTP/1.1 200"
    finally:
        cluster.stop()
