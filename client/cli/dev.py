"""``gnomon dev``: a local cluster (``python -m gnomon.node.local.dev`` in a subprocess), a demo worker
in this process and a few example jobs, until Ctrl-C / SIGTERM (or ``--headless-seconds``).

Re-running it on the same data directory resumes: existing example jobs are kept. Example jobs
are paused when ``gnomon dev`` stops and resumed when it starts again, so a cluster that was off
for a day does not catch up thousands of demo slots.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

from .._client import AsyncClient
from .._errors import AlreadyExists, GnomonError, NotFound
from .._models import RunState
from .._transport import TLSConfig
from ..worker.context import TaskContext
from ..worker.task import TaskDefinition, task
from ..worker.worker import Worker
from .render import fmt_time, table
from .spec import spec_from_data

__all__ = [
    "DEFAULT_SERVERS",
    "DEMO_QUEUE",
    "DEV_GRPC_PORTS",
    "DEV_RAFT_PORTS",
    "EXAMPLE_JOBS",
    "busy_ports",
    "demo_tasks",
    "run_dev",
]

# Equal to gnomon.node.local.dev's defaults (the client never imports the node).
DEV_GRPC_PORTS = (7701, 7702, 7703)
DEV_RAFT_PORTS = (7801, 7802, 7803)
# gnomon.node.local.dev.HTTP_PORT_OFFSET: each node's HTTP API and dashboard is at its gRPC port - 100.
DEV_HTTP_PORT_OFFSET = -100
# gnomon.node.local.dev.GATEWAY_PORT_OFFSET: the gateway's gRPC port is the first node's - 1
# (7700); its HTTP port 100 below that (7600).
DEV_GATEWAY_PORT_OFFSET = -1
DEFAULT_SERVERS = ",".join(f"127.0.0.1:{p}" for p in DEV_GRPC_PORTS)
DEV_DATA_DIR = ".gnomon"  # `gnomon dev --data-dir`'s default, beside which the CLI finds keys
DEMO_QUEUE = "demo"
# The local cluster, run as `python -m` (the server distribution's: server_parts.py).
DEV_CLUSTER_MODULE = "gnomon.node.local.dev"

_READY_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 30.0
_PAUSED_MARKER = "dev-paused.json"

# The spec-file schema (see cli/spec.py); examples/*.yaml show the same jobs as files.
EXAMPLE_JOBS: list[dict[str, Any]] = [
    {
        "name": "hello-every-5s",
        # A 6-field expression says where its seconds are: last here (croniter's form).
        "schedule": {"cron": "* * * * * */5", "timezone": "UTC", "dialect": "seconds_last"},
        "misfire_policy": "run_latest",
        "task": {"name": "hello", "queue": DEMO_QUEUE, "payload": {"greeting": "hello"}},
    },
    {
        "name": "etl-every-30s",
        "schedule": {"cron": "* * * * * */30", "timezone": "UTC", "dialect": "seconds_last"},
        "misfire_policy": "run_latest",
        "defaults": {"queue": DEMO_QUEUE, "timeout_ms": "30s"},
        "tasks": [
            {"name": "extract", "payload": {"source": "orders.csv"}},
            {"name": "transform-users", "depends_on": ["extract"]},
            {"name": "transform-orders", "depends_on": ["extract"]},
            {"name": "load", "depends_on": ["transform-users", "transform-orders"]},
        ],
    },
    {
        "name": "flaky-export",
        "schedule": {"cron": "* * * * *", "timezone": "UTC"},
        "misfire_policy": "run_latest",
        "task": {
            "name": "export",
            "queue": DEMO_QUEUE,
            "retry": {
                "max_attempts": 3,
                "initial_backoff_ms": 200,
                "max_backoff_ms": 1000,
                "jitter": -1,
            },
        },
    },
]
# Triggered once when first created, so that the DAG and the dead-letter queue show up at once.
_TRIGGER_ON_CREATE = ("etl-every-30s", "flaky-export")


_LINE_LOCK = threading.Lock()


def write_line(out: TextIO, text: str) -> None:
    """One record, one line: a single write under a lock (the demo tasks print from the
    worker's thread pool; print() writes the text and the newline separately, so two records
    could share a line)."""
    with _LINE_LOCK:
        out.write(text.replace("\n", " ") + "\n")
        out.flush()


def demo_tasks(out: TextIO) -> list[TaskDefinition]:
    """The demo worker's tasks (queue "demo"); each prints one line to ``out``."""

    def say(ctx: TaskContext, text: str) -> None:
        now = fmt_time(int(time.time() * 1000))
        write_line(out, f"{now}  {ctx.run_id:<26} {ctx.task_name:<17} {text}")

    @task(name="hello", queue=DEMO_QUEUE)
    def hello(ctx: TaskContext) -> dict[str, Any]:
        greeting = (ctx.json() or {}).get("greeting", "hello")
        say(ctx, f"{greeting} (token {ctx.fencing_token})")
        return {"said": greeting}

    @task(name="extract", queue=DEMO_QUEUE)
    def extract(ctx: TaskContext) -> dict[str, Any]:
        say(ctx, f"extracting {(ctx.json() or {}).get('source', 'data')}")
        return {"rows": 42}

    def transform(ctx: TaskContext) -> dict[str, Any]:
        # Demo work that stops early when the cluster cancels the run.
        ctx.wait_cancelled(0.3)
        say(ctx, "transformed")
        return {"rows": 21}

    @task(name="load", queue=DEMO_QUEUE)
    def load(ctx: TaskContext) -> dict[str, Any]:
        say(ctx, f"loaded, idempotency key {ctx.idempotency_key}")
        return {"loaded": 42}

    @task(name="export", queue=DEMO_QUEUE)
    def export(ctx: TaskContext) -> None:
        say(ctx, f"failing on purpose (attempt {ctx.attempt} of {ctx.max_attempts})")
        raise RuntimeError(f"simulated outage: upstream answered 503 (attempt {ctx.attempt})")

    return [
        hello,
        extract,
        TaskDefinition("transform-users", DEMO_QUEUE, transform),
        TaskDefinition("transform-orders", DEMO_QUEUE, transform),
        load,
        export,
    ]


def busy_ports(ports: tuple[int, ...]) -> list[int]:
    """The ports on 127.0.0.1 that something already listens on. The one check of them:
    ``gnomon.node.local.dev`` leaves it to us, and checking before it starts keeps us from talking
    to another cluster on those ports."""
    busy = []
    for port in ports:
        with socket.socket() as s:
            # SO_REUSEADDR: a port held only by TIME_WAIT connections of a previous run is free.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                busy.append(port)
    return busy


def dev_credentials(data_dir: Path) -> tuple[Path, Path]:
    """Where a secure dev cluster keeps its CA certificate and admin token."""
    return data_dir / "tls" / "ca.crt", data_dir / "tls" / "admin.token"


def dev_cluster_security(data_dir: Path, servers: str) -> tuple[str, str] | None:
    """(CA file, token file) for a command to ``servers`` when they are the gnomon dev
    cluster whose data is in ``data_dir`` and it runs secure, as its own ``dev.json`` says
    (written by gnomon.node.local.dev at every start); None otherwise. A ``tls/`` folder an
    earlier secure run left says nothing about the cluster running now."""
    try:
        state = json.loads((data_dir / "dev.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or state.get("secure") is not True:
        return None
    if servers not in (DEFAULT_SERVERS, ",".join(state.get("grpc") or ()),
                       state.get("gateway")):
        return None
    ca, token = (data_dir / str(state.get(k, "")) for k in ("ca_file", "token_file"))
    return (str(ca), str(token)) if ca.is_file() and token.is_file() else None


class _DevSession:
    def __init__(
        self,
        *,
        data_dir: Path,
        grpc_ports: tuple[int, ...],
        raft_ports: tuple[int, ...],
        headless_s: float | None,
        json_out: bool,
        examples: bool,
        out: TextIO,
        err: TextIO,
        secure: bool = True,
    ) -> None:
        self.secure = secure
        self.data_dir = data_dir
        self.grpc_ports = grpc_ports
        self.raft_ports = raft_ports
        self.servers = ",".join(f"127.0.0.1:{p}" for p in grpc_ports)
        self.headless_s = headless_s
        self.json_out = json_out
        self.examples = examples
        self.out = out
        # With --json only the summary goes to stdout.
        self.chatter = err if json_out else out
        self.err = err
        self.stop = asyncio.Event()
        self.proc: asyncio.subprocess.Process | None = None
        self.example_ids: dict[str, str] = {}

    def say(self, text: str) -> None:
        with _LINE_LOCK:
            print(text, file=self.chatter, flush=True)

    async def run(self) -> int:
        http_ports = tuple(p + DEV_HTTP_PORT_OFFSET for p in self.grpc_ports)
        busy = busy_ports(self.grpc_ports + self.raft_ports + http_ports + self.gateway_ports)
        if busy:
            print(
                f"gnomon: unavailable: port(s) {', '.join(map(str, busy))} on 127.0.0.1 already "
                "in use (another `gnomon dev` running? stop it, or choose --grpc-ports and "
                "--raft-ports)",
                file=self.err,
            )
            return 3
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop.set)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        client: AsyncClient | None = None
        worker: Worker | None = None
        worker_task: asyncio.Task[None] | None = None
        code = 0
        summary: dict[str, Any] | None = None
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                DEV_CLUSTER_MODULE,
                "--root",
                str(self.data_dir),
                "--grpc-ports",
                ",".join(map(str, self.grpc_ports)),
                "--raft-ports",
                ",".join(map(str, self.raft_ports)),
                "--parent-pid",
                str(os.getpid()),
                *([] if self.secure else ["--insecure"]),
                stdout=self.chatter,
                # Its own session: Ctrl-C reaches only us, and we stop the nodes in order.
                start_new_session=True,
            )
            client = await self._client()
            if client is None or not await self._wait_ready(client):
                return 130 if self.stop.is_set() else 3
            if self.examples:
                await self._ensure_examples(client)
                worker = self._demo_worker(client)
                worker_task = asyncio.create_task(worker.run())
            self._print_next_steps()
            await self._wait_stop(worker_task)
            if self.proc.returncode is not None:
                print(f"gnomon: dev cluster exited with code {self.proc.returncode}", file=self.err)
                code = 3
            else:
                summary = await self._summary(client)
                if self.examples:
                    await self._pause_examples(client)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            if worker is not None and worker_task is not None:
                await worker.shutdown()
                await asyncio.gather(worker_task, return_exceptions=True)
            if client is not None:
                await client.close()
            await self._stop_cluster()
        if summary is not None:
            self._print_summary(summary)
        return code

    async def _client(self) -> AsyncClient | None:
        """The session's client: TLS with the dev CA and the admin token once the cluster
        wrote them (secure, the default), else plaintext."""
        if not self.secure:
            return AsyncClient(self.servers, timeout_s=5.0, attempt_timeout_s=2.0)
        ca, token = dev_credentials(self.data_dir)
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while not (ca.exists() and token.exists()):
            if self.stop.is_set() or self.proc is None or self.proc.returncode is not None \
                    or time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.05)
        return AsyncClient(self.servers, timeout_s=5.0, attempt_timeout_s=2.0,
                           tls=TLSConfig(ca_file=str(ca)), token=token.read_text().strip())

    async def _wait_ready(self, client: AsyncClient) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while not self.stop.is_set():
            if self.proc.returncode is not None:
                print(
                    f"gnomon: unavailable: the dev cluster exited with code "
                    f"{self.proc.returncode} before it was ready (see above)",
                    file=self.err,
                )
                return False
            try:
                await client.list_jobs(limit=1, timeout_s=2.0)
                return True
            except GnomonError:
                pass
            if time.monotonic() > deadline:
                print(
                    f"gnomon: unavailable: no leader within {_READY_TIMEOUT_S:g}s; "
                    f"see the node logs in {self.data_dir}",
                    file=self.err,
                )
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), 0.2)
        return False

    def _marker(self) -> Path:
        return self.data_dir / _PAUSED_MARKER

    async def _ensure_examples(self, client: AsyncClient) -> None:
        try:
            paused_by_us = set(json.loads(self._marker().read_text()))
        except (OSError, ValueError):
            paused_by_us = set()
        for data in EXAMPLE_JOBS:
            spec = spec_from_data(data)
            try:
                job = await client.get_job(name=spec.name)
                state = "exists"
            except NotFound:
                try:
                    job = await client.create_job(spec)
                    state = "created"
                except AlreadyExists:
                    job = await client.get_job(name=spec.name)
                    state = "exists"
            if job.job_id in paused_by_us and job.paused:
                job = await client.resume_job(job.job_id)
                state = "resumed"
            self.example_ids[spec.name] = job.job_id
            if state == "created" and spec.name in _TRIGGER_ON_CREATE:
                await client.trigger_job(job.job_id)
            self.say(f"  example job {job.job_id:<5} {spec.name:<16} {state}")
        self._marker().unlink(missing_ok=True)

    async def _pause_examples(self, client: AsyncClient) -> None:
        paused = []
        for job_id in self.example_ids.values():
            try:
                job = await client.get_job(job_id, timeout_s=3.0)
                if not job.paused:
                    await client.pause_job(job_id, timeout_s=3.0)
                    paused.append(job_id)
            except GnomonError as e:
                self.say(f"gnomon dev: could not pause example {job_id}: {e}")
        self._marker().write_text(json.dumps(paused))

    def _demo_worker(self, client: AsyncClient) -> Worker:
        handler = logging.FileHandler(self.data_dir / "worker.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        sdk_log = logging.getLogger("gnomon.client")
        sdk_log.addHandler(handler)
        sdk_log.setLevel(logging.INFO)
        sdk_log.propagate = False
        return Worker(
            client,
            tasks=demo_tasks(self.chatter),
            worker_id="gnomon-dev-demo",
            max_concurrency=4,
            shutdown_grace_s=2.0,
        )

    @property
    def gateway_ports(self) -> tuple[int, int]:
        """The gateway's gRPC and HTTP ports."""
        grpc_port = self.grpc_ports[0] + DEV_GATEWAY_PORT_OFFSET
        return grpc_port, grpc_port + DEV_HTTP_PORT_OFFSET

    def _gateway_line(self) -> str:
        grpc_port, http_port = self.gateway_ports
        scheme = "https" if self.secure else "http"
        return (f"Gateway: 127.0.0.1:{grpc_port} (gRPC) and {scheme}://127.0.0.1:{http_port}/ "
                f"(HTTP, dashboard): one address for clients and workers, e.g. "
                f"`gnomon --server 127.0.0.1:{grpc_port} job list`")

    def _print_next_steps(self) -> None:
        logs = " ".join(f"{self._shown(self.data_dir)}/n{i}.log" for i in (1, 2, 3))
        lines = [
            "",
            "gnomon dev is running: 3 nodes"
            + (", a demo worker (queue demo) and example jobs" if self.examples else ""),
            *self._security_lines(),
            self._gateway_line(),
            "Try:",
            *(
                [f"  export GNOMON_SERVERS={self.servers}"]
                if self.servers != DEFAULT_SERVERS
                or os.environ.get("GNOMON_SERVERS", self.servers) != self.servers
                else []
            ),
            "  gnomon cluster status",
            "  gnomon job list",
            "  gnomon run list hello-every-5s",
            "  gnomon job trigger etl-every-30s --wait",
            "  gnomon dlq list",
            "  gnomon dlq replay --all",
            "  gnomon worker shell --queue shell   # then, in another terminal:",
            "  gnomon job create -f examples/shell-hello.yaml",
            f"Logs: {logs}"
            + (f", worker {self._shown(self.data_dir)}/worker.log" if self.examples else ""),
            *(
                ["Metrics: http://127.0.0.1:7901/metrics (n1; n2 7902, n3 7903)"]
                if tuple(self.grpc_ports) == DEV_GRPC_PORTS
                else []
            ),
            "Ctrl-C stops everything; the data stays in "
            f"{self._shown(self.data_dir)}/ (delete it to start over).",
            "",
        ]
        if self.headless_s is not None:
            lines[-2] = f"Stopping by itself after {self.headless_s:g}s (--headless-seconds)."
        self.say("\n".join(lines))

    def _security_lines(self) -> list[str]:
        port = self.grpc_ports[0] + DEV_HTTP_PORT_OFFSET
        if not self.secure:
            return [f"Dashboard: http://127.0.0.1:{port}/ (every node serves one; API at /v1/, "
                    "/v1/openapi.json). Plaintext, no authentication (--insecure)."]
        ca, token_file = dev_credentials(self.data_dir)
        token = token_file.read_text().strip()
        default_dir = self.data_dir == (Path.cwd() / ".gnomon").resolve()
        return [
            f"TLS with a throwaway CA ({self._shown(ca)}) and authentication on; admin token:",
            f"  {token}",
            f"Dashboard: https://127.0.0.1:{port}/#token={token}",
            "  (every node serves one, API at /v1/; the browser warns until it trusts the CA)",
            *([] if default_dir and tuple(self.grpc_ports) == DEV_GRPC_PORTS else [
                f"  export GNOMON_CA={ca} GNOMON_TOKEN_FILE={token_file}"]),
        ]

    @staticmethod
    def _shown(path: Path) -> str:
        try:
            return str(path.relative_to(Path.cwd()))
        except ValueError:
            return str(path)

    async def _wait_stop(self, worker_task: asyncio.Task[None] | None) -> None:
        assert self.proc is not None
        waits: set[asyncio.Task[Any]] = {
            asyncio.create_task(self.stop.wait()),
            asyncio.create_task(self.proc.wait()),
        }
        if worker_task is not None:
            waits.add(worker_task)
        try:
            done, _ = await asyncio.wait(
                waits, timeout=self.headless_s, return_when=asyncio.FIRST_COMPLETED
            )
            if worker_task is not None and worker_task in done and worker_task.exception():
                print(f"gnomon: demo worker failed: {worker_task.exception()}", file=self.err)
        finally:
            for t in waits:
                if t is not worker_task:
                    t.cancel()

    async def _summary(self, client: AsyncClient) -> dict[str, Any]:
        runs: Counter[str] = Counter()
        per_job: dict[str, dict[str, int]] = {}
        dead_letters = 0
        try:
            async for job in client.iter_jobs(timeout_s=5.0):
                counts = Counter(
                    r.state.value for r in await client.list_runs(job.job_id, limit=1000)
                )
                per_job[job.name] = dict(counts)
                runs.update(counts)
            dead_letters = len(await client.list_dead_letters(limit=1000))
        except GnomonError as e:
            self.say(f"gnomon dev: could not read the runs: {e}")
        return {
            "servers": self.servers,
            "data_dir": str(self.data_dir),
            "runs": {
                state.value: runs.get(state.value, 0)
                for state in RunState
                if state.value != "unspecified"
            },
            "jobs": per_job,
            "dead_letters": dead_letters,
        }

    def _print_summary(self, summary: dict[str, Any]) -> None:
        if self.json_out:
            print(json.dumps(summary, indent=2), file=self.out, flush=True)
            return
        rows = [
            [name, *(counts.get(s, 0) for s in ("succeeded", "failed", "running", "cancelled"))]
            for name, counts in summary["jobs"].items()
        ]
        if rows:
            self.say(table(["JOB", "SUCCEEDED", "FAILED", "RUNNING", "CANCELLED"], rows))
        runs = summary["runs"]
        self.say(
            f"gnomon dev: {runs['succeeded']} runs succeeded, {runs['failed']} failed, "
            f"{runs['running']} running; {summary['dead_letters']} dead letters"
        )

    async def _stop_cluster(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), _STOP_TIMEOUT_S)
        except TimeoutError:
            self.say("gnomon dev: the cluster did not stop in time; killing it")
            # Its session holds the nodes too.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


def run_dev(
    *,
    data_dir: str,
    grpc_ports: tuple[int, ...] = DEV_GRPC_PORTS,
    raft_ports: tuple[int, ...] = DEV_RAFT_PORTS,
    headless_s: float | None = None,
    json_out: bool = False,
    examples: bool = True,
    secure: bool = True,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run ``gnomon dev``; returns the exit code."""
    dev = _DevSession(
        secure=secure,
        data_dir=Path(data_dir).resolve(),
        grpc_ports=grpc_ports,
        raft_ports=raft_ports,
        headless_s=headless_s,
        json_out=json_out,
        examples=examples,
        out=out or sys.stdout,
        err=err or sys.stderr,
    )
    return asyncio.run(dev.run())
