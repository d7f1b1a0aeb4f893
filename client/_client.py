"""``AsyncClient``: the client of a gnomon cluster on grpc.aio (``Client``, its blocking
facade, is in ``_blocking_client``). All retry and leader-following logic is in
``AsyncClient._call``."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import grpc
import grpc.aio

from gnomon.v1 import api_pb2, api_pb2_grpc

from . import _convert as cv
from . import tracing
from ._access import ACCESS_SERVICE, AccessCalls
from ._errors import DeadlineExceeded, GnomonError, InvalidArgument, error_for_status
from ._models import (
    CircuitBreaker,
    ClusterLimits,
    ClusterStatus,
    Consistency,
    CreateJobResult,
    DeadLetter,
    Job,
    JobSpec,
    LimitsUpdate,
    OverlapPolicy,
    QueueCircuit,
    Run,
    RunPage,
    RunSort,
    RunWait,
    Schedule,
    SchedulePreview,
    TaskRef,
    json_payload,
)
from ._operations import (
    BackupResult,
    LeaderTransfer,
    MembershipChange,
    QueueInfo,
    WorkerInfo,
    download_backup,
    membership_from_proto,
    queues_from_proto,
    transfer_from_proto,
    worker_from_proto,
    workers_from_proto,
)
from ._run_handle import AsyncRunHandle, run_fields
from ._time import instant_ms, ms_or_alias
from ._transport import (
    DEFAULT_MAX_MESSAGE_BYTES,
    Backoff,
    ChannelConfig,
    ChannelPool,
    Failover,
    Router,
    TLSConfig,
    leader_hint,
    parse_servers,
    reason_of,
    retry_after_s,
    security_options,
)

__all__ = ["AsyncClient"]


# UNAVAILABLE: not the leader, no quorum, or the node is down. DEADLINE_EXCEEDED: this attempt
# timed out, the call's deadline may not have. Retrying a *mutating* call on either is safe only
# because every attempt carries the same request_id, which the cluster dedupes: the effect
# happens at most once and a retry gets the first answer again.
_RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})

_JOBS = "jobs"
_CLUSTER = "cluster"
_OPS = "operations"


def _new_request_id() -> str:
    return uuid.uuid4().hex


class AsyncClient(AccessCalls):
    """Client of a gnomon cluster for asyncio code.

    ``servers`` is a list of node addresses ("host:port") or one comma-separated string; any
    subset of the cluster works, writes are redirected to the leader. ``tls`` (True, or a
    ``TLSConfig`` naming the CA and a client certificate) and ``token`` (a bearer token) are
    how the cluster knows who calls. Every call has a deadline
    (``timeout_s``, overridable per call) within which it is retried on UNAVAILABLE and
    DEADLINE_EXCEEDED, at most ``retries`` times, following the leader and otherwise rotating
    through ``servers`` with jittered exponential backoff. ``attempt_timeout_s`` bounds one
    attempt, so that a node that swallows requests does not consume the whole deadline.
    """

    def __init__(
        self,
        servers: Sequence[str] | str,
        *,
        timeout_s: float = 10.0,
        retries: int = 10,
        attempt_timeout_s: float | None = 5.0,
        backoff_initial_s: float = 0.05,
        backoff_max_s: float = 1.0,
        tls: TLSConfig | bool | None = None,
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        keepalive_time_s: float = 10.0,
        keepalive_timeout_s: float = 5.0,
        channel_options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        if timeout_s <= 0:
            raise InvalidArgument("timeout_s must be positive")
        if retries < 0:
            raise InvalidArgument("retries must be >= 0")
        credentials, meta, tls_options = security_options(tls, token, credentials, metadata)
        self._config = ChannelConfig(
            servers=parse_servers(servers),
            credentials=credentials,
            metadata=meta,
            max_message_bytes=max_message_bytes,
            keepalive_time_s=keepalive_time_s,
            keepalive_timeout_s=keepalive_timeout_s,
            extra_options=(*tls_options, *channel_options),
        )
        self._timeout_s = timeout_s
        self._retries = retries
        self._attempt_timeout_s = attempt_timeout_s
        self._backoff = Backoff(initial_s=backoff_initial_s, maximum_s=backoff_max_s)
        self._rng = random.Random()
        self._pool = ChannelPool(self._config)
        self._router = Router(self._config.servers)
        self._stubs: dict[tuple[str, str], Any] = {}

    @property
    def servers(self) -> tuple[str, ...]:
        """The node addresses this client was given."""
        return self._config.servers

    @property
    def target(self) -> str:
        """The node the next call goes to first (the known leader, once one answered)."""
        return self._router.current()

    async def close(self) -> None:
        """Close the channels; the client cannot be used afterwards."""
        await self._pool.close()
        self._stubs.clear()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- jobs --------------------------------------------------------------------------------

    async def create_job(
        self, spec: JobSpec, *, request_id: str | None = None, timeout_s: float | None = None
    ) -> Job:
        """Create a job; AlreadyExists if the tenant has a job of that name."""
        req = api_pb2.CreateJobRequest(
            request_id=request_id or _new_request_id(), spec=cv.job_spec_to_proto(spec)
        )
        resp = await self._call(_JOBS, "CreateJob", req, timeout_s=timeout_s)
        return cv.job_from_proto(resp.job)

    async def create_jobs(
        self,
        specs: Iterable[JobSpec],
        *,
        request_id: str | None = None,
        batch_size: int = 1000,
        timeout_s: float | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[CreateJobResult]:
        """Create many jobs, ``batch_size`` specs per call (at most the cluster's
        ``create_jobs_max_specs``, 1000 by default); one result per spec, in order. A spec
        that cannot be created (bad, name taken, tenant at its quota) fails alone, in its
        result; the others are created. Each call is one Raft entry with its own request id
        (``request_id`` plus ``:<call number>`` when given), so a retry has one effect.
        ``progress(done, total)`` is called after each call. Raises only when a whole call
        fails (InvalidArgument for an oversized call, Unavailable...): the calls before it
        stand."""
        items = list(specs)
        if not 0 < batch_size:
            raise InvalidArgument("batch_size must be positive")
        base = request_id or _new_request_id()
        out: list[CreateJobResult] = []
        for number, start in enumerate(range(0, len(items), batch_size)):
            chunk = items[start:start + batch_size]
            req = api_pb2.CreateJobsRequest(
                request_id=f"{base}:{number}", specs=[cv.job_spec_to_proto(s) for s in chunk])
            resp = await self._call(_JOBS, "CreateJobs", req, timeout_s=timeout_s)
            out.extend(cv.create_result_from_proto(start + i, spec, r)
                       for i, (spec, r) in enumerate(zip(chunk, resp.results, strict=True)))
            if progress is not None:
                progress(len(out), len(items))
        return out

    async def get_job(
        self,
        job_id: str | None = None,
        *,
        tenant: str | None = None,
        name: str | None = None,
        consistency: Consistency = "linearizable",
        timeout_s: float | None = None,
    ) -> Job:
        """A job by id, or by ``name`` within ``tenant`` ("default" if omitted)."""
        req = api_pb2.GetJobRequest(
            job=cv.job_ref(job_id, tenant, name),
            consistency=cv.consistency_to_proto(consistency),
        )
        resp = await self._call(_JOBS, "GetJob", req, timeout_s=timeout_s)
        return cv.job_from_proto(resp.job)

    async def preview_schedule(
        self,
        job_id: str | None = None,
        *,
        schedule: Schedule | None = None,
        tenant: str | None = None,
        name: str | None = None,
        count: int = 5,
        after: datetime | int | None = None,
        timeout_s: float | None = None,
    ) -> SchedulePreview:
        """The next ``count`` instants a schedule fires at, in UTC and local time, with DST
        notes: a job's (``job_id``, or ``name`` in ``tenant``), or ``schedule`` (``name`` and
        ``tenant`` then say whose hash ``H`` uses). ``after``: an aware datetime or UTC ms;
        None means now. Changes nothing."""
        after_ms = 0 if after is None else instant_ms(after, "after") \
            if isinstance(after, datetime) else after
        req = cv.preview_request(schedule, job_id, tenant, name, count, after_ms)
        resp = await self._call(_JOBS, "PreviewSchedule", req, timeout_s=timeout_s)
        return cv.preview_from_proto(resp)

    async def list_jobs(
        self,
        tenant: str | None = None,
        *,
        limit: int = 100,
        after_job_id: str = "",
        consistency: Consistency = "linearizable",
        timeout_s: float | None = None,
    ) -> list[Job]:
        """One page of jobs (every tenant if ``tenant`` is None), by job id; pass the last
        job's id as ``after_job_id`` for the next page, or use ``iter_jobs``."""
        jobs, _ = await self._list_jobs_page(
            tenant,
            limit=limit,
            after_job_id=after_job_id,
            consistency=consistency,
            timeout_s=timeout_s,
        )
        return jobs

    async def iter_jobs(
        self,
        tenant: str | None = None,
        *,
        page_size: int = 100,
        consistency: Consistency = "linearizable",
        timeout_s: float | None = None,
    ) -> AsyncIterator[Job]:
        """Every job, fetched page by page (each page is one call with its own deadline)."""
        after = ""
        while True:
            jobs, next_after = await self._list_jobs_page(
                tenant,
                limit=page_size,
                after_job_id=after,
                consistency=consistency,
                timeout_s=timeout_s,
            )
            for job in jobs:
                yield job
            if not next_after or next_after == after:
                return
            after = next_after

    async def _list_jobs_page(
        self,
        tenant: str | None,
        *,
        limit: int,
        after_job_id: str,
        consistency: Consistency,
        timeout_s: float | None,
    ) -> tuple[list[Job], str]:
        req = api_pb2.ListJobsRequest(
            tenant=tenant or "",
            after_job_id=after_job_id,
            limit=limit,
            consistency=cv.consistency_to_proto(consistency),
        )
        resp = await self._call(_JOBS, "ListJobs", req, timeout_s=timeout_s)
        return [cv.job_from_proto(j) for j in resp.jobs], resp.next_after_job_id

    async def update_job(
        self,
        job_id: str | None,
        spec: JobSpec,
        *,
        expected_version: int = 0,
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> Job:
        """Replace a job's spec (tenant and name cannot change). ``job_id=None`` names the job
        by the spec's tenant and name. With ``expected_version`` the update applies only to that
        version, else Conflict."""
        ref = cv.job_ref(job_id, None, None) if job_id else cv.job_ref(None, spec.tenant, spec.name)
        req = api_pb2.UpdateJobRequest(
            request_id=request_id or _new_request_id(),
            job=ref,
            spec=cv.job_spec_to_proto(spec),
            expected_version=expected_version,
        )
        resp = await self._call(_JOBS, "UpdateJob", req, timeout_s=timeout_s)
        return cv.job_from_proto(resp.job)

    async def delete_job(
        self,
        job_id: str | None = None,
        *,
        tenant: str | None = None,
        name: str | None = None,
        expected_version: int = 0,
        cancel_running: bool = False,
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> None:
        """Delete a job: it fires no more, and the queued tasks of its unfinished runs are
        cancelled. Running (leased) tasks finish unless ``cancel_running``, which cancels them
        too and tells their workers to stop. The job's runs stay readable by run id and by
        ``list_runs(job_id)``; its name is free again at once. With ``expected_version`` the
        delete applies only to that version, else Conflict."""
        req = api_pb2.DeleteJobRequest(
            request_id=request_id or _new_request_id(),
            job=cv.job_ref(job_id, tenant, name),
            expected_version=expected_version,
            cancel_running=cancel_running,
        )
        await self._call(_JOBS, "DeleteJob", req, timeout_s=timeout_s)

    async def pause_job(
        self,
        job_id: str | None = None,
        *,
        tenant: str | None = None,
        name: str | None = None,
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> Job:
        """Stop firing a job (runs already started go on); ``resume_job`` undoes it."""
        req = api_pb2.PauseJobRequest(
            request_id=request_id or _new_request_id(), job=cv.job_ref(job_id, tenant, name)
        )
        resp = await self._call(_JOBS, "PauseJob", req, timeout_s=timeout_s)
        return cv.job_from_proto(resp.job)

    async def resume_job(
        self,
        job_id: str | None = None,
        *,
        tenant: str | None = None,
        name: str | None = None,
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> Job:
        """Resume fires; slots that passed while paused are not caught up."""
        req = api_pb2.ResumeJobRequest(
            request_id=request_id or _new_request_id(), job=cv.job_ref(job_id, tenant, name)
        )
        resp = await self._call(_JOBS, "ResumeJob", req, timeout_s=timeout_s)
        return cv.job_from_proto(resp.job)

    async def trigger_job(
        self,
        job_id: str | None = None,
        *,
        tenant: str | None = None,
        name: str | None = None,
        request_id: str | None = None,
        timeout_s: float | None = None,
        overlap_policy: OverlapPolicy | str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> AsyncRunHandle:
        """Start a run now, outside the schedule. Returns the run as created (a ``Run``) with
        ``await handle.wait()`` for its end and ``await handle.result()`` for its tasks'
        results. The job's overlap policy applies (the run may be skipped or queued, see
        ``run.reason``) unless ``overlap_policy`` overrides it for this trigger. ``params``
        (JSON-serialisable) is merged into every task's JSON payload for this run only."""
        req = api_pb2.TriggerJobRequest(
            request_id=request_id or _new_request_id(), job=cv.job_ref(job_id, tenant, name),
            overlap_policy=cv.overlap_to_proto(overlap_policy),
            params_json=json_payload(dict(params)).decode() if params is not None else "",
        )
        resp = await self._call(_JOBS, "TriggerJob", req, timeout_s=timeout_s)
        return AsyncRunHandle(**run_fields(cv.run_from_proto(resp.run)), _client=self)

    # --- runs --------------------------------------------------------------------------------

    async def get_run(
        self,
        run_id: str,
        *,
        consistency: Consistency = "linearizable",
        timeout_s: float | None = None,
    ) -> Run:
        """A run with its tasks and their attempt records; NotFound if there is none."""
        req = api_pb2.GetRunRequest(run_id=run_id, consistency=cv.consistency_to_proto(consistency))
        resp = await self._call(_JOBS, "GetRun", req, timeout_s=timeout_s)
        return cv.run_from_proto(resp.run)

    async def explain_run(
        self,
        run_id: str,
        *,
        consistency: Consistency = "linearizable",
        timeout_s: float | None = None,
    ) -> tuple[Run, list[RunWait]]:
        """Why a run is where it is: the run, and what it and each of its tasks wait for
        (empty once it ended), each bound with its value and where to change it."""
        req = api_pb2.ExplainRunRequest(run_id=run_id,
                                        consistency=cv.consistency_to_proto(consistency))
        resp = await self._call(_JOBS, "ExplainRun", req, timeout_s=timeout_s)
        return cv.run_from_proto(resp.run), [cv.run_wait_from_proto(w) for w in resp.waits]

    async def list_runs(
        self,
        job_id: str | None = None,
        *,
        tenant: str | None = None,
        name: str | None = None,
        limit: int = 50,
        before_ms: int = 0,
        consistency: Consistency = "linearizable",
        timeout_s: float | None = None,
        before: datetime | None = None,
    ) -> list[Run]:
        """A job's runs, newest first; ``before_ms`` (or ``before``, an aware datetime) pages
        back by scheduled time. A deleted job's runs are listed by its ``job_id`` (by name it
        is NotFound: the name may belong to a new job by now)."""
        req = api_pb2.ListRunsRequest(
            job=cv.job_ref(job_id, tenant, name),
            limit=limit,
            before_ms=ms_or_alias(
                "list_runs", "before_ms", before_ms, "before", before, instant_ms
            ),
            consistency=cv.consistency_to_proto(consistency),
        )
        resp = await self._call(_JOBS, "ListRuns", req, timeout_s=timeout_s)
        return [cv.run_from_proto(r) for r in resp.runs]

    async def list_runs_across_jobs(
        self,
        *,
        tenants: str | Sequence[str] | None = None,
        job_id: str | None = None,
        queue: str | None = None,
        states: str | Sequence[str] | None = None,
        triggers: str | Sequence[str] | None = None,
        since_ms: int = 0,
        until_ms: int = 0,
        late: bool = False,
        late_ms: int = 0,
        errors: bool = False,
        sort: RunSort | str = RunSort.CREATED_DESC,
        limit: int = 100,
        page_token: str = "",
        consistency: Consistency = "linearizable",
        timeout_s: float | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> RunPage:
        """One page of the runs in memory across jobs (the active ones and each job's most
        recent ended ones; older runs: ``list_runs`` per job). Every filter given must match:
        ``states`` / ``triggers`` any of those, ``queue`` any task on it, created in
        [``since``, ``until``), ``late`` (a scheduled run created more than ``late_ms``,
        default 1000, after it was due), ``errors`` (a task died or failed an attempt). A
        tenant's token sees only its tenants' runs. Pass the page's ``next_page_token`` with
        the same filters for the next page."""
        req = cv.runs_query(
            tenants=tenants, job_id=job_id, queue=queue, states=states, triggers=triggers,
            since_ms=ms_or_alias("list_runs_across_jobs", "since_ms", since_ms, "since",
                                 since, instant_ms) or 0,
            until_ms=ms_or_alias("list_runs_across_jobs", "until_ms", until_ms, "until",
                                 until, instant_ms) or 0,
            late=late, late_ms=late_ms, errors=errors, sort=sort, limit=limit,
            page_token=page_token, consistency=cv.consistency_to_proto(consistency),
        )
        resp = await self._call(_JOBS, "ListRunsAcrossJobs", req, timeout_s=timeout_s)
        return cv.run_page_from_proto(resp)

    async def wait_run(
        self, run_id: str, *, timeout_s: float = 60.0, poll_interval_s: float = 0.5
    ) -> Run:
        """Poll ``get_run`` until the run is terminal; DeadlineExceeded after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            remaining = deadline - loop.time()
            run = await self.get_run(run_id, timeout_s=max(0.001, min(self._timeout_s, remaining)))
            if run.done:
                return run
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise DeadlineExceeded(
                    f"run {run_id} is still {run.state} after {timeout_s:g}s",
                    code=grpc.StatusCode.DEADLINE_EXCEEDED,
                )
            await asyncio.sleep(min(poll_interval_s, remaining))

    async def cancel_run(
        self,
        run_id: str,
        *,
        reason: str = "",
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> Run:
        """Cancel every unfinished task of a run; running tasks are told to stop."""
        req = api_pb2.CancelRunRequest(
            request_id=request_id or _new_request_id(), run_id=run_id, reason=reason
        )
        resp = await self._call(_JOBS, "CancelRun", req, timeout_s=timeout_s)
        return cv.run_from_proto(resp.run)

    async def reset_circuit(
        self,
        job_id: str | None = None,
        *,
        tenant: str | None = None,
        name: str | None = None,
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> Job:
        """Close a job's circuit breaker by hand; returns the job (``job.circuit``)."""
        req = api_pb2.ResetCircuitRequest(request_id=request_id or _new_request_id(),
                                          job=cv.job_ref(job_id, tenant, name))
        resp = await self._call(_JOBS, "ResetCircuit", req, timeout_s=timeout_s)
        return cv.job_from_proto(resp.job)

    async def reset_queue_circuit(
        self, queue: str, *, tenant: str | None = None, request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> QueueCircuit:
        """Close a queue's circuit breaker by hand; returns it."""
        req = api_pb2.ResetCircuitRequest(request_id=request_id or _new_request_id(),
                                          tenant=tenant or "", queue=queue)
        resp = await self._call(_JOBS, "ResetCircuit", req, timeout_s=timeout_s)
        return cv.queue_circuit_from_proto(resp.queue_circuit)

    async def set_queue_circuit(
        self, queue: str, *, breaker: CircuitBreaker | None, tenant: str | None = None,
        request_id: str | None = None, timeout_s: float | None = None,
    ) -> QueueCircuit | None:
        """Give a tenant's queue a circuit breaker (fires of every job with a task on it are
        SKIPPED "circuit open: queue Q" while it is open), replace its rule, or remove it
        (``breaker=None``; returns None)."""
        req = api_pb2.SetQueueCircuitRequest(
            request_id=request_id or _new_request_id(), tenant=tenant or "", queue=queue,
            breaker=cv.breaker_to_proto(breaker) if breaker is not None else None)
        resp = await self._call(_JOBS, "SetQueueCircuit", req, timeout_s=timeout_s)
        return cv.queue_circuit_from_proto(resp.queue_circuit) \
            if resp.HasField("queue_circuit") else None

    async def list_queue_circuits(
        self, *, tenant: str | None = None, consistency: Consistency = "linearizable",
        timeout_s: float | None = None,
    ) -> list[QueueCircuit]:
        """The queues' circuit breakers (of one tenant, or every tenant you may read)."""
        req = api_pb2.ListQueueCircuitsRequest(
            tenant=tenant or "", consistency=cv.consistency_to_proto(consistency))
        resp = await self._call(_JOBS, "ListQueueCircuits", req, timeout_s=timeout_s)
        return [cv.queue_circuit_from_proto(m) for m in resp.queue_circuits]

    async def backfill_job(
        self,
        job_id: str | None = None,
        *,
        tenant: str | None = None,
        name: str | None = None,
        from_ms: int = 0,
        to_ms: int = 0,
        overlap_policy: OverlapPolicy | str | None = None,
        request_id: str | None = None,
        timeout_s: float | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
    ) -> Job:
        """Run every slot of the job's schedule in [from_ms, to_ms) (or [start, end), aware
        datetimes) that has not run yet (trigger ``backfill``), paced by the leader; a slot
        that already ran is not run again. Returns the job: ``job.backfill`` shows progress
        (poll ``get_job`` or use ``wait_backfill``)."""
        req = api_pb2.BackfillJobRequest(
            request_id=request_id or _new_request_id(), job=cv.job_ref(job_id, tenant, name),
            from_ms=ms_or_alias("backfill_job", "from_ms", from_ms, "start", start, instant_ms),
            to_ms=ms_or_alias("backfill_job", "to_ms", to_ms, "end", end, instant_ms),
            overlap_policy=cv.overlap_to_proto(overlap_policy))
        resp = await self._call(_JOBS, "BackfillJob", req, timeout_s=timeout_s)
        return cv.job_from_proto(resp.job)

    async def cancel_backfill(
        self, job_id: str | None = None, *, tenant: str | None = None,
        name: str | None = None, request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> Job:
        """Stop the job's running backfill: no further slots get runs (created ones go on)."""
        req = api_pb2.CancelBackfillRequest(request_id=request_id or _new_request_id(),
                                            job=cv.job_ref(job_id, tenant, name))
        resp = await self._call(_JOBS, "CancelBackfill", req, timeout_s=timeout_s)
        return cv.job_from_proto(resp.job)

    async def wait_backfill(
        self, job_id: str | None = None, *, tenant: str | None = None,
        name: str | None = None, timeout_s: float = 600.0, poll_interval_s: float = 0.5,
    ) -> Job:
        """Poll ``get_job`` until the job's backfill is done or cancelled; DeadlineExceeded
        after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            job = await self.get_job(job_id, tenant=tenant, name=name)
            if job.backfill is None or job.backfill.finished:
                return job
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise DeadlineExceeded(
                    f"the backfill of {job.job_id} is still running after {timeout_s:g}s "
                    f"({job.backfill.done_slots} of {job.backfill.total_slots} slots)",
                    code=grpc.StatusCode.DEADLINE_EXCEEDED)
            await asyncio.sleep(min(poll_interval_s, remaining))

    async def rerun_run(
        self, run_id: str, *, request_id: str | None = None, timeout_s: float | None = None
    ) -> AsyncRunHandle:
        """Run a failed or cancelled run again: a fresh attempt series for its dead,
        cancelled and upstream-failed tasks, succeeded ones kept. Returns a handle to wait on."""
        req = api_pb2.RerunRunRequest(request_id=request_id or _new_request_id(), run_id=run_id)
        resp = await self._call(_JOBS, "RerunRun", req, timeout_s=timeout_s)
        return AsyncRunHandle(**run_fields(cv.run_from_proto(resp.run)), _client=self)

    async def cancel_task(
        self,
        run_id: str,
        *,
        task_name: str,
        reason: str = "",
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> Run:
        """Cancel one task of a run (its worker is told); tasks waiting for it cannot run."""
        req = api_pb2.CancelTaskRequest(request_id=request_id or _new_request_id(),
                                        run_id=run_id, task_name=task_name, reason=reason)
        resp = await self._call(_JOBS, "CancelTask", req, timeout_s=timeout_s)
        return cv.run_from_proto(resp.run)

    async def retry_task(
        self,
        run_id: str,
        *,
        task_name: str,
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> AsyncRunHandle:
        """Retry one dead, cancelled or upstream-failed task (and those it blocks) with a
        fresh attempt series. Returns a handle to the run."""
        req = api_pb2.RetryTaskRequest(request_id=request_id or _new_request_id(),
                                       run_id=run_id, task_name=task_name)
        resp = await self._call(_JOBS, "RetryTask", req, timeout_s=timeout_s)
        return AsyncRunHandle(**run_fields(cv.run_from_proto(resp.run)), _client=self)

    # --- dead letters ------------------------------------------------------------------------

    async def list_dead_letters(
        self,
        tenant: str | None = None,
        *,
        limit: int = 100,
        consistency: Consistency = "linearizable",
        timeout_s: float | None = None,
    ) -> list[DeadLetter]:
        """Dead-lettered tasks (every tenant if ``tenant`` is None)."""
        req = api_pb2.ListDeadLettersRequest(
            tenant=tenant or "", limit=limit, consistency=cv.consistency_to_proto(consistency)
        )
        resp = await self._call(_JOBS, "ListDeadLetters", req, timeout_s=timeout_s)
        return [cv.dead_letter_from_proto(d) for d in resp.dead_letters]

    async def replay_dead_letters(
        self,
        tasks: Iterable[TaskRef | tuple[str, str]] | None = None,
        *,
        tenant: str | None = None,
        all: bool = False,
        reason: str = "",
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> list[TaskRef]:
        """Start a fresh attempt series (same idempotency key) for dead-lettered tasks: the
        named ``tasks``, or every one of ``tenant``, or with ``all=True`` every one of every
        tenant. ``reason`` goes to the audit log. Returns the tasks replayed."""
        refs = cv.task_refs_to_proto(tasks or ())
        chosen = sum((bool(refs), tenant is not None, all))
        if chosen != 1:
            raise InvalidArgument("name the tasks to replay, or a tenant, or pass all=True (one)")
        req = api_pb2.ReplayDeadLettersRequest(
            request_id=request_id or _new_request_id(), tasks=refs, tenant=tenant or "", all=all,
            reason=reason,
        )
        resp = await self._call(_JOBS, "ReplayDeadLetters", req, timeout_s=timeout_s)
        return [cv.task_ref_from_proto(r) for r in resp.replayed]

    async def discard_dead_letters(
        self,
        tasks: Iterable[TaskRef | tuple[str, str]],
        *,
        reason: str = "",
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> list[TaskRef]:
        """Drop the named dead letters from the queue for good (all or none; the tasks stay
        dead in their runs). ``reason`` goes to the audit log. Returns the tasks dropped."""
        refs = cv.task_refs_to_proto(tasks)
        if not refs:
            raise InvalidArgument("tasks: name at least one dead letter to discard")
        req = api_pb2.DiscardDeadLettersRequest(
            request_id=request_id or _new_request_id(), tasks=refs, reason=reason)
        resp = await self._call(_JOBS, "DiscardDeadLetters", req, timeout_s=timeout_s)
        return [cv.task_ref_from_proto(r) for r in resp.discarded]

    # --- cluster -----------------------------------------------------------------------------

    async def cluster_status(
        self,
        *,
        server: str | None = None,
        include_digest: bool = False,
        timeout_s: float | None = None,
    ) -> ClusterStatus:
        """The cluster as seen by ``server`` (a "host:port"; no leader following), or by
        whichever node answers: nodes, leader, Raft indexes, counts and the replicated
        limits. ``include_digest`` also hashes the node's whole state (``state_digest``;
        costs time proportional to the state on that node)."""
        resp = await self._call(
            _CLUSTER,
            "GetStatus",
            api_pb2.GetStatusRequest(include_digest=include_digest),
            timeout_s=timeout_s,
            address=server,
        )
        return cv.cluster_status_from_proto(resp)

    async def set_limits(
        self,
        *,
        dedupe_capacity: int | None = None,
        dedupe_max_age_ms: int | None = None,
        runs_retained_per_job: int | None = None,
        max_dead_letters: int | None = None,
        max_attempt_records: int | None = None,
        max_tokens_per_tenant: int | None = None,
        max_queue_circuits_per_tenant: int | None = None,
        expected_version: int = 0,
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> LimitsUpdate:
        """Change the cluster's replicated limits (see ``ClusterLimits``); limits not given
        keep their value. Returns every limit as it now is and the new limits version. With
        ``expected_version`` the change applies only at that version, else
        FailedPrecondition. InvalidArgument names a limit out of range."""
        limits = _limits_from_kwargs(
            dedupe_capacity=dedupe_capacity,
            dedupe_max_age_ms=dedupe_max_age_ms,
            runs_retained_per_job=runs_retained_per_job,
            max_dead_letters=max_dead_letters,
            max_attempt_records=max_attempt_records,
            max_tokens_per_tenant=max_tokens_per_tenant,
            max_queue_circuits_per_tenant=max_queue_circuits_per_tenant,
        )
        req = api_pb2.SetLimitsRequest(
            request_id=request_id or _new_request_id(),
            limits=cv.cluster_limits_to_proto(limits),
            expected_version=expected_version,
        )
        resp = await self._call(_CLUSTER, "SetLimits", req, timeout_s=timeout_s)
        return cv.limits_update_from_proto(resp)

    # --- operations ---------------------------------------------------------------------------

    async def transfer_leadership(
        self, *, to_node_id: str | None = None, timeout_s: float | None = None
    ) -> LeaderTransfer:
        """Hand leadership to ``to_node_id`` (default: the most caught-up follower); returns
        once another leader is known. FailedPrecondition when no follower could take over."""
        budget = self._timeout_s if timeout_s is None else timeout_s
        req = api_pb2.TransferLeadershipRequest(
            to_node_id=to_node_id or "", timeout_ms=int(max(1.0, min(budget - 0.5, 30.0)) * 1000)
        )
        resp = await self._call(_OPS, "TransferLeadership", req, timeout_s=timeout_s)
        return transfer_from_proto(resp)

    async def add_node(
        self, node_id: str, *, raft_address: str, grpc_address: str, http_address: str = "",
        catch_up_timeout_s: float | None = None, timeout_s: float | None = None,
    ) -> MembershipChange:
        """Make a running node (started with ``--join``) a voting member once it has caught up
        as a learner. One change at a time; adding a member again changes nothing."""
        req = api_pb2.AddNodeRequest(
            node_id=node_id, raft_address=raft_address, grpc_address=grpc_address,
            http_address=http_address,
            catch_up_timeout_ms=int((catch_up_timeout_s or 0) * 1000))
        if timeout_s is None:  # the leader's default catch-up bound is 120 s
            timeout_s = max(self._timeout_s, (catch_up_timeout_s or 120.0) + 15.0)
        resp = await self._call(_OPS, "AddNode", req, timeout_s=timeout_s, waits=True)
        return membership_from_proto(resp)

    async def remove_node(self, node_id: str, *, timeout_s: float | None = None
                          ) -> MembershipChange:
        """Remove a member (the leader hands over first when it is the one removed)."""
        resp = await self._call(_OPS, "RemoveNode", api_pb2.RemoveNodeRequest(node_id=node_id),
                                timeout_s=timeout_s, waits=True)
        return membership_from_proto(resp)

    async def create_backup(self, *, path: str, timeout_s: float | None = None) -> BackupResult:
        """Write a consistent backup of the cluster's replicated state (at a committed index)
        to the local file ``path``; its SHA-256 is checked against the leader's."""
        status = await self.cluster_status(timeout_s=timeout_s)
        address = status.leader_grpc_address or self._router.current()
        budget = self._timeout_s if timeout_s is None else timeout_s
        return await download_backup(
            self._pool, address, path, timeout_s=budget, metadata=self._config.metadata or None
        )

    async def list_queues(self, *, timeout_s: float | None = None) -> list[QueueInfo]:
        """Queues with ready backlog, oldest ready age, leased tasks and their workers."""
        resp = await self._call(_OPS, "ListQueues", api_pb2.ListQueuesRequest(),
                                timeout_s=timeout_s)
        return queues_from_proto(resp)

    async def list_workers(self, *, timeout_s: float | None = None) -> list[WorkerInfo]:
        """Workers connected to the leader: queues, credits, leases held."""
        resp = await self._call(_OPS, "ListWorkers", api_pb2.ListWorkersRequest(),
                                timeout_s=timeout_s)
        return workers_from_proto(resp)

    async def drain_worker(self, worker_id: str, *,
                           timeout_s: float | None = None) -> WorkerInfo:
        """Grant the connected worker ``worker_id`` nothing more; its leases run to their end
        (leader-local, for its stream). Admin only; NotFound when it is not connected."""
        resp = await self._call(_OPS, "DrainWorker",
                                api_pb2.DrainWorkerRequest(worker_id=worker_id),
                                timeout_s=timeout_s)
        return worker_from_proto(resp.worker)

    async def list_active_runs(
        self, *, tenant: str | None = None, limit: int = 100, timeout_s: float | None = None
    ) -> list[Run]:
        """Runs still running (every tenant unless ``tenant``), oldest first."""
        req = api_pb2.ListActiveRunsRequest(tenant=tenant or "", limit=limit)
        resp = await self._call(_OPS, "ListActiveRuns", req, timeout_s=timeout_s)
        return [cv.run_from_proto(r) for r in resp.runs]

    # --- the one retry loop ------------------------------------------------------------------

    def _stub(self, service: str, address: str) -> Any:
        key = (service, address)
        stub = self._stubs.get(key)
        if stub is None:
            channel = self._pool.get(address)
            if service == _JOBS:
                stub = api_pb2_grpc.JobServiceStub(channel)
            elif service == _OPS:
                stub = api_pb2_grpc.OperationsServiceStub(channel)
            elif service == ACCESS_SERVICE:
                stub = api_pb2_grpc.AccessServiceStub(channel)
            else:
                stub = api_pb2_grpc.ClusterServiceStub(channel)
            self._stubs[key] = stub
        return stub

    async def _call(
        self,
        service: str,
        method: str,
        request: Any,
        *,
        timeout_s: float | None,
        address: str | None = None,
        waits: bool = False,
    ) -> Any:
        """One logical call: attempts until success, a non-retryable status, ``retries``
        retries or the deadline. The request object (with its request_id) is sent unchanged by
        every attempt. ``waits``: the server works for a while before it answers (a member
        catching up): an attempt may take the whole remaining budget."""
        loop = asyncio.get_running_loop()
        budget = self._timeout_s if timeout_s is None else timeout_s
        start = loop.time()
        deadline = start + budget
        failover = Failover(self._router, self._backoff, self._rng, pinned=address is not None)
        addr = address if address is not None else self._router.current()
        # The caller's active span, when the application traces (gnomon.client.tracing).
        metadata = (*self._config.metadata, *tracing.outgoing_metadata()) or None
        attempts = 0
        last: grpc.aio.AioRpcError | None = None
        last_addr = addr
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0 or attempts > self._retries:
                raise self._gave_up(last, last_addr, attempts, loop.time() - start)
            per_attempt = remaining
            if self._attempt_timeout_s is not None and not waits:
                per_attempt = min(remaining, self._attempt_timeout_s)
            rpc = getattr(self._stub(service, addr), method)
            attempts += 1
            try:
                response = await rpc(request, timeout=per_attempt, metadata=metadata)
            except grpc.aio.AioRpcError as e:
                last, last_addr = e, addr
                wait_s = retry_after_s(e)
                if wait_s is not None and loop.time() + wait_s < deadline:
                    # Admission control said when to come back: the same node, after that.
                    await asyncio.sleep(wait_s)
                    continue
                if e.code() not in _RETRYABLE:
                    raise self._error(e, addr) from None
                step = failover.next(addr, leader_hint(e))
                addr = step.address
                if step.delay_s:
                    await asyncio.sleep(max(0.0, min(step.delay_s, deadline - loop.time())))
                continue
            failover.succeeded(addr)
            return response

    @staticmethod
    def _error(e: grpc.aio.AioRpcError, address: str) -> GnomonError:
        err = error_for_status(e.code(), e.details() or "", reason=reason_of(e))
        err.add_note(f"from gnomon node {address}")
        return err

    @staticmethod
    def _gave_up(
        last: grpc.aio.AioRpcError | None, address: str, attempts: int, elapsed: float
    ) -> GnomonError:
        if last is None:
            return DeadlineExceeded(
                "the call's deadline passed before an attempt was made",
                code=grpc.StatusCode.DEADLINE_EXCEEDED,
            )
        err = error_for_status(last.code(), last.details() or "", reason=reason_of(last))
        err.add_note(
            f"gave up after {attempts} attempts in {elapsed:.2f}s; last from gnomon node {address}"
        )
        return err


def _limits_from_kwargs(**values: int | None) -> ClusterLimits:
    given = {k: v for k, v in values.items() if v is not None}
    if not given:
        raise InvalidArgument("set_limits: give at least one limit to change")
    for key, value in given.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgument(f"{key}: expected an integer, got {value!r}")
        if not -(2**63) <= value < 2**63:
            raise InvalidArgument(f"{key}: {value} is outside the 64-bit range")
    return ClusterLimits(**given)
