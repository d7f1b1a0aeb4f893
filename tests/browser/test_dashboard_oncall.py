"""What an on-call engineer opens first: each job's health on the jobs list (its last runs by
state, success rate, durations, lateness, next fire, circuit, warnings), sorted and filtered
from the URL. One cluster for the module; waiting is Playwright's auto-waiting `expect`."""

from __future__ import annotations

import json
import os
import re
from urllib.parse import quote

import pytest

from tests.support.cluster import RawWorker
from tests.support.http import call, paused_job, trigger

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect


def _run_through(leader, worker: RawWorker, job_id: str, outcomes: list[str]) -> None:
    """One triggered run per outcome, its task completed ("ok") or failed for good."""
    for outcome in outcomes:
        trigger(leader, job_id)
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
        ok, bad = paused_job(leader, "health-ok", "hq"), paused_job(leader, "health-bad", "hq")
        stuck = paused_job(leader, "health-stuck", "nobody-serves")
        _run_through(leader, worker, ok, ["ok", "ok"])
        _run_through(leader, worker, bad, ["ok", "fail"])
        trigger(leader, stuck)

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

        # The queues page: the waiting task's backlog against the page's thresholds.
        pg.goto(f"{follower.url}/#/queues?amber=1ms&red=1h")
        stuck_queue = pg.locator('tr[data-queue="nobody-serves"]')
        expect(stuck_queue).to_have_attribute("data-level", "amber")
        expect(stuck_queue).to_contain_text("⚠ over 1ms")
        expect(stuck_queue).to_contain_text("⚠ none")  # no worker
        expect(pg.locator('tr[data-queue="hq"]')).to_contain_text("w-health")
        worker_row = pg.locator('tr[data-worker="w-health"]')
        expect(worker_row.get_by_test_id("heartbeat")).to_have_text("none yet")
        expect(worker_row).to_contain_text("127.0.0.1")  # the stream's peer: straight here
        worker.heartbeat([])
        worker.next("heartbeat_ack")
        pg.reload()
        expect(worker_row.get_by_test_id("heartbeat")).not_to_have_text("none yet")
        assert worker_row.get_by_test_id("connected").text_content() != "—"
        pg.goto(f"{follower.url}/#/queues?amber=1ms&red=2ms")
        expect(stuck_queue).to_have_attribute("data-level", "red")
        expect(pg.locator("#queues-red")).to_have_value("2ms")
        # Drain: the row says so, and the leader grants the worker nothing more.
        worker_row.get_by_role("button", name="Drain w-health").click()
        expect(worker_row.get_by_test_id("draining")).to_have_text("draining: no new leases")
        listed = call(leader.url, "GET", "/v1/workers").json["workers"]
        assert [w.get("draining") for w in listed if w["workerId"] == "w-health"] == [True]
    finally:
        worker.close()
    assert page.script_errors() == []


def test_a_runs_timeline_shows_each_attempt_and_its_details_one_click_away(cluster, page):
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes if n is not leader and n.alive())
    retry = {"maxAttempts": 2, "initialBackoffMs": "200", "maxBackoffMs": "200"}
    spec = {"name": "timeline", "paused": True, "schedule": {"interval": {"intervalMs": "3600000"}},
            "tasks": [{"name": "extract", "queue": "tl", "retry": retry},
                      {"name": "load", "queue": "tl", "dependsOn": ["extract"]}]}
    r = call(leader.url, "POST", "/v1/jobs", {"spec": spec})
    assert r.status == 201, r.text
    run_id = trigger(leader, r.json["job"]["jobId"])
    worker = RawWorker(leader, "w-tl", ("tl",))
    try:
        worker.credits(1)
        first = worker.next("assign").lease
        worker.fail(first, "disk full", retryable=True, exit_code=3, output_tail="no space left",
                    duration_ms=5)
        worker.next("report_ack")
        worker.credits(1)
        second = worker.next("assign").lease  # after the 200 ms back-off
        assert second.fencing_token > first.fencing_token
        worker.complete(second)
        worker.next("report_ack")
        worker.credits(1)
        held = worker.next("assign").lease  # load: leased, held while the page looks
        assert held.task_name == "load"

        pg = page.page
        pg.goto(f"{follower.url}/#/runs/{quote(run_id, safe='')}")
        timeline = pg.get_by_test_id("timeline")
        extract = timeline.locator('g.seg[data-task="extract"]')
        expect(extract).to_have_count(4)
        assert [extract.nth(i).get_attribute("data-kind") for i in range(4)] == [
            "queued", "lease failed", "backoff", "lease succeeded"]
        load = timeline.locator('g.seg[data-task="load"]')
        expect(load.last).to_have_attribute("data-kind", "lease held")
        assert load.first.get_attribute("data-kind") == "upstream"
        # One click: the failed attempt's worker, token, exit code and output.
        extract.nth(1).click()
        detail = pg.get_by_test_id("timeline-detail")
        expect(detail).to_contain_text(f"fencing token {first.fencing_token}")
        expect(detail).to_contain_text("worker w-tl")
        expect(detail).to_contain_text("exit code 3")
        expect(detail.locator("pre")).to_have_text("no space left")
        # The keyboard reaches a bar too.
        extract.nth(3).focus()
        pg.keyboard.press("Enter")
        expect(detail).to_contain_text(f"attempt 2 · succeeded · worker w-tl · fencing token "
                                       f"{second.fencing_token}")
        # The DAG keeps its full labels, with the time under the lease.
        node = pg.get_by_test_id("dag").locator('g[data-task="extract"]')
        expect(node).to_contain_text(f"token {second.fencing_token}")
        expect(node).to_contain_text(re.compile(r"\d+(\.\d)? m?s"))
        page.shot("run-timeline")
    finally:
        worker.close()
    assert page.script_errors() == []


def test_why_is_it_waiting_names_the_tenant_cap_a_test_set(cluster, page):
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes if n is not leader and n.alive())
    r = call(leader.url, "POST", "/v1/tenants", {"tenant": {"name": "capped", "weight": 1, "maxConcurrency": 1}})
    assert r.status == 200, r.text
    spec = {"tenant": "capped", "name": "capped-job", "paused": True,
            "schedule": {"interval": {"intervalMs": "3600000"}},
            "tasks": [{"name": "main", "queue": "capq"}, {"name": "after", "queue": "capq",
                                                          "dependsOn": ["main"]}]}
    r = call(leader.url, "POST", "/v1/jobs", {"spec": spec})
    assert r.status == 201, r.text
    job_id = r.json["job"]["jobId"]
    worker = RawWorker(leader, "w-cap", ("capq",))
    try:
        first = trigger(leader, job_id)
        worker.credits(2)
        assert worker.next("assign").lease.run_id == first
        second = trigger(leader, job_id)  # ready, with a free slot: the cap holds it

        pg = page.page
        pg.goto(f"{follower.url}/#/runs/{quote(second, safe='')}")
        panel = pg.get_by_test_id("waits")
        cap = panel.locator('li[data-wait="tenant_concurrency"]')
        expect(cap).to_contain_text("max_concurrency of tenant capped = 1 (now 1)")
        expect(cap).to_contain_text("gnomon tenant set capped --max-concurrency")
        expect(cap).to_have_attribute("data-task", "main")
        expect(panel.locator('li[data-wait="upstream"]')).to_contain_text("main (ready)")
        expect(panel.get_by_role("heading")).to_have_text("Why is it waiting?")
        page.shot("run-waits")
        # Raised, the cap no longer holds it: the panel follows the event stream.
        r = call(leader.url, "PUT", "/v1/tenants/capped",
                 {"tenant": {"name": "capped", "weight": 1, "maxConcurrency": 5}})
        assert r.status == 200, r.text
        worker.credits(1)
        assert worker.next("assign").lease.run_id == second
        expect(panel.locator('li[data-task="main"]')).to_have_attribute("data-wait", "running")
        expect(cap).to_have_count(0)
    finally:
        worker.close()
    assert page.script_errors() == []


# The pages an on-call engineer goes through, each audited with axe-core, at a desktop width
# and at a phone's 390 px; `{job}` and `{run}` are filled in from the cluster.
PAGES = ["cluster", "jobs", "jobs/{job}", "runs", "runs/{run}", "dlq", "queues"]
DOC_NAMES = {"jobs/{job}": "job", "runs/{run}": "run", "dlq": "dead-letters"} | {
    p: p for p in ("cluster", "jobs", "runs", "queues")}
AXE_RUN = """async () => (await axe.run(document, {resultTypes: ['violations']})).violations
  .filter(v => ['serious', 'critical'].includes(v.impact))
  .map(v => `${v.impact} ${v.id}: ${v.help} (${v.nodes.slice(0, 3).map(n => n.target.join(' '))
  .join(' | ')})`)"""
FIRST_PAINT = """() => {
  const fcp = performance.getEntriesByType('paint').find(e => e.name === 'first-contentful-paint');
  return fcp ? Math.round(fcp.startTime) : null;
}"""


FOCUSABLE = ("a[href], button:not([disabled]), input:not([disabled]), select, textarea, "
             "summary, [tabindex='0']")
MARK_FOCUSED = """() => {
  const el = document.activeElement;
  const style = getComputedStyle(el);
  const ring = el instanceof SVGElement ? getComputedStyle(el.querySelector('rect')).strokeWidth
    : style.outlineStyle !== 'none' && style.outlineWidth;
  el.setAttribute('data-reached', ring && ring !== '0px' && ring !== '1px' ? 'visible' : 'no-ring');
}"""


def _tab_through(pg) -> dict[str, list[str]]:
    """Tab from the top through the page: the focusable elements never reached, and those
    reached without a visible focus ring."""
    count = pg.evaluate(f"() => [...document.querySelectorAll(`{FOCUSABLE}`)]"
                        ".filter(e => e.getClientRects().length).length")
    pg.evaluate("() => document.activeElement && document.activeElement.blur()")
    for _ in range(count + 2):
        pg.keyboard.press("Tab")
        pg.evaluate(MARK_FOCUSED)
    return pg.evaluate(f"""() => {{
      const all = [...document.querySelectorAll(`{FOCUSABLE}`)].filter(e => e.getClientRects().length);
      const name = e => e.getAttribute('aria-label') || e.textContent.trim().slice(0, 30) || e.id || e.tagName;
      return {{unreached: all.filter(e => !e.hasAttribute('data-reached')).map(name),
               no_ring: all.filter(e => e.getAttribute('data-reached') === 'no-ring').map(name)}};
    }}""")


def _settle(pg) -> None:
    """Wait for the page's requests to end (Playwright's network idle), for at most 5 s: the
    figures are measurements, and a page that keeps fetching is measured as it stands."""
    try:
        pg.wait_for_load_state("networkidle", timeout=5_000)
    except sync_api.TimeoutError:
        pass


@pytest.mark.parametrize("width", [1280, 390])
def test_every_page_passes_an_accessibility_audit(cluster, browser, width):
    """No serious or critical axe-core violation on any page; at 390 px no page scrolls
    sideways. Prints each page's weight and first contentful paint (bench/RESULTS.md)."""
    from tests.browser.conftest import OUTPUT, Page
    from tests.support.browser import AXE

    if not os.path.exists(AXE):
        pytest.skip(f"no axe-core at {AXE} (.ci/run installs it with npm; GNOMON_AXE overrides)")
    leader = cluster.leader()
    job = paused_job(leader, f"audited-{width}", "a11y")
    run = trigger(leader, job)  # waiting for a worker: the run page has reasons to show
    context = browser.new_context(viewport={"width": width, "height": 900},
                                  is_mobile=width < 500, has_touch=width < 500)
    # An init script, not a <script> tag: the page's Content-Security-Policy stays on.
    context.add_init_script(path=AXE)
    figures, found = {}, {}
    try:
        page = Page(context.new_page(), f"a11y-{width}")
        pg = page.page
        pg.set_default_timeout(20_000)
        # No cache: each page's weight is all it loads, as on a first visit (the bytes of
        # every finished request: the event stream never finishes and is not counted).
        cdp = context.new_cdp_session(pg)
        cdp.send("Network.enable")
        cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
        loaded: list[int] = []
        pg.on("requestfinished", lambda r: loaded.append(
            r.sizes()["responseBodySize"] + r.sizes()["responseHeadersSize"]))
        for name in PAGES:
            path = name.format(job=job, run=quote(run, safe=""))
            pg.goto(f"{leader.url}/#/{path}")
            _settle(pg)
            loaded.clear()
            pg.reload()  # a fresh navigation per page: its own weight and paint
            expect(pg.locator("main h1")).to_be_visible()
            expect(pg.locator("#live")).to_have_text("live")
            _settle(pg)
            figures[name] = {"bytes": sum(loaded), "requests": len(loaded),
                             "first_contentful_paint_ms": pg.evaluate(FIRST_PAINT)}
            if name == "cluster":  # the leader this node found at its start, at least
                expect(pg.locator("tr[data-change]").first).to_be_visible()
                assert "apply lag" in pg.locator("main").text_content()
            found[name] = pg.evaluate(AXE_RUN)
            if width > 500 or name == "jobs":
                page.docs_shot(DOC_NAMES[name] + ("" if width > 500 else "-phone"))
            if width > 500 and name in ("jobs", "runs/{run}"):  # the pages with most actions
                assert _tab_through(pg) == {"unreached": [], "no_ring": []}, name
            if width < 500:
                assert pg.evaluate("document.documentElement.scrollWidth") <= width, name
        assert page.script_errors() == []
    finally:
        context.close()
    assert {k: v for k, v in found.items() if v} == {}
    OUTPUT.mkdir(parents=True, exist_ok=True)
    (OUTPUT / f"dashboard-weight-{width}.json").write_text(json.dumps(figures, indent=1))
    for name, f in figures.items():
        print(f"{width}px {name}: {f['bytes']} bytes in {f['requests']} requests, first "
              f"contentful paint {f['first_contentful_paint_ms']} ms")
