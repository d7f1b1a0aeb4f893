"""WorkerService.Connect: one bidirectional stream per worker, served by the leader.

Reader task: Hello, Credits, Heartbeat, Complete, Fail, Reports from the worker. The handler
itself writes whatever the dispatcher and the reader put in the session's outbox; to a worker
whose Hello set `accepts_batches`, the Assigns and ReportAcks queued at one moment go out as
one ServerBatch (one write instead of one per message: the per-write cost was the largest
self time of a saturated leader). A follower (or a leader whose session ends) aborts with
UNAVAILABLE + `gnomon-leader` metadata.

The leader's session id is the Hello's worker id scoped by the caller's token (`_session`):
every lookup by worker id (leases resumed or expired by a Hello, heartbeats, reports) uses it,
never the raw Hello id.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re

import grpc

from gnomon.node.api.grpc.access import current_principal
from gnomon.node.api.grpc.base import NodeApi
from gnomon.node.api.grpc.errors import NotLeader, Reason, abort, rejected_reason
from gnomon.node.core import commands as c
from gnomon.node.core.errors import Rejected
from gnomon.node.leader.dispatch import Dispatcher, WorkerSession
from gnomon.node.leader.leases import LeaseTable
from gnomon.node.ops import logs
from gnomon.node.raft.node import NotCommitted, Overloaded
from gnomon.node.security.auth import Principal
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
# A worker's error message is kept up to this many bytes (the start: it names the error).
MAX_ERROR_BYTES = 4096
# The form of a token-scoped session id ("t7:host-1"): only that token's workers get it.
_SCOPED_ID = re.compile(r"t[0-9]+:")


def _tail(text: str, limit: int, keep: str = "tail") -> str:
    """`text` cut to at most `limit` UTF-8 bytes, keeping its end (or its head), never
    splitting a character."""
    if limit <= 0:
        return ""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    cut = data[-limit:] if keep == "tail" else data[:limit]
    return cut.decode("utf-8", "ignore")


def _session(hello: worker_pb2.Hello, principal: Principal) -> WorkerSession:
    """The leader's view of a worker. A worker authenticated by a tenant-scoped token takes
    only its tenants' tasks, and its id is namespaced by its token, so that it can neither
    pass for another tenant's worker nor end that worker's leases by reconnecting as it.
    An unscoped (admin) worker keeps its id as it is, but may not name one of the scoped
    form: the two namespaces never meet. Raises ValidationError."""
    queues = tuple(hello.queues) or ("default",)
    if principal.is_admin:
        if _SCOPED_ID.match(hello.worker_id):
            raise ValidationError("worker_id", f"{hello.worker_id!r} has the form of a "
                                  "token-scoped id (t<n>:...), which only that token's "
                                  "workers get; choose another")
        return WorkerSession(hello.worker_id, queues, batches=hello.accepts_batches)
    return WorkerSession(f"{principal.token_id}:{hello.worker_id}", queues,
                         tenants=principal.tenants, batches=hello.accepts_batches)


def _drain(first: worker_pb2.ServerMessage | None, outbox: asyncio.Queue) -> list:
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


def _ack_for(reply: object, turned_into: str) -> worker_pb2.ReportAck:
    if isinstance(reply, Rejected):
        return worker_pb2.ReportAck(accepted=False, detail=reply.detail,
                                    reason=rejected_reason(reply))
    if turned_into:
        # Recorded, but not as sent: the worker must not believe all is well.
        return worker_pb2.ReportAck(accepted=False, detail=turned_into,
                                    reason=Reason.RECORDED_AS_FAILURE)
    return worker_pb2.ReportAck(accepted=True)


class WorkerServicer(worker_pb2_grpc.WorkerServiceServicer):
    def __init__(self, node: NodeApi, dispatcher: Dispatcher, leases: LeaseTable):
        self.node = node
        self.dispatcher = dispatcher
        self.leases = leases

    async def Connect(self, request_iterator, context):  # noqa: N802
        if not self.node.leadership.fresh():
            # Welcome renews held leases: only a leader that can prove it leads may do that.
            await abort(context, NotLeader(self.node.leader_grpc_addr()))
        first = await anext(request_iterator.__aiter__(), None)
        if first is None or first.WhichOneof("msg") != "hello":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "hello: the first message")
        hello = first.hello
        try:
            validate_worker_id(hello.worker_id)
            session = _session(hello, current_principal())
        except ValidationError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        # The scoped id, never the Hello's: a Hello ends (or resumes) only its own leases.
        valid, _revoked = self.leases.reconnected(session.worker_id,
                                                  [h.fencing_token for h in hello.held])
        self.dispatcher.attach(session)
        cfg = self.node.config
        await context.write(worker_pb2.ServerMessage(welcome=worker_pb2.Welcome(
            node_id=cfg.node_id, heartbeat_interval_ms=cfg.heartbeat_interval_ms,
            lease_ttl_ms=cfg.lease_ttl_ms, resumed_tokens=valid)))
        reader = asyncio.create_task(self._read(request_iterator, session))
        try:
            ended = False
            while not ended:
                msg = await session.outbox.get()
                for out in (_drain(msg, session.outbox) if session.batches else [msg]):
                    if out is None:
                        ended = True
                        break
                    await context.write(out)
        finally:
            reader.cancel()
            self.dispatcher.detach(session)
        if not self.node.leadership.ready:
            await abort(context, NotLeader(self.node.leader_grpc_addr()))

    async def _read(self, request_iterator, session: WorkerSession) -> None:
        reports: list[tuple[str, object]] = []
        try:
            async for msg in request_iterator:
                kind = msg.WhichOneof("msg")
                if kind == "credits":
                    self.dispatcher.add_credits(session, msg.credits.credits)
                elif kind == "heartbeat":
                    self._heartbeat(session, msg.heartbeat)
                elif kind in ("complete", "fail", "reports"):
                    if not reports:  # the first of a burst: one proposal for the burst
                        self.node.supervisor.spawn(self._report_burst(session, reports),
                                                   name=f"report-{session.worker_id}")
                    if kind == "reports":
                        reports.extend(("complete", m) for m in msg.reports.completes)
                        reports.extend(("fail", m) for m in msg.reports.fails)
                    else:
                        reports.append((kind, getattr(msg, kind)))
        except Exception as exc:  # noqa: BLE001 - the stream broke: end the session
            log.info("worker %s stream ended: %r", session.worker_id, exc,
                     extra=logs.fields(worker=session.worker_id))
        finally:
            session.closed = True
            session.outbox.put_nowait(None)

    def _heartbeat(self, session: WorkerSession, hb: worker_pb2.Heartbeat) -> None:
        if self.node.leadership.fresh():
            valid, revoked = self.leases.renew(session.worker_id,
                                               [lease.fencing_token for lease in hb.leases])
        else:
            # Cannot prove leadership now: an ack that vouches for nothing (one ack per
            # heartbeat keeps the worker's matching exact); its self-fencing decides.
            valid, revoked = [], []
        session.send(worker_pb2.ServerMessage(heartbeat_ack=worker_pb2.HeartbeatAck(
            valid_tokens=valid, revoked_tokens=revoked)))

    async def _report_burst(self, session: WorkerSession, reports: list) -> None:
        """The Complete/Fail reports the reader queued by the time this task runs (one loop
        turn after the first): proposed in one call, acknowledged one by one in order. One
        call per report cost a future, a timer and a task each."""
        burst = reports[:MAX_REPORTS_PER_PROPOSAL]
        del reports[:MAX_REPORTS_PER_PROPOSAL]
        if reports:  # a long burst: the rest in calls of their own (one refusal each)
            self.node.supervisor.spawn(self._report_burst(session, reports),
                                       name=f"report-{session.worker_id}")
        proposed: list[tuple[object, str]] = []
        cmds = []
        for kind, msg in burst:
            if session.tenants is not None and not self._holds(session,
                                                               msg.lease.fencing_token):
                # A scoped worker reports only leases granted to it (its worker id is its own).
                self._ack(session, msg, worker_pb2.ReportAck(
                    accepted=False, reason=Reason.NOT_YOURS,
                    detail="lease: not held by this worker"))
                continue
            cmd, turned_into = self._report_command(kind, msg)
            if "skip-token-check" in self.node.config.canaries:
                cmd = self._canary_current_token(cmd)
            cmds.append(cmd)
            proposed.append((msg, turned_into))
        if not cmds:
            return
        try:
            replies = await self.node.proposer.propose_many(cmds)
        except (NotCommitted, Overloaded) as exc:
            for msg, _ in proposed:
                self._ack(session, msg, worker_pb2.ReportAck(
                    accepted=False, retry=True, reason=Reason.NOT_RECORDED,
                    detail=f"not recorded: {exc}; report again"))
        else:
            for (msg, turned_into), reply in zip(proposed, replies, strict=True):
                self._ack(session, msg, _ack_for(reply, turned_into))
        self.dispatcher.add_credits(session, 0)

    @staticmethod
    def _ack(session: WorkerSession, msg, ack: worker_pb2.ReportAck) -> None:
        ack.lease.CopyFrom(msg.lease)
        session.send(worker_pb2.ServerMessage(report_ack=ack))

    def _holds(self, session: WorkerSession, token: int) -> bool:
        holder = self.leases.holder(token)
        return holder is not None and holder.worker_id == session.worker_id

    def _report_command(self, kind: str, msg) -> tuple[c.CompleteTask | c.FailTask, str]:
        """The command for a Complete or Fail, and why it is not what was sent ("" if it is).

        Output tails are cut here (the newest bytes kept), so every replica stores the same."""
        cfg, lease = self.node.config, msg.lease
        extra = {
            "output_tail": _tail(msg.output_tail, cfg.max_output_tail_bytes),
            "exit_code": msg.exit_code if msg.HasField("exit_code") else None,
            "duration_ms": max(0, msg.duration_ms),
        }
        if kind == "fail":
            return c.FailTask(lease.run_id, lease.task_name, lease.fencing_token,
                              _tail(msg.error, MAX_ERROR_BYTES, keep="head"), msg.retryable,
                              self.node.rng.random(), **extra), ""
        if len(msg.result) > cfg.max_result_bytes:
            why = (f"result: {len(msg.result)} bytes exceeds max_result_bytes "
                   f"{cfg.max_result_bytes}; the task failed for good (dead-lettered)")
            return c.FailTask(lease.run_id, lease.task_name, lease.fencing_token, why, False,
                              0.5, **extra), why
        return c.CompleteTask(lease.run_id, lease.task_name, lease.fencing_token,
                              bytes(msg.result), **extra), ""

    def _canary_current_token(self, cmd):
        """Test-only jepsen canary "skip-token-check": report under the task's current token
        whatever token the worker holds, so stale reports are accepted (breaks fencing)."""
        with self.node.replica.lock:
            run = self.node.replica.state.runs.get(cmd.run_id)
            inst = run.tasks.get(cmd.task_name) if run else None
            token = inst.fencing_token if inst else cmd.fencing_token
        return dataclasses.replace(cmd, fencing_token=token)
