"""The dashboard in a real browser (Debian's Chromium, headless) against a real 3-node cluster.

Most tests browse a *follower's* dashboard, so every write goes through the 307 redirect to
the leader and every page lives on the follower's event stream. Waiting is Playwright's
auto-waiting `expect` / `wait_for_function` (polling with a deadline), never a sleep.
Screenshots: tests/browser/conftest.py OUTPUT (.gnomon/test-output/browser/).
"""

from __future__ import annotations

import re
import signal
from urllib.parse import quote

import pytest

from gnomon.node.local.cluster import wait_for
from tests.support.cluster import RawWorker
from tests.support.http import call

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
expect = pytest.importorskip("playwright.sync_api").expect


def _follower(cluster):
    leader = cluster.leader()
    return leader, next(n for n in cluster.nodes if n is not leader and n.alive())


def _job(leader, name: str, tasks: list[dict]) -> dict:
    spec = {"name": name, "paused": True, "tasks": tasks,
            "schedule": {"interval": {"intervalMs": "3600000"}}}
    r = call(leader.url, "POST", "/v1/jobs", {"spec": spec})
    assert r.status == 201, r.text
    return r.json["job"]


def _trigger(leader, job: dict) -> str:
    r = call(leader.url, "POST", f"/v1/jobs/{job['jobId']}/trigger", {})
    assert r.status == 200, r.text
    return r.json["run"]["runId"]


def _mark(pg) -> None:
    """A marker that a reload would lose: the page updated itself if it is still there."""
    pg.evaluate("window.__noReload = true")


def _not_reloaded(pg) -> bool:
    return pg.evaluate("window.__noReload === true")


def test_create_a_job_from_the_form_and_see_its_runs_appear_live(cluster, page):
    _leader, follower = _follower(cluster)
    pg = page.page
    pg.goto(f"{follower.url}/#/jobs")
    form = pg.get_by_role("form", name="New job")
    form.get_by_label("Name", exact=True).fill("from-the-form")
    form.get_by_label("Schedule").select_option("cron")
    form.get_by_label("Timezone").fill("Mars/Base")
    form.get_by_role("button", name="Preview next fires").click()
    expect(form.get_by_test_id("err-timezone")).to_contain_text("unknown IANA timezone")
    form.get_by_label("Timezone").fill("Europe/Berlin")
    form.get_by_role("button", name="Preview next fires").click()
    expect(form.get_by_test_id("form-preview").locator("li")).to_have_count(5)
    form.get_by_label("Timezone").fill("Mars/Base")
    form.get_by_role("button", name="Create job").click()
    # The API's message, shown at the field it names, the field marked invalid.
    expect(form.get_by_test_id("err-timezone")).to_contain_text("unknown IANA timezone")
    expect(form.get_by_label("Timezone")).to_have_attribute("aria-invalid", "true")
    page.shot("jobs-validation")

    form.get_by_label("Schedule").select_option("interval")
    form.get_by_label("Interval (ms)").fill("1000")
    form.get_by_role("button", name="Create job").click()
    pg.wait_for_url(re.compile(r"#/jobs/j\d+$"))
    job_id = pg.url.rsplit("/", 1)[1]
    strip = pg.get_by_test_id("run-strip")
    expect(strip.locator("a").first).to_be_visible()
    _mark(pg)
    seen = strip.locator("a").count()
    pg.wait_for_function(
        "n => document.querySelectorAll('[data-testid=run-strip] a').length >= n + 2", arg=seen)
    assert _not_reloaded(pg)
    expect(pg.locator("tr[data-run]").first).to_contain_text(job_id)
    expect(pg.get_by_test_id("next-fires").locator("li")).to_have_count(5)
    page.shot("job")

    # Edit: Save lists the change, Confirm sends it; the API's rule at the field, then a
    # save that bumps the version (more in test_dashboard_edit.py).
    edit = pg.get_by_role("form", name="Edit job")
    edit.get_by_label("Interval (ms)").fill("1")
    edit.get_by_role("button", name="Save").click()
    edit.get_by_role("button", name="Confirm save").click()
    expect(edit.get_by_test_id("err-interval")).to_contain_text("min_interval_ms")
    edit.get_by_label("Interval (ms)").fill("2000")
    edit.get_by_role("button", name="Save").click()
    edit.get_by_role("button", name="Confirm save").click()
    expect(edit.get_by_test_id("form-message")).to_contain_text("version 2")
    expect(pg.locator("main")).to_contain_text("every 2.0 s")
    page.shot("job-edited")

    # Trigger with parameters: SKIP while runs are active gives a SKIPPED run, reason overlap.
    trigger = pg.get_by_role("form", name="Trigger with parameters")
    trigger.get_by_label("Overlap policy for this run").select_option("OVERLAP_POLICY_SKIP")
    trigger.get_by_role("button", name="Trigger with policy").click()
    expect(pg.get_by_role("status").filter(has_text="manual")).to_contain_text("skipped (overlap")
    # Parameters that are not a JSON object: the API's rule, shown.
    trigger.get_by_label("Parameters").fill("[1, 2]")
    trigger.get_by_label("Overlap policy for this run").select_option("OVERLAP_POLICY_ALLOW_ALL")
    trigger.get_by_role("button", name="Trigger with policy").click()
    expect(pg.get_by_role("alert").filter(has_text="params_json")).to_be_visible()
    trigger.get_by_label("Parameters").fill('{"date": "2026-01-01"}')
    trigger.get_by_role("button", name="Trigger with policy").click()
    expect(pg.get_by_role("status").filter(has_text="manual")).to_contain_text("running")

    pg.get_by_role("button", name="Pause").first.click()
    expect(pg.get_by_role("button", name="Resume").first).to_be_visible()
    job = call(follower.url, "GET", f"/v1/jobs/{job_id}?consistency=STALE").json["job"]
    assert job["spec"]["name"] == "from-the-form"
    pg.goto(f"{follower.url}/#/jobs")
    expect(pg.locator(f'tr[data-job="{job_id}"]')).to_contain_text("paused")
    page.shot("jobs")
    assert page.script_errors() == []


def test_open_a_run_and_see_its_dag_change_live(cluster, page):
    leader, follower = _follower(cluster)
    job = _job(leader, "etl", [
        {"name": "extract", "queue": "dag"},
        {"name": "transform", "queue": "dag", "dependsOn": ["extract"]},
        {"name": "validate", "queue": "dag", "dependsOn": ["extract"]},
        {"name": "load", "queue": "dag", "dependsOn": ["transform", "validate"]},
    ])
    run_id = _trigger(leader, job)
    pg = page.page
    pg.goto(f"{follower.url}/#/runs/{quote(run_id, safe='')}")
    dag = pg.get_by_test_id("dag")
    expect(dag.locator("g.task")).to_have_count(4)
    expect(dag.locator("path")).to_have_count(4)  # the four dependency edges
    expect(dag.locator('g[data-task="extract"]')).to_have_attribute("data-state", "ready")
    expect(dag.locator('g[data-task="load"]')).to_have_attribute("data-state", "pending")
    _mark(pg)

    worker = RawWorker(leader, "w-dag", ("dag",))
    try:
        worker.credits(1)
        assign = worker.next("assign")
        assert assign.lease.task_name == "extract"
        expect(dag.locator('g[data-task="extract"]')).to_have_attribute("data-state", "leased")
        worker.complete(assign.lease)
        worker.next("report_ack")
        expect(dag.locator('g[data-task="extract"]')).to_have_attribute("data-state",
                                                                        "succeeded")
        expect(dag.locator('g[data-task="transform"]')).to_have_attribute("data-state", "ready")
    finally:
        worker.close()
    assert _not_reloaded(pg)
    row = pg.locator('tr[data-task="extract"]')
    expect(row).to_contain_text("w-dag")
    expect(row).to_contain_text(str(assign.lease.fencing_token))
    # Keyboard: a DAG node is focusable and Enter takes you to its row.
    dag.locator('g[data-task="extract"]').focus()
    pg.keyboard.press("Enter")
    page.shot("run")
    pg.get_by_role("button", name="Cancel run").click()
    expect(pg.get_by_test_id("run-state")).to_contain_text("cancelled")
    expect(dag.locator('g[data-task="load"]')).to_have_attribute("data-state", "cancelled")
    expect(dag.locator('g[data-task="extract"]')).to_have_attribute("data-state", "succeeded")
    assert page.script_errors() == []


def test_dead_letters_grouped_selected_and_replayed_with_a_reason(cluster, page):
    leader, follower = _follower(cluster)
    job = _job(leader, "doomed", [{"name": "main", "queue": "dlq", "retry": {"maxAttempts": 1}}])
    errors = ["disk 3 full", "disk 7 full", "timeout talking to db"]
    runs = [_trigger(leader, job) for _ in errors]
    worker = RawWorker(leader, "w-dlq", ("dlq",))
    try:
        for _ in errors:
            worker.credits(1)
            assign = worker.next("assign")
            worker.fail(assign.lease, errors[runs.index(assign.lease.run_id)], retryable=False)
            worker.next("report_ack")
    finally:
        worker.close()
    wait_for(lambda: {d["runId"] for d in call(leader.url, "GET", "/v1/dlq").json["deadLetters"]}
             >= set(runs), timeout_s=20, what="the dead letters")
    too_long = call(leader.url, "POST", "/v1/dlq/replay",
                    {"tasks": [{"runId": runs[0], "taskName": "main"}], "reason": "x" * 501})
    assert too_long.status == 400 and too_long.json["field"] == "reason", too_long.text
    pg = page.page
    pg.goto(f"{follower.url}/#/dlq?group=error")
    disk = pg.locator('section[data-group="disk N full"]')  # one error class, digits as N
    expect(disk.locator("tr[data-dead]")).to_have_count(2)
    timeout = pg.locator(f'tr[data-dead="{runs[2]}:main"]')
    expect(timeout).to_contain_text("timeout talking to db")
    page.shot("dlq")
    disk.get_by_role("checkbox", name="select all of disk N full").check()
    expect(pg.get_by_test_id("dlq-selected")).to_have_text("2 selected")
    pg.get_by_role("button", name="Replay selected").click()  # no reason: refused, unchanged
    expect(pg.get_by_role("alert")).to_contain_text("reason")
    expect(disk.locator("tr[data-dead]")).to_have_count(2)
    pg.get_by_label("Reason (kept in the audit log)").fill("disk freed on db-3")
    pg.get_by_role("button", name="Replay selected").click()
    expect(pg.get_by_role("status").filter(has_text="Replayed 2 tasks")).to_be_visible()
    expect(disk).to_have_count(0)
    expect(timeout).to_be_visible()
    for run_id in runs[:2]:
        run = call(leader.url, "GET", f"/v1/runs/{quote(run_id, safe='')}").json["run"]
        assert run["tasks"][0]["state"] in ("TASK_STATE_READY", "TASK_STATE_LEASED")
    page.shot("dlq-replayed")
    # Discard: the letter leaves the queue, its task stays dead; both reasons are audited.
    pg.get_by_role("checkbox", name=f"select {runs[2]}:main").check()
    pg.get_by_label("Reason (kept in the audit log)").fill("db retired, nothing to redo")
    pg.get_by_role("button", name="Discard selected").click()
    expect(pg.get_by_role("status").filter(has_text="Discarded 1 task")).to_be_visible()
    expect(timeout).to_have_count(0)
    run = call(leader.url, "GET", f"/v1/runs/{quote(runs[2], safe='')}").json["run"]
    assert run["tasks"][0]["state"] == "TASK_STATE_DEAD"
    entries = call(leader.url, "GET", "/v1/audit").json["entries"]
    assert any(e["action"] == "JobService.ReplayDeadLetters" and "disk freed on db-3" in e["detail"]
               and runs[0] in e["detail"] for e in entries), entries[:3]
    assert any(e["action"] == "JobService.DiscardDeadLetters" and runs[2] in e["detail"]
               and "db retired" in e["detail"] for e in entries), entries[:3]
    assert page.script_errors() == []


def test_a_followers_dashboard_sends_writes_to_the_leaders_origin(cluster, page):
    """A node without authentication answers CORS only to member origins, and a write that
    one node of another origin redirects arrives as `Origin: null` (refused): the page asks
    the leader directly, from its own (member) origin, and no write is redirected."""
    leader, follower = _follower(cluster)
    job = _job(leader, "written-at-the-leader", [{"name": "main", "queue": "direct"}])
    pg = page.page
    requests: list = []
    redirected: list[str] = []
    pg.on("request", lambda r: r.method in ("POST", "PUT", "PATCH", "DELETE") and "/v1/" in r.url
          and requests.append(r))
    pg.on("response", lambda r: r.status == 307 and r.request.method != "GET"
          and redirected.append(r.url))
    pg.goto(f"{follower.url}/#/jobs/{job['jobId']}")
    pg.get_by_role("button", name="Resume").first.click()
    expect(pg.get_by_role("button", name="Pause").first).to_be_visible()
    edit = pg.get_by_role("form", name="Edit job")
    edit.get_by_label("Priority").fill("3")
    edit.get_by_role("button", name="Save").click()
    edit.get_by_role("button", name="Confirm save").click()
    expect(edit.get_by_test_id("form-message")).to_contain_text("Saved")
    writes = [(r.url, r.all_headers().get("origin")) for r in requests]  # as sent
    assert writes and all(url.startswith(f"{leader.url}/v1/") and origin == follower.url
                          for url, origin in writes), writes
    assert redirected == []
    got = call(leader.url, "GET", f"/v1/jobs/{job['jobId']}").json["job"]
    assert got["paused"] is False and got["spec"]["priority"] == 3
    assert page.script_errors() == []


def _dead_and_upstream_failed(leader, name: str, first: str):
    """A run whose task `first` died (one attempt, non-retryable) and whose second task is
    therefore upstream_failed (attempt 0, token 0); the dead task's lease."""
    job = _job(leader, name, [
        {"name": first, "queue": name, "retry": {"maxAttempts": 1}},
        {"name": "summarize", "queue": name, "dependsOn": [first]},
    ])
    run_id = _trigger(leader, job)
    worker = RawWorker(leader, f"w-{name}", (name,))
    try:
        worker.credits(1)
        assign = worker.next("assign")
        worker.fail(assign.lease, "the disk is on fire and so is the one we kept as a spare, "
                    "so this task gave up for good", retryable=False)
        worker.next("report_ack")
    finally:
        worker.close()
    return run_id, assign.lease


def test_the_dag_shows_every_label_whole(cluster, page):
    """Seen: a node's label was cut at 30 characters ("upstream_failed · attempt 0 ·", the
    fencing token lost) and a name at 22. Every label is whole, wrapped inside its node."""
    leader, follower = _follower(cluster)
    first = "extract-every-order-of-the-last-quarter"
    run_id, lease = _dead_and_upstream_failed(leader, "labels", first)
    pg = page.page
    pg.goto(f"{follower.url}/#/runs/{quote(run_id, safe='')}")
    dag = pg.get_by_test_id("dag")
    expect(dag.locator('g[data-task="summarize"]')).to_have_attribute("data-state",
                                                                      "upstream_failed")
    expect(dag.locator(f'g[data-task="{first}"]')).to_have_attribute("data-state", "dead")
    nodes = pg.evaluate("""() => [...document.querySelectorAll('svg.dag g.task')].map(g => {
        const r = g.querySelector('rect').getBBox();
        const texts = [...g.querySelectorAll('text')];
        return { task: g.dataset.task, lines: texts.map(t => t.textContent),
                 inside: texts.every(t => { const b = t.getBBox();
                   return b.x >= r.x && b.y >= r.y && b.x + b.width <= r.x + r.width
                     && b.y + b.height <= r.y + r.height; }) };
    })""")
    by_task = {n["task"]: n for n in nodes}
    expected = {first: ("dead", "attempt 1", f"token {lease.fencing_token}"),
                "summarize": ("upstream_failed", "attempt 0", "token 0")}
    for task, parts in expected.items():
        lines = by_task[task]["lines"]
        assert task in "".join(lines), lines  # the name whole (broken at characters)
        status = " · ".join(lines)
        assert all(part in status for part in parts), lines
        assert by_task[task]["inside"], lines
    page.shot("dag-labels")
    assert page.script_errors() == []


def test_the_tasks_table_keeps_its_attempts_on_one_line(cluster, page):
    """Seen: "1 attempt" in the run's tasks table wrapped one word per line."""
    leader, follower = _follower(cluster)
    run_id, _lease = _dead_and_upstream_failed(leader, "attempts", "extract")
    pg = page.page
    pg.goto(f"{follower.url}/#/runs/{quote(run_id, safe='')}")
    expect(pg.locator('tr[data-task="extract"] summary')).to_have_text("1 attempt")
    # Measured and scrolled to in one go: a live refresh may replace the row between two calls.
    tops = pg.evaluate("""() => {
        const summary = document.querySelector('tr[data-task="extract"] summary');
        summary.scrollIntoView({block: "center"});
        const r = document.createRange();
        r.selectNodeContents(summary);
        return [...new Set([...r.getClientRects()].filter(x => x.width > 0)
          .map(x => Math.round(x.top)))]; }""")
    assert len(tops) == 1, tops
    page.shot("tasks-table")
    assert page.script_errors() == []


@pytest.mark.parametrize("hash_", ["cluster", "jobs", "dlq", "queues"])
def test_pages_fit_a_phone_and_work_with_the_keyboard(cluster, browser, hash_):
    from tests.browser.conftest import Page

    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True,
                                  has_touch=True)
    try:
        page = Page(context.new_page(), f"phone-{hash_}")
        pg = page.page
        pg.set_default_timeout(20_000)
        pg.goto(f"{cluster.leader().url}/#/{hash_}")
        expect(pg.locator("main h1")).to_be_visible()
        expect(pg.locator("#live")).to_have_text("live")
        assert pg.evaluate("document.documentElement.scrollWidth") <= 390
        if hash_ == "queues":  # the form's job left ready tasks on the default queue
            expect(pg.locator('tr[data-queue="default"]')).to_be_visible()
        pg.keyboard.press("Tab")
        assert pg.evaluate("document.activeElement.className") == "skip"
        pg.keyboard.press("Tab")
        assert pg.evaluate("document.activeElement.dataset.nav") == "cluster"
        page.shot("page")
        assert page.script_errors() == []
    finally:
        context.close()


def test_the_cluster_page_shows_limits_in_the_units_a_person_reads(cluster, page):
    """Limits were shown raw: dedupe_max_age_ms as 86400000."""
    leader = cluster.leader()
    limits = call(leader.url, "GET", "/v1/cluster").json["limits"]
    pg = page.page
    pg.goto(f"{leader.url}/#/cluster")
    age = pg.locator('[data-limit="dedupeMaxAgeMs"] span')
    assert int(limits["dedupeMaxAgeMs"]) == 86_400_000  # the default: nothing here sets it
    expect(age).to_have_text("1d")
    expect(age).to_have_attribute("title", "86400000 ms")
    assert page.script_errors() == []


def _luminance(rgb: str) -> float:
    r, g, b = (int(x) / 255 for x in re.findall(r"\d+", rgb)[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_page_follows_the_systems_colour_scheme(cluster, browser, scheme):
    """There was no dark theme: a page of white cards at night."""
    from tests.browser.conftest import Page

    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=scheme)
    try:
        page = Page(context.new_page(), f"{scheme}-jobs")
        pg = page.page
        pg.goto(f"{cluster.leader().url}/#/jobs")
        expect(pg.locator("#live")).to_have_text("live")
        colours = pg.evaluate("""() => [document.body, document.querySelector("main .card")
            || document.body].map(e => getComputedStyle(e)).flatMap(s => [s.backgroundColor,
            s.color])""")
        body_bg, body_fg, card_bg, _card_fg = map(_luminance, colours)
        if scheme == "dark":
            assert body_bg < 0.15 and card_bg < 0.2 and body_fg > 0.8, colours
        else:
            assert body_bg > 0.9 and card_bg > 0.9 and body_fg < 0.2, colours
        page.shot("page")
        assert page.script_errors() == []
    finally:
        context.close()


def test_the_page_runs_under_a_content_security_policy_that_blocks_injected_script(
        cluster, page):
    """The dashboard sent no Content-Security-Policy: a script injected into the page (a
    payload rendered as HTML by some future bug) would have run with the token."""
    leader, follower = _follower(cluster)
    r = call(follower.url, "GET", "/")
    policy = r.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy, policy
    assert leader.url.rstrip("/") in policy  # a follower's page writes to the leader
    assert r.headers["x-content-type-options"] == "nosniff"
    pg = page.page
    pg.goto(f"{follower.url}/#/jobs")
    expect(pg.locator("#live")).to_have_text("live")
    blocked = pg.evaluate("""() => new Promise(resolve => {
        document.addEventListener("securitypolicyviolation",
                                  e => resolve(e.violatedDirective), {once: true});
        const s = document.createElement("script");
        s.textContent = "window.__injected = true";
        document.body.appendChild(s);
    })""")
    assert blocked.startswith("script-src"), blocked
    assert pg.evaluate("window.__injected") is None
    assert [e for e in page.script_errors() if "Content Security Policy" not in e] == []


def test_a_leader_change_is_shown_after_the_leader_is_killed(cluster, page):
    """Last in the module: it leaves the old leader dead."""
    leader, follower = _follower(cluster)
    pg = page.page
    pg.goto(f"{follower.url}/#/cluster")
    badge = pg.get_by_test_id("leader-badge")
    expect(badge).to_have_attribute("data-leader", leader.node_id)
    expect(pg.locator(f'tr[data-node="{leader.node_id}"]')).to_contain_text("leader")
    _mark(pg)
    cluster.kill(leader.node_id, signal.SIGKILL)
    pg.wait_for_function(
        "old => { const l = document.querySelector('[data-testid=leader-badge]').dataset.leader;"
        " return l && l !== old; }", arg=leader.node_id, timeout=60_000)
    new_leader = badge.get_attribute("data-leader")
    expect(pg.locator(f'tr[data-node="{leader.node_id}"]')).to_contain_text("unreachable")
    expect(pg.get_by_test_id("kv-leader")).to_contain_text(new_leader)
    assert _not_reloaded(pg)
    page.shot("cluster-after-failover")
    assert page.script_errors() == []
