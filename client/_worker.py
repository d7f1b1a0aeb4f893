"""``Worker``: runs task functions for the leases a gnomon leader grants on one stream.

Protocol (``gnomon/v1/worker.proto``): Hello -> Welcome, then Credits for free slots, Assign per
task, one Heartbeat with every held lease per interval, Complete/Fail per finished task. The
worker self-fences: a lease with no acknowledged heartbeat for ``lease_ttl - safety_margin``
(measured from when the acknowledged heartbeat was *sent*) is treated as lost: its task is
cancelled and its result is not reported.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import logging
import os
import random
import re
import socket
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import grpc
import grpc.aio

from gnomon.v1 import worker_pb2, worker_pb2_grpc

from . import _convert as cv
from ._client import AsyncClient, Client
from ._context import DEFAULT_OUTPUT_TAIL_BYTES, LeaseState, OutputTail, TaskContext
from ._errors import NonRetryableError, error_for_status
from ._task import ANY_TASK, TaskDefinition, encode_result
from ._transport import (
    MAX_IMMEDIATE_REDIRECTS,
    Backoff,
    ChannelConfig,
    ChannelPool,
    Router,
    leader_hint,
    parse_servers,
    reason_of,
)

__all__ = ["ReportRefusal", "Worker", "WorkerStats"]

log = logging.getLogger("gnomon.client.worker")

# Statuses that a reconnect cannot fix: run() raises them.
_FATAL = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
_DEFAULT_LEASE_TTL_S = 30.0
_MAX_ERROR_CHARS = 4096
# A report the leader could not commit ("report again") is sent again this many times at most.
_MAX_REPORT_ATTEMPTS = 5
_REPORT_BACKOFF = Backoff(initial_s=0.1, maximum_s=2.0)
# After shutdown cancels the remaining tasks: how long their Fail reports and the server's
# acknowledgements may take before the stream is closed regardless.
_CLOSE_WAIT_S = 2.0

# Why the worker cancelled a task. Only these two still report (a retryable Fail); for the
# others the lease is gone and any report would be rejected.
_DEADLINE = "deadline"
_SHUTDOWN = "shutdown"


@dataclass(frozen=True, slots=True)
class ReportRefusal:
    """A Complete or Fail of this worker that the cluster did not record as sent (passed to
    the worker's ``on_report_refused`` and counted in ``Worker.stats``).

    ``final=True``: the cluster decided (the fencing token is stale, the task is no longer
    leased, or it turned a Complete into a failure, e.g. a result over its
    ``max_result_bytes``); sending the report again would change nothing. ``final=False``: the
    report was never recorded (leader change, overload) and the worker stopped sending it
    again (the lease lapsed, or it was refused too often); the cluster will expire the lease
    and retry the task. ``detail`` is the cluster's reason."""

    run_id: str
    task_name: str
    fencing_token: int
    kind: Literal["complete", "fail"]
    detail: str
    final: bool

    @property
    def idempotency_key(self) -> str:
        return f"{self.run_id}:{self.task_name}"


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """Counters of a worker's reports since it was created (``Worker.stats``)."""

    tasks_started: int = 0
    """Task functions called."""
    reports_accepted: int = 0
    """Completes and Fails the cluster recorded as sent."""
    reports_refused: int = 0
    """Reports the cluster decided otherwise about (``ReportRefusal.final``)."""
    reports_resent: int = 0
    """Times a report the cluster had not recorded was sent again."""
    reports_abandoned: int = 0
    """Reports never recorded that the worker stopped sending (``final=False``)."""


class _StreamStalled(Exception):
    """Heartbeats went unacknowledged for too long: the stream is reopened."""


@dataclass(eq=False)
class _Execution:
    """One held lease and the task running under it."""

    definition: TaskDefinition | None
    ctx: TaskContext
    lease: LeaseState
    ttl_s: float
    margin_s: float
    output: OutputTail
    task: asyncio.Task[None] | None = None
    awaiting_fn: bool = False
    cancel_reason: str | None = None
    report: worker_pb2.WorkerMessage | None = None
    report_sent: bool = False
    report_attempts: int = 0
    slot_released: bool = True
    deadline_handle: asyncio.TimerHandle | None = None
    # time.monotonic() when the task function was called and when it returned or raised.
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def token(self) -> int:
        return self.ctx.fencing_token

    @property
    def ref(self) -> worker_pb2.LeaseRef:
        return cv.lease_ref(self.ctx.run_id, self.ctx.task_name, self.ctx.fencing_token)

    def describe(self) -> str:
        return f"{self.ctx.run_id}:{self.ctx.task_name} (token {self.ctx.fencing_token})"

    def duration_ms(self) -> int:
        if self.started_at is None:
            return 0
        end = self.finished_at if self.finished_at is not None else time.monotonic()
        return max(0, round((end - self.started_at) * 1000))


@dataclass
class _SessionEnd:
    welcomed: bool = False
    error: grpc.aio.AioRpcError | None = None
    detail: str = ""
    hint: str | None = None


def _default_worker_id() -> str:
    raw = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    return re.sub(r"[^A-Za-z0-9_.:-]", "-", raw)[:128]


class Worker:
    """Runs ``tasks`` for a gnomon cluster.

    ``client_or_servers`` is a ``Client``/``AsyncClient`` (its servers and channel settings are
    reused; the worker dials its own channels) or server addresses. ``queues`` defaults to the
    tasks' queues. At most ``max_concurrency`` tasks run at once (sync functions in a thread
    pool of that size). ``heartbeat_interval_s`` defaults to the server's (Welcome);
    ``safety_margin_s`` to a fifth of the lease TTL (capped at half of it).

    Use ``await worker.run()`` (returns after ``shutdown()``) or ``async with worker:``.
    ``shutdown()`` stops taking work, lets running tasks finish for up to ``shutdown_grace_s``,
    then cancels the rest (reporting them as retryable failures) and closes the stream.

    Every Complete and Fail carries the task's output tail (``ctx.write``), the attempt's
    duration and, if the task recorded one (``ctx.set_exit_code``), its exit code. A report
    the cluster did not record as sent is logged and passed to ``on_report_refused`` (a
    ``ReportRefusal``; called on the worker's event loop, so keep it short); ``stats`` counts
    them. A report the cluster could not commit is sent again while the lease holds.
    """

    def __init__(
        self,
        client_or_servers: AsyncClient | Client | Sequence[str] | str,
        *,
        tasks: Sequence[TaskDefinition],
        queues: Sequence[str] | None = None,
        worker_id: str | None = None,
        max_concurrency: int = 4,
        heartbeat_interval_s: float | None = None,
        safety_margin_s: float | None = None,
        shutdown_grace_s: float = 30.0,
        labels: Mapping[str, str] | None = None,
        max_result_bytes: int = 64 * 1024,
        output_tail_bytes: int = DEFAULT_OUTPUT_TAIL_BYTES,
        reconnect_initial_s: float = 0.1,
        reconnect_max_s: float = 5.0,
        hello_timeout_s: float = 10.0,
        on_report_refused: Callable[[ReportRefusal], object] | None = None,
    ) -> None:
        if isinstance(client_or_servers, AsyncClient | Client):
            self._config: ChannelConfig = client_or_servers._config
        else:
            self._config = ChannelConfig(servers=parse_servers(client_or_servers))
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if not tasks:
            raise ValueError("a worker needs at least one task")
        self._definitions: dict[tuple[str, str], TaskDefinition] = {}
        for d in tasks:
            if not isinstance(d, TaskDefinition):
                raise TypeError(f"tasks must be TaskDefinitions (use @task), not {d!r}")
            key = (d.queue, d.name)
            if key in self._definitions:
                raise ValueError(f"two tasks named {d.name!r} in queue {d.queue!r}")
            self._definitions[key] = d
        derived = sorted({d.queue for d in tasks})
        self.queues: tuple[str, ...] = tuple(queues) if queues else tuple(derived)
        unserved = sorted(set(derived) - set(self.queues))
        if unserved:
            raise ValueError(f"tasks in queues {unserved} that the worker does not serve")
        self.worker_id = worker_id or _default_worker_id()
        self.max_concurrency = max_concurrency
        self._hb_override_s = heartbeat_interval_s
        self._margin_override_s = safety_margin_s
        self._grace_s = shutdown_grace_s
        self._labels = dict(labels or {})
        self._max_result_bytes = max_result_bytes
        self._output_tail_bytes = output_tail_bytes
        self._backoff = Backoff(initial_s=reconnect_initial_s, maximum_s=reconnect_max_s)
        self._hello_timeout_s = hello_timeout_s
        self._on_report_refused = on_report_refused
        self._stats = WorkerStats()
        self._rng = random.Random()

        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_concurrency, thread_name_prefix="gnomon-task"
        )
        self._executions: dict[int, _Execution] = {}
        self._busy = 0
        self._outstanding_credits = 0
        self._call: grpc.aio.StreamStreamCall | None = None
        self._write_lock = asyncio.Lock()
        self._hb_sent: collections.deque[float] = collections.deque()
        self._background: set[asyncio.Task[Any]] = set()
        self._ttl_s = _DEFAULT_LEASE_TTL_S
        self._hb_interval_s = heartbeat_interval_s or _DEFAULT_LEASE_TTL_S / 3
        self._margin_s = self._margin_for(self._ttl_s)
        self._draining = False
        self._closing = False
        self._started = False
        self._run_task: asyncio.Task[None] | None = None
        self._shutdown_task: asyncio.Task[None] | None = None
        self._stop_now: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        self._session_over: asyncio.Event | None = None
        self._done: asyncio.Event | None = None

    # --- lifecycle -----------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Whether a stream to the leader is open right now."""
        return self._call is not None

    @property
    def stats(self) -> WorkerStats:
        """A snapshot of the worker's counters (tasks started, reports accepted, refused,
        resent and abandoned)."""
        return self._stats

    def _count(self, **increments: int) -> None:
        self._stats = dataclasses.replace(
            self._stats,
            **{name: getattr(self._stats, name) + n for name, n in increments.items()},
        )

    async def __aenter__(self) -> Worker:
        self._run_task = asyncio.create_task(self.run(), name=f"gnomon-worker-{self.worker_id}")
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        await self.shutdown()
        run_task = self._run_task
        if run_task is not None:
            error = await asyncio.gather(run_task, return_exceptions=True)
            if exc is None and isinstance(error[0], Exception):
                raise error[0]

    async def run(self) -> None:
        """Serve until ``shutdown()``; raises GnomonError for failures a reconnect cannot fix
        (bad worker id, authentication)."""
        if self._started:
            raise RuntimeError("Worker.run() was already called")
        self._started = True
        self._stop_now = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._session_over = asyncio.Event()
        self._done = asyncio.Event()
        pool = ChannelPool(self._config)
        router = Router(self._config.servers)
        watchdog = asyncio.create_task(self._lease_watchdog())
        failures = redirects = 0
        address = router.current()
        try:
            while not (self._closing or self._stop_now.is_set()):
                end = await self._session(pool, address)
                if self._closing or self._stop_now.is_set():
                    break
                if end.welcomed:
                    router.succeeded(address)
                    failures = redirects = 0
                if end.error is not None and end.error.code() in _FATAL:
                    raise error_for_status(
                        end.error.code(), end.error.details() or "", reason=reason_of(end.error)
                    )
                if end.hint and end.hint != address and redirects < MAX_IMMEDIATE_REDIRECTS:
                    log.info("worker %s: %s names %s as leader", self.worker_id, address, end.hint)
                    redirects += 1
                    router.follow(end.hint)
                    address = end.hint
                    continue
                router.failed(address)
                redirects = 0
                delay = self._backoff.delay(failures, self._rng)
                failures += 1
                log.info(
                    "worker %s: stream to %s ended (%s); reconnecting in %.2fs",
                    self.worker_id,
                    address,
                    end.detail or "closed",
                    delay,
                )
                address = router.current()
                try:
                    await asyncio.wait_for(self._stop_now.wait(), delay)
                except TimeoutError:
                    pass
        finally:
            watchdog.cancel()
            running = [
                ex.task for ex in self._executions.values() if ex.task and not ex.task.done()
            ]
            for ex in list(self._executions.values()):
                self._drop(ex, _SHUTDOWN)
            if running:
                await asyncio.wait(running, timeout=_CLOSE_WAIT_S)
            for t in list(self._background):
                t.cancel()
            self._executor.shutdown(wait=False, cancel_futures=True)
            await pool.close()
            self._done.set()

    async def shutdown(self) -> None:
        """Stop taking work, wait up to ``shutdown_grace_s`` for running tasks to finish and
        be acknowledged, cancel the rest, close the stream. Idempotent."""
        if self._shutdown_task is None:
            self._shutdown_task = asyncio.create_task(self._shutdown())
        await asyncio.shield(self._shutdown_task)

    async def _shutdown(self) -> None:
        if not self._started:
            self._closing = True
            self._executor.shutdown(wait=False, cancel_futures=True)
            return
        assert self._idle is not None and self._stop_now is not None and self._done is not None
        self._draining = True
        log.info("worker %s: draining (grace %.1fs)", self.worker_id, self._grace_s)
        try:
            await asyncio.wait_for(self._idle.wait(), self._grace_s)
        except TimeoutError:
            left = [ex for ex in self._executions.values() if ex.awaiting_fn]
            log.warning(
                "worker %s: cancelling %d task(s) still running after the grace period",
                self.worker_id,
                len(left),
            )
            tasks = [ex.task for ex in left if ex.task is not None]
            for ex in left:
                self._request_cancel(ex, _SHUTDOWN)
            if tasks:
                await asyncio.wait(tasks, timeout=_CLOSE_WAIT_S)
        self._closing = True
        await self._half_close()
        self._stop_now.set()
        await self._done.wait()

    async def _half_close(self) -> None:
        """Tell the server we are done writing and give it a moment to acknowledge the last
        reports and end the stream."""
        call = self._call
        if call is None or self._session_over is None:
            return
        async with self._write_lock:
            try:
                await call.done_writing()
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError, grpc.aio.UsageError):
                return
        try:
            await asyncio.wait_for(self._session_over.wait(), _CLOSE_WAIT_S)
        except TimeoutError:
            pass

    # --- one stream ----------------------------------------------------------------------------

    async def _session(self, pool: ChannelPool, address: str) -> _SessionEnd:
        assert self._stop_now is not None and self._session_over is not None
        end = _SessionEnd()
        self._session_over.clear()
        stub = worker_pb2_grpc.WorkerServiceStub(pool.get(address))
        call = stub.Connect(metadata=self._config.metadata or None)
        helpers: list[asyncio.Task[Any]] = []
        try:
            self._fence_lapsed(time.monotonic())
            held = list(self._executions.values())
            for ex in held:
                ex.report_sent = False
            hello = worker_pb2.Hello(
                worker_id=self.worker_id,
                queues=list(self.queues),
                labels=self._labels,
                held=[ex.ref for ex in held],
            )
            hello_at = time.monotonic()
            await call.write(worker_pb2.WorkerMessage(hello=hello))
            read = asyncio.create_task(call.read())
            stop = asyncio.create_task(self._stop_now.wait())
            await asyncio.wait(
                {read, stop}, timeout=self._hello_timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
            stop.cancel()
            if not read.done():
                read.cancel()
                end.detail = "stopping" if stop.done() else "no Welcome within hello_timeout_s"
                return end
            first = read.result()
            if first is grpc.aio.EOF:
                end.detail = "server closed the stream before Welcome"
                return end
            if first.WhichOneof("msg") != "welcome":
                end.detail = f"protocol error: expected Welcome, got {first.WhichOneof('msg')}"
                return end
            end.welcomed = True
            self._on_welcome(first.welcome, held, hello_at)
            log.info(
                "worker %s: connected to %s (node %s), queues %s, %d lease(s) resumed",
                self.worker_id,
                address,
                first.welcome.node_id,
                list(self.queues),
                len(first.welcome.resumed_tokens),
            )
            self._hb_sent.clear()
            self._outstanding_credits = 0
            self._call = call
            self._top_up_credits()
            for ex in list(self._executions.values()):
                if ex.report is not None and not ex.report_sent:
                    await self._send_report(ex)
            helpers = [
                asyncio.create_task(self._read_loop(call)),
                asyncio.create_task(self._heartbeat_loop()),
                asyncio.create_task(self._stop_now.wait()),
            ]
            done, _ = await asyncio.wait(helpers, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()
            end.detail = "stream closed by server" if helpers[0] in done else "stopping"
        except grpc.aio.AioRpcError as e:
            end.error = e
            end.hint = leader_hint(e)
            end.detail = f"{e.code().name}: {e.details()}"
        except _StreamStalled as e:
            end.detail = str(e)
        except (asyncio.InvalidStateError, grpc.aio.UsageError) as e:
            end.detail = f"stream failed: {e!r}"
        finally:
            self._call = None
            for t in helpers:
                t.cancel()
            call.cancel()
            self._session_over.set()
        return end

    async def _read_loop(self, call: grpc.aio.StreamStreamCall) -> None:
        while True:
            msg = await call.read()
            if msg is grpc.aio.EOF:
                return
            kind = msg.WhichOneof("msg")
            if kind == "assign":
                self._on_assign(msg.assign)
            elif kind == "heartbeat_ack":
                self._on_heartbeat_ack(msg.heartbeat_ack)
            elif kind == "report_ack":
                self._on_report_ack(msg.report_ack)
            elif kind == "cancel":
                self._on_cancel(msg.cancel)
            else:
                log.warning("worker %s: unexpected %s message ignored", self.worker_id, kind)

    async def _heartbeat_loop(self) -> None:
        # One Heartbeat carries every held lease. Acks come back in order but carry no sequence
        # number, and a leader that cannot prove its leadership sends none: each ack is
        # attributed to the oldest unacknowledged send, which is conservative but lags by one
        # interval per skipped ack. Before that lag could self-fence a healthy lease, reopen the
        # stream: the Welcome re-arms (or reports lost) every held lease and resets the queue.
        stall_after = max(2 * self._hb_interval_s, (self._ttl_s - self._margin_s) / 2)
        while True:
            await asyncio.sleep(self._hb_interval_s)
            now = time.monotonic()
            if self._hb_sent and now - self._hb_sent[0] > stall_after:
                raise _StreamStalled(f"no heartbeat acknowledged for {now - self._hb_sent[0]:.1f}s")
            refs = [ex.ref for ex in self._executions.values() if not ex.lease.fenced]
            self._hb_sent.append(now)
            await self._write(worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat(leases=refs)))

    async def _lease_watchdog(self) -> None:
        while True:
            await asyncio.sleep(max(0.01, min(self._hb_interval_s, self._margin_s) / 2))
            self._fence_lapsed(time.monotonic())

    # --- server messages -----------------------------------------------------------------------

    def _margin_for(self, ttl_s: float) -> float:
        margin = self._margin_override_s if self._margin_override_s is not None else ttl_s / 5
        return min(margin, ttl_s / 2)

    def _on_welcome(
        self, welcome: worker_pb2.Welcome, held: list[_Execution], hello_at: float
    ) -> None:
        self._ttl_s = (
            welcome.lease_ttl_ms / 1000 if welcome.lease_ttl_ms > 0 else _DEFAULT_LEASE_TTL_S
        )
        server_hb = welcome.heartbeat_interval_ms / 1000
        self._hb_interval_s = self._hb_override_s or server_hb or self._ttl_s / 3
        self._margin_s = self._margin_for(self._ttl_s)
        resumed = set(welcome.resumed_tokens)
        for ex in held:
            if ex.token in resumed:
                # The server re-arms a resumed lease when it reads Hello, after we sent it.
                ex.lease.renew(hello_at + ex.ttl_s - ex.margin_s)
            else:
                log.warning(
                    "lease %s was not resumed after reconnecting; stopping it", ex.describe()
                )
                self._drop(ex, "lost")

    def _on_assign(self, assign: worker_pb2.Assign) -> None:
        token = assign.lease.fencing_token
        self._outstanding_credits = max(0, self._outstanding_credits - 1)
        if token in self._executions:
            self._top_up_credits()
            return
        ttl_s = assign.lease_ttl_ms / 1000 if assign.lease_ttl_ms > 0 else self._ttl_s
        margin_s = self._margin_for(ttl_s)
        # The lease started at grant, before we received it: the safety margin covers that.
        lease = LeaseState(valid_until=time.monotonic() + ttl_s - margin_s)
        output = OutputTail(self._output_tail_bytes)
        ctx = cv.task_context_from_assign(
            assign, worker_id=self.worker_id, lease=lease, output=output
        )
        definition = self._definitions.get((ctx.queue, ctx.task_name)) or self._definitions.get(
            (ctx.queue, ANY_TASK)
        )
        ex = _Execution(definition, ctx, lease, ttl_s, margin_s, output)
        self._executions[token] = ex
        self._set_idle()
        if self._draining:
            self._report_soon(ex, self._fail(ex, "worker is shutting down", retryable=True))
            return
        if definition is None:
            known = sorted(f"{q}/{n}" for q, n in self._definitions)
            error = (
                f"worker {self.worker_id} has no task {ctx.task_name!r} in queue {ctx.queue!r} "
                f"(it has {', '.join(known)})"
            )
            log.error("%s", error)
            self._report_soon(ex, self._fail(ex, error, retryable=True))
            # It took a credit but no slot.
            self._top_up_credits()
            return
        if self._busy >= self.max_concurrency:
            log.warning("worker %s: assigned more tasks than credited", self.worker_id)
        self._busy += 1
        ex.slot_released = False
        ex.awaiting_fn = True
        ex.task = asyncio.create_task(self._execute(ex), name=f"gnomon-task-{ex.describe()}")
        if assign.deadline_ms > 0:
            delay = max(0.0, assign.deadline_ms / 1000 - time.time())
            ex.deadline_handle = asyncio.get_running_loop().call_later(
                delay, self._request_cancel, ex, _DEADLINE
            )

    def _on_heartbeat_ack(self, ack: worker_pb2.HeartbeatAck) -> None:
        if not self._hb_sent:
            return
        sent_at = self._hb_sent.popleft()
        for token in ack.valid_tokens:
            ex = self._executions.get(token)
            if ex is not None:
                ex.lease.renew(sent_at + ex.ttl_s - ex.margin_s)
        for token in ack.revoked_tokens:
            ex = self._executions.get(token)
            if ex is not None:
                log.warning("lease %s revoked by the cluster; stopping it", ex.describe())
                self._drop(ex, "revoked")

    def _on_cancel(self, cancel: worker_pb2.Cancel) -> None:
        ex = self._executions.get(cancel.lease.fencing_token)
        if ex is not None:
            log.info("task %s cancelled by the cluster: %s", ex.describe(), cancel.reason)
            self._drop(ex, "cancelled")

    def _on_report_ack(self, ack: worker_pb2.ReportAck) -> None:
        ex = self._executions.get(ack.lease.fencing_token)
        if ex is None or not ex.report_sent:
            return
        if ack.accepted:
            self._count(reports_accepted=1)
            self._forget(ex)
            return
        ex.report_sent = False
        ex.report_attempts += 1
        if not ack.retry:
            # The cluster decided (stale token, no longer leased, or the report turned into a
            # failure): sending it again would change nothing.
            self._refused(ex, ack.detail, final=True)
            return
        # Not recorded (not committed: leader change, overload): send it again while the
        # lease holds.
        if ex.report_attempts < _MAX_REPORT_ATTEMPTS and ex.lease.valid():
            delay = _REPORT_BACKOFF.delay(ex.report_attempts - 1, self._rng)
            log.info(
                "report for %s not recorded (%s); sending it again in %.2fs",
                ex.describe(),
                ack.detail,
                delay,
            )
            asyncio.get_running_loop().call_later(delay, self._resend_report, ex)
            return
        if ex.lease.valid():
            reason = f"not recorded after {ex.report_attempts} attempts"
        else:
            reason = "the lease is no longer valid"
        self._refused(ex, f"{ack.detail} ({reason})", final=False)

    def _refused(self, ex: _Execution, detail: str, *, final: bool) -> None:
        """The cluster did not record ``ex``'s report as sent: log it, count it, tell the
        application, forget the lease."""
        kind = ex.report.WhichOneof("msg") if ex.report is not None else "fail"
        refusal = ReportRefusal(
            run_id=ex.ctx.run_id,
            task_name=ex.ctx.task_name,
            fencing_token=ex.token,
            kind="complete" if kind == "complete" else "fail",
            detail=detail,
            final=final,
        )
        if final:
            self._count(reports_refused=1)
            # A result the cluster did not keep as a success deserves more than a warning.
            level = logging.ERROR if refusal.kind == "complete" else logging.WARNING
            log.log(level, "%s of %s refused by the cluster: %s", kind, ex.describe(), detail)
        else:
            self._count(reports_abandoned=1)
            log.warning(
                "%s of %s was not recorded and is not sent again: %s; the cluster will retry "
                "the task once the lease expires",
                kind,
                ex.describe(),
                detail,
            )
        self._forget(ex)
        if self._on_report_refused is not None:
            try:
                self._on_report_refused(refusal)
            except Exception:  # noqa: BLE001 - the application's hook must not stop the worker
                log.exception("on_report_refused raised for %s", ex.describe())

    # --- executing -----------------------------------------------------------------------------

    async def _execute(self, ex: _Execution) -> None:
        assert ex.definition is not None
        thread: concurrent.futures.Future[Any] | None = None
        try:
            report: worker_pb2.WorkerMessage | None
            self._count(tasks_started=1)
            ex.started_at = time.monotonic()
            try:
                if ex.definition.is_async:
                    value = await ex.definition.fn(ex.ctx)
                else:
                    thread = self._executor.submit(ex.definition.fn, ex.ctx)
                    value = await asyncio.wrap_future(thread)
                ex.finished_at = time.monotonic()
                ex.awaiting_fn = False
                result = encode_result(value)
                if len(result) > self._max_result_bytes:
                    report = self._fail(
                        ex,
                        f"result of {len(result)} bytes exceeds max_result_bytes "
                        f"({self._max_result_bytes})",
                        retryable=False,
                    )
                else:
                    report = self._complete(ex, result)
            except asyncio.CancelledError:
                ex.finished_at = time.monotonic()
                ex.awaiting_fn = False
                if ex.cancel_reason is None:
                    raise
                report = self._cancel_report(ex)
            except Exception as e:
                ex.finished_at = ex.finished_at or time.monotonic()
                ex.awaiting_fn = False
                if getattr(e, "_gnomon_traceback_in_output", True):
                    ex.output.write("".join(traceback.format_exception(e)))
                report = self._fail(
                    ex,
                    f"{type(e).__name__}: {e}",
                    retryable=not isinstance(e, NonRetryableError),
                )
            await self._finish(ex, report)
        finally:
            if ex.deadline_handle is not None:
                ex.deadline_handle.cancel()
            if thread is not None and not thread.done():
                # A thread cannot be interrupted: its slot stays taken until it returns.
                thread.add_done_callback(self._release_from_thread(ex))
            else:
                self._release_slot(ex)

    def _release_from_thread(self, ex: _Execution) -> Any:
        loop = asyncio.get_running_loop()

        def release(_: object) -> None:
            try:
                loop.call_soon_threadsafe(self._release_slot, ex)
            except RuntimeError:
                pass  # the worker's loop is gone: nothing left to credit

        return release

    def _cancel_report(self, ex: _Execution) -> worker_pb2.WorkerMessage | None:
        if ex.cancel_reason == _DEADLINE:
            return self._fail(ex, "attempt deadline exceeded", retryable=True)
        if ex.cancel_reason == _SHUTDOWN:
            return self._fail(ex, "worker shut down before the task finished", retryable=True)
        return None

    def _complete(self, ex: _Execution, result: bytes) -> worker_pb2.WorkerMessage:
        complete = worker_pb2.Complete(
            lease=ex.ref,
            result=result,
            output_tail=ex.output.tail(),
            duration_ms=ex.duration_ms(),
        )
        if ex.ctx.exit_code is not None:
            complete.exit_code = ex.ctx.exit_code
        return worker_pb2.WorkerMessage(complete=complete)

    def _fail(self, ex: _Execution, error: str, *, retryable: bool) -> worker_pb2.WorkerMessage:
        fail = worker_pb2.Fail(
            lease=ex.ref,
            error=error[:_MAX_ERROR_CHARS],
            retryable=retryable,
            output_tail=ex.output.tail(),
            duration_ms=ex.duration_ms(),
        )
        if ex.ctx.exit_code is not None:
            fail.exit_code = ex.ctx.exit_code
        return worker_pb2.WorkerMessage(fail=fail)

    async def _finish(self, ex: _Execution, report: worker_pb2.WorkerMessage | None) -> None:
        if report is None or self._executions.get(ex.token) is not ex:
            self._forget(ex)
            return
        if not ex.lease.valid():
            log.warning(
                "not reporting %s of %s: the lease is no longer valid (self-fenced, revoked or "
                "lost); the cluster will retry the task",
                report.WhichOneof("msg"),
                ex.describe(),
            )
            self._forget(ex)
            return
        ex.report = report
        await self._send_report(ex)

    async def _send_report(self, ex: _Execution) -> None:
        # Unsent reports stay with the lease: after a reconnect they are sent if the lease
        # was resumed, else dropped.
        if ex.report is None or self._call is None or self._executions.get(ex.token) is not ex:
            return
        # Marked before the write returns: the ReportAck can overtake the write's completion.
        ex.report_sent = True
        if not await self._write(ex.report):
            ex.report_sent = False

    def _resend_report(self, ex: _Execution) -> None:
        if self._executions.get(ex.token) is not ex:
            return
        if ex.lease.valid():
            self._count(reports_resent=1)
            self._spawn(self._send_report(ex))
        else:
            self._refused(ex, "not recorded, and the lease is no longer valid", final=False)

    def _report_soon(self, ex: _Execution, report: worker_pb2.WorkerMessage) -> None:
        ex.report = report
        self._spawn(self._send_report(ex))

    def _request_cancel(self, ex: _Execution, reason: str) -> None:
        ex.lease.cancelled.set()
        if ex.awaiting_fn and ex.cancel_reason is None and ex.task is not None:
            ex.cancel_reason = reason
            ex.task.cancel()

    def _drop(self, ex: _Execution, reason: str) -> None:
        """The lease is gone (revoked, cancelled, lost, lapsed): stop the task, never report."""
        ex.lease.fence()
        self._request_cancel(ex, reason)
        self._forget(ex)

    def _forget(self, ex: _Execution) -> None:
        if self._executions.get(ex.token) is ex:
            del self._executions[ex.token]
        self._set_idle()

    def _fence_lapsed(self, now: float) -> None:
        for ex in list(self._executions.values()):
            if ex.report_sent or ex.lease.valid(now):
                continue
            if not ex.lease.fenced:
                log.warning(
                    "lease %s self-fenced: no heartbeat acknowledged within the lease TTL minus "
                    "the safety margin; stopping the task and discarding its result",
                    ex.describe(),
                )
            # A report the cluster answered "not recorded" and that waited to be sent again.
            unrecorded = ex.report is not None and ex.report_attempts > 0
            self._drop(ex, "lapsed")
            if unrecorded:
                self._refused(ex, "not recorded before the lease lapsed", final=False)

    def _release_slot(self, ex: _Execution) -> None:
        if ex.slot_released:
            return
        ex.slot_released = True
        self._busy -= 1
        self._set_idle()
        self._top_up_credits()

    def _set_idle(self) -> None:
        if self._idle is None:
            return
        if self._executions or self._busy:
            self._idle.clear()
        else:
            self._idle.set()

    # --- writing -------------------------------------------------------------------------------

    def _top_up_credits(self) -> None:
        """Keep (free slots) credits outstanding on the current stream."""
        if self._call is None or self._draining:
            return
        want = self.max_concurrency - self._busy - self._outstanding_credits
        if want > 0:
            self._outstanding_credits += want
            self._spawn(
                self._write(worker_pb2.WorkerMessage(credits=worker_pb2.Credits(credits=want)))
            )

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _write(self, msg: worker_pb2.WorkerMessage) -> bool:
        call = self._call
        if call is None:
            return False
        async with self._write_lock:
            if self._call is not call:
                return False
            try:
                await call.write(msg)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError, grpc.aio.UsageError) as e:
                log.debug("worker %s: write failed: %r", self.worker_id, e)
                return False
        return True
