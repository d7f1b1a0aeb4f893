"""The node's side of its HTTP port's bounds (gnomon.httpguard): its metrics, its answers."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from gnomon.httpguard.connections import refusal_bytes
from gnomon.node.api.http.problems import PROBLEM_TYPE, Problem
from gnomon.node.ops import metrics


class NodePortEvents:
    """The port's counts, as the node's Prometheus metrics."""

    def open_connections(self, count: Callable[[], int]) -> None:
        metrics.HTTP_CONNECTIONS.set_function(count)

    def refused(self, reason: str) -> None:
        metrics.HTTP_REFUSED.labels(reason).inc()

    def timed_out(self, phase: str) -> None:
        metrics.HTTP_TIMED_OUT.labels(phase).inc()

    def accept_failed(self) -> None:
        metrics.HTTP_ACCEPT_ERRORS.inc()


REFUSAL = refusal_bytes(PROBLEM_TYPE, Problem(
    grpc.StatusCode.UNAVAILABLE, "the HTTP port is at its connection bound; retry later",
    headers={"Retry-After": "1"}).body())


def incomplete_body(detail: str) -> Problem:
    """A body the client did not finish: a 400 problem (no traceback)."""
    return Problem(grpc.StatusCode.INVALID_ARGUMENT, detail)
