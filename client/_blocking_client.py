"""``Client``: the blocking facade of ``AsyncClient``, running its calls on a private event loop
thread. Every call's retry and leader-following logic is ``AsyncClient``'s; this module only
moves calls onto the loop thread and back."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import grpc

from . import tracing
from ._access import BlockingAccessCalls
from ._client import AsyncClient
from ._models import (
    CircuitBreaker,
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
)
from ._operations import BackupResult, LeaderTransfer, MembershipChange, QueueInfo, WorkerInfo
from ._run_handle import RunHandle, run_fields
from ._transport import DEFAULT_MAX_MESSAGE_BYTES, TLSConfig

__all__ = ["Client"]

T = TypeVar("T")


class _LoopThread:
    """An event loop running in a daemon thread, for the blocking facade."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="gnomon-client", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking gnomon Client cannot be called from its own loop")
        future = asyncio.run_coroutine_threadsafe(tracing.carried(coro), self._loop)
        try:
            return future.result()
        except BaseException:
            # KeyboardInterrupt while waiting: do not leave the call running behind the caller.
            future.cancel()
            raise

    def stop(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


class Client(BlockingAccessCalls):
    """Blocking client of a gnomon cluster: the same calls and options as ``AsyncClient``,
    run on a private event loop thread. Thread-safe; close it (or use ``with``)."""

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
        self._async = AsyncClient(
            servers,
            timeout_s=timeout_s,
            retries=retries,
            attempt_timeout_s=attempt_timeout_s,
            backoff_initial_s=backoff_initial_s,
            backoff_max_s=backoff_max_s,
            tls=tls,
            token=token,
            credentials=credentials,
            metadata=metadata,
            max_message_bytes=max_message_bytes,
            keepalive_time_s=keepalive_time_s,
            keepalive_timeout_s=keepalive_timeout_s,
            channel_options=channel_options,
        )
        self._config = self._async._config
        self._loop = _LoopThread()
        self._closed = False

    @property
    def servers(self) -> tuple[str, ...]:
        """The node addresses this client was given."""
        return self._async.servers

    @property
    def target(self) -> str:
        """The node the next call goes to first (the known leader, once one answered)."""
        return self._async.target

    def close(self) -> None:
        """Close the channels and stop the loop thread; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self._async.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("the gnomon client is closed")
        return self._loop.run(coro)

    # --- jobs --------------------------------------------------------------------------------

    def create_job(
        self, spec: JobSpec, *, request_id: str | None = None, timeout_s: float | None = None
    ) -> Job:
        """Create a job; AlreadyExists if the tenant has a job of that name. A retry with the
        same ``request_id`` has one effect (every attempt of this call reuses it)."""
        return self._run(self._async.create_job(spec, request_id=request_id, timeout_s=timeout_s))

    def create_jobs(
        self,
        specs: Iterable[JobSpec],
        *,
        request_id: str | None = None,
        batch_size: int = 1000,
        timeout_s: float | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[CreateJobResult]:
        """Create many jobs, ``batch_size`` per call; one result per spec, in order (a spec
        that cannot be created fails alone); see ``AsyncClient.create_jobs``."""
        return self._run(self._async.create_jobs(
            specs, request_id=request_id, batch_size=batch_size, timeout_s=timeout_s,
            progress=progress))

    def get_job(
        self,
        job_id: str | None = None,
        *,
        tenant: str | None = None,
        name: str | None = None,
        consistency: Consistency = "linearizable",
        timeout_s: float | None = None,
    ) -> Job:
        """A job by id, or by ``name`` within ``tenant`` ("default" if omitted); NotFound if
        there is none."""
        return self._run(
            self._async.get_job(
                job_id, tenant=tenant, name=name, consistency=consistency, timeout_s=timeout_s
            )
        )

    def preview_schedule(
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
        """The next ``count`` instants a schedule fires at (a job's, or ``schedule``), in UTC
        and local time, with DST notes; see ``AsyncClient.preview_schedule``."""
        return self._run(
            self._async.preview_schedule(
                job_id, schedule=schedule, tenant=tenant, name=name, count=count, after=after,
                timeout_s=timeout_s,
            )
        )

    def list_jobs(
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
        return self._run(
            self._async.list_jobs(
                tenant,
                limit=limit,
                after_job_id=after_job_id,
                consistency=consistency,
                timeout_s=timeout_s,
            )
        )

    def iter_jobs(
        self,
        tenant: str | None = None,
        *,
        page_size: int = 100,
        consistency: Consistency = "linearizable",
        timeout_s: float | None = None,
    ) -> Iterator[Job]:
        """Every job (of ``tenant``, or of every tenant), fetched page by page as the
        iterator is consumed; each page is one call with its own deadline."""
        after = ""
        while True:
            jobs, next_after = self._run(
                self._async._list_jobs_page(
                    tenant,
                    limit=page_size,
                    after_job_id=after,
                    consistency=consistency,
                    timeout_s=timeout_s,
                )
            )
            yield from jobs
            if not next_after or next_after == after:
                return
            after = next_after

    def update_job(
        self,
        job_id: str | None,
        spec: JobSpec,
        *,
        expected_version: int = 0,
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> Job:
        """Replace a job's spec (tenant and name cannot change). ``job_id=None`` names the job
        by the spec's tenant and name. With ``expected_version`` the update applies only to
        that version, else Conflict."""
        return self._run(
            self._async.update_job(
                job_id,
                spec,
                expected_version=expected_version,
                request_id=request_id,
                timeout_s=timeout_s,
            )
        )

    def delete_job(
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
        ``list_runs(job_id)``. With ``expected_version`` the delete applies only to that
        version, else Conflict."""
        self._run(
            self._async.delete_job(
                job_id,
                tenant=tenant,
                name=name,
                expected_version=expected_version,
                cancel_running=cancel_running,
                request_id=request_id,
                timeout_s=timeout_s,
            )
        )

    def pause_job(
        self,
        job_id: str | None = None,
        *,
        tenant: str | None = None,
        name: str | None = None,
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> Job:
        """Stop firing a job (runs already started go on); ``resume_job`` undoes it."""
        return self._run(
            self._async.pause_job(
                job_id, tenant=tenant, name=name, request_id=request_id, timeout_s=timeout_s
            )
        )

    def resume_job(
        self,
        job_id: str | None = None,
        *,
        tenant: str | None = None,
        name: str | None = None,
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> Job:
        """Resume fires; slots that passed while paused are not caught up."""
        return self._run(
            self._async.resume_job(
                job_id, tenant=tenant, name=name, request_id=request_id, timeout_s=timeout_s
            )
        )

    def trigger_job(
        self,
        job_id: str | None = None,
        *,
        tenant: str | None = None,
        name: str | None = None,
        request_id: str | None = None,
        timeout_s: float | None = None,
        overlap_policy: OverlapPolicy | str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> RunHandle:
        """Start a run now, outside the schedule. Returns the run as created (a ``Run``) with
        ``handle.wait()`` for its end and ``handle.result()`` for its tasks' results. The
        job's overlap policy applies unless ``overlap_policy`` overrides it for this call;
        ``params`` is merged into every task's JSON payload for this run."""
        run = self._run(
            self._async.trigger_job(
                job_id, tenant=tenant, name=name, request_id=request_id, timeout_s=timeout_s,
                overlap_policy=overlap_policy, params=params,
            )
        )
        return RunHandle(**run_fields(run), _client=self)

    # --- runs --------------------------------------------------------------------------------

    def get_run(
        self,
        run_id: str,
        *,
        consistency: Consistency = "linearizable",
        timeout_s: float | None = None,
    ) -> Run:
        """A run with its tasks and their attempt records; NotFound if there is none."""
        return self._run(self._async.get_run(run_id, consistency=consistency, timeout_s=timeout_s))

    def list_runs(
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
        is NotFound)."""
        return self._run(
            self._async.list_runs(
                job_id,
                tenant=tenant,
                name=name,
                limit=limit,
                before_ms=before_ms,
                consistency=consistency,
                timeout_s=timeout_s,
                before=before,
            )
        )

    def wait_run(
        self, run_id: str, *, timeout_s: float = 60.0, poll_interval_s: float = 0.5
    ) -> Run:
        """Poll ``get_run`` until the run is terminal and return it; DeadlineExceeded after
        ``timeout_s``."""
        return self._run(
            self._async.wait_run(run_id, timeout_s=timeout_s, poll_interval_s=poll_interval_s)
        )

    def reset_circuit(
        self,
        job_id: str | None = None,
        *,
        tenant: str | None = None,
        name: str | None = None,
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> Job:
        """Close a job's circuit breaker by hand; returns the job (``job.circuit``)."""
        return self._run(self._async.reset_circuit(
            job_id, tenant=tenant, name=name, request_id=request_id, timeout_s=timeout_s))

    def reset_queue_circuit(
        self, queue: str, *, tenant: str | None = None, request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> QueueCircuit:
        """Close a queue's circuit breaker by hand; returns it."""
        return self._run(self._async.reset_queue_circuit(
            queue, tenant=tenant, request_id=request_id, timeout_s=timeout_s))

    def set_queue_circuit(
        self, queue: str, *, breaker: CircuitBreaker | None, tenant: str | None = None,
        request_id: str | None = None, timeout_s: float | None = None,
    ) -> QueueCircuit | None:
        """Give a tenant's queue a circuit breaker, replace its rule, or remove it (None)."""
        return self._run(self._async.set_queue_circuit(
            queue, breaker=breaker, tenant=tenant, request_id=request_id, timeout_s=timeout_s))

    def list_queue_circuits(
        self, *, tenant: str | None = None, consistency: Consistency = "linearizable",
        timeout_s: float | None = None,
    ) -> list[QueueCircuit]:
        """The queues' circuit breakers (of one tenant, or every tenant you may read)."""
        return self._run(self._async.list_queue_circuits(
            tenant=tenant, consistency=consistency, timeout_s=timeout_s))

    def backfill_job(
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
        """Run every slot of the job's schedule in [from_ms, to_ms) that has not run yet
        (trigger ``backfill``), paced by the leader; ``job.backfill`` shows progress."""
        return self._run(self._async.backfill_job(
            job_id, tenant=tenant, name=name, from_ms=from_ms, to_ms=to_ms,
            overlap_policy=overlap_policy, request_id=request_id, timeout_s=timeout_s,
            start=start, end=end))

    def cancel_backfill(
        self, job_id: str | None = None, *, tenant: str | None = None,
        name: str | None = None, request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> Job:
        """Stop the job's running backfill: no further slots get runs (created ones go on)."""
        return self._run(self._async.cancel_backfill(
            job_id, tenant=tenant, name=name, request_id=request_id, timeout_s=timeout_s))

    def wait_backfill(
        self, job_id: str | None = None, *, tenant: str | None = None,
        name: str | None = None, timeout_s: float = 600.0, poll_interval_s: float = 0.5,
    ) -> Job:
        """Poll until the job's backfill is done or cancelled; DeadlineExceeded after
        ``timeout_s``."""
        return self._run(self._async.wait_backfill(
            job_id, tenant=tenant, name=name, timeout_s=timeout_s,
            poll_interval_s=poll_interval_s))

    def rerun_run(
        self, run_id: str, *, request_id: str | None = None, timeout_s: float | None = None
    ) -> RunHandle:
        """Run a failed or cancelled run again (its dead, cancelled and upstream-failed tasks;
        succeeded ones kept); a handle to wait on."""
        run = self._run(self._async.rerun_run(run_id, request_id=request_id,
                                              timeout_s=timeout_s))
        return RunHandle(**run_fields(run), _client=self)

    def cancel_task(
        self,
        run_id: str,
        *,
        task_name: str,
        reason: str = "",
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> Run:
        """Cancel one task of a run (its worker is told); tasks waiting for it cannot run."""
        return self._run(self._async.cancel_task(run_id, task_name=task_name, reason=reason,
                                                 request_id=request_id, timeout_s=timeout_s))

    def retry_task(
        self,
        run_id: str,
        *,
        task_name: str,
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> RunHandle:
        """Retry one dead, cancelled or upstream-failed task (and those it blocks)."""
        run = self._run(self._async.retry_task(run_id, task_name=task_name, request_id=request_id,
                                               timeout_s=timeout_s))
        return RunHandle(**run_fields(run), _client=self)

    def cancel_run(
        self,
        run_id: str,
        *,
        reason: str = "",
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> Run:
        """Cancel every unfinished task of a run; the workers running its tasks are told to
        stop at once. Returns the run as cancelled."""
        return self._run(
            self._async.cancel_run(
                run_id, reason=reason, request_id=request_id, timeout_s=timeout_s
            )
        )

    # --- dead letters ------------------------------------------------------------------------

    def list_dead_letters(
        self,
        tenant: str | None = None,
        *,
        limit: int = 100,
        consistency: Consistency = "linearizable",
        timeout_s: float | None = None,
    ) -> list[DeadLetter]:
        """Dead-lettered tasks (every tenant if ``tenant`` is None)."""
        return self._run(
            self._async.list_dead_letters(
                tenant, limit=limit, consistency=consistency, timeout_s=timeout_s
            )
        )

    def explain_run(
        self,
        run_id: str,
        *,
        consistency: Consistency = "linearizable",
        timeout_s: float | None = None,
    ) -> tuple[Run, list[RunWait]]:
        """Why a run is where it is: the run, and what it and each of its tasks wait for
        (empty once it ended), each bound with its value and where to change it."""
        return self._run(
            self._async.explain_run(run_id, consistency=consistency, timeout_s=timeout_s)
        )

    def replay_dead_letters(
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
        return self._run(
            self._async.replay_dead_letters(
                tasks, tenant=tenant, all=all, reason=reason, request_id=request_id,
                timeout_s=timeout_s
            )
        )

    def discard_dead_letters(
        self,
        tasks: Iterable[TaskRef | tuple[str, str]],
        *,
        reason: str = "",
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> list[TaskRef]:
        """Drop the named dead letters from the queue for good (all or none; the tasks stay
        dead in their runs). ``reason`` goes to the audit log. Returns the tasks dropped."""
        return self._run(
            self._async.discard_dead_letters(
                tasks, reason=reason, request_id=request_id, timeout_s=timeout_s
            )
        )

    # --- cluster -----------------------------------------------------------------------------

    def cluster_status(
        self,
        *,
        server: str | None = None,
        include_digest: bool = False,
        timeout_s: float | None = None,
    ) -> ClusterStatus:
        """The cluster as seen by ``server`` (a "host:port"; no leader following), or by
        whichever node answers: nodes, leader, Raft indexes, counts and the replicated
        limits. ``include_digest`` also hashes the node's whole state (``state_digest``)."""
        return self._run(
            self._async.cluster_status(
                server=server, include_digest=include_digest, timeout_s=timeout_s
            )
        )

    def transfer_leadership(
        self, *, to_node_id: str | None = None, timeout_s: float | None = None
    ) -> LeaderTransfer:
        """Hand leadership to ``to_node_id`` (default: the most caught-up follower); returns
        once another leader is known. FailedPrecondition when no follower could take over."""
        return self._run(self._async.transfer_leadership(to_node_id=to_node_id, timeout_s=timeout_s))

    def add_node(
        self, node_id: str, *, raft_address: str, grpc_address: str, http_address: str = "",
        catch_up_timeout_s: float | None = None, timeout_s: float | None = None,
    ) -> MembershipChange:
        """Make a running node (started with ``--join``) a voting member once it has caught up
        as a learner. One change at a time; adding a member again changes nothing."""
        return self._run(self._async.add_node(
            node_id, raft_address=raft_address, grpc_address=grpc_address,
            http_address=http_address, catch_up_timeout_s=catch_up_timeout_s,
            timeout_s=timeout_s))

    def remove_node(self, node_id: str, *, timeout_s: float | None = None) -> MembershipChange:
        """Remove a member (the leader hands over first when it is the one removed)."""
        return self._run(self._async.remove_node(node_id, timeout_s=timeout_s))

    def create_backup(self, *, path: str, timeout_s: float | None = None) -> BackupResult:
        """Write a consistent backup of the cluster's replicated state (at a committed index)
        to the local file ``path``; its SHA-256 is checked against the leader's."""
        return self._run(self._async.create_backup(path=path, timeout_s=timeout_s))

    def list_queues(self, *, timeout_s: float | None = None) -> list[QueueInfo]:
        """Queues with ready backlog, oldest ready age, leased tasks and their workers."""
        return self._run(self._async.list_queues(timeout_s=timeout_s))

    def drain_worker(self, worker_id: str, *, timeout_s: float | None = None) -> WorkerInfo:
        """Grant the connected worker nothing more; its leases run to their end."""
        return self._run(self._async.drain_worker(worker_id, timeout_s=timeout_s))

    def list_workers(self, *, timeout_s: float | None = None) -> list[WorkerInfo]:
        """Workers connected to the leader: queues, credits, leases held."""
        return self._run(self._async.list_workers(timeout_s=timeout_s))

    def list_runs_across_jobs(
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
        """One page of the runs in memory across jobs, filtered and sorted
        (``AsyncClient.list_runs_across_jobs``); ``next_page_token`` continues it."""
        return self._run(self._async.list_runs_across_jobs(
            tenants=tenants, job_id=job_id, queue=queue, states=states, triggers=triggers,
            since_ms=since_ms, until_ms=until_ms, late=late, late_ms=late_ms, errors=errors,
            sort=sort, limit=limit, page_token=page_token, consistency=consistency,
            timeout_s=timeout_s, since=since, until=until))

    def list_active_runs(
        self, *, tenant: str | None = None, limit: int = 100, timeout_s: float | None = None
    ) -> list[Run]:
        """Runs still running (every tenant unless ``tenant``), oldest first."""
        return self._run(self._async.list_active_runs(tenant=tenant, limit=limit, timeout_s=timeout_s))

    def set_limits(
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
        FailedPrecondition."""
        return self._run(
            self._async.set_limits(
                dedupe_capacity=dedupe_capacity,
                dedupe_max_age_ms=dedupe_max_age_ms,
                runs_retained_per_job=runs_retained_per_job,
                max_dead_letters=max_dead_letters,
                max_attempt_records=max_attempt_records,
                max_tokens_per_tenant=max_tokens_per_tenant,
                max_queue_circuits_per_tenant=max_queue_circuits_per_tenant,
                expected_version=expected_version,
                request_id=request_id,
                timeout_s=timeout_s,
            )
        )
