"""The gateway's relay (`--worker-upstream relay`) in front of a secure cluster, as real
processes: workers through it get, renew and complete leases; the Relay call needs a gateway
token; a relayed stream is authenticated with its own worker's token; the relay's bounds; a
leader change ends relayed streams UNAVAILABLE and the workers come back through the gateway
with their leases held."""

from __future__ import annotations

import asyncio
import queue
import secrets
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from gnomon.client import (
    AsyncClient,
    AttemptOutcome,
    JobSpec,
    OnceSchedule,
    RunState,
    TaskContext,
    TLSConfig,
    task,
)
from gnomon.node.local.cluster import LocalCluster, NodeProc, wait_for
from gnomon.node.local.gateway import GatewayProc
from gnomon.v1 import api_pb2, api_pb2_grpc, relay_pb2, relay_pb2_grpc, worker_pb2, worker_pb2_grpc
from tests.support.gateway import AckWorker, HeldTask, gateway_metric, until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

FAR_FUTURE_MS = 4_102_444_800_000  # 2100-01-01: these jobs only run when triggered
WAIT_S = 60.0  # deadlines for conditions, not expectations of speed
MAX_RELAYS, MAX_FRAMES, TTL_S = 2, 64, 4.0
# Per relay: streams open, messages of one stream not yet taken, frames queued down.
MAX_STREAMS, STREAM_BUFFER, DOWN_FRAMES = 6, 8, 4
_END = object()


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("relay")
    cluster = LocalCluster(root, 3, {"heartbeat_interval_ms": "500", "lease_ttl_ms": "4000",
                                     "max_relays": str(MAX_RELAYS),
                                     "relay_max_frames": str(MAX_FRAMES),
                                     "relay_max_streams": str(MAX_STREAMS),
                                     "relay_stream_buffer_messages": str(STREAM_BUFFER),
                                     "relay_down_max_frames": str(DOWN_FRAMES)},
                           secure=True, mutual_tls=False).start()
    gw: GatewayProc | None = None
    try:
        cluster.leader()
        gw = GatewayProc(cluster, root / "gw-relay.log", relay=True).wait_serving()
        _wait_relay_up(gw)
        yield {"cluster": cluster, "gw": gw,
               "gateway": cluster.gateway_token_file().read_text().strip(),
               "worker": _token(cluster, "worker", "default"),
               "writer": _token(cluster, "tenant-writer", "default")}
    finally:
        if gw is not None:
            gw.stop()
        cluster.stop()


def _token(cluster: LocalCluster, role: str, *tenants: str) -> str:
    request = api_pb2.CreateTokenRequest(request_id=secrets.token_hex(8), name=f"relay-{role}",
                                         role=role, tenants=list(tenants))
    return cluster.leader().access().CreateToken(request, timeout=20).secret


def _bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _wait_relay_up(gw: GatewayProc) -> None:
    wait_for(lambda: gateway_metric(gw, "gnomon_gateway_relay_connected") == 1,
             timeout_s=WAIT_S, what="the gateway's relay up")


def _node_channel(cluster: LocalCluster, node: NodeProc) -> grpc.Channel:
    """A TLS channel to `node` that carries no token of its own."""
    with open(cluster.client_tls()["ca_file"], "rb") as fh:
        return grpc.secure_channel(node.grpc_addr, grpc.ssl_channel_credentials(fh.read()))


class Raw:
    """One bidirectional call whose requests the test sends one by one (open until close())."""

    def __init__(self, method: Any, metadata: tuple[tuple[str, str], ...]) -> None:
        self._requests: queue.Queue[Any] = queue.Queue()
        self.responses = method(iter(self._requests.get, _END), metadata=metadata,
                                timeout=WAIT_S)

    def send(self, message: Any) -> Raw:
        self._requests.put(message)
        return self

    def close(self) -> None:
        self._requests.put(_END)

    def error(self) -> grpc.RpcError:
        """The status the call ends with (it must end with one, not a message)."""
        with pytest.raises(grpc.RpcError) as err:
            print("answered instead of refused:", next(self.responses))
        self.close()
        return err.value


def _hello(worker_id: str) -> worker_pb2.WorkerMessage:
    return worker_pb2.WorkerMessage(hello=worker_pb2.Hello(worker_id=worker_id,
                                                           queues=["relay-idle"]))


def _relay(channel: grpc.Channel, metadata: tuple[tuple[str, str], ...]) -> Raw:
    return Raw(relay_pb2_grpc.GatewayServiceStub(channel).Relay, metadata)


def _client(env: dict[str, Any], addrs: str, token: str | None = None) -> AsyncClient:
    cluster: LocalCluster = env["cluster"]
    return AsyncClient(addrs, timeout_s=20, tls=TLSConfig(ca_file=cluster.client_tls()["ca_file"]),
                       token=token or cluster.admin_token())


async def test_workers_through_a_relay_get_tasks_heartbeat_and_complete(env):
    """Two workers on one relay each finish tasks whose leases a heartbeat ack renewed; the
    gateway's metrics show both streams relayed and batches both ways."""
    gw: GatewayProc = env["gw"]
    workers: list[AckWorker] = []

    @task(name="main", queue="relay-q")
    async def renewed(ctx: TaskContext) -> str:
        await until(lambda: any(ctx.fencing_token in valid for w in workers
                                 for _, valid in w.acks), what="a heartbeat ack of the lease")
        return "done"

    async with _client(env, env["cluster"].servers) as admin, \
            _client(env, gw.addr, env["worker"]) as via_gw:
        job = await admin.create_job(JobSpec.single("relay-work", OnceSchedule(FAR_FUTURE_MS),
                                                    queue="relay-q"))
        workers += [AckWorker(via_gw, tasks=[renewed], max_concurrency=2,
                              worker_id=f"relay-w{i}") for i in (1, 2)]
        async with workers[0], workers[1]:
            await until(lambda: gateway_metric(gw, "gnomon_gateway_relayed_streams") == 2,
                         what="both workers relayed")
            runs = [await admin.trigger_job(job.job_id) for _ in range(4)]
            finals = [await admin.wait_run(r.run_id, timeout_s=WAIT_S, poll_interval_s=0.1)
                      for r in runs]
        assert [f.state for f in finals] == [RunState.SUCCEEDED] * 4
        assert all(w.acks for w in workers)
    assert gateway_metric(gw, "gnomon_gateway_relay_connected") == 1
    up = gateway_metric(gw, "gnomon_gateway_relay_batches_total", direction="up")
    down = gateway_metric(gw, "gnomon_gateway_relay_batches_total", direction="down")
    assert up > 0 and down > 0
    assert gateway_metric(gw, "gnomon_gateway_relay_batch_frames_sum", direction="up") >= up
    # The workers' heartbeats went up parsed, renewed as the leader took the relay message.
    assert gateway_metric(gw, "gnomon_gateway_relay_heartbeat_frames_total") > 0


def test_a_relay_needs_a_gateway_token_and_a_refused_one_holds_no_place(env):
    """No token: UNAUTHENTICATED; a tenant writer's or a worker's token: PERMISSION_DENIED.
    With more refused relays held open than max_relays allows, a gateway token's relay is
    still accepted: a refusal holds no place. A gateway token opens nothing else."""
    cluster: LocalCluster = env["cluster"]
    _wait_relay_up(env["gw"])  # one place of MAX_RELAYS is the gateway's
    with _node_channel(cluster, cluster.leader()) as channel:
        refused = [_relay(channel, ()) for _ in range(MAX_RELAYS + 1)]
        refused += [_relay(channel, _bearer(env[who])) for who in ("writer", "worker")]
        codes = [r.error().code() for r in refused]
        assert codes == [grpc.StatusCode.UNAUTHENTICATED] * (MAX_RELAYS + 1) + \
            [grpc.StatusCode.PERMISSION_DENIED] * 2
        accepted = _relay(channel, _bearer(env["gateway"]))
        assert list(next(accepted.responses).frames) == []  # accepted: the empty first RelayDown
        accepted.close()
        jobs = api_pb2_grpc.JobServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            jobs.ListJobs(api_pb2.ListJobsRequest(limit=1), metadata=_bearer(env["gateway"]),
                          timeout=20)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        stream = Raw(worker_pb2_grpc.WorkerServiceStub(channel).Connect,
                     _bearer(env["gateway"])).send(_hello("relay-as-gateway"))
        assert stream.error().code() == grpc.StatusCode.PERMISSION_DENIED


def test_a_relayed_stream_with_a_bad_worker_token_ends_while_another_goes_on(env):
    """On one relay: streams without a token, with an unknown one, or with the gateway's own
    token end UNAUTHENTICATED / PERMISSION_DENIED; a worker with a good token, connected
    before, is still answered after."""
    gw: GatewayProc = env["gw"]
    with gw.channel() as channel:
        connect = worker_pb2_grpc.WorkerServiceStub(channel).Connect
        good = Raw(connect, _bearer(env["worker"])).send(_hello("relay-good"))
        assert next(good.responses).WhichOneof("msg") == "welcome"
        bad = {"none": Raw(connect, ()), "unknown": Raw(connect, _bearer("not-a-token")),
               "gateway": Raw(connect, _bearer(env["gateway"]))}
        codes = {name: raw.send(_hello(f"relay-{name}")).error().code()
                 for name, raw in bad.items()}
        assert codes == {"none": grpc.StatusCode.UNAUTHENTICATED,
                         "unknown": grpc.StatusCode.UNAUTHENTICATED,
                         "gateway": grpc.StatusCode.PERMISSION_DENIED}
        good.send(worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat()))
        assert next(good.responses).WhichOneof("msg") == "heartbeat_ack"
        good.close()  # half-close: the stream ends OK
        assert list(good.responses) == []
    wait_for(lambda: gateway_metric(gw, "gnomon_gateway_relayed_streams") == 0,
             timeout_s=WAIT_S, what="no stream relayed")


def test_a_relay_whose_gateway_token_is_revoked_ends_at_its_next_message(env):
    cluster: LocalCluster = env["cluster"]
    leader = cluster.leader()
    created = leader.access().CreateToken(api_pb2.CreateTokenRequest(
        request_id=secrets.token_hex(8), name="relay-revoked", role="gateway"), timeout=20)
    with _node_channel(cluster, leader) as channel:
        relay = _relay(channel, _bearer(created.secret))
        assert list(next(relay.responses).frames) == []
        leader.access().RevokeToken(api_pb2.RevokeTokenRequest(
            request_id=secrets.token_hex(8), token_id=created.token.token_id), timeout=20)
        relay.send(relay_pb2.RelayUp())
        err = relay.error()
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED, err.details()
    assert "relay:" in err.details() and "revoked" in err.details()


def test_a_relay_message_over_relay_max_frames_ends_the_relay(env):
    cluster: LocalCluster = env["cluster"]
    with _node_channel(cluster, cluster.leader()) as channel:
        relay = _relay(channel, _bearer(env["gateway"]))
        assert list(next(relay.responses).frames) == []
        relay.send(relay_pb2.RelayUp(frames=[
            relay_pb2.UpFrame(stream_id=i + 1, close=relay_pb2.RelayClose())
            for i in range(MAX_FRAMES + 1)]))
        relay.close()
        err = relay.error()
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"at most {MAX_FRAMES} (relay_max_frames)" in err.details()


def test_relays_beyond_max_relays_are_refused(env):
    cluster: LocalCluster = env["cluster"]
    _wait_relay_up(env["gw"])  # one place of MAX_RELAYS is the gateway's
    with _node_channel(cluster, cluster.leader()) as channel:
        held = [_relay(channel, _bearer(env["gateway"])) for _ in range(MAX_RELAYS - 1)]
        for relay in held:
            assert list(next(relay.responses).frames) == []
        beyond = _relay(channel, _bearer(env["gateway"])).error()
        assert beyond.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"max_relays ({MAX_RELAYS})" in beyond.details()
        for relay in held:
            relay.close()
            assert list(relay.responses) == []  # the gateway half-closed: the relay ends OK

        def accepted() -> bool:  # the places come back once the relays ended
            relay = _relay(channel, _bearer(env["gateway"]))
            try:
                return list(next(relay.responses).frames) == []
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                return False
            finally:
                relay.close()

        wait_for(accepted, timeout_s=WAIT_S, what="a relay accepted again")


async def test_a_leader_change_ends_relayed_streams_and_workers_come_back_with_their_leases(env):
    """The leader is killed (-9) while a worker holds a lease through the relay: a relayed
    stream ends UNAVAILABLE naming the gateway; the worker reconnects through the same
    gateway (to the new leader) listing its lease, which is renewed past a whole TTL after
    the kill and completes: one attempt, one fencing token."""
    cluster: LocalCluster = env["cluster"]
    gw: GatewayProc = env["gw"]
    held = HeldTask("relay-kill")
    loop = asyncio.get_running_loop()
    async with _client(env, cluster.servers) as admin, \
            _client(env, gw.addr, env["worker"]) as via_gw:
        job = await admin.create_job(JobSpec.single("relay-kill", OnceSchedule(FAR_FUTURE_MS),
                                                    queue="relay-kill"))
        worker = AckWorker(via_gw, tasks=[held.task], max_concurrency=1,
                           worker_id="relay-kill-w")
        async with worker:
            run = await admin.trigger_job(job.job_id)
            await asyncio.wait_for(held.started.wait(), WAIT_S)
            with gw.channel() as channel:
                raw = Raw(worker_pb2_grpc.WorkerServiceStub(channel).Connect,
                          _bearer(env["worker"])).send(_hello("relay-kill-raw"))
                assert next(raw.responses).WhichOneof("msg") == "welcome"
                leader = cluster.leader()
                cluster.kill(leader.node_id)
                killed_at = loop.time()
                ended = await asyncio.to_thread(raw.error)
            assert ended.code() == grpc.StatusCode.UNAVAILABLE
            assert ("gnomon-leader", gw.addr) in tuple(ended.trailing_metadata() or ())
            await until(lambda: any(at > killed_at + TTL_S and held.tokens[0] in valid
                                     for at, valid in worker.acks),
                         what="the lease renewed through the relay a TTL after the kill")
            held.release.set()
            final = await admin.wait_run(run.run_id, timeout_s=WAIT_S, poll_interval_s=0.1)
    assert final.state is RunState.SUCCEEDED
    (attempt,) = final.task("main").attempts
    assert attempt.outcome is AttemptOutcome.SUCCEEDED and attempt.attempt == 1
    assert held.tokens == [attempt.fencing_token]
    assert gateway_metric(gw, "gnomon_gateway_relay_connected") == 1


class RawRelay:
    """The test as a gateway: a relay on the leader, its streams opened and read by id."""

    def __init__(self, env: dict[str, Any], channel: grpc.Channel) -> None:
        self.raw = _relay(channel, _bearer(env["gateway"]))
        self.first = next(self.raw.responses)
        self.worker = env["worker"]
        self.pending: list[relay_pb2.DownFrame] = []

    def up(self, *frames: relay_pb2.UpFrame) -> None:
        self.raw.send(relay_pb2.RelayUp(frames=list(frames)))

    def open(self, stream_id: int, worker_id: str, queue: str = "relay-idle") -> None:
        hello = worker_pb2.WorkerMessage(hello=worker_pb2.Hello(worker_id=worker_id,
                                                                queues=[queue]))
        self.up(relay_pb2.UpFrame(stream_id=stream_id, open=relay_pb2.RelayOpen(metadata=[
            relay_pb2.RelayHeader(key="authorization", value=f"Bearer {self.worker}")])),
            _message(stream_id, hello))

    def next_on(self, stream_id: int) -> relay_pb2.DownFrame:
        """The next frame down for `stream_id` (others are kept for their turn)."""
        while True:
            for frame in self.pending:
                if frame.stream_id == stream_id:
                    self.pending.remove(frame)
                    return frame
            self.pending.extend(next(self.raw.responses).frames)

    def next_message(self, stream_id: int, kind: str) -> Any:
        frame = self.next_on(stream_id)
        assert frame.WhichOneof("frame") == "message", frame
        msg = worker_pb2.ServerMessage.FromString(frame.message)
        assert msg.WhichOneof("msg") == kind, msg
        return getattr(msg, kind)

    def close(self) -> None:
        self.raw.close()


def _message(stream_id: int, msg: worker_pb2.WorkerMessage) -> relay_pb2.UpFrame:
    return relay_pb2.UpFrame(stream_id=stream_id, message=msg.SerializeToString())


def _beat(stream_id: int, *leases: worker_pb2.LeaseRef) -> relay_pb2.UpFrame:
    return relay_pb2.UpFrame(stream_id=stream_id,
                             heartbeat=worker_pb2.Heartbeat(leases=list(leases)))


async def test_a_heartbeat_frame_renews_only_its_own_streams_leases(env):
    """The leader offers heartbeat frames and answers each on its stream. A heartbeat frame
    naming a lease that another stream's worker holds vouches for nothing of it: a gateway
    cannot renew a lease through a stream the leader did not grant it to."""
    cluster: LocalCluster = env["cluster"]
    async with _client(env, cluster.servers) as admin:
        job = await admin.create_job(JobSpec.single("relay-beat", OnceSchedule(FAR_FUTURE_MS),
                                                    queue="relay-beat"))
        await admin.trigger_job(job.job_id)
    with _node_channel(cluster, cluster.leader()) as channel:
        relay = RawRelay(env, channel)
        assert relay.first.heartbeat_frames
        relay.open(1, "relay-beat-holder", queue="relay-beat")
        relay.open(2, "relay-beat-other")
        relay.next_message(1, "welcome")
        relay.next_message(2, "welcome")
        relay.up(_message(1, worker_pb2.WorkerMessage(credits=worker_pb2.Credits(credits=1))))
        lease = relay.next_message(1, "assign").lease
        relay.up(_beat(2, lease))
        assert lease.fencing_token not in relay.next_message(2, "heartbeat_ack").valid_tokens
        relay.up(_beat(1, lease))
        assert list(relay.next_message(1, "heartbeat_ack").valid_tokens) == [lease.fencing_token]
        relay.close()


def test_a_relays_bounds_end_one_stream_and_the_others_go_on(env):
    """relay_max_streams: the stream opened beyond it ends RESOURCE_EXHAUSTED.
    relay_stream_buffer_messages: a stream with more messages in one relay message than its
    servicer may hold ends RESOURCE_EXHAUSTED, and another stream of the relay is still
    answered. relay_down_max_frames: with far more answers than the down queue holds and the
    gateway not reading, none is lost once it reads again."""
    cluster: LocalCluster = env["cluster"]
    with _node_channel(cluster, cluster.leader()) as channel:
        relay = RawRelay(env, channel)
        for stream_id in range(1, MAX_STREAMS + 2):
            relay.open(stream_id, f"relay-bound-{stream_id}")
        for stream_id in range(1, MAX_STREAMS + 1):
            relay.next_message(stream_id, "welcome")
        beyond = relay.next_on(MAX_STREAMS + 1).end
        assert beyond.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
        assert f"relay_max_streams ({MAX_STREAMS})" in beyond.details

        credit = worker_pb2.WorkerMessage(credits=worker_pb2.Credits(credits=0))
        relay.up(*[_message(1, credit) for _ in range(STREAM_BUFFER * 4)])
        flooded = relay.next_on(1).end
        assert flooded.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
        assert "relay_stream_buffer_messages" in flooded.details

        beats = DOWN_FRAMES * 8
        beat = worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat())
        for i in range(beats):  # frames and messages: both ways to the leader's answer
            relay.up(_beat(2) if i % 2 else _message(2, beat))
        acks = [relay.next_message(2, "heartbeat_ack") for _ in range(beats)]
        assert len(acks) == beats and not any(a.valid_tokens for a in acks)
        relay.close()


async def test_heartbeats_as_the_workers_own_messages_still_renew(env):
    """A gateway started with --relay-heartbeats messages (as against a leader that does not
    offer heartbeat frames) relays heartbeats as the workers' bytes: acked, none as frames."""
    cluster: LocalCluster = env["cluster"]
    root = cluster.root
    gw = GatewayProc(cluster, root / "gw-relay-messages.log", "--relay-heartbeats", "messages",
                     relay=True).wait_serving()
    try:
        _wait_relay_up(gw)
        held = HeldTask("relay-messages")
        async with _client(env, cluster.servers) as admin, \
                _client(env, gw.addr, env["worker"]) as via_gw:
            job = await admin.create_job(JobSpec.single(
                "relay-messages", OnceSchedule(FAR_FUTURE_MS), queue="relay-messages"))
            worker = AckWorker(via_gw, tasks=[held.task], worker_id="relay-messages-w")
            async with worker:
                run = await admin.trigger_job(job.job_id)
                await asyncio.wait_for(held.started.wait(), WAIT_S)
                await until(lambda: any(held.tokens[0] in valid for _, valid in worker.acks),
                            what="a heartbeat ack of the lease")
                held.release.set()
                final = await admin.wait_run(run.run_id, timeout_s=WAIT_S, poll_interval_s=0.1)
        assert final.state is RunState.SUCCEEDED
        assert gateway_metric(gw, "gnomon_gateway_relay_heartbeat_frames_total") == 0
    finally:
        gw.stop()


def test_only_an_admin_makes_gateway_tokens_and_tenant_admins_do_not_see_them(env):
    """A gateway token is cluster-wide (no tenant): a tenant admin can neither create one nor
    see one in ListTokens; an admin sees the cluster's."""
    cluster: LocalCluster = env["cluster"]
    tenant_admin = _token(cluster, "tenant-admin", "default")
    with _node_channel(cluster, cluster.leader()) as channel:
        access = api_pb2_grpc.AccessServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            access.CreateToken(api_pb2.CreateTokenRequest(
                request_id=secrets.token_hex(8), name="tenant-gateway", role="gateway"),
                metadata=_bearer(tenant_admin), timeout=20)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, err.value.details()
        seen = access.ListTokens(api_pb2.ListTokensRequest(), metadata=_bearer(tenant_admin),
                                 timeout=20)
        assert seen.tokens and "gateway" not in {t.role for t in seen.tokens}
        admin = access.ListTokens(api_pb2.ListTokensRequest(),
                                  metadata=_bearer(cluster.admin_token()), timeout=20)
        assert "gateway" in {t.role for t in admin.tokens}
