"""WorkerService.Connect: one bidirectional stream per worker, served by the leader.

Reader task: Hello, Credits, Heartbeat, Complete, Fail, Reports from the worker. The handler
itself writes whatever the dispatcher and the reader put in the session's outbox; to a worker
whose Hello set `accepts_batches`, the Assigns and ReportAcks queued at one moment go out as
one ServerBatch (one write instead of one per message: the per-write cost was the largest
self time of a saturated leader). A follower (or a leader whose session ends) aborts with
UNAVAILABLE + `gnomon-leader` metadata.

Every queue of a stream is bounded (node/DESIGN.md, "Bounds of a worker stream"): the outbox
(`worker_outbox_max_messages`, `worker_outbox_max_bytes`), the reports read and not yet
acknowledged (`worker_max_pending_reports`), the leases one Heartbeat or Hello names
(`worker_max_heartbeat_leases`). The reader reads nothing while the outbox is full or the
reports are at their bound, so a worker that does not read is slowed down to what it reads;
one whose outbox stayed full with nothing read for `worker_stall_timeout_ms` is dropped
(RESOURCE_EXHAUSTED). The leader's session id is the Hello's worker id scoped by the
caller's token (`_session`): every lookup by worker id (leases resumed or expired by a
Hello, heartbeats, reports) uses it, never the raw Hello id.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import grpc

from gnomon.node.api.grpc.access import current_principal
from gnomon.node.api.grpc.base import NodeApi, translated
from gnomon.node.api.grpc.decode import refuse_stream
from gnomon.node.api.grpc.errors import NotLeader, Reason, abort
from gnomon.node.api.grpc.worker_leases import ack_for, report_command, session_for
from gnomon.node.api.grpc.worker_poll import LeasePolls
from gnomon.node.core import commands as c
from gnomon.node.core.model import State
from gnomon.node.leader.dispatch import Dispatcher, WorkerSession
from gnomon.node.leader.leases import LeaseTable
from gnomon.node.leader.outbox import Outbox
from gnomon.node.ops import logs, metrics
from gnomon.node.raft.errors import NotCommitted, Overloaded
from gnomon.node.security.auth import ANONYMOUS, AuthError, Principal
from gnomon.node.spec.validate import ValidationError, validate_worker_id
from gnomon.v1 import worker_pb2, worker_pb2_grpc

log = logging.getLogger(__name__)

# Reports of one burst proposed in one call at most: a call is committed, refused
# (Overloaded) or timed out as a whole, so a herd's thousands of reports are not.
MAX_REPORTS_PER_PROPOSAL = 256
# Messages and bytes merged into one ServerBatch at most (payloads are up to
# max_payload_bytes each; a worker receives at most 16 MiB per message by default).
MAX_BATCH_MESSAGES = 512
MAX_BATCH_BYTES = 1 << 20
def _tokens(refs, limit: int, field: str) -> list[int]:
    """The distinct fencing tokens of `refs`, in order. Raises ValidationError beyond
    `limit` (config worker_max_heartbeat_leases)."""
    if len(refs) > limit:
        raise ValidationError(field, f"{len(refs)} leases; at most {limit} "
                                     "(worker_max_heartbeat_leases)")
    return list(dict.fromkeys(ref.fencing_token for ref in refs))


def _drain(first: worker_pb2.ServerMessage | None, outbox: Outbox) -> list:
    """`first` and whatever else is queued now, in order, with each run of consecutive
    Assigns and ReportAcks merged into one ServerBatch (at most MAX_BATCH_MESSAGES and
    about MAX_BATCH_BYTES); a None (end of session) ends the list."""
    out: list = []
    batch: list[worker_pb2.ServerMessage] = []
    size = 0
    msg = first
    while True:
        kind = msg.WhichOneof("msg") if msg is not None else None
        if msg is not None and kind in ("assign", "report_ack"):
            n = msg.ByteSize()
            if batch and (len(batch) >= MAX_BATCH_MESSAGES or size + n > MAX_BATCH_BYTES):
                out.extend(_merged(batch))
                batch, size = [], 0
            batch.append(msg)
            size += n
        else:
            out.extend(_merged(batch))
            batch, size = [], 0
            out.append(msg)
            if msg is None:
                return out
        if outbox.empty():
            break
        msg = outbox.get_nowait()
    out.extend(_merged(batch))
    return out


def _merged(batch: list[worker_pb2.ServerMessage]) -> list[worker_pb2.ServerMessage]:
    if len(batch) <= 1:
        return batch
    merged = worker_pb2.ServerBatch(
        assigns=[m.assign for m in batch if m.HasField("assign")],
        report_acks=[m.report_ack for m in batch if m.HasField("report_ack")])
    return [worker_pb2.ServerMessage(batch=merged)]


@dataclasses.dataclass(eq=False)
class _Stream:
    """The servicer's side of one stream: its session, what bounds its reader, and whether
    the stream was already ended with a status."""

    session: WorkerSession
    context: Any  # grpc.aio.ServicerContext
    requests: Any  # the request stream (the decode guard's iterator)
    # One per report read and not yet acknowledged (worker_max_pending_reports).
    report_slots: asyncio.Semaphore
    # Writes completed: the stall watchdog's sign that the worker reads.
    written: int = 0
    # A status was sent (refused or dropped): the handler adds none of its own.
    aborted: bool = False
    # Who opened it: its token is checked again at every heartbeat.
    principal: Principal = ANONYMOUS


@dataclasses.dataclass(frozen=True, slots=True)
class _Report:
    """A report as read: the lease it names (a copy: the message it came in is not kept)
    and its command, cut to the node's limits."""

    lease: worker_pb2.LeaseRef
    cmd: c.CompleteTask | c.FailTask
    turned_into: str


class WorkerServicer(worker_pb2_grpc.WorkerServiceServicer):
    def __init__(self, node: NodeApi, dispatcher: Dispatcher, leases: LeaseTable,
                 revalidate: Callable[[Principal], None] = lambda principal: None):
        """`revalidate(principal)` raises AuthError once the stream's token was revoked or
        expired: asked at every heartbeat, so such a stream ends at its next one."""
        self.node = node
        self.dispatcher = dispatcher
        self.leases = leases
        self.revalidate = revalidate
        self.polls = LeasePolls(node, dispatcher, leases)

    # -- without a stream (worker_poll.py) --------------------------------------------------

    @translated
    async def LeaseTasks(self, request, context):  # noqa: N802
        return await self.polls.lease_tasks(request, context)

    @translated
    async def RenewLeases(self, request, context):  # noqa: N802
        return await self.polls.renew_leases(request, context)

    @translated
    async def CompleteLease(self, request, context):  # noqa: N802
        return await self.polls.report("complete", request, context)

    @translated
    async def FailLease(self, request, context):  # noqa: N802
        return await self.polls.report("fail", request, context)

    # -- the stream -------------------------------------------------------------------------

    @property
    def _drain_s(self) -> float:
        return self.node.config.stream_refusal_drain_ms / 1000

    async def Connect(self, request_iterator, context):  # noqa: N802
        await self.serve(request_iterator, context, current_principal())

    async def serve(self, request_iterator, context, principal: Principal,
                    welcomed: Callable[[_Stream], None] | None = None) -> None:
        """One worker stream, a worker's own or one a gateway relays (relay.py): WorkerMessages
        from `request_iterator`, answers through `context.write`, the end through
        `context.abort`; run as `principal`. `welcomed(stream)` once its Welcome is queued
        (the relay's heartbeat frames go to `relayed_heartbeat` from then on)."""
        cfg = self.node.config
        # The Hello is read before any refusal: a status that meets the client's write of it
        # still in flight reaches the client (or a gateway forwarding it) as INTERNAL, and
        # the redirect to the leader is lost.
        first = await anext(request_iterator.__aiter__(), None)
        if not self.node.leadership.fresh():
            # Welcome renews held leases: only a leader that can prove it leads may do that.
            await abort(context, NotLeader(self.node.leader_grpc_addr()))
        if first is None or first.WhichOneof("msg") != "hello":
            await refuse_stream(request_iterator, context, "hello: the first message",
                                self._drain_s)
        hello = first.hello
        try:
            validate_worker_id(hello.worker_id)
            held = _tokens(hello.held, cfg.worker_max_heartbeat_leases, "hello.held")
            session = session_for(hello.worker_id, tuple(hello.queues), hello.accepts_batches,
                                  principal, cfg)
        except ValidationError as exc:
            await refuse_stream(request_iterator, context, str(exc), self._drain_s)
        session.connected_ms = self.node.clock.wall_ms()
        # A gateway's relay carries the stream in a call of its own, which has no peer.
        session.peer = context.peer() if hasattr(context, "peer") else "relay"
        # The scoped id, never the Hello's: a Hello ends (or resumes) only its own leases.
        valid, _revoked = self.leases.reconnected(session.worker_id, held)
        self.dispatcher.attach(session)
        await context.write(worker_pb2.ServerMessage(welcome=worker_pb2.Welcome(
            node_id=cfg.node_id, heartbeat_interval_ms=cfg.heartbeat_interval_ms,
            lease_ttl_ms=cfg.lease_ttl_ms, resumed_tokens=valid)))
        stream = _Stream(session, context, request_iterator,
                         asyncio.Semaphore(cfg.worker_max_pending_reports), principal=principal)
        if welcomed is not None:
            welcomed(stream)
        reader = asyncio.create_task(self._read(stream))
        watchdog = asyncio.create_task(self._watch(stream))
        outbox = session.outbox
        try:
            ended = False
            while not ended:
                was_full = outbox.full()  # (then get() does not wait)
                msg = await outbox.get()
                for out in (_drain(msg, outbox) if session.batches else [msg]):
                    if out is None:
                        ended = True
                        break
                    await context.write(out)
                    stream.written += 1
                if was_full and session.credits > 0:
                    self.dispatcher.add_credits(session, 0)  # it may be granted again
        finally:
            reader.cancel()
            watchdog.cancel()
            self.dispatcher.detach(session)
        if not stream.aborted and not self.node.leadership.ready:
            await abort(context, NotLeader(self.node.leader_grpc_addr()))

    async def _read(self, stream: _Stream) -> None:
        session = stream.session
        reports: list[_Report] = []
        try:
            async for msg in stream.requests:
                if session.closed:
                    break
                kind = msg.WhichOneof("msg")
                if kind == "credits":
                    self.dispatcher.add_credits(session, msg.credits.credits)
                elif kind == "heartbeat":
                    try:
                        tokens = _tokens(msg.heartbeat.leases,
                                         self.node.config.worker_max_heartbeat_leases,
                                         "heartbeat.leases")
                    except ValidationError as exc:
                        await self._refuse(stream, str(exc))
                        return
                    try:
                        self.revalidate(stream.principal)
                    except AuthError as exc:
                        await self._end_unauthenticated(stream, str(exc))
                        return
                    session.last_heartbeat_ms = self.node.clock.wall_ms()
                    await self._heartbeat(session, tokens)
                elif kind in ("complete", "fail", "reports"):
                    if not await self._take_reports(stream, reports, msg):
                        return
                del msg  # no reference to the message (its bytes) while the reader waits
                # Nothing more is read while the outbox is full: a worker that does not read
                # its answers is slowed down to what it reads (and dropped by the watchdog).
                if session.outbox.full():
                    await session.outbox.wait_room()
                    if session.closed:  # dropped meanwhile: not one more request
                        break
        except Exception as exc:  # noqa: BLE001 - the stream broke: end the session
            if isinstance(exc, grpc.aio.AbortError):
                stream.aborted = True  # the decode guard refused a message
            log.info("worker %s stream ended: %r", session.worker_id, exc,
                     extra=logs.fields(worker=session.worker_id))
        finally:
            session.end()

    async def _take_reports(self, stream: _Stream, reports: list[_Report], msg) -> bool:
        """Queue the reports of `msg` for a burst, each once a place among the pending ones
        is free (worker_max_pending_reports); False if the session ended meanwhile."""
        session = stream.session
        kind = msg.WhichOneof("msg")
        if kind == "reports":
            items = [*(("complete", m) for m in msg.reports.completes),
                     *(("fail", m) for m in msg.reports.fails)]
        else:
            items = [(kind, getattr(msg, kind))]
        for report_kind, report in items:
            await stream.report_slots.acquire()
            if session.closed:
                return False
            if not reports:  # the first of a burst: one proposal for the burst
                self.node.supervisor.spawn(self._report_burst(stream, reports),
                                           name=f"report-{session.worker_id}")
            reports.append(self._report(report_kind, report))
        return True

    async def _refuse(self, stream: _Stream, detail: str) -> None:
        """End the stream with INVALID_ARGUMENT once the worker stopped writing; nothing is
        granted to it meanwhile."""
        stream.aborted = True
        self.dispatcher.detach(stream.session)
        try:
            await refuse_stream(stream.requests, stream.context, detail, self._drain_s)
        except Exception:  # noqa: BLE001 - abort() raises by design (AbortError)
            pass

    async def _end_unauthenticated(self, stream: _Stream, detail: str) -> None:
        """The stream's token was revoked or expired: nothing more is granted, renewed or
        read; the stream ends with UNAUTHENTICATED (the worker self-fences its leases)."""
        log.warning("worker %s: %s; stream ended", stream.session.worker_id, detail,
                    extra=logs.fields(worker=stream.session.worker_id))
        stream.aborted = True
        self.dispatcher.detach(stream.session)
        stream.session.outbox.clear()
        stream.session.end()
        try:
            await stream.context.abort(grpc.StatusCode.UNAUTHENTICATED, detail)
        except Exception:  # noqa: BLE001 - abort() raises by design (AbortError)
            pass

    async def _watch(self, stream: _Stream) -> None:
        """Drop the stream once its outbox stayed full, with no write completing, for
        worker_stall_timeout_ms: the worker does not read what it is sent."""
        session, outbox = stream.session, stream.session.outbox
        stall_ms = self.node.config.worker_stall_timeout_ms
        while not session.closed:
            await outbox.wait_full()
            written = stream.written
            await asyncio.sleep(stall_ms / 1000)
            if session.closed or not outbox.full() or stream.written != written:
                continue
            detail = (f"worker stream: {len(outbox)} messages queued for worker "
                      f"{session.worker_id!r} and none read for {stall_ms} ms "
                      f"(worker_stall_timeout_ms); its requests were not read meanwhile")
            log.warning("worker %s dropped: %s", session.worker_id, detail,
                        extra=logs.fields(worker=session.worker_id))
            metrics.WORKER_STREAMS_DROPPED.inc()
            stream.aborted = True
            self.dispatcher.detach(session)  # nothing more is granted to it
            outbox.clear()
            session.end()
            try:
                # The status goes out behind what the worker has not read: it sees it when it
                # reads again (or the connection ends).
                await stream.context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, detail)
            except Exception:  # noqa: BLE001 - abort() raises by design (AbortError)
                pass
            return

    async def _heartbeat(self, session: WorkerSession, tokens: list[int]) -> None:
        await session.outbox.put(self._renew(session, tokens))

    def _renew(self, session: WorkerSession, tokens: list[int]) -> worker_pb2.ServerMessage:
        """Renew the leases of `tokens` that are this session's; their ack."""
        if self.node.leadership.fresh():
            valid, revoked = self.leases.renew(session.worker_id, tokens)
        else:
            # Cannot prove leadership now: an ack that vouches for nothing (one ack per
            # heartbeat keeps the worker's matching exact); its self-fencing decides.
            valid, revoked = [], []
        return worker_pb2.ServerMessage(heartbeat_ack=worker_pb2.HeartbeatAck(
            valid_tokens=valid, revoked_tokens=revoked))

    def relayed_heartbeat(self, stream: _Stream,
                          heartbeat: worker_pb2.Heartbeat) -> worker_pb2.ServerMessage | None:
        """A heartbeat that a gateway's relay passed as a frame (relay.py): the stream's
        leases renewed and the ack returned at once, with no trip through the stream's
        reader and writer. None when the stream must take it as a message instead: its
        reader then refuses a heartbeat over a bound, or ends the stream of a revoked token,
        exactly as for a worker's own stream. Only the stream's own session's leases are
        renewed: a gateway cannot renew a lease through another worker's stream."""
        limit = self.node.config.worker_max_heartbeat_leases
        if stream.aborted or stream.session.closed or len(heartbeat.leases) > limit:
            return None
        try:
            self.revalidate(stream.principal)
        except AuthError:
            return None
        return self._renew(stream.session, _tokens(heartbeat.leases, limit, "heartbeat.leases"))

    def _report(self, kind: str, msg) -> _Report:
        lease = worker_pb2.LeaseRef(run_id=msg.lease.run_id, task_name=msg.lease.task_name,
                                    fencing_token=msg.lease.fencing_token)
        cmd, turned_into = report_command(self.node.config, self.node.rng, kind, msg)
        return _Report(lease, cmd, turned_into)

    async def _report_burst(self, stream: _Stream, reports: list[_Report]) -> None:
        """The Complete/Fail reports the reader queued by the time this task runs (one loop
        turn after the first): proposed in one call, acknowledged one by one in order. One
        call per report cost a future, a timer and a task each."""
        session = stream.session
        burst = reports[:MAX_REPORTS_PER_PROPOSAL]
        del reports[:MAX_REPORTS_PER_PROPOSAL]
        if reports:  # a long burst: the rest in calls of their own (one refusal each)
            self.node.supervisor.spawn(self._report_burst(stream, reports),
                                       name=f"report-{session.worker_id}")
        proposed: list[_Report] = []
        for report in burst:
            if session.tenants is not None and not self._holds(session,
                                                               report.lease.fencing_token):
                # A scoped worker reports only leases granted to it (its worker id is its own).
                await self._ack(stream, report, worker_pb2.ReportAck(
                    accepted=False, reason=Reason.NOT_YOURS,
                    detail="lease: not held by this worker"))
                continue
            proposed.append(report)
        if not proposed:
            return
        cmds = [r.cmd for r in proposed]
        if "skip-token-check" in self.node.config.canaries:
            cmds = [self._canary_current_token(cmd) for cmd in cmds]
        try:
            replies = await self.node.proposer.propose_many(cmds)
        except (NotCommitted, Overloaded) as exc:
            for report in proposed:
                await self._ack(stream, report, worker_pb2.ReportAck(
                    accepted=False, retry=True, reason=Reason.NOT_RECORDED,
                    detail=f"not recorded: {exc}; report again"))
        else:
            for report, reply in zip(proposed, replies, strict=True):
                await self._ack(stream, report, ack_for(reply, report.turned_into))
        self.dispatcher.add_credits(session, 0)

    @staticmethod
    async def _ack(stream: _Stream, report: _Report, ack: worker_pb2.ReportAck) -> None:
        """Queue the ack once the outbox has room (the reader reads nothing meanwhile)."""
        ack.lease.CopyFrom(report.lease)
        msg = worker_pb2.ServerMessage(report_ack=ack)
        outbox = stream.session.outbox
        if not outbox.put_nowait(msg) and not outbox.closed:
            await outbox.put(msg)
        stream.report_slots.release()

    def _holds(self, session: WorkerSession, token: int) -> bool:
        holder = self.leases.holder(token)
        return holder is not None and holder.worker_id == session.worker_id

    def _canary_current_token(self, cmd):
        """Test-only jepsen canary "skip-token-check": report under the task's current token
        whatever token the worker holds, so stale reports are accepted (breaks fencing)."""
        def current_token(st: State) -> int:
            run = st.runs.get(cmd.run_id)
            inst = run.tasks.get(cmd.task_name) if run else None
            return inst.fencing_token if inst else cmd.fencing_token

        token = self.node.replica.read(current_token)
        return dataclasses.replace(cmd, fencing_token=token)
