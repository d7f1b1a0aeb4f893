"""Gateways in front of a secure cluster, as real processes: clients and workers dial only
gateways; calls reach the leader through a follower's redirect; a gateway's kill -9 is a
reconnect to another gateway with the lease held, not a re-run; the nodes' answers (errors
with their fields, authentication) reach the caller unchanged; the calls a gateway carries at
once are bounded."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from gnomon.client import (
    AsyncClient,
    AttemptOutcome,
    Conflict,
    JobSpec,
    NotFound,
    OnceSchedule,
    RunState,
    TLSConfig,
    Unauthenticated,
)
from gnomon.node.local.cluster import LocalCluster, wait_for
from gnomon.node.local.gateway import GatewayProc
from gnomon.v1 import worker_pb2, worker_pb2_grpc
from tests.support.cluster import _port_up
from tests.support.gateway import AckWorker, HeldTask, gateway_metric, until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
FAR_FUTURE_MS = 4_102_444_800_000  # 2100-01-01: these jobs only run when triggered
WAIT_S = 60.0  # deadlines for conditions, not expectations of speed


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("gateway")
    # Short leases: a lease the gateway kill lost would expire (and re-run) within the test.
    cluster = LocalCluster(root, 3, {"heartbeat_interval_ms": "500", "lease_ttl_ms": "4000"},
                           secure=True, mutual_tls=False, http=True).start()
    gateways: list[GatewayProc] = []
    try:
        leader = cluster.leader()
        wait_for(lambda: all(_port_up(n.http_addr) for n in cluster.nodes), timeout_s=30,
                 what="every node's HTTP port")
        # Followers first: every gateway learns the leader from a refusal's hint.
        order = [n.node_id for n in cluster.nodes if n is not leader] + [leader.node_id]
        gateways = [GatewayProc(cluster, root / f"gw{i}.log", servers=order, http=True)
                    for i in (1, 2)]
        for gw in gateways:
            gw.wait_serving()
        yield {"cluster": cluster, "gateways": gateways}
    finally:
        for gw in gateways:
            gw.stop()
        cluster.stop()


def _client(env: dict[str, Any], *addrs: str, token: str | None = None) -> AsyncClient:
    cluster: LocalCluster = env["cluster"]
    return AsyncClient(",".join(addrs), timeout_s=20,
                       tls=TLSConfig(ca_file=cluster.client_tls()["ca_file"]),
                       token=token if token is not None else cluster.admin_token())


async def test_client_calls_through_a_gateway_answer_as_the_leader_does(env):
    gw = env["gateways"][0]
    async with _client(env, gw.addr) as client:
        job = await client.create_job(JobSpec.single("via-gateway", OnceSchedule(FAR_FUTURE_MS)))
        got = await client.get_job(job.job_id)
        assert got.spec.name == "via-gateway" and got.version == job.version
        # Errors keep their code, message and reason (the node's trailers pass through).
        with pytest.raises(NotFound) as missing:
            await client.get_job("j999999")
        assert "j999999" in str(missing.value)
        with pytest.raises(Conflict) as stale:
            await client.update_job(job.job_id, got.spec, expected_version=job.version + 5)
        assert stale.value.reason == "VERSION_CONFLICT"
    assert "the leader is" in gw.log.read_text()


async def test_a_bad_token_is_refused_through_the_gateway(env):
    async with _client(env, env["gateways"][1].addr, token="not-a-token") as client:
        with pytest.raises(Unauthenticated):
            await client.list_jobs()


async def test_a_worker_through_gateways_survives_a_gateway_kill_without_a_rerun(env):
    """The worker holds a lease through gateway 1; gateway 1 is killed with -9; the worker
    reconnects through gateway 2 listing the lease as held and keeps renewing it past a whole
    TTL (a lost lease would have expired and been granted again), then finishes: one attempt,
    one fencing token."""
    first, second = env["gateways"]
    held = HeldTask("via-gw")
    loop = asyncio.get_running_loop()
    async with _client(env, second.addr) as client:
        job = await client.create_job(JobSpec.single("gw-kill", OnceSchedule(FAR_FUTURE_MS),
                                                     queue="via-gw"))
        async with _client(env, first.addr, second.addr) as worker_client:
            worker = AckWorker(worker_client, tasks=[held.task], max_concurrency=1,
                               worker_id="gw-w1")
            async with worker:
                run = await client.trigger_job(job.job_id)
                await asyncio.wait_for(held.started.wait(), WAIT_S)
                first.kill()
                killed_at = loop.time()
                ttl_s = 4.0  # the cluster's lease_ttl_ms
                await until(lambda: any(at > killed_at + ttl_s and held.tokens[0] in valid
                                        for at, valid in worker.acks),
                            what="the lease renewed through gateway 2 a TTL after the kill")
                held.release.set()
                final = await client.wait_run(run.run_id, timeout_s=WAIT_S, poll_interval_s=0.1)
    assert final.state is RunState.SUCCEEDED
    (attempt,) = final.task("main").attempts
    assert attempt.outcome is AttemptOutcome.SUCCEEDED and attempt.attempt == 1
    assert held.tokens == [attempt.fencing_token]


def test_calls_in_flight_are_bounded(env, tmp_path):
    cluster: LocalCluster = env["cluster"]
    gw = GatewayProc(cluster, tmp_path / "gw.log", "--max-calls", "1").wait_serving()
    metadata = (("authorization", f"Bearer {cluster.admin_token()}"),)

    def hello(worker_id: str) -> Iterator[worker_pb2.WorkerMessage]:
        yield worker_pb2.WorkerMessage(hello=worker_pb2.Hello(worker_id=worker_id))
        held_open.wait(WAIT_S)  # the stream stays open (no half-close) until the test ends

    held_open = threading.Event()
    try:
        with gw.channel() as channel:
            stub = worker_pb2_grpc.WorkerServiceStub(channel)
            held = stub.Connect(hello("bound-1"), metadata=metadata)
            assert next(held).WhichOneof("msg") == "welcome"  # one stream in flight
            second = stub.Connect(hello("bound-2"), metadata=metadata)
            with pytest.raises(grpc.RpcError) as err:
                print("beyond the bound, answered:", next(second))  # what it was, if not refused
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, gw.log.read_text()
            assert "max_calls (1)" in err.value.details()
            assert gateway_metric(gw, "gnomon_gateway_refused_total", bound="max_calls") == 1
            assert gateway_metric(gw, "gnomon_gateway_streams") == 1
            held_open.set()
            held.cancel()
    finally:
        held_open.set()
        gw.stop()


def _https(env: dict[str, Any], gw: GatewayProc, method: str, path: str, body: Any = None, *,
           token: str | None = "admin", raw: bytes | None = None) -> tuple[int, dict, bytes]:
    cluster: LocalCluster = env["cluster"]
    host, port = gw.http_addr.split(":")
    ctx = ssl.create_default_context(cafile=cluster.client_tls()["ca_file"])
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=20)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {cluster.admin_token() if token == 'admin' else token}"
    try:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def test_the_http_api_and_dashboard_through_a_gateway(env):
    gw = env["gateways"][1]  # gateway 1 was killed above
    spec = {"name": "http-via-gw", "schedule": {"once": {"atMs": str(FAR_FUTURE_MS)}},
            "tasks": [{"name": "main"}]}
    # The gateway's first node is a follower: its 307 is followed, the caller sees a 201.
    status, headers, body = _https(env, gw, "POST", "/v1/jobs", {"spec": spec})
    assert status == 201, body
    job = json.loads(body)["job"]
    assert headers["location"] == f"/v1/jobs/{job['jobId']}"
    status, _, body = _https(env, gw, "GET", f"/v1/jobs/{job['jobId']}")
    assert status == 200 and json.loads(body)["job"]["spec"]["name"] == "http-via-gw"
    # The node's answers as they are: 401 with its challenge, a problem naming the field.
    status, headers, body = _https(env, gw, "GET", "/v1/jobs", token=None)
    assert status == 401 and headers["www-authenticate"].startswith("Bearer"), body
    status, _, body = _https(env, gw, "POST", "/v1/jobs", {"spec": {**spec, "name": "a b"}})
    assert status == 400 and json.loads(body)["field"] == "spec.name", body
    # A body over the gateway's bound is refused unread.
    status, _, body = _https(env, gw, "POST", "/v1/jobs", raw=b" " * (5 << 20))
    assert status == 413 and b"http_max_body_bytes" in body
    status, headers, body = _https(env, gw, "GET", "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert "the HTTP leader is" in gw.log.read_text()


def test_the_curl_worker_through_a_gateway(env, tmp_path):
    """The HTTP worker protocol through the gateway's HTTP port (the curl worker's 307s are
    followed by the gateway, not by curl)."""
    gw = env["gateways"][1]
    cluster: LocalCluster = env["cluster"]
    spec = {"name": "curl-via-gw", "schedule": {"once": {"atMs": str(FAR_FUTURE_MS)}},
            "tasks": [{"name": "main", "queue": "curl-gw", "payload": {"n": 7}}]}
    _, _, body = _https(env, gw, "POST", "/v1/jobs", {"spec": spec})
    job_id = json.loads(body)["job"]["jobId"]
    _, _, body = _https(env, gw, "POST", f"/v1/jobs/{job_id}/trigger", {})
    run_id = json.loads(body)["run"]["runId"]
    log = tmp_path / "curl.log"
    with open(log, "wb") as fh:
        proc = subprocess.run(
            [str(REPO / "examples" / "curl-worker.sh"), "--queue", "curl-gw", "--max-tasks", "1",
             "--", "sh", "-c", "cat"],
            stdout=fh, stderr=subprocess.STDOUT, cwd=tmp_path, timeout=120,
            env={"PATH": os.environ["PATH"], "GNOMON_URL": gw.url,
                 "GNOMON_CA": cluster.client_tls()["ca_file"], "GNOMON_WORKER_ID": "curl-gw",
                 "GNOMON_TOKEN_FILE": str(cluster.root / "tls" / "admin.token")})
    assert proc.returncode == 0, log.read_text()[-3000:]
    status, _, body = _https(env, gw, "GET", f"/v1/runs/{run_id}")
    run = json.loads(body)["run"]
    assert run["state"] == "RUN_STATE_SUCCEEDED", run
    assert run["tasks"][0]["result"] == {"n": 7}


HEADER_S = 0.6  # the test gateway's http_header_timeout_ms, in seconds


def _tcp(gw: GatewayProc, source: str = "127.0.0.1") -> socket.socket:
    host, port = gw.http_addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5, source_address=(source, 0))
    return sock


def _tls(env: dict[str, Any], gw: GatewayProc, source: str) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=env["cluster"].client_tls()["ca_file"])
    return ctx.wrap_socket(_tcp(gw, source), server_hostname=gw.http_addr.rsplit(":", 1)[0])


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        while sock.recv(65536):
            pass
        return True
    except (BlockingIOError, ssl.SSLWantReadError):
        return False
    except OSError:
        return True


def test_the_gateways_http_port_has_the_nodes_connection_bounds(env, tmp_path):
    """Slowloris on the gateway's HTTP port: connections that never finish their TLS
    handshake, or their headers, are closed at http_header_timeout_ms; connections from one
    address beyond http_max_connections_per_address are refused at once, and another
    address is served meanwhile."""
    cluster: LocalCluster = env["cluster"]
    gw = GatewayProc(cluster, tmp_path / "gw-bounds.log", "--http-header-timeout-ms",
                     str(int(HEADER_S * 1000)), "--http-max-connections-per-address", "2",
                     http=True).wait_serving()
    try:
        silent = [_tcp(gw, "127.0.5.1") for _ in range(2)]  # no TLS handshake
        slow = [_tls(env, gw, "127.0.5.2") for _ in range(2)]
        started = time.monotonic()
        for sock in slow:
            sock.sendall(b"GET /v1/cluster HTTP/1.1\r\nHost: x\r\n")

        def all_closed() -> bool:
            for sock in slow:  # a byte at a time: no byte extends the deadline
                with contextlib.suppress(OSError, ssl.SSLError):
                    sock.sendall(b"X")
            return all(_closed_by_peer(s) for s in silent + slow)

        wait_for(all_closed, timeout_s=WAIT_S, what="the silent and slow connections closed",
                 interval_s=0.1)
        assert time.monotonic() - started >= 0.9 * HEADER_S
        timed_out = "gnomon_gateway_http_connections_timed_out_total"
        assert gateway_metric(gw, timed_out, phase="handshake") >= 2
        assert gateway_metric(gw, timed_out, phase="header") >= 2

        held = [_tls(env, gw, "127.0.5.3") for _ in range(2)]
        over = _tcp(gw, "127.0.5.3")
        wait_for(lambda: _closed_by_peer(over), timeout_s=WAIT_S,
                 what="the connection over the per-address cap closed")
        assert gateway_metric(gw, "gnomon_gateway_http_connections_refused_total",
                              reason="address") == 1
        status, _, _ = _https(env, gw, "GET", "/v1/cluster")  # from 127.0.0.1
        assert status == 200
        for sock in [*silent, *slow, *held, over]:
            sock.close()
    finally:
        gw.stop()


def test_a_gateway_counts_what_it_forwarded(env):
    gw = env["gateways"][1]  # it carried the worker after the kill, and the HTTP tests
    assert gateway_metric(gw, "gnomon_gateway_upstream_serving") == 1
    assert gateway_metric(gw, "gnomon_gateway_calls_total", method="/gnomon.v1.JobService/CreateJob",
                     code="OK") >= 1
    assert gateway_metric(gw, "gnomon_gateway_calls_total", method="/gnomon.v1.WorkerService/Connect",
                     code="OK") >= 1  # the worker's stream, closed when it stopped
    assert gateway_metric(gw, "gnomon_gateway_redirects_total", port="http") >= 1
    assert gateway_metric(gw, "gnomon_gateway_forward_seconds_count") >= 1
    assert gateway_metric(gw, "gnomon_gateway_calls_in_flight") == 0
    assert gateway_metric(gw, "gnomon_gateway_streams") == 0


async def test_a_revoked_token_is_refused_through_every_gateway_at_once(env):
    """The nodes check the caller's token on every forwarded call: the first call after the
    revocation committed is refused, over either gateway's gRPC and HTTP ports."""
    gw = env["gateways"][1]
    async with _client(env, gw.addr) as admin:
        new = await admin.create_token("gw-reader", "tenant-reader", ["default"])
        async with _client(env, gw.addr, token=new.secret) as reader:
            await reader.list_jobs()
            status, _, _ = _https(env, gw, "GET", "/v1/jobs", token=new.secret)
            assert status == 200
            await admin.revoke_token(new.token.token_id)
            with pytest.raises(Unauthenticated, match="revoked"):
                await reader.list_jobs()
        status, _, body = _https(env, gw, "GET", "/v1/jobs", token=new.secret)
        assert status == 401 and b"revoked" in body, body


async def test_a_worker_stream_whose_token_is_revoked_ends_at_its_next_heartbeat(env):
    gw = env["gateways"][1]
    async with _client(env, gw.addr) as admin:
        new = await admin.create_token("gw-worker", "worker", ["default"])
        stop = threading.Event()
        metadata = (("authorization", f"Bearer {new.secret}"),)

        def messages() -> Iterator[worker_pb2.WorkerMessage]:
            yield worker_pb2.WorkerMessage(hello=worker_pb2.Hello(worker_id="revoked-w"))
            while not stop.wait(0.2):  # a heartbeat every 0.2 s
                yield worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat())

        def run_stream() -> tuple[int, grpc.RpcError | None]:
            acks = 0
            with gw.channel() as channel:
                stream = worker_pb2_grpc.WorkerServiceStub(channel).Connect(
                    messages(), metadata=metadata, timeout=WAIT_S)
                try:
                    for msg in stream:
                        acks += msg.WhichOneof("msg") == "heartbeat_ack"
                        if acks == 2:
                            revoke_now.set()
                except grpc.RpcError as err:
                    return acks, err
                finally:
                    stop.set()
            return acks, None

        revoke_now = threading.Event()
        ended = asyncio.get_running_loop().run_in_executor(None, run_stream)
        assert await asyncio.get_running_loop().run_in_executor(None, revoke_now.wait, WAIT_S)
        await admin.revoke_token(new.token.token_id)
        acks, err = await ended
    assert err is not None and err.code() == grpc.StatusCode.UNAUTHENTICATED, err
    assert "was revoked" in err.details()


async def test_the_gateway_follows_a_new_leader_after_a_kill(env):
    """Last in the file: it kills the module cluster's leader."""
    cluster: LocalCluster = env["cluster"]
    gw = env["gateways"][1]
    async with _client(env, gw.addr) as client:
        await client.list_jobs()
        old = cluster.leader()
        cluster.kill(old.node_id)
        # The SDK retries UNAVAILABLE with the same request id; the gateway finds the leader.
        job = await client.create_job(JobSpec.single("after-failover", OnceSchedule(FAR_FUTURE_MS)))
        assert (await client.get_job(job.job_id)).spec.name == "after-failover"
    new = cluster.leader()
    assert new is not old
    assert f"the leader is {new.grpc_addr}" in gw.log.read_text()
