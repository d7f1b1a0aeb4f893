"""The runs page (#/runs?...): a filter in the URL restores the form and shows the rows the API
returns for that filter; the server's pages are followed with Next and Previous. Waiting is
Playwright's auto-waiting `expect`, never a sleep."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest

from tests.support.http import call, paused_job, trigger

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
expect = pytest.importorskip("playwright.sync_api").expect


def test_a_filter_in_the_url_shows_the_runs_the_api_returns(cluster, page):
    leader = cluster.leader()
    wanted, other = paused_job(leader, "runs-page-a"), paused_job(leader, "runs-page-b")
    runs = [trigger(leader, wanted) for _ in range(3)]
    trigger(leader, other)
    r = call(leader.url, "POST", f"/v1/runs/{runs[0]}/cancel", {})
    assert r.status == 200, r.text
    api = call(leader.url, "GET", f"/v1/runs?job={wanted}&state=running")
    assert api.status == 200, api.text
    expected = [x["runId"] for x in api.json["runs"]]
    assert sorted(expected) == sorted(runs[1:])

    pg = page.page
    follower = next(n for n in cluster.nodes if n is not leader and n.alive())
    pg.goto(f"{follower.url}/#/runs?job={wanted}&state=running")
    rows = pg.locator("tr[data-run]")
    expect(rows).to_have_count(len(expected))
    assert [rows.nth(i).get_attribute("data-run") for i in range(len(expected))] == expected
    # The form shows the filter the URL holds; the state is text, not only a colour.
    expect(pg.locator("#runs-job")).to_have_value(wanted)
    expect(pg.locator("#runs-state")).to_have_value("running")
    expect(rows.first.locator(".state")).to_have_text("running")
    expect(rows.first.get_by_role("link", name=expected[0])).to_have_attribute(
        "href", f"#/runs/{quote(expected[0])}")
    page.shot("runs-filtered")

    # Server paging: one run a page, Next then Previous.
    pg.goto(f"{follower.url}/#/runs?job={wanted}&limit=1")
    expect(rows).to_have_count(1)
    first = rows.first.get_attribute("data-run")
    pg.get_by_role("button", name="Next →").click()
    expect(pg).to_have_url(re.compile(r"page="))
    expect(rows.first).not_to_have_attribute("data-run", first)
    pg.get_by_role("button", name="← Previous").click()
    expect(rows.first).to_have_attribute("data-run", first)

    # A bad value in the URL: the API's message naming the field, no rows.
    pg.goto(f"{follower.url}/#/runs?limit=5000")
    expect(pg.get_by_role("alert")).to_contain_text("limit")
    expect(rows).to_have_count(0)
    assert page.script_errors() == []
