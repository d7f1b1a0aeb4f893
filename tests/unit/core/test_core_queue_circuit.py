"""The circuit breaker per queue (issue 9): SetQueueCircuit gives (tenant, queue) a rule;
the finished scheduled runs with tasks on the queue fill its window (failed: a task there
died); open, it holds the fires of every job using the queue (SKIPPED "circuit open: queue
Q"); after the cool-down one probe runs; ResetCircuit with queue closes it."""

from __future__ import annotations

import dataclasses

from gnomon.node.core.commands import (
    FailTask,
    Fire,
    ResetCircuit,
    SetQueueCircuit,
    TriggerJob,
)
from gnomon.node.core.errors import Code
from gnomon.node.core.model import CircuitBreaker, CircuitStatus, RunState, queue_key
from gnomon.node.core.results import Done

BREAKER = CircuitBreaker(window_runs=2, failure_percent=50, cooldown_ms=10 * 60_000)
KEY = queue_key("acme", "default")


def _set(h, breaker=BREAKER, tenant="acme", queue="default"):
    reply, _ = h.one(SetQueueCircuit("", tenant, queue, breaker))
    assert isinstance(reply, Done), reply


def _jobs(h):
    one = h.create(next_fire_ms=h.T0)
    two = h.create(dataclasses.replace(h.spec(), name="other"), next_fire_ms=h.T0)
    return one, two


def test_failures_on_the_queue_open_it_for_every_job_using_it(h):
    _set(h)
    one, two = _jobs(h)
    h.kill(h.fire(one), "a")
    h.complete(h.fire(two), "a")
    qc = h.state.queue_circuits[KEY]
    assert (qc.circuit.status, qc.circuit.opens) == (CircuitStatus.OPEN, 1)
    held = h.fire(one)
    assert (h.run(held).state, h.run(held).reason) == (RunState.SKIPPED,
                                                        "circuit open: queue default")
    assert h.run(h.fire(two)).reason == "circuit open: queue default"
    reply, _ = h.one(TriggerJob("", one))  # manual runs are never held
    assert h.run(reply.run_id).state == RunState.RUNNING


def test_other_tenants_queues_are_not_touched(h):
    _set(h, tenant="other")
    one, _ = _jobs(h)
    for _ in range(3):
        h.kill(h.fire(one), "a")
    assert h.state.queue_circuits[queue_key("other", "default")].circuit.status == \
        CircuitStatus.CLOSED


def test_probe_after_the_cool_down_closes_or_reopens_it(h):
    _set(h)
    one, two = _jobs(h)
    h.kill(h.fire(one), "a")
    h.kill(h.fire(two), "a")
    h.now += BREAKER.cooldown_ms
    probe = h.fire(one)
    qc = h.state.queue_circuits[KEY]
    assert (qc.circuit.status, qc.circuit.probe_run_id) == (CircuitStatus.HALF_OPEN, probe)
    assert h.run(h.fire(two)).reason == f"circuit half-open: queue default: probe {probe} running"
    h.kill(probe, "a")
    assert h.state.queue_circuits[KEY].circuit.status == CircuitStatus.OPEN
    h.now += BREAKER.cooldown_ms
    probe = h.fire(two)
    h.complete(probe, "a")
    qc = h.state.queue_circuits[KEY]
    assert (qc.circuit.status, qc.circuit.opens) == (CircuitStatus.CLOSED, 2)


def test_opens_and_skips_are_in_the_effects(h):
    _set(h)
    one, two = _jobs(h)
    h.kill(h.fire(one), "a")
    run = h.fire(two)
    token = h.grant(run, "a")
    _, effects = h.one(FailTask(run, "a", token, "boom", False))
    assert effects.circuit_opened == [("queue", KEY)]
    slot = h.state.jobs[one].next_fire_ms
    h.now = slot
    _, effects = h.one(Fire(one, slot, slot + h.INTERVAL))
    assert effects.circuit_skipped == ["queue"]


def test_reset_and_remove(h):
    _set(h)
    one, two = _jobs(h)
    h.kill(h.fire(one), "a")
    h.kill(h.fire(two), "a")
    reply, _ = h.one(ResetCircuit("", "", tenant="acme", queue="default"))
    assert isinstance(reply, Done)
    qc = h.state.queue_circuits[KEY]
    assert (qc.circuit.status, qc.circuit.opens) == (CircuitStatus.CLOSED, 1)
    _set(h, BREAKER)  # the same rule again keeps the state
    assert h.state.queue_circuits[KEY] == qc
    h.one(SetQueueCircuit("", "acme", "default", None))
    assert KEY not in h.state.queue_circuits
    h.rejects(ResetCircuit("", "", tenant="acme", queue="default"), Code.NOT_FOUND,
              "has no circuit breaker")


def test_bad_rules_are_refused_naming_the_field(h):
    h.rejects(SetQueueCircuit("", "", "q", BREAKER), Code.INVALID_ARGUMENT, "tenant: required")
    h.rejects(SetQueueCircuit("", "acme", "", BREAKER), Code.INVALID_ARGUMENT, "queue: required")
    h.rejects(SetQueueCircuit("", "acme", "q", dataclasses.replace(BREAKER, window_runs=0)),
              Code.INVALID_ARGUMENT, "breaker.window_runs: must be >= 1")
    h.rejects(SetQueueCircuit("", "acme", "q", dataclasses.replace(BREAKER, cooldown_ms=5)),
              Code.INVALID_ARGUMENT, "breaker.cooldown_ms")
    h.rejects(SetQueueCircuit("", "acme", "q", None), Code.NOT_FOUND, "has no circuit breaker")


def test_a_tenant_at_its_queue_circuit_bound_is_refused_and_may_still_change_its_own(h):
    from gnomon.node.core.model import Limits

    h.state.limits = dataclasses.replace(Limits(), max_queue_circuits_per_tenant=2)
    _set(h, queue="q1")
    _set(h, queue="q2")
    _set(h, tenant="globex", queue="q1")  # another tenant's count is its own
    before = dict(h.state.queue_circuits)
    h.rejects(SetQueueCircuit("", "acme", "q3", BREAKER), Code.RESOURCE_EXHAUSTED,
              "queue: tenant 'acme' has 2 queue circuit breakers, the most "
              "max_queue_circuits_per_tenant allows; remove one first")
    assert h.state.queue_circuits == before
    _set(h, dataclasses.replace(BREAKER, window_runs=5), queue="q1")  # a change is allowed
    reply, _ = h.one(SetQueueCircuit("", "acme", "q2", None))  # so is a removal...
    assert isinstance(reply, Done)
    _set(h, queue="q3")  # ...which makes room
