"""The leases a worker holds, as the worker sees them, and the task slots they take.

A lease is valid until ``lease_ttl - safety_margin`` after the *send* of the last heartbeat
the cluster acknowledged for it; then the worker self-fences: it stops the task and never
reports for it (``client/DESIGN.md``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gnomon.v1 import worker_pb2

from .. import _convert as cv
from .context import LeaseState, OutputTail, TaskContext
from .task import TaskDefinition

log = logging.getLogger("gnomon.client.worker")

DEFAULT_LEASE_TTL_S = 30.0

# Why the worker cancelled a task. Only these two still report (a retryable Fail); for the
# others the lease is gone and any report would be rejected.
DEADLINE = "deadline"
SHUTDOWN = "shutdown"


@dataclass(eq=False)
class HeldLease:
    """A lease this worker holds (from its Assign until it is forgotten) and the task that
    runs under it, if one does."""

    definition: TaskDefinition | None
    ctx: TaskContext
    lease: LeaseState
    ttl_s: float
    margin_s: float
    output: OutputTail
    task: asyncio.Task[None] | None = None
    thread: concurrent.futures.Future[Any] | None = None
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

    def ended(self) -> None:
        """The task function returned or raised (the first call counts)."""
        if self.finished_at is None:
            self.finished_at = time.monotonic()
        self.awaiting_fn = False

    def request_cancel(self, reason: str) -> None:
        """Ask the task to stop; an async task still awaiting its function is cancelled."""
        self.lease.cancelled.set()
        if self.awaiting_fn and self.cancel_reason is None and self.task is not None:
            self.cancel_reason = reason
            self.task.cancel()


class LeaseTiming:
    """Lease TTL, heartbeat interval and safety margin: the server's (Welcome), unless the
    worker was given its own interval or margin."""

    def __init__(self, *, heartbeat_interval_s: float | None, safety_margin_s: float | None):
        self._hb_override_s = heartbeat_interval_s
        self._margin_override_s = safety_margin_s
        self.ttl_s = DEFAULT_LEASE_TTL_S
        self.heartbeat_interval_s = heartbeat_interval_s or DEFAULT_LEASE_TTL_S / 3
        self.margin_s = self.margin_for(self.ttl_s)

    def margin_for(self, ttl_s: float) -> float:
        margin = self._margin_override_s if self._margin_override_s is not None else ttl_s / 5
        return min(margin, ttl_s / 2)

    def ttl_of(self, lease_ttl_ms: int) -> float:
        """An Assign's lease TTL in seconds (the stream's when it names none)."""
        return lease_ttl_ms / 1000 if lease_ttl_ms > 0 else self.ttl_s

    def adopt(self, welcome: worker_pb2.Welcome) -> None:
        self.ttl_s = (
            welcome.lease_ttl_ms / 1000 if welcome.lease_ttl_ms > 0 else DEFAULT_LEASE_TTL_S
        )
        server_hb = welcome.heartbeat_interval_ms / 1000
        self.heartbeat_interval_s = self._hb_override_s or server_hb or self.ttl_s / 3
        self.margin_s = self.margin_for(self.ttl_s)

    @property
    def stall_after_s(self) -> float:
        """Unacknowledged heartbeats for this long reopen the stream (see the heartbeat loop)."""
        return max(2 * self.heartbeat_interval_s, (self.ttl_s - self.margin_s) / 2)

    @property
    def watchdog_period_s(self) -> float:
        return max(0.01, min(self.heartbeat_interval_s, self.margin_s) / 2)


class LeaseTable:
    """Owner of the held leases: one ``HeldLease`` per fencing token, the task slots they
    take out of ``max_concurrency``, renewal by heartbeat acks, and self-fencing."""

    def __init__(self, timing: LeaseTiming, max_concurrency: int) -> None:
        self.timing = timing
        self.max_concurrency = max_concurrency
        self.held: dict[int, HeldLease] = {}
        self.busy = 0
        self.draining = False
        """Shutting down: no slot is offered, an Assign is handed back."""
        self._idle = asyncio.Event()
        self._idle.set()

    def get(self, token: int) -> HeldLease | None:
        return self.held.get(token)

    def holds(self, ex: HeldLease) -> bool:
        return self.held.get(ex.token) is ex

    def all(self) -> list[HeldLease]:
        return list(self.held.values())

    def add(self, ex: HeldLease) -> None:
        self.held[ex.token] = ex
        self._set_idle()

    def forget(self, ex: HeldLease) -> None:
        if self.holds(ex):
            del self.held[ex.token]
        self._set_idle()

    def drop(self, ex: HeldLease, reason: str) -> None:
        """The lease is gone (revoked, cancelled, lost, lapsed): stop the task, never report."""
        ex.lease.fence()
        ex.request_cancel(reason)
        self.forget(ex)

    # --- slots -----------------------------------------------------------------------------

    def free_slots(self) -> int:
        return 0 if self.draining else self.max_concurrency - self.busy

    def take_slot(self, ex: HeldLease) -> None:
        self.busy += 1
        ex.slot_released = False

    def release_slot(self, ex: HeldLease) -> bool:
        """Free ``ex``'s slot; False if it was free already."""
        if ex.slot_released:
            return False
        ex.slot_released = True
        self.busy -= 1
        self._set_idle()
        return True

    async def wait_idle(self) -> None:
        """Until no lease is held and no slot is taken."""
        await self._idle.wait()

    def _set_idle(self) -> None:
        if self.held or self.busy:
            self._idle.clear()
        else:
            self._idle.set()

    # --- what the cluster says -------------------------------------------------------------

    def renew(self, tokens: Iterable[int], sent_at: float) -> None:
        """A heartbeat sent at ``sent_at`` (monotonic) was acknowledged for ``tokens``."""
        for token in tokens:
            ex = self.held.get(token)
            if ex is not None:
                ex.lease.renew(sent_at + ex.ttl_s - ex.margin_s)

    def revoke(self, tokens: Iterable[int]) -> None:
        for token in tokens:
            ex = self.held.get(token)
            if ex is not None:
                log.warning("lease %s revoked by the cluster; stopping it", ex.describe())
                self.drop(ex, "revoked")

    def cancel(self, cancel: worker_pb2.Cancel) -> None:
        ex = self.held.get(cancel.lease.fencing_token)
        if ex is not None:
            log.info("task %s cancelled by the cluster: %s", ex.describe(), cancel.reason)
            self.drop(ex, "cancelled")

    def resume(self, held: Sequence[HeldLease], resumed: Iterable[int], hello_at: float) -> None:
        """A Welcome answered the Hello (sent at ``hello_at``) that listed ``held``."""
        resumed_tokens = set(resumed)
        for ex in held:
            if ex.token in resumed_tokens:
                # The server re-arms a resumed lease when it reads Hello, after we sent it.
                ex.lease.renew(hello_at + ex.ttl_s - ex.margin_s)
            else:
                log.warning(
                    "lease %s was not resumed after reconnecting; stopping it", ex.describe()
                )
                self.drop(ex, "lost")

    def fence_lapsed(self, now: float) -> list[HeldLease]:
        """Self-fence every lease without an acknowledged heartbeat for ``ttl - margin`` (one
        whose report was sent waits for its ack); returns the leases dropped."""
        dropped = []
        for ex in self.all():
            if ex.report_sent or ex.lease.valid(now):
                continue
            if not ex.lease.fenced:
                log.warning(
                    "lease %s self-fenced: no heartbeat acknowledged within the lease TTL minus "
                    "the safety margin; stopping the task and discarding its result",
                    ex.describe(),
                )
            self.drop(ex, "lapsed")
            dropped.append(ex)
        return dropped

    def heartbeat_refs(self) -> list[worker_pb2.LeaseRef]:
        return [ex.ref for ex in self.held.values() if not ex.lease.fenced]
