"""The HTTP port speaks the gRPC port's TLS: the same certificate, and with tls_client_ca the
same mutual TLS; a follower's redirect names the leader's https address."""

from __future__ import annotations

import http.client
import json
import ssl

import pytest

from gnomon.node.localcluster import LocalCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    c = LocalCluster(tmp_path_factory.mktemp("https"), 3, secure=True, http=True).start()
    try:
        c.leader()
        yield c
    finally:
        c.stop()
        if request.session.testsfailed:
            print(c.logs())


def _context(cluster, *, client_cert: bool) -> ssl.SSLContext:
    files = cluster.client_tls()
    ctx = ssl.create_default_context(cafile=files["ca_file"])
    if client_cert:
        ctx.load_cert_chain(files["cert_file"], files["key_file"])
    return ctx


def _get(node, ctx, path: str, method: str = "GET", body: bytes | None = None):
    host, port = node.http_addr.split(":")
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=10)
    try:
        conn.request(method, path, body=body)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def test_https_with_a_client_certificate_of_the_cluster_ca(cluster):
    leader = cluster.leader()
    assert leader.url.startswith("https://")
    status, _, body = _get(leader, _context(cluster, client_cert=True), "/v1/cluster")
    if hasattr(cluster, "admin_token"):
        # A secure cluster authenticates its gRPC port (issue 10): the HTTP port fails closed
        # until node/http/auth.py checks the same tokens.
        assert status == 401 and json.loads(body)["code"] == "UNAUTHENTICATED", body
        return
    assert status == 200 and json.loads(body)["leaderNodeId"] == leader.node_id
    follower = next(n for n in cluster.nodes if n is not leader)
    spec = json.dumps({"spec": {"name": "tls", "schedule": {"once": {"atMs": "1"}},
                                "tasks": [{"name": "main"}]}}).encode()
    status, headers, _ = _get(follower, _context(cluster, client_cert=True), "/v1/jobs",
                              "POST", spec)
    assert status == 307 and headers["Location"] == f"{leader.url}/v1/jobs"


def test_no_client_certificate_or_plaintext_is_refused(cluster):
    leader = cluster.leader()
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _get(leader, _context(cluster, client_cert=False), "/v1/cluster")
    host, port = leader.http_addr.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            conn.request("GET", "/v1/cluster")
            conn.getresponse()
    finally:
        conn.close()
