"""The README (and examples/README.md), done as a new user does it: `gnomon dev` on its defaults (secure, the fixed
ports, a fresh data directory) kept running past 150 s, every command of the tour in order
(the shell worker in the background, `job trigger hello --wait` returning 0), the Python
snippets as written, the dashboard URL it prints opened in headless Chromium; then Ctrl-C, a
restart on the data the first run left, and the tour again on `gnomon dev --insecure`.

The commands are read from README.md itself: when the README changes, this test runs what it
says now. `make run` is `gnomon dev` (checked against the Makefile).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.browser import ARGS, CHROMIUM

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
BIN = Path(sys.executable).parent
DEV_PORTS = (7701, 7702, 7703, 7801, 7802, 7803, 7601, 7602, 7603, 7700, 7600)  # + gateway
# The README promises a cluster that stays up; the first-hour bug was a stop at 60 s.
STAYS_UP_S = 150.0


def _section(title: str) -> str:
    start = README.index(f"\n## {title}")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else None]


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def tour_commands() -> list[str]:
    """The tour's shell block: one command per line, continuations joined, comments cut."""
    block = _blocks(_section("A five-minute tour"), "sh")[0]
    joined = re.sub(r"\\\n\s*", "", block)
    lines = [_without_comment(line).strip() for line in joined.splitlines()]
    return [line for line in lines if line]


def _without_comment(line: str) -> str:
    """`line` up to a `#` that starts a shell comment (outside quotes, after a blank)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def python_snippets() -> list[str]:
    """The README's Python blocks of the tour's section: the client, then the worker."""
    return _blocks(_section("A five-minute tour"), "python")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GNOMON_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _busy(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Dev:
    """`gnomon dev` as `make run` starts it, in `cwd`, until stop()."""

    def __init__(self, cwd: Path, *flags: str) -> None:
        busy = [p for p in DEV_PORTS if _busy(p)]
        assert not busy, f"the README's ports {busy} are in use: stop the other gnomon dev"
        self.cwd = cwd
        self.out = open(cwd / "dev.out", "w+")  # noqa: SIM115 - closed in stop()
        self.started = time.monotonic()
        self.proc = subprocess.Popen([str(BIN / "gnomon"), "dev", *flags], cwd=cwd,
                                     stdout=self.out, stderr=subprocess.STDOUT, env=_env(),
                                     start_new_session=True)

    def text(self) -> str:
        return (self.cwd / "dev.out").read_text()

    def wait_running(self) -> str:
        deadline = time.monotonic() + 120
        while "gnomon dev is running" not in self.text():
            assert self.proc.poll() is None, f"gnomon dev exited {self.proc.returncode}:\n" \
                                             f"{self.text()[-3000:]}"
            assert time.monotonic() < deadline, f"not running after 120 s:\n{self.text()}"
            time.sleep(0.2)
        return self.text()

    def stop(self) -> int:
        """Ctrl-C, as the README says."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.out.close()
        return self.proc.returncode


def sh(cwd: Path, command: str, timeout_s: float = 120,
       env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=cwd,
                          env={**_env(), **(env or {})}, capture_output=True, text=True,
                          timeout=timeout_s)


class Background:
    """A tour command that ends in `&`: running while the later commands run."""

    def __init__(self, cwd: Path, command: str, env: dict[str, str] | None = None) -> None:
        self.log = open(cwd / "background.log", "a+")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=cwd,
                                     env={**_env(), **(env or {})},
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        self.log.close()
        return self.proc.returncode


EXAMPLES = (REPO / "examples" / "README.md").read_text()
# Lines of examples/README.md that name ids of someone else's cluster (a job j12, a job etl
# that the examples never create), or a node's own flags: shown, not run.
NOT_RUNNABLE = re.compile(r"\bj12\b|job backfill etl\b|^gnomon-node ")


def example_commands() -> list[str]:
    """Every command of examples/README.md's shell blocks that can run against a fresh dev
    cluster, in order (continuations joined, comments cut)."""
    out = []
    for block in _blocks(EXAMPLES, "sh"):
        joined = re.sub(r"\\\n\s*", "", block)
        for line in joined.splitlines():
            line = _without_comment(line).strip()
            if line and not NOT_RUNNABLE.search(line):
                out.append(line)
    return out


def run_tour(cwd: Path, commands: list[str] | None = None,
             env: dict[str, str] | None = None) -> dict[str, str]:
    """Every tour command (or `commands`) in order; each must exit 0. RUN_ID is the run the
    last `job trigger` printed. Returns each command's stdout."""
    background: list[Background] = []
    outputs: dict[str, str] = {}
    run_id = None
    try:
        for command in tour_commands() if commands is None else commands:
            if command.rstrip().endswith("&"):
                bg = Background(cwd, command.rstrip().removesuffix("&").strip(), env)
                background.append(bg)
                continue
            if "RUN_ID" in command:
                assert run_id, "no run id before a command that names RUN_ID"
                command = command.replace("RUN_ID", run_id)
            done = sh(cwd, command, env=env)
            assert done.returncode == 0, (command, done.returncode, done.stdout[-2000:],
                                          done.stderr[-2000:],
                                          [b.log.name for b in background])
            assert "Traceback" not in done.stderr, (command, done.stderr)
            outputs[command] = done.stdout
            if " trigger " in command:
                found = re.search(r"^started run (\S+)", done.stdout, flags=re.M)
                assert found, (command, done.stdout)
                run_id = found.group(1)
        for bg in background:
            assert bg.proc.poll() is None, "a background command of the tour exited early"
    finally:
        for bg in background:
            bg.stop()
    return outputs


def run_python_snippets(cwd: Path) -> str:
    """The worker snippet in the background (it serves queue "reports" until stopped), the
    client snippet in the foreground: its run is served by that worker."""
    client_code, worker_code = python_snippets()
    (cwd / "readme_worker.py").write_text(worker_code)
    (cwd / "readme_client.py").write_text(client_code)
    worker = Background(cwd, f"{sys.executable} readme_worker.py")
    try:
        done = subprocess.run([sys.executable, "readme_client.py"], cwd=cwd, env=_env(),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (done.stdout, done.stderr[-3000:])
        assert worker.proc.poll() is None, "the README's worker exited"
        return done.stdout
    finally:
        worker.stop()


def open_dashboard(url: str, expect: str) -> None:
    if not shutil.which(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            # The dev CA is the cluster's own: the user accepts it once (the README says so).
            context = browser.new_context(ignore_https_errors=True)
            page = context.new_page()
            page.set_default_timeout(30_000)
            page.goto(url)  # the cluster page, authenticated by the token in the URL
            page.get_by_text("n1", exact=True).first.wait_for()
            page.evaluate("location.hash = '#/jobs'")
            page.get_by_text(expect, exact=True).first.wait_for()
            shot = REPO / ".gnomon" / "test-output" / "readme-dashboard.png"
            shot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()


@pytest.fixture
def fresh(tmp_path) -> Iterator[Path]:
    yield tmp_path


def test_make_run_is_gnomon_dev():
    recipe = re.search(r"^run:.*\n\t(.+)$", (REPO / "Makefile").read_text(), flags=re.M)
    assert recipe and recipe.group(1).strip() == "$(BIN)/gnomon dev", recipe


def test_the_readme_on_the_secure_default_cluster(fresh):
    dev = Dev(fresh)
    try:
        started = dev.wait_running()
        url = re.search(r"Dashboard: (https://127\.0\.0\.1:7601/#token=\S+)", started)
        assert url, started
        outputs = run_tour(fresh)
        assert "hello" in outputs["gnomon job trigger hello --wait"]
        printed = run_python_snippets(fresh)
        assert "{'main': b'{\"rows\":42}'}" in printed, printed
        open_dashboard(url.group(1), "hello-every-5s")
        # The same dashboard through the gateway the dev cluster runs in front of the nodes.
        assert "Gateway: 127.0.0.1:7700 (gRPC) and https://127.0.0.1:7600/" in started, started
        open_dashboard(url.group(1).replace(":7601/", ":7600/"), "hello-every-5s")
        # examples/README.md on the same cluster, from a folder where `examples/` is the
        # repository's (its commands name examples/*.yaml and `--module examples.tasks`).
        here = fresh / "examples-run"
        here.mkdir()
        (here / "examples").symlink_to(REPO / "examples")
        dev_tls = {"GNOMON_CA": str(fresh / ".gnomon" / "tls" / "ca.crt"),
                   "GNOMON_TOKEN_FILE": str(fresh / ".gnomon" / "tls" / "admin.token")}
        run_tour(here, example_commands(), env=dev_tls)
        # Stays up: the bug this test exists for stopped the cluster 60 s after start.
        while time.monotonic() - dev.started < STAYS_UP_S:
            assert dev.proc.poll() is None, dev.text()[-3000:]
            assert sh(fresh, "gnomon cluster status").returncode == 0
            time.sleep(5)  # a soak's pace, not synchronisation: the state is re-checked
        assert dev.proc.poll() is None, dev.text()[-3000:]
        assert "no leader" not in dev.text()
    finally:
        code = dev.stop()
    assert code == 0, dev.text()[-3000:]
    assert not [p for p in DEV_PORTS if _busy(p)], "ports still listening after Ctrl-C"

    # A restart on the data the first run left: the same jobs, runs served again.
    again = Dev(fresh)
    try:
        text = again.wait_running()
        assert "resuming data in .gnomon/" in text, text
        listed = sh(fresh, "gnomon job list")
        assert listed.returncode == 0 and "nightly-report" in listed.stdout, listed
        done = sh(fresh, "gnomon job trigger etl-every-30s --wait")
        assert done.returncode == 0, (done.stdout, done.stderr)
    finally:
        assert again.stop() == 0, again.text()[-3000:]


def test_the_readme_tour_on_an_insecure_cluster(fresh):
    # The TLS files of an earlier secure run stay beside it; the CLI must not use them.
    (fresh / ".gnomon" / "tls").mkdir(parents=True)
    (fresh / ".gnomon" / "tls" / "ca.crt").write_text("not this cluster's CA")
    (fresh / ".gnomon" / "tls" / "admin.token").write_text("stale\n")
    dev = Dev(fresh, "--insecure")
    try:
        text = dev.wait_running()
        assert "Dashboard: http://127.0.0.1:7601/" in text, text
        run_tour(fresh)
    finally:
        assert dev.stop() == 0, dev.text()[-3000:]
