"""Gateways in the tests: their /metrics, and SDK workers that hold leases through them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any
from urllib.request import urlopen

from prometheus_client.parser import text_string_to_metric_families

from gnomon.client import TaskContext, Worker, task
from gnomon.node.local.gateway import GatewayProc


def gateway_metric(gw: GatewayProc, name: str, **labels: str) -> float:
    """One sample of the gateway's /metrics (0 when absent)."""
    with urlopen(f"http://{gw.metrics_addr}/metrics", timeout=10) as r:
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


class AckWorker(Worker):
    """The SDK worker, with the loop time and valid tokens of every heartbeat ack."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.acks: list[tuple[float, frozenset[int]]] = []

    def _on_heartbeat_ack(self, ack: Any) -> None:
        self.acks.append((asyncio.get_running_loop().time(), frozenset(ack.valid_tokens)))
        super()._on_heartbeat_ack(ack)


async def until(predicate: Callable[[], bool], *, what: str, timeout_s: float = 60.0) -> None:
    """Poll `predicate` on the running loop (a worker's loop runs meanwhile) until it holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


class HeldTask:
    """A task on `queue` that holds its lease until `release` is set; `started` once it runs,
    `tokens` the fencing token of every attempt."""

    def __init__(self, queue: str) -> None:
        self.started, self.release = asyncio.Event(), asyncio.Event()
        self.tokens: list[int] = []

        @task(name="main", queue=queue)
        async def held(ctx: TaskContext) -> str:
            self.tokens.append(ctx.fencing_token)
            self.started.set()
            await self.release.wait()
            return "done"

        self.task = held
