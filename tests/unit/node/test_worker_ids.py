"""Worker ids are scoped by the caller's token on every lookup, on the servicer itself
(node/api/grpc/worker.py): a Hello ends and resumes only the leases of its own scoped id,
never those of the raw id it names, and an admin worker cannot take an id of the scoped form.
Against real nodes: tests/security/test_worker_isolation.py."""

from __future__ import annotations

import grpc

from gnomon.node.core.access import WORKER
from gnomon.node.core.model import TaskState
from gnomon.node.security.auth import Principal
from gnomon.v1 import worker_pb2

from .harness import WorkerConn, until

Conn = WorkerConn


def _scoped(token_id: str, tenant: str) -> Principal:
    return Principal(f"{tenant}-worker", WORKER, (tenant,), token_id)


def _session(h, worker_id: str):
    return h.dispatcher.sessions.get(worker_id)


async def test_a_hello_ends_only_the_leases_of_its_own_scoped_id(leader):
    job = await leader.create_job("long", tenant="globex")
    run_id = await leader.run_now(job)
    token = await leader.grant(run_id, worker="t2:long-1")
    # Tenant acme's worker (token t5) names globex's worker by its session id, listing
    # nothing held: the leader looks up "t5:t2:long-1", which holds nothing.
    conn = Conn(leader, "t2:long-1", principal=_scoped("t5", "acme"))
    await conn.wait("welcome")
    assert leader.leases.deadlines[token].expires_mono > 0  # not expired at once
    assert _session(leader, "t5:t2:long-1") is not None
    await conn.end()
    # globex's worker itself, reconnecting without the lease, does end it.
    own = Conn(leader, "long-1", principal=_scoped("t2", "globex"))
    await own.wait("welcome")
    await until(lambda: leader.inst(run_id).state != TaskState.LEASED, "the lease ended")
    await own.end()


async def test_a_scoped_worker_reconnecting_resumes_its_leases(leader):
    job = await leader.create_job("long", tenant="globex")
    run_id = await leader.run_now(job)
    first = Conn(leader, "long-1", principal=_scoped("t2", "globex"))
    await first.wait("welcome")
    first.stream.send(credits=worker_pb2.Credits(credits=1))
    [assign] = await first.wait("assign")
    await first.end()
    again = Conn(leader, "long-1", principal=_scoped("t2", "globex"),
                 held=[assign.lease.fencing_token])
    [welcome] = await again.wait("welcome")
    assert list(welcome.resumed_tokens) == [assign.lease.fencing_token]
    again.stream.send(heartbeat=worker_pb2.Heartbeat(leases=[assign.lease]))
    [ack] = await again.wait("heartbeat_ack")
    assert list(ack.valid_tokens) == [assign.lease.fencing_token] and not ack.revoked_tokens
    again.stream.send(complete=worker_pb2.Complete(lease=assign.lease, result=b"done"))
    [report] = await again.wait("report_ack")
    assert report.accepted and leader.inst(run_id).state == TaskState.SUCCEEDED
    await again.end()


async def test_an_admin_worker_may_not_take_a_scoped_id(leader):
    conn = Conn(leader, "t2:long-1")
    await conn.end()
    assert conn.context.aborted.code == grpc.StatusCode.INVALID_ARGUMENT
    assert conn.context.aborted.details.startswith("worker_id: 't2:long-1' has the form of a "
                                                   "token-scoped id")
    assert _session(leader, "t2:long-1") is None
