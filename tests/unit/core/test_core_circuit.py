"""The per-job circuit breaker (issue 9): opens on the failure rate of the last N finished
scheduled runs; fires while open are SKIPPED "circuit open"; after the cool-down one probe
runs (half-open); its success closes it, its failure opens it again; ResetCircuit closes it."""

from __future__ import annotations

import dataclasses

from gnomon.node.core.commands import CancelRun, CreateJob, ResetCircuit, TriggerJob
from gnomon.node.core.errors import Code
from gnomon.node.core.model import CircuitBreaker, CircuitStatus, RunState

BREAKER = CircuitBreaker(window_runs=3, failure_percent=60, cooldown_ms=10 * 60_000)


def _job(h):
    return h.create(dataclasses.replace(h.spec(), circuit_breaker=BREAKER), next_fire_ms=h.T0)


def _trip(h, job_id):
    """Two failures and one success in the window of 3: 66% >= 60%: open."""
    for outcome in ("kill", "complete", "kill"):
        run_id = h.fire(job_id)
        getattr(h, outcome)(run_id, "a")
    return h.state.jobs[job_id].circuit


def test_it_opens_on_the_failure_rate_and_holds_fires(h):
    job_id = _job(h)
    circuit = _trip(h, job_id)
    assert (circuit.status, circuit.opens, circuit.opened_ms) == (CircuitStatus.OPEN, 1, h.now)
    held = h.fire(job_id)
    assert (h.run(held).state, h.run(held).reason) == (RunState.SKIPPED, "circuit open")
    # A manual trigger is not held.
    reply, _ = h.one(TriggerJob("", job_id))
    assert h.run(reply.run_id).state == RunState.RUNNING


def test_below_the_rate_it_stays_closed(h):
    job_id = _job(h)
    for outcome in ("kill", "complete", "complete", "kill", "complete"):
        getattr(h, outcome)(h.fire(job_id), "a")
    circuit = h.state.jobs[job_id].circuit
    assert circuit.status == CircuitStatus.CLOSED and circuit.recent_failures == (
        False, True, False)


def test_half_open_probe_closes_or_reopens(h):
    job_id = _job(h)
    _trip(h, job_id)
    h.now += BREAKER.cooldown_ms
    probe = h.fire(job_id)
    circuit = h.state.jobs[job_id].circuit
    assert (circuit.status, circuit.probe_run_id) == (CircuitStatus.HALF_OPEN, probe)
    other = h.fire(job_id)  # while the probe runs
    assert h.run(other).reason == f"circuit half-open: probe {probe} running"
    h.kill(probe, "a")
    circuit = h.state.jobs[job_id].circuit
    assert (circuit.status, circuit.opens, circuit.opened_ms) == (CircuitStatus.OPEN, 2, h.now)
    h.now += BREAKER.cooldown_ms
    probe = h.fire(job_id)
    h.complete(probe, "a")
    assert h.state.jobs[job_id].circuit.status == CircuitStatus.CLOSED


def test_a_cancelled_probe_lets_the_next_fire_probe(h):
    job_id = _job(h)
    _trip(h, job_id)
    h.now += BREAKER.cooldown_ms
    probe = h.fire(job_id)
    h.one(CancelRun("", probe))
    nxt = h.fire(job_id)
    assert h.run(nxt).state == RunState.RUNNING
    assert h.state.jobs[job_id].circuit.probe_run_id == nxt


def test_reset_closes_it(h):
    job_id = _job(h)
    _trip(h, job_id)
    h.one(ResetCircuit("", job_id))
    circuit = h.state.jobs[job_id].circuit
    assert (circuit.status, circuit.opens, circuit.recent_failures) == (
        CircuitStatus.CLOSED, 1, ())
    assert h.run(h.fire(job_id)).state == RunState.RUNNING
    h.rejects(ResetCircuit("", "j404"), Code.NOT_FOUND, "no job")


def test_bad_breakers_are_rejected(h):
    for breaker, fragment in (
        (CircuitBreaker(0, 50, 60_000), "spec.circuit_breaker.window_runs: must be >= 1"),
        (CircuitBreaker(5, 0, 60_000), "spec.circuit_breaker.failure_percent: must be in 1..100"),
        (CircuitBreaker(5, 50, 10), "spec.circuit_breaker.cooldown_ms: must be >= 1000"),
    ):
        spec = dataclasses.replace(h.spec(), circuit_breaker=breaker)
        h.rejects(CreateJob("", spec, h.T0), Code.INVALID_ARGUMENT, fragment)
