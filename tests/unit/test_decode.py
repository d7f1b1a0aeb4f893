"""The decode guard on its own: the wire walker names the field and agrees with the parser;
guarded handlers turn undecodable requests into INVALID_ARGUMENT."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from gnomon.node.api.grpc import decode
from gnomon.node.api.grpc.decode import DecodeGuard, Malformed, explain, guard_handler
from gnomon.v1 import api_pb2, types_pb2, worker_pb2

BAD = "XXXXXX"


def _poison(msg, at: int = 3, byte: bytes = b"\xff") -> bytes:
    raw = msg.SerializeToString()
    assert raw.count(BAD.encode()) == 1
    return raw.replace(BAD.encode(), BAD[:at].encode() + byte + BAD[at + 1:].encode())


def _spec(**task) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(name="job", schedule=types_pb2.Schedule(
        once=types_pb2.OnceSchedule(at_ms=1)), tasks=[types_pb2.TaskSpec(name="main", **task)])


def _create(spec: types_pb2.JobSpec) -> api_pb2.CreateJobRequest:
    return api_pb2.CreateJobRequest(request_id="r1", spec=spec)


def _hello(**fields) -> worker_pb2.WorkerMessage:
    return worker_pb2.WorkerMessage(hello=worker_pb2.Hello(**fields))


def _second_task_depends(spec: types_pb2.JobSpec) -> types_pb2.JobSpec:
    spec.tasks.add(name="b", depends_on=["main", BAD])
    return spec


UTF8_CASES = [
    (_create(types_pb2.JobSpec(name=BAD)), "spec.name"),
    (api_pb2.CreateJobRequest(request_id=BAD), "request_id"),
    (_create(_spec(queue=BAD)), "spec.tasks[0].queue"),
    (_create(_second_task_depends(_spec())), "spec.tasks[1].depends_on[1]"),
    (_create(types_pb2.JobSpec(schedule=types_pb2.Schedule(
        cron=types_pb2.CronSchedule(timezone=BAD)))), "spec.schedule.cron.timezone"),
    (_hello(worker_id=BAD), "hello.worker_id"),
    (_hello(worker_id="w", queues=["a", BAD]), "hello.queues[1]"),
    (_hello(labels={"k": BAD}), "hello.labels[0].value"),
    (worker_pb2.WorkerMessage(fail=worker_pb2.Fail(
        lease=worker_pb2.LeaseRef(run_id="r", task_name=BAD))), "fail.lease.task_name"),
]


@pytest.mark.parametrize(("msg", "path"), UTF8_CASES, ids=[p for _, p in UTF8_CASES])
def test_invalid_utf8_names_the_field_path(msg, path):
    raw = _poison(msg)
    with pytest.raises(DecodeError):
        type(msg).FromString(raw)
    assert explain(msg.DESCRIPTOR, raw) == f"{path}: not valid UTF-8 (byte 0xff at offset 3)"


@pytest.mark.parametrize("bad", [b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82"],
                         ids=["overlong", "surrogate", "cut-sequence"])
def test_every_kind_of_bad_utf8_is_named(bad):
    raw = _poison(api_pb2.CreateJobRequest(request_id=BAD), at=0, byte=bad)
    assert explain(api_pb2.CreateJobRequest.DESCRIPTOR, raw).startswith(
        f"request_id: not valid UTF-8 (byte 0x{bad[0]:02x} at offset 0")


CREATE = api_pb2.CreateJobRequest.DESCRIPTOR
STRUCTURE_CASES = [
    (b"\x0a\x05ab", "request_id: length 5 at byte 1 runs past the end at byte 4"),
    (b"\x08\x80", "truncated varint at byte 1"),  # request_id with a varint: unknown, framed
    (b"\x80", "truncated varint at byte 0"),
    (b"\x0f", "invalid wire type 7 at byte 0"),
    (b"\x0c", "unexpected end-group tag at byte 0"),
    (b"\x00\x01", "field number 0 at byte 0"),
    (b"\x1d\x01\x02", "truncated 4-byte value at byte 1"),
    (b"\x1b\x08\x01", "group 3 is not closed before byte 3"),
    (b"\x10" + b"\xff" * 10 + b"\x01", "over-long varint at byte 1"),
    (b"\xf8\xff\xff\xff\x1f\x01", "tag at byte 0 does not fit 32 bits"),
]


@pytest.mark.parametrize(("raw", "rule"), STRUCTURE_CASES, ids=[r for _, r in STRUCTURE_CASES])
def test_malformed_wire_format_is_named_with_the_message_type(raw, rule):
    with pytest.raises(DecodeError):
        api_pb2.CreateJobRequest.FromString(raw)
    assert explain(CREATE, raw) == f"request: not a valid gnomon.v1.CreateJobRequest ({rule})"


def test_a_structural_error_inside_a_submessage_names_where():
    inner = b"\x12\x02\x0a\x05"  # spec { tenant: length 5, no bytes follow }
    assert explain(CREATE, inner) == (
        "request: not a valid gnomon.v1.CreateJobRequest "
        "(spec.tenant: length 5 at byte 3 runs past the end at byte 4)")


def test_a_packed_varint_cut_short_is_named():
    raw = b"\x22\x02\x01\x80"  # Welcome.resumed_tokens, packed: 1, then half a varint
    with pytest.raises(DecodeError):
        worker_pb2.Welcome.FromString(raw)
    assert explain(worker_pb2.Welcome.DESCRIPTOR, raw) == (
        "request: not a valid gnomon.v1.Welcome (resumed_tokens[0]: truncated varint at byte 3)")


def test_nesting_beyond_the_parser_limit_is_named():
    raw = b""
    for _ in range(decode.MAX_DEPTH + 5):
        raw = b"\x0b" + raw + b"\x0c"  # field 1 as a group (unknown): nested groups
    with pytest.raises(DecodeError):
        api_pb2.GetStatusRequest.FromString(raw)
    assert "nested deeper than" in explain(api_pb2.GetStatusRequest.DESCRIPTOR, raw)


def test_unknown_descriptor_still_explains():
    assert explain(None, b"\x0f") == "request: not a valid message (invalid wire type 7 at byte 0)"


# --- the walker agrees with the parser ---------------------------------------------------------

SAMPLES = [
    _create(_second_task_depends(_spec(queue="q", payload=b"\x00\xff", timeout_ms=5,
                                       retry=types_pb2.RetryPolicy(multiplier=2.0)))),
    _hello(worker_id="w", queues=["a", "b"], labels={"k": "v"},
           held=[worker_pb2.LeaseRef(run_id="r", task_name="t", fencing_token=1 << 40)]),
    worker_pb2.Welcome(node_id="n", resumed_tokens=[1, 300, 1 << 63]),
    api_pb2.SetLimitsRequest(limits=types_pb2.ClusterLimits(dedupe_capacity=-1)),
]


@st.composite
def mutated(draw):
    msg = draw(st.sampled_from(SAMPLES))
    raw = bytearray(msg.SerializeToString())
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["set", "insert", "cut"]))
        at = draw(st.integers(0, len(raw)))
        if op == "set" and at < len(raw):
            raw[at] = draw(st.integers(0, 255))
        elif op == "insert":
            raw[at:at] = draw(st.binary(min_size=1, max_size=4))
        else:
            del raw[at:]
    return msg, bytes(raw)


def _parses(cls, raw: bytes) -> bool:
    try:
        cls.FromString(raw)
    except DecodeError:
        return False
    return True


def _walks(descriptor, raw: bytes) -> bool:
    try:
        decode._walk(descriptor, raw, 0, len(raw), "", 0, None)
    except decode.WireError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(mutated())
def test_walker_refuses_exactly_what_the_parser_refuses(sample):
    msg, raw = sample
    assert _walks(msg.DESCRIPTOR, raw) == _parses(type(msg), raw), raw.hex()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40))
def test_walker_agrees_on_random_bytes(raw):
    assert _walks(CREATE, raw) == _parses(api_pb2.CreateJobRequest, raw), raw.hex()


# --- guarded handlers ----------------------------------------------------------------------------


class Aborted(Exception):
    pass


class FakeContext:
    def __init__(self) -> None:
        self.status: tuple[grpc.StatusCode, str] | None = None

    async def abort(self, code, details=""):
        self.status = (code, details)
        raise Aborted(details)


def _guard(handler):
    return guard_handler(handler, api_pb2.CreateJobRequest.DESCRIPTOR)


BAD_CREATE = _poison(api_pb2.CreateJobRequest(request_id=BAD))
GOOD_CREATE = api_pb2.CreateJobRequest(request_id="ok").SerializeToString()


async def test_unary_handler_aborts_before_the_servicer_runs():
    calls = []

    async def behaviour(request, context):
        calls.append(request)
        return api_pb2.CreateJobResponse()

    h = _guard(grpc.unary_unary_rpc_method_handler(
        behaviour, request_deserializer=api_pb2.CreateJobRequest.FromString))
    ctx = FakeContext()
    request = h.request_deserializer(BAD_CREATE)
    assert isinstance(request, Malformed)
    with pytest.raises(Aborted):
        await h.unary_unary(request, ctx)
    assert ctx.status == (grpc.StatusCode.INVALID_ARGUMENT,
                          "request_id: not valid UTF-8 (byte 0xff at offset 3)")
    assert calls == []
    good = h.request_deserializer(GOOD_CREATE)
    assert await h.unary_unary(good, FakeContext()) == api_pb2.CreateJobResponse()
    assert calls == [good]


async def _feed(items):
    for item in items:
        yield item


async def test_stream_handler_passes_good_messages_then_aborts_on_a_bad_one():
    seen = []

    async def behaviour(requests, context):
        async for r in requests:
            seen.append(r.request_id)

    h = _guard(grpc.stream_stream_rpc_method_handler(
        behaviour, request_deserializer=api_pb2.CreateJobRequest.FromString))
    ctx = FakeContext()
    items = [h.request_deserializer(b) for b in (GOOD_CREATE, BAD_CREATE, GOOD_CREATE)]
    with pytest.raises(Aborted):
        await h.stream_stream(_feed(items), ctx)
    assert seen == ["ok"]
    assert ctx.status[0] == grpc.StatusCode.INVALID_ARGUMENT


async def test_async_generator_handlers_stay_generators():
    async def behaviour(request, context):
        yield api_pb2.CreateJobResponse()

    h = _guard(grpc.unary_stream_rpc_method_handler(
        behaviour, request_deserializer=api_pb2.CreateJobRequest.FromString))
    out = [r async for r in h.unary_stream(h.request_deserializer(GOOD_CREATE), FakeContext())]
    assert out == [api_pb2.CreateJobResponse()]
    ctx = FakeContext()
    with pytest.raises(Aborted):
        async for _ in h.unary_stream(h.request_deserializer(BAD_CREATE), ctx):
            pass
    assert ctx.status[0] == grpc.StatusCode.INVALID_ARGUMENT


async def test_interceptor_finds_the_request_type_by_method_name():
    async def behaviour(request, context):
        return api_pb2.CreateJobResponse()

    handler = grpc.unary_unary_rpc_method_handler(
        behaviour, request_deserializer=api_pb2.CreateJobRequest.FromString)

    async def continuation(details):
        return handler

    class Details:
        method = "/gnomon.v1.JobService/CreateJob"

    guard = DecodeGuard()
    guarded = await guard.intercept_service(continuation, Details())
    assert await guard.intercept_service(continuation, Details()) is guarded  # cached
    bad = guarded.request_deserializer(b"\x0f")
    assert bad.detail.startswith("request: not a valid gnomon.v1.CreateJobRequest (")
