"""Worker processes and client agents, each in its own network namespace."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnomon.jepsen.net import Net

log = logging.getLogger(__name__)


@dataclass
class WorkerProc:
    worker_id: str
    mode: str
    queues: str
    proc: subprocess.Popen | None = None
    paused: bool = False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class AgentHandle:
    """The harness side of a client agent: send an op, await its outcome (bounded)."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process):
        self.name = name
        self.proc = proc
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}
        self.ready = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                break
            msg = json.loads(line)
            if msg["id"] == 0:
                if not self.ready.done():
                    self.ready.set_result(True)
                continue
            fut = self._waiting.pop(msg["id"], None)
            if fut is not None and not fut.done():
                fut.set_result(msg)
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(ConnectionError(f"agent {self.name} exited"))

    async def call(self, op: dict[str, Any], *, process: int, group: int, node: int,
                   timeout_s: float) -> dict[str, Any]:
        n = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._waiting[n] = fut
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"id": n, "process": process, "group": group,
                                           "node": node, "op": op}) + "\n").encode())
        try:
            await self.proc.stdin.drain()
            return await asyncio.wait_for(fut, timeout_s)
        except (TimeoutError, ConnectionError, BrokenPipeError) as exc:
            self._waiting.pop(n, None)
            return {"type": "info", "value": None, "error": f"harness: {exc!r}"}

    async def close(self) -> None:
        if self.proc.stdin and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()
        self._reader.cancel()


@dataclass
class Procs:
    run_dir: Path
    net: Net
    servers: list[str]
    witness_url: str
    seed: int
    workers: dict[str, WorkerProc] = field(default_factory=dict)
    agents: dict[str, AgentHandle] = field(default_factory=dict)

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GNOMON_", "FAKETIME", "LD_PRELOAD"))}
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def start_worker(self, worker_id: str, mode: str, queues: str, concurrency: int = 8
                     ) -> None:
        w = self.workers.setdefault(worker_id, WorkerProc(worker_id, mode, queues))
        # Each worker starts on a different server, so workers spread over the gateways.
        first = list(self.workers).index(worker_id) % len(self.servers)
        servers = self.servers[first:] + self.servers[:first]
        args = [*self.net.exec_prefix(worker_id), sys.executable, "-m",
                "gnomon.jepsen.workerproc", "--mode", mode, "--worker-id", worker_id,
                "--servers", ",".join(servers), "--witness", self.witness_url,
                "--queues", queues, "--seed", str(self.seed), "--concurrency", str(concurrency)]
        with open(self.run_dir / f"{worker_id}.log", "ab") as logf:
            w.proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT,
                                      env=self._env(), start_new_session=True)

    def pause_worker(self, worker_id: str) -> None:
        w = self.workers[worker_id]
        if w.alive():
            w.proc.send_signal(signal.SIGSTOP)
            w.paused = True

    def resume_worker(self, worker_id: str) -> None:
        w = self.workers[worker_id]
        if w.alive():
            w.proc.send_signal(signal.SIGCONT)
        w.paused = False

    async def start_agent(self, name: str) -> AgentHandle:
        args = [*self.net.exec_prefix(name), sys.executable, "-m", "gnomon.jepsen.agent",
                "--servers", ",".join(self.servers), "--seed", str(self.seed), "--name", name]
        logf = open(self.run_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed with the proc
        proc = await asyncio.create_subprocess_exec(
            *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=logf,
            env=self._env(), start_new_session=True, limit=1 << 24)
        logf.close()
        handle = AgentHandle(name, proc)
        self.agents[name] = handle
        return handle

    def crashed_workers(self) -> list[str]:
        return [f"{w.worker_id} (exit {w.proc.poll()})" for w in self.workers.values()
                if w.proc is not None and w.proc.poll() is not None]

    async def stop(self) -> None:
        for handle in self.agents.values():
            await handle.close()
        self.kill_workers()

    def kill_workers(self) -> None:
        for w in self.workers.values():
            if w.alive():
                w.proc.send_signal(signal.SIGCONT)
                w.proc.send_signal(signal.SIGKILL)
            if w.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    w.proc.wait(timeout=10)
