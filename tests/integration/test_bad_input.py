"""Bad input sent to a real node: bytes no client library would send (invalid UTF-8 in string
fields, malformed wire format), and the requests the API fuzzer (test_fuzz_api.py) found
mishandled. Each is refused with a documented code naming the field and the rule (never
UNKNOWN), and an INVALID_ARGUMENT changes nothing (equal state digests: the node's state
changes only by requests here)."""

from __future__ import annotations

import grpc
import pytest

from gnomon.node.local.cluster import LocalCluster, wait_for
from gnomon.v1 import api_pb2, types_pb2, worker_pb2
from tests.support.jobs import once_job

pytestmark = pytest.mark.integration

PLACEHOLDER = "XXXXXXXXXXXX"


def _poison(msg, placeholder: str = PLACEHOLDER, at: int = 3) -> bytes:
    """`msg` serialized, with byte `at` of the placeholder replaced by 0xff (never UTF-8)."""
    raw = msg.SerializeToString()
    marker = placeholder.encode()
    assert raw.count(marker) == 1, "the placeholder must occur exactly once"
    bad = marker[:at] + b"\xff" + marker[at + 1:]
    return raw.replace(marker, bad)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """One node that commits only what requests ask for: no idle leadership proofs, and the
    jobs created here are paused."""
    cluster = LocalCluster(tmp_path_factory.mktemp("bad-input"), 1,
                           {"proof_interval_ms": "600000"}).start()
    try:
        yield cluster.leader()
    finally:
        cluster.stop()


def paused(name: str, **task) -> types_pb2.JobSpec:
    spec = once_job(name, **task)
    spec.paused = True
    return spec


def _raw_unary(node, method: str, response_cls):
    # request_serializer=None: the channel sends the bytes it is given, unchanged.
    return node._channel().unary_unary(method, request_serializer=None,
                                        response_deserializer=response_cls.FromString)


def _digest(node) -> str:
    return node.cluster().GetStatus(api_pb2.GetStatusRequest(include_digest=True),
                                    timeout=5).state_digest


def _create(node, raw: bytes) -> grpc.RpcError:
    before = _digest(node)
    create = _raw_unary(node, "/gnomon.v1.JobService/CreateJob", api_pb2.CreateJobResponse)
    with pytest.raises(grpc.RpcError) as err:
        create(raw, timeout=10)
    assert _digest(node) == before, "a refused request changed the state"
    return err.value


def test_invalid_utf8_in_spec_name_names_the_field(node):
    raw = _poison(api_pb2.CreateJobRequest(spec=paused(PLACEHOLDER)))
    err = _create(node, raw)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert err.details() == "spec.name: not valid UTF-8 (byte 0xff at offset 3)"


def test_invalid_utf8_in_a_nested_repeated_field_names_its_path(node):
    spec = paused("nested")
    spec.tasks.add(name="second", queue=PLACEHOLDER)
    raw = _poison(api_pb2.CreateJobRequest(spec=spec))
    err = _create(node, raw)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert err.details() == "spec.tasks[1].queue: not valid UTF-8 (byte 0xff at offset 3)"


def test_truncated_message_is_invalid_argument_naming_the_type(node):
    raw = api_pb2.CreateJobRequest(spec=paused("truncated")).SerializeToString()[:-3]
    err = _create(node, raw)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert err.details().startswith("request: not a valid gnomon.v1.CreateJobRequest ("), \
        err.details()


def test_a_valid_request_still_works_through_the_raw_path(node):
    create = _raw_unary(node, "/gnomon.v1.JobService/CreateJob", api_pb2.CreateJobResponse)
    req = api_pb2.CreateJobRequest(spec=paused("fine"))
    assert create(req.SerializeToString(), timeout=10).job.spec.name == "fine"


def _connect(node, messages: list[bytes]):
    connect = node._channel().stream_stream(
        "/gnomon.v1.WorkerService/Connect", request_serializer=None,
        response_deserializer=worker_pb2.ServerMessage.FromString)
    return connect(iter(messages), timeout=10)


def _stream_error(call) -> tuple[list, grpc.RpcError]:
    received = []
    with pytest.raises(grpc.RpcError) as err:
        for msg in call:
            received.append(msg.WhichOneof("msg"))
    return received, err.value


def test_invalid_utf8_in_hello_ends_the_stream_naming_the_field(node):
    raw = _poison(worker_pb2.WorkerMessage(hello=worker_pb2.Hello(worker_id=PLACEHOLDER)))
    received, err = _stream_error(_connect(node, [raw]))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert err.details() == "hello.worker_id: not valid UTF-8 (byte 0xff at offset 3)"
    assert received == []


def test_invalid_utf8_after_hello_ends_the_stream_with_invalid_argument(node):
    """A bad message mid-stream must not end the stream with OK (the worker would take it
    for a normal close and reconnect with the same bytes)."""
    hello = worker_pb2.WorkerMessage(hello=worker_pb2.Hello(worker_id="w-bad-heartbeat"))
    lease = worker_pb2.LeaseRef(run_id=PLACEHOLDER, task_name="main", fencing_token=1)
    heartbeat = _poison(worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat(leases=[lease])))
    call = _connect(node, [hello.SerializeToString(), heartbeat])
    received, err = _stream_error(call)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert err.details() == \
        "heartbeat.leases[0].run_id: not valid UTF-8 (byte 0xff at offset 3)"
    assert received[:1] == ["welcome"]


def test_node_serves_after_bad_input(node):
    names = wait_for(lambda: [j.spec.name for j in node.jobs().ListJobs(
        api_pb2.ListJobsRequest(limit=100), timeout=5).jobs] or ["(none)"],
        timeout_s=30, what="ListJobs after bad input")
    assert "nested" not in names and "truncated" not in names


# --- found by the fuzzer ------------------------------------------------------------------


def _refused(node, call, request, code=grpc.StatusCode.INVALID_ARGUMENT) -> str:
    """Call, expect `code`; an INVALID_ARGUMENT must leave the state digest as it was."""
    before = _digest(node)
    with pytest.raises(grpc.RpcError) as err:
        call(request, timeout=10)
    assert err.value.code() == code, err.value.details()
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        assert _digest(node) == before, f"refused, yet the state changed: {err.value.details()}"
    return err.value.details()


@pytest.fixture(scope="module")
def job(node):
    return node.jobs().CreateJob(api_pb2.CreateJobRequest(spec=paused("found")), timeout=10).job


READS_REFUSED_BEFORE_THE_BARRIER = [
    ("GetJob", api_pb2.GetJobRequest(), "job: set job_id"),
    ("ListRuns", api_pb2.ListRunsRequest(), "job: set job_id"),
    ("ListJobs", api_pb2.ListJobsRequest(limit=-1), "limit"),
    ("ListDeadLetters", api_pb2.ListDeadLettersRequest(limit=-1), "limit"),
]


@pytest.mark.parametrize(("method", "request_", "named"), READS_REFUSED_BEFORE_THE_BARRIER,
                         ids=[m for m, _, _ in READS_REFUSED_BEFORE_THE_BARRIER])
def test_a_refused_read_commits_no_barrier(node, method, request_, named):
    """A linearizable read commits a barrier (which moves cluster time) before it reads: a
    request refused as malformed was refused only after committing it."""
    assert named in _refused(node, getattr(node.jobs(), method), request_)


@pytest.mark.parametrize("run_id", ["", "j1@" + "9" * 600], ids=["empty", "600 bytes"])
def test_run_ids_that_cannot_be_history_keys_are_refused(node, run_id):
    """Empty or oversized keys made LMDB raise BadValsizeError (UNKNOWN)."""
    assert _refused(node, node.jobs().GetRun, api_pb2.GetRunRequest(run_id=run_id)) \
        .startswith("run_id: ")
    assert _refused(node, node.jobs().CancelRun, api_pb2.CancelRunRequest(run_id=run_id)) \
        .startswith("run_id: ")


def test_unknown_misfire_policy_names_the_field(node):
    spec = paused("enum")
    spec.misfire_policy = 99  # proto3 enums are open: any int32 arrives
    details = _refused(node, node.jobs().CreateJob, api_pb2.CreateJobRequest(spec=spec))
    assert details.startswith("spec.misfire_policy: must be one of"), details
    assert details.endswith("got 99"), details


@pytest.mark.parametrize("name", ["dialect", "dst_nonexistent", "dst_ambiguous"])
def test_unknown_cron_enums_name_the_field(node, name):
    """Found by the fuzz test: an unknown cron dialect or DST policy number was a KeyError in
    the codec, answered UNKNOWN with a logged traceback."""
    spec = paused("cron-enum")
    spec.schedule.cron.expression = "0 3 * * *"
    setattr(spec.schedule.cron, name, 77)
    details = _refused(node, node.jobs().CreateJob, api_pb2.CreateJobRequest(spec=spec))
    assert details == (f"spec.schedule.cron.{name}: must be one of "
                       f"{', '.join(getattr(types_pb2, _ENUM[name]).keys())}, got 77"), details
    preview = api_pb2.PreviewScheduleRequest(schedule=spec.schedule)
    details = _refused(node, node.jobs().PreviewSchedule, preview)
    assert details.startswith(f"schedule.cron.{name}: must be one of"), details


_ENUM = {"dialect": "CronDialect", "dst_nonexistent": "DstNonexistentPolicy",
         "dst_ambiguous": "DstAmbiguousPolicy"}


def test_invalid_limits_are_refused_before_they_are_proposed(node):
    limits = types_pb2.ClusterLimits(max_attempt_records=-1)
    details = _refused(node, node.cluster().SetLimits, api_pb2.SetLimitsRequest(limits=limits))
    assert details == "limits.max_attempt_records: must be >= 0, got -1"


def test_renaming_a_job_is_refused_before_it_is_proposed(node, job):
    spec = paused("renamed")
    details = _refused(node, node.jobs().UpdateJob, api_pb2.UpdateJobRequest(
        job=api_pb2.JobRef(job_id=job.job_id), spec=spec))
    assert details.startswith("spec.name: ") and "cannot be renamed" in details, details


def test_an_invalid_spec_for_a_missing_job_commits_nothing(node):
    """The spec is checked before the job is looked up (a miss commits a barrier)."""
    details = _refused(node, node.jobs().UpdateJob, api_pb2.UpdateJobRequest(
        request_id="upd-missing", job=api_pb2.JobRef(job_id="j424242"),
        spec=types_pb2.JobSpec(name="")))
    assert details.startswith("spec.name: "), details


def test_a_request_id_is_its_rpcs_and_refused_for_another_request(node, job):
    """Dedupe answered by request_id alone: ReplayDeadLetters got a TriggerJob's reply and
    crashed (UNKNOWN); a DeleteJob got a CreateJob's reply and reported success. A request id
    is now remembered per caller and RPC: on another RPC it is another request with its own
    answer, and the same RPC with a different request under it is refused (REQUEST_ID_REUSED)
    and changes nothing."""
    jobs = node.jobs()
    jobs.TriggerJob(api_pb2.TriggerJobRequest(request_id="reused-1",
                                              job=api_pb2.JobRef(job_id=job.job_id)), timeout=10)
    replayed = jobs.ReplayDeadLetters(api_pb2.ReplayDeadLettersRequest(
        request_id="reused-1", tenant="no-dead-letters-here"), timeout=10)
    assert list(replayed.replayed) == []
    created = jobs.CreateJob(api_pb2.CreateJobRequest(request_id="reused-2",
                                                      spec=paused("reused")), timeout=10).job
    assert created.job_id != job.job_id
    jobs.DeleteJob(api_pb2.DeleteJobRequest(
        request_id="reused-2", job=api_pb2.JobRef(job_id=created.job_id)), timeout=10)
    details = _refused(node, jobs.DeleteJob, api_pb2.DeleteJobRequest(
        request_id="reused-2", job=api_pb2.JobRef(job_id=job.job_id)),
        grpc.StatusCode.FAILED_PRECONDITION)
    assert details.startswith("request_id: 'reused-2' was already used by this caller for a "
                              "different request"), details
    assert jobs.GetJob(api_pb2.GetJobRequest(job=api_pb2.JobRef(job_id=job.job_id)),
                       timeout=10).job.job_id == job.job_id, "the job was not deleted"


def test_list_jobs_pages_stay_under_the_message_limit(node):
    """A page was bounded by count only: 80 jobs of 60 KB (the node's 64 KiB payload bound)
    made a 4.8 MB answer, refused by clients at gRPC's default 4 MiB; 300 would not fit
    even the node's own 16 MiB limit."""
    jobs = node.jobs()
    for i in range(80):
        jobs.CreateJob(api_pb2.CreateJobRequest(spec=paused(f"big-{i}", payload=b"x" * 60_000)),
                       timeout=10)
    seen, after, pages = set(), "", 0
    while True:
        page = jobs.ListJobs(api_pb2.ListJobsRequest(limit=1000, after_job_id=after), timeout=10)
        assert page.ByteSize() < 4 << 20
        seen |= {j.spec.name for j in page.jobs}
        pages += 1
        if not page.next_after_job_id:
            break
        after = page.next_after_job_id
    assert {f"big-{i}" for i in range(80)} <= seen
    assert pages > 1
