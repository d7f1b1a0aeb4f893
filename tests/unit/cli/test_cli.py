"""``gnomon`` argument parsing, output and exit codes against a fake Client (no server)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace

import grpc
import pytest

from gnomon.client import (
    AlreadyExists,
    Attempt,
    AttemptOutcome,
    CircuitBreaker,
    ClusterLimits,
    ClusterStatus,
    Conflict,
    CronDialect,
    CronSchedule,
    DeadlineExceeded,
    DstAmbiguous,
    DstNonexistent,
    FailedPrecondition,
    GnomonError,
    IntervalSchedule,
    InvalidArgument,
    Job,
    JobSpec,
    LimitsUpdate,
    NotFound,
    OnceSchedule,
    ResourceExhausted,
    RetryPolicy,
    Run,
    RunState,
    TaskInstance,
    TaskSpec,
    TaskState,
    Unavailable,
)
from gnomon.client.cli import error_line, exit_code_for, main
from gnomon.client.cli.spec import UsageError
from tests.support.fake_client import T0, FakeClient, run

DEFAULT = "127.0.0.1:7701,127.0.0.1:7702,127.0.0.1:7703"
HINT = "start a local cluster with `gnomon dev`"




@pytest.fixture
def fake():
    return FakeClient()




# --- parsing and usage errors ------------------------------------------------------------------


def test_help_documents_exit_codes(capsys):
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "exit codes:" in text and "3    unavailable" in text and "job create|get|list" in text
    assert main(["job", "create", "--help"]) == 0
    assert "--payload-json" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["job"],
        ["job", "frobnicate"],
        ["job", "get"],
        ["job", "list", "--limit", "x"],
        ["dev", "--grpc-ports", "1,2"],
        ["worker", "python"],
        ["run", "list", "--limit", "x"],
        ["dlq", "replay", "--limit", "1"],
    ],
)
def test_usage_errors_exit_2_on_one_line(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.endswith("--help)\n")
    assert len(err.splitlines()) == 1 and "error:" in err and "Traceback" not in err


def test_dev_ports_that_overlap_the_gateways_are_refused_naming_them(capsys):
    # The gateway takes the first gRPC port - 1 (17700) and 100 below that (17600).
    assert main(["dev", "--grpc-ports", "17701,17702,17703",
                 "--raft-ports", "17700,17801,17802"]) == 2
    err = capsys.readouterr().err
    assert "--grpc-ports: the gateway takes ports 17700 and 17600" in err, err


def test_json_and_server_flags_before_or_after_the_subcommand(fake, monkeypatch):
    monkeypatch.delenv("GNOMON_SERVERS", raising=False)
    fake.jobs["j1"] = Job("j1", JobSpec.single("a", CronSchedule("@daily")))
    code, out, _ = run(fake, "--json", "job", "list")
    assert code == 0 and json.loads(out)[0]["job_id"] == "j1"
    assert fake.servers == DEFAULT and fake.timeout_s == 10.0
    code, out, _ = run(fake, "job", "list", "--json", "-s", "h:1", "--timeout", "2.5")
    assert code == 0 and json.loads(out)[0]["name"] == "a"
    assert fake.servers == "h:1" and fake.timeout_s == 2.5
    assert fake.closed


def test_servers_from_environment(fake, monkeypatch):
    monkeypatch.setenv("GNOMON_SERVERS", "a:1,b:2")
    run(fake, "job", "list")
    assert fake.servers == "a:1,b:2"
    run(fake, "job", "list", "--server", "c:3")
    assert fake.servers == "c:3"


# --- job create ----------------------------------------------------------------------------


def test_create_from_flags(fake):
    code, out, err = run(
        fake,
        "job",
        "create",
        "--name",
        "tick",
        "--cron",
        "* * * * * */5",
        "--tz",
        "Europe/Berlin",
        "--queue",
        "shell",
        "--payload-json",
        '{"argv": ["true"]}',
        "--timeout-ms",
        "30s",
        "--max-attempts",
        "4",
        "--backoff-ms",
        "200",
        "--priority",
        "7",
        "--misfire-policy",
        "skip",
    )
    assert (code, err) == (0, "")
    (spec,), kw = fake.method_calls("create_job")[0]
    assert spec == JobSpec(
        name="tick",
        schedule=CronSchedule("* * * * * */5", "Europe/Berlin"),
        tasks=(
            TaskSpec(
                "main",
                "shell",
                payload=b'{"argv":["true"]}',
                timeout_ms=30_000,
                retry=RetryPolicy(max_attempts=4, initial_backoff_ms=200),
            ),
        ),
        priority=7,
        misfire_policy="skip",
    )
    assert out.startswith(
        "created job j1 (default/tick), next fire 2026-11-30 10:41:02Z\nnext fires:\n")


def test_create_interval_and_once(fake):
    assert run(fake, "job", "create", "--name", "i", "--interval", "90s")[0] == 0
    assert (
        run(fake, "job", "create", "--name", "o", "--at", "2026-11-30T10:41:02Z", "--paused")[0]
        == 0
    )
    specs = [a[0] for a, _ in fake.method_calls("create_job")]
    assert specs[0].schedule == IntervalSchedule(90_000)
    assert specs[1].schedule == OnceSchedule(T0) and specs[1].paused


def test_create_json_output_is_the_job(fake):
    code, out, _ = run(fake, "job", "create", "--name", "x", "--interval-ms", "1000", "--json")
    data = json.loads(out)
    assert (
        code == 0
        and data["job_id"] == "j1"
        and data["spec"]["schedule"]
        == {
            "interval_ms": 1000,
            "anchor_ms": 0,
        }
    )


def test_create_from_file(fake, tmp_path):
    path = tmp_path / "dag.yaml"
    path.write_text(
        "name: dag\nschedule: {cron: '@daily'}\ntasks:\n"
        "  - {name: a}\n  - {name: b, depends_on: [a]}\n"
    )
    assert run(fake, "job", "create", "-f", str(path))[0] == 0
    (spec,), _ = fake.method_calls("create_job")[0]
    assert [t.depends_on for t in spec.tasks] == [(), ("a",)]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cron", "@daily"], "gnomon: --name is required"),
        (["--name", "x"], "gnomon: a schedule is required"),
        (["--name", "x", "--cron", "@daily", "--at", "now"], "gnomon: give one schedule"),
        (["--name", "x", "--interval-ms", "5s", "--tz", "UTC"], "gnomon: --tz applies to a cron"),
        (
            ["--name", "x", "--cron", "@daily", "--payload-json", "{nope"],
            "gnomon: --payload-json: not JSON",
        ),
        (
            ["--name", "x", "--cron", "@daily", "--timeout-ms", "soon"],
            "gnomon job create: error: argument --timeout-ms: 'soon' is not a duration",
        ),
        (
            ["--name", "x", "--at", "tomorrow"],
            "gnomon job create: error: argument --at: 'tomorrow' is not a time",
        ),
        (["-f", "spec.yaml", "--name", "x"], "gnomon: -f and --name do not mix"),
        (["-f", "/nonexistent/spec.yaml"], "gnomon: /nonexistent/spec.yaml: cannot read"),
    ],
)
def test_create_usage_errors(fake, argv, message):
    code, out, err = run(fake, "job", "create", *argv)
    assert code == 2 and out == ""
    assert err.startswith(message) and err.count("\n") == 1
    assert not fake.calls


def test_create_if_not_exists(fake):
    fake.jobs["j1"] = Job("j1", JobSpec.single("x", CronSchedule("@daily")), version=4)
    fake.fail = AlreadyExists("spec.name: exists", code=grpc.StatusCode.ALREADY_EXISTS)
    code, _, err = run(fake, "job", "create", "--name", "x", "--cron", "@daily")
    assert code == 1 and err == "gnomon: already exists: spec.name: exists\n"
    fake.fail = None
    original_create = fake._create_job

    def refuse(spec, request_id=None):
        raise AlreadyExists("spec.name: exists", code=grpc.StatusCode.ALREADY_EXISTS)

    fake._create_job = refuse
    code, out, _ = run(fake, "job", "create", "--name", "x", "--cron", "@daily", "--if-not-exists")
    assert code == 0 and out.startswith("exists, unchanged: job j1")
    fake._create_job = original_create


# --- references, update, lifecycle ----------------------------------------------------------


def test_job_refs(fake):
    fake.jobs["j1"] = Job("j1", JobSpec.single("j9", CronSchedule("@daily")))
    run(fake, "job", "get", "j1")
    run(fake, "job", "get", "name:j9", "--tenant", "t")
    run(fake, "job", "get", "nightly", "--tenant", "t")
    calls = fake.method_calls("get_job")
    assert calls[0] == (("j1",), {"tenant": None, "name": None})
    assert calls[1] == ((None,), {"tenant": "t", "name": "j9"})
    assert calls[2] == ((None,), {"tenant": "t", "name": "nightly"})


def test_update_with_flags_changes_only_those_fields(fake):
    spec = JobSpec.single(
        "x",
        CronSchedule("0 3 * * *", "Asia/Tokyo"),
        queue="q",
        payload={"a": 1},
        retry=RetryPolicy(max_attempts=5),
    )
    fake.jobs["j1"] = Job("j1", spec, version=6)
    code, out, _ = run(fake, "job", "update", "x", "--tz", "UTC", "--max-attempts", "2")
    assert code == 0 and out.startswith("updated job j1 (default/x) to version 7")
    (job_id, new), kw = fake.method_calls("update_job")[0]
    assert job_id == "j1" and kw["expected_version"] == 6
    assert new.schedule == CronSchedule("0 3 * * *", "UTC")
    assert new.tasks[0].retry == RetryPolicy(max_attempts=2) and new.tasks[0].queue == "q"
    assert new.tasks[0].payload == spec.tasks[0].payload


def test_update_errors(fake):
    dag = JobSpec("d", CronSchedule("@daily"), (TaskSpec("a"), TaskSpec("b", depends_on=("a",))))
    fake.jobs["j1"] = Job("j1", dag, version=2)
    code, _, err = run(fake, "job", "update", "j1", "--queue", "other")
    assert code == 2 and "job j1 has 2 tasks: change them with a spec file (-f)" in err
    code, _, err = run(fake, "job", "update", "j1")
    assert code == 2 and "nothing to change" in err
    code, _, err = run(fake, "job", "update", "j1", "--cron", "@hourly", "--expected-version", "1")
    assert code == 1 and err.startswith("gnomon: conflict: expected_version")


def test_update_from_file_by_spec_name(fake, tmp_path):
    fake.jobs["j1"] = Job("j1", JobSpec.single("x", CronSchedule("@daily")), version=2)
    path = tmp_path / "x.json"
    path.write_text('{"name": "x", "schedule": {"cron": "@hourly"}}')
    assert run(fake, "job", "update", "-f", str(path), "--expected-version", "2")[0] == 0
    (job_id, spec), kw = fake.method_calls("update_job")[0]
    assert (
        job_id is None and spec.schedule == CronSchedule("@hourly") and kw["expected_version"] == 2
    )


def test_pause_resume_delete(fake):
    fake.jobs["j1"] = Job("j1", JobSpec.single("x", CronSchedule("@daily")), next_fire_ms=T0)
    assert run(fake, "job", "pause", "x")[1] == "paused job j1 (default/x)\n"
    code, out, _ = run(fake, "job", "resume", "j1", "--json")
    assert code == 0 and json.loads(out)["paused"] is False
    code, out, _ = run(fake, "job", "delete", "j1", "--json")
    assert code == 0
    assert json.loads(out) == {"deleted": True, "cancel_running": False, "job_id": "j1"}
    assert fake.method_calls("delete_job")[0][1]["cancel_running"] is False
    code, _, err = run(fake, "job", "delete", "j1")
    assert code == 1 and err.startswith("gnomon: not found: job: no job j1")


def test_delete_can_cancel_running_tasks(fake):
    fake.jobs["j1"] = Job("j1", JobSpec.single("x", CronSchedule("@daily")))
    code, out, _ = run(fake, "job", "delete", "x", "--cancel-running")
    assert code == 0 and "queued and running tasks are cancelled" in out
    assert "gnomon run list JOB_ID" in out
    (args, kw) = fake.method_calls("delete_job")[0]
    assert args == (None,) and kw["name"] == "x" and kw["cancel_running"] is True


def test_run_list_of_a_deleted_job(fake):
    # By id the node answers a deleted job's runs; by name it is NOT_FOUND, and the message
    # says to use the id.
    fake.runs["j9@5"] = Run("j9@5", "j9", state=RunState.CANCELLED)
    code, out, _ = run(fake, "run", "list", "j9", "--json")
    assert code == 0 and [r["run_id"] for r in json.loads(out)] == ["j9@5"]

    def by_name(job_id=None, **kw):
        if job_id is None:
            raise NotFound("job: no job named 'gone' in tenant 'default'",
                           code=grpc.StatusCode.NOT_FOUND)
        return []

    fake._list_runs = by_name
    code, _, err = run(fake, "run", "list", "gone")
    assert code == 1
    assert err.startswith("gnomon: not found: job: no job named 'gone'")
    assert "list its runs by job id: gnomon run list JOB_ID" in err
    assert len(err.splitlines()) == 1


def test_trigger_and_wait(fake):
    fake.jobs["j1"] = Job("j1", JobSpec.single("x", CronSchedule("@daily")))
    code, out, _ = run(fake, "job", "trigger", "x", "--json")
    assert code == 0 and json.loads(out)["run_id"] == "j1@manual-1"
    fake.runs["j1@manual-1"] = replace(fake.runs["j1@manual-1"], state=RunState.SUCCEEDED)
    fake._trigger_job = lambda *a, **k: Run("j1@manual-1", "j1", state=RunState.RUNNING)
    code, out, _ = run(fake, "job", "trigger", "x", "--wait")
    assert code == 0 and "started run j1@manual-1" in out and "succeeded" in out
    fake.runs["j1@manual-1"] = replace(fake.runs["j1@manual-1"], state=RunState.FAILED)
    assert run(fake, "job", "trigger", "x", "--wait")[0] == 4

    def slow(run_id, *, timeout_s):
        raise DeadlineExceeded("still running", code=grpc.StatusCode.DEADLINE_EXCEEDED)

    fake._wait_run = slow
    fake.runs["j1@manual-1"] = replace(fake.runs["j1@manual-1"], state=RunState.RUNNING)
    assert run(fake, "job", "trigger", "x", "--wait", "--wait-timeout", "0.1")[0] == 4


def test_trigger_with_an_overlap_override(fake):
    fake.jobs["j1"] = Job("j1", JobSpec.single("x", CronSchedule("@daily")))
    code, out, _ = run(fake, "job", "trigger", "x", "--overlap-policy", "skip", "--wait")
    assert code == 0 and "skipped run j1@manual-1: overlap" in out
    assert fake.method_calls("trigger_job")[0][1]["overlap_policy"] == "skip"
    assert run(fake, "job", "trigger", "x", "--overlap-policy", "sometimes")[0] != 0


def test_create_with_overlap_flags(fake):
    code, _, _ = run(fake, "job", "create", "--name", "o", "--cron", "@daily",
                     "--overlap-policy", "buffer_all", "--max-active-runs", "2",
                     "--max-buffered-runs", "5")
    assert code == 0
    spec = fake.jobs["j1"].spec
    assert (spec.overlap_policy, spec.max_active_runs, spec.max_buffered_runs) == (
        "buffer_all", 2, 5)


def test_create_prints_the_next_three_fires(fake):
    code, out, _ = run(fake, "job", "create", "--name", "p", "--cron", "0 3 * * *")
    assert code == 0 and "next fires:" in out
    assert "utc-0" in out and "local-2" in out and "utc-3" not in out and "DST note" in out
    assert fake.method_calls("preview_schedule")[0] == (("j1",), {"count": 3})


def test_preview_a_job_or_a_schedule(fake):
    fake.jobs["j1"] = Job("j1", JobSpec.single("x", CronSchedule("@daily")))
    code, out, _ = run(fake, "job", "preview", "x", "--count", "2")
    assert code == 0 and "LOCAL (Europe/Berlin)" in out and "utc-1" in out
    code, out, _ = run(fake, "job", "preview", "--cron", "*/10 * * * * *", "--cron-dialect",
                       "seconds_first", "--tz", "Europe/Berlin", "--json")
    assert code == 0 and len(json.loads(out)["fires"]) == 5
    kwargs = fake.method_calls("preview_schedule")[1][1]
    assert kwargs["schedule"] == CronSchedule("*/10 * * * * *", "Europe/Berlin",
                                              CronDialect.SECONDS_FIRST)
    assert run(fake, "job", "preview")[0] == 2
    assert run(fake, "job", "preview", "x", "--cron", "@daily")[0] == 2
    assert run(fake, "job", "preview", "--interval-ms", "30s", "--cron-dialect",
               "seconds_last")[0] == 2


def test_create_with_dst_flags_and_keys(fake, tmp_path):
    code, _, _ = run(fake, "job", "create", "--name", "d", "--cron", "30 2 * * *", "--tz",
                     "Europe/Berlin", "--dst-nonexistent", "skip", "--dst-ambiguous", "first")
    assert code == 0
    assert fake.jobs["j1"].spec.schedule == CronSchedule(
        "30 2 * * *", "Europe/Berlin", dst_nonexistent=DstNonexistent.SKIP,
        dst_ambiguous=DstAmbiguous.FIRST)
    spec = tmp_path / "d2.yaml"
    spec.write_text("name: d2\nschedule: {cron: '0 0 * * *', timezone: America/Santiago, "
                    "dst_ambiguous: last}\ntask: {queue: q}\n")
    assert run(fake, "job", "create", "-f", str(spec))[0] == 0
    assert fake.jobs["j2"].spec.schedule.dst_ambiguous is DstAmbiguous.LAST
    assert run(fake, "job", "create", "--name", "e", "--interval-ms", "1m",
               "--dst-ambiguous", "first")[0] == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: b\nschedule: {cron: '0 0 * * *', dst_nonexistent: later}\n"
                   "task: {queue: q}\n")
    code, _, err = run(fake, "job", "create", "-f", str(bad))
    assert code == 2 and "spec.schedule.dst_nonexistent" in err


def test_create_with_jitter_and_bounds(fake):
    code, _, _ = run(fake, "job", "create", "--name", "b", "--cron", "0 0 * * *",
                     "--jitter-ms", "30s", "--start-at", "2026-12-01T00:00:00Z",
                     "--end-at", "2027-01-01T00:00:00Z", "--max-runs", "10")
    assert code == 0
    spec = fake.jobs["j1"].spec
    assert (spec.jitter_ms, spec.max_runs) == (30_000, 10)
    assert spec.start_at_ms == 1_796_083_200_000 and spec.end_at_ms == 1_798_761_600_000
    code, _, _ = run(fake, "job", "create", "--name", "o", "--at", "2026-12-01T00:00:00Z",
                     "--delete-after-success")
    assert code == 0 and fake.jobs["j2"].spec.delete_after_success
    code, out, _ = run(fake, "job", "get", "b")
    assert "jitter" in out and "of at most 10" in out


def test_trigger_with_params(fake):
    fake.jobs["j1"] = Job("j1", JobSpec.single("x", CronSchedule("@daily")))
    code, _, _ = run(fake, "job", "trigger", "x", "--params", '{"date": "2026-12-01"}')
    assert code == 0
    assert fake.method_calls("trigger_job")[0][1]["params"] == {"date": "2026-12-01"}
    assert run(fake, "job", "trigger", "x", "--conf", "[1]")[0] == 2
    assert run(fake, "job", "trigger", "x", "--params", "{nope")[0] == 2


def test_circuit_breaker_flags_and_reset(fake):
    code, _, _ = run(fake, "job", "create", "--name", "cb", "--cron", "@hourly",
                     "--circuit-window-runs", "10", "--circuit-failure-percent", "50",
                     "--circuit-cooldown-ms", "10m")
    assert code == 0
    assert fake.jobs["j1"].spec.circuit_breaker == CircuitBreaker(10, 50, 600_000)
    assert run(fake, "job", "create", "--name", "half", "--cron", "@hourly",
               "--circuit-window-runs", "10")[0] == 2
    code, out, _ = run(fake, "job", "get", "cb")
    assert "circuit" in out and "closed" in out
    fake._reset_circuit = lambda job_id=None, **kw: fake.jobs["j1"]
    code, out, _ = run(fake, "job", "reset-circuit", "cb")
    assert code == 0 and "circuit of job j1" in out


def test_rerun_cancel_and_retry_a_task(fake):
    failed = Run("j1@5", "j1", state=RunState.FAILED)
    fake._rerun_run = lambda run_id, **kw: replace(failed, state=RunState.RUNNING)
    fake._cancel_task = lambda run_id, **kw: replace(failed, state=RunState.CANCELLED)
    fake._retry_task = lambda run_id, **kw: replace(failed, state=RunState.RUNNING)
    code, out, _ = run(fake, "run", "rerun", "j1@5")
    assert code == 0 and "re-running run j1@5" in out
    code, out, _ = run(fake, "run", "cancel-task", "j1@5", "load", "--reason", "stop")
    assert code == 0 and "task load of run j1@5 cancelled; the run is cancelled" in out
    assert fake.method_calls("cancel_task")[0][1]["task_name"] == "load"
    code, out, _ = run(fake, "run", "retry-task", "j1@5", "load")
    assert code == 0 and "retrying task load of run j1@5" in out


def test_runs(fake):
    fake.runs["j1@5"] = Run("j1@5", "j1", scheduled_for_ms=T0, state=RunState.RUNNING)
    code, out, _ = run(fake, "run", "list", "j1", "--json", "--before", "2026-11-30T10:41:02Z")
    assert code == 0 and [r["run_id"] for r in json.loads(out)] == ["j1@5"]
    assert fake.method_calls("list_runs")[0][1]["before_ms"] == T0
    assert run(fake, "run", "list", "--job", "nightly")[0] == 0
    assert fake.method_calls("list_runs")[1] == (
        (None,),
        {"tenant": None, "name": "nightly", "limit": 20, "before_ms": 0},
    )
    assert run(fake, "run", "list", "a", "--job", "b")[0] == 2
    assert not fake.method_calls("list_runs_across_jobs")
    code, out, _ = run(fake, "run", "cancel", "j1@5")
    assert (code, out) == (0, "run j1@5 is cancelled\n")
    code, out, _ = run(fake, "run", "get", "j1@5")
    assert code == 0 and "running" in out


def test_run_list_across_jobs(fake):
    fake.runs["j1@5"] = Run("j1@5", "j1", tenant="acme", state=RunState.FAILED)
    fake.runs["j2@6"] = Run("j2@6", "j2", tenant="acme", state=RunState.FAILED)
    code, out, _ = run(fake, "run", "list")  # no job: across jobs, no filter
    assert code == 0 and "j1@5" in out and "j2@6" in out and "TENANT" in out
    code, out, _ = run(fake, "run", "list", "--state", "failed", "--since", "1h", "--late",
                       "--errors", "--queue", "gpu", "--tenant", "acme", "--tenant", "b",
                       "--trigger", "manual", "--sort", "duration_desc", "--json")
    assert code == 0 and [r["state"] for r in json.loads(out)] == ["failed", "failed"]
    kw = fake.method_calls("list_runs_across_jobs")[-1][1]
    assert (kw["states"], kw["triggers"], kw["queue"], kw["tenants"]) == (
        ["failed"], ["manual"], "gpu", ["acme", "b"])
    assert kw["late"] and kw["errors"] and kw["sort"] == "duration_desc" and kw["until_ms"] == 0
    assert abs(kw["since_ms"] - (int(time.time() * 1000) - 3_600_000)) < 60_000
    assert not fake.method_calls("list_runs")
    # a job with a filter: across jobs, that job only (by id; a name is looked up)
    code, out, _ = run(fake, "run", "list", "j2", "--state", "failed", "--json")
    assert [r["run_id"] for r in json.loads(out)] == ["j2@6"]
    code, out, err = run(fake, "run", "list", "--limit", "1", "--json")
    assert code == 0 and "--page-token tok" in err and json.loads(out)
    code, out, _ = run(fake, "run", "list", "--limit", "1")
    assert "--page-token tok" in out


@pytest.mark.parametrize("args, says", [
    (("--state", "done"), "invalid choice"),
    (("--since", "yesterday"), "--since"),
    (("--late-ms", "5"), "--late-ms goes with --late"),
    (("j1", "--state", "failed", "--before", "now"), "--before"),
    (("--limit", "0"), "--limit"),
    (("--since", "1h", "--until", "2h"), "--until must be after --since"),
])
def test_run_list_refuses_bad_flags_before_any_call(fake, args, says):
    code, _, err = run(fake, "run", "list", *args)
    assert code == 2 and says in err
    assert not fake.calls


def _attempted_run() -> Run:
    first = Attempt(
        1, fencing_token=11, worker_id="w-a", started_ms=T0, finished_ms=T0 + 1200,
        outcome=AttemptOutcome.FAILED, error="exit code 3; output tail: failing",
        exit_code=3, duration_ms=1200, output_tail="first try\nfailing\n",
    )
    second = Attempt(
        2, fencing_token=12, worker_id="w-b", started_ms=T0 + 5000, finished_ms=T0 + 5300,
        outcome=AttemptOutcome.SUCCEEDED, exit_code=0, duration_ms=300,
        output_tail="second try\nok\n",
    )
    task = TaskInstance(
        "main", state=TaskState.SUCCEEDED, attempt=2, fencing_token=12, worker_id="w-b",
        attempts=(first, second),
    )
    return Run("j1@7", "j1", state=RunState.SUCCEEDED, tasks=(task,))


def test_run_waits_prints_each_reason_with_its_bound_and_json(fake):
    fake.runs["j1@5"] = Run("j1@5", "j1", state=RunState.RUNNING)
    code, out, _ = run(fake, "run", "waits", "j1@5")
    assert code == 0 and out.startswith("run j1@5 is running")
    assert "tenant_concurrency" in out and "max_concurrency of tenant acme = 2 (now 2)" in out
    code, out, _ = run(fake, "run", "waits", "j1@5", "--json")
    data = json.loads(out)
    assert data["state"] == "running" and data["waits"][0]["limit_value"] == 2


def test_run_get_shows_attempts_and_the_latest_output(fake):
    fake.runs["j1@7"] = _attempted_run()
    code, out, _ = run(fake, "run", "get", "j1@7")
    assert code == 0
    table = out[out.index("attempts:"):].splitlines()
    assert table[1].split() == [
        "TASK", "ATTEMPT", "TOKEN", "WORKER", "OUTCOME", "EXIT", "DURATION", "FINISHED", "ERROR"
    ]
    first, second = table[2].split(), table[3].split()
    assert first[:7] == ["main", "1", "11", "w-a", "failed", "3", "1.2s"]
    assert "exit code 3; output tail: failing" in table[2]
    assert second[:7] == ["main", "2", "12", "w-b", "succeeded", "0", "300ms"]
    # Only the latest output by default...
    assert "output of main, attempt 2 (token 12):\n  second try\n  ok" in out
    assert "first try" not in out
    # ...every attempt's with --output.
    code, out, _ = run(fake, "run", "get", "j1@7", "--output")
    assert code == 0
    assert out.index("attempt 1 (token 11):\n  first try\n  failing") < out.index(
        "attempt 2 (token 12):\n  second try"
    )


def test_run_get_json_carries_every_attempt(fake):
    fake.runs["j1@7"] = _attempted_run()
    code, out, _ = run(fake, "run", "get", "j1@7", "--json")
    assert code == 0
    (task,) = json.loads(out)["tasks"]
    assert [a["attempt"] for a in task["attempts"]] == [1, 2]
    assert task["attempts"][0] == {
        "attempt": 1, "fencing_token": 11, "worker_id": "w-a", "started_ms": T0,
        "finished_ms": T0 + 1200, "outcome": "failed",
        "error": "exit code 3; output tail: failing", "exit_code": 3, "duration_ms": 1200,
        "output_tail": "first try\nfailing\n",
    }


def test_dlq(fake):
    code, out, _ = run(fake, "dlq", "list", "--json")
    assert code == 0 and json.loads(out)[0]["task_name"] == "load"
    code, out, _ = run(fake, "dlq", "replay", "j1@5:load", "j2@manual-3:a.b", "--json")
    assert code == 0
    assert json.loads(out) == {
        "replayed": [
            {"run_id": "j1@5", "task_name": "load"},
            {"run_id": "j2@manual-3", "task_name": "a.b"},
        ]
    }
    assert run(fake, "dlq", "replay", "--all", "--reason", "disk freed")[0] == 0
    assert fake.method_calls("replay_dead_letters")[-1][1]["all"] is True
    assert fake.method_calls("replay_dead_letters")[-1][1]["reason"] == "disk freed"
    code, out, _ = run(fake, "dlq", "discard", "j1@5:load", "--reason", "obsolete")
    assert code == 0 and "discarded 1 dead letter(s)" in out and "j1@5:load" in out
    assert fake.method_calls("discard_dead_letters")[-1][1]["reason"] == "obsolete"
    assert run(fake, "dlq", "discard")[0] == 2  # at least one task ref
    for argv in (
        ["dlq", "replay"],
        ["dlq", "replay", "--all", "--tenant", "t"],
        ["dlq", "replay", "nocolon"],
    ):
        code, _, err = run(fake, *argv)
        assert code == 2 and err.count("\n") == 1


# --- errors -> exit codes ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (NotFound("job: none", code=grpc.StatusCode.NOT_FOUND), 1, "gnomon: not found: job: none"),
        (
            InvalidArgument(
                "spec.schedule.cron.timezone: unknown IANA timezone 'Mars/Base'",
                code=grpc.StatusCode.INVALID_ARGUMENT,
            ),
            1,
            "gnomon: invalid argument: "
            "spec.schedule.cron.timezone: unknown IANA timezone 'Mars/Base'",
        ),
        (
            InvalidArgument("no server address given"),
            2,
            "gnomon: invalid argument: no server address given",
        ),
        (
            Conflict("expected_version: stale", code=grpc.StatusCode.FAILED_PRECONDITION),
            1,
            "gnomon: conflict: expected_version: stale",
        ),
        (
            FailedPrecondition("job is paused", code=grpc.StatusCode.FAILED_PRECONDITION),
            1,
            "gnomon: failed precondition: job is paused",
        ),
        (
            ResourceExhausted("too many\nproposals", code=grpc.StatusCode.RESOURCE_EXHAUSTED),
            1,
            "gnomon: resource exhausted: too many proposals",
        ),
        (GnomonError("boom", code=grpc.StatusCode.INTERNAL), 1, "gnomon: internal: boom"),
        (
            GnomonError("denied", code=grpc.StatusCode.PERMISSION_DENIED),
            1,
            "gnomon: permission denied: denied",
        ),
        (
            Unavailable("failed to connect", code=grpc.StatusCode.UNAVAILABLE),
            3,
            f"gnomon: unavailable: failed to connect (servers {DEFAULT}; {HINT})",
        ),
        (
            DeadlineExceeded("slow", code=grpc.StatusCode.DEADLINE_EXCEEDED),
            3,
            f"gnomon: deadline exceeded: slow (servers {DEFAULT}; {HINT})",
        ),
        (UsageError("--limit must be at least 1"), 2, "gnomon: --limit must be at least 1"),
    ],
)
def test_error_mapping(error, code, line):
    assert exit_code_for(error) == code
    assert error_line(error, servers=DEFAULT) == line


def test_server_errors_print_one_line_and_no_traceback(fake):
    fake.fail = Unavailable("no leader", code=grpc.StatusCode.UNAVAILABLE)
    code, out, err = run(fake, "cluster", "status", "-s", "h:1")
    assert code == 3 and out == ""
    assert err == "gnomon: unavailable: no leader (servers h:1)\n"


def test_cluster_status_pins_a_node(fake):
    from gnomon.client import ClusterStatus

    fake._cluster_status = lambda *, server=None, include_digest=False: ClusterStatus(
        node_id="n1", leader_node_id="n1")
    code, out, _ = run(fake, "cluster", "status", "--node", "127.0.0.1:7702", "--json")
    assert code == 0 and json.loads(out)["node_id"] == "n1"
    assert fake.method_calls("cluster_status")[0][1] == {"server": "127.0.0.1:7702",
                                                          "include_digest": False}


LIMITS = ClusterLimits(
    dedupe_capacity=100_000, dedupe_max_age_ms=86_400_000, runs_retained_per_job=20,
    max_dead_letters=100_000, max_attempt_records=10, max_tokens_per_tenant=1_000,
    max_queue_circuits_per_tenant=1_000,
)


def test_cluster_status_shows_limits_version_and_evictions(fake):
    fake._cluster_status = lambda **kw: ClusterStatus(
        node_id="n1", leader_node_id="n1", dead_letters=4, dead_letters_evicted=7,
        limits=LIMITS, limits_version=3,
    )
    code, out, _ = run(fake, "cluster", "status")
    assert code == 0
    head = out.split("\n\n")[0].splitlines()
    lines = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in head)
    assert lines["limits version"] == "3"
    assert lines["dead letters"] == "4 (7 evicted)"
    code, out, _ = run(fake, "cluster", "status", "--json")
    data = json.loads(out)
    assert data["limits_version"] == 3 and data["dead_letters_evicted"] == 7
    assert data["limits"]["runs_retained_per_job"] == 20


def test_cluster_limits_table_and_json(fake):
    fake._cluster_status = lambda **kw: ClusterStatus(
        node_id="n1", limits=LIMITS, limits_version=3
    )
    code, out, _ = run(fake, "cluster", "limits")
    assert code == 0
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[3:]}
    assert rows == {
        "dedupe_capacity": "100000", "dedupe_max_age_ms": "86400000",
        "runs_retained_per_job": "20", "max_dead_letters": "100000",
        "max_attempt_records": "10", "max_tokens_per_tenant": "1000",
        "max_queue_circuits_per_tenant": "1000",
    }
    assert "limits version  3" in out and "(1d00h)" in out
    code, out, _ = run(fake, "cluster", "limits", "--json")
    assert json.loads(out) == {"limits_version": 3, "limits": dict(LIMITS.items())}
    assert not fake.method_calls("set_limits")


def test_cluster_limits_set(fake):
    def set_limits(**kw):
        changed = {k: v for k, v in kw.items() if k in dict(LIMITS.items())}
        return LimitsUpdate(replace(LIMITS, **changed), 4)

    fake._set_limits = set_limits
    code, out, _ = run(
        fake, "cluster", "limits", "--set", "dedupe_capacity=50000",
        "--set", "runs_retained_per_job=5", "--set", "dedupe_max_age_ms=2h",
        "--expected-version", "3", "--json",
    )
    assert code == 0
    assert fake.method_calls("set_limits") == [((), {
        "dedupe_capacity": 50000, "runs_retained_per_job": 5, "dedupe_max_age_ms": 7_200_000,
        "expected_version": 3, "request_id": None,
    })]
    data = json.loads(out)
    assert data["limits_version"] == 4 and data["limits"]["dedupe_capacity"] == 50000
    code, out, _ = run(fake, "cluster", "limits", "--set", "max_attempt_records=3")
    assert code == 0 and out.startswith("set max_attempt_records=3\n")


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("dedup_capacity=5", "--set dedup_capacity: unknown limit (did you mean dedupe_capacity?"),
        ("frobs=5", "--set frobs: unknown limit (limits: dedupe_capacity, "),
        ("dedupe_capacity", "--set dedupe_capacity: expected KEY=VALUE"),
        ("dedupe_capacity=lots", "--set dedupe_capacity: 'lots' is not an integer"),
        ("dedupe_capacity=", "--set dedupe_capacity: no value"),
        ("dedupe_max_age_ms=soon", "--set dedupe_max_age_ms: 'soon' is not a duration"),
    ],
)
def test_cluster_limits_bad_settings_are_usage_errors(fake, setting, message):
    code, _, err = run(fake, "cluster", "limits", "--set", setting)
    assert code == 2 and err.startswith(f"gnomon: {message}"), err
    assert fake.calls == []  # nothing was sent (no client was even made)


def test_cluster_limits_refused_by_the_cluster(fake):
    fake.fail = InvalidArgument(
        "limits.max_dead_letters: must be >= 1, got 0", code=grpc.StatusCode.INVALID_ARGUMENT
    )
    code, _, err = run(fake, "cluster", "limits", "--set", "max_dead_letters=0")
    assert code == 1
    assert err == "gnomon: invalid argument: limits.max_dead_letters: must be >= 1, got 0\n"
    assert run(fake, "cluster", "limits", "--set", "a", "--set", "a=1")[0] == 2
    assert run(fake, "cluster", "limits", "--set", "max_dead_letters=1",
               "--set", "max_dead_letters=2")[0] == 2


# --- --json covers errors -------------------------------------------------------------------


def _json_error(err: str) -> dict:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return json.loads(lines[0])


def test_a_refused_command_with_json_prints_one_json_object_and_keeps_its_exit_code(fake):
    fake.fail = AlreadyExists("spec.name: a job of that name exists in tenant default",
                              code=grpc.StatusCode.ALREADY_EXISTS, reason="NAME_TAKEN")
    code, out, err = run(fake, "--json", "job", "create", "--name", "x", "--cron", "0 3 * * *")
    assert code == 1 and out == ""
    assert _json_error(err) == {
        "code": "ALREADY_EXISTS", "reason": "NAME_TAKEN", "field": "spec.name",
        "message": "gnomon: already exists: spec.name: a job of that name exists in tenant "
                   "default",
        "exit_code": 1}


def test_unavailable_and_usage_errors_with_json(fake):
    fake.fail = Unavailable("no leader", code=grpc.StatusCode.UNAVAILABLE)
    code, _, err = run(fake, "job", "list", "--json")
    assert code == 3 and _json_error(err)["code"] == "UNAVAILABLE"
    fake.fail = None
    code, _, err = run(fake, "--json", "job", "create", "--name", "x")  # no schedule
    assert code == 2
    usage = _json_error(err)
    assert usage["code"] == "USAGE" and usage["exit_code"] == 2 and usage["message"]
    code, _, err = run(fake, "--json", "job", "list", "--no-such-flag")
    assert code == 2 and _json_error(err)["code"] == "USAGE"


def test_cron_flag_takes_every_and_a_timezone_prefix(fake):
    code, _, _ = run(fake, "job", "create", "--name", "e", "--cron", "@every 1h30m")
    assert code == 0
    assert fake.jobs["j1"].spec.schedule == IntervalSchedule(interval_ms=5_400_000)
    code, _, _ = run(fake, "job", "create", "--name", "z", "--cron",
                     "CRON_TZ=Europe/Berlin 0 3 * * *")
    assert code == 0
    assert fake.jobs["j2"].spec.schedule == CronSchedule("0 3 * * *", "Europe/Berlin")
    code, _, _ = run(fake, "job", "preview", "--cron", "TZ=Asia/Tokyo 0 9 * * *",
                     "--tz", "Asia/Tokyo")
    assert code == 0
    assert fake.method_calls("preview_schedule")[-1][1]["schedule"] == CronSchedule(
        "0 9 * * *", "Asia/Tokyo")
    code, _, err = run(fake, "job", "preview", "--cron", "TZ=Asia/Tokyo 0 9 * * *", "--tz", "UTC")
    assert code == 2 and "--tz 'UTC' contradicts the cron's TZ=Asia/Tokyo prefix" in err
    code, _, err = run(fake, "job", "create", "--name", "e2", "--cron", "@every 1h", "--tz",
                       "Europe/Berlin")
    assert code == 2 and "--tz applies to a cron schedule; --cron '@every 1h' is an interval" in err
