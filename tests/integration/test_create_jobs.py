"""CreateJobs (bulk create) against real nodes: per-item results (bad specs, taken names and
a tenant's quota fail alone and name `specs[i].field`), the size bound, one request id per
call, the SDK's `create_jobs` over several calls, and `gnomon job import` using it."""

from __future__ import annotations

import json

import grpc
import pytest
import yaml

from gnomon.client import AlreadyExists, Client, InvalidArgument, JobSpec, OnceSchedule, TaskSpec
from gnomon.v1 import api_pb2, types_pb2
from tests.support.cluster import cli, module_cluster
from tests.support.jobs import FAR_FUTURE_MS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

MAX_SPECS = 50
QUOTA = 40


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    with module_cluster(tmp_path_factory.mktemp("bulk"), {
            "create_jobs_max_specs": str(MAX_SPECS), "max_jobs_per_tenant": str(QUOTA)},
            request=request) as c:
        yield c


def _spec(name: str, tenant: str, **task) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        name=name, tenant=tenant,
        schedule=types_pb2.Schedule(once=types_pb2.OnceSchedule(at_ms=FAR_FUTURE_MS)),
        tasks=[types_pb2.TaskSpec(name="main", **task)])


def _bulk(node, specs, request_id: str = "") -> api_pb2.CreateJobsResponse:
    return node.jobs().CreateJobs(api_pb2.CreateJobsRequest(request_id=request_id, specs=specs),
                                  timeout=10)


def _names(node, tenant: str) -> list[str]:
    jobs = node.jobs().ListJobs(api_pb2.ListJobsRequest(tenant=tenant, limit=1000), timeout=5)
    return sorted(j.spec.name for j in jobs.jobs)


def test_each_spec_succeeds_or_fails_alone_and_names_its_index(cluster):
    leader = cluster.leader()
    cyclic = _spec("cyclic", "t-mixed")
    cyclic.tasks[0].depends_on.append("main")
    specs = [_spec("a", "t-mixed"), _spec("bad name!", "t-mixed"), _spec("b", "t-mixed"),
             _spec("a", "t-mixed"), cyclic, _spec("c", "t-mixed")]
    resp = _bulk(leader, specs)
    kinds = [r.WhichOneof("result") for r in resp.results]
    assert kinds == ["job", "error", "job", "error", "error", "job"]
    assert resp.results[1].error.code == "INVALID_ARGUMENT"
    assert resp.results[1].error.message.startswith("specs[1].name: ")
    assert resp.results[3].error.code == "ALREADY_EXISTS"
    assert resp.results[3].error.message.startswith("specs[3].name: tenant 't-mixed' already")
    assert resp.results[4].error.code == "INVALID_ARGUMENT"
    assert resp.results[4].error.message.startswith("specs[4].")
    created = [r.job for r in resp.results if r.HasField("job")]
    assert [j.spec.name for j in created] == ["a", "b", "c"]
    assert all(j.version == 1 and j.next_fire_ms == FAR_FUTURE_MS for j in created)
    assert _names(leader, "t-mixed") == ["a", "b", "c"]


@pytest.mark.parametrize("count, fragment", [(0, "specs: 0 specs"),
                                             (MAX_SPECS + 1, f"specs: {MAX_SPECS + 1} specs")])
def test_an_empty_or_oversized_call_is_refused_whole(cluster, count, fragment):
    leader = cluster.leader()
    with pytest.raises(grpc.RpcError) as err:
        _bulk(leader, [_spec(f"n{i}", "t-size") for i in range(count)])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert fragment in err.value.details() and "create_jobs_max_specs" in err.value.details()
    assert _names(leader, "t-size") == []


def test_one_request_id_makes_a_retry_one_effect(cluster):
    leader = cluster.leader()
    specs = [_spec(f"r{i}", "t-retry") for i in range(5)]
    first = _bulk(leader, specs, request_id="bulk-retry-1")
    again = _bulk(leader, specs, request_id="bulk-retry-1")
    assert [r.job.job_id for r in again.results] == [r.job.job_id for r in first.results]
    assert all(r.HasField("job") for r in again.results)  # not ALREADY_EXISTS: deduplicated
    assert _names(leader, "t-retry") == [f"r{i}" for i in range(5)]
    with pytest.raises(grpc.RpcError) as err:  # the id of another request: refused
        _bulk(leader, specs[:2], request_id="bulk-retry-1")
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "request_id" in err.value.details()


def test_the_items_past_a_tenants_quota_fail_and_the_others_succeed(cluster):
    leader = cluster.leader()
    specs = [_spec(f"q{i}", "t-quota") for i in range(QUOTA + 3)][:MAX_SPECS]
    specs.insert(QUOTA + 1, _spec("other", "t-quota-b"))
    resp = _bulk(leader, specs)
    codes = [r.error.code if r.HasField("error") else "ok" for r in resp.results]
    assert codes[:QUOTA] == ["ok"] * QUOTA
    assert codes[QUOTA:] == ["RESOURCE_EXHAUSTED", "ok", "RESOURCE_EXHAUSTED",
                             "RESOURCE_EXHAUSTED"]
    assert resp.results[QUOTA].error.message.startswith(f"specs[{QUOTA}].tenant: ")
    assert len(_names(leader, "t-quota")) == QUOTA and _names(leader, "t-quota-b") == ["other"]


def test_a_follower_redirects_a_bulk_write(cluster):
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes if n is not leader)
    with pytest.raises(grpc.RpcError) as err:
        _bulk(follower, [_spec("f", "t-follower")])
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert _names(leader, "t-follower") == []


def _sdk_spec(name: str, tenant: str) -> JobSpec:
    return JobSpec(name=name, tenant=tenant, schedule=OnceSchedule(at_ms=FAR_FUTURE_MS),
                   tasks=[TaskSpec(name="main", queue="q")])


def test_sdk_create_jobs_spans_calls_and_returns_typed_results(cluster):
    progress: list[tuple[int, int]] = []
    with Client(cluster.servers) as client:
        client.create_job(_sdk_spec("s7", "t-sdk"))
        specs = [_sdk_spec(f"s{i}", "t-sdk") for i in range(30)]
        specs.append(_sdk_spec("bad name!", "t-sdk-b"))
        results = client.create_jobs(specs, batch_size=12, request_id="sdk-bulk",
                                     progress=lambda d, t: progress.append((d, t)))
    assert progress == [(12, 31), (24, 31), (31, 31)]
    assert [r.index for r in results] == list(range(31))
    assert [r.ok for r in results] == [i != 7 for i in range(30)] + [False]
    assert isinstance(results[7].error, AlreadyExists)
    assert str(results[7].error).startswith("specs[7].name: ")
    assert isinstance(results[30].error, InvalidArgument)
    assert str(results[30].error).startswith("specs[30].name: ")  # renumbered from specs[6]
    assert results[0].job.name == "s0" and results[0].job.tenant == "t-sdk"


def test_cli_import_of_many_documents_creates_them_in_bulk(cluster):
    # Three tenants of 40 jobs each: the module's quota (QUOTA) per tenant.
    docs = [{"name": f"imp-{i}", "tenant": f"t-import{i % 3}", "schedule": {"at_ms": FAR_FUTURE_MS},
             "tasks": [{"name": "main", "queue": "q"}]} for i in range(120)]
    text = yaml.safe_dump_all(docs, sort_keys=False)
    code, out, err = cli("-s", cluster.servers, "--json", "job", "import", "--batch-size",
                         str(MAX_SPECS), "-", stdin=text)
    assert code == 0, out + err
    assert "created 50 of 120 jobs" in err and "created 120 of 120 jobs" in err
    result = json.loads(out)
    assert sorted(result["created"]) == sorted(f"t-import{i % 3}/imp-{i}" for i in range(120))
    code, out, err = cli("-s", cluster.servers, "--json", "job", "import", "-", stdin=text)
    assert code == 0, err
    assert len(json.loads(out)["unchanged"]) == 120
