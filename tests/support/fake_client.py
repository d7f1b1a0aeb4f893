"""A recording stand-in for the SDK Client, and `run`: the gnomon CLI against it, in process."""

from __future__ import annotations

import io
from dataclasses import replace
from typing import Any

import grpc

from gnomon.client import (
    DeadLetter,
    Job,
    NotFound,
    PreviewFire,
    Run,
    RunPage,
    RunState,
    RunWait,
    SchedulePreview,
    TaskRef,
)
from gnomon.client.cli import main

T0 = 1796035262000


class FakeClient:
    """Records calls; answers from ``jobs`` / ``runs``; raises ``fail`` if set."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.jobs: dict[str, Job] = {}
        self.runs: dict[str, Run] = {}
        self.fail: BaseException | None = None
        self.closed = False
        self.servers: str | None = None
        self.timeout_s: float | None = None

    def __getattr__(self, method: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((method, args, kwargs))
            if self.fail is not None:
                raise self.fail
            return getattr(self, "_" + method)(*args, **kwargs)

        return call

    def close(self) -> None:
        self.closed = True

    def method_calls(self, name: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        return [(a, k) for m, a, k in self.calls if m == name]

    def _find(self, job_id=None, tenant=None, name=None) -> Job:
        for job in self.jobs.values():
            if job.job_id == job_id or (job_id is None and job.name == name):
                return job
        raise NotFound(f"job: no job {job_id or name}", code=grpc.StatusCode.NOT_FOUND)

    def _create_job(self, spec, request_id=None):
        job = Job(f"j{len(self.jobs) + 1}", spec, version=1, next_fire_ms=T0, paused=spec.paused)
        self.jobs[job.job_id] = job
        return job

    def _get_job(self, job_id=None, *, tenant=None, name=None):
        return self._find(job_id, tenant, name)

    def _iter_jobs(self, tenant=None, *, page_size=100):
        return iter(list(self.jobs.values()))

    def _update_job(self, job_id, spec, *, expected_version=0, request_id=None):
        old = self._find(job_id, spec.tenant, spec.name)
        job = replace(old, spec=spec, version=old.version + 1)
        self.jobs[job.job_id] = job
        return job

    def _delete_job(self, job_id=None, **kw):
        self.jobs.pop(self._find(job_id, kw.get("tenant"), kw.get("name")).job_id)

    def _pause_job(self, job_id=None, *, tenant=None, name=None, request_id=None):
        job = replace(self._find(job_id, tenant, name), paused=True)
        self.jobs[job.job_id] = job
        return job

    def _resume_job(self, job_id=None, *, tenant=None, name=None, request_id=None):
        job = replace(self._find(job_id, tenant, name), paused=False)
        self.jobs[job.job_id] = job
        return job

    def _trigger_job(self, job_id=None, *, tenant=None, name=None, request_id=None,
                     overlap_policy=None, params=None):
        job = self._find(job_id, tenant, name)
        state = RunState.SKIPPED if overlap_policy == "skip" else RunState.RUNNING
        run = Run(f"{job.job_id}@manual-1", job.job_id, state=state,
                  reason="overlap" if state == RunState.SKIPPED else "")
        self.runs[run.run_id] = run
        return run

    def _preview_schedule(self, job_id=None, *, schedule=None, tenant=None, name=None,
                          count=5, after=None):
        fires = tuple(PreviewFire(T0 + i * 60_000, f"utc-{i}", f"local-{i}",
                                  "DST note" if i == 1 else "") for i in range(count))
        return SchedulePreview(fires, "Europe/Berlin", "0 3 * * * (5 fields)")

    def _wait_run(self, run_id, *, timeout_s=60.0):
        return self.runs[run_id]

    def _get_run(self, run_id, **kw):
        return self.runs[run_id]

    def _list_runs(self, job_id=None, **kw):
        return list(self.runs.values())

    def _list_runs_across_jobs(self, **kw):
        runs = [r for r in self.runs.values() if not kw.get("job_id") or r.job_id == kw["job_id"]]
        return RunPage(tuple(runs), next_page_token="tok" if kw.get("limit") == 1 else "")

    def _cancel_run(self, run_id, *, reason="", request_id=None):
        return replace(self.runs[run_id], state=RunState.CANCELLED)

    def _list_dead_letters(self, tenant=None, *, limit=100):
        return [DeadLetter("j1@5", "load", "j1", attempts=3, last_error="boom", dead_ms=T0)]

    def _replay_dead_letters(self, tasks=None, *, tenant=None, all=False, reason="",
                             request_id=None):
        return list(tasks or [TaskRef("j1@5", "load")])

    def _discard_dead_letters(self, tasks, *, reason="", request_id=None):
        return list(tasks)

    def _explain_run(self, run_id, *, consistency="linearizable"):
        return self.runs[run_id], [RunWait(
            "tenant_concurrency", "load", "tenant acme holds 2 leases, its max_concurrency",
            "max_concurrency of tenant acme", 2, 2, "gnomon tenant set acme --max-concurrency N")]


def run(fake: FakeClient, *argv: str, env: dict[str, str] | None = None, monkeypatch=None):
    out, err = io.StringIO(), io.StringIO()

    def factory(servers: str, timeout_s: float) -> FakeClient:
        fake.servers, fake.timeout_s = servers, timeout_s
        return fake

    code = main(list(argv), client_factory=factory, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()
