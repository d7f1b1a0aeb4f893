"""Worker ids are scoped by the caller's token, on every lookup, against a real secure cluster
(mutual TLS, --admin-token-file): one tenant's worker cannot end another tenant's leases by
naming its worker, a tenant's worker that reconnects resumes its own leases, and an admin
worker cannot take an id of the token-scoped form.

The leader's session id of a worker with a tenant-scoped token is "<token id>:<Hello id>".
Before, the Hello's expiry of "the leases its worker no longer lists" and its resumption of the
listed ones looked up the raw Hello id: tenant A's worker saying Hello as "t2:long-1" with
nothing held ended tenant B's lease (B's next heartbeat ack revoked it, the attempt ended
"lease expired"), and B's own reconnect resumed nothing.
"""

from __future__ import annotations

import grpc
import pytest

from gnomon.node.local.cluster import LocalCluster, wait_for
from gnomon.v1 import api_pb2, api_pb2_grpc, types_pb2, worker_pb2, worker_pb2_grpc
from tests.support.cluster import RawWorker, module_cluster

pytestmark = pytest.mark.integration

HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    with module_cluster(tmp_path_factory.mktemp("worker-ids"), request=request, secure=True) as c:
        yield c


class World:
    """Admin stubs, a worker token per tenant (acme, globex) and raw workers on TLS."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        files = cluster.client_tls()
        self.creds = grpc.ssl_channel_credentials(*(open(files[k], "rb").read()
                                                    for k in ("ca_file", "key_file",
                                                              "cert_file")))
        self.admin_md = (("authorization", f"Bearer {cluster.admin_token()}"),)
        channel = grpc.secure_channel(cluster.leader().grpc_addr, self.creds)
        self.jobs = api_pb2_grpc.JobServiceStub(channel)
        access = api_pb2_grpc.AccessServiceStub(channel)
        self.tokens: dict[str, tuple[str, str]] = {}  # tenant -> (token id, secret)
        for tenant in ("acme", "globex"):
            made = access.CreateToken(api_pb2.CreateTokenRequest(
                request_id=f"worker-{tenant}", name=f"{tenant}-worker", role="worker",
                tenants=[tenant]), metadata=self.admin_md, timeout=10)
            self.tokens[tenant] = (made.token.token_id, made.secret)
        self._jobs = 0

    def worker(self, who: str, worker_id: str, queue: str, held=()) -> RawWorker:
        """A raw worker as tenant `who` ("admin": the bootstrap admin token)."""
        md = self.admin_md if who == "admin" else \
            (("authorization", f"Bearer {self.tokens[who][1]}"),)
        leader = self.cluster.leader()
        return RawWorker(leader, worker_id, (queue,), metadata=md, held=held,
                         channel=grpc.secure_channel(leader.grpc_addr, self.creds))

    def run(self, tenant: str, queue: str) -> str:
        """A new job of `tenant` on `queue` (hourly: it runs when triggered), triggered."""
        self._jobs += 1
        spec = types_pb2.JobSpec(
            name=f"long-{self._jobs}", tenant=tenant,
            schedule=types_pb2.Schedule(interval=types_pb2.IntervalSchedule(interval_ms=HOUR_MS)),
            tasks=[types_pb2.TaskSpec(name="main", queue=queue)])
        job = self.jobs.CreateJob(api_pb2.CreateJobRequest(
            request_id=f"job-{self._jobs}", spec=spec), metadata=self.admin_md, timeout=10).job
        return self.jobs.TriggerJob(api_pb2.TriggerJobRequest(
            request_id=f"trigger-{self._jobs}", job=api_pb2.JobRef(job_id=job.job_id)),
            metadata=self.admin_md, timeout=10).run.run_id

    def task(self, run_id: str) -> types_pb2.TaskInstance:
        return self.jobs.GetRun(api_pb2.GetRunRequest(run_id=run_id), metadata=self.admin_md,
                                timeout=10).run.tasks[0]


@pytest.fixture(scope="module")
def world(cluster) -> World:
    return World(cluster)


def _leased(task) -> bool:
    return task.state == types_pb2.TASK_STATE_LEASED


def test_a_tenants_worker_cannot_end_another_tenants_leases(world):
    run_b = world.run("globex", "q-iso")
    b = world.worker("globex", "long-1", "q-iso")
    b.credits(1)
    lease = b.next("assign").lease
    # A lease of an admin worker, ended below by its own Hello: the sign that the leader's
    # expiry round after the attacker's Hellos has run (same expiry path, same round or later).
    run_x = world.run("acme", "q-barrier")
    barrier = world.worker("admin", "barrier-1", "q-barrier")
    barrier.credits(1)
    barrier.next("assign")
    barrier.close()

    # Tenant acme's worker names globex's worker by every scoped id it might have, holding
    # nothing: each Hello is welcomed (as acme's own "t<acme>:t<n>:long-1").
    for n in range(1, 31):
        attacker = world.worker("acme", f"t{n}:long-1", "q-iso")
        assert list(attacker.welcome.resumed_tokens) == []
        attacker.close()
    again = world.worker("admin", "barrier-1", "q-barrier")  # holds nothing: ends run_x's lease
    wait_for(lambda: not _leased(world.task(run_x)), timeout_s=30,
             what="the barrier's lease to end")
    again.close()

    b.heartbeat([lease])
    ack = b.next("heartbeat_ack")
    assert (list(ack.valid_tokens), list(ack.revoked_tokens)) == ([lease.fencing_token], [])
    task = world.task(run_b)
    assert _leased(task) and task.fencing_token == lease.fencing_token
    b.complete(lease)
    assert b.next("report_ack").accepted
    b.close()


def test_a_tenants_worker_reconnecting_resumes_its_leases(world):
    run_id = world.run("globex", "q-resume")
    first = world.worker("globex", "long-2", "q-resume")
    first.credits(1)
    lease = first.next("assign").lease
    first.close()
    again = world.worker("globex", "long-2", "q-resume", held=[lease])
    assert list(again.welcome.resumed_tokens) == [lease.fencing_token]
    # Another tenant's worker under the same Hello id, listing that lease: not its lease.
    other = world.worker("acme", "long-2", "q-resume", held=[lease])
    assert list(other.welcome.resumed_tokens) == []
    other.heartbeat([lease])
    assert list(other.next("heartbeat_ack").revoked_tokens) == [lease.fencing_token]
    other.close()
    again.heartbeat([lease])
    ack = again.next("heartbeat_ack")
    assert (list(ack.valid_tokens), list(ack.revoked_tokens)) == ([lease.fencing_token], [])
    again.complete(lease)
    assert again.next("report_ack").accepted
    task = world.task(run_id)
    assert task.state == types_pb2.TASK_STATE_SUCCEEDED and len(task.attempts) == 1
    again.close()


def test_an_admin_worker_cannot_take_a_token_scoped_id(world):
    token_id = world.tokens["globex"][0]
    leader = world.cluster.leader()
    call = worker_pb2_grpc.WorkerServiceStub(grpc.secure_channel(
        leader.grpc_addr, world.creds)).Connect(iter([worker_pb2.WorkerMessage(
            hello=worker_pb2.Hello(worker_id=f"{token_id}:long-1"))]),
        metadata=world.admin_md, timeout=10)
    with pytest.raises(grpc.RpcError) as refused:
        list(call)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "has the form of a token-scoped id" in refused.value.details()
