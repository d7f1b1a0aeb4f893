"""Jobs: CreateJob(s), UpdateJob, DeleteJob, SetPaused, the paging index, and the version,
identity, name and quota checks.

Imports `runs` (a deleted job's runs end, an update may start queued runs) and `common`.
"""

from __future__ import annotations

from typing import cast

from gnomon.node.core import access
from gnomon.node.core.commands import CreateJob, CreateJobs, DeleteJob, SetPaused, UpdateJob
from gnomon.node.core.common import Ctx, _find_job
from gnomon.node.core.errors import Code, Rejected
from gnomon.node.core.index import JobOrder
from gnomon.node.core.model import Job, JobSpec, State
from gnomon.node.core.results import Done, JobReply, JobsReply, Reply
from gnomon.node.core.runs import _remove_job, _start_queued
from gnomon.node.core.validate import validate_spec


def _create_job(ctx: Ctx, cmd: CreateJob) -> Reply:
    state, spec = ctx.state, cmd.spec
    rejected = (
        validate_spec(spec)
        or _check_name_free(state, spec)
        or _check_job_quota(state, spec.tenant, access.max_jobs(state.access, spec.tenant,
                                                                cmd.max_jobs_per_tenant))
        or access.check_payload_quota(state.access, spec.tenant, access.payload_bytes(spec))
    )
    if rejected:
        return rejected
    state.job_seq += 1
    job_id = f"j{state.job_seq}"
    state.jobs[job_id] = Job(
        job_id=job_id,
        spec=spec,
        version=1,
        next_fire_ms=cmd.next_fire_ms,
        paused=spec.paused,
        created_ms=ctx.now,
        updated_ms=ctx.now,
    )
    state.job_names[(spec.tenant, spec.name)] = job_id
    state.jobs_per_tenant[spec.tenant] = state.jobs_per_tenant.get(spec.tenant, 0) + 1
    state.access.add_payload(spec.tenant, access.payload_bytes(spec))
    index_job(state, state.job_seq, spec.tenant)
    ctx.effects.jobs.append(job_id)
    return JobReply(job_id=job_id, version=1)


def _create_jobs(ctx: Ctx, cmd: CreateJobs) -> Reply:
    """Each item on its own, in order: a rejected item changes nothing, the others apply."""
    return JobsReply(items=tuple(
        cast(JobReply | Rejected, _create_job(
            ctx, CreateJob("", item.spec, item.next_fire_ms, cmd.max_jobs_per_tenant)))
        for item in cmd.items))


def index_job(state: State, seq: int, tenant: str) -> None:
    """Add a job to the derived paging indexes (also used when a snapshot is restored)."""
    state.job_order.add(seq)
    order = state.tenant_job_order.get(tenant)
    if order is None:
        order = state.tenant_job_order[tenant] = JobOrder()
    order.add(seq)


def _update_job(ctx: Ctx, cmd: UpdateJob) -> Reply:
    job = _find_job(ctx.state, cmd.job_id)
    if isinstance(job, Rejected):
        return job
    rejected = (
        _check_version(job, cmd.expected_version)
        or _check_same_identity(job, cmd.spec)
        or validate_spec(cmd.spec)
        or access.check_payload_quota(ctx.state.access, job.spec.tenant,
                                      access.payload_bytes(cmd.spec)
                                      - access.payload_bytes(job.spec))
    )
    if rejected:
        return rejected
    # An unchanged schedule keeps its slot: an already-due fire must not be lost.
    if cmd.spec.schedule != job.spec.schedule:
        job.next_fire_ms = cmd.next_fire_ms
        job.span_open = False  # the next fire's slot is no neighbour of the last one
    ctx.state.access.add_payload(job.spec.tenant, access.payload_bytes(cmd.spec)
                                 - access.payload_bytes(job.spec))
    job.spec = cmd.spec
    _bump_version(ctx, job)
    _start_queued(ctx, job.job_id)  # a raised max_active_runs lets them go
    return JobReply(job_id=job.job_id, version=job.version)


def _delete_job(ctx: Ctx, cmd: DeleteJob) -> Reply:
    state = ctx.state
    job = _find_job(state, cmd.job_id)
    if isinstance(job, Rejected):
        return job
    rejected = _check_version(job, cmd.expected_version)
    if rejected:
        return rejected
    _remove_job(ctx, job, cmd.cancel_running)
    return Done()


def _set_paused(ctx: Ctx, cmd: SetPaused) -> Reply:
    job = _find_job(ctx.state, cmd.job_id)
    if isinstance(job, Rejected):
        return job
    if job.paused == cmd.paused:
        return JobReply(job_id=job.job_id, version=job.version)
    job.paused = cmd.paused
    job.span_open = False  # the slots of the paused time never fire
    if not cmd.paused:
        # No catch-up of the paused period: resume at the leader's next slot after now.
        job.next_fire_ms = cmd.next_fire_ms
    _bump_version(ctx, job)
    return JobReply(job_id=job.job_id, version=job.version)


def _check_version(job: Job, expected: int) -> Rejected | None:
    if expected != 0 and expected != job.version:
        return Rejected(
            Code.FAILED_PRECONDITION,
            f"expected_version: job {job.job_id!r} is at version {job.version}, not {expected}",
        )
    return None


def _check_same_identity(job: Job, spec: JobSpec) -> Rejected | None:
    if spec.tenant != job.spec.tenant:
        return Rejected(
            Code.INVALID_ARGUMENT,
            f"spec.tenant: job {job.job_id!r} belongs to tenant {job.spec.tenant!r}, "
            f"not {spec.tenant!r} (a job cannot change tenant)",
        )
    if spec.name != job.spec.name:
        return Rejected(
            Code.INVALID_ARGUMENT,
            f"spec.name: job {job.job_id!r} is named {job.spec.name!r}, not {spec.name!r} "
            "(a job cannot be renamed)",
        )
    return None


def _check_name_free(state: State, spec: JobSpec) -> Rejected | None:
    if (spec.tenant, spec.name) in state.job_names:
        return Rejected(
            Code.ALREADY_EXISTS,
            f"spec.name: tenant {spec.tenant!r} already has a job named {spec.name!r}",
        )
    return None


def _check_job_quota(state: State, tenant: str, limit: int) -> Rejected | None:
    if limit <= 0:
        return None
    count = state.jobs_per_tenant.get(tenant, 0)
    if count >= limit:
        return Rejected(
            Code.RESOURCE_EXHAUSTED,
            f"spec.tenant: tenant {tenant!r} already has {count} jobs, the limit is {limit}",
        )
    return None


def _bump_version(ctx: Ctx, job: Job) -> None:
    job.version += 1
    job.updated_ms = ctx.now
    ctx.effects.jobs.append(job.job_id)


HANDLER_PAIRS = [(CreateJob, _create_job), (CreateJobs, _create_jobs), (UpdateJob, _update_job), (DeleteJob, _delete_job), (SetPaused, _set_paused)]
