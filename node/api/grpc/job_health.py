"""ListJobs' `health`: the core's view of a job (node/core/job_health.py) as a JobHealth
message, with what only the leader knows added: the workers connected to it that would take
each queue's tasks of the job's tenant."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gnomon.node import codec
from gnomon.node.core import job_health as core
from gnomon.v1 import api_pb2, types_pb2

_RUN_STATE = types_pb2.RunState.DESCRIPTOR


def workers_serving(sessions: Iterable[Any], tenant: str, queue: str) -> int:
    """Worker sessions (leader.dispatch.WorkerSession) that take `tenant`'s tasks of `queue`:
    the queue among theirs, and every tenant (None) or this one among their tenants."""
    return sum(1 for s in sessions if queue in s.queues
               and (s.tenants is None or tenant in s.tenants))


def health_to_proto(health: core.JobHealth, tenant: str, *, now_ms: int,
                    sessions: Mapping[str, Any] | None) -> api_pb2.JobHealth:
    """`sessions`: the leader's worker sessions; None on a node that does not lead (workers
    unknown)."""
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
            workers=workers_serving(sessions.values(), tenant, queue) if sessions is not None
            else 0,
            workers_known=sessions is not None)
    return out
