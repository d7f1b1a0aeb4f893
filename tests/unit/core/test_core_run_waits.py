"""Why a run waits (node/core/run_waits.py): each reason from the state, the leader's workers
and its bounds, with the bound's value and where to change it."""

from __future__ import annotations

import dataclasses

from gnomon.node.core.access import SetTenant, Tenant
from gnomon.node.core.commands import Fire, TriggerJob
from gnomon.node.core.model import CircuitStatus, OverlapPolicy
from gnomon.node.core.results import RunReply
from gnomon.node.core.run_waits import (
    DispatchBounds,
    WaitKind,
    WorkerView,
    explain_run,
)

NO_BOUNDS = DispatchBounds()


def _kinds(waits) -> list[tuple[str, str]]:
    return [(w.kind, w.task) for w in waits]


def _etl(h, **spec_fields) -> str:
    """acme/etl: a (queue gpu) -> b (queue default)."""
    spec = dataclasses.replace(h.spec({"a": (), "b": ("a",)}, name="etl"), **spec_fields)
    spec = dataclasses.replace(spec, tasks=(
        dataclasses.replace(spec.tasks[0], queue="gpu"), spec.tasks[1]))
    return h.create(spec, next_fire_ms=h.T0)


def test_a_ready_task_without_a_worker_and_a_pending_one_behind_it(h):
    run = h.run(h.fire(_etl(h)))
    waits = explain_run(h.state, run, (), NO_BOUNDS)
    assert _kinds(waits) == [(WaitKind.NO_WORKER, "a"), (WaitKind.UPSTREAM, "b")]
    assert "queue gpu for tenant acme" in waits[0].detail
    assert "--queue gpu" in waits[0].change
    assert "a (ready)" in waits[1].detail


def test_workers_of_another_queue_or_tenant_or_without_slots_do_not_count(h):
    run = h.run(h.fire(_etl(h)))
    elsewhere = (WorkerView(("cpu",), None, 4), WorkerView(("gpu",), ("other",), 4))
    assert explain_run(h.state, run, elsewhere, NO_BOUNDS)[0].kind == WaitKind.NO_WORKER
    busy = (WorkerView(("gpu",), ("acme",), 0),)
    assert explain_run(h.state, run, busy, NO_BOUNDS)[0].kind == WaitKind.NO_FREE_WORKER
    free = (WorkerView(("gpu",), None, 1),)
    assert explain_run(h.state, run, free, NO_BOUNDS)[0].kind == WaitKind.DISPATCH
    unknown = explain_run(h.state, run, None, NO_BOUNDS)[0]  # a follower: workers unknown
    assert unknown.kind == WaitKind.DISPATCH and "leader only" in unknown.detail


def test_the_tenants_concurrency_cap_names_its_value_and_where_to_change_it(h):
    h.one(SetTenant("", Tenant("acme", max_concurrency=1), create=True))
    job = h.create(h.spec(name="capped"), next_fire_ms=h.T0)
    first, second = h.fire(job), h.fire(job)
    h.grant(first, "a")
    waits = explain_run(h.state, h.run(second), (WorkerView(("default",), None, 3),), NO_BOUNDS)
    [cap] = [w for w in waits if w.kind == WaitKind.TENANT_CONCURRENCY]
    assert (cap.task, cap.limit, cap.limit_value, cap.current) == (
        "a", "max_concurrency of tenant acme", 1, 1)
    assert "gnomon tenant set acme --max-concurrency" in cap.change
    leased = explain_run(h.state, h.run(first), None, NO_BOUNDS)
    assert leased[0].kind == WaitKind.RUNNING and "w1" in leased[0].detail


def test_the_queue_cap_and_fire_admission_are_the_leaders_bounds(h):
    job = h.create(h.spec(name="busy"), next_fire_ms=h.T0)
    first, second = h.fire(job), h.fire(job)
    h.grant(first, "a")
    bounds = DispatchBounds({"default": 1}, fire_admission_max_ready=1)
    waits = explain_run(h.state, h.run(second), None, bounds)
    kinds = [w.kind for w in waits]
    assert kinds == [WaitKind.FIRE_ADMISSION, WaitKind.QUEUE_CONCURRENCY]
    admission, queue_cap = waits
    assert (admission.limit, admission.limit_value, admission.current) == (
        "fire_admission_max_ready", 1, 1)
    assert (queue_cap.limit_value, queue_cap.current) == (1, 1)
    assert "queue_max_concurrency" in queue_cap.change


def test_a_queued_run_waits_for_the_jobs_active_runs(h):
    job = h.create(dataclasses.replace(h.spec(name="one-at-a-time"),
                                       overlap_policy=OverlapPolicy.BUFFER_ONE), next_fire_ms=h.T0)
    running = h.fire(job)
    queued = h.fire(job)
    [overlap] = explain_run(h.state, h.run(queued), None, NO_BOUNDS)
    assert overlap.kind == WaitKind.OVERLAP and running in overlap.detail
    assert (overlap.limit_value, overlap.current) == (1, 1)


def test_retry_backoff_late_fire_skip_and_circuit(h):
    job = h.create(h.spec(name="flaky"), next_fire_ms=h.T0)
    run_id = h.fire(job)
    h.fail(run_id, "a")
    [backoff] = explain_run(h.state, h.run(run_id), None, NO_BOUNDS)
    assert backoff.kind == WaitKind.RETRY_BACKOFF and "ready again in" in backoff.detail
    slot = h.state.jobs[job].next_fire_ms
    reply, _ = h.one(Fire(job, slot, slot + h.INTERVAL), now=slot + 5_000)
    late = explain_run(h.state, h.run(reply.run_id), None, NO_BOUNDS)
    assert late[0].kind == WaitKind.LATE_FIRE and "5.0 s" in late[0].detail
    skipped = h.fire(job, skip=True)
    [skip] = explain_run(h.state, h.run(skipped), None, NO_BOUNDS)
    assert skip.kind == WaitKind.SKIPPED
    h.state.jobs[job].circuit = dataclasses.replace(h.state.jobs[job].circuit,
                                                    status=CircuitStatus.OPEN)
    reply, _ = h.one(TriggerJob("", job))
    assert isinstance(reply, RunReply)
    waits = explain_run(h.state, h.run(reply.run_id), None, NO_BOUNDS)
    assert waits[0].kind == WaitKind.CIRCUIT_OPEN and "circuit/reset" in waits[0].change


def test_an_ended_run_waits_for_nothing(h):
    job = h.create(h.spec(name="done"), next_fire_ms=h.T0)
    run_id = h.fire(job)
    h.complete(run_id, "a")
    assert explain_run(h.state, h.run(run_id), (), NO_BOUNDS) == []


def test_every_kind_is_in_the_proto_enum():
    from gnomon.v1 import api_pb2
    kinds = [v for k, v in vars(WaitKind).items() if not k.startswith("_")]
    for kind in kinds:
        api_pb2.WaitKind.Value(f"WAIT_KIND_{kind.upper()}")  # raises for one missing


def test_tasks_come_in_the_jobs_task_order(h):
    spec = h.spec({"z": (), "y": ()}, name="order")
    run = h.run(h.fire(h.create(spec, next_fire_ms=h.T0)))
    assert [w.task for w in explain_run(h.state, run, (), NO_BOUNDS)] == ["z", "y"]
