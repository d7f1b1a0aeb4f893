"""Editing a job in the dashboard keeps what the form does not show, saves against the job's
current version, and shows what will change first; JSON payloads and results read as JSON.

A follower's dashboard, as in test_dashboard.py (writes go through the 307 to the leader).
With GNOMON_DOCS_SCREENSHOTS=1 the edit's before/after screenshots are also written to
docs/dashboard-edit-before.png and docs/dashboard-edit-after.png (the README's pictures).
"""

from __future__ import annotations

import base64
import os
import re
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.support.cluster import RawWorker
from tests.support.http import call

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
expect = pytest.importorskip("playwright.sync_api").expect

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAYLOAD = {"source": "orders", "tables": ["orders", "refunds"], "since": "2026-01-01"}
RETRY = {"maxAttempts": 5, "initialBackoffMs": "1000", "maxBackoffMs": "60000",
         "multiplier": 2.5, "jitter": 0.2}
# Every field away from its default (what one schedule kind excludes in the others).
NOW = int(time.time() * 1000)
COMMON = {
    "paused": True, "priority": 3, "misfirePolicy": "MISFIRE_POLICY_RUN_LATEST",
    "misfireGraceMs": "90000", "jitterMs": "5000", "startAtMs": str(NOW),
    "endAtMs": str(NOW + 365 * 86_400_000), "maxRuns": "40",
    "circuitBreaker": {"windowRuns": 10, "failurePercent": 50, "cooldownMs": "600000"},
    "tasks": [
        {"name": "extract", "queue": "etl", "payload": PAYLOAD, "timeoutMs": "600000",
         "retry": RETRY},
        {"name": "load", "queue": "etl", "dependsOn": ["extract"], "retry": RETRY,
         "payloadBase64": base64.b64encode(b"\x00\x01raw\xff").decode()},
    ],
}
CRON_JOB = COMMON | {
    "name": "everything-cron", "overlapPolicy": "OVERLAP_POLICY_SKIP", "maxActiveRuns": 2,
    "schedule": {"cron": {"expression": "30 2 * * *", "timezone": "Europe/Berlin",
                          "dialect": "CRON_DIALECT_SECONDS_LAST",
                          "dstNonexistent": "DST_NONEXISTENT_POLICY_SKIP",
                          "dstAmbiguous": "DST_AMBIGUOUS_POLICY_LAST"}},
}
INTERVAL_JOB = COMMON | {
    "name": "everything-interval", "overlapPolicy": "OVERLAP_POLICY_BUFFER_ALL",
    "maxBufferedRuns": 5,
    "schedule": {"interval": {"intervalMs": "3600000", "anchorMs": "1800000"}},
}
ONCE_JOB = COMMON | {
    "name": "everything-once", "deleteAfterSuccess": True,
    "overlapPolicy": "OVERLAP_POLICY_BUFFER_ONE",
    "schedule": {"once": {"atMs": str(NOW + 30 * 86_400_000 + 123)}},
}


def _follower(cluster):
    leader = cluster.leader()
    return leader, next(n for n in cluster.nodes if n is not leader and n.alive())


def _create(node, spec: dict) -> dict:
    r = call(node.url, "POST", "/v1/jobs", {"spec": spec})
    assert r.status == 201, r.text
    return r.json["job"]


def _job(node, job_id: str) -> dict:
    r = call(node.url, "GET", f"/v1/jobs/{job_id}")
    assert r.status == 200, r.text
    return r.json["job"]


def _shot(page, label: str) -> None:
    page.shot(label)
    if os.environ.get("GNOMON_DOCS_SCREENSHOTS"):
        page.page.screenshot(path=str(DOCS / f"dashboard-{label}.png"), full_page=True)


def _save(edit):
    """Save, confirm the changes if the form lists any; the form's message locator."""
    edit.get_by_role("button", name="Save").click()
    msg = edit.get_by_test_id("form-message").locator(".msg")
    confirm = edit.get_by_role("button", name="Confirm save")
    expect(confirm.or_(msg)).to_be_visible()
    if confirm.is_visible():
        confirm.click()
    return msg


@pytest.mark.parametrize("spec", [CRON_JOB, INTERVAL_JOB, ONCE_JOB],
                         ids=["cron", "interval", "once"])
def test_saving_an_untouched_job_keeps_every_field(cluster, page, spec):
    leader, follower = _follower(cluster)
    job = _create(leader, spec)
    created = job["spec"]
    pg = page.page
    pg.goto(f"{follower.url}/#/jobs/{job['jobId']}")
    edit = pg.get_by_role("form", name="Edit job")
    expect(edit).to_be_visible()
    msg = _save(edit)
    expect(msg).to_contain_text(re.compile("Nothing to save|Saved"))
    got = _job(leader, job["jobId"])["spec"]
    assert got == created, {k: (created.get(k), got.get(k)) for k in created.keys() | got.keys()
                            if created.get(k) != got.get(k)}
    expect(msg).to_contain_text("Nothing to save")
    assert page.script_errors() == []


def test_an_edit_shows_its_changes_and_keeps_the_rest(cluster, page):
    leader, follower = _follower(cluster)
    job = _create(leader, CRON_JOB | {"name": "edited"})
    pg = page.page
    pg.goto(f"{follower.url}/#/jobs/{job['jobId']}")
    edit = pg.get_by_role("form", name="Edit job")
    # The JSON payload reads as JSON, in the tasks table and in the form.
    expect(pg.get_by_test_id("task-payload").first).to_contain_text('"source": "orders"')
    assert '"source": "orders"' in edit.get_by_label("Tasks").input_value()
    expect(edit.get_by_label("DST overlap")).to_have_value("DST_AMBIGUOUS_POLICY_LAST")
    edit.get_by_label("Priority").fill("7")
    edit.get_by_label("Timezone").fill("Europe/Paris")
    edit.get_by_role("button", name="Save").click()
    diff = edit.get_by_test_id("diff")
    expect(diff.locator("tbody tr")).to_have_count(2)
    expect(diff.locator('tr[data-path="priority"]')).to_contain_text("3")
    expect(diff.locator('tr[data-path="priority"] td.after')).to_have_text("7")
    expect(diff.locator('tr[data-path="schedule.cron.timezone"] td.after')).to_have_text(
        "Europe/Paris")
    _shot(page, "edit-before")
    edit.get_by_role("button", name="Confirm save").click()
    expect(edit.get_by_test_id("form-message")).to_contain_text(
        f"Saved {job['jobId']} (version 2)")
    expect(edit.get_by_test_id("review")).to_be_hidden()
    expect(pg.locator("main")).to_contain_text("cron 30 2 * * * Europe/Paris")
    _shot(page, "edit-after")
    want = job["spec"] | {"priority": 7}
    want["schedule"] = {"cron": job["spec"]["schedule"]["cron"] | {"timezone": "Europe/Paris"}}
    assert _job(leader, job["jobId"])["spec"] == want
    # Saved: the form is the new version, nothing left to save.
    expect(_save(edit)).to_contain_text("Nothing to save: the form shows version 2")
    assert page.script_errors() == []


def test_pause_resume_then_edit_and_save_uses_the_current_version(cluster, page):
    leader, follower = _follower(cluster)
    job = _create(leader, INTERVAL_JOB | {"name": "paused-and-resumed", "paused": False})
    pg = page.page
    pg.goto(f"{follower.url}/#/jobs/{job['jobId']}")
    edit = pg.get_by_role("form", name="Edit job")
    expect(edit).to_be_visible()
    pg.get_by_role("button", name="Pause").first.click()
    pg.get_by_role("button", name="Resume").first.click()
    # The refresh that shows Pause again hands the form version 3 (created, paused, resumed).
    expect(pg.get_by_role("button", name="Pause").first).to_be_visible()
    edit.get_by_label("Priority").fill("9")
    expect(_save(edit)).to_contain_text(f"Saved {job['jobId']} (version 4)")
    got = _job(leader, job["jobId"])
    assert got["paused"] is False and got["version"] == "4"
    assert got["spec"] == job["spec"] | {"priority": 9}
    # The anchor, a field the form did not have before: its own PATCH path.
    edit.get_by_label("Anchor").fill("900000")
    expect(_save(edit)).to_contain_text(f"Saved {job['jobId']} (version 5)")
    want = job["spec"] | {"priority": 9}
    want["schedule"] = {"interval": job["spec"]["schedule"]["interval"] | {"anchorMs": "900000"}}
    assert _job(leader, job["jobId"])["spec"] == want
    assert page.script_errors() == []


def test_a_runs_json_result_and_parameters_are_shown_as_json(cluster, page):
    leader, follower = _follower(cluster)
    job = _create(leader, {"name": "json-result", "paused": True,
                           "schedule": {"interval": {"intervalMs": "3600000"}},
                           "tasks": [{"name": "main", "queue": "json", "payload": PAYLOAD}]})
    r = call(leader.url, "POST", f"/v1/jobs/{job['jobId']}/trigger",
             {"paramsJson": '{"date": "2026-02-03"}'})
    assert r.status == 200, r.text
    run_id = r.json["run"]["runId"]
    worker = RawWorker(leader, "w-json", ("json",))
    try:
        worker.credits(1)
        assign = worker.next("assign")
        worker.complete(assign.lease, b'{"rows": 3, "table": "orders"}')
        worker.next("report_ack")
    finally:
        worker.close()
    pg = page.page
    pg.goto(f"{follower.url}/#/runs/{quote(run_id, safe='')}")
    expect(pg.get_by_test_id("task-result")).to_contain_text('"rows": 3')
    expect(pg.get_by_test_id("run-parameters")).to_contain_text('"date": "2026-02-03"')
    page.shot("run-json")
    assert page.script_errors() == []
