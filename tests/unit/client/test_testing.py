"""``gnomon.client.testing``: running task functions without a cluster."""

from __future__ import annotations

import asyncio

import pytest

from gnomon.client import NonRetryableError, TaskContext, task
from gnomon.client.testing import make_context, run_task, run_task_async


@task(name="greet", queue="q1")
def greet(ctx: TaskContext) -> dict:
    ctx.write("hello\n")
    return {
        "who": ctx.json()["who"],
        "attempt": ctx.attempt,
        "key": ctx.idempotency_key,
        "job": ctx.job_id,
        "slot": ctx.scheduled_for_ms,
        "queue": ctx.queue,
        "valid": ctx.lease_valid(),
    }


@task
async def async_double(ctx: TaskContext) -> int:
    await asyncio.sleep(0)
    return 2 * ctx.json()


@task
def strict(ctx: TaskContext) -> None:
    raise NonRetryableError("bad input")


def test_run_sync_task():
    out = run_task(greet, payload={"who": "ada"}, attempt=2, run_id="j3@1000")
    assert out == {
        "who": "ada",
        "attempt": 2,
        "key": "j3@1000:greet",
        "job": "j3",
        "slot": 1000,
        "queue": "q1",
        "valid": True,
    }


def test_run_async_task_from_sync_code():
    assert async_double.is_async
    assert run_task(async_double, payload=21) == 42


async def test_run_async_task_from_async_code():
    assert await run_task_async(async_double, payload=b"4") == 8
    assert (await run_task_async(greet, payload={"who": "x"}))["who"] == "x"
    with pytest.raises(RuntimeError, match="run_task_async"):
        run_task(async_double, payload=1)


def test_exceptions_propagate():
    with pytest.raises(NonRetryableError, match="bad input"):
        run_task(strict)


def test_plain_functions_and_fenced_contexts():
    assert run_task(lambda ctx: ctx.lease_valid(), lease_valid=False) is False
    assert run_task(lambda ctx: ctx.is_cancelled(), cancelled=True) is True
    ctx = make_context(greet, payload=b"")
    assert ctx.json() is None and ctx.task_name == "greet" and ctx.fencing_token == 1


def test_definition_is_still_callable():
    ctx = make_context(greet, payload={"who": "bob"})
    assert greet(ctx)["who"] == "bob"
    assert ctx._output.tail() == "hello\n"


def test_task_name_is_validated():
    with pytest.raises(ValueError):
        task(name="has space")(lambda ctx: None)


def test_exit_code_and_output_tail_on_the_context():
    ctx = make_context()
    assert ctx.exit_code is None and ctx.output_tail() == ""
    ctx.write("a\n")
    ctx.set_exit_code(2)
    assert (ctx.exit_code, ctx.output_tail()) == (2, "a\n")
    ctx.set_exit_code(None)
    assert ctx.exit_code is None
    with pytest.raises(TypeError):
        ctx.set_exit_code(True)
    with pytest.raises(TypeError):
        ctx.set_exit_code("1")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ctx.set_exit_code(2**31)
    # Each context has its own record.
    assert make_context().exit_code is None
