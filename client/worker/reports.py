"""A worker's reports (Complete/Fail) and what the cluster answers about each: accepted, sent
again while the lease holds (not recorded), or refused (``ReportRefusal``)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from gnomon.v1 import worker_pb2

from .._transport import Backoff
from .leases import HeldLease, LeaseTable
from .stream import WorkerStream

__all__ = ["ReportRefusal", "WorkerStats"]

log = logging.getLogger("gnomon.client.worker")

# A report the leader could not commit ("report again") is sent again this many times at most.
_MAX_REPORT_ATTEMPTS = 5
_REPORT_BACKOFF = Backoff(initial_s=0.1, maximum_s=2.0)
# ReportAck.reason (worker.proto) of a report that was not recorded and may be sent again.
NOT_RECORDED = "NOT_RECORDED"


@dataclass(frozen=True, slots=True)
class ReportRefusal:
    """A Complete or Fail of this worker that the cluster did not record as sent (passed to
    the worker's ``on_report_refused`` and counted in ``Worker.stats``).

    ``final=True``: the cluster decided (the fencing token is stale, the task is no longer
    leased, or it turned a Complete into a failure, e.g. a result over its
    ``max_result_bytes``); sending the report again would change nothing. ``final=False``: the
    report was never recorded (leader change, overload) and the worker stopped sending it
    again (the lease lapsed, or it was refused too often); the cluster will expire the lease
    and retry the task. ``detail`` is the cluster's reason for people, ``reason`` the stable
    code to branch on: ``"STALE_LEASE"``, ``"RECORDED_AS_FAILURE"``, ``"NOT_RECORDED"`` (every
    ``final=False`` refusal), or ``""`` when the node did not say."""

    run_id: str
    task_name: str
    fencing_token: int
    kind: Literal["complete", "fail"]
    detail: str
    final: bool
    reason: str = ""

    @property
    def idempotency_key(self) -> str:
        """``"<run_id>:<task_name>"``, the key the task's effects are deduplicated by."""
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


class StatsCounter:
    """``WorkerStats``, replaced by a new snapshot on every count (readers never see a torn
    one)."""

    def __init__(self) -> None:
        self.snapshot = WorkerStats()

    def count(self, **increments: int) -> None:
        current = self.snapshot
        self.snapshot = dataclasses.replace(
            current, **{name: getattr(current, name) + n for name, n in increments.items()}
        )


def may_resend(ack: worker_pb2.ReportAck) -> bool:
    """Whether a refused report was not recorded at all: by ``reason`` where the node sets
    it, else by ``retry``."""
    return ack.reason == NOT_RECORDED if ack.reason else ack.retry


class Reports:
    """Owner of the reports: each is sent once its task ended and the lease is still valid,
    kept with the lease until acknowledged (a reconnect sends it again if the lease was
    resumed), sent again with backoff while the cluster says "not recorded", and otherwise
    surfaced as a ``ReportRefusal``."""

    def __init__(
        self,
        *,
        stream: WorkerStream,
        leases: LeaseTable,
        stats: StatsCounter,
        on_refused: Callable[[ReportRefusal], object] | None,
        rng: random.Random,
    ) -> None:
        self._stream = stream
        self._leases = leases
        self._stats = stats
        self._on_refused = on_refused
        self._rng = rng

    async def finish(self, ex: HeldLease, report: worker_pb2.WorkerMessage | None) -> None:
        """The task ended with ``report`` (None: nothing to report): send it if the lease is
        still ours and valid."""
        if report is None or not self._leases.holds(ex):
            self._leases.forget(ex)
            return
        if not ex.lease.valid():
            log.warning(
                "not reporting %s of %s: the lease is no longer valid (self-fenced, revoked or "
                "lost); the cluster will retry the task",
                report.WhichOneof("msg"),
                ex.describe(),
            )
            self._leases.forget(ex)
            return
        ex.report = report
        await self.send(ex)

    def send_soon(self, ex: HeldLease, report: worker_pb2.WorkerMessage) -> None:
        ex.report = report
        self._stream.spawn(self.send(ex))

    async def send(self, ex: HeldLease) -> None:
        # Unsent reports stay with the lease: after a reconnect they are sent if the lease
        # was resumed, else dropped.
        if ex.report is None or not self._stream.connected or not self._leases.holds(ex):
            return
        # Marked before the write returns: the ReportAck can overtake the write's completion.
        ex.report_sent = True
        if not await self._stream.write_report(ex.report):
            ex.report_sent = False

    def mark_unsent(self, held: Iterable[HeldLease]) -> None:
        """A new stream: no report is in flight on it yet."""
        for ex in held:
            ex.report_sent = False

    async def send_pending(self) -> None:
        for ex in self._leases.all():
            if ex.report is not None and not ex.report_sent:
                await self.send(ex)

    def on_ack(self, ack: worker_pb2.ReportAck) -> None:
        ex = self._leases.get(ack.lease.fencing_token)
        if ex is None or not ex.report_sent:
            return
        if ack.accepted:
            self._stats.count(reports_accepted=1)
            self._leases.forget(ex)
            return
        ex.report_sent = False
        ex.report_attempts += 1
        if not may_resend(ack):
            # The cluster decided (stale token, no longer leased, or the report turned into a
            # failure): sending it again would change nothing.
            self._refused(ex, ack.detail, final=True, reason=ack.reason)
        elif ex.report_attempts < _MAX_REPORT_ATTEMPTS and ex.lease.valid():
            delay = _REPORT_BACKOFF.delay(ex.report_attempts - 1, self._rng)
            log.info(
                "report for %s not recorded (%s); sending it again in %.2fs",
                ex.describe(),
                ack.detail,
                delay,
            )
            asyncio.get_running_loop().call_later(delay, self._resend, ex)
        elif ex.lease.valid():
            self.abandon(ex, f"{ack.detail} (not recorded after {ex.report_attempts} attempts)")
        else:
            self.abandon(ex, f"{ack.detail} (the lease is no longer valid)")

    def lapsed(self, dropped: Iterable[HeldLease]) -> None:
        """Leases that self-fenced: a report among them that the cluster answered "not
        recorded" and that waited to be sent again is abandoned."""
        for ex in dropped:
            if ex.report is not None and ex.report_attempts > 0:
                self.abandon(ex, "not recorded before the lease lapsed")

    def abandon(self, ex: HeldLease, detail: str) -> None:
        self._refused(ex, detail, final=False, reason=NOT_RECORDED)

    def _resend(self, ex: HeldLease) -> None:
        if not self._leases.holds(ex):
            return
        if ex.lease.valid():
            self._stats.count(reports_resent=1)
            self._stream.spawn(self.send(ex))
        else:
            self.abandon(ex, "not recorded, and the lease is no longer valid")

    def _refused(self, ex: HeldLease, detail: str, *, final: bool, reason: str) -> None:
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
            reason=reason,
        )
        if final:
            self._stats.count(reports_refused=1)
            # A result the cluster did not keep as a success deserves more than a warning.
            level = logging.ERROR if refusal.kind == "complete" else logging.WARNING
            log.log(level, "%s of %s refused by the cluster: %s", kind, ex.describe(), detail)
        else:
            self._stats.count(reports_abandoned=1)
            log.warning(
                "%s of %s was not recorded and is not sent again: %s; the cluster will retry "
                "the task once the lease expires",
                kind,
                ex.describe(),
                detail,
            )
        self._leases.forget(ex)
        if self._on_refused is not None:
            try:
                self._on_refused(refusal)
            except Exception:  # noqa: BLE001 - the application's hook must not stop the worker
                log.exception("on_report_refused raised for %s", ex.describe())
