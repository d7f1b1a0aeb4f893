"""Job specs and run helpers over the raw gRPC API, for tests against real nodes."""

from __future__ import annotations

from gnomon.node.local.cluster import NodeProc
from gnomon.v1 import api_pb2, types_pb2

# 2100-01-01: a once-job at this instant never fires on its own.
FAR_FUTURE_MS = 4_102_444_800_000


def every_second_job(name: str, **task) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        name=name,
        schedule=types_pb2.Schedule(interval=types_pb2.IntervalSchedule(interval_ms=1000)),
        tasks=[types_pb2.TaskSpec(name="main", **task)],
    )


def once_job(name: str, **task) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        name=name,
        schedule=types_pb2.Schedule(once=types_pb2.OnceSchedule(at_ms=1)),
        tasks=[types_pb2.TaskSpec(name="main", **task)],
    )


def runs_of(node, job_id: str, limit: int = 1000) -> list[types_pb2.Run]:
    req = api_pb2.ListRunsRequest(job=api_pb2.JobRef(job_id=job_id), limit=limit)
    return list(node.jobs().ListRuns(req, timeout=5).runs)


def create_jobs(node: NodeProc, names: list[str]) -> list[str]:
    ids = []
    for name in names:
        req = api_pb2.CreateJobRequest(request_id=f"create-{name}", spec=once_job(name))
        req.spec.schedule.once.at_ms = FAR_FUTURE_MS
        ids.append(node.jobs().CreateJob(req, timeout=10).job.job_id)
    return ids


def finished_runs(node: NodeProc, job_id: str, n: int, prefix: str) -> list[str]:
    """Trigger and cancel n runs of a job (terminal runs: evicted to the history store)."""
    ids = []
    for i in range(n):
        run = node.jobs().TriggerJob(api_pb2.TriggerJobRequest(
            request_id=f"{prefix}-t{i}", job=api_pb2.JobRef(job_id=job_id)), timeout=10).run
        node.jobs().CancelRun(api_pb2.CancelRunRequest(
            request_id=f"{prefix}-c{i}", run_id=run.run_id), timeout=10)
        ids.append(run.run_id)
    return ids
