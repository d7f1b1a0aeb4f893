"""query_runs: runs across jobs, filtered, sorted and paged (node/core/run_query.py)."""

from __future__ import annotations

import dataclasses

import pytest

from gnomon.node.core.commands import Fire, TriggerJob
from gnomon.node.core.model import RunState, RunTrigger, TaskSpec
from gnomon.node.core.results import RunReply
from gnomon.node.core.run_query import (
    RunCursor,
    RunFilter,
    RunSort,
    lateness,
    query_runs,
)


def _ids(page) -> list[str]:
    return [r.run_id for r in page.runs]


@pytest.fixture
def world(h):
    """acme/nightly: 3 scheduled runs (one late, one with a dead task, one succeeded);
    acme/etl on queue "gpu": 1 manual run; other/report: 2 scheduled runs."""
    nightly = h.create(h.spec(name="nightly"), next_fire_ms=h.T0)
    gpu = dataclasses.replace(h.spec(name="etl"), tasks=(TaskSpec(name="a", queue="gpu"),))
    etl = h.create(gpu)
    runs = {"n1": h.fire(nightly)}
    h.complete(runs["n1"], "a")
    h.now += 5_000  # the next slot fires 5 s late
    slot = h.state.jobs[nightly].next_fire_ms
    reply, _ = h.one(Fire(nightly, slot, slot + h.INTERVAL), now=slot + 5_000)
    runs["n2"] = reply.run_id
    h.kill(runs["n2"], "a")
    runs["n3"] = h.fire(nightly)
    h.now += 1
    reply, _ = h.one(TriggerJob("", etl))
    assert isinstance(reply, RunReply)
    runs["e1"] = reply.run_id
    report = h.create(h.spec(tenant="other", name="report"), next_fire_ms=h.now)
    runs["r1"] = h.fire(report)
    runs["r2"] = h.fire(report)
    h.now += 1_000
    h.apply(now=h.now)  # cluster time moves on: running runs' durations grow
    return {"jobs": {"nightly": nightly, "etl": etl, "report": report}, "runs": runs}


def test_newest_first_by_default_with_ties_by_run_id(h, world):
    page = query_runs(h.state, RunFilter())
    runs = page.runs
    assert len(runs) == 6 and page.next is None
    keys = [(-r.created_ms, r.run_id) for r in runs]
    assert keys == sorted(keys)


def test_tenant_scope_sees_only_its_tenants(h, world):
    page = query_runs(h.state, RunFilter(tenants=("other",)))
    assert sorted(_ids(page)) == sorted([world["runs"]["r1"], world["runs"]["r2"]])
    assert {r.tenant for r in query_runs(h.state, RunFilter(tenants=("acme",))).runs} == {"acme"}
    assert query_runs(h.state, RunFilter(tenants=("nobody",))).runs == []


def test_job_state_trigger_queue_filters(h, world):
    r, jobs = world["runs"], world["jobs"]
    by_job = query_runs(h.state, RunFilter(job_id=jobs["nightly"]))
    assert set(_ids(by_job)) == {r["n1"], r["n2"], r["n3"]}
    assert _ids(query_runs(h.state, RunFilter(states=(RunState.FAILED,)))) == [r["n2"]]
    both = query_runs(h.state, RunFilter(states=(RunState.FAILED, RunState.SUCCEEDED)))
    assert set(_ids(both)) == {r["n1"], r["n2"]}
    assert _ids(query_runs(h.state, RunFilter(triggers=(RunTrigger.MANUAL,)))) == [r["e1"]]
    assert _ids(query_runs(h.state, RunFilter(queue="gpu"))) == [r["e1"]]
    assert len(query_runs(h.state, RunFilter(queue="default")).runs) == 5
    assert query_runs(h.state, RunFilter(job_id="j999")).runs == []


def test_created_range_is_half_open(h, world):
    n3 = h.state.runs[world["runs"]["n3"]]
    since = query_runs(h.state, RunFilter(created_since_ms=n3.created_ms))
    assert world["runs"]["n3"] in _ids(since)
    assert all(x.created_ms >= n3.created_ms for x in since.runs)
    until = query_runs(h.state, RunFilter(created_until_ms=n3.created_ms))
    assert world["runs"]["n3"] not in _ids(until)
    assert all(x.created_ms < n3.created_ms for x in until.runs) and until.runs


def test_late_only_counts_scheduled_runs_past_their_due_time(h, world):
    r = world["runs"]
    late = query_runs(h.state, RunFilter(late_over_ms=1_000))
    assert _ids(late) == [r["n2"]]
    assert lateness(h.state.runs[r["n2"]]) == 5_000
    assert lateness(h.state.runs[r["e1"]]) is None  # manual: never late
    assert query_runs(h.state, RunFilter(late_over_ms=5_000)).runs == []


def test_late_discounts_the_leaders_chosen_delay(h):
    job = h.create(next_fire_ms=h.T0)
    h.one(Fire(job, h.T0, h.T0 + h.INTERVAL, delay_ms=4_000), now=h.T0 + 4_500)
    assert [lateness(x) for x in h.state.runs.values()] == [500]


def test_errors_only_finds_dead_and_retrying_tasks(h, world):
    r = world["runs"]
    assert _ids(query_runs(h.state, RunFilter(errors_only=True))) == [r["n2"]]
    h.fail(r["r1"], "a", retryable=True)  # waiting to retry: an error too
    assert set(_ids(query_runs(h.state, RunFilter(errors_only=True)))) == {r["n2"], r["r1"]}


def test_sorts(h, world):
    asc = query_runs(h.state, RunFilter(), sort=RunSort.CREATED_ASC).runs
    assert [(x.created_ms, x.run_id) for x in asc] == sorted((x.created_ms, x.run_id) for x in asc)
    longest = query_runs(h.state, RunFilter(), sort=RunSort.DURATION_DESC).runs
    clock = h.state.clock_ms
    durations = [(x.finished_ms or clock) - x.created_ms for x in longest]
    assert durations == sorted(durations, reverse=True)
    shortest = query_runs(h.state, RunFilter(), sort=RunSort.DURATION_ASC).runs
    assert [x.run_id for x in shortest][0] == world["runs"]["n1"]  # completed at once


@pytest.mark.parametrize("sort", [RunSort.CREATED_DESC, RunSort.CREATED_ASC,
                                  RunSort.DURATION_DESC, RunSort.DURATION_ASC])
def test_pages_walk_the_whole_listing_once(h, world, sort):
    whole = _ids(query_runs(h.state, RunFilter(), sort=sort, limit=1000))
    seen: list[str] = []
    after: RunCursor | None = None
    for _ in range(10):
        page = query_runs(h.state, RunFilter(), sort=sort, limit=4, after=after)
        assert len(page.runs) <= 4
        seen += _ids(page)
        if page.next is None:
            break
        after = page.next
    assert seen == whole and len(whole) == 6


def test_filters_and_pages_combine(h, world):
    flt = RunFilter(tenants=("acme",))
    first = query_runs(h.state, flt, limit=2)
    second = query_runs(h.state, flt, limit=2, after=first.next)
    assert first.next is not None and second.next is None
    assert len(first.runs) == 2 and len(second.runs) == 2
    assert not set(_ids(first)) & set(_ids(second))


def test_same_state_same_page_whatever_the_insertion_order(h, world):
    reordered = dataclasses.replace(h.state, runs=dict(reversed(list(h.state.runs.items()))))
    for sort in (RunSort.CREATED_DESC, RunSort.DURATION_ASC):
        assert _ids(query_runs(reordered, RunFilter(), sort=sort, limit=3)) == _ids(
            query_runs(h.state, RunFilter(), sort=sort, limit=3))


def test_refuses_a_bad_limit_or_sort(h):
    with pytest.raises(ValueError):
        query_runs(h.state, RunFilter(), limit=0)
    with pytest.raises(ValueError):
        query_runs(h.state, RunFilter(), sort="newest")
