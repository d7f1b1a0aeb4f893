"""The ``gnomon`` command line against real nodes: every job command with ``--json``, and bad
input refused on one line with a useful exit code and no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gnomon.node.local.cluster import free_ports
from tests.support.cluster import module_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CYCLIC = """
name: cyclic
schedule: {cron: "0 0 * * *"}
tasks:
  - {name: a, depends_on: [b]}
  - {name: b, depends_on: [a]}
"""

DAG = """
name: dag
schedule:
  cron: "0 3 * * *"
  timezone: Europe/Berlin
defaults: {queue: etl, timeout_ms: 1m}
tasks:
  - name: extract
    payload: {source: orders}
  - {name: left, depends_on: [extract]}
  - {name: right, depends_on: [extract]}
  - {name: load, depends_on: [left, right], retry: {max_attempts: 5}}
"""


def cli_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GNOMON_")}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    with module_cluster(tmp_path_factory.mktemp("cli")) as cluster:
        yield cluster.servers


def gnomon(servers: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gnomon.client.cli", "--server", servers, *args],
        capture_output=True,
        text=True,
        input=stdin,
        env=cli_env(),
        timeout=60,
    )


def ok_json(servers: str, *args: str, stdin: str | None = None):
    proc = gnomon(servers, *args, "--json", stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def assert_one_line_error(proc: subprocess.CompletedProcess, code: int, prefix: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    assert proc.stderr.startswith(prefix), proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_job_lifecycle_with_json(servers):
    job = ok_json(
        servers,
        "job",
        "create",
        "--name",
        "every5",
        "--cron",
        "* * * * * */5",
        "--cron-dialect",
        "seconds_last",
        "--queue",
        "q1",
        "--payload-json",
        '{"n": 1}',
        "--timeout-ms",
        "30s",
        "--max-attempts",
        "4",
    )
    job_id = job["job_id"]
    assert job["name"] == "every5" and job["version"] >= 1 and not job["paused"]
    assert job["next_fire_ms"] > 0
    assert job["spec"]["schedule"] == {"cron": "* * * * * */5", "timezone": "UTC",
                                       "dialect": "seconds_last"}
    task = job["spec"]["tasks"][0]
    assert task["queue"] == "q1" and task["payload"] == {"n": 1} and task["timeout_ms"] == 30_000
    assert task["retry"]["max_attempts"] == 4

    assert job_id in [j["job_id"] for j in ok_json(servers, "job", "list")]
    assert ok_json(servers, "job", "get", "every5")["job_id"] == job_id
    assert ok_json(servers, "job", "get", job_id)["name"] == "every5"

    paused = ok_json(servers, "job", "pause", "every5")
    assert paused["paused"] is True and paused["version"] > job["version"]
    resumed = ok_json(servers, "job", "resume", job_id)
    assert resumed["paused"] is False and resumed["next_fire_ms"] > 0

    run = ok_json(servers, "job", "trigger", "every5")
    assert run["job_id"] == job_id and run["trigger"] == "manual"
    assert run["tasks"][0]["idempotency_key"] == f"{run['run_id']}:main"
    assert ok_json(servers, "run", "get", run["run_id"])["run_id"] == run["run_id"]
    assert run["run_id"] in [r["run_id"] for r in ok_json(servers, "run", "list", job_id)]
    assert ok_json(servers, "run", "cancel", run["run_id"])["state"] == "cancelled"

    assert ok_json(servers, "job", "delete", "every5") == {
        "deleted": True,
        "cancel_running": False,
        "name": "every5",
    }
    assert_one_line_error(gnomon(servers, "job", "get", job_id), 1, "gnomon: not found: ")


def test_a_deleted_jobs_runs_are_listed_by_its_id(servers):
    # Nobody serves this queue: the run stays queued until the delete cancels it.
    job = ok_json(
        servers, "job", "create", "--name", "orphan", "--at", "2099-01-01T00:00:00Z",
        "--queue", "nobody-serves-this",
    )
    run = ok_json(servers, "job", "trigger", "orphan")
    proc = gnomon(servers, "job", "delete", "orphan", "--cancel-running")
    assert proc.returncode == 0, proc.stderr
    assert "queued and running tasks are cancelled" in proc.stdout
    runs = ok_json(servers, "run", "list", job["job_id"])
    assert [(r["run_id"], r["state"]) for r in runs] == [(run["run_id"], "cancelled")]
    assert runs[0]["tasks"][0]["state"] == "cancelled"
    assert ok_json(servers, "run", "get", run["run_id"])["state"] == "cancelled"
    # By name the job is gone (the name may be a new job's by now); the message says what to do.
    proc = gnomon(servers, "run", "list", "orphan")
    assert_one_line_error(proc, 1, "gnomon: not found: ")
    assert "list its runs by job id: gnomon run list JOB_ID" in proc.stderr


def test_cluster_limits_show_and_set(servers):
    before = ok_json(servers, "cluster", "limits")
    assert before["limits_version"] >= 1  # the first leader set them from its config
    assert sorted(before["limits"]) == sorted(
        ["dedupe_capacity", "dedupe_max_age_ms", "runs_retained_per_job", "max_dead_letters",
         "max_attempt_records", "max_tokens_per_tenant", "max_queue_circuits_per_tenant"]
    )
    assert all(isinstance(v, int) for v in before["limits"].values())
    proc = gnomon(servers, "cluster", "limits")
    assert proc.returncode == 0
    assert f"limits version  {before['limits_version']}" in proc.stdout
    assert "runs_retained_per_job" in proc.stdout and "MEANING" in proc.stdout

    after = ok_json(
        servers, "cluster", "limits", "--set", "dedupe_capacity=50000",
        "--set", "runs_retained_per_job=5",
    )
    assert after["limits_version"] == before["limits_version"] + 1
    assert after["limits"] == before["limits"] | {"dedupe_capacity": 50000,
                                                  "runs_retained_per_job": 5}
    status = ok_json(servers, "cluster", "status")
    assert status["limits_version"] == after["limits_version"]
    assert status["limits"] == after["limits"] and status["dead_letters_evicted"] == 0
    proc = gnomon(servers, "cluster", "status")
    assert f"limits version  {after['limits_version']}" in proc.stdout
    assert "(0 evicted)" in proc.stdout

    # Refused by the cluster (names the limit), a stale version, and a usage error: no change.
    proc = gnomon(servers, "cluster", "limits", "--set", "max_dead_letters=0")
    assert_one_line_error(proc, 1, "gnomon: invalid argument: limits.max_dead_letters")
    stale = gnomon(
        servers, "cluster", "limits", "--set", "max_attempt_records=3",
        "--expected-version", str(before["limits_version"]),
    )
    assert_one_line_error(stale, 1, "gnomon: conflict: expected_version")
    proc = gnomon(servers, "cluster", "limits", "--set", "dedupe_capacty=1")
    assert_one_line_error(proc, 2, "gnomon: --set dedupe_capacty: unknown limit")
    assert ok_json(servers, "cluster", "limits") == after


def test_human_output(servers):
    gnomon(servers, "job", "create", "--name", "human", "--interval", "1h", "--paused")
    proc = gnomon(servers, "job", "list")
    assert proc.returncode == 0
    header, *rows = proc.stdout.splitlines()
    assert header.split()[:3] == ["ID", "TENANT", "NAME"]
    assert any("human" in r and "every 1h00m" in r and "paused" in r for r in rows)
    proc = gnomon(servers, "cluster", "status")
    assert proc.returncode == 0 and "leader" in proc.stdout
    status = ok_json(servers, "cluster", "status")
    assert len(status["nodes"]) == 3 and status["leader_node_id"]
    assert sorted(n["role"] for n in status["nodes"]) == ["follower", "follower", "leader"]
    # The answering node saw the leader it knows now come in (its record of changes).
    assert any(c["leader_node_id"] == status["leader_node_id"] for c in status["leader_changes"])
    assert "leader changes seen by" in proc.stdout


def test_dag_file_create_and_update(servers, tmp_path):
    path = tmp_path / "dag.yaml"
    path.write_text(DAG)
    job = ok_json(servers, "job", "create", "-f", str(path))
    tasks = {t["name"]: t for t in job["spec"]["tasks"]}
    assert tasks["load"]["depends_on"] == ["left", "right"]
    assert tasks["left"]["queue"] == "etl" and tasks["load"]["retry"]["max_attempts"] == 5
    # Creating it again: refused, unless --if-not-exists.
    assert_one_line_error(
        gnomon(servers, "job", "create", "-f", str(path)), 1, "gnomon: already exists: "
    )
    again = ok_json(servers, "job", "create", "-f", str(path), "--if-not-exists")
    assert again["job_id"] == job["job_id"] and again["version"] == job["version"]
    # Flags change only what they name; a DAG's tasks need the file.
    updated = ok_json(servers, "job", "update", "dag", "--cron", "0 4 * * *", "--tz", "UTC")
    assert updated["version"] == job["version"] + 1
    assert updated["spec"]["schedule"] == {"cron": "0 4 * * *", "timezone": "UTC"}
    assert updated["spec"]["tasks"] == job["spec"]["tasks"]
    assert_one_line_error(
        gnomon(servers, "job", "update", "dag", "--queue", "x"), 2, "gnomon: job "
    )
    # A stale expected version is a conflict and changes nothing.
    stale = gnomon(servers, "job", "update", "-f", str(path), "--expected-version", "1")
    assert_one_line_error(stale, 1, "gnomon: conflict: ")
    # The JSON form reads back as a spec file (stdin).
    spec_json = json.dumps(updated["spec"] | {"priority": 9})
    assert ok_json(servers, "job", "update", "-f", "-", stdin=spec_json)["spec"]["priority"] == 9


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (
            ["--cron", "0 0 * * *", "--tz", "Mars/Base"],
            "spec.schedule.cron.timezone: unknown IANA timezone 'Mars/Base'",
        ),
        (["--cron", "0 0 30 2 *"], "spec.schedule.cron.expression: '0 0 30 2 *' never fires"),
        (["--cron", "not a cron"], "spec.schedule.cron.expression"),
    ],
    ids=["timezone", "impossible-cron", "garbage-cron"],
)
def test_bad_schedules_are_refused_on_one_line(servers, argv, needle):
    proc = gnomon(servers, "job", "create", "--name", "bad", *argv)
    assert_one_line_error(proc, 1, "gnomon: invalid argument: ")
    assert needle in proc.stderr


def test_cyclic_dag_file_is_refused(servers, tmp_path):
    path = tmp_path / "cyclic.yaml"
    path.write_text(CYCLIC)
    proc = gnomon(servers, "job", "create", "-f", str(path))
    assert_one_line_error(proc, 1, "gnomon: invalid argument: ")
    assert "cycle" in proc.stderr
    assert "cyclic" not in [j["name"] for j in ok_json(servers, "job", "list")]


def test_usage_errors_send_nothing(servers, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nschedule: {cron: '@daily'}\ntasks: [{name: a, dependson: [b]}]\n")
    proc = gnomon(servers, "job", "create", "-f", str(bad))
    assert_one_line_error(proc, 2, f"gnomon: {bad}: spec.tasks[0].dependson: unknown key")
    assert_one_line_error(gnomon(servers, "job", "frob"), 2, "gnomon job: error: ")


def test_no_cluster_is_unavailable():
    (port,) = free_ports(1)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gnomon.client.cli",
            "--server",
            f"127.0.0.1:{port}",
            "--timeout",
            "1",
            "job",
            "list",
        ],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
    )
    assert_one_line_error(proc, 3, "gnomon: unavailable: ")
    assert f"(servers 127.0.0.1:{port})" in proc.stderr


def test_console_scripts_are_installed_and_say_the_distributions_version():
    """The version, read through importlib.metadata: the CLI's is gnomon-client's, the node's
    gnomon's, and the two are one (tests/unit/test_packaging.py); it was written out in four
    places; gnomon-node had no --version."""
    from importlib.metadata import version

    assert version("gnomon-client") == version("gnomon")
    for name, distribution in (("gnomon", "gnomon-client"), ("gnomon-node", "gnomon")):
        script = os.path.join(os.path.dirname(sys.executable), name)
        if not os.path.exists(script):
            pytest.skip(f"{name} console script not installed in this environment")
        proc = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and proc.stdout.strip() == f"{name} {version(distribution)}"


def _tls_to_a_plaintext_port(servers: str, tmp_path, *extra: str) -> subprocess.CompletedProcess:
    from gnomon.node.security.certificates import ensure_cluster_files

    ca = ensure_cluster_files(tmp_path / "tls", {"n1": ["127.0.0.1"]})["n1"].ca
    return gnomon(servers, "--ca", str(ca), "--timeout", "2", *extra, "cluster", "status")


def test_a_failed_tls_handshake_is_one_error_line_not_grpc_noise(servers, tmp_path):
    """A command speaking TLS to a plaintext port printed ~20 lines of C-core INFO
    ("Handshake failed ... WRONG_VERSION_NUMBER") around its one error line."""
    assert_one_line_error(_tls_to_a_plaintext_port(servers, tmp_path), 3, "gnomon: unavailable")


def test_verbose_shows_grpcs_own_lines(servers, tmp_path):
    proc = _tls_to_a_plaintext_port(servers, tmp_path, "--verbose")
    assert proc.returncode == 3 and "Handshake failed" in proc.stderr, proc.stderr[-2000:]
