"""The public API against a real cluster: bad input is refused with the field and the rule
and changes nothing; request ids dedupe; followers redirect to the leader."""

from __future__ import annotations

import grpc
import pytest

from gnomon.node.local.cluster import LocalCluster, wait_for
from gnomon.v1 import api_pb2, types_pb2, worker_pb2
from tests.support.jobs import every_second_job, once_job

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("api"), 3, {"max_payload_bytes": "1024"}).start()
    yield c
    c.stop()


def _cron(expr: str, tz: str = "UTC") -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        name="cron", schedule=types_pb2.Schedule(cron=types_pb2.CronSchedule(expression=expr,
                                                                           timezone=tz)),
        tasks=[types_pb2.TaskSpec(name="main")])


def _state(cluster):
    leader = cluster.leader()
    st = cluster.status(leader)
    jobs = leader.jobs().ListJobs(api_pb2.ListJobsRequest(limit=1000), timeout=5).jobs
    return st.jobs, sorted((j.job_id, j.version) for j in jobs)


def _cycle() -> types_pb2.JobSpec:
    spec = once_job("cyclic")
    del spec.tasks[:]
    spec.tasks.add(name="a", depends_on=["b"])
    spec.tasks.add(name="b", depends_on=["a"])
    return spec


def _missing_dep() -> types_pb2.JobSpec:
    spec = once_job("missing")
    spec.tasks[0].depends_on.append("ghost")
    return spec


BAD_SPECS = [
    (_cron("0 0 * * *", "Mars/Base"), "timezone"),
    (_cron("0 0 30 2 *"), "expression"),
    (_cron("not a cron"), "expression"),
    (_cycle(), "cycle"),
    (_missing_dep(), "depends_on"),
    (once_job("big", payload=b"x" * 2000), "max_payload_bytes"),
    (types_pb2.JobSpec(name="noschedule", tasks=[types_pb2.TaskSpec(name="main")]), "schedule"),
    (types_pb2.JobSpec(name="bad name!", schedule=every_second_job("x").schedule,
                       tasks=[types_pb2.TaskSpec(name="main")]), "spec.name"),
]


@pytest.mark.parametrize(("spec", "named"), BAD_SPECS, ids=[n for _, n in BAD_SPECS])
def test_bad_spec_is_invalid_argument_naming_the_field(cluster, spec, named):
    before = _state(cluster)
    with pytest.raises(grpc.RpcError) as err:
        cluster.leader().jobs().CreateJob(api_pb2.CreateJobRequest(request_id="", spec=spec),
                                          timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert named in err.value.details()
    assert _state(cluster) == before


def test_conflicts_and_unknowns_change_nothing(cluster):
    jobs = cluster.leader().jobs()
    job = jobs.CreateJob(api_pb2.CreateJobRequest(request_id="dup-1", spec=once_job("dup")),
                         timeout=5).job
    before = _state(cluster)
    cases = [
        (lambda: jobs.CreateJob(api_pb2.CreateJobRequest(spec=once_job("dup")), timeout=5),
         grpc.StatusCode.ALREADY_EXISTS, "dup"),
        (lambda: jobs.UpdateJob(api_pb2.UpdateJobRequest(
            job=api_pb2.JobRef(job_id=job.job_id), spec=once_job("dup"),
            expected_version=job.version + 5), timeout=5),
         grpc.StatusCode.FAILED_PRECONDITION, "version"),
        (lambda: jobs.GetJob(api_pb2.GetJobRequest(job=api_pb2.JobRef(job_id="j999999")),
                             timeout=5), grpc.StatusCode.NOT_FOUND, "j999999"),
        (lambda: jobs.GetRun(api_pb2.GetRunRequest(run_id="nope@1"), timeout=5),
         grpc.StatusCode.NOT_FOUND, "nope@1"),
        (lambda: jobs.CancelRun(api_pb2.CancelRunRequest(run_id="nope@1"), timeout=5),
         grpc.StatusCode.NOT_FOUND, "nope@1"),
    ]
    for call, code, named in cases:
        with pytest.raises(grpc.RpcError) as err:
            call()
        assert err.value.code() == code, err.value.details()
        assert named in err.value.details()
    assert _state(cluster) == before


def test_retried_request_id_has_one_effect(cluster):
    jobs = cluster.leader().jobs()
    req = api_pb2.CreateJobRequest(request_id="once-only", spec=once_job("retried"))
    first = jobs.CreateJob(req, timeout=5).job
    again = jobs.CreateJob(req, timeout=5).job
    assert first.job_id == again.job_id
    trig = api_pb2.TriggerJobRequest(request_id="trig-1", job=api_pb2.JobRef(job_id=first.job_id))
    assert jobs.TriggerJob(trig, timeout=5).run.run_id == jobs.TriggerJob(trig, timeout=5).run.run_id
    names = [j.spec.name for j in jobs.ListJobs(api_pb2.ListJobsRequest(limit=1000),
                                                 timeout=5).jobs]
    assert names.count("retried") == 1


def test_a_worker_stream_on_a_follower_is_redirected_every_time(cluster):
    """The refusal comes after the Hello is read: a status that met the Hello's write still in
    flight reached the worker (or a gateway forwarding it) as INTERNAL, without the hint."""
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes if n is not leader)
    for i in range(30):
        hello = worker_pb2.WorkerMessage(hello=worker_pb2.Hello(worker_id=f"redirected-{i}"))
        # wait_for_ready: the test's channel to the follower may still be backing off from a
        # dial made before the follower served gRPC (CI: "connection refused" while it served).
        stream = follower.workers().Connect(iter([hello]), timeout=10, wait_for_ready=True)
        with pytest.raises(grpc.RpcError) as err:
            next(stream)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE, (i, err.value.details())
        assert dict(err.value.trailing_metadata() or ()).get("gnomon-leader") == leader.grpc_addr


def test_follower_redirects_writes_to_the_leader(cluster):
    def redirect():
        # Re-read the leader each round: on a busy machine an election may move it.
        leader = cluster.leader()
        follower = next(n for n in cluster.nodes if n is not leader)
        try:
            follower.jobs().CreateJob(api_pb2.CreateJobRequest(spec=once_job("via-follower")),
                                      timeout=5)
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.UNAVAILABLE
            hint = dict(err.trailing_metadata() or ()).get("gnomon-leader")
            return hint == leader.grpc_addr and follower
        raise AssertionError("a follower accepted a write")

    follower = wait_for(redirect, timeout_s=20, what="a redirect naming the leader")
    # Stale reads are served by any node.
    follower.jobs().ListJobs(api_pb2.ListJobsRequest(consistency=api_pb2.CONSISTENCY_STALE),
                             timeout=5)
