"""The ready-made workers' task functions (no cluster) and the Worker's catch-all routing."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gnomon.client import NonRetryableError, TaskContext, TaskDefinition, Worker, task
from gnomon.client.cli.spec import UsageError
from gnomon.client.cli.workers import load_task_modules, worker_tasks
from gnomon.client.ready_workers.http import RequestFailed, RequestRejected, http_task, send_request
from gnomon.client.ready_workers.shell import (
    BadPayload,
    CommandFailed,
    CommandFailedFinal,
    run_command,
    shell_task,
)
from gnomon.client.testing import make_context, run_task_async
from tests.support.fakes import FakeWorkerService, assign, start_server

pytestmark = pytest.mark.timeout(60)

PY = sys.executable


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def _until(predicate, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s}s waiting for {what}"
        await asyncio.sleep(0.02)


# --- shell ---------------------------------------------------------------------------------


async def test_shell_success_env_and_output(tmp_path):
    script = (
        "import json, os, sys;"
        "print('hello out'); print('hello err', file=sys.stderr);"
        "json.dump({k: v for k, v in os.environ.items() if k.startswith(('GNOMON_', 'EXTRA'))},"
        f" open({str(tmp_path / 'env.json')!r}, 'w'))"
    )
    result = await run_task_async(
        shell_task("shell", base_env={"PATH": os.environ["PATH"]}),
        payload={
            "argv": [PY, "-c", script],
            "env": {"EXTRA": "1", "GNOMON_RUN_ID": "spoofed"},
            "cwd": str(tmp_path),
        },
        run_id="j3@1000",
        task_name="backup",
        attempt=2,
        fencing_token=17,
        deadline_ms=5000,
    )
    assert result["exit_code"] == 0
    assert "hello out" in result["output_tail"] and "hello err" in result["output_tail"]
    env = json.loads((tmp_path / "env.json").read_text())
    assert env["EXTRA"] == "1"
    assert env["GNOMON_RUN_ID"] == "j3@1000"  # the context wins over the payload's env
    assert env["GNOMON_JOB_ID"] == "j3"
    assert env["GNOMON_TASK_NAME"] == "backup"
    assert env["GNOMON_ATTEMPT"] == "2"
    assert env["GNOMON_SCHEDULED_FOR_MS"] == "1000"
    assert env["GNOMON_IDEMPOTENCY_KEY"] == "j3@1000:backup"
    assert env["GNOMON_FENCING_TOKEN"] == "17"
    assert env["GNOMON_DEADLINE_MS"] == "5000"


@pytest.mark.parametrize(
    ("payload", "error", "text"),
    [
        ({"command": "echo oops; exit 3"}, CommandFailed, "exit code 3; output tail: oops"),
        (
            {"command": "exit 3", "retry_on_exit": False},
            CommandFailedFinal,
            "exit code 3 (not retried)",
        ),
        ({"command": "exit 64", "fatal_exit_codes": [64]}, CommandFailedFinal, "exit code 64"),
        ({"command": "kill -9 $$"}, CommandFailed, "killed by SIGKILL"),
        (
            {"argv": ["/nonexistent/binary"]},
            CommandFailedFinal,
            "cannot start '/nonexistent/binary'",
        ),
        ({"argv": ["true"], "cwd": "/nonexistent/dir"}, CommandFailedFinal, "cannot start"),
        ({"argv": "echo hi"}, BadPayload, "payload.argv"),
        ({"argv": ["a"], "command": "b"}, BadPayload, "exactly one of argv"),
        ({"argv": ["a"], "shell": True}, BadPayload, "payload.shell: unknown key"),
        ({"argv": ["a"], "env": {"A": 1}}, BadPayload, "payload.env"),
    ],
)
async def test_shell_failures(payload, error, text):
    with pytest.raises(error) as err:
        await run_task_async(shell_task("shell"), payload=payload)
    assert text in str(err.value)
    # Dead-letter or retry: what the Worker reports follows the class.
    assert isinstance(err.value, NonRetryableError) == (error is not CommandFailed)


@pytest.mark.parametrize(
    ("command", "code"),
    [("echo fine", 0), ("echo failing; exit 3", 3), ("echo dying; kill -9 $$", -9)],
)
async def test_shell_records_the_exit_code_and_output_on_the_context(command, code):
    ctx = make_context(payload={"command": command})
    assert ctx.exit_code is None
    try:
        await run_command(ctx, base_env=dict(os.environ))
    except CommandFailed:
        assert code != 0
    # The Worker reports both with the Complete or Fail (Attempt.exit_code / output_tail).
    assert ctx.exit_code == code
    assert command.split(";")[0].removeprefix("echo ") in ctx.output_tail()


async def test_shell_non_json_payload_is_bad():
    with pytest.raises(BadPayload, match="not JSON"):
        await run_command(make_context(payload=b"{"), base_env={})


async def test_cancel_kills_the_process_group(tmp_path):
    pids = tmp_path / "pids"
    # A shell that starts a child and waits: both must die, the child ignoring nothing.
    cmd = f"sleep 60 & echo $$ $! > {pids}.tmp; mv {pids}.tmp {pids}; wait"
    ctx = make_context(payload={"command": cmd})
    job = asyncio.create_task(run_command(ctx, kill_grace_s=5.0, base_env=dict(os.environ)))
    await _until(pids.exists, "the shell to write its pids")
    shell_pid, child_pid = map(int, pids.read_text().split())
    assert _alive(shell_pid) and _alive(child_pid)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    assert not _alive(shell_pid)  # reaped by the worker
    assert ctx.exit_code == -15  # SIGTERM; reported if the attempt still reports (a timeout)
    # The child is not ours to reap (init does), so wait for it to be gone or a zombie.
    await _until(
        lambda: not _alive(child_pid) or _zombie(child_pid), f"child {child_pid} to be gone"
    )


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


async def test_sigterm_ignored_then_sigkill_after_grace(tmp_path):
    ready = tmp_path / "ready"
    script = (
        "import signal, time, pathlib;"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        f"pathlib.Path({str(ready)!r}).write_text('x');"
        "time.sleep(60)"
    )
    ctx = make_context(payload={"argv": [PY, "-c", script]})
    job = asyncio.create_task(run_command(ctx, kill_grace_s=0.3, base_env=dict(os.environ)))
    await _until(ready.exists, "the script to be ready")
    started = time.monotonic()
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    assert time.monotonic() - started >= 0.3


# --- http ----------------------------------------------------------------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    requests: list[tuple[str, dict[str, str], bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.requests.append((self.path, dict(self.headers), body))
        status = int(self.path.strip("/").split("/")[0] or 200)
        self.send_response(status)
        if status in (301, 302):
            self.send_header("Location", "/200")
        self.end_headers()
        self.wfile.write(f"answer {status}".encode())

    do_GET = do_POST  # noqa: N815

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Recorder.requests = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def _ctx(payload, **kw) -> TaskContext:
    return make_context(
        payload=payload, run_id="j4@2000", task_name="notify", fencing_token=9, attempt=2, **kw
    )


def test_http_success_carries_the_context(server):
    ctx = _ctx(
        {
            "url": f"{server}/200",
            "body": {"a": 1},
            "headers": {"Authorization": "Bearer x", "idempotency-key": "spoofed"},
        }
    )
    result = send_request(ctx)
    assert result == {"status": 200, "body": "answer 200"}
    assert ctx.output_tail() == f"POST {server}/200 -> HTTP 200\nanswer 200\n"
    ((path, headers, body),) = _Recorder.requests
    assert path == "/200" and json.loads(body) == {"a": 1}
    assert headers["Idempotency-Key"] == "j4@2000:notify"
    assert "spoofed" not in headers.values()
    assert headers["X-Gnomon-Fencing-Token"] == "9"
    assert headers["X-Gnomon-Run-Id"] == "j4@2000"
    assert headers["X-Gnomon-Attempt"] == "2"
    assert headers["Authorization"] == "Bearer x"
    assert headers["Content-Type"] == "application/json"


def test_http_default_body_is_the_context_and_text_bodies(server):
    send_request(_ctx({"url": f"{server}/201"}))
    send_request(_ctx({"url": f"{server}/200", "body": "plain"}))
    (_, _, first), (_, headers, second) = _Recorder.requests
    assert json.loads(first)["idempotency_key"] == "j4@2000:notify"
    assert second == b"plain" and headers["Content-Type"].startswith("text/plain")


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (500, RequestFailed),
        (503, RequestFailed),
        (429, RequestFailed),
        (408, RequestFailed),
        (400, RequestRejected),
        (404, RequestRejected),
        (302, RequestRejected),
    ],
)
def test_http_status_classes(server, status, error):
    ctx = _ctx({"url": f"{server}/{status}"})
    with pytest.raises(error, match=f"HTTP {status}: answer {status}"):
        send_request(ctx)
    assert len(_Recorder.requests) == 1  # a redirect is not followed
    # The failed attempt's output: the status line and the response body.
    assert ctx.output_tail() == f"POST {server}/{status} -> HTTP {status}\nanswer {status}\n"


def test_http_connection_refused_is_retryable():
    from tests.support.fakes import closed_address

    ctx = _ctx({"url": f"http://{closed_address()}/x"})
    with pytest.raises(RequestFailed, match="refused"):
        send_request(ctx)
    assert "refused" in ctx.output_tail() and ctx.exit_code is None


@pytest.mark.parametrize(
    ("payload", "text"),
    [
        ({"url": "file:///etc/passwd"}, "http:// or https://"),
        ({}, "payload.url"),
        ({"url": "http://x", "timeout_s": 0}, "timeout_s"),
        ({"url": "http://x", "verb": "PUT"}, "unknown key"),
    ],
)
def test_http_bad_payloads(payload, text):
    with pytest.raises(BadPayload, match=text):
        send_request(_ctx(payload))


def test_http_task_is_a_catch_all():
    definition = http_task("hooks")
    assert (definition.name, definition.queue, definition.is_async) == ("*", "hooks", False)


# --- the Worker routes any task name to a catch-all -------------------------------------------


async def test_worker_catch_all_and_specific_tasks():
    svc = FakeWorkerService()
    server, address = await start_server(svc)

    @task(name="special", queue="q")
    async def special(ctx: TaskContext) -> str:
        return "special"

    async def anything(ctx: TaskContext) -> str:
        return f"caught {ctx.task_name}"

    worker = Worker(
        address,
        tasks=[special, TaskDefinition("*", "q", anything)],
        shutdown_grace_s=2.0,
        reconnect_initial_s=0.01,
    )
    try:
        async with worker:
            await svc.expect("credits")
            svc.streams[0].send(assign=assign(1, task_name="whatever", queue="q"))
            _, done = await svc.expect("complete", skip=("heartbeat", "hello", "credits"))
            assert done.result == b"caught whatever"
            svc.streams[0].send(assign=assign(2, task_name="special", queue="q"))
            _, done = await svc.expect("complete", skip=("heartbeat", "hello", "credits"))
            assert done.result == b"special"
    finally:
        await server.stop(None)


async def test_shell_worker_reports_exit_code_output_and_duration():
    svc = FakeWorkerService()
    server, address = await start_server(svc)
    worker = Worker(address, tasks=[shell_task("sh")], shutdown_grace_s=2.0)
    skip = ("heartbeat", "hello", "credits")
    try:
        async with worker:
            await svc.expect("credits")
            payload = json.dumps({"command": "echo failing; exit 3"}).encode()
            svc.streams[0].send(assign=assign(1, queue="sh", payload=payload))
            _, fail = await svc.expect("fail", skip=skip)
            assert fail.retryable and fail.exit_code == 3
            # The command's output, not a traceback of the worker's own exception.
            assert fail.output_tail == "failing\n"
            assert fail.error.startswith("CommandFailed: exit code 3")
            payload = json.dumps({"argv": ["echo", "fine"]}).encode()
            svc.streams[0].send(assign=assign(2, queue="sh", payload=payload))
            _, done = await svc.expect("complete", skip=skip)
            assert done.HasField("exit_code") and done.exit_code == 0
            assert done.output_tail == "fine\n" and done.duration_ms >= 0
    finally:
        await server.stop(None)


def test_catch_all_name_is_only_star():
    with pytest.raises(ValueError):
        TaskDefinition("a*", "q", lambda ctx: None)


# --- building the workers --------------------------------------------------------------------


def test_python_worker_loads_task_modules():
    tasks = load_task_modules(["examples.tasks"])
    assert {t.name for t in tasks} == {
        "hello",
        "extract",
        "transform-users",
        "transform-orders",
        "load",
        "always-fails",
    }
    with pytest.raises(UsageError, match="cannot import 'no_such_module_xyz': ModuleNotFoundError"):
        load_task_modules(["no_such_module_xyz"])
    with pytest.raises(UsageError, match="defines no @task functions"):
        load_task_modules(["json"])
    with pytest.raises(UsageError, match="are not in --queue"):
        worker_tasks("python", queues=["other"], modules=["examples.tasks"])


def test_shell_and_http_need_a_queue():
    with pytest.raises(UsageError, match="at least one --queue"):
        worker_tasks("shell", queues=[])
    tasks = worker_tasks("shell", queues=["a", "b"])
    assert [(t.name, t.queue) for t in tasks] == [("*", "a"), ("*", "b")]


def test_an_http_worker_with_an_unusable_signing_secret_is_a_usage_error(tmp_path):
    short = tmp_path / "short.secret"
    short.write_text("whsec_c2hvcnQ=\n")
    with pytest.raises(UsageError, match=r"^--signing-secret-file: .* at least 24"):
        worker_tasks("http", queues=["q"], signing_secret_file=str(short))
