"""The worker protocol without a stream: LeaseTasks, RenewLeases, CompleteLease, FailLease.

For a worker that cannot hold a bidirectional stream (a shell script with curl, a serverless
function): over HTTP these are `POST /v1/worker/lease | heartbeat | complete | fail`. The
semantics are the stream's (node/api/grpc/worker.py), over the same lease table:

- A lease call is a short-lived session: the worker's credits are `capacity`, it is attached
  to the dispatcher until a first Assign is queued for it or `wait_ms` passes, then its
  credits drop to 0 and the call waits for the grants already proposed for it (each one's
  Assign has a reserved place in the session's outbox) before it detaches. So no grant
  committed for the call is left without an answer; one that lands after the session ended
  (the call was cut) is expired at once by the dispatcher, as for a closed stream.
- Unlike a Hello, a lease call never expires the worker's other leases: an HTTP worker holds
  leases across calls and renews them by name (`lease_id`).
- Ids are scoped by the caller's token as on the stream (`worker.session_id`): a tenant's
  worker renews and reports only the leases granted to its own token's workers.
- Concurrent lease calls per node are bounded (`worker_max_polls`: RESOURCE_EXHAUSTED with
  Retry-After beyond), and so is the wait (`worker_poll_max_wait_ms`).

Loop thread only.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from gnomon.node.api.grpc.access import current_principal
from gnomon.node.api.grpc.base import NodeApi
from gnomon.node.api.grpc.errors import NotLeader, Reason
from gnomon.node.api.grpc.worker_leases import ack_for, report_command, session_for, session_id
from gnomon.node.config import Config
from gnomon.node.core.model import State, TaskState
from gnomon.node.leader.dispatch import Dispatcher, WorkerSession
from gnomon.node.leader.leases import LeaseTable
from gnomon.node.ops import metrics
from gnomon.node.raft.errors import NotCommitted, Overloaded
from gnomon.node.security.admission import RETRY_AFTER_KEY
from gnomon.node.security.auth import Principal
from gnomon.node.spec.validate import ValidationError, validate_worker_id
from gnomon.v1 import worker_pb2

POLL_RETRY_AFTER_MS = 1000


def lease_id(run_id: str, task_name: str, token: int) -> str:
    """The one string that names a lease: run ids may hold "/" (job ids), task names and
    tokens do not, so the last two fields split off unambiguously."""
    return f"{run_id}/{task_name}/{token}"


def parse_lease_id(text: str, field: str) -> worker_pb2.LeaseRef:
    """The lease `text` names. Raises ValidationError naming `field`."""
    run_id, sep, rest = text.rpartition("/")
    run_id, sep2, task_name = run_id.rpartition("/")
    token = rest
    if not (sep and sep2 and run_id and task_name and token.isdigit() and int(token) > 0):
        raise ValidationError(field, f"{text[:200]!r} is not a lease id "
                                     "(<run_id>/<task_name>/<fencing_token>, as leased)")
    return worker_pb2.LeaseRef(run_id=run_id, task_name=task_name, fencing_token=int(token))


def _task(assign: worker_pb2.Assign) -> worker_pb2.LeasedTask:
    lease = assign.lease
    return worker_pb2.LeasedTask(
        lease_id=lease_id(lease.run_id, lease.task_name, lease.fencing_token),
        fencing_token=lease.fencing_token, idempotency_key=assign.idempotency_key,
        ttl_ms=assign.lease_ttl_ms, payload=assign.payload, deadline_ms=assign.deadline_ms,
        run_id=lease.run_id, task_name=lease.task_name, job_id=assign.job_id,
        tenant=assign.tenant, queue=assign.queue, attempt=assign.attempt,
        max_attempts=assign.max_attempts, scheduled_for_ms=assign.scheduled_for_ms,
        traceparent=assign.traceparent)


def _assigns(msg: worker_pb2.ServerMessage | None) -> list[worker_pb2.Assign]:
    if msg is None:
        return []
    kind = msg.WhichOneof("msg")
    if kind == "assign":
        return [msg.assign]
    return list(msg.batch.assigns) if kind == "batch" else []


class LeasePolls:
    """The four unary calls (WorkerServicer serves them)."""

    def __init__(self, node: NodeApi, dispatcher: Dispatcher, leases: LeaseTable):
        self.node = node
        self.dispatcher = dispatcher
        self.leases = leases
        self.waiting = 0  # lease calls waiting now (worker_max_polls)

    def _require_fresh_leader(self) -> None:
        # Renewing or granting is vouching for leases: only a leader that can prove it leads.
        if not self.node.leadership.fresh():
            raise NotLeader(self.node.leader_grpc_addr())

    async def lease_tasks(self, request: worker_pb2.LeaseTasksRequest,
                          context: Any) -> worker_pb2.LeaseTasksResponse:
        cfg = self.node.config
        _check_lease_request(request, cfg)
        self._require_fresh_leader()
        if self.waiting >= cfg.worker_max_polls:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"worker: {self.waiting} lease calls wait on this node, the most "
                f"worker_max_polls ({cfg.worker_max_polls}) allows; retry later",
                trailing_metadata=((RETRY_AFTER_KEY, str(POLL_RETRY_AFTER_MS)),))
        session = session_for(request.worker_id, tuple(request.queues), False,
                              current_principal(), cfg)
        self.waiting += 1
        metrics.WORKER_POLLS.set(self.waiting)
        try:
            tasks = await self._poll(session, request.capacity, request.wait_ms / 1000)
        finally:
            self.waiting -= 1
            metrics.WORKER_POLLS.set(self.waiting)
        return worker_pb2.LeaseTasksResponse(
            tasks=tasks, heartbeat_interval_ms=cfg.heartbeat_interval_ms,
            lease_ttl_ms=cfg.lease_ttl_ms)

    async def _poll(self, session: WorkerSession, capacity: int,
                    wait_s: float) -> list[worker_pb2.LeasedTask]:
        outbox = session.outbox
        self.dispatcher.attach(session)
        try:
            self.dispatcher.add_credits(session, capacity)
            await self.dispatcher.next_round()  # what is ready now, even without a wait
            if wait_s > 0 and not len(outbox):
                try:
                    async with asyncio.timeout(wait_s):
                        await outbox.wait_readable()
                except TimeoutError:
                    pass
            session.credits = 0  # nothing more is matched; what is proposed is answered
            await outbox.wait_settled()
        finally:
            self.dispatcher.detach(session)
        tasks: list[worker_pb2.LeasedTask] = []
        while len(outbox):
            tasks.extend(_task(a) for a in _assigns(outbox.get_nowait()))
        return tasks

    async def renew_leases(self, request: worker_pb2.RenewLeasesRequest,
                           context: Any) -> worker_pb2.RenewLeasesResponse:
        cfg = self.node.config
        validate_worker_id(request.worker_id)
        if len(request.lease_ids) > cfg.worker_max_heartbeat_leases:
            raise ValidationError("lease_ids", f"{len(request.lease_ids)} leases; at most "
                                  f"{cfg.worker_max_heartbeat_leases} "
                                  "(worker_max_heartbeat_leases)")
        refs = {text: parse_lease_id(text, "lease_ids") for text in request.lease_ids}
        self._require_fresh_leader()
        worker_id = session_id(request.worker_id, current_principal())
        valid, _revoked = self.leases.renew(
            worker_id, list(dict.fromkeys(ref.fencing_token for ref in refs.values())))
        renewed = set(valid)
        cancelled = self.node.replica.read(lambda st: _cancelled(st, refs.values()))
        out = []
        for text, ref in refs.items():
            if ref.fencing_token in renewed:
                d = self.leases.holder(ref.fencing_token)
                out.append(worker_pb2.LeaseStatus(lease_id=text, status="ok",
                                                  ttl_ms=d.ttl_ms if d else 0))
            else:
                status = "cancel" if ref.fencing_token in cancelled else "revoked"
                out.append(worker_pb2.LeaseStatus(lease_id=text, status=status))
        return worker_pb2.RenewLeasesResponse(leases=out)

    async def report(self, kind: str, request: Any,
                     context: Any) -> worker_pb2.LeaseReportResponse:
        """CompleteLease ("complete") or FailLease ("fail")."""
        lease = parse_lease_id(request.lease_id, "lease_id")
        if request.fencing_token and request.fencing_token != lease.fencing_token:
            raise ValidationError("fencing_token", f"{request.fencing_token} is not the token "
                                  f"of lease_id {request.lease_id!r}")
        if request.worker_id:
            validate_worker_id(request.worker_id)
        self._require_fresh_leader()
        principal = current_principal()
        if not self._may_report(principal, request.worker_id, lease.fencing_token):
            return worker_pb2.LeaseReportResponse(
                accepted=False, reason=Reason.NOT_YOURS, detail="lease: not held by this worker")
        fields = {k: getattr(request, k) for k in ("output_tail", "duration_ms")}
        if request.HasField("exit_code"):
            fields["exit_code"] = request.exit_code
        if kind == "fail":
            msg: Any = worker_pb2.Fail(lease=lease, error=request.error,
                                       retryable=request.retryable, **fields)
        else:
            msg = worker_pb2.Complete(lease=lease, result=request.result, **fields)
        cmd, turned_into = report_command(self.node.config, self.node.rng, kind, msg)
        try:
            [reply] = await self.node.proposer.propose_many([cmd])
        except (NotCommitted, Overloaded) as exc:
            return worker_pb2.LeaseReportResponse(accepted=False, retry=True,
                                                  reason=Reason.NOT_RECORDED,
                                                  detail=f"not recorded: {exc}; report again")
        ack = ack_for(reply, turned_into)
        return worker_pb2.LeaseReportResponse(accepted=ack.accepted, reason=ack.reason,
                                              detail=ack.detail, retry=ack.retry)

    def _may_report(self, principal: Principal, worker_id: str, token: int) -> bool:
        """A scoped caller reports only leases of its own token's workers; any caller that
        names its worker, only that worker's leases (as a stream reports only its own)."""
        holder = self.leases.holder(token)
        if worker_id:
            return holder is not None and holder.worker_id == session_id(worker_id, principal)
        if principal.is_admin:
            return True  # the core refuses a stale token
        return holder is not None and holder.worker_id.startswith(f"{principal.token_id}:")


def _check_lease_request(request: worker_pb2.LeaseTasksRequest, cfg: Config) -> None:
    validate_worker_id(request.worker_id)
    if not 1 <= request.capacity <= cfg.max_worker_credits:
        raise ValidationError("capacity", f"{request.capacity}: must be 1 to "
                              f"{cfg.max_worker_credits} (max_worker_credits)")
    if not 0 <= request.wait_ms <= cfg.worker_poll_max_wait_ms:
        raise ValidationError("wait_ms", f"{request.wait_ms}: must be 0 to "
                              f"{cfg.worker_poll_max_wait_ms} (worker_poll_max_wait_ms)")


def _cancelled(st: State, refs) -> set[int]:
    """Tokens of `refs` whose task was cancelled under that token."""
    out = set()
    for ref in refs:
        run = st.runs.get(ref.run_id)
        inst = run.tasks.get(ref.task_name) if run else None
        if (inst is not None and inst.state == TaskState.CANCELLED
                and inst.fencing_token == ref.fencing_token):
            out.add(ref.fencing_token)
    return out
