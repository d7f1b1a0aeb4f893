"""Servicers (node/api/grpc/), called directly on the in-process leader with a stand-in
context: error mapping, not-leader answers, paging, runs of deleted jobs, delete with
cancel_running, limits, status, and the worker stream's report acks and output cut."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gnomon.node.api.grpc import errors
from gnomon.node.api.grpc.access import set_principal
from gnomon.node.api.grpc.base import translated
from gnomon.node.api.grpc.cluster import ClusterServicer
from gnomon.node.api.grpc.errors import (
    EXCEPTION_CODES,
    LEADER_METADATA_KEY,
    REJECTED_CODES,
    NotLeader,
    ServiceError,
    check,
)
from gnomon.node.api.grpc.jobs import JobServicer
from gnomon.node.api.grpc.worker import WorkerServicer
from gnomon.node.api.grpc.worker_leases import MAX_ERROR_BYTES
from gnomon.node.api.grpc.worker_leases import tail as _tail
from gnomon.node.core import digest
from gnomon.node.core.commands import Barrier, CompleteTask, CreateJob
from gnomon.node.core.errors import Code, Rejected
from gnomon.node.core.model import AttemptOutcome, RunState, TaskState
from gnomon.node.raft.errors import LeadershipLost, NotCommitted, Overloaded
from gnomon.node.security.auth import ANONYMOUS
from gnomon.node.spec.schedules import ScheduleError
from gnomon.node.spec.validate import ValidationError
from gnomon.v1 import api_pb2, types_pb2, worker_pb2

from .harness import MEMBERS, Aborted, Context, Stream, Worker, WorkerConn, has, turns, until

S = grpc.StatusCode


def spec_pb(name: str = "job", tenant: str = "acme", *, tasks=("a",), queue: str = "default",
            cron: str = "", interval_ms: int = 3_600_000) -> types_pb2.JobSpec:
    schedule = (types_pb2.Schedule(cron=types_pb2.CronSchedule(expression=cron)) if cron
                else types_pb2.Schedule(interval=types_pb2.IntervalSchedule(
                    interval_ms=interval_ms)))
    return types_pb2.JobSpec(tenant=tenant, name=name, schedule=schedule,
                             tasks=[types_pb2.TaskSpec(name=t, queue=queue) for t in tasks])


async def call(method, request):
    """The response, or the Aborted the servicer ended the call with."""
    try:
        return await method(request, Context())
    except Aborted as exc:
        return exc


def aborted(result, code: grpc.StatusCode, field: str = "") -> Aborted:
    """`result` ended the call with `code`, its message naming `field` ("field: rule")."""
    assert isinstance(result, Aborted), f"expected {code}, got a response: {result}"
    assert result.code == code, (result.code, result.details)
    if field:
        assert result.details.startswith(f"{field}: "), result.details
    return result


@pytest.fixture(autouse=True)
def caller():
    """The access guard's part: who calls (auth off: everyone is admin) and through which
    RPC (one for every call of a test: the scope of its request ids)."""
    set_principal(ANONYMOUS, "JobService.Test")


@pytest.fixture
async def api(leader):
    return JobServicer(leader)


# -- errors.py: one table ---------------------------------------------------------------

EXCEPTIONS = {
    ValidationError: (lambda: ValidationError("spec.tasks[0].queue", "must match"),
                      S.INVALID_ARGUMENT, "spec.tasks[0].queue: must match"),
    ScheduleError: (lambda: ScheduleError("spec.schedule.cron.expression", "invalid"),
                    S.INVALID_ARGUMENT, "spec.schedule.cron.expression: invalid"),
    Overloaded: (lambda: Overloaded("9 commands waiting for commit (max_pending_commands 9)"),
                 S.RESOURCE_EXHAUSTED, "max_pending_commands 9"),
    NotCommitted: (lambda: NotCommitted("entry not committed (reason 5)"),
                   S.UNAVAILABLE, "not committed"),
    NotLeader: (lambda: NotLeader("10.0.0.2:8001"), S.UNAVAILABLE, "the leader is 10.0.0.2:8001"),
    LeadershipLost: (lambda: LeadershipLost("this node no longer leads: ask the leader"),
                     S.UNAVAILABLE, "no longer leads"),
}


def test_the_error_table_covers_every_mapped_exception_and_core_code():
    # ScheduleError is a ValidationError: mapped through its base class.
    assert set(EXCEPTIONS) - {ScheduleError} == set(EXCEPTION_CODES)
    core_codes = {v for k, v in vars(Code).items() if k.isupper()}
    assert set(REJECTED_CODES) == core_codes


@pytest.mark.parametrize("kind", list(EXCEPTIONS), ids=lambda k: k.__name__)
async def test_each_exception_maps_to_its_code_with_its_message(kind):
    make_exc, code, fragment = EXCEPTIONS[kind]
    exc = make_exc()
    assert errors.status_of(exc) == (code, str(exc))
    with pytest.raises(Aborted) as caught:
        await errors.abort(Context(), exc)
    assert caught.value.code == code and fragment in caught.value.details
    if kind is NotLeader:
        assert caught.value.trailing[LEADER_METADATA_KEY] == "10.0.0.2:8001"
    else:
        assert LEADER_METADATA_KEY not in caught.value.trailing


@pytest.mark.parametrize("core_code", sorted(REJECTED_CODES))
async def test_each_rejection_maps_to_its_code_naming_the_field(core_code):
    with pytest.raises(ServiceError) as caught:
        check(Rejected(core_code, "spec.name: the rule"))
    assert (caught.value.code, str(caught.value)) == (REJECTED_CODES[core_code],
                                                       "spec.name: the rule")
    assert check(Barrier()) == Barrier()  # anything else passes through


async def test_an_unexpected_exception_is_not_mapped_but_raised():
    class Svc:
        @translated
        async def Method(self, request, context):  # noqa: N802
            raise KeyError("bug")

    assert errors.status_of(KeyError("x")) is None
    with pytest.raises(KeyError):
        await Svc().Method(None, Context())


# -- every error a client can meet, through the servicers ---------------------------------

def _limits(**kw) -> api_pb2.SetLimitsRequest:
    return api_pb2.SetLimitsRequest(limits=types_pb2.ClusterLimits(**kw))


ERROR_CASES = [
    # (id, servicer, method, request, code, field, commits nothing before answering)
    ("bad-tenant", "jobs", "CreateJob", api_pb2.CreateJobRequest(spec=spec_pb(tenant="Bad T")),
     S.INVALID_ARGUMENT, "spec.tenant", True),
    ("bad-cron", "jobs", "CreateJob", api_pb2.CreateJobRequest(spec=spec_pb(cron="nope")),
     S.INVALID_ARGUMENT, "spec.schedule.cron.expression", True),
    ("bad-queue", "jobs", "CreateJob", api_pb2.CreateJobRequest(spec=spec_pb(queue="a b")),
     S.INVALID_ARGUMENT, "spec.tasks[0].queue", True),
    ("cycle", "jobs", "CreateJob", api_pb2.CreateJobRequest(spec=types_pb2.JobSpec(
        tenant="acme", name="cyc", schedule=spec_pb().schedule,
        tasks=[types_pb2.TaskSpec(name="a", depends_on=["a"])])),
     S.INVALID_ARGUMENT, "spec.tasks[0].depends_on", True),
    ("long-request-id", "jobs", "CreateJob",
     api_pb2.CreateJobRequest(request_id="r" * 129, spec=spec_pb("x")),
     S.INVALID_ARGUMENT, "request_id", True),
    ("duplicate", "jobs", "CreateJob", api_pb2.CreateJobRequest(spec=spec_pb("existing")),
     S.ALREADY_EXISTS, "spec.name", False),
    ("quota", "jobs", "CreateJob", api_pb2.CreateJobRequest(spec=spec_pb("third")),
     S.RESOURCE_EXHAUSTED, "spec.tenant", False),
    ("unknown-job", "jobs", "GetJob", api_pb2.GetJobRequest(job=api_pb2.JobRef(job_id="j99")),
     S.NOT_FOUND, "job.job_id", False),
    ("unknown-name", "jobs", "GetJob",
     api_pb2.GetJobRequest(job=api_pb2.JobRef(tenant="acme", name="ghost")),
     S.NOT_FOUND, "job.name", False),
    ("no-ref", "jobs", "GetJob", api_pb2.GetJobRequest(), S.INVALID_ARGUMENT, "job", True),
    ("stale-version", "jobs", "UpdateJob", api_pb2.UpdateJobRequest(
        job=api_pb2.JobRef(job_id="j1"), spec=spec_pb("existing"), expected_version=7),
     S.FAILED_PRECONDITION, "expected_version", False),
    ("rename", "jobs", "UpdateJob", api_pb2.UpdateJobRequest(
        job=api_pb2.JobRef(job_id="j1"), spec=spec_pb("renamed")),
     S.INVALID_ARGUMENT, "spec.name", True),
    ("negative-limit", "jobs", "ListJobs", api_pb2.ListJobsRequest(limit=-1),
     S.INVALID_ARGUMENT, "limit", True),
    ("no-run-id", "jobs", "GetRun", api_pb2.GetRunRequest(), S.INVALID_ARGUMENT, "run_id", True),
    ("unknown-run", "jobs", "CancelRun", api_pb2.CancelRunRequest(run_id="j1@5"),
     S.NOT_FOUND, "run_id", False),
    ("replay-nothing", "jobs", "ReplayDeadLetters", api_pb2.ReplayDeadLettersRequest(),
     S.INVALID_ARGUMENT, "tasks", True),
    ("replay-unknown", "jobs", "ReplayDeadLetters", api_pb2.ReplayDeadLettersRequest(
        tasks=[api_pb2.TaskRef(run_id="j1@5", task_name="a")]),
     S.NOT_FOUND, "tasks[0]", False),
    ("bad-limit", "cluster", "SetLimits", _limits(max_dead_letters=0),
     S.INVALID_ARGUMENT, "limits.max_dead_letters", True),
    ("limits-version", "cluster", "SetLimits",
     api_pb2.SetLimitsRequest(limits=types_pb2.ClusterLimits(), expected_version=42),
     S.FAILED_PRECONDITION, "expected_version", False),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
async def test_every_error_maps_to_its_code_naming_the_field(make, case):
    _, servicer, method, request, code, field, commits_nothing = case
    h = await make(max_jobs_per_tenant=1)
    await h.lead()
    svc = {"jobs": JobServicer(h), "cluster": ClusterServicer(h)}[servicer]
    first = await call(JobServicer(h).CreateJob, api_pb2.CreateJobRequest(spec=spec_pb("existing")))
    assert first.job.job_id == "j1"
    before, entries = digest(h.state), len(h.raft.submitted)
    aborted(await call(getattr(svc, method), request), code, field)
    if commits_nothing:
        assert len(h.raft.submitted) == entries, "a refused request proposed an entry"
        assert digest(h.state) == before


async def test_a_full_proposer_is_resource_exhausted(make):
    h = await make(max_pending_commands=3, max_inflight_batches=1)
    await h.lead()
    api = JobServicer(h)
    h.raft.hold()
    waiting = [asyncio.create_task(h.proposer.propose(Barrier()))]
    await until(lambda: h.raft.waiting() == 1, "an entry waiting for commit")
    waiting += [asyncio.create_task(h.proposer.propose(Barrier())) for _ in range(3)]
    await until(lambda: h.proposer.pending() == 3, "a full queue")
    result = await call(api.CreateJob, api_pb2.CreateJobRequest(spec=spec_pb("late")))
    aborted(result, S.RESOURCE_EXHAUSTED)
    assert "max_pending_commands" in result.details
    assert "late" not in {j.spec.name for j in h.state.jobs.values()}
    h.raft.release()
    await asyncio.gather(*waiting)


async def test_an_entry_that_did_not_commit_is_unavailable(leader, api):
    leader.raft.fail(has(CreateJob))
    result = await call(api.CreateJob, api_pb2.CreateJobRequest(spec=spec_pb("lost")))
    assert isinstance(result, Aborted) and result.code == S.UNAVAILABLE
    assert "not committed" in result.details
    assert leader.state.jobs == {}


# -- not the leader -----------------------------------------------------------------------

async def test_a_follower_answers_unavailable_naming_the_leader(leader, api):
    created = await call(api.CreateJob, api_pb2.CreateJobRequest(spec=spec_pb("kept")))
    await leader.demote(leader=MEMBERS[1])
    entries = len(leader.raft.submitted)
    for method, request in [
        (api.CreateJob, api_pb2.CreateJobRequest(spec=spec_pb("new"))),
        (api.DeleteJob, api_pb2.DeleteJobRequest(job=api_pb2.JobRef(job_id="j1"))),
        (api.GetJob, api_pb2.GetJobRequest(job=api_pb2.JobRef(job_id="j1"))),
        (ClusterServicer(leader).SetLimits, _limits(dedupe_capacity=5)),
    ]:
        result = await call(method, request)
        assert isinstance(result, Aborted) and result.code == S.UNAVAILABLE, result
        assert result.trailing[LEADER_METADATA_KEY] == MEMBERS[1].grpc_addr
        assert MEMBERS[1].grpc_addr in result.details
    assert len(leader.raft.submitted) == entries
    # A stale read is served from the local state.
    stale = await call(api.GetJob, api_pb2.GetJobRequest(
        job=api_pb2.JobRef(job_id="j1"), consistency=api_pb2.CONSISTENCY_STALE))
    assert stale.job == created.job

    await leader.demote(leader=None)  # no leader known
    result = await call(api.CreateJob, api_pb2.CreateJobRequest(spec=spec_pb("new")))
    assert result.code == S.UNAVAILABLE and "no leader elected yet" in result.details
    assert LEADER_METADATA_KEY not in result.trailing


# -- ListJobs paging ----------------------------------------------------------------------

async def test_list_jobs_pages_by_creation_order_with_a_tenant_filter(leader, api):
    for name, tenant in [("a1", "a"), ("b1", "b"), ("a2", "a"), ("a3", "a"), ("b2", "b"),
                         ("a4", "a"), ("b3", "b"), ("a5", "a")]:
        await call(api.CreateJob, api_pb2.CreateJobRequest(spec=spec_pb(name, tenant)))
    assert (await call(api.DeleteJob, api_pb2.DeleteJobRequest(
        job=api_pb2.JobRef(job_id="j4")))) == api_pb2.DeleteJobResponse()

    async def pages(**kw) -> list[tuple[list[str], str]]:
        out, after = [], ""
        while True:
            resp = await call(api.ListJobs, api_pb2.ListJobsRequest(after_job_id=after, **kw))
            out.append(([j.job_id for j in resp.jobs], resp.next_after_job_id))
            after = resp.next_after_job_id
            if not after:
                return out

    assert await pages(limit=2) == [(["j1", "j2"], "j2"), (["j3", "j5"], "j5"),
                                    (["j6", "j7"], "j7"), (["j8"], "")]
    assert await pages(limit=2, tenant="a") == [(["j1", "j3"], "j3"), (["j6", "j8"], "")]
    assert await pages(limit=10, tenant="b") == [(["j2", "j5", "j7"], "")]
    assert await pages(tenant="nobody") == [([], "")]
    # Paging on from a deleted job's id works: ids are ordered.
    resp = await call(api.ListJobs, api_pb2.ListJobsRequest(after_job_id="j4", limit=1))
    assert ([j.job_id for j in resp.jobs], resp.next_after_job_id) == (["j5"], "j5")
    assert [j.spec.name for j in (await call(api.ListJobs, api_pb2.ListJobsRequest(
        tenant="a", limit=1))).jobs] == ["a1"]
    for bad in ("x7", "j", "7", "j-1"):
        aborted(await call(api.ListJobs, api_pb2.ListJobsRequest(after_job_id=bad)),
                S.INVALID_ARGUMENT, "after_job_id")


# -- runs of deleted jobs -----------------------------------------------------------------

async def test_list_runs_of_a_deleted_job_by_id_and_of_an_id_never_created(leader, api):
    job = (await call(api.CreateJob, api_pb2.CreateJobRequest(spec=spec_pb("gone")))).job
    ref = api_pb2.JobRef(job_id=job.job_id)
    done = (await call(api.TriggerJob, api_pb2.TriggerJobRequest(job=ref))).run.run_id
    queued = (await call(api.TriggerJob, api_pb2.TriggerJobRequest(job=ref))).run.run_id
    token = await leader.grant(done)
    await leader.propose(CompleteTask(done, "a", token, b"ok", exit_code=0))
    await call(api.DeleteJob, api_pb2.DeleteJobRequest(job=ref))
    assert job.job_id not in leader.state.jobs
    assert done not in leader.state.runs and queued not in leader.state.runs  # to history

    resp = await call(api.ListRuns, api_pb2.ListRunsRequest(job=ref))
    assert isinstance(resp, api_pb2.ListRunsResponse), resp
    states = {r.run_id: r.state for r in resp.runs}
    assert states == {done: types_pb2.RUN_STATE_SUCCEEDED, queued: types_pb2.RUN_STATE_CANCELLED}
    got = await call(api.GetRun, api_pb2.GetRunRequest(run_id=done))
    assert got.run.tasks[0].result == b"ok"

    aborted(await call(api.ListRuns, api_pb2.ListRunsRequest(job=api_pb2.JobRef(job_id="j99"))),
            S.NOT_FOUND, "job.job_id")
    aborted(await call(api.ListRuns, api_pb2.ListRunsRequest(
        job=api_pb2.JobRef(tenant="acme", name="gone"))), S.NOT_FOUND, "job.name")


# -- DeleteJob cancel_running ---------------------------------------------------------------

@pytest.mark.parametrize("cancel_running", [True, False])
async def test_delete_job_cancel_running(leader, api, cancel_running):
    job = (await call(api.CreateJob, api_pb2.CreateJobRequest(
        spec=spec_pb("del", tasks=("a", "b"))))).job
    ref = api_pb2.JobRef(job_id=job.job_id)
    run_id = (await call(api.TriggerJob, api_pb2.TriggerJobRequest(job=ref))).run.run_id
    w = Worker(leader, "w1")
    leader.dispatcher.add_credits(w.session, 1)
    [assign] = await until(lambda: w.of("assign"), "one task leased")
    leased, queued = assign.lease.task_name, {"a": "b", "b": "a"}[assign.lease.task_name]
    resp = await call(api.DeleteJob, api_pb2.DeleteJobRequest(
        job=ref, cancel_running=cancel_running))
    assert resp == api_pb2.DeleteJobResponse()
    assert job.job_id not in leader.state.jobs
    if cancel_running:
        [cancel] = await until(lambda: w.of("cancel"), "Cancel pushed to the holder")
        assert (cancel.lease, cancel.reason) == (assign.lease, "job deleted")
        assert run_id not in leader.state.runs  # ended, and a deleted job keeps none
        run = (await call(api.GetRun, api_pb2.GetRunRequest(run_id=run_id))).run  # history
        assert run.state == types_pb2.RUN_STATE_CANCELLED
        assert {t.task_name: t.state for t in run.tasks} == {
            "a": types_pb2.TASK_STATE_CANCELLED, "b": types_pb2.TASK_STATE_CANCELLED}
        [held] = [t for t in run.tasks if t.task_name == leased]
        assert held.attempts[-1].outcome == types_pb2.ATTEMPT_OUTCOME_CANCELLED
    else:
        assert leader.inst(run_id, queued).state == TaskState.CANCELLED
        assert leader.inst(run_id, leased).state == TaskState.LEASED  # finishes its work
        assert leader.state.runs[run_id].state == RunState.RUNNING
        await turns()
        assert w.of("cancel") == []
        await leader.propose(CompleteTask(run_id, leased, assign.lease.fencing_token))
        assert run_id not in leader.state.runs


# -- SetLimits and GetStatus ----------------------------------------------------------------

async def test_set_limits_keeps_unset_fields(leader):
    svc = ClusterServicer(leader)
    before, version = leader.state.limits, leader.state.limits_version
    resp = await call(svc.SetLimits, api_pb2.SetLimitsRequest(
        request_id="l1", limits=types_pb2.ClusterLimits(runs_retained_per_job=5,
                                                        dedupe_max_age_ms=0)))
    assert resp.limits_version == version + 1
    want = {"dedupe_capacity": before.dedupe_capacity, "dedupe_max_age_ms": 0,
            "runs_retained_per_job": 5, "max_dead_letters": before.max_dead_letters,
            "max_attempt_records": before.max_attempt_records}
    assert {f: getattr(resp.limits, f) for f in want} == want
    assert {f: getattr(leader.state.limits, f) for f in want} == want
    again = await call(svc.SetLimits, api_pb2.SetLimitsRequest(
        limits=types_pb2.ClusterLimits(max_attempt_records=4), expected_version=version + 1))
    assert again.limits_version == version + 2 and again.limits.runs_retained_per_job == 5
    status = await call(svc.GetStatus, api_pb2.GetStatusRequest())
    assert status.limits == again.limits and status.limits_version == version + 2


async def test_get_status_includes_the_digest_on_request(leader, api):
    await call(api.CreateJob, api_pb2.CreateJobRequest(spec=spec_pb("s1")))
    svc = ClusterServicer(leader)
    plain = await call(svc.GetStatus, api_pb2.GetStatusRequest())
    assert plain.state_digest == ""
    full = await call(svc.GetStatus, api_pb2.GetStatusRequest(include_digest=True))
    assert full.state_digest == digest(leader.state) and len(full.state_digest) == 64
    assert (full.node_id, full.leader_node_id, full.jobs) == ("n1", "n1", 1)
    assert full.leader_grpc_address == MEMBERS[0].grpc_addr
    assert full.clock_ms == leader.state.clock_ms
    assert [(n.node_id, n.role, n.connected) for n in full.nodes] == [
        ("n1", "leader", True), ("n2", "follower", True), ("n3", "follower", True)]


# -- the worker stream ----------------------------------------------------------------------

def Connected(h, worker_id: str = "w1", held: list[int] = ()) -> WorkerConn:  # noqa: N802
    return WorkerConn(h, worker_id, held=held, clean=True)


async def connected_with_lease(h, **credits):
    job = await h.create_job("work", **credits)
    run_id = await h.run_now(job)
    conn = Connected(h)
    [welcome] = await conn.wait("welcome")
    assert welcome.node_id == "n1" and welcome.lease_ttl_ms == h.config.lease_ttl_ms
    conn.stream.send(credits=worker_pb2.Credits(credits=1))
    [assign] = await conn.wait("assign")
    return conn, run_id, assign.lease


async def test_a_report_with_the_current_token_is_accepted(leader):
    conn, run_id, lease = await connected_with_lease(leader)
    conn.stream.send(complete=worker_pb2.Complete(lease=lease, result=b"done", exit_code=0,
                                                  duration_ms=12, output_tail="out"))
    [ack] = await conn.wait("report_ack")
    assert (ack.accepted, ack.retry, ack.lease) == (True, False, lease)
    inst = leader.inst(run_id)
    assert (inst.state, inst.result) == (TaskState.SUCCEEDED, b"done")
    attempt = inst.attempts[-1]
    assert (attempt.exit_code, attempt.duration_ms, attempt.output_tail) == (0, 12, "out")
    await conn.end()


async def test_a_rejected_report_is_not_accepted_and_not_to_be_retried(leader):
    conn, run_id, lease = await connected_with_lease(leader)
    stale = worker_pb2.LeaseRef(run_id=lease.run_id, task_name=lease.task_name,
                                fencing_token=lease.fencing_token + 100)
    conn.stream.send(complete=worker_pb2.Complete(lease=stale, result=b"x"))
    [ack] = await conn.wait("report_ack")
    assert (ack.accepted, ack.retry, ack.lease) == (False, False, stale)
    assert ack.detail.startswith("fencing_token: stale fencing token")
    assert leader.inst(run_id).state == TaskState.LEASED
    await conn.end()


async def test_an_oversized_result_is_recorded_as_a_final_failure(leader):
    conn, run_id, lease = await connected_with_lease(leader)
    big = b"x" * (leader.config.max_result_bytes + 1)
    conn.stream.send(complete=worker_pb2.Complete(lease=lease, result=big))
    [ack] = await conn.wait("report_ack")
    assert (ack.accepted, ack.retry) == (False, False)
    assert "max_result_bytes" in ack.detail and ack.detail.startswith("result: ")
    inst = leader.inst(run_id)
    assert inst.state == TaskState.DEAD and (run_id, "a") in leader.state.dead_letters
    assert inst.result == b"" and inst.attempts[-1].outcome == AttemptOutcome.FAILED
    await conn.end()


async def test_a_report_that_did_not_commit_asks_for_a_retry(leader):
    conn, run_id, lease = await connected_with_lease(leader)
    leader.raft.fail(has(CompleteTask))
    conn.stream.send(complete=worker_pb2.Complete(lease=lease, result=b"r"))
    [ack] = await conn.wait("report_ack")
    assert (ack.accepted, ack.retry) == (False, True)
    assert "not recorded" in ack.detail
    assert leader.inst(run_id).state == TaskState.LEASED
    conn.stream.send(complete=worker_pb2.Complete(lease=lease, result=b"r"))  # as told
    [_, ack] = await conn.wait("report_ack", 2)
    assert ack.accepted and leader.inst(run_id).state == TaskState.SUCCEEDED
    await conn.end()


async def test_output_tail_and_error_are_cut_on_the_leader(leader):
    conn, run_id, lease = await connected_with_lease(leader)
    limit = leader.config.max_output_tail_bytes
    tail = "old" * 100 + "é" * limit  # the newest bytes are kept, no character split
    error = "E" * (MAX_ERROR_BYTES + 50)
    conn.stream.send(fail=worker_pb2.Fail(lease=lease, error=error, retryable=True,
                                          output_tail=tail, exit_code=3))
    [ack] = await conn.wait("report_ack")
    assert ack.accepted
    attempt = leader.inst(run_id).attempts[-1]
    assert attempt.output_tail == "é" * (limit // 2)
    assert attempt.error == "E" * MAX_ERROR_BYTES and attempt.exit_code == 3
    await conn.end()


@pytest.mark.parametrize("text, limit, keep, want", [
    ("short", 10, "tail", "short"),
    ("0123456789", 4, "tail", "6789"),
    ("0123456789", 4, "head", "0123"),
    ("aé" * 3, 4, "tail", "aé"),  # the last 4 of 9 bytes start inside an 'é': dropped
    ("aé" * 3, 4, "head", "aéa"),
    ("日本語", 5, "tail", "語"),
    ("日本語", 5, "head", "日"),
    ("", 0, "tail", ""),
])
def test_tail_cuts_to_bytes_without_splitting_characters(text, limit, keep, want):
    got = _tail(text, limit, keep)
    assert len(got.encode()) <= limit or got == text
    assert got == want


def test_a_zero_byte_limit_keeps_nothing():
    """Found by this file: data[-0:] is all of data, so limit 0 used to keep everything."""
    assert _tail("output", 0) == ""


async def test_heartbeats_are_acknowledged_only_while_fresh(leader, clock):
    conn, run_id, lease = await connected_with_lease(leader)
    conn.stream.send(heartbeat=worker_pb2.Heartbeat(leases=[lease]))
    [ack] = await conn.wait("heartbeat_ack")
    assert (list(ack.valid_tokens), list(ack.revoked_tokens)) == ([lease.fencing_token], [])
    leader.raft.hold()  # proofs stop committing
    clock.mono += 3 * leader.config.proof_interval_ms
    assert not leader.leadership.fresh()
    conn.stream.send(heartbeat=worker_pb2.Heartbeat(leases=[lease]))
    [_, ack] = await conn.wait("heartbeat_ack", 2)
    assert (list(ack.valid_tokens), list(ack.revoked_tokens)) == ([], [])
    leader.raft.release()
    await conn.end()


async def test_hello_resumes_listed_leases_and_expires_the_others(leader):
    job = await leader.create_job("hello")
    kept, lost = await leader.run_now(job), await leader.run_now(job)
    t_kept = await leader.grant(kept)
    await leader.grant(lost)
    conn = Connected(leader, held=[t_kept])
    [welcome] = await conn.wait("welcome")
    assert list(welcome.resumed_tokens) == [t_kept]
    await until(lambda: leader.inst(lost).state != TaskState.LEASED, "the unlisted lease")
    assert leader.inst(kept).state == TaskState.LEASED
    await conn.end()


async def test_a_stream_to_a_follower_is_refused_naming_the_leader(leader):
    await leader.demote(leader=MEMBERS[2])
    conn = Connected(leader)
    [result] = await conn.end()
    assert isinstance(result, Aborted) and result.code == S.UNAVAILABLE
    assert result.trailing[LEADER_METADATA_KEY] == MEMBERS[2].grpc_addr


async def test_a_stream_must_start_with_hello(leader):
    stream, context = Stream(), Context()
    stream.send(credits=worker_pb2.Credits(credits=1))
    svc = WorkerServicer(leader, leader.dispatcher, leader.leases)
    with pytest.raises(Aborted) as caught:
        await svc.Connect(stream, context)
    assert caught.value.code == S.INVALID_ARGUMENT and "hello" in caught.value.details
    stream2 = Stream()
    stream2.send(hello=worker_pb2.Hello(worker_id="bad id!"))
    with pytest.raises(Aborted) as caught:
        await svc.Connect(stream2, Context())
    assert caught.value.code == S.INVALID_ARGUMENT and "worker_id" in caught.value.details

