"""Bounds of the worker stream, on the servicer itself (node/api/grpc/worker.py,
node/leader/outbox.py): the outbox at its bound, grants that stop when it is full, a reader
that stops reading while it is full and a watchdog that drops a worker that does not read,
pending reports at their bound, leases per heartbeat, and refusals that wait for the worker
to stop writing."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gnomon.node.api.grpc.access import set_principal
from gnomon.node.api.grpc.worker import WorkerServicer
from gnomon.node.core.model import TaskState
from gnomon.node.leader.dispatch import WorkerSession
from gnomon.node.leader.outbox import Outbox
from gnomon.node.security.auth import ANONYMOUS, AuthError, Principal
from gnomon.v1 import worker_pb2

from .harness import Context, Stream, WorkerConn, turns, until

S = grpc.StatusCode


def _ack(token: int = 1, detail: str = "") -> worker_pb2.ServerMessage:
    return worker_pb2.ServerMessage(report_ack=worker_pb2.ReportAck(
        lease=worker_pb2.LeaseRef(fencing_token=token), detail=detail))


# -- the outbox ------------------------------------------------------------------------------


def test_the_outbox_holds_max_messages_and_refuses_the_next():
    box = Outbox(max_messages=3, max_bytes=1 << 20)
    assert all(box.put_nowait(_ack(i)) for i in range(3))
    assert box.full() and len(box) == 3
    assert not box.put_nowait(_ack(4)) and len(box) == 3  # at the bound: refused
    assert not box.reserve()
    assert box.get_nowait() == _ack(0) and not box.full()
    assert box.put_nowait(_ack(5)) and [box.get_nowait() for _ in range(3)] == \
        [_ack(1), _ack(2), _ack(5)]


def test_the_outbox_holds_max_bytes():
    one = _ack(1, "x" * 100).ByteSize()
    box = Outbox(max_messages=100, max_bytes=3 * one)
    assert [box.put_nowait(_ack(1, "x" * 100)) for _ in range(4)] == [True, True, True, False]
    assert box.bytes == 3 * one and box.full()


def test_a_reserved_place_is_kept_for_an_assign():
    box = Outbox(max_messages=2)
    assert box.reserve()
    assert box.put_nowait(_ack(1))
    assert box.full() and not box.put_nowait(_ack(2))  # the reserved place is not taken
    assign = worker_pb2.ServerMessage(assign=worker_pb2.Assign(payload=b"p" * 100))
    assert box.put_nowait(assign, reserved=True) and len(box) == 2
    box.get_nowait()
    assert box.reserve()
    box.unreserve()
    assert not box.full()


async def test_a_closed_outbox_gives_what_is_queued_then_none_once():
    box = Outbox(max_messages=2)
    box.put_nowait(_ack(1))
    box.put_nowait(None)  # the end of the session
    assert not box.put_nowait(_ack(2))
    assert await box.get() == _ack(1)
    assert await box.get() is None
    assert box.empty()
    await box.wait_room()  # a closed outbox never blocks a writer


async def test_put_waits_for_room():
    box = Outbox(max_messages=1)
    box.put_nowait(_ack(1))
    put = asyncio.create_task(box.put(_ack(2)))
    await asyncio.sleep(0)
    assert not put.done()
    box.get_nowait()
    assert await put and box.get_nowait() == _ack(2)


async def test_the_dispatcher_grants_no_more_than_the_outbox_holds(leader):
    runs = [await leader.run_now(await leader.create_job(f"job-{i}")) for i in range(5)]
    session = WorkerSession("w1", ("default",), outbox=Outbox(max_messages=2))
    leader.dispatcher.attach(session)
    leader.dispatcher.add_credits(session, 5)
    await until(lambda: len(session.outbox) == 2, "two assigns")
    await turns()
    leased = [r for r in runs if leader.inst(r).state == TaskState.LEASED]
    assert len(session.outbox) == 2 and len(leased) == 2 and session.credits == 3
    session.outbox.get_nowait()  # the worker reads one: one more fits
    leader.dispatcher.add_credits(session, 0)
    await until(lambda: sum(leader.inst(r).state == TaskState.LEASED for r in runs) == 3,
                "a third grant")
    assert len(session.outbox) == 2 and session.credits == 2


# -- a stream fed by the test -------------------------------------------------------------------


class SlowContext(Context):
    """A worker that reads its Welcome, then nothing until `reads.set()`."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = asyncio.Event()

    async def write(self, message) -> None:
        if self.written:
            await self.reads.wait()
        await super().write(message)


Conn = WorkerConn


def _session(h, worker_id: str):
    return h.dispatcher.sessions.get(worker_id)


# -- a worker that does not read --------------------------------------------------------------


async def test_a_worker_that_does_not_read_is_not_read_then_dropped(make):
    h = await make(worker_outbox_max_messages=4, worker_stall_timeout_ms=200)
    await h.lead()
    conn = Conn(h, context=SlowContext())
    await conn.wait("welcome")
    for _ in range(20):
        conn.stream.send(heartbeat=worker_pb2.Heartbeat())
    # One ack taken by the blocked write, four queued: the outbox is at its bound and the
    # reader reads no further request.
    session = await until(lambda: (s := _session(h, "w1")) and s.outbox.full() and s, "full")
    await until(lambda: conn.stream.read == 1 + 5, "five heartbeats read")
    assert len(session.outbox) == 4 and conn.stream.unread == 15
    aborted = await until(lambda: conn.context.aborted, "the drop")
    assert aborted.code == S.RESOURCE_EXHAUSTED
    assert "none read for 200 ms (worker_stall_timeout_ms)" in aborted.details
    assert _session(h, "w1") is None and len(session.outbox) == 0
    assert conn.stream.unread == 15  # still nothing more read
    conn.context.reads.set()
    await conn.end()


class MeteredContext(Context):
    """A worker that reads its Welcome, then one message per `allow.release()`."""

    def __init__(self) -> None:
        super().__init__()
        self.allow = asyncio.Semaphore(0)

    async def write(self, message) -> None:
        if self.written:
            await self.allow.acquire()
        await super().write(message)


async def test_a_worker_that_reads_slowly_is_slowed_not_dropped(make):
    h = await make(worker_outbox_max_messages=2, worker_stall_timeout_ms=1_000)
    await h.lead()
    ctx = MeteredContext()
    conn = Conn(h, context=ctx)
    await conn.wait("welcome")
    for _ in range(10):
        conn.stream.send(heartbeat=worker_pb2.Heartbeat())
    await until(lambda: _session(h, "w1").outbox.full(), "full")
    for n in range(1, 11):  # one message read now and then, well within the stall timeout
        ctx.allow.release()
        await until(lambda n=n: len(conn.of("heartbeat_ack")) == n, f"ack {n}")
        # Read: the Hello, the n written, one in the write under way, two queued.
        assert conn.stream.read <= 1 + n + 1 + 2
    assert conn.context.aborted is None
    await conn.end()


async def test_pending_reports_stop_the_reader_at_their_bound(make):
    h = await make(worker_max_pending_reports=3)
    await h.lead()
    conn = Conn(h)
    await conn.wait("welcome")
    h.raft.hold()  # nothing commits: every report stays pending
    stale = worker_pb2.LeaseRef(run_id="nope@1", task_name="a", fencing_token=7)
    conn.stream.send(reports=worker_pb2.Reports(
        completes=[worker_pb2.Complete(lease=stale) for _ in range(5)]))
    conn.stream.send(heartbeat=worker_pb2.Heartbeat())
    await until(lambda: h.raft.waiting() > 0, "the burst proposed")
    await turns()
    assert conn.stream.read == 2 and conn.stream.unread == 1  # the heartbeat waits
    assert conn.of("heartbeat_ack") == []
    h.raft.release()
    assert len(await conn.wait("report_ack", 5)) == 5
    assert len(await conn.wait("heartbeat_ack")) == 1
    await conn.end()


@pytest.mark.parametrize("where", ["heartbeat", "hello"])
async def test_a_heartbeat_or_hello_names_at_most_max_heartbeat_leases(make, where):
    h = await make(worker_max_heartbeat_leases=3, stream_refusal_drain_ms=50)
    await h.lead()
    at_bound = [worker_pb2.LeaseRef(fencing_token=t) for t in (11, 12, 12)]
    over = [*at_bound, worker_pb2.LeaseRef(fencing_token=13)]
    if where == "hello":
        conn = Conn(h, held=[11, 12, 12, 13])
        await conn.end()
    else:
        conn = Conn(h)
        await conn.wait("welcome")
        conn.stream.send(heartbeat=worker_pb2.Heartbeat(leases=at_bound))
        [ack] = await conn.wait("heartbeat_ack")
        assert list(ack.revoked_tokens) == [11, 12]  # unknown: refused, once each
        conn.stream.send(heartbeat=worker_pb2.Heartbeat(leases=over))
        await until(lambda: conn.context.aborted, "the refusal")
        await conn.end()
    aborted = conn.context.aborted
    assert aborted.code == S.INVALID_ARGUMENT
    assert aborted.details == f"{where}.{'held' if where == 'hello' else 'leases'}: 4 " \
                              "leases; at most 3 (worker_max_heartbeat_leases)"


async def test_a_refusal_waits_for_the_worker_to_stop_writing(make):
    h = await make(stream_refusal_drain_ms=5_000)
    await h.lead()
    stream, context = Stream(), Context()
    stream.send(credits=worker_pb2.Credits(credits=1))  # not a Hello
    svc = WorkerServicer(h, h.dispatcher, h.leases)
    set_principal(ANONYMOUS)
    task = asyncio.create_task(svc.Connect(stream, context))
    stream.send(heartbeat=worker_pb2.Heartbeat())  # still writing
    await until(lambda: stream.read == 2, "the heartbeat read")
    await turns()
    assert context.aborted is None
    stream.close()  # the half-close: now the status
    await asyncio.gather(task, return_exceptions=True)
    assert context.aborted.code == S.INVALID_ARGUMENT
    assert context.aborted.details == "hello: the first message"


async def test_a_stream_whose_token_was_revoked_ends_at_its_next_heartbeat(make):
    h = await make()
    await h.lead()
    revoked: list[str] = []

    def revalidate(principal):
        if principal.token_id in revoked:
            raise AuthError("UNAUTHENTICATED", f"authorization: token {principal.token_id} "
                            "was revoked")

    worker = Principal("w", "worker", ("default",), "t7")
    conn = Conn(h, principal=worker, revalidate=revalidate)
    await conn.wait("welcome")
    conn.stream.send(heartbeat=worker_pb2.Heartbeat())
    await conn.wait("heartbeat_ack")
    assert list(h.dispatcher.sessions) == ["t7:w1"]
    revoked.append("t7")
    conn.stream.send(heartbeat=worker_pb2.Heartbeat())
    await until(lambda: conn.context.aborted, "the stream's end")
    assert conn.context.aborted.code == S.UNAUTHENTICATED
    assert conn.context.aborted.details == "authorization: token t7 was revoked"
    assert len(conn.of("heartbeat_ack")) == 1  # nothing renewed after the revocation
    assert not h.dispatcher.sessions  # nothing more is granted to it
    await conn.end()
