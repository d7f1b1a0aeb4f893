"""Runs across jobs on a real secure cluster: GET /v1/runs and `gnomon run list` with filters,
a tenant's token that must not see another tenant's runs, and a 400 naming the field.

Jobs are paused and their runs manual triggers with no worker: the runs stay RUNNING (one of
each tenant's is cancelled), so what each filter must answer is known without waiting.
"""

from __future__ import annotations

import http.client
import json
import ssl
from urllib.parse import urlencode

import pytest

from gnomon.client import (
    Client,
    IntervalSchedule,
    JobSpec,
    PermissionDenied,
    TaskSpec,
    TLSConfig,
)
from gnomon.node.api.grpc.run_listing import encode_token
from gnomon.node.core.run_query import RunCursor, RunSort
from tests.support.cluster import cli, module_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    with module_cluster(tmp_path_factory.mktemp("runs"), request=request, secure=True,
                        http=True) as c:
        yield c


def _client(cluster, token: str) -> Client:
    return Client([n.grpc_addr for n in cluster.nodes], tls=TLSConfig(**cluster.client_tls()),
                  token=token)


@pytest.fixture(scope="module")
def world(cluster):
    """acme: job etl (queue gpu, 3 runs, one cancelled); globex: job report (2 runs, one
    cancelled); a tenant-reader token of acme."""
    with _client(cluster, cluster.admin_token()) as admin:
        runs: dict[str, list[str]] = {}
        jobs = {}
        for tenant, name, queue, count in (("acme", "etl", "gpu", 3),
                                            ("globex", "report", "default", 2)):
            job = admin.create_job(JobSpec(
                name, IntervalSchedule(3_600_000), [TaskSpec("main", queue=queue)],
                tenant=tenant, paused=True))
            jobs[tenant] = job.job_id
            runs[tenant] = [admin.trigger_job(job.job_id).run_id for _ in range(count)]
            admin.cancel_run(runs[tenant][0])
        reader = admin.create_token("acme-reader", "tenant-reader", ["acme"]).secret
    return {"jobs": jobs, "runs": runs, "reader": reader, "admin": cluster.admin_token()}


def _get(cluster, path: str, token: str, **query) -> tuple[int, dict]:
    node = cluster.leader()
    files = cluster.client_tls()
    ctx = ssl.create_default_context(cafile=files["ca_file"])
    ctx.load_cert_chain(files["cert_file"], files["key_file"])
    host, port = node.http_addr.split(":")
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=10)
    try:
        conn.request("GET", f"{path}?{urlencode(query, doseq=True)}",
                     headers={"Authorization": f"Bearer {token}"})
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        conn.close()


def _ids(body: dict) -> list[str]:
    return [r["runId"] for r in body["runs"]]


def test_http_filters_sort_and_pages(cluster, world):
    admin, runs = world["admin"], world["runs"]
    status, body = _get(cluster, "/v1/runs", admin)
    assert status == 200 and sorted(_ids(body)) == sorted(runs["acme"] + runs["globex"])
    assert [int(r["createdMs"]) for r in body["runs"]] == sorted(
        (int(r["createdMs"]) for r in body["runs"]), reverse=True)
    status, body = _get(cluster, "/v1/runs", admin, state="cancelled", job=world["jobs"]["acme"])
    assert status == 200 and _ids(body) == [runs["acme"][0]]
    status, body = _get(cluster, "/v1/runs", admin, queue="gpu", state="running",
                        trigger="manual", sort="created_asc")
    assert _ids(body) == runs["acme"][1:]
    status, body = _get(cluster, "/v1/runs", admin, since=4_000_000_000_000, tenant="globex")
    assert status == 200 and body["runs"] == [] and body["nextPageToken"] == ""
    assert _get(cluster, "/v1/runs", admin, late=1)[1]["runs"] == []  # manual: never late
    seen, token = [], ""
    for _ in range(6):
        status, body = _get(cluster, "/v1/runs", admin, limit=2, page_token=token)
        assert status == 200 and len(body["runs"]) <= 2
        seen += _ids(body)
        token = body["nextPageToken"]
        if not token:
            break
    assert sorted(seen) == sorted(runs["acme"] + runs["globex"]) and len(set(seen)) == 5


def test_a_tenant_token_sees_only_its_tenants_runs(cluster, world):
    reader, runs = world["reader"], world["runs"]
    status, body = _get(cluster, "/v1/runs", reader)
    assert status == 200 and sorted(_ids(body)) == sorted(runs["acme"])
    status, body = _get(cluster, "/v1/runs", reader, job=world["jobs"]["globex"])
    assert status == 200 and body["runs"] == []  # another tenant's job: nothing of it
    status, body = _get(cluster, "/v1/runs", reader, tenant="globex")
    assert status == 403 and body["code"] == "PERMISSION_DENIED" and "globex" in body["detail"]
    # A page token forged to name another tenant's run is a position only, never a row.
    forged = encode_token(RunCursor(4_102_444_800_000, runs["globex"][0]), RunSort.CREATED_DESC)
    status, body = _get(cluster, "/v1/runs", reader, page_token=forged)
    assert status == 200 and sorted(_ids(body)) == sorted(runs["acme"])
    with _client(cluster, reader) as client, pytest.raises(PermissionDenied):
        client.list_runs_across_jobs(tenants=["acme", "globex"])


def test_a_tenant_token_sees_only_its_tenants_job_health(cluster, world):
    """ListJobs' health view: the tenant's jobs only; its backlog counts only its tasks."""
    reader, runs, jobs = world["reader"], world["runs"], world["jobs"]
    status, body = _get(cluster, "/v1/jobs", reader, health="true")
    assert status == 200, body
    assert list(body["health"]) == [jobs["acme"]]
    health = body["health"][jobs["acme"]]
    assert [r["runId"] for r in health["recentRuns"]] == runs["acme"]
    [gpu] = health["queues"]
    # Two running runs wait on "gpu" with no worker; the leader answered: workers known.
    assert (gpu["queue"], gpu["ready"], gpu["workers"], gpu["workersKnown"]) == (
        "gpu", "2", 0, True)
    status, body = _get(cluster, "/v1/jobs", reader, health="true", tenant="globex")
    assert status == 403 and body["code"] == "PERMISSION_DENIED"


@pytest.mark.parametrize("query, field, rule", [
    ({"state": "done"}, "state", "is not one of"),
    ({"limit": 1001}, "limit", "between 0 and 1000"),
    ({"since": 5, "until": 5}, "until_ms", "must be after since_ms"),
    ({"page_token": "bogus"}, "page_token", "not a token this call gave out"),
    ({"late_ms": 10}, "late_ms", "only with late"),
    ({"sort": "newest"}, "sort", "is not one of"),
])
def test_bad_values_are_a_400_naming_the_field(cluster, world, query, field, rule):
    status, body = _get(cluster, "/v1/runs", world["admin"], **query)
    assert status == 400, body
    assert body["field"] == field and rule in body["rule"], body


def test_cli_run_list_across_jobs(cluster, world):
    runs = world["runs"]
    files = cluster.client_tls()
    base = ["--server", cluster.leader().grpc_addr, "--ca", files["ca_file"],
            "--cert", files["cert_file"], "--key", files["key_file"]]
    admin_file = str(cluster.root / "tls" / "admin.token")
    code, out, err = cli(*base, "--token-file", admin_file, "--json", "run", "list",
                         "--state", "cancelled", "--since", "1h")
    assert code == 0, err
    assert sorted(r["run_id"] for r in json.loads(out)) == sorted(
        [runs["acme"][0], runs["globex"][0]])
    code, out, err = cli(*base, "--token-file", admin_file, "run", "list", "--queue", "gpu",
                         "--state", "running")
    assert code == 0 and "TENANT" in out and all(r in out for r in runs["acme"][1:]), err
    reader_file = cluster.root / "reader.token"
    reader_file.write_text(world["reader"])
    reader_file.chmod(0o600)
    code, out, err = cli(*base, "--token-file", str(reader_file), "--json", "run", "list")
    assert code == 0, err
    assert sorted(r["run_id"] for r in json.loads(out)) == sorted(runs["acme"])
    code, out, err = cli(*base, "--token-file", str(reader_file), "run", "list",
                         "--tenant", "globex")
    assert code != 0 and "globex" in err
    # a job alone keeps the per-job listing (ListRuns)
    code, out, err = cli(*base, "--token-file", admin_file, "--json", "run", "list",
                         world["jobs"]["acme"])
    assert code == 0 and sorted(r["run_id"] for r in json.loads(out)) == sorted(runs["acme"])


def test_why_a_run_waits_over_the_sdk_and_the_cli(cluster, world):
    """ExplainRun end to end: a running run of acme on queue gpu with no worker; the reader
    of acme may ask, not about globex's run."""
    run_id = world["runs"]["acme"][1]
    with _client(cluster, world["reader"]) as reader:
        run, waits = reader.explain_run(run_id)
        assert run.run_id == run_id
        assert [(w.kind, w.task_name) for w in waits] == [("no_worker", "main")]
        assert "queue gpu for tenant acme" in waits[0].detail
        with pytest.raises(PermissionDenied):
            reader.explain_run(world["runs"]["globex"][1])
    files = cluster.client_tls()
    code, out, err = cli("--server", cluster.leader().grpc_addr, "--ca", files["ca_file"],
                         "--cert", files["cert_file"], "--key", files["key_file"],
                         "--token-file", str(cluster.root / "tls" / "admin.token"),
                         "run", "waits", run_id)
    assert code == 0, err
    assert "WAITS FOR" in out and "no_worker" in out and "--queue gpu" in out
