"""Bytes no client library would send: invalid UTF-8 in string fields and malformed wire
format, sent raw to a real node. Each is refused with INVALID_ARGUMENT naming the field and
the rule (never UNKNOWN), and changes nothing."""

from __future__ import annotations

import grpc
import pytest

from gnomon.node.localcluster import LocalCluster, wait_for
from gnomon.v1 import api_pb2, worker_pb2
from tests.integration.test_cluster import once_job

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
    cluster = LocalCluster(tmp_path_factory.mktemp("bad-input"), 1).start()
    try:
        yield cluster.leader()
    finally:
        cluster.stop()


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
    raw = _poison(api_pb2.CreateJobRequest(spec=once_job(PLACEHOLDER)))
    err = _create(node, raw)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert err.details() == "spec.name: not valid UTF-8 (byte 0xff at offset 3)"


def test_invalid_utf8_in_a_nested_repeated_field_names_its_path(node):
    spec = once_job("nested")
    spec.tasks.add(name="second", queue=PLACEHOLDER)
    raw = _poison(api_pb2.CreateJobRequest(spec=spec))
    err = _create(node, raw)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert err.details() == "spec.tasks[1].queue: not valid UTF-8 (byte 0xff at offset 3)"


def test_truncated_message_is_invalid_argument_naming_the_type(node):
    raw = api_pb2.CreateJobRequest(spec=once_job("truncated")).SerializeToString()[:-3]
    err = _create(node, raw)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert err.details().startswith("request: not a valid gnomon.v1.CreateJobRequest ("), \
        err.details()


def test_a_valid_request_still_works_through_the_raw_path(node):
    create = _raw_unary(node, "/gnomon.v1.JobService/CreateJob", api_pb2.CreateJobResponse)
    req = api_pb2.CreateJobRequest(spec=once_job("fine"))
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
