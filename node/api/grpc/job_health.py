"""ListJobs' `health`: the core's view of a job (node/core/job_health.py) as a JobHealth
message, with what only the leader knows added: the workers connected to it that would take
each queue's tasks of the job's tenant."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from gnomon.node import codec
from gnomon.node.core import job_health as core
from gnomon.v1 import api_pb2, types_pb2

_RUN_STATE = types_pb2.RunState.DESCRIPTOR


class WorkerCounts:
    """The leader's worker sessions (leader.dispatch.WorkerSession) counted once per queue,
    outside the replica's lock: those that take every tenant (tenants None), and per tenant.
    `serving(tenant, queue)` then costs two lookups per job and queue of a page."""

    def __init__(self, sessions: Iterable[Any]) -> None:
        self._every: Counter[str] = Counter()
        self._tenant: Counter[tuple[str, str]] = Counter()
        for s in sessions:
            for queue in dict.fromkeys(s.queues):
                if s.tenants is None:
                    self._every[queue] += 1
                else:
                    for tenant in dict.fromkeys(s.tenants):
                        self._tenant[(tenant, queue)] += 1

    def serving(self, tenant: str, queue: str) -> int:
        """Sessions that take `tenant`'s tasks of `queue`."""
        return self._every[queue] + self._tenant[(tenant, queue)]


def health_to_proto(health: core.JobHealth, tenant: str, *, now_ms: int,
                    workers: WorkerCounts | None) -> api_pb2.JobHealth:
    """`workers`: the leader's, counted; None on a node that does not lead (unknown)."""
    out = api_pb2.JobHealth(
        succeeded=health.succeeded, failed=health.failed,
        duration_p50_ms=health.duration_p50_ms, duration_p99_ms=health.duration_p99_ms,
        lateness_p50_ms=health.lateness_p50_ms, lateness_p99_ms=health.lateness_p99_ms)
    for r in health.recent:
        out.recent_runs.add(run_id=r.run.run_id, state=codec.enum_to_proto(_RUN_STATE, r.run.state),
                            duration_ms=r.duration_ms, late_ms=r.late_ms,
                            created_ms=r.run.created_ms)
    for queue, backlog in health.queues:
        out.queues.add(
            queue=queue, ready=backlog.ready,
            oldest_ready_age_ms=max(0, now_ms - backlog.oldest_ready_ms)
            if backlog.ready else 0,
            workers=workers.serving(tenant, queue) if workers is not None else 0,
            workers_known=workers is not None)
    return out
