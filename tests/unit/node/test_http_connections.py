"""The HTTP port's accept loop and descriptor budget in-process (httpguard/connections.py,
httpguard/descriptors.py, as the node sets them up: node/api/http/port.py): an accept that fails with EMFILE pauses the port and is logged once
per interval with a count, the budget refuses before the reserve is reached, and the node's
soft open-file limit is raised to the hard one."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import resource
import socket
import subprocess
import sys

from aiohttp import web

from gnomon.httpguard.connections import (
    BoundedListener,
    ConnectionLimits,
    RateLimitedLog,
    bounded_requests,
)
from gnomon.httpguard.descriptors import DescriptorBudget
from gnomon.node.api.http.port import REFUSAL, NodePortEvents, incomplete_body
from gnomon.node.api.http.problems import Problem
from gnomon.node.local.cluster import wait_for_async
from gnomon.node.ops import metrics

LIMITS = ConnectionLimits(header_timeout_s=5, body_timeout_s=5, idle_timeout_s=5,
                          write_timeout_s=5, max_connections=100, max_per_address=100, reserved_descriptors=16,
                          accept_backoff_s=0.05, log_interval_s=0.5)


async def test_a_flood_of_errors_is_one_line_per_interval_with_a_count(caplog):
    logger = logging.getLogger("test.ratelimited")
    limited = RateLimitedLog(logger, 0.1, asyncio.get_running_loop())
    with caplog.at_level(logging.WARNING, logger="test.ratelimited"):
        for i in range(100):
            limited.note("accept", f"accept failed #{i}")
        assert [r.getMessage() for r in caplog.records] == ["accept failed #0"]
        await wait_for_async(lambda: len(caplog.records) == 2, timeout_s=5,
                             what="the interval's summary line")
        assert caplog.records[1].getMessage() == (
            "accept failed #99 (99 such in the last 0.1 s; one line per 0.1 s)")
        limited.note("other", "another kind")  # kinds are limited apart
        assert len(caplog.records) == 3
        limited.close()


def _metric(name: str) -> float:
    return metrics.REGISTRY.get_sample_value(name) or 0.0


async def test_accept_at_emfile_pauses_the_port_and_logs_once_then_recovers(caplog):
    async def hello(request: web.BaseRequest) -> web.Response:
        return web.Response(text="hi")

    listener = BoundedListener(web.Server(hello), LIMITS, events=NodePortEvents(),
                               refusal=REFUSAL)
    listener.listen("127.0.0.1", 0)
    port = listener.ports[0]
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest_free = os.dup(0)
    os.close(lowest_free)
    errors_before = _metric("gnomon_http_accept_errors_total")
    try:
        with caplog.at_level(logging.WARNING, logger="gnomon.node.api.http.connections"):
            # No descriptor left: every accept fails with EMFILE (the queue stays readable).
            resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
            await wait_for_async(
                lambda: _metric("gnomon_http_accept_errors_total") - errors_before >= 4,
                timeout_s=5, what="several paused accepts")
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            failures = _metric("gnomon_http_accept_errors_total") - errors_before
            # Paused between tries: a few per back-off, not one per loop iteration.
            assert failures < 40, failures
            lines = [r.getMessage() for r in caplog.records if "accept failed" in r.getMessage()]
            assert len(lines) == 1, lines
            assert "Too many open files" in lines[0] and "not accepting for 0.05 s" in lines[0]
            assert "RLIMIT_NOFILE" in lines[0]
            # Descriptors again: the waiting connections are accepted and served.
            await wait_for_async(lambda: listener.open == 3, timeout_s=5,
                                 what="the queued connections accepted")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for client in clients:
            client.close()
        listener.close()


def test_the_budget_refuses_before_fewer_than_the_reserve_are_free():
    now = [0.0]
    budget = DescriptorBudget(10, recount_s=1.0, clock=lambda: now[0], counter=lambda: 85,
                              limit=lambda: 100)
    admitted = 0
    while not budget.short(fd=3):
        admitted += 1
    # 85 open with the first accepted: the sixth leaves 10 free, a seventh would leave 9.
    assert admitted == 6
    # A descriptor numbered 95 proves 96 are open, whatever the last count said.
    now[0] = 2.0
    assert budget.short(fd=95)
    assert not budget.short(fd=3)  # recounted: 85 open again, closes are seen


def test_the_soft_open_file_limit_is_raised_to_the_hard_one():
    code = ("import resource\n"
            "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))\n"
            "from gnomon.httpguard.descriptors import raise_open_file_limit\n"
            "got = raise_open_file_limit()\n"
            "assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == got.soft\n"
            "print(got.before, got.soft, got.hard)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    before, soft, hard = map(int, out)
    assert before == 64 and soft == hard > 64


async def test_a_body_read_after_the_body_timeout_closed_the_connection_is_an_incomplete_body():
    """Seen on a loaded machine: the handler reached its first read only after the body timer
    had closed the connection, aiohttp raised RuntimeError("Connection closed."), and the node
    logged a traceback for a client that merely sent its body too slowly."""
    outcome: list[str] = []

    async def slow_reader(request: web.Request) -> web.Response:
        # The window: the timer has dropped the transport, connection_lost has not run yet.
        while request.protocol.transport is not None:
            await asyncio.sleep(0)
        await request.read()
        return web.Response(text="read")

    @web.middleware
    async def outer(request: web.Request, handler):
        try:
            return await handler(request)
        except Problem as problem:
            outcome.append(str(problem))
            return problem.response()
        except Exception as exc:  # what the node's server logs with a traceback
            outcome.append(f"traceback: {exc!r}")
            raise

    app = web.Application(middlewares=[outer, bounded_requests(incomplete_body)])
    app.router.add_post("/slow", slow_reader)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    assert runner.server is not None
    limits = dataclasses.replace(LIMITS, body_timeout_s=0.1)
    listener = BoundedListener(runner.server, limits, events=NodePortEvents(), refusal=REFUSAL)
    listener.listen("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.ports[0])
    try:
        writer.write(b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        assert await asyncio.wait_for(reader.read(), 5) == b""  # the body timer closed it
        await wait_for_async(lambda: outcome, timeout_s=5, what="the handler's outcome")
        assert "the request body is incomplete" in outcome[0], outcome
    finally:
        writer.close()
        listener.close()
        await runner.cleanup()
