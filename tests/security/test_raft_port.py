"""Attacks on the Raft port of a real 3-node cluster (node/raft/DESIGN.md).

Each attack must end with the connection closed, every node up, the leader and term
unchanged (for attackers without a member's key) and nothing applied: the jobs are the same
and no code ran (a pickle that would create a file never does).
"""

from __future__ import annotations

import pickle
import socket
import ssl
import struct
import time
from pathlib import Path

import pytest

from gnomon.node.local.cluster import LocalCluster, wait_for
from gnomon.node.raft import wire
from gnomon.node.security import certificates as tls_mod
from gnomon.v1 import api_pb2
from tests.support.cluster import module_cluster

pytestmark = pytest.mark.integration

OVERRIDES = {"raft_unauthenticated_idle_ms": "1000", "raft_handshake_timeout_ms": "2000",
             "raft_max_unauthenticated": "32"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    with module_cluster(tmp_path_factory.mktemp("raftsec"), OVERRIDES, request=request) as c:
        yield c


class Observed:
    """Who leads, in which term, and the jobs: what an attack must not change."""

    def __init__(self, cluster: LocalCluster):
        self.cluster = cluster
        self.leader = cluster.leader()
        status = cluster.status(self.leader, include_digest=False)
        self.term = status.term
        self.jobs = self._jobs()

    def _jobs(self) -> list[str]:
        reply = self.leader.jobs().ListJobs(api_pb2.ListJobsRequest(limit=1000), timeout=5)
        return sorted(j.spec.name for j in reply.jobs)

    def assert_unchanged(self, *, same_term: bool = True) -> None:
        for node in self.cluster.nodes:
            assert node.alive(), f"{node.node_id} died:\n{self.cluster.logs()}"
        leader = self.cluster.leader()
        if same_term:
            assert leader.node_id == self.leader.node_id
            assert self.cluster.status(leader, include_digest=False).term == self.term
        assert self._jobs() == self.jobs
        _assert_replicas_agree(self.cluster)


def _assert_replicas_agree(cluster: LocalCluster) -> None:
    """Equal digests at equal applied index (polled: followers may be one entry behind)."""

    def agree():
        seen = {}
        for node in cluster.nodes:
            st = cluster.status(node, include_digest=True)
            seen.setdefault(st.applied_index, set()).add(st.state_digest)
        return all(len(d) == 1 for d in seen.values()) and len(seen) == 1

    wait_for(agree, timeout_s=20, what="all replicas at one applied index with one digest")


def _raft_addr(node) -> tuple[str, int]:
    host, port = node.raft_addr.rsplit(":", 1)
    return host, int(port)


def _closed(sock: socket.socket, timeout_s: float = 10.0) -> bool:
    """True once the peer closed the connection (EOF or reset) within timeout_s."""
    sock.settimeout(timeout_s)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError, OSError) as exc:
        return not isinstance(exc, TimeoutError)
    return False


def _tls_client(cert: Path | None, key: Path | None, ca: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


def _as_member(cluster: LocalCluster, target, member_id: str) -> ssl.SSLSocket:
    """A TLS connection to `target` with member `member_id`'s own key, hello sent."""
    files = cluster.tls_files()[member_id]
    ctx = _tls_client(files.cert, files.key, files.ca)
    sock = ctx.wrap_socket(socket.create_connection(_raft_addr(target), timeout=5))
    member = cluster.node(member_id)
    sock.sendall(wire.encode_frame({"type": "hello", "version": 1, "node": member.raft_addr}))
    return sock


def _dialer_of(cluster: LocalCluster, target) -> str:
    """A member that dials `target` (pysyncobj: the greater address dials)."""
    return next(n.node_id for n in cluster.nodes if n.raft_addr > target.raft_addr)


def _target_with_dialer(cluster: LocalCluster):
    """A follower some other member dials (the leader's links stay untouched)."""
    leader = cluster.leader()
    for node in sorted(cluster.nodes, key=lambda n: n.raft_addr):
        if node is not leader and any(n.raft_addr > node.raft_addr for n in cluster.nodes
                                      if n is not leader):
            return node, next(n.node_id for n in cluster.nodes if n is not leader
                              and n.raft_addr > node.raft_addr)
    return None, None


def test_plaintext_garbage_is_dropped(cluster):
    seen = Observed(cluster)
    for node in cluster.nodes:
        with socket.create_connection(_raft_addr(node), timeout=5) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)) * 16)
            assert _closed(sock)
    seen.assert_unchanged()


def test_old_pysyncobj_pickle_frame_without_tls_is_dropped(cluster, tmp_path):
    """What pysyncobj's own transport would accept: a length prefix and a pickle."""
    seen = Observed(cluster)
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    payload = pickle.dumps(Evil())
    for node in cluster.nodes:
        with socket.create_connection(_raft_addr(node), timeout=5) as sock:
            sock.sendall(struct.pack("!I", len(payload)) + payload)
            assert _closed(sock)
    assert not marker.exists()
    seen.assert_unchanged()


def test_huge_length_prefix_without_tls_costs_nothing(cluster):
    """The attack that cost 10.7 CPU-s and a leader change against pysyncobj's transport."""
    seen = Observed(cluster)
    with socket.create_connection(_raft_addr(seen.leader), timeout=5) as sock:
        sock.sendall(struct.pack("!I", 2**31 - 1))
        try:
            for _ in range(32):
                sock.sendall(b"\0" * (1 << 20))
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert _closed(sock)
    seen.assert_unchanged()


def test_tls_without_client_certificate_is_refused(cluster):
    seen = Observed(cluster)
    files = next(iter(cluster.tls_files().values()))
    ctx = _tls_client(None, None, files.ca)
    with socket.create_connection(_raft_addr(seen.leader), timeout=5) as raw:
        try:
            with ctx.wrap_socket(raw) as sock:  # TLS 1.3: the refusal follows the handshake
                sock.sendall(wire.encode_frame({"type": "hello", "version": 1, "node": "x"}))
                assert _closed(sock)
        except (ssl.SSLError, ConnectionResetError):
            pass
    seen.assert_unchanged()


def test_certificate_of_another_ca_is_refused(cluster, tmp_path):
    seen = Observed(cluster)
    dialer = _dialer_of(cluster, seen.leader) if any(
        n.raft_addr > seen.leader.raft_addr for n in cluster.nodes) else "n1"
    other = tls_mod.ensure_cluster_files(tmp_path / "other", {dialer: ["127.0.0.1"]})
    real_ca = cluster.tls_files()[dialer].ca
    ctx = _tls_client(other[dialer].cert, other[dialer].key, real_ca)
    with socket.create_connection(_raft_addr(seen.leader), timeout=5) as raw:
        try:
            with ctx.wrap_socket(raw) as sock:
                sock.sendall(wire.encode_frame({"type": "hello", "version": 1, "node": "x"}))
                assert _closed(sock)
        except (ssl.SSLError, ConnectionResetError):
            pass
    seen.assert_unchanged()


def test_cluster_certificate_naming_a_stranger_is_refused(cluster, tmp_path):
    """Signed by the cluster CA, but for a node id that is not a member."""
    seen = Observed(cluster)
    ca_dir = cluster.root / "tls"
    ca = tls_mod._load_ca(ca_dir / "ca.crt", ca_dir / "ca.key")
    assert ca is not None
    cert, key = tls_mod.issue(ca, "stranger", node_id="n99", hosts=["127.0.0.1"])
    tls_mod.write_cert(tmp_path / "s.crt", cert)
    tls_mod.write_key(tmp_path / "s.key", key)
    ctx = _tls_client(tmp_path / "s.crt", tmp_path / "s.key", ca_dir / "ca.crt")
    with ctx.wrap_socket(socket.create_connection(_raft_addr(seen.leader), timeout=5)) as sock:
        sock.sendall(wire.encode_frame({"type": "hello", "version": 1, "node": "127.0.0.1:1"}))
        assert _closed(sock)
    seen.assert_unchanged()


def test_idle_and_slow_connections_are_dropped_and_bounded(cluster):
    """More idle connections than raft_max_unauthenticated: the extra ones are refused at
    once, the rest dropped after raft_unauthenticated_idle_ms; the cluster keeps its leader."""
    seen = Observed(cluster)
    socks = []
    try:
        for _ in range(200):
            socks.append(socket.create_connection(_raft_addr(seen.leader), timeout=5))
        # A slow client: one byte of a ClientHello now and then, never finishing.
        slow = socket.create_connection(_raft_addr(seen.leader), timeout=5)
        socks.append(slow)
        slow.sendall(b"\x16")
        for sock in socks:
            assert _closed(sock, timeout_s=15)
    finally:
        for sock in socks:
            sock.close()
    seen.assert_unchanged()
    # The port still accepts (and refuses) new connections afterwards.
    with socket.create_connection(_raft_addr(seen.leader), timeout=5) as sock:
        sock.sendall(b"x" * 100)
        assert _closed(sock)


def test_member_key_cannot_make_a_node_unpickle(cluster, tmp_path):
    """Even with a member's key (stolen), a pickle in a frame is refused as malformed: the
    codec builds only plain values, and nothing runs."""
    target, dialer = _target_with_dialer(cluster)
    if target is None:
        pytest.skip("no follower is dialed by another follower in this address order")
    seen = Observed(cluster)
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    payload = pickle.dumps({"type": "append_entries", "term": 1, "commit_index": 0,
                            "x": Evil()})
    with _as_member(cluster, target, dialer) as sock:
        sock.sendall(struct.pack(">I", len(payload)) + payload)
        assert _closed(sock)
    assert not marker.exists()
    seen.assert_unchanged(same_term=False)


def test_member_key_with_oversized_and_truncated_frames(cluster):
    target, dialer = _target_with_dialer(cluster)
    if target is None:
        pytest.skip("no follower is dialed by another follower in this address order")
    seen = Observed(cluster)
    with _as_member(cluster, target, dialer) as sock:
        sock.sendall(struct.pack(">I", 2**31 - 1) + b"\0" * 4096)
        assert _closed(sock)
    with _as_member(cluster, target, dialer) as sock:
        body = wire.encode({"type": "request_vote", "term": 1})
        sock.sendall(struct.pack(">I", len(body) + 100) + body)  # announced more than sent
    with _as_member(cluster, target, dialer) as sock:
        sock.sendall(wire.encode_frame({"type": "no_such_message"}))
        assert _closed(sock)
    with _as_member(cluster, target, dialer) as sock:
        sock.sendall(wire.encode_frame({"type": "append_entries", "term": "1"}))
        assert _closed(sock)
    with _as_member(cluster, target, dialer) as sock:
        sock.sendall(wire.encode_frame({"type": "append_entries", "term": 1, "commit_index": 0,
                                        "transmission": "start", "data": b"\x80\x02"}))
        assert _closed(sock)
    seen.assert_unchanged(same_term=False)
