"""A job at a glance (node/core/job_health.py): recent runs, success counts, percentiles and
the tenant's backlog on the job's queues, from the state alone."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from gnomon.node.api.grpc.job_health import WorkerCounts, health_to_proto
from gnomon.node.core.commands import CancelRun, Fire
from gnomon.node.core.job_health import (
    Backlog,
    job_health,
    job_queues,
    percentile,
    tenant_backlogs,
)
from gnomon.node.core.model import RunState, TaskSpec
from gnomon.v1 import types_pb2


def test_percentile_is_nearest_rank_and_zero_for_none():
    assert percentile([], 50) == 0
    assert percentile([7], 99) == 7
    assert percentile([4, 1, 3, 2], 50) == 2
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile(list(range(1, 21)), 99) == 20  # 20 runs: the 99th is the slowest


def test_a_jobs_recent_runs_counts_and_percentiles(h):
    job_id = h.create(h.spec(name="nightly"), next_fire_ms=h.T0)
    ok = h.fire(job_id)
    h.now += 2_000
    h.complete(ok, "a")  # 2 s after its creation
    slot = h.state.jobs[job_id].next_fire_ms
    reply, _ = h.one(Fire(job_id, slot, slot + h.INTERVAL), now=slot + 5_000)  # 5 s late
    dead = reply.run_id
    h.now = slot + 9_000
    h.kill(dead, "a")  # 4 s after its creation
    cancelled = h.fire(job_id)
    h.one(CancelRun("", cancelled, "by hand"))
    skipped = h.fire(job_id, skip=True)
    running = h.fire(job_id)

    health = job_health(h.state, h.state.jobs[job_id], tenant_backlogs(h.state))
    assert [r.run.run_id for r in health.recent] == [ok, dead, cancelled, skipped, running]
    assert (health.succeeded, health.failed) == (1, 1)  # cancelled and skipped: neither
    # Durations of the ended runs that ran: 2 s, 4 s and the cancelled one's 0 s.
    assert (health.duration_p50_ms, health.duration_p99_ms) == (2_000, 4_000)
    lates = sorted(r.late_ms for r in health.recent if r.run.state != RunState.SKIPPED)
    assert lates[-1] == 5_000 and health.lateness_p99_ms == 5_000
    assert health.lateness_p50_ms == lates[(len(lates) + 1) // 2 - 1]
    assert next(r for r in health.recent if r.run.run_id == skipped).duration_ms == 0


def test_only_the_most_recent_runs_show(h):
    job_id = h.create(h.spec(name="often"), next_fire_ms=h.T0)
    fired = [h.fire(job_id) for _ in range(5)]
    health = job_health(h.state, h.state.jobs[job_id], {}, recent=3)
    assert [r.run.run_id for r in health.recent] == fired[-3:]


def test_backlog_is_per_tenant_and_queue_and_the_job_lists_its_queues(h):
    gpu = dataclasses.replace(h.spec(name="etl"), tasks=(
        TaskSpec(name="a", queue="gpu"), TaskSpec(name="b"), TaskSpec(name="c", queue="gpu")))
    etl = h.create(gpu, next_fire_ms=h.T0)
    other = h.create(dataclasses.replace(gpu, tenant="other"), next_fire_ms=h.T0)
    h.fire(etl)
    h.now += 1_000
    h.fire(etl)
    h.fire(other)
    backlogs = tenant_backlogs(h.state)
    assert backlogs[("acme", "gpu")] == Backlog(ready=4, oldest_ready_ms=h.T0)
    assert backlogs[("acme", "default")].ready == 2
    assert backlogs[("other", "gpu")].ready == 2
    assert job_queues(h.state.jobs[etl]) == ("gpu", "default")
    health = job_health(h.state, h.state.jobs[etl], backlogs)
    assert [q for q, _ in health.queues] == ["gpu", "default"]


def test_workers_serving_match_queue_and_tenant():
    sessions = [SimpleNamespace(queues=("gpu",), tenants=None),
                SimpleNamespace(queues=("gpu", "cpu"), tenants=("acme",)),
                SimpleNamespace(queues=("gpu",), tenants=("other",))]
    counts = WorkerCounts(sessions)
    assert counts.serving("acme", "gpu") == 2
    assert counts.serving("other", "gpu") == 2
    assert counts.serving("acme", "cpu") == 1
    assert counts.serving("acme", "default") == 0


def test_the_message_says_whether_workers_are_known(h):
    job_id = h.create(h.spec(name="nightly"), next_fire_ms=h.T0)
    h.fire(job_id)
    health = job_health(h.state, h.state.jobs[job_id], tenant_backlogs(h.state))
    on_leader = health_to_proto(health, "acme", now_ms=h.T0 + 3_000, workers=WorkerCounts([]))
    assert on_leader.recent_runs[0].state == types_pb2.RUN_STATE_RUNNING
    q = on_leader.queues[0]
    assert (q.queue, q.ready, q.oldest_ready_age_ms, q.workers, q.workers_known) == (
        "default", 1, 3_000, 0, True)
    on_follower = health_to_proto(health, "acme", now_ms=h.T0, workers=None)
    assert not on_follower.queues[0].workers_known
