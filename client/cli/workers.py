"""``gnomon worker shell|http|python``: run a Worker until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import sys
from collections.abc import Sequence

from .._client import AsyncClient
from .._transport import TLSConfig
from ..ready_workers.http import http_task
from ..ready_workers.shell import shell_task
from ..ready_workers.signing import SigningSecretError, load_signing_secret, readable_by_others
from ..worker.task import TaskDefinition
from ..worker.worker import Worker
from .values import UsageError

__all__ = ["load_task_modules", "serve", "worker_tasks"]

log = logging.getLogger("gnomon.worker")


def load_task_modules(modules: Sequence[str]) -> list[TaskDefinition]:
    """The ``@task`` definitions found at the top level of ``modules`` (imported like
    ``python -m`` would: the current directory is on the path)."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    found: list[TaskDefinition] = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - any import failure is a usage error here
            raise UsageError(f"cannot import {name!r}: {type(e).__name__}: {e}") from None
        tasks = [v for v in vars(module).values() if isinstance(v, TaskDefinition)]
        if not tasks:
            raise UsageError(f"module {name!r} defines no @task functions")
        found.extend(t for t in tasks if t not in found)
    return found


def worker_tasks(
    kind: str,
    *,
    queues: Sequence[str],
    modules: Sequence[str] = (),
    kill_grace_s: float = 5.0,
    http_timeout_s: float = 30.0,
    signing_secret_file: str | None = None,
) -> list[TaskDefinition]:
    if kind == "python":
        tasks = load_task_modules(modules)
        unserved = sorted({t.queue for t in tasks} - set(queues)) if queues else []
        if unserved:
            # Tasks of other queues would never be assigned: say so instead of idling.
            raise UsageError(
                f"tasks in queues {', '.join(unserved)} are not in --queue {','.join(queues)}"
            )
        return tasks
    if not queues:
        raise UsageError(f"gnomon worker {kind}: at least one --queue is required")
    if kind == "shell":
        return [shell_task(q, kill_grace_s=kill_grace_s) for q in queues]
    secret = _signing_secret(signing_secret_file) if signing_secret_file else None
    return [http_task(q, default_timeout_s=http_timeout_s, signing_secret=secret)
            for q in queues]


def _signing_secret(path: str) -> bytes:
    try:
        secret = load_signing_secret(path)
    except SigningSecretError as exc:
        raise UsageError(str(exc)) from None
    if readable_by_others(path):
        log.warning("--signing-secret-file: %s is readable by others; it is a secret: "
                    "chmod 600 %s", path, path)
    return secret


async def _serve(worker: Worker, grace_s: float) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    run = asyncio.create_task(worker.run())
    shutdown: asyncio.Task[None] | None = None
    try:
        while not run.done():
            stopper = asyncio.create_task(stop.wait())
            await asyncio.wait({run, stopper}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if run.done():
                break
            stop.clear()
            if shutdown is None:
                log.info(
                    "stopping: running tasks may finish for up to %gs (signal again to stop now)",
                    grace_s,
                )
                shutdown = asyncio.create_task(worker.shutdown())
            else:
                log.info("stopping now: cancelling running tasks")
                run.cancel()
        try:
            await run
        except asyncio.CancelledError:
            if shutdown is None:
                raise
    finally:
        if shutdown is not None:
            await asyncio.gather(shutdown, return_exceptions=True)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def serve(
    kind: str,
    tasks: list[TaskDefinition],
    *,
    servers: str,
    queues: Sequence[str],
    concurrency: int,
    worker_id: str | None,
    shutdown_grace_s: float,
    log_level: str,
    tls: TLSConfig | None = None,
    token: str | None = None,
    connect_timeout_s: float | None = None,
) -> int:
    """Serve until SIGINT/SIGTERM; returns the exit code. The worker dials with the
    command's TLS and token (``--ca``/``--cert``/``--key``/``--token-file``, ``GNOMON_*``, or
    the local ``gnomon dev`` cluster's); GnomonError if no node accepts it."""
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )

    async def run() -> None:
        client = AsyncClient(servers, tls=tls, token=token)
        try:
            worker = Worker(
                client,
                tasks=tasks,
                queues=list(queues) or None,
                worker_id=worker_id,
                max_concurrency=concurrency,
                shutdown_grace_s=shutdown_grace_s,
                labels={"kind": kind},
                connect_timeout_s=connect_timeout_s,
            )
            print(
                f"gnomon worker {kind}: {worker.worker_id} serving queue(s) "
                f"{', '.join(worker.queues)} of {servers}; Ctrl-C or SIGTERM stops it",
                file=sys.stderr,
                flush=True,
            )
            await _serve(worker, shutdown_grace_s)
        finally:
            await client.close()

    asyncio.run(run())
    return 0
