"""Access rules of issue 9's RPCs: each has a RULES row (a missing one is admin-only), and
the tenants a request touches are the job's or the named queue's tenant."""

from __future__ import annotations

import pytest

from gnomon.node.api.grpc.access import JOBS, RULES, RUN_CREATING
from gnomon.node.core.access import TENANT_ADMIN, TENANT_READER, TENANT_WRITER
from gnomon.node.security.auth import Principal
from gnomon.v1 import api_pb2


class FakeLookup:
    def job(self, ref: api_pb2.JobRef) -> str:
        return {"j1": "acme"}.get(ref.job_id, ref.tenant or "default")


@pytest.mark.parametrize("method, role", [
    ("BackfillJob", TENANT_WRITER), ("CancelBackfill", TENANT_WRITER),
    ("SetQueueCircuit", TENANT_ADMIN), ("ListQueueCircuits", TENANT_READER),
    ("ResetCircuit", TENANT_WRITER), ("ExplainRun", TENANT_READER),
    ("DiscardDeadLetters", TENANT_WRITER),
])
def test_every_new_rpc_has_a_rule(method, role):
    assert RULES[JOBS + method].role == role


def test_backfill_is_refused_like_a_trigger_at_max_queued_tasks():
    assert JOBS + "BackfillJob" in RUN_CREATING


def test_the_tenants_a_request_touches():
    look, who = FakeLookup(), Principal("p", TENANT_ADMIN, ("acme",))
    rule = RULES[JOBS + "ResetCircuit"]
    assert rule.tenants(who, api_pb2.ResetCircuitRequest(job=api_pb2.JobRef(job_id="j1")),
                        look) == ["acme"]
    assert rule.tenants(who, api_pb2.ResetCircuitRequest(tenant="globex", queue="etl"),
                        look) == ["globex"]
    assert RULES[JOBS + "SetQueueCircuit"].tenants(
        who, api_pb2.SetQueueCircuitRequest(queue="etl"), look) == ["default"]
    assert RULES[JOBS + "BackfillJob"].tenants(
        who, api_pb2.BackfillJobRequest(job=api_pb2.JobRef(job_id="j1")), look) == ["acme"]
    # A writer of acme may not set a breaker on a queue of globex (nor of acme: admin).
    with pytest.raises(Exception, match="globex"):
        RULES[JOBS + "ResetCircuit"].check(
            Principal("w", TENANT_WRITER, ("acme",)),
            api_pb2.ResetCircuitRequest(tenant="globex", queue="etl"), look)
    with pytest.raises(Exception, match="tenant-admin|tenant_admin"):
        RULES[JOBS + "SetQueueCircuit"].check(
            Principal("w", TENANT_WRITER, ("acme",)),
            api_pb2.SetQueueCircuitRequest(tenant="acme", queue="etl"), look)


def test_draining_a_worker_is_for_admins_only():
    """DrainWorker has no row: a tenant admin of every tenant is refused, an admin is not."""
    from gnomon.node.api.grpc.access import OPS, _check
    from gnomon.node.security.auth import AuthError

    request = api_pb2.DrainWorkerRequest(worker_id="w1")
    assert OPS + "DrainWorker" not in RULES
    with pytest.raises(AuthError):
        _check(OPS + "DrainWorker", Principal("t", TENANT_ADMIN, ("default", "acme")), request,
               FakeLookup())
    _check(OPS + "DrainWorker", Principal("root", "admin"), request, FakeLookup())


class CountingLookup(FakeLookup):
    def __init__(self) -> None:
        self.reads = 0

    def runs(self, run_ids: list[str]) -> set[str]:
        self.reads += 1
        return {"acme" if r.startswith("j1@") else "default" for r in run_ids}


@pytest.mark.parametrize("method", ["ReplayDeadLetters", "DiscardDeadLetters"])
def test_dead_letters_named_are_looked_up_at_once_and_bounded(method):
    """A tenant writer naming 100,000 dead letters made as many lookups under the replica's
    lock before anything checked the request: now one read, and over MAX_NAMED_TASKS none."""
    from gnomon.node.api.grpc.access import MAX_NAMED_TASKS, _check
    from gnomon.node.security.auth import AuthError

    cls = getattr(api_pb2, f"{method}Request")
    writer = Principal("w", TENANT_WRITER, ("acme",))
    look = CountingLookup()
    named = cls(tasks=[api_pb2.TaskRef(run_id=f"j1@{i}", task_name="a") for i in range(3)])
    _check(JOBS + method, writer, named, look)
    assert look.reads == 1
    too_many = cls(tasks=[api_pb2.TaskRef(run_id=f"j1@{i}", task_name="a")
                          for i in range(MAX_NAMED_TASKS + 1)])
    with pytest.raises(AuthError) as err:
        _check(JOBS + method, writer, too_many, look)
    assert err.value.code == "INVALID_ARGUMENT" and look.reads == 1
    assert f"at most {MAX_NAMED_TASKS}" in str(err.value)
    other = cls(tasks=[api_pb2.TaskRef(run_id="j2@1", task_name="a")])  # default's run
    with pytest.raises(AuthError):
        _check(JOBS + method, writer, other, look)
