"""What the worker stream (worker.py) and the unary worker calls (worker_poll.py) share: the
leader's id for a worker, scoped by its token, and a report's command and answer."""

from __future__ import annotations

import random
import re

from gnomon.node.api.grpc.errors import Reason, rejected_reason
from gnomon.node.config import Config
from gnomon.node.core import commands as c
from gnomon.node.core.errors import Rejected
from gnomon.node.leader.dispatch import WorkerSession
from gnomon.node.leader.outbox import Outbox
from gnomon.node.security.auth import Principal
from gnomon.node.spec.validate import ValidationError
from gnomon.v1 import worker_pb2

# A worker's error message is kept up to this many bytes (the start: it names the error).
MAX_ERROR_BYTES = 4096
# The form of a token-scoped session id ("t7:host-1"): only that token's workers get it.
_SCOPED_ID = re.compile(r"t[0-9]+:")


def tail(text: str, limit: int, keep: str = "tail") -> str:
    """`text` cut to at most `limit` UTF-8 bytes, keeping its end (or its head), never
    splitting a character."""
    if limit <= 0:
        return ""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    cut = data[-limit:] if keep == "tail" else data[:limit]
    return cut.decode("utf-8", "ignore")


def session_id(worker_id: str, principal: Principal) -> str:
    """The leader's id for a worker. A worker authenticated by a tenant-scoped token is
    namespaced by its token, so that it can neither pass for another tenant's worker nor end
    that worker's leases by reconnecting as it. An unscoped (admin) worker keeps its id as it
    is, but may not name one of the scoped form: the two namespaces never meet. Raises
    ValidationError."""
    if principal.is_admin:
        if _SCOPED_ID.match(worker_id):
            raise ValidationError("worker_id", f"{worker_id!r} has the form of a "
                                  "token-scoped id (t<n>:...), which only that token's "
                                  "workers get; choose another")
        return worker_id
    return f"{principal.token_id}:{worker_id}"


def session_for(worker_id: str, queues: tuple[str, ...], batches: bool, principal: Principal,
                cfg: Config) -> WorkerSession:
    """The leader's view of a worker (`session_id`); a scoped worker takes only its tenants'
    tasks. Raises ValidationError."""
    outbox = Outbox(cfg.worker_outbox_max_messages, cfg.worker_outbox_max_bytes)
    return WorkerSession(session_id(worker_id, principal), queues or ("default",),
                         tenants=None if principal.is_admin else principal.tenants,
                         batches=batches, outbox=outbox)


def ack_for(reply: object, turned_into: str) -> worker_pb2.ReportAck:
    if isinstance(reply, Rejected):
        return worker_pb2.ReportAck(accepted=False, detail=reply.detail,
                                    reason=rejected_reason(reply))
    if turned_into:
        # Recorded, but not as sent: the worker must not believe all is well.
        return worker_pb2.ReportAck(accepted=False, detail=turned_into,
                                    reason=Reason.RECORDED_AS_FAILURE)
    return worker_pb2.ReportAck(accepted=True)


def report_command(cfg: Config, rng: random.Random, kind: str,
                   msg: worker_pb2.Complete | worker_pb2.Fail
                   ) -> tuple[c.CompleteTask | c.FailTask, str]:
    """The command for a Complete or Fail, and why it is not what was sent ("" if it is).

    Output tails are cut here (the newest bytes kept), so every replica stores the same."""
    lease = msg.lease
    output_tail = tail(msg.output_tail, cfg.max_output_tail_bytes)
    exit_code = msg.exit_code if msg.HasField("exit_code") else None
    duration_ms = max(0, msg.duration_ms)
    if isinstance(msg, worker_pb2.Fail):
        return c.FailTask(lease.run_id, lease.task_name, lease.fencing_token,
                          tail(msg.error, MAX_ERROR_BYTES, keep="head"), msg.retryable,
                          rng.random(), output_tail=output_tail, exit_code=exit_code,
                          duration_ms=duration_ms), ""
    if len(msg.result) > cfg.max_result_bytes:
        why = (f"result: {len(msg.result)} bytes exceeds max_result_bytes "
               f"{cfg.max_result_bytes}; the task failed for good (dead-lettered)")
        return c.FailTask(lease.run_id, lease.task_name, lease.fencing_token, why, False,
                          0.5, output_tail=output_tail, exit_code=exit_code,
                          duration_ms=duration_ms), why
    return c.CompleteTask(lease.run_id, lease.task_name, lease.fencing_token,
                          bytes(msg.result), output_tail=output_tail, exit_code=exit_code,
                          duration_ms=duration_ms), ""
