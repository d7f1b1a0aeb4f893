"""The ready-made workers (``gnomon worker shell|http|python`` and examples/curl-worker.sh, the
HTTP worker protocol) as subprocesses against real nodes: context in the environment /
headers, cancel kills the command, retry and dead-letter rules."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gnomon.client import (
    AttemptOutcome,
    Client,
    JobSpec,
    OnceSchedule,
    RetryPolicy,
    Run,
    RunState,
    TaskState,
    TLSConfig,
)
from gnomon.node.local.cluster import LocalCluster, stop_process, wait_for
from tests.support.cluster import _port_up

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

FAR_FUTURE_MS = 4_102_444_800_000  # 2100-01-01: jobs here only run when triggered
# The http worker signs its requests with it (Standard Webhooks).
WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"the hooks' shared secret, 32 b").decode()
FAST_RETRY = RetryPolicy(max_attempts=2, initial_backoff_ms=100, max_backoff_ms=200, jitter=-1)


def _env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GNOMON_") and "proxy" not in k.lower()
    }


REPO = Path(__file__).resolve().parents[2]


class WorkerProc:
    def __init__(self, servers: str, kind: str, log: Path, *extra: str) -> None:
        self.log = log
        self._fh = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gnomon.client.cli",
                "--server",
                servers,
                "worker",
                kind,
                "--shutdown-grace",
                "2",
                *extra,
            ],
            stdout=self._fh,
            stderr=subprocess.STDOUT,
            env=_env(),
            cwd=REPO,  # `--module examples.tasks` is imported from the current directory
        )

    def stop(self) -> int:
        code = stop_process(self.proc)
        self._fh.close()
        return code


def _security_flags(cluster: LocalCluster) -> list[str]:
    """--ca and --token-file of the secure cluster (TLS and tokens, as `gnomon dev` runs)."""
    return ["--ca", cluster.client_tls()["ca_file"],
            "--token-file", str(cluster.root / "tls" / "admin.token")]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("workers")
    # Secure like the default `gnomon dev` cluster: the workers must dial with --ca and a token.
    cluster = LocalCluster(root, 3, secure=True, mutual_tls=False, http=True).start()
    workers: list[WorkerProc] = []
    client = None
    try:
        cluster.leader()
        wait_for(lambda: all(_port_up(n.http_addr) for n in cluster.nodes), timeout_s=30,
                 what="every node's HTTP port")
        servers = cluster.servers
        flags = _security_flags(cluster)
        workers.append(
            WorkerProc(
                servers, "shell", root / "shell.log", "--queue", "shell", "--kill-grace", "1",
                *flags,
            )
        )
        secret = root / "webhook.secret"
        secret.write_text(WEBHOOK_SECRET + "\n")
        secret.chmod(0o600)
        workers.append(WorkerProc(servers, "http", root / "http.log", "--queue", "http",
                                  "--signing-secret-file", str(secret), *flags))
        workers.append(WorkerProc(servers, "python", root / "py.log", "--module", "examples.tasks",
                                  *flags))
        client = Client(servers, timeout_s=10, tls=TLSConfig(**cluster.client_tls()),
                        token=cluster.admin_token())
        yield {"servers": servers, "client": client, "root": root, "workers": workers,
               "flags": flags, "cluster": cluster}
        # Stopped by SIGTERM, the workers drain and exit cleanly.
        assert [w.stop() for w in workers] == [0, 0, 0], [
            w.log.read_text()[-3000:] for w in workers
        ]
    finally:
        for w in workers:
            w.stop()
        if client is not None:
            client.close()
        cluster.stop()


def start(env: dict[str, Any], name: str, queue: str, payload: dict[str, Any], **task: Any) -> Run:
    client: Client = env["client"]
    job = client.create_job(
        JobSpec.single(name, OnceSchedule(FAR_FUTURE_MS), queue=queue, payload=payload, **task)
    )
    return client.trigger_job(job.job_id)


def finished(env: dict[str, Any], run: Run, timeout_s: float = 40.0) -> Run:
    return env["client"].wait_run(run.run_id, timeout_s=timeout_s, poll_interval_s=0.1)


def gnomon(env: dict[str, Any], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gnomon.client.cli", "--server", env["servers"], *env["flags"],
         *args],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )


# --- connecting ----------------------------------------------------------------------------


def _worker_exit(env: dict[str, Any], log: Path, *extra: str) -> tuple[int, str]:
    worker = WorkerProc(env["servers"], "shell", log, "--queue", "nobody", *extra)
    try:
        code = worker.proc.wait(timeout=60)
    finally:
        worker.stop()
    return code, log.read_text()


def test_a_worker_without_the_ca_says_so_at_error_and_exits_3_after_its_deadline(env, tmp_path):
    code, log = _worker_exit(env, tmp_path / "w.log", "--connect-timeout", "2")
    assert code == 3, log[-2000:]
    assert " ERROR gnomon.client.worker: " in log, log[-2000:]
    assert "within 2s" in log and "--ca" in log, log[-2000:]


def test_a_worker_with_a_wrong_token_is_refused_at_error_and_exits(env, tmp_path):
    bad = tmp_path / "bad.token"
    bad.write_text("not-a-token\n")
    code, log = _worker_exit(env, tmp_path / "w.log", "--ca", env["flags"][1],
                             "--token-file", str(bad))
    assert code == 1, log[-2000:]
    assert " ERROR gnomon.client.worker: " in log and "UNAUTHENTICATED" in log.upper(), log[-2000:]


# --- shell ---------------------------------------------------------------------------------


def test_shell_task_sees_its_context_in_the_environment(env, tmp_path):
    out = tmp_path / "env.json"
    script = (
        "import json, os;"
        "json.dump({k: v for k, v in os.environ.items() if k.startswith(('GNOMON_', 'MY_'))},"
        f" open({str(out)!r}, 'w'))"
    )
    env["client"].create_job(
        JobSpec.single(
            "shell-env",
            OnceSchedule(FAR_FUTURE_MS),
            queue="shell",
            timeout_ms=30_000,
            payload={"argv": [sys.executable, "-c", script], "env": {"MY_VAR": "x"}},
        )
    )
    # Through the CLI: trigger and wait, exit 0 when the run succeeded.
    proc = gnomon(env, "job", "trigger", "shell-env", "--wait", "--wait-timeout", "40", "--json")
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert run["state"] == "succeeded"
    task = run["tasks"][0]
    assert task["result"]["exit_code"] == 0
    seen = json.loads(out.read_text())
    assert seen["MY_VAR"] == "x"
    assert seen["GNOMON_RUN_ID"] == run["run_id"]
    assert seen["GNOMON_JOB_ID"] == run["job_id"]
    assert seen["GNOMON_TASK_NAME"] == "main"
    assert seen["GNOMON_ATTEMPT"] == "1"
    assert seen["GNOMON_IDEMPOTENCY_KEY"] == f"{run['run_id']}:main"
    assert seen["GNOMON_FENCING_TOKEN"] == str(task["fencing_token"])
    assert seen["GNOMON_SCHEDULED_FOR_MS"] == str(run["scheduled_for_ms"])
    assert int(seen["GNOMON_DEADLINE_MS"]) > run["scheduled_for_ms"]  # timeout_ms was set


def test_cancelled_run_stops_the_subprocess(env, tmp_path):
    pid_file = tmp_path / "pid"
    command = f"echo $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}; exec sleep 120"
    run = start(env, "shell-cancel", "shell", {"command": command})
    pid = int(
        wait_for(
            lambda: pid_file.exists() and pid_file.read_text().strip(),
            timeout_s=30,
            what="the command to write its pid",
        )
    )
    os.kill(pid, 0)  # running

    proc = gnomon(env, "run", "cancel", run.run_id, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["state"] == "cancelled"

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_for(gone, timeout_s=20, what=f"pid {pid} to be killed and reaped")
    main = env["client"].get_run(run.run_id).task("main")
    assert main.state == TaskState.CANCELLED
    assert [a.outcome for a in main.attempts] == [AttemptOutcome.CANCELLED]


def test_timeout_kills_the_whole_process_group(env, tmp_path):
    pids = tmp_path / "pids"
    command = f"sleep 120 & echo $$ $! > {pids}.tmp && mv {pids}.tmp {pids}; wait"
    run = start(
        env,
        "shell-timeout",
        "shell",
        {"command": command},
        timeout_ms=1500,
        retry=RetryPolicy(max_attempts=1),
    )
    shell_pid, child_pid = map(
        int,
        wait_for(
            lambda: pids.exists() and pids.read_text().split(),
            timeout_s=30,
            what="the command to write its pids",
        ),
    )
    run = finished(env, run)
    assert run.state == RunState.FAILED
    # Whichever notices first: the worker ("attempt deadline exceeded") or the leader ("timeout").
    assert any(word in run.task("main").last_error for word in ("deadline", "timeout"))

    def gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # The background child is reaped by init, not by the worker: a zombie counts as gone.
        stat = Path(f"/proc/{pid}/stat")
        return stat.exists() and stat.read_text().rpartition(")")[2].split()[0] == "Z"

    wait_for(lambda: gone(shell_pid) and gone(child_pid), timeout_s=20, what="both processes to die")


def test_shell_exit_codes_retry_or_dead_letter(env):
    retried = start(
        env, "shell-exit-3", "shell", {"command": "echo failing; exit 3"}, retry=FAST_RETRY
    )
    final = start(
        env,
        "shell-exit-final",
        "shell",
        {"command": "exit 3", "retry_on_exit": False},
        retry=FAST_RETRY,
    )
    retried, final = finished(env, retried), finished(env, final)
    assert retried.state == RunState.FAILED
    assert retried.task("main").attempt == 2
    assert "exit code 3; output tail: failing" in retried.task("main").last_error
    assert final.state == RunState.FAILED
    assert final.task("main").attempt == 1
    assert "not retried" in final.task("main").last_error

    # Every attempt is on record: its exit code, output tail, duration, token and worker.
    first, second = retried.task("main").attempts
    assert [a.attempt for a in (first, second)] == [1, 2]
    assert all(a.outcome is AttemptOutcome.FAILED and a.exit_code == 3 for a in (first, second))
    assert all(a.output_tail == "failing\n" for a in (first, second))
    assert second.fencing_token > first.fencing_token
    assert all(a.worker_id and a.duration_ms >= 0 for a in (first, second))
    (only,) = final.task("main").attempts
    assert only.exit_code == 3 and only.output_tail == ""

    # `gnomon run get` shows them; --json carries everything.
    proc = gnomon(env, "run", "get", retried.run_id)
    assert proc.returncode == 0, proc.stderr
    rows = proc.stdout[proc.stdout.index("attempts:"):].splitlines()
    assert rows[1].split()[:6] == ["TASK", "ATTEMPT", "TOKEN", "WORKER", "OUTCOME", "EXIT"]
    assert rows[2].split()[:2] == ["main", "1"] and rows[2].split()[4:6] == ["failed", "3"]
    assert rows[3].split()[:2] == ["main", "2"] and rows[3].split()[4:6] == ["failed", "3"]
    assert "output of main, attempt 2" in proc.stdout
    assert "output of main, attempt 1" not in proc.stdout
    proc = gnomon(env, "run", "get", retried.run_id, "--output")
    assert "output of main, attempt 1" in proc.stdout and "output of main, attempt 2" in proc.stdout
    proc = gnomon(env, "run", "get", retried.run_id, "--json")
    attempts = json.loads(proc.stdout)["tasks"][0]["attempts"]
    assert [(a["outcome"], a["exit_code"], a["output_tail"]) for a in attempts] == [
        ("failed", 3, "failing\n"),
        ("failed", 3, "failing\n"),
    ]


def test_shell_success_records_exit_code_zero_and_the_output(env):
    run = finished(env, start(env, "shell-ok", "shell", {"command": "echo one; echo two >&2"}))
    assert run.state == RunState.SUCCEEDED
    (attempt,) = run.task("main").attempts
    assert attempt.outcome is AttemptOutcome.SUCCEEDED and attempt.exit_code == 0
    assert sorted(attempt.output_tail.split()) == ["one", "two"]
    assert run.task("main").output_tail == attempt.output_tail


# --- http ----------------------------------------------------------------------------------


class _Hooks(http.server.BaseHTTPRequestHandler):
    """/ok -> 200; /flaky -> 503 once, then 200; /bad -> 400. Records every request."""

    requests: list[tuple[str, dict[str, str], bytes]] = []
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.lock:
            self.requests.append((self.path, dict(self.headers), body))
            flaky_seen = sum(1 for p, _, _ in self.requests if p == "/flaky")
        status = {"/ok": 200, "/bad": 400}.get(self.path, 503 if flaky_seen == 1 else 200)
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b"thanks" if status == 200 else b"nope")

    def log_message(self, *args: object) -> None:
        pass

    @classmethod
    def seen(cls, path: str) -> list[dict[str, str]]:
        with cls.lock:
            return [h for p, h, _ in cls.requests if p == path]


@pytest.fixture(scope="module")
def hooks() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hooks)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def test_http_request_carries_idempotency_key_and_fencing_token(env, hooks):
    run = finished(env, start(env, "http-ok", "http", {"url": f"{hooks}/ok", "body": {"x": 1}}))
    assert run.state == RunState.SUCCEEDED
    task = run.task("main")
    (headers,) = _Hooks.seen("/ok")
    assert headers["Idempotency-Key"] == f"{run.run_id}:main" == task.idempotency_key
    assert headers["X-Gnomon-Fencing-Token"] == str(task.fencing_token)
    assert headers["X-Gnomon-Run-Id"] == run.run_id
    assert headers["X-Gnomon-Attempt"] == "1"
    assert json.loads(task.result) == {"status": 200, "body": "thanks"}
    # Signed: HMAC-SHA256 of "<id>.<timestamp>.<body>" with the secret, computed here apart
    # from the worker's code.
    (body,) = [b for p, _, b in _Hooks.requests if p == "/ok"]
    hook = {k.lower(): v for k, v in headers.items()}  # header names are case-insensitive
    assert hook["webhook-id"] == task.idempotency_key
    signed = f"{hook['webhook-id']}.{hook['webhook-timestamp']}.".encode() + body
    key = base64.b64decode(WEBHOOK_SECRET.removeprefix("whsec_"))
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    assert hook["webhook-signature"] == f"v1,{expected}"
    assert abs(time.time() - int(hook["webhook-timestamp"])) < 300


def test_http_5xx_is_retried_and_4xx_dead_lettered(env, hooks):
    flaky = start(env, "http-flaky", "http", {"url": f"{hooks}/flaky"}, retry=FAST_RETRY)
    bad = start(
        env,
        "http-bad",
        "http",
        {"url": f"{hooks}/bad"},
        retry=RetryPolicy(max_attempts=3, initial_backoff_ms=100, jitter=-1),
    )
    flaky, bad = finished(env, flaky), finished(env, bad)

    assert flaky.state == RunState.SUCCEEDED and flaky.task("main").attempt == 2
    # The attempts' output: the request line with the status, then the response body.
    failed, succeeded = flaky.task("main").attempts
    assert failed.outcome is AttemptOutcome.FAILED and succeeded.outcome is AttemptOutcome.SUCCEEDED
    assert failed.output_tail == f"POST {hooks}/flaky -> HTTP 503\nnope\n"
    assert succeeded.output_tail == f"POST {hooks}/flaky -> HTTP 200\nthanks\n"
    assert failed.exit_code is None and succeeded.exit_code is None  # no process
    first, second = _Hooks.seen("/flaky")
    # Same idempotency key on every attempt; a strictly higher fencing token on the retry.
    assert first["Idempotency-Key"] == second["Idempotency-Key"] == f"{flaky.run_id}:main"
    assert int(second["X-Gnomon-Fencing-Token"]) > int(first["X-Gnomon-Fencing-Token"])
    assert (first["X-Gnomon-Attempt"], second["X-Gnomon-Attempt"]) == ("1", "2")

    assert bad.state == RunState.FAILED and bad.task("main").attempt == 1
    assert len(_Hooks.seen("/bad")) == 1
    assert "HTTP 400" in bad.task("main").last_error
    proc = gnomon(env, "dlq", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    assert f"{bad.run_id}:main" in [
        f"{d['run_id']}:{d['task_name']}" for d in json.loads(proc.stdout)
    ]
    # Replayed, it fails again (still 400) and is dead-lettered again.
    proc = gnomon(env, "dlq", "replay", f"{bad.run_id}:main", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"replayed": [{"run_id": bad.run_id, "task_name": "main"}]}
    wait_for(lambda: len(_Hooks.seen("/bad")) == 2, timeout_s=30, what="the replayed request")
    again = finished(env, bad)
    assert again.state == RunState.FAILED


# --- python --------------------------------------------------------------------------------


def test_python_worker_serves_a_modules_tasks(env):
    run = start(env, "py-hello", "examples", {"greeting": "bonjour"}, task_name="hello")
    run = finished(env, run)
    assert run.state == RunState.SUCCEEDED
    assert json.loads(run.task("hello").result) == {"said": "bonjour"}


# --- curl: the HTTP worker protocol ------------------------------------------------------

# Reads the payload on stdin; {"fail": true} exits 3, anything else answers JSON on stdout.
CURL_COMMAND = ('p=$(cat); case "$p" in *fail*) echo broken; exit 3;; esac; '
                'printf \'{"seen": %s, "key": "%s", "attempt": %s}\' '
                '"$p" "$GNOMON_IDEMPOTENCY_KEY" "$GNOMON_ATTEMPT"')


def test_the_curl_worker_runs_tasks_over_http_through_a_follower(env, tmp_path):
    cluster: LocalCluster = env["cluster"]
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes if n is not leader and n.alive())
    ok = start(env, "curl-ok", "curl", {"n": 1})
    bad = start(env, "curl-bad", "curl", {"fail": True}, retry=FAST_RETRY)
    log = tmp_path / "curl.log"
    with open(log, "wb") as fh:
        proc = subprocess.run(
            [str(REPO / "examples" / "curl-worker.sh"), "--queue", "curl", "--max-tasks", "3",
             "--", "sh", "-c", CURL_COMMAND],
            stdout=fh, stderr=subprocess.STDOUT, cwd=tmp_path, timeout=120,
            env={**_env(), "GNOMON_URL": f"https://{follower.http_addr}",  # 307 to the leader
                 "GNOMON_CA": cluster.client_tls()["ca_file"], "GNOMON_WORKER_ID": "curl-1",
                 "GNOMON_TOKEN_FILE": str(cluster.root / "tls" / "admin.token")})
    assert proc.returncode == 0, log.read_text()[-3000:]
    ok, bad = finished(env, ok), finished(env, bad)
    assert ok.state == RunState.SUCCEEDED, log.read_text()[-3000:]
    task = ok.task("main")
    assert json.loads(task.result) == {"seen": {"n": 1}, "key": f"{ok.run_id}:main",
                                       "attempt": 1}
    (attempt,) = task.attempts
    assert attempt.worker_id.endswith("curl-1") and attempt.exit_code == 0
    # Exit 3 is a retryable failure: two attempts (FAST_RETRY), each with its exit code.
    assert bad.state == RunState.FAILED
    assert [(a.outcome, a.exit_code, a.output_tail) for a in bad.task("main").attempts] == [
        (AttemptOutcome.FAILED, 3, "broken\n"), (AttemptOutcome.FAILED, 3, "broken\n")]
    assert "exit 3" in bad.task("main").last_error
