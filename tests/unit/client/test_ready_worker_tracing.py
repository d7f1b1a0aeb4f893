"""The ready-made workers hand a task's trace context on: TRACEPARENT to a shell command, the
traceparent header to an HTTP request; nothing when the cluster does not trace."""

from __future__ import annotations

from gnomon.client.ready_workers.http import context_headers
from gnomon.client.ready_workers.shell import task_environment
from gnomon.client.testing import make_context

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_traced_task_hands_its_traceparent_on():
    ctx = make_context(run_id="nightly@60000", traceparent=TRACEPARENT)
    assert ctx.traceparent == TRACEPARENT
    assert task_environment(ctx)["TRACEPARENT"] == TRACEPARENT
    assert context_headers(ctx)["traceparent"] == TRACEPARENT


def test_an_untraced_task_adds_no_trace_header_or_variable():
    ctx = make_context(run_id="nightly@60000")
    assert ctx.traceparent == ""
    assert "TRACEPARENT" not in task_environment(ctx)
    assert not any(k.lower() == "traceparent" for k in context_headers(ctx))
