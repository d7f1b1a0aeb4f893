"""Runs task functions under the leases a worker was assigned, and turns each outcome into the
Complete or Fail it reports."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import time
import traceback
from collections.abc import Mapping
from typing import Any

from gnomon.v1 import worker_pb2

from .. import _convert as cv
from .. import tracing
from .._errors import NonRetryableError
from .context import LeaseState, OutputTail, TaskContext
from .leases import DEADLINE, SHUTDOWN, HeldLease, LeaseTable
from .reports import Reports, StatsCounter
from .stream import WorkerStream
from .task import ANY_TASK, TaskDefinition, encode_result

log = logging.getLogger("gnomon.client.worker")

_MAX_ERROR_CHARS = 4096


def complete_message(ex: HeldLease, result: bytes) -> worker_pb2.WorkerMessage:
    complete = worker_pb2.Complete(
        lease=ex.ref, result=result, output_tail=ex.output.tail(), duration_ms=ex.duration_ms()
    )
    if ex.ctx.exit_code is not None:
        complete.exit_code = ex.ctx.exit_code
    return worker_pb2.WorkerMessage(complete=complete)


def fail_message(ex: HeldLease, error: str, *, retryable: bool) -> worker_pb2.WorkerMessage:
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


def _span_attributes(ctx: TaskContext) -> dict[str, Any]:
    return {"gnomon.run_id": ctx.run_id, "gnomon.job_id": ctx.job_id, "gnomon.tenant": ctx.tenant,
            "gnomon.task": ctx.task_name, "gnomon.attempt": ctx.attempt,
            "gnomon.fencing_token": ctx.fencing_token, "gnomon.worker_id": ctx.worker_id}


class TaskRunner:
    """Owner of task execution: which definition serves an Assign, the thread pool that runs
    sync functions, attempt deadlines, and what each outcome reports."""

    def __init__(
        self,
        definitions: Mapping[tuple[str, str], TaskDefinition],
        *,
        worker_id: str,
        max_result_bytes: int,
        output_tail_bytes: int,
        leases: LeaseTable,
        stream: WorkerStream,
        reports: Reports,
        stats: StatsCounter,
    ) -> None:
        self._definitions = definitions
        self._worker_id = worker_id
        self._max_result_bytes = max_result_bytes
        self._output_tail_bytes = output_tail_bytes
        self._leases = leases
        self._stream = stream
        self._reports = reports
        self._stats = stats
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=leases.max_concurrency, thread_name_prefix="gnomon-task"
        )

    def assign(self, assign: worker_pb2.Assign) -> None:
        """A lease was granted: run its task, or hand it back with a retryable Fail."""
        if self._leases.get(assign.lease.fencing_token) is not None:
            self._stream.top_up_credits()
            return
        ex = self._execution(assign)
        self._leases.add(ex)
        if self._leases.draining:
            self._reports.send_soon(ex, fail_message(ex, "worker is shutting down", retryable=True))
            return
        if ex.definition is None:
            known = sorted(f"{q}/{n}" for q, n in self._definitions)
            error = (
                f"worker {self._worker_id} has no task {ex.ctx.task_name!r} in queue "
                f"{ex.ctx.queue!r} (it has {', '.join(known)})"
            )
            log.error("%s", error)
            self._reports.send_soon(ex, fail_message(ex, error, retryable=True))
            # It took a credit but no slot.
            self._stream.top_up_credits()
            return
        self._start(ex, assign.deadline_ms)

    def running(self) -> list[asyncio.Task[None]]:
        return [ex.task for ex in self._leases.all() if ex.task and not ex.task.done()]

    async def cancel_running(self, wait_s: float) -> None:
        """Cancel the task functions still running and wait up to ``wait_s`` for them (their
        retryable Fails are reported)."""
        left = [ex for ex in self._leases.all() if ex.awaiting_fn]
        log.warning(
            "worker %s: cancelling %d task(s) still running after the grace period",
            self._worker_id,
            len(left),
        )
        tasks = [ex.task for ex in left if ex.task is not None]
        for ex in left:
            ex.request_cancel(SHUTDOWN)
        if tasks:
            await asyncio.wait(tasks, timeout=wait_s)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _execution(self, assign: worker_pb2.Assign) -> HeldLease:
        timing = self._leases.timing
        ttl_s = timing.ttl_of(assign.lease_ttl_ms)
        margin_s = timing.margin_for(ttl_s)
        # The lease started at grant, before we received it: the safety margin covers that.
        lease = LeaseState(valid_until=time.monotonic() + ttl_s - margin_s)
        output = OutputTail(self._output_tail_bytes)
        ctx = cv.task_context_from_assign(
            assign, worker_id=self._worker_id, lease=lease, output=output
        )
        definition = self._definitions.get((ctx.queue, ctx.task_name)) or self._definitions.get(
            (ctx.queue, ANY_TASK)
        )
        return HeldLease(definition, ctx, lease, ttl_s, margin_s, output)

    def _start(self, ex: HeldLease, deadline_ms: int) -> None:
        if self._leases.busy >= self._leases.max_concurrency:
            log.warning("worker %s: assigned more tasks than credited", self._worker_id)
        self._leases.take_slot(ex)
        ex.awaiting_fn = True
        ex.task = asyncio.create_task(self._execute(ex), name=f"gnomon-task-{ex.describe()}")
        if deadline_ms > 0:
            delay = max(0.0, deadline_ms / 1000 - time.time())
            ex.deadline_handle = asyncio.get_running_loop().call_later(
                delay, ex.request_cancel, DEADLINE
            )

    async def _execute(self, ex: HeldLease) -> None:
        try:
            await self._reports.finish(ex, await self._outcome(ex))
        finally:
            if ex.deadline_handle is not None:
                ex.deadline_handle.cancel()
            if ex.thread is not None and not ex.thread.done():
                # A thread cannot be interrupted: its slot stays taken until it returns.
                ex.thread.add_done_callback(self._release_from_thread(ex))
            else:
                self._release_slot(ex)

    async def _outcome(self, ex: HeldLease) -> worker_pb2.WorkerMessage | None:
        """Call the task function; what to report (None: nothing, the lease is gone)."""
        self._stats.count(tasks_started=1)
        ex.started_at = time.monotonic()
        try:
            value = await self._call(ex)
            ex.ended()
            return self._result_message(ex, encode_result(value))
        except asyncio.CancelledError:
            ex.ended()
            if ex.cancel_reason is None:
                raise
            return self._cancelled_message(ex)
        except Exception as e:
            ex.ended()
            if getattr(e, "_gnomon_traceback_in_output", True):
                ex.output.write("".join(traceback.format_exception(e)))
            retryable = not isinstance(e, NonRetryableError)
            return fail_message(ex, f"{type(e).__name__}: {e}", retryable=retryable)

    async def _call(self, ex: HeldLease) -> Any:
        assert ex.definition is not None
        ctx = ex.ctx
        with tracing.execution_span(ctx.traceparent, f"gnomon.task {ctx.task_name}",
                                    _span_attributes(ctx)) as traceparent:
            ctx._trace.value = traceparent
            if ex.definition.is_async:
                return await ex.definition.fn(ctx)
            if tracing.active():  # the task's thread continues the execution span
                ex.thread = self._executor.submit(contextvars.copy_context().run,
                                                  ex.definition.fn, ctx)
            else:
                ex.thread = self._executor.submit(ex.definition.fn, ctx)
            return await asyncio.wrap_future(ex.thread)

    def _result_message(self, ex: HeldLease, result: bytes) -> worker_pb2.WorkerMessage:
        if len(result) > self._max_result_bytes:
            error = (
                f"result of {len(result)} bytes exceeds max_result_bytes ({self._max_result_bytes})"
            )
            return fail_message(ex, error, retryable=False)
        return complete_message(ex, result)

    @staticmethod
    def _cancelled_message(ex: HeldLease) -> worker_pb2.WorkerMessage | None:
        if ex.cancel_reason == DEADLINE:
            return fail_message(ex, "attempt deadline exceeded", retryable=True)
        if ex.cancel_reason == SHUTDOWN:
            return fail_message(ex, "worker shut down before the task finished", retryable=True)
        return None

    def _release_from_thread(self, ex: HeldLease) -> Any:
        loop = asyncio.get_running_loop()

        def release(_: object) -> None:
            try:
                loop.call_soon_threadsafe(self._release_slot, ex)
            except RuntimeError:
                pass  # the worker's loop is gone: nothing left to credit

        return release

    def _release_slot(self, ex: HeldLease) -> None:
        if self._leases.release_slot(ex):
            self._stream.top_up_credits()
