"""Supervised background tasks and bounded step sequences (node/tasks.py)."""

from __future__ import annotations

import asyncio
import logging
import random

from gnomon.node.tasks import Backoff, Supervisor, run_steps


async def test_an_escaped_exception_is_logged_and_a_critical_one_is_fatal(caplog):
    fatal: list[str] = []
    supervisor = Supervisor(fatal.append)

    async def boom():
        raise ValueError("bug")

    with caplog.at_level(logging.ERROR):
        await asyncio.gather(supervisor.spawn(boom(), name="helper"), return_exceptions=True)
        await asyncio.gather(supervisor.spawn(boom(), name="trigger", critical=True),
                             return_exceptions=True)
        await asyncio.sleep(0)
    assert "background task helper failed" in caplog.text and "ValueError: bug" in caplog.text
    assert fatal == ["leader loop trigger failed: ValueError('bug')"]
    assert supervisor.running() == 0


async def test_cancellation_is_not_a_failure():
    fatal: list[str] = []
    supervisor = Supervisor(fatal.append)
    task = supervisor.spawn(asyncio.Event().wait(), name="loop", critical=True)
    await supervisor.cancel_all(timeout_s=1)
    assert task.cancelled() and fatal == []


async def test_run_steps_names_the_step_that_hangs():
    done: list[str] = []

    async def quick():
        done.append("quick")

    stuck = await run_steps([("quick", quick), ("hangs", asyncio.Event().wait),
                             ("never", quick)], timeout_s=0.2)
    assert stuck == "hangs" and done == ["quick"]
    assert await run_steps([("quick", quick)], timeout_s=1) is None


def test_backoff_grows_to_its_cap_with_jitter_and_resets():
    backoff = Backoff(50, 400, random.Random(1))
    delays = [backoff.failed() for _ in range(6)]
    assert 0.025 <= delays[0] <= 0.05
    assert all(0.2 <= d <= 0.4 for d in delays[3:])
    backoff.succeeded()
    assert backoff.failed() <= 0.05
