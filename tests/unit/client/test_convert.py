"""Round trips between the public dataclasses and their protobuf messages (``_convert``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gnomon.client import (
    Attempt,
    AttemptOutcome,
    ClusterLimits,
    ClusterStatus,
    CronSchedule,
    DeadLetter,
    IntervalSchedule,
    InvalidArgument,
    Job,
    JobSpec,
    LimitsUpdate,
    MisfirePolicy,
    NodeStatus,
    OnceSchedule,
    RetryPolicy,
    Run,
    RunState,
    RunTrigger,
    TaskInstance,
    TaskRef,
    TaskSpec,
    TaskState,
)
from gnomon.client import _convert as cv
from gnomon.client.worker.context import LeaseState, OutputTail
from gnomon.v1 import api_pb2, types_pb2, worker_pb2

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
UINT64 = st.integers(0, 2**64 - 1)
TEXT = st.text(max_size=20)
NAME = st.text(st.sampled_from("abcxyz019_.-"), min_size=1, max_size=12)
FLOAT = st.floats(allow_nan=False, allow_infinity=False)

schedules = st.one_of(
    st.builds(CronSchedule, expression=TEXT, timezone=NAME),
    st.builds(IntervalSchedule, interval_ms=INT64, anchor_ms=INT64),
    st.builds(OnceSchedule, at_ms=INT64),
)
retries = st.builds(
    RetryPolicy,
    max_attempts=INT32,
    initial_backoff_ms=INT64,
    max_backoff_ms=INT64,
    multiplier=FLOAT,
    jitter=FLOAT,
)
task_specs = st.builds(
    TaskSpec,
    name=NAME,
    queue=NAME,
    depends_on=st.lists(NAME, max_size=3).map(tuple),
    payload=st.binary(max_size=32),
    timeout_ms=INT64,
    retry=retries,
)
job_specs = st.builds(
    JobSpec,
    name=NAME,
    schedule=schedules,
    tasks=st.lists(task_specs, min_size=1, max_size=3).map(tuple),
    tenant=NAME,
    priority=INT32,
    misfire_policy=st.sampled_from(MisfirePolicy),
    misfire_grace_ms=INT64,
    paused=st.booleans(),
)
jobs = st.builds(
    Job,
    job_id=NAME,
    spec=job_specs,
    version=INT64,
    next_fire_ms=INT64,
    paused=st.booleans(),
    created_ms=INT64,
    updated_ms=INT64,
)
attempts = st.builds(
    Attempt,
    attempt=INT32,
    fencing_token=UINT64,
    worker_id=TEXT,
    started_ms=INT64,
    finished_ms=INT64,
    outcome=st.sampled_from(AttemptOutcome),
    error=TEXT,
    exit_code=st.none() | INT32,
    duration_ms=INT64,
    output_tail=TEXT,
)
task_instances = st.builds(
    TaskInstance,
    task_name=NAME,
    state=st.sampled_from(TaskState),
    attempt=INT32,
    fencing_token=UINT64,
    worker_id=TEXT,
    idempotency_key=TEXT,
    ready_ms=INT64,
    started_ms=INT64,
    finished_ms=INT64,
    retry_at_ms=INT64,
    last_error=TEXT,
    result=st.binary(max_size=32),
    lease_ttl_ms=INT64,
    lease_remaining_ms=INT64,
    attempts=st.lists(attempts, max_size=3).map(tuple),
)
runs = st.builds(
    Run,
    run_id=TEXT,
    job_id=TEXT,
    tenant=NAME,
    scheduled_for_ms=INT64,
    state=st.sampled_from(RunState),
    trigger=st.sampled_from(RunTrigger),
    created_ms=INT64,
    finished_ms=INT64,
    tasks=st.lists(task_instances, max_size=3).map(tuple),
    job_version=INT64,
)
dead_letters = st.builds(
    DeadLetter,
    run_id=TEXT,
    task_name=NAME,
    job_id=TEXT,
    tenant=NAME,
    attempts=INT32,
    last_error=TEXT,
    dead_ms=INT64,
)
node_statuses = st.builds(
    NodeStatus,
    node_id=TEXT,
    raft_address=TEXT,
    grpc_address=TEXT,
    role=st.sampled_from(["leader", "follower", "candidate", "unreachable"]),
    match_index=INT64,
    connected=st.booleans(),
)
OPTIONAL_INT64 = st.none() | INT64
cluster_limits = st.builds(
    ClusterLimits,
    dedupe_capacity=OPTIONAL_INT64,
    dedupe_max_age_ms=OPTIONAL_INT64,
    runs_retained_per_job=OPTIONAL_INT64,
    max_dead_letters=OPTIONAL_INT64,
    max_attempt_records=OPTIONAL_INT64,
)
cluster_statuses = st.builds(
    ClusterStatus,
    node_id=TEXT,
    leader_node_id=TEXT,
    leader_grpc_address=TEXT,
    term=INT64,
    commit_index=INT64,
    applied_index=INT64,
    nodes=st.lists(node_statuses, max_size=5).map(tuple),
    clock_ms=INT64,
    jobs=INT64,
    active_runs=INT64,
    dead_letters=INT64,
    state_digest=TEXT,
    version=TEXT,
    limits=cluster_limits,
    limits_version=INT64,
    dead_letters_evicted=INT64,
)


def _wire(msg):
    """Serialise and parse, so the trip also crosses the wire format."""
    return type(msg).FromString(msg.SerializeToString())


@given(schedules)
def test_schedule_round_trip(schedule):
    assert cv.schedule_from_proto(_wire(cv.schedule_to_proto(schedule))) == schedule


@given(retries)
def test_retry_policy_round_trip(retry):
    assert cv.retry_from_proto(_wire(cv.retry_to_proto(retry))) == retry


@given(task_specs)
def test_task_spec_round_trip(spec):
    assert cv.task_spec_from_proto(_wire(cv.task_spec_to_proto(spec))) == spec


@given(job_specs)
def test_job_spec_round_trip(spec):
    assert cv.job_spec_from_proto(_wire(cv.job_spec_to_proto(spec))) == spec


@given(jobs)
def test_job_round_trip(job):
    assert cv.job_from_proto(_wire(cv.job_to_proto(job))) == job


@given(task_instances)
def test_task_instance_round_trip(ti):
    assert cv.task_instance_from_proto(_wire(cv.task_instance_to_proto(ti))) == ti


@given(runs)
def test_run_round_trip(run):
    assert cv.run_from_proto(_wire(cv.run_to_proto(run))) == run


@given(dead_letters)
def test_dead_letter_round_trip(dl):
    assert cv.dead_letter_from_proto(_wire(cv.dead_letter_to_proto(dl))) == dl


@given(node_statuses)
def test_node_status_round_trip(node):
    assert cv.node_status_from_proto(_wire(cv.node_status_to_proto(node))) == node


@given(cluster_statuses)
def test_cluster_status_round_trip(status):
    assert cv.cluster_status_from_proto(_wire(cv.cluster_status_to_proto(status))) == status


@given(attempts)
def test_attempt_round_trip(attempt):
    assert cv.attempt_from_proto(_wire(cv.attempt_to_proto(attempt))) == attempt


@given(cluster_limits)
def test_cluster_limits_round_trip(limits):
    assert cv.cluster_limits_from_proto(_wire(cv.cluster_limits_to_proto(limits))) == limits


@given(cluster_limits, INT64)
def test_limits_update_round_trip(limits, version):
    update = LimitsUpdate(limits, version)
    assert cv.limits_update_from_proto(_wire(cv.limits_update_to_proto(update))) == update


def test_zero_is_a_value_and_unset_is_none():
    # exit code 0 is not "no process"; a limit of 0 is not "keep the value".
    assert cv.attempt_to_proto(Attempt(1, exit_code=0)).HasField("exit_code")
    assert not cv.attempt_to_proto(Attempt(1)).HasField("exit_code")
    assert cv.attempt_from_proto(types_pb2.Attempt(attempt=1)).exit_code is None
    msg = cv.cluster_limits_to_proto(ClusterLimits(runs_retained_per_job=0))
    assert msg.HasField("runs_retained_per_job")
    assert not msg.HasField("dedupe_capacity")
    assert [f.name for f, _ in msg.ListFields()] == ["runs_retained_per_job"]


def test_limit_fields_match_the_proto():
    assert list(ClusterLimits.__dataclass_fields__) == [
        f.name for f in types_pb2.ClusterLimits.DESCRIPTOR.fields
    ]
    assert all(
        f.has_presence for f in types_pb2.ClusterLimits.DESCRIPTOR.fields
    ), "every limit must be optional on the wire (unset keeps its value)"


@given(NAME, NAME)
def test_task_ref_round_trip(run_id, task_name):
    ref = TaskRef(run_id, task_name)
    assert cv.task_ref_from_proto(_wire(cv.task_ref_to_proto(ref))) == ref
    assert cv.task_ref_to_proto((run_id, task_name)) == cv.task_ref_to_proto(ref)


@given(job_specs)
def test_proto_round_trip_of_normalised_messages(spec):
    msg = cv.job_spec_to_proto(spec)
    assert cv.job_spec_to_proto(cv.job_spec_from_proto(msg)) == msg


def test_wire_defaults_are_normalised():
    msg = types_pb2.JobSpec(
        name="j",
        schedule=types_pb2.Schedule(cron=types_pb2.CronSchedule(expression="@daily")),
        tasks=[types_pb2.TaskSpec(name="main")],
    )
    spec = cv.job_spec_from_proto(msg)
    assert spec.tenant == "default"
    assert spec.tasks[0].queue == "default"
    assert spec.schedule == CronSchedule("@daily", "UTC")
    assert spec.misfire_policy is MisfirePolicy.RUN_ALL
    assert spec.tasks[0].retry == RetryPolicy()


def test_unknown_enum_values_from_a_newer_server_map_to_unspecified():
    run = types_pb2.Run(
        run_id="j1@0",
        state=99,
        trigger=42,
        tasks=[types_pb2.TaskInstance(state=77, attempts=[types_pb2.Attempt(outcome=55)])],
    )
    converted = cv.run_from_proto(run)
    assert converted.state is RunState.UNSPECIFIED
    assert converted.trigger is RunTrigger.UNSPECIFIED
    assert converted.tasks[0].state is TaskState.UNSPECIFIED
    assert converted.tasks[0].attempts[0].outcome is AttemptOutcome.UNSPECIFIED


def test_every_enum_member_has_a_wire_value():
    for member in RunState:
        assert cv._RUN_STATE_BACK[cv._RUN_STATE[member]] is member
    for member in TaskState:
        assert cv._TASK_STATE_BACK[cv._TASK_STATE[member]] is member
    for member in RunTrigger:
        assert cv._RUN_TRIGGER_BACK[cv._RUN_TRIGGER[member]] is member
    for member in MisfirePolicy:
        assert cv._MISFIRE_BACK[cv._MISFIRE[member]] is member
    for member in AttemptOutcome:
        assert cv._ATTEMPT_OUTCOME_BACK[cv._ATTEMPT_OUTCOME[member]] is member
    assert set(cv._ATTEMPT_OUTCOME_BACK) == set(types_pb2.AttemptOutcome.values())
    # Every proto enum value is covered (UNSPECIFIED misfire means RUN_ALL).
    assert set(cv._RUN_STATE_BACK) == set(types_pb2.RunState.values())
    assert set(cv._TASK_STATE_BACK) == set(types_pb2.TaskState.values())
    assert set(cv._RUN_TRIGGER_BACK) == set(types_pb2.RunTrigger.values())
    assert set(cv._MISFIRE_BACK) | {types_pb2.MISFIRE_POLICY_UNSPECIFIED} == set(
        types_pb2.MisfirePolicy.values()
    )


def test_schedule_without_kind_is_rejected():
    with pytest.raises(ValueError):
        cv.schedule_from_proto(types_pb2.Schedule())


def test_job_ref():
    assert cv.job_ref("j7", None, None) == api_pb2.JobRef(job_id="j7")
    assert cv.job_ref(None, None, "nightly") == api_pb2.JobRef(tenant="default", name="nightly")
    assert cv.job_ref(None, "acme", "nightly") == api_pb2.JobRef(tenant="acme", name="nightly")
    with pytest.raises(InvalidArgument):
        cv.job_ref(None, "acme", None)
    with pytest.raises(InvalidArgument):
        cv.job_ref("j7", None, "nightly")


def test_consistency():
    assert cv.consistency_to_proto("linearizable") == api_pb2.CONSISTENCY_LINEARIZABLE
    assert cv.consistency_to_proto("stale") == api_pb2.CONSISTENCY_STALE
    with pytest.raises(InvalidArgument):
        cv.consistency_to_proto("eventual")  # type: ignore[arg-type]


def test_task_context_from_assign():
    assign = worker_pb2.Assign(
        lease=worker_pb2.LeaseRef(run_id="j1@1000", task_name="extract", fencing_token=42),
        job_id="j1",
        attempt=2,
        idempotency_key="j1@1000:extract",
        payload=b'{"a":1}',
        scheduled_for_ms=1000,
        lease_ttl_ms=30000,
        deadline_ms=5000,
        max_attempts=3,
    )
    ctx = cv.task_context_from_assign(
        assign, worker_id="w1", lease=LeaseState(), output=OutputTail()
    )
    assert (ctx.run_id, ctx.task_name, ctx.fencing_token) == ("j1@1000", "extract", 42)
    assert (ctx.tenant, ctx.queue) == ("default", "default")
    assert (ctx.attempt, ctx.max_attempts, ctx.deadline_ms) == (2, 3, 5000)
    assert ctx.json() == {"a": 1}
    assert ctx.idempotency_key == "j1@1000:extract"
    assert ctx.worker_id == "w1"
    assert ctx.lease_valid()


def test_a_wait_kind_this_client_does_not_know_is_unspecified_not_an_error():
    """A newer cluster may name a wait kind this client lacks (WaitKind.Name raised)."""
    from gnomon.client import _convert
    from gnomon.v1 import api_pb2

    assert _convert.run_wait_from_proto(api_pb2.RunWait(kind=99)).kind == "unspecified"
    known = api_pb2.RunWait(kind=api_pb2.WAIT_KIND_TENANT_CONCURRENCY)
    assert _convert.run_wait_from_proto(known).kind == "tenant_concurrency"
