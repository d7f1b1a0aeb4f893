"""What an on-call engineer opens first: each job's health on the jobs list (its last runs by
state, success rate, durations, lateness, next fire, circuit, warnings), sorted and filtered
from the URL. One cluster for the module; waiting is Playwright's auto-waiting `expect`."""

from __future__ import annotations

import re

import pytest

from tests.support.cluster import RawWorker
from tests.support.http import call

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]
expect = pytest.importorskip("playwright.sync_api").expect


def _job(leader, name: str, queue: str) -> str:
    spec = {"name": name, "paused": True, "tasks": [{"name": "main", "queue": queue}],
            "schedule": {"interval": {"intervalMs": "3600000"}}}
    r = call(leader.url, "POST", "/v1/jobs", {"spec": spec})
    assert r.status == 201, r.text
    return r.json["job"]["jobId"]


def _trigger(leader, job_id: str) -> str:
    r = call(leader.url, "POST", f"/v1/jobs/{job_id}/trigger", {})
    assert r.status == 200, r.text
    return r.json["run"]["runId"]


def _run_through(leader, worker: RawWorker, job_id: str, outcomes: list[str]) -> None:
    """One triggered run per outcome, its task completed ("ok") or failed for good."""
    for outcome in outcomes:
        _trigger(leader, job_id)
        worker.credits(1)
        lease = worker.next("assign").lease
        if outcome == "ok":
            worker.complete(lease)
        else:
            worker.fail(lease, "boom", retryable=False)
        worker.next("report_ack")


def test_jobs_list_shows_each_jobs_health_sorted_and_filtered(cluster, page):
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes if n is not leader and n.alive())
    worker = RawWorker(leader, "w-health", ("hq",))
    try:
        ok, bad = _job(leader, "health-ok", "hq"), _job(leader, "health-bad", "hq")
        stuck = _job(leader, "health-stuck", "nobody-serves")
        _run_through(leader, worker, ok, ["ok", "ok"])
        _run_through(leader, worker, bad, ["ok", "fail"])
        _trigger(leader, stuck)

        api = call(follower.url, "GET", "/v1/jobs?health=true&consistency=STALE")
        assert api.status == 200, api.text
        # A follower's STALE answer: runs alike, workers unknown (they are the leader's).
        assert api.json["health"][bad]["succeeded"] == 1
        assert api.json["health"][bad]["failed"] == 1
        assert not api.json["health"][stuck]["queues"][0]["workersKnown"]

        pg = page.page
        pg.goto(f"{follower.url}/#/jobs?name=health-&sort=success")
        rows = pg.locator("tr[data-job]")
        expect(rows).to_have_count(3)
        # Worst success rate first; a job without an ended run ("—") last.
        expect(rows.nth(0)).to_have_attribute("data-job", bad)
        expect(rows.nth(1)).to_have_attribute("data-job", ok)
        expect(rows.nth(2)).to_have_attribute("data-job", stuck)
        bad_row = rows.nth(0)
        expect(bad_row.get_by_test_id("success")).to_have_text("50%")
        # The strip: a state is a glyph and a label as well as a colour.
        strip = bad_row.get_by_role("listitem")
        expect(strip).to_have_count(2)
        expect(strip.nth(0)).to_have_text("✓")
        expect(strip.nth(1)).to_have_text("✗")
        expect(strip.nth(1)).to_have_attribute("aria-label", re.compile(rf"^run {bad}@\S+ failed$"))
        expect(rows.nth(2).get_by_test_id("warnings")).to_contain_text(
            "no worker on queue nobody-serves")
        expect(rows.nth(0).get_by_test_id("warnings")).to_have_text("—")  # w-health serves hq
        page.shot("jobs-health")

        # Sort the other way round with the header's button; filter to jobs with warnings,
        # the backlog threshold at 1 ms so the waiting task is an old backlog.
        pg.get_by_role("button", name="success ▲").click()
        expect(rows.nth(0)).to_have_attribute("data-job", stuck)
        expect(pg.locator("th[aria-sort=descending]")).to_contain_text("success")
        pg.goto(f"{follower.url}/#/jobs?name=health-&show=warn&backlog=1ms")
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-job", stuck)
        expect(rows.first.get_by_test_id("warnings")).to_contain_text(
            "queue nobody-serves: oldest ready")
        expect(pg.locator("#jobs-show")).to_have_value("warn")
        pg.goto(f"{follower.url}/#/jobs?name=health-&show=failing")
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-job", bad)
    finally:
        worker.close()
    assert page.script_errors() == []
