"""A node's certificates are reloaded when their files change (node/security/reload.py):
cert-manager renews a short-lived certificate in place, and a node used to need a restart
(an election, for a leader) to present it. A renewal that does not load (a certificate
beside the old key) is refused with one warning, and the last good one stays."""

from __future__ import annotations

import os
import socket
import ssl

import pytest
from cryptography import x509

from gnomon.node.local.cluster import LocalCluster, wait_for
from gnomon.node.security.certificates import _load_ca, issue, write_cert, write_key

pytestmark = pytest.mark.integration


def _client_context(cluster: LocalCluster, folder) -> ssl.SSLContext:
    """The client certificate as it is now (the test replaces the node's files it is)."""
    files = cluster.client_tls()
    folder.mkdir()
    cert, key = folder / "client.crt", folder / "client.key"
    cert.write_bytes(open(files["cert_file"], "rb").read())
    key.write_bytes(open(files["key_file"], "rb").read())
    ctx = ssl.create_default_context(cafile=files["ca_file"])
    ctx.load_cert_chain(cert, key)
    ctx.check_hostname = False
    return ctx


def _presented_serial(ctx: ssl.SSLContext, address: str) -> int:
    """The serial number of the certificate a new TLS connection to `address` is shown."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as raw, \
            ctx.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def _replace(path, write) -> None:
    """Install a new file the way a renewal does: written beside, renamed over."""
    tmp = path.with_name(path.name + ".new")
    write(tmp)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def test_a_renewed_certificate_is_presented_without_a_restart(tmp_path):
    cluster = LocalCluster(tmp_path, 1, {"tls_reload_interval_ms": "200"}, secure=True,
                           http=True).start()
    try:
        node = cluster.leader()
        pid = node.proc.pid
        files = cluster.tls_files()[node.node_id]
        ctx = _client_context(cluster, tmp_path / "client")
        first = _presented_serial(ctx, node.grpc_addr)
        assert _presented_serial(ctx, node.http_addr) == first
        ca = _load_ca(files.ca, files.ca.with_name("ca.key"))
        assert ca is not None
        cert, key = issue(ca, f"gnomon node {node.node_id}", node_id=node.node_id,
                          hosts=["127.0.0.1", "localhost"])
        _replace(files.key, lambda p: write_key(p, key))
        _replace(files.cert, lambda p: write_cert(p, cert))
        # The gRPC, HTTP and Raft ports (the one file serves all three here).
        ports = (node.grpc_addr, node.http_addr, node.raft_addr)
        assert _presented_serial(ctx, node.raft_addr) == first
        for address in ports:
            wait_for(lambda a=address: _presented_serial(ctx, a) == cert.serial_number,
                     timeout_s=10, what=f"{address} to present the renewed certificate")
        # A renewal that does not load: a new certificate beside the key it does not match.
        stray, _other_key = issue(ca, "a certificate of another key", node_id=node.node_id,
                                  hosts=["127.0.0.1"])
        since = node.log_path.stat().st_size
        _replace(files.cert, lambda p: write_cert(p, stray))
        def logged() -> str:
            return node.log_path.read_bytes()[since:].decode(errors="replace")

        wait_for(lambda: "do not load as a key and its certificate" in logged() and
                 "raft_tls_cert: the changed files do not load" in logged(),
                 timeout_s=10, what="the refused renewal to be logged for both")
        for address in ports:
            assert _presented_serial(ctx, address) == cert.serial_number, address
        assert node.proc.pid == pid and node.alive()  # never restarted
        assert cluster.status(node, include_digest=False).term == 1
    finally:
        cluster.stop()
