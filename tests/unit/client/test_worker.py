"""The Worker's stream loop against an in-process fake WorkerService (see ``fakes``).

No sleeps as synchronisation: the tests wait for protocol messages (with deadlines) and events.
A Credits message after a task ends is the barrier proving the task's report (if any) was
already written: the worker reports before it frees the slot.
"""

from __future__ import annotations

import asyncio
import threading
import time

import grpc
import pytest

from gnomon.client import (
    AsyncClient,
    GnomonError,
    NonRetryableError,
    ReportRefusal,
    TaskContext,
    Worker,
    task,
)
from gnomon.node.local.cluster import wait_for_async
from tests.support.fakes import FakeWorkerService, assign, closed_address

pytestmark = pytest.mark.timeout(60)


def make_worker(address, tasks, **kw):
    kw.setdefault("reconnect_initial_s", 0.01)
    kw.setdefault("reconnect_max_s", 0.05)
    kw.setdefault("shutdown_grace_s", 5.0)
    return Worker(address, tasks=tasks, **kw)


async def wait_until(predicate, timeout=5.0):
    return await wait_for_async(predicate, timeout_s=timeout, what="the condition",
                                interval_s=0.005)


@task(name="main")
async def quick(ctx: TaskContext) -> str:
    return "done"


class Gate:
    """Lets a test hold a task until it says so, and see when it started / was cancelled."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False
        self.ctx: TaskContext | None = None

    def task(self, name="main", queue="default"):
        @task(name=name, queue=queue)
        async def held(ctx: TaskContext) -> bytes:
            self.ctx = ctx
            self.started.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise
            return b"released"

        return held


async def test_hello_credits_assign_heartbeat_complete(serve):
    svc = FakeWorkerService()
    addr = await serve(svc)
    gate = Gate()

    @task(name="echo", queue="q1")
    async def echo(ctx: TaskContext):
        return {"got": ctx.json(), "key": ctx.idempotency_key, "token": ctx.fencing_token}

    async with make_worker(
        addr, [echo, gate.task(queue="q1")], worker_id="w-1", max_concurrency=2
    ) as worker:
        _, hello = await svc.expect("hello")
        assert hello.worker_id == "w-1" and list(hello.queues) == ["q1"] and not hello.held
        _, credits = await svc.expect("credits")
        assert credits.credits == 2

        stream = svc.streams[0]
        stream.send(assign=assign(7, task_name="echo", queue="q1", payload=b'{"x":1}'))
        _, complete = await svc.expect("complete")
        assert complete.lease.fencing_token == 7 and complete.lease.task_name == "echo"
        assert complete.result == b'{"got":{"x":1},"key":"j1@1000:echo","token":7}'
        _, credits = await svc.expect("credits")
        assert credits.credits == 1

        # A running task's lease is in every heartbeat until its report is acknowledged.
        stream.send(assign=assign(8, queue="q1"))
        await asyncio.wait_for(gate.started.wait(), 5)
        while True:
            _, hb = await svc.expect("heartbeat", skip=())
            if [lease.fencing_token for lease in hb.leases] == [8]:
                break
        assert gate.ctx is not None and gate.ctx.lease_valid()
        gate.release.set()
        _, complete = await svc.expect("complete")
        assert complete.result == b"released"
        await svc.expect("credits")
        await wait_until(lambda: not worker._leases.held)


async def test_sync_tasks_run_in_threads_and_failures_are_reported(serve):
    svc = FakeWorkerService()
    addr = await serve(svc)
    threads = []

    @task(name="sync")
    def sync_task(ctx: TaskContext) -> str:
        threads.append(threading.current_thread().name)
        ctx.write("working\n")
        return "ok"

    @task(name="flaky")
    def flaky(ctx: TaskContext) -> None:
        ctx.write("about to fail\n")
        raise ConnectionError("db down")

    @task(name="strict")
    async def strict(ctx: TaskContext) -> None:
        raise NonRetryableError("bad payload")

    async with make_worker(addr, [sync_task, flaky, strict], max_concurrency=1):
        await svc.expect("credits")
        stream = svc.streams[0]
        stream.send(assign=assign(1, task_name="sync"))
        _, complete = await svc.expect("complete")
        assert complete.result == b"ok" and complete.output_tail == "working\n"
        assert threads and threads[0].startswith("gnomon-task")
        await svc.expect("credits")

        stream.send(assign=assign(2, task_name="flaky"))
        _, fail = await svc.expect("fail")
        assert fail.retryable and fail.error == "ConnectionError: db down"
        assert "about to fail" in fail.output_tail and "Traceback" in fail.output_tail
        await svc.expect("credits")

        stream.send(assign=assign(3, task_name="strict"))
        _, fail = await svc.expect("fail")
        assert not fail.retryable and fail.error == "NonRetryableError: bad payload"
        await svc.expect("credits")

        stream.send(assign=assign(4, task_name="nope", queue="default"))
        _, fail = await svc.expect("fail")
        assert fail.retryable and "no task 'nope'" in fail.error
        _, credits = await svc.expect("credits")  # the credit it took comes back
        assert credits.credits == 1


async def test_revoked_token_cancels_the_task_without_a_report(serve):
    svc = FakeWorkerService()
    addr = await serve(svc)
    gate = Gate()
    async with make_worker(addr, [gate.task()], max_concurrency=1):
        await svc.expect("credits")
        svc.streams[0].send(assign=assign(9))
        await asyncio.wait_for(gate.started.wait(), 5)
        svc.revoked.add(9)
        # The slot frees only after the task ended; nothing but heartbeats may come before.
        _, credits = await svc.expect("credits")
        assert credits.credits == 1
        assert gate.cancelled
        assert gate.ctx is not None and not gate.ctx.lease_valid() and gate.ctx.is_cancelled()


async def test_cancel_message_stops_the_task(serve):
    # The real leader pushes Cancel as soon as the run is cancelled (tests/integration/
    # test_sdk_cancel.py shows it against real nodes); here only the SDK's side.
    svc = FakeWorkerService()
    addr = await serve(svc)
    gate = Gate()
    async with make_worker(addr, [gate.task()], max_concurrency=1):
        await svc.expect("credits")
        stream = svc.streams[0]
        stream.send(assign=assign(5))
        await asyncio.wait_for(gate.started.wait(), 5)
        stream.send(cancel={"lease": assign(5).lease, "reason": "run cancelled"})
        await svc.expect("credits")
        assert gate.cancelled


async def test_self_fencing_stops_reporting(serve):
    # The worker loses the leader and cannot reach a new one: after ttl - margin without an
    # acknowledged heartbeat the lease is invalid, the task is told to stop and its result is
    # never reported, not even once a leader is back.
    svc = FakeWorkerService(heartbeat_interval_ms=50, lease_ttl_ms=600)
    addr = await serve(svc)
    started = threading.Event()
    finished = threading.Event()
    seen_invalid = []

    @task(name="main")
    def stubborn(ctx: TaskContext) -> str:
        started.set()
        while ctx.lease_valid():
            ctx.wait_cancelled(0.01)
        seen_invalid.append(ctx.lease_valid())
        finished.set()
        return "result that must not be reported"

    async with make_worker(addr, [stubborn], max_concurrency=1, safety_margin_s=0.2) as worker:
        await svc.expect("credits")
        svc.streams[0].send(assign=assign(11))
        assert await asyncio.to_thread(started.wait, 5)
        svc.refuse = True
        svc.streams[0].abort(grpc.StatusCode.UNAVAILABLE, "leader lost")
        assert await asyncio.to_thread(finished.wait, 10)
        await wait_until(lambda: worker._leases.busy == 0 and not worker._leases.held)
        svc.refuse = False
        # Back online: the lease is not held any more and nothing is reported for it
        # (expect() fails on a complete or fail before the credits).
        _, credits = await svc.expect("credits", timeout=10)
        assert credits.credits == 1
        assert list(svc.streams[-1].hello.held) == []
    assert seen_invalid == [False]


async def test_skipped_heartbeat_acks_reconnect_instead_of_fencing(serve):
    # A leader that cannot prove its leadership sends no ack. The worker reopens the stream
    # (resuming its leases) rather than letting the ack lag self-fence a healthy lease.
    svc = FakeWorkerService(heartbeat_interval_ms=50, lease_ttl_ms=2000, auto_ack=False)
    addr = await serve(svc)
    gate = Gate()
    async with make_worker(addr, [gate.task()], max_concurrency=1):
        await svc.expect("credits")
        svc.streams[0].send(assign=assign(61))
        await asyncio.wait_for(gate.started.wait(), 5)
        index, hello = await svc.expect("hello", skip=("heartbeat", "credits"))
        assert index == 1 and [lease.fencing_token for lease in hello.held] == [61]
        assert gate.ctx is not None and gate.ctx.lease_valid()
        gate.release.set()
        index, complete = await svc.expect("complete", skip=("heartbeat", "credits", "hello"))
        assert index >= 1 and complete.lease.fencing_token == 61
    assert not gate.cancelled


async def test_report_not_recorded_is_sent_again(serve):
    # accepted=false, retry=true: the leader could not commit it; the same report goes again.
    svc = FakeWorkerService(auto_report_ack=False)
    addr = await serve(svc)

    async with make_worker(addr, [quick], max_concurrency=1) as worker:
        await svc.expect("credits")
        stream = svc.streams[0]
        stream.send(assign=assign(71))
        _, first = await svc.expect("complete")
        await svc.expect("credits")
        stream.send(
            report_ack={
                "lease": first.lease,
                "accepted": False,
                "retry": True,
                "detail": "not committed: leader changed; report again",
            }
        )
        _, second = await svc.expect("complete")
        assert second == first
        assert 71 in worker._leases.held
        stream.send(report_ack={"lease": first.lease, "accepted": True})
        await wait_until(lambda: not worker._leases.held)
        assert worker.stats.reports_resent == 1 and worker.stats.reports_accepted == 1
        assert worker.stats.reports_refused == worker.stats.reports_abandoned == 0


async def test_report_the_cluster_decided_on_is_surfaced_not_resent(serve, caplog):
    # accepted=false, retry=false (here: a Complete the cluster turned into a failure): the
    # worker must not resend it, must say so loudly and tell the application.
    svc = FakeWorkerService(auto_report_ack=False)
    addr = await serve(svc)
    refusals: list[ReportRefusal] = []
    told = asyncio.Event()

    def on_refused(refusal: ReportRefusal) -> None:
        refusals.append(refusal)
        told.set()
        raise RuntimeError("a broken hook must not stop the worker")

    detail = "result: 70000 bytes exceeds max_result_bytes 65536; recorded as a failure"
    async with make_worker(
        addr, [quick], max_concurrency=1, on_report_refused=on_refused
    ) as worker:
        await svc.expect("credits")
        stream = svc.streams[0]
        stream.send(assign=assign(72))
        _, first = await svc.expect("complete")
        await svc.expect("credits")
        with caplog.at_level("WARNING", logger="gnomon.client.worker"):
            stream.send(report_ack={"lease": first.lease, "accepted": False, "detail": detail})
            await asyncio.wait_for(told.wait(), 5)
        # Forgotten at once: a resend needs the held lease, so none can follow.
        assert 72 not in worker._leases.held
        assert refusals == [
            ReportRefusal("j1@1000", "main", 72, kind="complete", detail=detail, final=True)
        ]
        assert refusals[0].idempotency_key == "j1@1000:main"
        assert worker.stats.reports_refused == 1 and worker.stats.reports_resent == 0
        errors = [r for r in caplog.records if r.levelname == "ERROR" and detail in r.message]
        assert errors, caplog.text
        # The worker goes on: the next task is served and its report accepted.
        stream.send(assign=assign(73))
        _, nxt = await svc.expect("complete")
        assert nxt.lease.fencing_token == 73
        stream.send(report_ack={"lease": nxt.lease, "accepted": True})
        await wait_until(lambda: worker.stats.reports_accepted == 1)


async def test_the_ack_reason_decides_over_retry_and_reaches_the_refusal(serve):
    # ReportAck.reason (worker.proto) is the stable code the SDK goes by; `retry` is only the
    # fallback for nodes that do not set it.
    svc = FakeWorkerService(auto_report_ack=False)
    addr = await serve(svc)
    refusals: list[ReportRefusal] = []

    async with make_worker(
        addr, [quick], max_concurrency=1, on_report_refused=refusals.append
    ) as worker:
        await svc.expect("credits")
        stream = svc.streams[0]
        stream.send(assign=assign(76))
        _, first = await svc.expect("complete")
        unrecorded = {"accepted": False, "reason": "NOT_RECORDED", "detail": "not recorded"}
        stream.send(report_ack={"lease": first.lease, **unrecorded})
        _, again = await svc.expect("complete", skip=("heartbeat", "credits"))
        assert again == first and worker.stats.reports_resent == 1
        stale = "fencing_token: stale fencing token 76, current is 77"
        stream.send(
            report_ack={
                "lease": again.lease,
                "accepted": False,
                "retry": True,
                "reason": "STALE_LEASE",
                "detail": stale,
            }
        )
        await wait_until(lambda: refusals)
        assert not worker._leases.held
    assert refusals == [
        ReportRefusal(
            "j1@1000", "main", 76, kind="complete", detail=stale, final=True, reason="STALE_LEASE"
        )
    ]
    assert worker.stats.reports_refused == 1 and worker.stats.reports_resent == 1


async def test_report_never_recorded_is_abandoned_after_the_limit(serve, monkeypatch):
    import gnomon.client.worker.reports as reports_module

    monkeypatch.setattr(reports_module, "_MAX_REPORT_ATTEMPTS", 2)
    monkeypatch.setattr(reports_module, "_REPORT_BACKOFF", reports_module.Backoff(0.001, 0.002))
    svc = FakeWorkerService(auto_report_ack=False)
    addr = await serve(svc)
    refusals: list[ReportRefusal] = []

    @task(name="main")
    async def failing(ctx: TaskContext) -> str:
        raise ConnectionError("db down")

    async with make_worker(
        addr, [failing], max_concurrency=1, on_report_refused=refusals.append
    ) as worker:
        await svc.expect("credits")
        stream = svc.streams[0]
        stream.send(assign=assign(74))
        not_committed = "not committed: overloaded; report again"
        for _ in range(2):
            _, fail = await svc.expect("fail", skip=("heartbeat", "credits"))
            stream.send(
                report_ack={
                    "lease": fail.lease,
                    "accepted": False,
                    "retry": True,
                    "detail": not_committed,
                }
            )
        await wait_until(lambda: refusals)
        assert not worker._leases.held
    (refusal,) = refusals
    assert refusal.kind == "fail" and not refusal.final and not_committed in refusal.detail
    assert worker.stats.reports_resent == 1 and worker.stats.reports_abandoned == 1


async def test_report_waiting_to_be_resent_when_the_lease_lapses_is_abandoned(serve, monkeypatch):
    import gnomon.client.worker.reports as reports_module

    # The resend would come long after the lease lapsed.
    monkeypatch.setattr(reports_module, "_REPORT_BACKOFF", reports_module.Backoff(60.0, 60.0))
    svc = FakeWorkerService(heartbeat_interval_ms=50, lease_ttl_ms=600, auto_report_ack=False)
    addr = await serve(svc)
    refusals: list[ReportRefusal] = []

    async with make_worker(
        addr, [quick], max_concurrency=1, safety_margin_s=0.2, on_report_refused=refusals.append
    ) as worker:
        await svc.expect("credits")
        stream = svc.streams[0]
        stream.send(assign=assign(75))
        _, complete = await svc.expect("complete")
        stream.send(
            report_ack={
                "lease": complete.lease,
                "accepted": False,
                "retry": True,
                "detail": "not recorded: leader changed; report again",
            }
        )
        await wait_until(
            lambda: 75 in worker._leases.held and worker._leases.held[75].report_attempts == 1
        )
        # The leader is gone and none answers: the lease lapses before the resend is due.
        svc.refuse = True
        stream.abort(grpc.StatusCode.UNAVAILABLE, "leader lost")
        await wait_until(lambda: refusals, timeout=10)
        assert not worker._leases.held
    (refusal,) = refusals
    assert not refusal.final and refusal.kind == "complete" and "lapsed" in refusal.detail
    assert worker.stats.reports_abandoned == 1 and worker.stats.reports_resent == 0


async def test_reports_carry_output_tail_duration_and_exit_code(serve):
    svc = FakeWorkerService()
    addr = await serve(svc)
    gate = asyncio.Event()

    @task(name="proc")
    async def proc(ctx: TaskContext) -> str:
        ctx.write("line 1\n")
        await gate.wait()
        ctx.write("line 2\n")
        ctx.set_exit_code(0)
        return "ok"

    @task(name="crash")
    def crash(ctx: TaskContext) -> None:
        ctx.write("about to crash\n")
        ctx.set_exit_code(-9)
        raise RuntimeError("killed")

    @task(name="plain")
    async def plain(ctx: TaskContext) -> None:
        return None

    async with make_worker(addr, [proc, crash, plain], max_concurrency=1) as worker:
        await svc.expect("credits")
        stream = svc.streams[0]
        stream.send(assign=assign(81, task_name="proc"))
        # At least one heartbeat interval passes while the task is held: a measurable run.
        await svc.expect("heartbeat", skip=("credits",))
        gate.set()
        _, complete = await svc.expect("complete")
        assert complete.output_tail == "line 1\nline 2\n"
        assert complete.HasField("exit_code") and complete.exit_code == 0
        assert complete.duration_ms > 0
        await svc.expect("credits")

        stream.send(assign=assign(82, task_name="crash"))
        _, fail = await svc.expect("fail")
        assert fail.exit_code == -9 and "about to crash" in fail.output_tail
        assert fail.duration_ms >= 0 and fail.error == "RuntimeError: killed"
        await svc.expect("credits")

        stream.send(assign=assign(83, task_name="plain"))
        _, complete = await svc.expect("complete")
        assert not complete.HasField("exit_code") and complete.output_tail == ""
        await svc.expect("credits")

        # Never started (no such task): no duration, no exit code.
        stream.send(assign=assign(84, task_name="nope"))
        _, fail = await svc.expect("fail")
        assert fail.duration_ms == 0 and not fail.HasField("exit_code")
        await wait_until(lambda: worker.stats.reports_accepted == 4)
        assert worker.stats.tasks_started == 3


async def test_deadline_cancels_and_reports_retryable(serve):
    svc = FakeWorkerService()
    addr = await serve(svc)
    gate = Gate()
    async with make_worker(addr, [gate.task()], max_concurrency=1):
        await svc.expect("credits")
        svc.streams[0].send(assign=assign(12, deadline_ms=int(time.time() * 1000) + 100))
        _, fail = await svc.expect("fail")
        assert fail.retryable and "deadline" in fail.error
        assert gate.cancelled


async def test_follows_the_leader_hint(serve):
    leader = FakeWorkerService()
    leader_addr = await serve(leader)
    follower = FakeWorkerService(redirect_to=leader_addr)
    follower_addr = await serve(follower)
    gate = Gate()
    async with make_worker(follower_addr, [gate.task()]) as worker:
        _, hello = await leader.expect("hello")
        await leader.expect("credits")
        assert follower.connects == 1 and worker.connected


async def test_rotates_past_an_unreachable_server(serve):
    svc = FakeWorkerService()
    addr = await serve(svc)
    async with make_worker([closed_address(), addr], [Gate().task()]) as worker:
        await svc.expect("credits")
        assert worker.connected


async def test_shutdown_before_run_is_harmless():
    worker = make_worker("127.0.0.1:1", [Gate().task()])
    await worker.shutdown()
    await asyncio.wait_for(worker.run(), 5)


async def test_reconnect_resumes_held_leases(serve):
    svc = FakeWorkerService()
    addr = await serve(svc)
    gate = Gate()
    async with make_worker(AsyncClient(addr), [gate.task()], max_concurrency=2):
        await svc.expect("credits")
        svc.streams[0].send(assign=assign(21))
        await asyncio.wait_for(gate.started.wait(), 5)
        svc.streams[0].abort(grpc.StatusCode.UNAVAILABLE, "leader stepped down")
        index, hello = await svc.expect("hello")
        assert index == 1 and [lease.fencing_token for lease in hello.held] == [21]
        _, credits = await svc.expect("credits")
        assert credits.credits == 1  # one slot is still busy with the resumed task
        gate.release.set()
        index, complete = await svc.expect("complete")
        assert index == 1 and complete.lease.fencing_token == 21


async def test_lease_not_resumed_is_cancelled_locally(serve):
    svc = FakeWorkerService()
    addr = await serve(svc)
    gate = Gate()
    async with make_worker(addr, [gate.task()], max_concurrency=1):
        await svc.expect("credits")
        svc.streams[0].send(assign=assign(31))
        await asyncio.wait_for(gate.started.wait(), 5)
        svc.resume = lambda hello: []
        svc.streams[0].abort(grpc.StatusCode.UNAVAILABLE, "restarting")
        index, hello = await svc.expect("hello")
        assert [lease.fencing_token for lease in hello.held] == [31]
        index, credits = await svc.expect("credits")
        assert index == 1 and credits.credits == 1
        assert gate.cancelled


async def test_graceful_shutdown_waits_for_running_tasks(serve):
    svc = FakeWorkerService()
    addr = await serve(svc)
    gate = Gate()
    worker = make_worker(addr, [gate.task()], max_concurrency=2)
    run = asyncio.create_task(worker.run())
    await svc.expect("credits")
    svc.streams[0].send(assign=assign(41))
    await asyncio.wait_for(gate.started.wait(), 5)
    stopping = asyncio.create_task(worker.shutdown())
    await wait_until(lambda: worker._leases.draining)
    # Draining: a late assignment is handed back at once.
    svc.streams[0].send(assign=assign(42))
    _, fail = await svc.expect("fail")
    assert fail.lease.fencing_token == 42 and fail.retryable
    assert not stopping.done()
    gate.release.set()
    _, complete = await svc.expect("complete")
    assert complete.lease.fencing_token == 41
    await asyncio.wait_for(stopping, 10)
    await asyncio.wait_for(run, 10)
    assert not gate.cancelled


async def test_shutdown_cancels_tasks_after_the_grace_period(serve):
    svc = FakeWorkerService()
    addr = await serve(svc)
    gate = Gate()
    worker = make_worker(addr, [gate.task()], max_concurrency=1, shutdown_grace_s=0.1)
    async with worker:
        await svc.expect("credits")
        svc.streams[0].send(assign=assign(51))
        await asyncio.wait_for(gate.started.wait(), 5)
    _, fail = await svc.expect("fail")
    assert fail.retryable and "shut down" in fail.error and fail.lease.fencing_token == 51
    assert gate.cancelled


async def test_fatal_status_ends_run_with_a_typed_error(serve):
    class Rejecting(FakeWorkerService):
        async def Connect(self, request_iterator, context):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "worker_id: bad characters")
            yield  # pragma: no cover

    addr = await serve(Rejecting())
    worker = make_worker(addr, [Gate().task()])
    with pytest.raises(GnomonError, match="worker_id: bad characters"):
        await asyncio.wait_for(worker.run(), 10)


def test_worker_options_are_validated():
    t = Gate().task(queue="a")
    with pytest.raises(ValueError):
        Worker("h:1", tasks=[])
    with pytest.raises(ValueError):
        Worker("h:1", tasks=[t], queues=["b"])
    with pytest.raises(ValueError):
        Worker("h:1", tasks=[t, Gate().task(queue="a")])
    with pytest.raises(ValueError):
        Worker("h:1", tasks=[t], max_concurrency=0)
    w = Worker("h:1,h:2", tasks=[t, Gate().task(name="other", queue="c")])
    assert w.queues == ("a", "c") and w.worker_id


async def test_a_call_that_ended_before_hello_still_yields_its_leader_hint():
    # A follower may end the call before the worker's Hello is written: the write then fails
    # with InvalidStateError, and only reading the call gives its status and leader hint.
    class EndedCall:
        async def write(self, msg):
            raise asyncio.InvalidStateError("RPC already finished")

        async def read(self):
            trailers = grpc.aio.Metadata(("gnomon-leader", "leader:1"))
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), trailers, "not the leader"
            )

        def cancel(self):
            return False

    class Channel:
        def stream_stream(self, *args, **kwargs):
            return lambda **kw: EndedCall()

        def unary_unary(self, *args, **kwargs):  # the stub binds every method
            return None

    worker = make_worker("follower:1", [Gate().task()])
    end = await worker._stream._session(Channel(), "follower:1", asyncio.Event())
    assert end.hint == "leader:1" and not end.welcomed
