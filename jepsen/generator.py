"""Generators: which operation each client process performs, and when.

Every workload owns some client *threads*; a thread runs one operation at a time against its
agent (client namespace) and waits a random, seeded delay (the stagger) between operations
until the time limit. As in Jepsen, an operation whose outcome is unknown (`info`) crashes its
process: the thread carries on under a fresh process id, so a process never has two
operations outstanding. The op sequence of each thread derives from the run's seed.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any, Protocol

from gnomon.jepsen.client import WRITES
from gnomon.jepsen.context import Context
from gnomon.jepsen.history import INFO, INVOKE
from gnomon.jepsen.procs import AgentHandle

# Harness-side bound on one operation: the client's own deadline plus slack.
OP_TIMEOUT_S = 15.0


class Workload(Protocol):
    name: str
    threads: int
    stagger_s: float

    async def setup(self, ctx: Context) -> None: ...
    def next_op(self, rng: random.Random, thread: int) -> dict[str, Any] | None: ...
    def completed(self, thread: int, op: dict[str, Any], result: dict[str, Any]) -> None: ...
    async def final(self, ctx: Context) -> None: ...
    def check(self, ctx: Context) -> dict[str, Any]: ...


@dataclass
class Thread:
    workload: Workload
    index: int          # within the workload
    group: int          # globally unique: the agent keeps one client per group
    process: int        # current Jepsen process id
    agent: AgentHandle
    node: int


def op_value(op: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in op.items() if k != "f"}


async def run_thread(ctx: Context, t: Thread, deadline: float, total_threads: int) -> None:
    loop = asyncio.get_running_loop()
    rng = ctx.child_rng(f"{t.workload.name}/{t.index}")
    history = ctx.history
    while loop.time() < deadline:
        op = t.workload.next_op(rng, t.index)
        if op is not None:
            if ctx.chaos and op["f"] in WRITES:
                op["chaos"] = True
            history.append(t.process, INVOKE, op["f"], op_value(op), workload=t.workload.name)
            result = await t.agent.call(op, process=t.process, group=t.group, node=t.node,
                                        timeout_s=OP_TIMEOUT_S)
            history.append(t.process, result["type"], op["f"], result.get("value"),
                           error=result.get("error"), workload=t.workload.name)
            t.workload.completed(t.index, op, result)
            if result["type"] == INFO:
                t.process += total_threads
        delay = rng.expovariate(1.0 / t.workload.stagger_s)
        await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))


async def run_clients(ctx: Context, workloads: list[Workload], agents: list[AgentHandle],
                      deadline: float) -> None:
    threads: list[Thread] = []
    for w in workloads:
        for i in range(w.threads):
            g = len(threads)
            threads.append(Thread(w, i, g, g, agents[g % len(agents)], node=g))
    await asyncio.gather(*(run_thread(ctx, t, deadline, len(threads)) for t in threads))
