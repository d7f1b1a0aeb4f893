"""TLS on the gRPC port of a real secure cluster (mutual: --tls-cert, --tls-key,
--tls-client-ca; and --admin-token-file):
the SDK and the CLI get in with the CA and a client certificate; plaintext, an unknown CA,
no client certificate, another CA's or an expired one end with an error and change nothing."""

from __future__ import annotations

import datetime as dt
import io
import logging

import pytest

from gnomon.client import Client, IntervalSchedule, JobSpec, TaskSpec, TLSConfig, Unavailable
from gnomon.client.cli import main as cli_main
from gnomon.node.config import Config, Member
from gnomon.node.security import certificates as tls_mod
from gnomon.node.security import grpc_tls

pytestmark = pytest.mark.integration

FAST_FAIL = {"timeout_s": 3.0, "retries": 1, "attempt_timeout_s": 1.5}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    from gnomon.node.local.cluster import LocalCluster

    root = tmp_path_factory.mktemp("grpctls")
    cluster = LocalCluster(root, overrides={"grpc_handshake_timeout_ms": "1500"},
                           secure=True).start()
    try:
        cluster.leader()
        yield cluster
    finally:
        cluster.stop()
        if request.session.testsfailed:
            print(cluster.logs())


def _jobs(cluster) -> list[str]:
    with Client(cluster.servers, tls=TLSConfig(**cluster.client_tls()),
                token=cluster.admin_token()) as client:
        return sorted(j.spec.name for j in client.list_jobs())


def _spec(name: str) -> JobSpec:
    return JobSpec(name=name, schedule=IntervalSchedule(interval_ms=3_600_000),
                   tasks=[TaskSpec(name="main")])


def test_sdk_with_ca_and_client_certificate(cluster):
    with Client(cluster.servers, tls=TLSConfig(**cluster.client_tls()),
                token=cluster.admin_token()) as client:
        job = client.create_job(_spec("over-tls"))
        assert client.get_job(job.job_id).spec.name == "over-tls"


def test_cli_with_ca_cert_and_key(cluster):
    files = cluster.client_tls()
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["job", "list", "--json", "-s", cluster.servers, "--ca", files["ca_file"],
                     "--cert", files["cert_file"], "--key", files["key_file"],
                     "--token-file", str(cluster.root / "tls" / "admin.token")],
                    stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    assert "over-tls" in out.getvalue()


@pytest.mark.parametrize("case", ["plaintext", "no-client-cert", "unknown-ca",
                                  "other-ca-client", "expired-client"])
def test_refused_clients_change_nothing(cluster, tmp_path, case):
    before = _jobs(cluster)
    files = cluster.client_tls()
    other = tls_mod.ensure_cluster_files(tmp_path / "other", {"x": ["127.0.0.1"]})
    if case == "plaintext":
        kwargs = {}
    elif case == "no-client-cert":
        kwargs = {"tls": TLSConfig(ca_file=files["ca_file"])}
    elif case == "unknown-ca":
        kwargs = {"tls": TLSConfig(ca_file=str(other["x"].ca), cert_file=files["cert_file"],
                                   key_file=files["key_file"])}
    elif case == "other-ca-client":
        kwargs = {"tls": TLSConfig(ca_file=files["ca_file"], cert_file=str(other["x"].cert),
                                   key_file=str(other["x"].key))}
    else:
        ca = tls_mod._load_ca(cluster.root / "tls" / "ca.crt", cluster.root / "tls" / "ca.key")
        past = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
        cert, key = tls_mod.issue(ca, "old client", server=False, not_before=past,
                                  not_after=past + dt.timedelta(days=1))
        tls_mod.write_cert(tmp_path / "old.crt", cert)
        tls_mod.write_key(tmp_path / "old.key", key)
        kwargs = {"tls": TLSConfig(ca_file=files["ca_file"], cert_file=str(tmp_path / "old.crt"),
                                   key_file=str(tmp_path / "old.key"))}
    kwargs["token"] = cluster.admin_token()  # refused at the TLS layer, token or not
    with Client(cluster.servers, **FAST_FAIL, **kwargs) as client, pytest.raises(Unavailable):
        client.create_job(_spec(f"refused-{case}"))
    assert _jobs(cluster) == before


def _config(grpc_addr: str, **kw) -> Config:
    return Config(node_id="n1", members=(Member("n1", "127.0.0.1:1", grpc_addr),),
                  raft_tls_cert="c", raft_tls_key="k", raft_tls_ca="a", **kw)


def test_a_plaintext_port_beyond_loopback_is_announced_loudly(caplog):
    with caplog.at_level(logging.WARNING, logger="gnomon.node.security.grpc_tls"):
        grpc_tls.warn_if_exposed(_config("127.0.0.1:7701"))
        grpc_tls.warn_if_exposed(_config("10.1.2.3:7701", tls_cert="c", tls_key="k"))
        assert not caplog.records
        grpc_tls.warn_if_exposed(_config("0.0.0.0:7701"))
    assert any("WITHOUT TLS" in r.getMessage() for r in caplog.records)


@pytest.mark.resources
def test_idle_and_slow_connections_are_closed_and_service_goes_on(cluster):
    import socket

    from tests.support.resources import attack

    leader = cluster.leader()
    host, port = leader.grpc_addr.rsplit(":", 1)
    with attack("gRPC: 300 idle TLS connections, one half ClientHello", leader,
                honest=lambda: _jobs(cluster), settle_s=30):
        socks = [socket.create_connection((host, int(port)), timeout=5) for _ in range(300)]
        socks[0].sendall(b"\x16\x03")  # a ClientHello that never finishes
        try:
            assert "idle" not in _jobs(cluster)  # served meanwhile
            for sock in socks:
                sock.settimeout(10)
                try:
                    assert sock.recv(1024) == b"", "expected the server to close"
                except ConnectionResetError:
                    pass
        finally:
            for sock in socks:
                sock.close()
    assert isinstance(_jobs(cluster), list)


def test_an_oversized_message_is_refused_and_changes_nothing(cluster):
    import grpc

    from gnomon.v1 import api_pb2, api_pb2_grpc, types_pb2

    before = _jobs(cluster)
    files = cluster.client_tls()
    creds = grpc.composite_channel_credentials(
        grpc.ssl_channel_credentials(*(open(files[k], "rb").read()
                                       for k in ("ca_file", "key_file", "cert_file"))),
        grpc.access_token_call_credentials(cluster.admin_token()))
    big = types_pb2.JobSpec(name="huge", schedule=types_pb2.Schedule(
        interval=types_pb2.IntervalSchedule(interval_ms=60_000)),
        tasks=[types_pb2.TaskSpec(name="main", payload=b"x" * (17 << 20))])
    with grpc.secure_channel(cluster.leader().grpc_addr, creds, options=[
            ("grpc.max_send_message_length", 64 << 20)]) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            api_pb2_grpc.JobServiceStub(channel).CreateJob(
                api_pb2.CreateJobRequest(request_id="huge", spec=big), timeout=30)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _jobs(cluster) == before
