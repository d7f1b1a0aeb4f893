"""Authentication and authorization on a real secure cluster (mutual TLS, --admin-token-file).

Missing, malformed, unknown, expired and revoked tokens are UNAUTHENTICATED; every role
across tenants is PERMISSION_DENIED; a worker of tenant A never receives or reports a task
of tenant B. Each refusal changes nothing (the jobs and tokens are the same afterwards).
"""

from __future__ import annotations

import time

import grpc
import pytest

from gnomon.node.local.cluster import LocalCluster, wait_for
from gnomon.v1 import api_pb2, api_pb2_grpc, types_pb2
from tests.support.cluster import RawWorker, module_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    with module_cluster(tmp_path_factory.mktemp("auth"), request=request, secure=True) as c:
        yield c


def _client_creds(cluster: LocalCluster) -> grpc.ChannelCredentials:
    """The CA and the client certificate of the secure cluster, as channel credentials."""
    files = cluster.client_tls()
    return grpc.ssl_channel_credentials(*(open(files[k], "rb").read()
                                          for k in ("ca_file", "key_file", "cert_file")))


class Caller:
    """Raw stubs on a TLS channel that carries one token (or none, or a raw header)."""

    def __init__(self, cluster: LocalCluster, token: str | None = None, header: str | None = None):
        creds = _client_creds(cluster)
        self.channel = grpc.secure_channel(cluster.leader().grpc_addr, creds)
        auth = header if header is not None else (f"Bearer {token}" if token else None)
        self.metadata = (("authorization", auth),) if auth else ()
        self.jobs = api_pb2_grpc.JobServiceStub(self.channel)
        self.access = api_pb2_grpc.AccessServiceStub(self.channel)
        self.cluster = api_pb2_grpc.ClusterServiceStub(self.channel)

    def call(self, stub, method: str, request):
        return getattr(stub, method)(request, metadata=self.metadata, timeout=10)

    def code(self, stub, method: str, request) -> grpc.StatusCode:
        try:
            self.call(stub, method, request)
        except grpc.RpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK


def _spec(name: str, tenant: str, queue: str = "q") -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        name=name, tenant=tenant,
        schedule=types_pb2.Schedule(interval=types_pb2.IntervalSchedule(interval_ms=3_600_000)),
        tasks=[types_pb2.TaskSpec(name="main", queue=queue)])


@pytest.fixture(scope="module")
def world(cluster):
    """Two tenants with a job each, and a token of every role for acme."""
    admin = Caller(cluster, cluster.admin_token())
    jobs = {}
    for tenant in ("acme", "globex"):
        reply = admin.call(admin.jobs, "CreateJob", api_pb2.CreateJobRequest(
            request_id=f"job-{tenant}", spec=_spec(f"nightly-{tenant}", tenant)))
        jobs[tenant] = reply.job.job_id
    tokens = {}
    for role in ("tenant-admin", "tenant-writer", "tenant-reader", "worker"):
        for tenant in ("acme", "globex"):
            reply = admin.call(admin.access, "CreateToken", api_pb2.CreateTokenRequest(
                request_id=f"tok-{role}-{tenant}", name=f"{tenant}-{role}", role=role,
                tenants=[tenant]))
            tokens[(role, tenant)] = reply.secret
    return {"admin": admin, "jobs": jobs, "tokens": tokens}


def _snapshot(world) -> tuple:
    admin = world["admin"]
    jobs = admin.call(admin.jobs, "ListJobs", api_pb2.ListJobsRequest(limit=1000))
    tokens = admin.call(admin.access, "ListTokens", api_pb2.ListTokensRequest(
        include_inactive=True))
    return (sorted((j.job_id, j.version, j.paused) for j in jobs.jobs),
            sorted((t.token_id, t.revoked_ms) for t in tokens.tokens))


@pytest.mark.parametrize("header", [None, "", "Basic abc", "Bearer", "Bearer not-a-token"])
def test_missing_malformed_and_unknown_tokens(cluster, world, header):
    before = _snapshot(world)
    caller = Caller(cluster, header=header)
    for stub, method, request in [
        (caller.jobs, "ListJobs", api_pb2.ListJobsRequest()),
        (caller.jobs, "CreateJob", api_pb2.CreateJobRequest(request_id="x",
                                                            spec=_spec("x", "acme"))),
        (caller.cluster, "GetStatus", api_pb2.GetStatusRequest()),
        (caller.access, "CreateToken", api_pb2.CreateTokenRequest(
            request_id="y", name="y", role="admin")),
    ]:
        assert caller.code(stub, method, request) == grpc.StatusCode.UNAUTHENTICATED
    assert _snapshot(world) == before


def test_expired_and_revoked_tokens(cluster, world):
    admin = world["admin"]
    soon = int(time.time() * 1000) + 1500
    expiring = admin.call(admin.access, "CreateToken", api_pb2.CreateTokenRequest(
        request_id="tok-exp", name="short", role="tenant-reader", tenants=["acme"],
        expires_ms=soon))
    revoked = admin.call(admin.access, "CreateToken", api_pb2.CreateTokenRequest(
        request_id="tok-rev", name="gone", role="tenant-reader", tenants=["acme"]))
    short, gone = Caller(cluster, expiring.secret), Caller(cluster, revoked.secret)
    request = api_pb2.ListJobsRequest(tenant="acme")
    assert short.code(short.jobs, "ListJobs", request) == grpc.StatusCode.OK
    assert gone.code(gone.jobs, "ListJobs", request) == grpc.StatusCode.OK
    admin.call(admin.access, "RevokeToken", api_pb2.RevokeTokenRequest(
        request_id="rev-1", token_id=revoked.token.token_id))
    # Revocation is a committed command: every node refuses the token from then on.
    for node in cluster.nodes:
        creds = _client_creds(cluster)
        stub = api_pb2_grpc.JobServiceStub(grpc.secure_channel(node.grpc_addr, creds))

        def refused(stub=stub):
            try:
                stub.ListJobs(request, metadata=gone.metadata, timeout=5)
            except grpc.RpcError as exc:
                return exc.code() == grpc.StatusCode.UNAUTHENTICATED
            return False

        wait_for(refused, timeout_s=10, what=f"{node.node_id} to refuse the revoked token")
    wait_for(lambda: short.code(short.jobs, "ListJobs", request)
             == grpc.StatusCode.UNAUTHENTICATED, timeout_s=10, what="the token to expire")


def _cross_tenant_requests(world):
    """Every JobService call, aimed at globex."""
    job = api_pb2.JobRef(job_id=world["jobs"]["globex"])
    run_id = f"{world['jobs']['globex']}@1"
    return [
        ("CreateJob", api_pb2.CreateJobRequest(request_id="c", spec=_spec("c", "globex"))),
        ("GetJob", api_pb2.GetJobRequest(job=job)),
        ("GetJob", api_pb2.GetJobRequest(job=api_pb2.JobRef(tenant="globex",
                                                            name="nightly-globex"))),
        ("ListJobs", api_pb2.ListJobsRequest(tenant="globex")),
        ("UpdateJob", api_pb2.UpdateJobRequest(request_id="u", job=job,
                                               spec=_spec("nightly-globex", "globex"))),
        ("DeleteJob", api_pb2.DeleteJobRequest(request_id="d", job=job)),
        ("PauseJob", api_pb2.PauseJobRequest(request_id="p", job=job)),
        ("ResumeJob", api_pb2.ResumeJobRequest(request_id="r", job=job)),
        ("TriggerJob", api_pb2.TriggerJobRequest(request_id="t", job=job)),
        ("GetRun", api_pb2.GetRunRequest(run_id=run_id)),
        ("ExplainRun", api_pb2.ExplainRunRequest(run_id=run_id)),
        ("DiscardDeadLetters", api_pb2.DiscardDeadLettersRequest(
            request_id="dd", tasks=[api_pb2.TaskRef(run_id=run_id, task_name="main")])),
        ("ListRuns", api_pb2.ListRunsRequest(job=job)),
        ("CancelRun", api_pb2.CancelRunRequest(request_id="cr", run_id=run_id)),
        ("ListDeadLetters", api_pb2.ListDeadLettersRequest(tenant="globex")),
        ("ReplayDeadLetters", api_pb2.ReplayDeadLettersRequest(request_id="rd",
                                                               tenant="globex", all=True)),
    ]


@pytest.mark.parametrize("role", ["tenant-admin", "tenant-writer", "tenant-reader", "worker"])
def test_every_job_call_across_tenants_is_denied(cluster, world, role):
    before = _snapshot(world)
    caller = Caller(cluster, world["tokens"][(role, "acme")])
    for method, request in _cross_tenant_requests(world):
        assert caller.code(caller.jobs, method, request) == grpc.StatusCode.PERMISSION_DENIED, \
            f"{role} {method}"
    assert _snapshot(world) == before


@pytest.mark.parametrize(("role", "allowed"), [
    ("tenant-admin", {"GetJob", "ListJobs", "PauseJob", "ResumeJob", "DeleteJob"}),
    ("tenant-writer", {"GetJob", "ListJobs", "PauseJob", "ResumeJob"}),
    ("tenant-reader", {"GetJob", "ListJobs"}),
    ("worker", set()),
])
def test_roles_within_the_tenant(cluster, world, role, allowed):
    caller = Caller(cluster, world["tokens"][(role, "acme")])
    job = api_pb2.JobRef(tenant="acme", name="nightly-acme")
    calls = {
        "GetJob": api_pb2.GetJobRequest(job=job),
        "ListJobs": api_pb2.ListJobsRequest(),  # the token's one tenant is filled in
        "PauseJob": api_pb2.PauseJobRequest(request_id=f"p-{role}", job=job),
        "ResumeJob": api_pb2.ResumeJobRequest(request_id=f"r-{role}", job=job),
    }
    for method, request in calls.items():
        code = caller.code(caller.jobs, method, request)
        want = grpc.StatusCode.OK if method in allowed else grpc.StatusCode.PERMISSION_DENIED
        assert code == want, f"{role} {method}: {code}"
    # Delete is tenant-admin's; try it on a job made for the purpose.
    admin = world["admin"]
    made = admin.call(admin.jobs, "CreateJob", api_pb2.CreateJobRequest(
        request_id=f"del-{role}", spec=_spec(f"doomed-{role}", "acme")))
    code = caller.code(caller.jobs, "DeleteJob", api_pb2.DeleteJobRequest(
        request_id=f"d-{role}", job=api_pb2.JobRef(job_id=made.job.job_id)))
    want = grpc.StatusCode.OK if "DeleteJob" in allowed else grpc.StatusCode.PERMISSION_DENIED
    assert code == want


def test_only_admins_run_the_cluster(cluster, world):
    for role in ("tenant-admin", "tenant-writer", "tenant-reader", "worker"):
        caller = Caller(cluster, world["tokens"][(role, "acme")])
        assert caller.code(caller.cluster, "SetLimits", api_pb2.SetLimitsRequest(
            request_id=f"sl-{role}")) == grpc.StatusCode.PERMISSION_DENIED
        assert caller.code(caller.cluster, "GetStatus", api_pb2.GetStatusRequest()) \
            == grpc.StatusCode.OK
        who = caller.call(caller.access, "WhoAmI", api_pb2.WhoAmIRequest())
        assert (who.role, list(who.tenants), who.authentication_required) == \
            (role, ["acme"], True)


def test_tenant_admin_manages_its_own_tenant_tokens_only(cluster, world):
    before = _snapshot(world)
    ta = Caller(cluster, world["tokens"][("tenant-admin", "acme")])

    def create(role, tenants, rid):
        return ta.code(ta.access, "CreateToken", api_pb2.CreateTokenRequest(
            request_id=rid, name=rid, role=role, tenants=tenants))

    assert create("admin", [], "ta-1") == grpc.StatusCode.PERMISSION_DENIED
    assert create("tenant-admin", ["acme"], "ta-2") == grpc.StatusCode.PERMISSION_DENIED
    assert create("tenant-writer", ["globex"], "ta-3") == grpc.StatusCode.PERMISSION_DENIED
    assert _snapshot(world) == before
    assert create("tenant-writer", ["acme"], "ta-4") == grpc.StatusCode.OK
    listed = ta.call(ta.access, "ListTokens", api_pb2.ListTokensRequest())
    assert listed.tokens and all(list(t.tenants) == ["acme"] for t in listed.tokens)
    globex_writer = next(t for t in world["admin"].call(
        world["admin"].access, "ListTokens", api_pb2.ListTokensRequest()).tokens
        if t.name == "globex-tenant-writer")
    assert ta.code(ta.access, "RevokeToken", api_pb2.RevokeTokenRequest(
        request_id="ta-5", token_id=globex_writer.token_id)) == grpc.StatusCode.PERMISSION_DENIED


def test_a_worker_takes_and_reports_only_its_tenants_tasks(cluster, world):
    admin = world["admin"]
    leader = cluster.leader()
    creds = _client_creds(cluster)

    def worker(tenant: str) -> RawWorker:
        token = world["tokens"][("worker", tenant)]
        return RawWorker(leader, f"w-{tenant}", ("q",),
                         channel=grpc.secure_channel(leader.grpc_addr, creds),
                         metadata=(("authorization", f"Bearer {token}"),))

    runs = {}
    for tenant in ("globex", "acme"):
        reply = admin.call(admin.jobs, "TriggerJob", api_pb2.TriggerJobRequest(
            request_id=f"trig-{tenant}", job=api_pb2.JobRef(job_id=world["jobs"][tenant])))
        runs[tenant] = reply.run.run_id
    acme = worker("acme")
    acme.credits(10)
    assign = acme.next("assign")
    assert assign.lease.run_id == runs["acme"]
    globex = worker("globex")
    # globex's worker reporting acme's lease (right token and all): refused, nothing recorded.
    globex.complete(assign.lease)
    ack = globex.next("report_ack")
    assert not ack.accepted and ack.reason == "NOT_YOURS"
    globex.credits(10)
    other = globex.next("assign")
    assert other.lease.run_id == runs["globex"]
    acme.complete(assign.lease)
    assert acme.next("report_ack").accepted
    run = admin.call(admin.jobs, "GetRun", api_pb2.GetRunRequest(run_id=runs["acme"]))
    assert run.run.tasks[0].attempts[-1].worker_id.startswith("t")  # namespaced by its token
    globex.complete(other.lease)
    assert globex.next("report_ack").accepted
    acme.close()
    globex.close()


def test_cli_token_lifecycle_and_sdk(cluster, tmp_path):
    import io
    import json

    from gnomon.client import Client, TLSConfig, Unauthenticated
    from gnomon.client.cli import main as cli_main

    files = cluster.client_tls()
    base = ["-s", cluster.servers, "--ca", files["ca_file"], "--cert", files["cert_file"],
            "--key", files["key_file"]]

    def run(*words: str, token_file: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = cli_main([*words, *base, "--token-file", token_file], stdout=out, stderr=err)
        return code, out.getvalue(), err.getvalue()

    admin_file = str(cluster.root / "tls" / "admin.token")
    secret_file = tmp_path / "ci.token"
    code, out, err = run("token", "create", "ci", "--role", "tenant-writer", "--tenant", "acme",
                         "--expires-in", "1d", "--secret-file", str(secret_file),
                         token_file=admin_file)
    assert code == 0, err
    assert (secret_file.stat().st_mode & 0o777) == 0o600 and "written to" in out
    code, out, _ = run("whoami", "--json", token_file=str(secret_file))
    assert code == 0 and json.loads(out)["tenants"] == ["acme"]
    code, out, _ = run("token", "list", token_file=admin_file)
    assert code == 0 and "ci" in out and "tenant-writer" in out
    token_id = next(line.split()[0] for line in out.splitlines() if " ci " in f" {line} ")
    code, out, _ = run("token", "revoke", token_id, token_file=admin_file)
    assert code == 0 and "revoked" in out
    code, _, err = run("whoami", token_file=str(secret_file))
    assert code == 1 and "unauthenticated" in err
    with Client(cluster.servers, tls=TLSConfig(**files), token=secret_file.read_text(),
                retries=0) as client, pytest.raises(Unauthenticated):
        client.whoami()


def test_nodes_reach_each_other_with_their_certificate_and_the_admin_token(cluster):
    """History backfill dials a peer's gRPC port as the node does (node/grpc_tls.peer_channel)."""
    import asyncio

    from gnomon.node.config import Config, Member
    from gnomon.node.security import grpc_tls

    node = cluster.nodes[0]
    files = cluster.tls_files()[node.node_id]
    config = Config(node_id=node.node_id,
                    members=tuple(Member(n.node_id, n.raft_addr, n.grpc_addr)
                                  for n in cluster.nodes),
                    raft_tls_cert=str(files.cert), raft_tls_key=str(files.key),
                    raft_tls_ca=str(files.ca), tls_cert=str(files.cert), tls_key=str(files.key),
                    admin_token_file=str(cluster.root / "tls" / "admin.token"))

    async def export(dial) -> int:
        async with dial(cluster.nodes[1].grpc_addr) as channel:
            call = api_pb2_grpc.ClusterServiceStub(channel).ExportHistory(
                api_pb2.ExportHistoryRequest(page_runs=10), timeout=10)
            return len([page async for page in call])

    assert asyncio.run(export(grpc_tls.peer_channel(config))) >= 1
    without_token = Config(**{**config.__dict__, "admin_token_file": ""})
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        asyncio.run(export(grpc_tls.peer_channel(without_token)))
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_audit_log_records_administrative_actions_on_every_node(cluster, world):
    """Who did what when, as committed commands: every node's history store has them."""
    admin = world["admin"]
    admin.call(admin.access, "CreateTenant", api_pb2.SetTenantRequest(
        request_id="audit-tenant", tenant=types_pb2.Tenant(name="audited", weight=2)))
    ta = Caller(cluster, world["tokens"][("tenant-admin", "acme")])
    assert ta.code(ta.access, "ListAudit", api_pb2.ListAuditRequest()) == \
        grpc.StatusCode.PERMISSION_DENIED
    creds = _client_creds(cluster)
    for node in cluster.nodes:
        stub = api_pb2_grpc.AccessServiceStub(grpc.secure_channel(node.grpc_addr, creds))

        def recorded(stub=stub):
            entries = stub.ListAudit(api_pb2.ListAuditRequest(limit=1000),
                                     metadata=admin.metadata, timeout=5).entries
            return [e for e in entries if e.action == "AccessService.CreateTenant"
                    and '"audited"' in e.detail]

        found = wait_for(recorded, timeout_s=15, what=f"the audit entry on {node.node_id}")
        assert found[0].actor.startswith("admin (admin")
        tokens = stub.ListAudit(api_pb2.ListAuditRequest(limit=1000), metadata=admin.metadata,
                                timeout=5).entries
        created = [e for e in tokens if e.action == "AccessService.CreateToken"]
        assert created and all("secret" not in e.detail for e in created)


def test_a_client_certificate_may_stand_for_a_token(cluster, world, tmp_path):
    """Mutual TLS: a certificate whose common name a token names authenticates without a
    bearer token; revoking the token ends it; an unknown common name is UNAUTHENTICATED."""
    from gnomon.node.security import certificates as tls_mod

    admin = world["admin"]
    made = admin.call(admin.access, "CreateToken", api_pb2.CreateTokenRequest(
        request_id="tok-cert", name="ci-bot", role="tenant-reader", tenants=["acme"],
        cert_subject="ci-bot.acme"))
    assert made.token.cert_subject == "ci-bot.acme"
    ca = tls_mod._load_ca(cluster.root / "tls" / "ca.crt", cluster.root / "tls" / "ca.key")

    def channel_for(common_name: str) -> grpc.Channel:
        cert, key = tls_mod.issue(ca, common_name, server=False)
        tls_mod.write_cert(tmp_path / f"{common_name}.crt", cert)
        tls_mod.write_key(tmp_path / f"{common_name}.key", key)
        creds = grpc.ssl_channel_credentials(
            (cluster.root / "tls" / "ca.crt").read_bytes(),
            (tmp_path / f"{common_name}.key").read_bytes(),
            (tmp_path / f"{common_name}.crt").read_bytes())
        return grpc.secure_channel(cluster.leader().grpc_addr, creds)

    bot = api_pb2_grpc.AccessServiceStub(channel_for("ci-bot.acme"))
    who = bot.WhoAmI(api_pb2.WhoAmIRequest(), timeout=10)
    assert (who.name, who.role, list(who.tenants)) == ("ci-bot", "tenant-reader", ["acme"])
    jobs = api_pb2_grpc.JobServiceStub(channel_for("ci-bot.acme"))
    with pytest.raises(grpc.RpcError) as denied:
        jobs.ListJobs(api_pb2.ListJobsRequest(tenant="globex"), timeout=10)
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    stranger = api_pb2_grpc.AccessServiceStub(channel_for("stranger"))
    with pytest.raises(grpc.RpcError) as refused:
        stranger.WhoAmI(api_pb2.WhoAmIRequest(), timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    admin.call(admin.access, "RevokeToken", api_pb2.RevokeTokenRequest(
        request_id="rev-cert", token_id=made.token.token_id))
    with pytest.raises(grpc.RpcError) as revoked:
        bot.WhoAmI(api_pb2.WhoAmIRequest(), timeout=10)
    assert revoked.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_replay_all_replays_only_the_callers_tenants_dead_letters(cluster, world):
    """Seen reading the code: ReplayDeadLetters{all: true} from a single-tenant writer had its
    tenant filled in by the access rule, and then the servicer replayed every tenant's dead
    letters (`all or d.tenant == tenant`)."""
    admin = world["admin"]
    leader = cluster.leader()
    creds = _client_creds(cluster)
    dead = {}
    for tenant in ("acme", "globex"):
        spec = _spec(f"doomed-{tenant}", tenant, queue="doomed")
        spec.tasks[0].retry.max_attempts = 1
        job = admin.call(admin.jobs, "CreateJob", api_pb2.CreateJobRequest(
            request_id=f"doomed-{tenant}", spec=spec)).job
        run = admin.call(admin.jobs, "TriggerJob", api_pb2.TriggerJobRequest(
            request_id=f"doom-{tenant}", job=api_pb2.JobRef(job_id=job.job_id))).run
        token = world["tokens"][("worker", tenant)]
        worker = RawWorker(leader, f"doom-{tenant}", ("doomed",),
                           channel=grpc.secure_channel(leader.grpc_addr, creds),
                           metadata=(("authorization", f"Bearer {token}"),))
        worker.credits(1)
        lease = worker.next("assign").lease
        assert lease.run_id == run.run_id
        worker.fail(lease, "boom", retryable=False)
        assert worker.next("report_ack").accepted
        worker.close()
        dead[tenant] = run.run_id
    listed = admin.call(admin.jobs, "ListDeadLetters", api_pb2.ListDeadLettersRequest())
    assert set(dead.values()) <= {d.run_id for d in listed.dead_letters}
    writer = Caller(cluster, world["tokens"][("tenant-writer", "acme")])
    reply = writer.call(writer.jobs, "ReplayDeadLetters", api_pb2.ReplayDeadLettersRequest(
        request_id="replay-all", all=True))
    assert {t.run_id for t in reply.replayed} == {dead["acme"]}
    left = admin.call(admin.jobs, "ListDeadLetters", api_pb2.ListDeadLettersRequest())
    assert dead["globex"] in {d.run_id for d in left.dead_letters}


def test_tokens_of_a_tenant_are_bounded_and_a_refusal_names_the_limit(cluster, world):
    admin = world["admin"]

    def set_bound(n: int, rid: str) -> None:
        admin.call(admin.cluster, "SetLimits", api_pb2.SetLimitsRequest(
            request_id=rid, limits=types_pb2.ClusterLimits(max_tokens_per_tenant=n)))

    def create(rid: str):
        return admin.call(admin.access, "CreateToken", api_pb2.CreateTokenRequest(
            request_id=rid, name=rid, role="worker", tenants=["initech"]))

    set_bound(2, "bound-2")
    try:
        first, _second = create("initech-1"), create("initech-2")
        before = _snapshot(world)
        with pytest.raises(grpc.RpcError) as err:
            create("initech-3")
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_tokens_per_tenant (2)" in err.value.details()
        assert _snapshot(world) == before
        admin.call(admin.access, "RevokeToken", api_pb2.RevokeTokenRequest(
            request_id="initech-revoke", token_id=first.token.token_id))
        third = create("initech-4")  # the revoked one makes room, and is forgotten
        listed = admin.call(admin.access, "ListTokens", api_pb2.ListTokensRequest(
            include_inactive=True)).tokens
        ids = {t.token_id for t in listed if list(t.tenants) == ["initech"]}
        assert third.token.token_id in ids and first.token.token_id not in ids and len(ids) == 2
    finally:
        set_bound(1_000, "bound-back")
