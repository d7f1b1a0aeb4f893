"""Bounds of the worker stream against real node processes (node/DESIGN.md, "Bounds of a
worker stream").

A worker that floods the leader and never reads what it is answered: its answers stay queued
on the leader. Before the outbox was bounded, reports (each one proposed, each one
acknowledged) took the leader from 64 to 462 MiB in 15 s, and heartbeats naming 1,000 unknown
tokens each (every one answered as revoked) from 64 to 251 MiB, with no plateau. Now the
leader stops reading such a worker once its outbox is full and drops it with
RESOURCE_EXHAUSTED after `worker_stall_timeout_ms` with nothing read: the leader's RSS stays
within a bound, an honest worker's heartbeats are acknowledged throughout.

Garbage frames on the stream are INVALID_ARGUMENT to an asyncio client too: the status used to
go out while the client was still writing, which fails that write, and grpc.aio then reports
INTERNAL "Internal error from Core" (about one stream in ten) instead of the status.
"""

from __future__ import annotations

import asyncio
import collections
import random
import threading
import time

import grpc
import grpc.aio
import pytest

from gnomon.node.config import Config
from gnomon.node.local.cluster import NodeProc, wait_for
from gnomon.v1 import api_pb2, api_pb2_grpc, worker_pb2, worker_pb2_grpc
from tests.support.cluster import RawWorker, module_cluster
from tests.support.resources import attack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

STALL_S = Config.worker_stall_timeout_ms / 1000  # the nodes run with the defaults
# What the flood may add to the leader's RSS: the bounded queues of one stream (4 MiB of
# answers, 1,024 pending reports), the transport's buffers, allocator slack.
RSS_BOUND_MIB = 48
# The flood gets this long to be dropped (it is after STALL_S with nothing read).
DROP_WITHIN_S = STALL_S + 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    with module_cluster(tmp_path_factory.mktemp("stream-bounds"), request=request) as c:
        yield c


def rss_mib(node: NodeProc) -> float:
    assert node.proc is not None
    with open(f"/proc/{node.proc.pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class Flood:
    """A worker stream that sends `kind` messages as fast as the leader reads them and reads
    nothing back until `read_to_end`."""

    def __init__(self, node: NodeProc, worker_id: str, kind: str) -> None:
        self.worker_id = worker_id
        self.sent = 0
        self._stop = threading.Event()
        rng = random.Random(worker_id)

        def requests():
            yield worker_pb2.WorkerMessage(hello=worker_pb2.Hello(worker_id=worker_id))
            deadline = time.monotonic() + DROP_WITHIN_S + 5  # bounded even if never dropped
            while not self._stop.is_set() and time.monotonic() < deadline:
                self.sent += 1
                if kind == "reports":  # leases that do not exist: each one refused
                    yield worker_pb2.WorkerMessage(reports=worker_pb2.Reports(completes=[
                        worker_pb2.Complete(lease=worker_pb2.LeaseRef(
                            run_id="none@1", task_name="t", fencing_token=rng.getrandbits(40)),
                            result=b"x") for _ in range(64)]))
                else:  # heartbeats naming tokens the worker does not hold
                    yield worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat(leases=[
                        worker_pb2.LeaseRef(fencing_token=rng.getrandbits(40))
                        for _ in range(1_000)]))

        # No BDP probing: the receive window stays small, so the leader meets a full one soon.
        self._channel = grpc.insecure_channel(node.grpc_addr, options=[("grpc.http2.bdp_probe", 0)])
        self.call = worker_pb2_grpc.WorkerServiceStub(self._channel).Connect(requests())

    def stop(self) -> None:
        self._stop.set()

    def read_to_end(self) -> tuple[grpc.StatusCode, str, int]:
        """Read what was queued for it, then its status: (code, details, messages read)."""
        n = 0
        try:
            for _ in self.call:
                n += 1
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or "", n
        return self.call.code(), self.call.details() or "", n

    def close(self) -> None:
        self._stop.set()
        self.call.cancel()
        self._channel.close()


def _workers(node: NodeProc) -> set[str]:
    ops = api_pb2_grpc.OperationsServiceStub(node._channel())
    return {w.worker_id for w in ops.ListWorkers(api_pb2.ListWorkersRequest(),
                                                 timeout=10).workers}


@pytest.mark.resources
@pytest.mark.parametrize("kind", ["reports", "heartbeats"])
def test_a_worker_that_floods_and_never_reads_is_slowed_then_dropped(cluster, kind):
    leader = cluster.leader()
    with attack(f"worker stream: a flood of {kind} never read", leader,
                rss_bound_mib=RSS_BOUND_MIB, settle_s=30):
        _flood_is_slowed_then_dropped(leader, kind)


def _flood_is_slowed_then_dropped(leader: NodeProc, kind: str) -> None:
    honest = RawWorker(leader, f"honest-{kind}")
    flood_id = f"flood-{kind}"
    before = rss_mib(leader)
    peak = before
    acks = 0
    flood = Flood(leader, flood_id, kind)
    try:
        wait_for(lambda: flood_id in _workers(leader), timeout_s=30, what="the flood's session")

        def dropped() -> bool:
            nonlocal peak, acks
            honest.heartbeat([])  # an honest worker is answered during the attack
            honest.next("heartbeat_ack", timeout_s=5)
            acks += 1
            peak = max(peak, rss_mib(leader))
            return flood_id not in _workers(leader)

        try:
            wait_for(dropped, timeout_s=DROP_WITHIN_S, interval_s=0.2,
                     what=f"the leader to drop the {kind} flood")
            was_dropped = True
        except AssertionError:
            was_dropped = False
        flood.stop()
        grown = peak - before
        print(f"{kind} flood: leader RSS {before:.0f} -> {peak:.0f} MiB, {flood.sent} messages "
              f"sent, dropped: {was_dropped}, honest heartbeats acknowledged: {acks}")
        assert grown < RSS_BOUND_MIB, (
            f"leader RSS {before:.0f} -> {peak:.0f} MiB (+{grown:.0f}) during the {kind} flood "
            f"({flood.sent} messages sent), dropped: {was_dropped}")
        assert was_dropped, f"the {kind} flood was not dropped within {DROP_WITHIN_S}s"
        assert acks >= 2
        code, details, _read = flood.read_to_end()
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
        assert "(worker_stall_timeout_ms)" in details and flood_id in details
    finally:
        flood.close()
        honest.close()


def _garbage(rng: random.Random) -> bytes:
    """Random bytes that are not a WorkerMessage."""
    while True:
        data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 40)))
        try:
            worker_pb2.WorkerMessage.FromString(data)
        except Exception:  # noqa: BLE001 - DecodeError: what we want
            return data


async def _garbage_sessions(addr: str, n: int) -> collections.Counter:
    rng = random.Random(4)
    hello = worker_pb2.WorkerMessage(hello=worker_pb2.Hello(worker_id="w-1")).SerializeToString()
    credits = worker_pb2.WorkerMessage(credits=worker_pb2.Credits(credits=1)).SerializeToString()
    heartbeat = worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat()).SerializeToString()
    codes: collections.Counter = collections.Counter()
    async with grpc.aio.insecure_channel(addr) as channel:
        connect = channel.stream_stream("/gnomon.v1.WorkerService/Connect",
                                        request_serializer=None,
                                        response_deserializer=worker_pb2.ServerMessage.FromString)
        for i in range(n):
            frames = [*([hello, credits] if i % 3 else []),
                      *(_garbage(rng) for _ in range(rng.randrange(1, 4))), heartbeat, credits]

            async def requests(frames=frames):
                for frame in frames:
                    yield frame

            call = connect(requests(), timeout=20)
            try:
                async for _ in call:
                    pass
                code, details = await call.code(), await call.details()
            except grpc.aio.AioRpcError as exc:
                code, details = exc.code(), exc.details()
            codes[(code.name, (details or "")[:60])] += 1
    return codes


@pytest.mark.resources
def test_garbage_frames_are_invalid_argument_to_an_asyncio_client(cluster):
    leader = cluster.leader()
    honest = RawWorker(leader, "honest-garbage")

    def heartbeat() -> None:
        honest.heartbeat([])
        honest.next("heartbeat_ack", timeout_s=5)

    try:
        with attack("worker stream: 200 streams of garbage frames", leader, honest=heartbeat):
            codes = asyncio.run(_garbage_sessions(leader.grpc_addr, 200))
    finally:
        honest.close()
    assert {code for code, _ in codes} == {"INVALID_ARGUMENT"}, codes
    assert all(details.startswith("request: not a valid gnomon.v1.WorkerMessage")
               for _, details in codes), codes
