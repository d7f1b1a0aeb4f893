"""The dashboard of a cluster that authenticates (admin_token_file): without a token every
page says it needs one; with the token typed into the header it works from a follower, writes
included (a browser drops Authorization on the cross-origin redirect to the leader; the page
asks the leader again with it; an edit's PATCH is preflighted there), live updates too."""

from __future__ import annotations

import os
import re
import secrets

import pytest

from gnomon.node.local.cluster import LocalCluster, wait_for
from tests.support.http import call

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
expect = pytest.importorskip("playwright.sync_api").expect

TOKEN = secrets.token_urlsafe(32)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    root = tmp_path_factory.mktemp("browser-auth")
    token_file = root / "admin.token"
    token_file.write_text(TOKEN)
    os.chmod(token_file, 0o600)
    c = LocalCluster(root / "c", 3, {"admin_token_file": str(token_file),
                                     "min_interval_ms": "100"}, http=True).start()
    try:
        yield c
    finally:
        c.stop()
        if request.session.testsfailed:
            print(c.logs())


def _leader(cluster):
    """The node that answers a leader read over HTTP with the token (LocalCluster.leader()
    probes gRPC without one)."""
    auth = {"Authorization": f"Bearer {TOKEN}"}

    def serving() -> bool:
        try:
            return all(call(n.url, "GET", "/v1/openapi.json", timeout=2).status == 200
                       for n in cluster.nodes)
        except OSError:
            return False

    def probe():
        for node in cluster.nodes:
            try:
                if call(node.url, "GET", "/v1/jobs?limit=1", headers=auth,
                        timeout=2).status == 200:
                    return node
            except OSError:
                continue
        return None

    wait_for(serving, timeout_s=30, what="every node serving HTTP")
    return wait_for(probe, timeout_s=30, what="a leader answering HTTP with the token")


def test_a_token_typed_into_the_header_opens_every_page(cluster, page):
    leader = _leader(cluster)
    follower = next(n for n in cluster.nodes if n is not leader)
    pg = page.page
    pg.goto(f"{follower.url}/#/jobs")
    expect(pg.get_by_role("alert")).to_contain_text("enter an API token at the top")
    expect(pg.locator("#live")).not_to_have_text("live")  # the stream needs the token too
    page.shot("no-token")

    pg.get_by_role("textbox", name="Token").fill(TOKEN)
    pg.get_by_role("button", name="Use").click()
    expect(pg.locator("#live")).to_have_text("live")
    form = pg.get_by_role("form", name="New job")
    form.get_by_label("Name", exact=True).fill("with-a-token")
    form.get_by_label("Interval (ms)").fill("1000")
    form.get_by_role("button", name="Create job").click()
    pg.wait_for_url(re.compile(r"#/jobs/j\d+$"))
    pg.wait_for_function(
        "() => document.querySelectorAll('[data-testid=run-strip] a').length >= 2")
    pg.get_by_role("button", name="Pause").first.click()
    expect(pg.get_by_role("button", name="Resume").first).to_be_visible()
    # An edit is a PATCH: preflighted at the leader's origin, asked again there with the token.
    edit = pg.get_by_role("form", name="Edit job")
    edit.get_by_label("Priority").fill("5")
    edit.get_by_role("button", name="Save").click()
    edit.get_by_role("button", name="Confirm save").click()
    expect(edit.get_by_test_id("form-message")).to_contain_text("(version 3)")
    page.shot("with-token")
    assert page.script_errors() == []
