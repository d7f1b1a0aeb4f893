"""``Worker``: runs task functions for the leases a gnomon leader grants on one stream.

Protocol (``gnomon/v1/worker.proto``, ``client/DESIGN.md``): Hello -> Welcome, then Credits for
free slots, Assign per task, one Heartbeat with every held lease per interval, Complete/Fail
per finished task. The worker self-fences: a lease with no acknowledged heartbeat for
``lease_ttl - safety_margin`` (measured from when the acknowledged heartbeat was *sent*) is
treated as lost: its task is cancelled and its result is not reported.

This module is the public surface; the pieces behind it have one owner each: the stream and
its reconnects (``stream``), the held leases and self-fencing (``leases``),
task execution (``runner``) and reports with their retries (``reports``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

from gnomon.v1 import worker_pb2

from .._blocking_client import Client
from .._client import AsyncClient
from .._transport import Backoff, ChannelConfig, parse_servers
from .context import DEFAULT_OUTPUT_TAIL_BYTES
from .leases import SHUTDOWN, HeldLease, LeaseTable, LeaseTiming
from .reports import ReportRefusal, Reports, StatsCounter, WorkerStats
from .runner import TaskRunner
from .stream import CLOSE_WAIT_S, WorkerIdentity, WorkerStream
from .task import TaskDefinition

__all__ = ["ReportRefusal", "Worker", "WorkerStats"]

log = logging.getLogger("gnomon.client.worker")


def _default_worker_id() -> str:
    raw = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    return re.sub(r"[^A-Za-z0-9_.:-]", "-", raw)[:128]


def _definitions_by_key(tasks: Sequence[TaskDefinition]) -> dict[tuple[str, str], TaskDefinition]:
    if not tasks:
        raise ValueError("a worker needs at least one task")
    definitions: dict[tuple[str, str], TaskDefinition] = {}
    for d in tasks:
        if not isinstance(d, TaskDefinition):
            raise TypeError(f"tasks must be TaskDefinitions (use @task), not {d!r}")
        key = (d.queue, d.name)
        if key in definitions:
            raise ValueError(f"two tasks named {d.name!r} in queue {d.queue!r}")
        definitions[key] = d
    return definitions


def _served_queues(
    tasks: Sequence[TaskDefinition], queues: Sequence[str] | None
) -> tuple[str, ...]:
    derived = sorted({d.queue for d in tasks})
    served = tuple(queues) if queues else tuple(derived)
    unserved = sorted(set(derived) - set(served))
    if unserved:
        raise ValueError(f"tasks in queues {unserved} that the worker does not serve")
    return served


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

    ``connect_timeout_s``: if no node has welcomed the worker's stream that long after
    ``run()`` began, ``run()`` logs at ERROR and raises ``Unavailable`` (None: retry forever).
    A refused authentication (UNAUTHENTICATED, PERMISSION_DENIED) raises at once.
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
        connect_timeout_s: float | None = None,
        on_report_refused: Callable[[ReportRefusal], object] | None = None,
    ) -> None:
        if isinstance(client_or_servers, AsyncClient | Client):
            config: ChannelConfig = client_or_servers._config
        else:
            config = ChannelConfig(servers=parse_servers(client_or_servers))
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        definitions = _definitions_by_key(tasks)
        self.queues: tuple[str, ...] = _served_queues(tasks, queues)
        """The queues this worker serves."""
        self.worker_id = worker_id or _default_worker_id()
        """This worker's id in Hello, leases and attempt records."""
        self.max_concurrency = max_concurrency
        """How many tasks run at once at most."""
        self._grace_s = shutdown_grace_s
        rng = random.Random()
        self._stats = StatsCounter()
        self._timing = LeaseTiming(
            heartbeat_interval_s=heartbeat_interval_s, safety_margin_s=safety_margin_s
        )
        self._leases = LeaseTable(self._timing, max_concurrency)
        self._stream = WorkerStream(
            config=config,
            identity=WorkerIdentity(self.worker_id, self.queues, dict(labels or {})),
            hello_timeout_s=hello_timeout_s,
            backoff=Backoff(initial_s=reconnect_initial_s, maximum_s=reconnect_max_s),
            rng=rng,
            timing=self._timing,
            leases=self._leases,
            prepare_hello=self._prepare_hello,
            connect_timeout_s=connect_timeout_s,
            on_connected=self._send_pending_reports,
            # Bound here, so a subclass's override of a hook is the one called.
            handlers={
                "assign": self._on_assign,
                "heartbeat_ack": self._on_heartbeat_ack,
                "report_ack": self._on_report_ack,
                "cancel": self._on_cancel,
            },
        )
        self._reports = Reports(
            stream=self._stream,
            leases=self._leases,
            stats=self._stats,
            on_refused=on_report_refused,
            rng=rng,
        )
        self._tasks = TaskRunner(
            definitions,
            worker_id=self.worker_id,
            max_result_bytes=max_result_bytes,
            output_tail_bytes=output_tail_bytes,
            leases=self._leases,
            stream=self._stream,
            reports=self._reports,
            stats=self._stats,
        )
        self._started = False
        self._run_task: asyncio.Task[None] | None = None
        self._shutdown_task: asyncio.Task[None] | None = None
        self._stop_now = asyncio.Event()
        self._done = asyncio.Event()

    @property
    def connected(self) -> bool:
        """Whether a stream to the leader is open right now."""
        return self._stream.connected

    @property
    def stats(self) -> WorkerStats:
        """A snapshot of the worker's counters (tasks started, reports accepted, refused,
        resent and abandoned)."""
        return self._stats.snapshot

    # --- lifecycle -------------------------------------------------------------------------

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
        watchdog = asyncio.create_task(self._watch_leases())
        try:
            await self._stream.serve(self._stop_now)
        finally:
            watchdog.cancel()
            running = self._tasks.running()
            for ex in self._leases.all():
                self._leases.drop(ex, SHUTDOWN)
            if running:
                await asyncio.wait(running, timeout=CLOSE_WAIT_S)
            self._stream.cancel_background()
            self._tasks.shutdown()
            self._done.set()

    async def shutdown(self) -> None:
        """Stop taking work, wait up to ``shutdown_grace_s`` for running tasks to finish and
        be acknowledged, cancel the rest, close the stream. Idempotent."""
        if self._shutdown_task is None:
            self._shutdown_task = asyncio.create_task(self._shutdown())
        await asyncio.shield(self._shutdown_task)

    async def _shutdown(self) -> None:
        if not self._started:
            self._stream.closing = True
            self._tasks.shutdown()
            return
        self._leases.draining = True
        log.info("worker %s: draining (grace %.1fs)", self.worker_id, self._grace_s)
        try:
            await asyncio.wait_for(self._leases.wait_idle(), self._grace_s)
        except TimeoutError:
            await self._tasks.cancel_running(CLOSE_WAIT_S)
        self._stream.closing = True
        await self._stream.half_close()
        self._stop_now.set()
        await self._done.wait()

    # --- wiring between the pieces ---------------------------------------------------------

    async def _watch_leases(self) -> None:
        while True:
            await asyncio.sleep(self._timing.watchdog_period_s)
            self._fence_lapsed()

    def _fence_lapsed(self) -> None:
        self._reports.lapsed(self._leases.fence_lapsed(time.monotonic()))

    def _prepare_hello(self) -> list[HeldLease]:
        self._fence_lapsed()
        held = self._leases.all()
        self._reports.mark_unsent(held)
        return held

    async def _send_pending_reports(self) -> None:
        await self._reports.send_pending()

    # --- server messages -------------------------------------------------------------------
    # One hook per message kind after the Welcome, on the worker's event loop. A subclass may
    # override one to observe the stream (jepsen/workerproc.py, tests); it must call super().

    def _on_assign(self, assign: worker_pb2.Assign) -> None:
        self._tasks.assign(assign)

    def _on_heartbeat_ack(self, ack: worker_pb2.HeartbeatAck) -> None:
        self._stream.heartbeat_acked(ack)

    def _on_report_ack(self, ack: worker_pb2.ReportAck) -> None:
        self._reports.on_ack(ack)

    def _on_cancel(self, cancel: worker_pb2.Cancel) -> None:
        self._leases.cancel(cancel)
