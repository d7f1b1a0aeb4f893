"""Human output: times, durations, aligned tables; JSON output: stable plain objects."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gnomon.client import (
    Attempt,
    AttemptOutcome,
    ClusterLimits,
    ClusterStatus,
    CronSchedule,
    DeadLetter,
    IntervalSchedule,
    Job,
    JobSpec,
    LeaderChange,
    NodeStatus,
    OnceSchedule,
    Run,
    RunState,
    RunTrigger,
    TaskInstance,
    TaskState,
)
from gnomon.client.cli.render import (
    cluster_json,
    dead_letter_json,
    fmt_duration,
    fmt_schedule,
    fmt_time,
    job_json,
    limits_json,
    render_cluster,
    render_dead_letters,
    render_job,
    render_jobs,
    render_limits,
    render_run,
    render_runs,
    run_json,
    table,
)
from gnomon.client.cli.spec import spec_from_data

T0 = 1796035262000  # 2026-11-30 10:41:02Z


def test_fmt_time():
    assert fmt_time(T0) == "2026-11-30 10:41:02Z"
    assert fmt_time(T0 + 999) == "2026-11-30 10:41:02Z"
    assert fmt_time(0) == "-"


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0ms"),
        (350, "350ms"),
        (4210, "4.2s"),
        (42_000, "42s"),
        (123_000, "2m03s"),
        (3_720_000, "1h02m"),
        (273_600_000, "3d04h"),
        (-1500, "-1.5s"),
    ],
)
def test_fmt_duration(ms, text):
    assert fmt_duration(ms) == text


def test_fmt_schedule():
    assert (
        fmt_schedule(CronSchedule("*/5 * * * *", "Europe/Berlin"))
        == 'cron "*/5 * * * *" Europe/Berlin'
    )
    assert fmt_schedule(IntervalSchedule(30_000)) == "every 30s"
    assert (
        fmt_schedule(IntervalSchedule(30_000, anchor_ms=T0))
        == "every 30s from 2026-11-30 10:41:02Z"
    )
    assert fmt_schedule(OnceSchedule(T0)) == "once at 2026-11-30 10:41:02Z"


def test_table_aligns_columns_and_cuts_long_cells():
    out = table(["ID", "NAME", "NOTE"], [["j1", "a", ""], ["j200", "longer name", "x" * 100]])
    lines = out.splitlines()
    assert lines[0] == "ID    NAME         NOTE"
    assert lines[1] == "j1    a            -"
    assert lines[2].startswith("j200  longer name  xxx")
    assert lines[2].endswith("...") and len(lines[2]) == len("j200  longer name  ") + 60
    # Newlines in a cell never break the table.
    assert table(["A", "B"], [["x\ny", "z"]]) == "A    B\nx y  z"


def _job(**kw) -> Job:
    spec = JobSpec.single("nightly", CronSchedule("0 3 * * *"), queue="reports", payload={"a": 1})
    return Job(
        job_id="j7", spec=spec, version=3, next_fire_ms=T0, created_ms=T0, updated_ms=T0, **kw
    )


def test_jobs_table():
    out = render_jobs([_job(), _job(paused=True)])
    header, active, paused = out.splitlines()
    assert header.split() == [
        "ID",
        "TENANT",
        "NAME",
        "SCHEDULE",
        "NEXT",
        "FIRE",
        "STATE",
        "TASKS",
        "VERSION",
    ]
    assert "2026-11-30 10:41:02Z" in active and "active" in active
    assert "paused" in paused and "2026-11-30" not in paused
    assert render_jobs([]) == "no jobs"


def test_job_detail_and_json():
    job = _job()
    text = render_job(job)
    assert "j7 (default/nightly)" in text and 'cron "0 3 * * *" UTC' in text
    assert '{"a":1}' in text
    data = json.loads(json.dumps(job_json(job)))
    assert data["job_id"] == "j7" and data["version"] == 3 and data["next_fire_ms"] == T0
    assert data["spec"]["tasks"][0]["payload"] == {"a": 1}
    # The spec in the JSON reads back as a spec file.
    assert spec_from_data(data["spec"]) == job.spec


def _run(state=RunState.FAILED) -> Run:
    return Run(
        run_id="j7@1796035262000",
        job_id="j7",
        scheduled_for_ms=T0,
        state=state,
        trigger=RunTrigger.SCHEDULE,
        created_ms=T0,
        finished_ms=T0 + 4200,
        tasks=(
            TaskInstance(
                "extract",
                TaskState.SUCCEEDED,
                attempt=1,
                fencing_token=4,
                worker_id="w1",
                idempotency_key="j7@1796035262000:extract",
                started_ms=T0,
                finished_ms=T0 + 350,
                result=b'{"rows":3}',
            ),
            TaskInstance(
                "load", TaskState.DEAD, attempt=3, fencing_token=9, last_error="boom " * 30
            ),
        ),
        job_version=3,
    )


def test_runs_and_run_detail():
    lines = render_runs([_run()]).splitlines()
    assert lines[1].split()[:3] == ["j7@1796035262000", "failed", "schedule"]
    assert "4.2s" in lines[1] and "1/2 ok" in lines[1]
    text = render_run(_run())
    assert "extract  succeeded  1" in text and '{"rows":3}' in text and "350ms" in text
    # A long error is cut in the table and printed in full below it.
    assert "errors in full:\n  load: " + ("boom " * 30).strip() in text
    assert render_runs([]) == "no runs"


def test_run_json_shape():
    data = json.loads(json.dumps(run_json(_run())))
    assert set(data) == {
        "run_id",
        "job_id",
        "tenant",
        "state",
        "trigger",
        "scheduled_for_ms",
        "created_ms",
        "finished_ms",
        "job_version",
        "reason",
        "cancel_requested",
        "fire_delay_ms",
        "tasks",
    }
    assert data["state"] == "failed" and data["trigger"] == "schedule"
    extract, load = data["tasks"]
    assert extract["result"] == {"rows": 3} and extract["fencing_token"] == 4
    assert extract["idempotency_key"] == "j7@1796035262000:extract"
    assert "result" not in load and load["state"] == "dead"


def test_dead_letters():
    d = DeadLetter("j7@1", "load", job_id="j7", attempts=3, last_error="x", dead_ms=T0)
    assert "j7@1:load" in render_dead_letters([d])
    assert render_dead_letters([]) == "no dead letters"
    assert dead_letter_json(d) == {
        "run_id": "j7@1",
        "task_name": "load",
        "job_id": "j7",
        "tenant": "default",
        "attempts": 3,
        "last_error": "x",
        "dead_ms": T0,
    }


def test_cluster():
    status = ClusterStatus(
        node_id="n1",
        leader_node_id="n2",
        leader_grpc_address="127.0.0.1:7702",
        term=4,
        commit_index=10,
        applied_index=10,
        clock_ms=T0,
        jobs=2,
        nodes=(
            NodeStatus("n1", "127.0.0.1:7801", "127.0.0.1:7701", "follower", 10, True),
            NodeStatus("n2", "127.0.0.1:7802", "127.0.0.1:7702", "leader", 10, True),
        ),
    )
    text = render_cluster(status)
    assert "n2 (127.0.0.1:7702)" in text and "n2    leader    127.0.0.1:7702" in text
    assert "limits version  0 (not set yet)" in text and "state digest" not in text
    data = cluster_json(status)
    assert data["leader_node_id"] == "n2" and data["nodes"][1]["role"] == "leader"
    assert data["limits"] == {name: None for name, _ in ClusterLimits().items()}
    json.dumps(data)
    changed = dataclasses.replace(status, leader_changes=(
        LeaderChange(T0, 4, "n2", "n1", "elected in term 4"),))
    assert "leader changes seen by n1:" in render_cluster(changed)
    assert "elected in term 4" in render_cluster(changed)
    assert cluster_json(changed)["leader_changes"][0]["previous_leader_node_id"] == "n1"
    digested = render_cluster(ClusterStatus(node_id="n1", state_digest="ab12", limits_version=2))
    assert "state digest    ab12" in digested and "limits version  2" in digested


def test_run_without_attempts_has_no_attempt_section():
    assert "attempts:" not in render_run(_run())
    assert all(t["attempts"] == [] for t in run_json(_run())["tasks"])


def test_attempts_of_a_run():
    killed = Attempt(
        1, fencing_token=5, worker_id="w1", outcome=AttemptOutcome.FAILED, exit_code=-9,
        error="killed by SIGKILL", started_ms=T0, finished_ms=T0 + 2500, output_tail="",
    )
    expired = Attempt(2, fencing_token=6, worker_id="w2", outcome=AttemptOutcome.EXPIRED,
                      error="lease expired")
    run = Run("j1@1", "j1", tasks=[TaskInstance("a", attempts=(killed, expired))])
    text = render_run(run)
    row1, row2 = text[text.index("attempts:"):].splitlines()[2:4]
    # No duration from the worker: the recorded start and finish; an unknown exit code is -.
    assert "-9 (signal 9)" in row1 and "2.5s" in row1
    assert row2.split()[:7] == ["a", "2", "6", "w2", "expired", "-", "-"]
    assert "output of" not in text  # neither attempt has output


def test_limits():
    limits = ClusterLimits(dedupe_capacity=0, dedupe_max_age_ms=90_000)
    text = render_limits(limits, 5)
    assert text.splitlines()[0] == "limits version  5"
    rows = {line.split()[0]: line for line in text.splitlines()[3:]}
    assert rows["dedupe_capacity"].split()[1] == "0"
    assert "90000 (1m30s)" in rows["dedupe_max_age_ms"]
    assert rows["max_attempt_records"].split()[1] == "-"
    assert "request ids remembered" in rows["dedupe_capacity"]
    assert limits_json(limits, 5) == {"limits_version": 5, "limits": dict(limits.items())}
