"""Task functions for `gnomon worker python --module examples.tasks` (from the repository root).

They serve the jobs in examples/hello-cron.yaml, etl-dag.yaml and flaky.json (queue "examples").
"""

from __future__ import annotations

from typing import Any

from gnomon.client import NonRetryableError, TaskContext, task


@task(name="hello", queue="examples")
def hello(ctx: TaskContext) -> dict[str, Any]:
    greeting = (ctx.json() or {}).get("greeting", "hello")
    ctx.write(f"{greeting} ({ctx.run_id}, attempt {ctx.attempt})\n")
    return {"said": greeting}


@task(name="extract", queue="examples")
def extract(ctx: TaskContext) -> dict[str, Any]:
    # Key external effects by ctx.idempotency_key: the same for every attempt of this task.
    return {"source": (ctx.json() or {}).get("source"), "key": ctx.idempotency_key}


@task(name="transform-users", queue="examples")
def transform_users(ctx: TaskContext) -> dict[str, Any]:
    return {"users": 3}


@task(name="transform-orders", queue="examples")
async def transform_orders(ctx: TaskContext) -> dict[str, Any]:
    return {"orders": 5}


@task(name="load", queue="examples")
def load(ctx: TaskContext) -> dict[str, Any]:
    if not ctx.lease_valid():
        # Another worker may own the task now: do not write.
        raise RuntimeError("lease lost before the write")
    return {"loaded": 8, "fencing_token": ctx.fencing_token}


@task(name="always-fails", queue="examples")
def always_fails(ctx: TaskContext) -> None:
    if ctx.attempt >= ctx.max_attempts:
        raise NonRetryableError("giving up: the upstream API is still down")
    raise RuntimeError(f"upstream API unavailable (attempt {ctx.attempt})")
