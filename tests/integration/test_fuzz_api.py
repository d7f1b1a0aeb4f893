"""Fuzzing every RPC of JobService, ClusterService and the worker stream against real nodes.

Requests are built from the message descriptors: structurally valid messages with adversarial
field values (empty, huge, unicode, boundary and negative integers, unknown enum numbers, any
oneof), near-valid job specs with one field poked, and raw bytes (mutated serializations,
random garbage). Whatever arrives, a node answers with a documented status code (never
UNKNOWN or INTERNAL), stays alive, and an INVALID_ARGUMENT changed nothing (equal state
digests before and after, on a node where nothing else changes the state).

GNOMON_FUZZ_EXAMPLES (default 150) sets the examples per test; a larger budget finds more.
"""

from __future__ import annotations

import math
import os
import queue
import random
import threading
import time

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gnomon.node.local.cluster import LocalCluster, NodeProc, wait_for
from gnomon.v1 import api_pb2, types_pb2, worker_pb2

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("GNOMON_FUZZ_EXAMPLES", "150"))
S = grpc.StatusCode
DOCUMENTED = {S.OK, S.INVALID_ARGUMENT, S.NOT_FOUND, S.ALREADY_EXISTS, S.FAILED_PRECONDITION,
              S.RESOURCE_EXHAUSTED, S.UNAVAILABLE}
# A follower, or a call that met an election: the SDKs retry these.
DOCUMENTED_IN_A_CLUSTER = DOCUMENTED | {S.DEADLINE_EXCEEDED}
CALL_TIMEOUT_S = 20
# How long a fuzzed worker waits for a task before it sends its reports anyway (seeded jobs
# fire every second; other fuzzed workers may hold the ready tasks).
ASSIGN_WAIT_S = 0.5

# --- the RPCs ----------------------------------------------------------------------------------

SERVICES = [api_pb2.DESCRIPTOR.services_by_name["JobService"],
            api_pb2.DESCRIPTOR.services_by_name["ClusterService"],
            worker_pb2.DESCRIPTOR.services_by_name["WorkerService"]]
METHODS: list[MethodDescriptor] = [m for s in SERVICES for m in s.methods]
# One request each (a streamed answer is read to its end).
UNARY = [m for m in METHODS if not m.client_streaming]
CONNECT = worker_pb2.DESCRIPTOR.services_by_name["WorkerService"].methods_by_name["Connect"]
assert [m for m in METHODS if m not in UNARY] == [CONNECT], "a new request stream: fuzz it too"
BY_NAME = {m.name: m for m in METHODS}
assert len(BY_NAME) == len(METHODS)


def _path(method: MethodDescriptor) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


def _cls(desc: Descriptor):
    return message_factory.GetMessageClass(desc)


# --- values --------------------------------------------------------------------------------------

JOB_NAMES = ["fuzz-0", "fuzz-1", "fuzz-2", "fuzz-3", "fuzz-4"]
JOB_IDS = ["j1", "j2", "j3", "j4", "j999", "j", "j-1", "x1"]
RUN_IDS = ["j1@manual-1", "j1@manual-2", "j2@1", "j1@", "@", "j999@manual-1"]
TASKS = ["t0", "t1", "main"]
ADVERSARIAL = ["", " ", "é", "😀", "\x00", "a\nb", "../../etc/passwd", "A" * 129, "a" * 65,
               "x" * 70_000, "é" * 40_000, "@reboot", "0 0 30 2 *", "60 * * * *",
               "0 0 * * * * * *", "Mars/Base", "Etc/GMT+5", "UTC "]
INT32_EDGES = [0, 1, -1, 2, 99, 100, 101, -100, -101, 1000, 1001, 2**31 - 1, -2**31]
INT64_EDGES = INT32_EDGES + [2**63 - 1, -2**63, 2**53, 10**13, 1_700_000_000_000, 60_000, 99]
UINT64_EDGES = [0, 1, 2, 3, 5, 2**32, 2**63, 2**64 - 1]
DOUBLES = [0.0, -0.0, 0.5, 1.0, 2.0, -1.0, 1e308, -1e308, 5e-324, math.inf, -math.inf, math.nan]

# Values that get a request past the first checks, by field name (or full name where a
# name means different things). Three draws in four are plausible when a field has some.
_LIMITS = [0, 1, 5, 100, 10_000]
PLAUSIBLE: dict[str, list] = {
    "request_id": ["", "", "r1", "r2", "r3", "r4", "r5"], "tenant": ["", "default", "t1"],
    "name": JOB_NAMES, "gnomon.v1.TaskSpec.name": TASKS, "task_name": TASKS,
    "depends_on": TASKS, "job_id": JOB_IDS, "after_job_id": ["", *JOB_IDS], "run_id": RUN_IDS,
    "queue": ["", "default", "q"], "queues": ["default", "q"], "worker_id": ["w-1", "worker:2"],
    "expression": ["* * * * *", "*/5 * * * * *", "@daily", "H H * * *", "0 12 * * 1-5"],
    "timezone": ["", "UTC", "Europe/Berlin", "America/New_York"],
    "limit": [0, 1, 2, 10, 1000], "interval_ms": [100, 1000, 60_000], "anchor_ms": [0, 7],
    "at_ms": [1, 4_000_000_000_000], "before_ms": [0, 1, 4_000_000_000_000],
    "credits": [1, 5], "fencing_token": [1, 2, 3, 4, 5], "expected_version": [0, 1, 2],
    "priority": [0, 100, -100], "max_attempts": [0, 1, 3], "timeout_ms": [0, 1000],
    "initial_backoff_ms": [0, 10], "max_backoff_ms": [0, 100], "multiplier": [0.0, 1.0, 2.0],
    "jitter": [0.0, 0.5, -1.0], "misfire_grace_ms": [0, 1000], "payload": [b"", b"{}"],
    "result": [b"", b"ok"], "error": ["", "boom"], "reason": ["", "stop"],
    "consistency": [0, 1, 2], "misfire_policy": [0, 1, 2, 3], "dedupe_capacity": _LIMITS,
    "dedupe_max_age_ms": _LIMITS, "runs_retained_per_job": _LIMITS,
    "max_dead_letters": _LIMITS, "max_attempt_records": _LIMITS,
    "max_tokens_per_tenant": _LIMITS, "max_queue_circuits_per_tenant": _LIMITS,
}

F = FieldDescriptor
_INT_RANGES = {
    F.TYPE_INT32: (-2**31, 2**31 - 1), F.TYPE_SINT32: (-2**31, 2**31 - 1),
    F.TYPE_SFIXED32: (-2**31, 2**31 - 1), F.TYPE_UINT32: (0, 2**32 - 1),
    F.TYPE_FIXED32: (0, 2**32 - 1), F.TYPE_INT64: (-2**63, 2**63 - 1),
    F.TYPE_SINT64: (-2**63, 2**63 - 1), F.TYPE_SFIXED64: (-2**63, 2**63 - 1),
    F.TYPE_UINT64: (0, 2**64 - 1), F.TYPE_FIXED64: (0, 2**64 - 1),
}


def _ints(field: FieldDescriptor) -> st.SearchStrategy[int]:
    lo, hi = _INT_RANGES[field.type]
    edges = [v for v in INT64_EDGES + UINT64_EDGES if lo <= v <= hi]
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi), st.integers(-3, 20)
                     .filter(lambda v: lo <= v <= hi))


def _mostly(likely: st.SearchStrategy, other: st.SearchStrategy) -> st.SearchStrategy:
    """Three draws in four from `likely`."""
    return st.sampled_from([True, True, True, False]).flatmap(
        lambda pick: likely if pick else other)


def _scalar(field: FieldDescriptor) -> st.SearchStrategy:
    adversarial = _adversarial(field)
    plausible = PLAUSIBLE.get(field.full_name, PLAUSIBLE.get(field.name))
    if plausible is None:
        return adversarial
    return _mostly(st.sampled_from(plausible), adversarial)


def _adversarial(field: FieldDescriptor) -> st.SearchStrategy:
    t = field.type
    if t == F.TYPE_STRING:
        return st.one_of(st.sampled_from(ADVERSARIAL), st.text(max_size=12))
    if t == F.TYPE_BYTES:
        return st.one_of(st.sampled_from([b"", b"\x00", b"{}", b"\xff" * 3, b"x" * 70_000]),
                         st.binary(max_size=16))
    if t == F.TYPE_BOOL:
        return st.booleans()
    if t in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return st.one_of(st.sampled_from(DOUBLES), st.floats(width=64 if t == F.TYPE_DOUBLE
                                                             else 32))
    if t == F.TYPE_ENUM:
        known = [v.number for v in field.enum_type.values]
        return st.sampled_from(known + [max(known) + 1, 99, -1, 2**31 - 1, -2**31])
    return _ints(field)


def _value(field: FieldDescriptor, depth: int) -> st.SearchStrategy:
    if field.type == F.TYPE_MESSAGE:
        return messages(field.message_type, depth + 1)
    return _scalar(field)


def _fill(draw, msg, field: FieldDescriptor, depth: int) -> None:
    target = getattr(msg, field.name)
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key_f, value_f = field.message_type.fields_by_name["key"], \
            field.message_type.fields_by_name["value"]
        target.update(draw(st.dictionaries(_scalar(key_f), _scalar(value_f), max_size=3)))
    elif field.is_repeated:
        items = draw(st.lists(_value(field, depth), max_size=4))
        if field.type == F.TYPE_MESSAGE:
            for item in items:
                target.add().CopyFrom(item)
        else:
            target.extend(items)
    elif field.type == F.TYPE_MESSAGE:
        target.CopyFrom(draw(_value(field, depth)))
    else:
        setattr(msg, field.name, draw(_value(field, depth)))


_SET_AT_TOP = st.sampled_from([True, True, True, True, False])
_SET_BELOW = st.sampled_from([True, False])


@st.composite
def generic(draw, desc: Descriptor, depth: int = 0):
    """Any message of type `desc`: each field set or not, at most one field per oneof."""
    msg = _cls(desc)()
    chosen = {o.name: draw(st.sampled_from([None, *o.fields])) for o in desc.oneofs}
    for field in desc.fields:
        oneof = field.containing_oneof
        if oneof is not None and chosen[oneof.name] is not field:
            continue
        # Request fields are mostly set (a CreateJob without a spec tests little).
        if depth > 4 or not draw(_SET_AT_TOP if depth == 0 else _SET_BELOW):
            continue
        _fill(draw, msg, field, depth)
    return msg


def _schedules() -> st.SearchStrategy:
    return st.sampled_from([
        types_pb2.Schedule(interval=types_pb2.IntervalSchedule(interval_ms=1000)),
        types_pb2.Schedule(once=types_pb2.OnceSchedule(at_ms=1)),
        types_pb2.Schedule(cron=types_pb2.CronSchedule(expression="* * * * *",
                                                       timezone="Europe/Berlin")),
    ])


@st.composite
def near_valid_spec(draw):
    """A valid JobSpec with up to two fields (anywhere inside it) set to adversarial values."""
    spec = types_pb2.JobSpec(name=draw(st.sampled_from(JOB_NAMES)),
                             schedule=draw(_schedules()))
    for i in range(draw(st.integers(1, 3))):
        task = spec.tasks.add(name=f"t{i}", payload=b"{}")
        if i:
            task.depends_on.append(f"t{i - 1}")
    for _ in range(draw(st.integers(0, 2))):
        _poke(draw, spec)
    return spec


def _poke(draw, spec: types_pb2.JobSpec) -> None:
    holders = [spec, spec.schedule, *spec.tasks, *(t.retry for t in spec.tasks)]
    kind = spec.schedule.WhichOneof("kind")
    if kind:
        holders.append(getattr(spec.schedule, kind))
    msg = draw(st.sampled_from(holders))
    field = draw(st.sampled_from(list(msg.DESCRIPTOR.fields)))
    if field.is_repeated or field.type == F.TYPE_MESSAGE:
        msg.ClearField(field.name)
    _fill(draw, msg, field, depth=4)


def _refs() -> st.SearchStrategy:
    return st.one_of(
        st.builds(api_pb2.JobRef, job_id=st.sampled_from(JOB_IDS)),
        st.builds(api_pb2.JobRef, name=st.sampled_from(JOB_NAMES),
                  tenant=st.sampled_from(["", "default", "other"])),
    )


def _leases() -> st.SearchStrategy:
    return st.builds(worker_pb2.LeaseRef, run_id=st.sampled_from(RUN_IDS),
                     task_name=st.sampled_from(["t0", "t1", "main", ""]),
                     fencing_token=st.sampled_from(UINT64_EDGES))


# Message types with a strategy of their own besides the generic one: reach past validation.
SPECIAL = {
    types_pb2.JobSpec.DESCRIPTOR.full_name: near_valid_spec,
    api_pb2.JobRef.DESCRIPTOR.full_name: _refs,
    worker_pb2.LeaseRef.DESCRIPTOR.full_name: _leases,
}


def messages(desc: Descriptor, depth: int = 0) -> st.SearchStrategy:
    special = SPECIAL.get(desc.full_name)
    if special is None:
        return generic(desc, depth)
    return _mostly(special(), generic(desc, depth))


@st.composite
def wire(draw, desc: Descriptor) -> bytes:
    """The bytes of one message: a valid serialization, a mutation of one, or garbage."""
    raw = draw(messages(desc)).SerializeToString()
    how = draw(st.sampled_from(["as is", "as is", "as is", "mutated", "garbage"]))
    if how == "garbage":
        return draw(st.binary(max_size=64))
    if how == "mutated" and raw:
        rng = random.Random(draw(st.integers(0, 2**32)))
        data = bytearray(raw)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            data[at] = rng.choice([0x00, 0x80, 0xff, 0xc0, rng.randrange(256)])
        return bytes(data)
    return raw


# --- calling a node --------------------------------------------------------------------------


def call_unary(node: NodeProc, method: MethodDescriptor, raw: bytes) -> tuple[S, str]:
    kind = node._channel().unary_stream if method.server_streaming else \
        node._channel().unary_unary
    fn = kind(_path(method), request_serializer=None,
              response_deserializer=_cls(method.output_type).FromString)
    try:
        answer = fn(raw, timeout=CALL_TIMEOUT_S)
        if method.server_streaming:
            for _ in answer:
                pass
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""
    return S.OK, ""


def digest(node: NodeProc) -> str:
    return node.cluster().GetStatus(api_pb2.GetStatusRequest(include_digest=True),
                                    timeout=CALL_TIMEOUT_S).state_digest


def _seed(node: NodeProc, paused: bool) -> None:
    jobs = node.jobs()
    for name in JOB_NAMES[:2]:
        spec = types_pb2.JobSpec(name=name, paused=paused, schedule=types_pb2.Schedule(
            interval=types_pb2.IntervalSchedule(interval_ms=1000)),
            tasks=[types_pb2.TaskSpec(name="t0"), types_pb2.TaskSpec(name="t1",
                                                                      depends_on=["t0"])])
        jobs.CreateJob(api_pb2.CreateJobRequest(spec=spec), timeout=CALL_TIMEOUT_S)
    jobs.TriggerJob(api_pb2.TriggerJobRequest(job=api_pb2.JobRef(job_id="j1")),
                    timeout=CALL_TIMEOUT_S)


def _describe(method: MethodDescriptor, raw: bytes | list[bytes], code: S, details: str) -> str:
    return f"{method.name} answered {code.name} {details[:300]!r} to {raw!r:.600}"


# --- one node, quiet: the digest shows what a request changed ---------------------------------

# Requests whose effect goes on after their answer: a resumed job fires on its own, and the
# leader steps an accepted backfill later (both fuzzed on the busy cluster below).
QUIET_UNARY = [m for m in UNARY if m.name not in ("ResumeJob", "BackfillJob")]


@pytest.fixture(scope="module")
def quiet_node(tmp_path_factory):
    """One node whose state changes only by requests: no idle leadership proofs during the
    test, and every job it holds is paused (this test never resumes one)."""
    cluster = LocalCluster(tmp_path_factory.mktemp("fuzz-quiet"), 1,
                           {"proof_interval_ms": "600000"}).start()
    try:
        node = cluster.leader()
        _seed(node, paused=True)
        yield node
    finally:
        cluster.stop()


@st.composite
def quiet_requests(draw):
    method = draw(st.sampled_from(QUIET_UNARY))
    raw = draw(wire(method.input_type))
    try:
        req = _cls(method.input_type).FromString(raw)
    except Exception:  # noqa: BLE001 - bytes that do not parse go as they are
        return method.name, raw
    changed = _pause_every_spec(req)  # created or updated paused, or it would fire on its own
    if method.name == "SetLimits" and req.limits.HasField("dedupe_max_age_ms"):
        # Every command (a linearizable read's barrier too) drops request ids older than this
        # age: a short one makes the state change with time alone (the busy test fuzzes it).
        req.limits.ClearField("dedupe_max_age_ms")
        changed = True
    if changed:
        raw = req.SerializeToString()
    return method.name, raw


def _pause_every_spec(msg) -> bool:
    """Set paused on every JobSpec inside `msg` (CreateJob, CreateJobs, UpdateJob)."""
    if msg.DESCRIPTOR is types_pb2.JobSpec.DESCRIPTOR:
        msg.paused = True
        return True
    found = False
    for field, value in msg.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        for sub in (value if field.is_repeated else [value]):
            if not isinstance(sub, (str, bytes, int)):  # map<k, scalar> values
                found = _pause_every_spec(sub) or found
    return found


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(case=quiet_requests())
def test_every_rpc_answers_a_documented_code_and_invalid_changes_nothing(quiet_node, case):
    name, raw = case
    method = BY_NAME[name]
    before = digest(quiet_node)
    code, details = call_unary(quiet_node, method, raw)
    event(f"{method.name} {code.name}")
    assert code in DOCUMENTED, _describe(method, raw, code, details)
    assert quiet_node.alive(), "the node died"
    if code == S.INVALID_ARGUMENT:
        assert digest(quiet_node) == before, \
            "INVALID_ARGUMENT changed the state: " + _describe(method, raw, code, details)


# --- three nodes, busy: every RPC incl. the worker stream, to any node -----------------------


class Busy:
    """A 3-node cluster whose jobs fire every second, and which node leads as last seen."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self._leader: NodeProc | None = None

    def node(self, to: int | None) -> NodeProc:
        """Node `to`, or (None) the leader as last seen."""
        if to is not None:
            return self.cluster.nodes[to]
        if self._leader is None:
            self._leader = self.cluster.leader()
        return self._leader

    def answered(self, node: NodeProc, code: S) -> None:
        if node is self._leader and code == S.UNAVAILABLE:
            self._leader = None  # an election: look again next time


@pytest.fixture(scope="module")
def busy(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("fuzz-busy"), 3).start()
    try:
        _seed(cluster.leader(), paused=False)
        yield Busy(cluster)
    finally:
        cluster.stop()


def _frame(kind: str, msg) -> bytes:
    return worker_pb2.WorkerMessage(**{kind: msg}).SerializeToString()


@st.composite
def worker_session(draw) -> tuple[list[bytes], list[tuple[bool, bytes]], bool]:
    """A Connect stream: opening frames (usually a Hello, often a valid one, and credits),
    then reports, each either about the first task the leader assigns (its lease patched in)
    or sent as drawn; and whether to wait for an Assign (credits were granted)."""
    opening, credits = [], 0
    first = draw(st.sampled_from(["valid hello", "valid hello", "hello", "anything"]))
    if first == "valid hello":
        opening.append(_frame("hello", worker_pb2.Hello(
            worker_id=draw(st.sampled_from(["w-1", "worker:2"])),
            queues=draw(st.sampled_from([[], ["default"], ["q", "default"]])))))
        credits = draw(st.sampled_from([1, 1, 5, 0, -1, 2**31 - 1]))
        opening.append(_frame("credits", worker_pb2.Credits(credits=credits)))
    elif first == "hello":
        opening.append(_frame("hello", draw(messages(worker_pb2.Hello.DESCRIPTOR))))
    reports = []
    for _ in range(draw(st.integers(0, 3))):
        on_assigned = draw(st.booleans())
        reports.append((on_assigned, draw(wire(worker_pb2.WorkerMessage.DESCRIPTOR))))
    return opening, reports, credits > 0


def _on_lease(raw: bytes, lease: worker_pb2.LeaseRef) -> bytes:
    """`raw` about `lease`, when it parses and is a report; else `raw` unchanged."""
    try:
        msg = worker_pb2.WorkerMessage.FromString(raw)
    except Exception:  # noqa: BLE001 - garbage goes as it is
        return raw
    kind = msg.WhichOneof("msg")
    if kind in ("complete", "fail"):
        getattr(msg, kind).lease.CopyFrom(lease)
    elif kind == "heartbeat":
        msg.heartbeat.leases.add().CopyFrom(lease)
    return msg.SerializeToString()


def call_worker(node: NodeProc, opening: list[bytes], reports: list[tuple[bool, bytes]],
                wait_for_assign: bool) -> tuple[S, str]:
    """Send the opening frames; once an Assign arrives (or ASSIGN_WAIT_S passed without one,
    or the stream ended) send the reports, then close the stream and read it to its end."""
    out: queue.Queue = queue.Queue()
    for frame in opening:
        out.put(frame)
    fn = node._channel().stream_stream(
        _path(CONNECT), request_serializer=None,
        response_deserializer=worker_pb2.ServerMessage.FromString)
    call = fn(iter(out.get, None), timeout=CALL_TIMEOUT_S)
    inbox: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_pump, args=(call, inbox), daemon=True)
    reader.start()
    lease = _first_assign(inbox, ASSIGN_WAIT_S if wait_for_assign else 0.0)
    for on_assigned, raw in reports:
        out.put(_on_lease(raw, lease) if on_assigned and lease is not None else raw)
    out.put(None)
    reader.join(CALL_TIMEOUT_S + 5)
    assert not reader.is_alive(), "the stream did not end"
    result = inbox.queue[-1] if inbox.queue else None
    if isinstance(result, grpc.RpcError):
        return result.code(), result.details() or ""
    return call.code(), call.details() or ""


def _pump(call, inbox: queue.Queue) -> None:
    try:
        for msg in call:
            inbox.put(msg)
    except grpc.RpcError as exc:
        inbox.put(exc)
    inbox.put(None)  # the end


def _first_assign(inbox: queue.Queue, wait_s: float) -> worker_pb2.LeaseRef | None:
    deadline = time.monotonic() + wait_s
    seen: list = []
    while (left := deadline - time.monotonic()) > 0:
        try:
            msg = inbox.get(timeout=left)
        except queue.Empty:
            break
        seen.append(msg)
        if msg is None or isinstance(msg, grpc.RpcError):
            break
        if msg.WhichOneof("msg") == "assign":
            break
    for msg in seen:  # put back what the caller reads at the end
        inbox.put(msg)
    last = seen[-1] if seen else None
    if isinstance(last, worker_pb2.ServerMessage) and last.WhichOneof("msg") == "assign":
        return last.assign.lease
    return None


@st.composite
def busy_requests(draw):
    to = draw(st.sampled_from([None, None, 0, 1, 2]))  # None: the leader
    if draw(st.integers(0, 3)) == 0:
        return to, CONNECT.name, draw(worker_session())
    method = draw(st.sampled_from(UNARY))
    return to, method.name, draw(wire(method.input_type))


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(case=busy_requests())
def test_every_rpc_and_the_worker_stream_answer_documented_codes_on_any_node(busy, case):
    to, name, raw = case
    method = BY_NAME[name]
    node = busy.node(to)
    if method is CONNECT:
        code, details = call_worker(node, *raw)
    else:
        code, details = call_unary(node, method, raw)
    busy.answered(node, code)
    event(f"{method.name} {code.name}")
    assert code in DOCUMENTED_IN_A_CLUSTER, _describe(method, raw, code, details)
    assert all(n.alive() for n in busy.cluster.nodes), "a node died"


def test_busy_cluster_still_serves_after_the_fuzz(busy):
    """A write and a read after the fuzz (which may have deleted any job, the seeds too)."""
    spec = types_pb2.JobSpec(name="after-the-fuzz", paused=True, schedule=types_pb2.Schedule(
        once=types_pb2.OnceSchedule(at_ms=1)), tasks=[types_pb2.TaskSpec(name="t0")])

    def create() -> types_pb2.Job:
        return busy.cluster.leader().jobs().CreateJob(api_pb2.CreateJobRequest(
            request_id="after-the-fuzz", spec=spec), timeout=CALL_TIMEOUT_S).job

    job = wait_for(create, timeout_s=60, what="CreateJob on the leader after the fuzz")
    got = busy.cluster.leader().jobs().GetJob(api_pb2.GetJobRequest(
        job=api_pb2.JobRef(job_id=job.job_id)), timeout=CALL_TIMEOUT_S).job
    assert got.spec.name == "after-the-fuzz"


@pytest.mark.parametrize("fixture", ["quiet_node", "busy"])
def test_no_node_logged_a_traceback(request, fixture):
    """Errors that never reach a status (a report task that raised, a loop that died)."""
    value = request.getfixturevalue(fixture)
    nodes = [value] if isinstance(value, NodeProc) else value.cluster.nodes
    for node in nodes:
        log = node.log_path.read_text(errors="replace")
        assert "Traceback" not in log, f"{node.node_id} logged:\n{log[log.index('Traceback'):][:3000]}"
