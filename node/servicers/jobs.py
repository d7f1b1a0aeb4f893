"""JobService: translate requests into commands and replies into messages; nothing else."""

from __future__ import annotations

import dataclasses

import grpc

from gnomon.node import codec
from gnomon.node.clock import wall_ms
from gnomon.node.core import commands as c
from gnomon.node.core.model import DEFAULT_TENANT, ScheduleKind
from gnomon.node.schedules import first_fire_ms, job_hash_id, next_fire_after
from gnomon.node.servicers.base import ServicerBase, translated
from gnomon.node.servicers.errors import ServiceError, check
from gnomon.node.state_codec import decode_run
from gnomon.node.validate import validate_request_id, validate_spec
from gnomon.v1 import api_pb2, api_pb2_grpc, types_pb2

MAX_PAGE = 1000


def _page(limit: int, default: int) -> int:
    if limit < 0:
        raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT, "limit: must not be negative")
    return min(limit or default, MAX_PAGE)


class JobServicer(ServicerBase, api_pb2_grpc.JobServiceServicer):
    # -- helpers -----------------------------------------------------------------------------

    def _job_id(self, ref: api_pb2.JobRef) -> str:
        with self.lock:
            st = self.node.replica.state
            if ref.job_id:
                if ref.job_id in st.jobs:
                    return ref.job_id
                raise ServiceError(grpc.StatusCode.NOT_FOUND, f"job.job_id: no job {ref.job_id!r}")
            if not ref.name:
                raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                                   "job: set job_id, or tenant and name")
            key = (ref.tenant or DEFAULT_TENANT, ref.name)
            if key not in st.job_names:
                raise ServiceError(grpc.StatusCode.NOT_FOUND,
                                   f"job.name: tenant {key[0]!r} has no job named {key[1]!r}")
            return st.job_names[key]

    async def _write_job_id(self, ref: api_pb2.JobRef, request_id: str) -> str:
        """`_job_id` for a write. Only the leader resolves, and a miss is confirmed after a
        barrier: a follower or a deposed leader must not answer NOT_FOUND for a job the
        cluster has. A retry of a request that already applied (and, say, deleted the job)
        goes on to apply, which answers it from the dedupe table with the first answer.
        (Both found by the jepsen register workload.)"""
        self.require_leader()
        try:
            return self._job_id(ref)
        except ServiceError as exc:
            if exc.code != grpc.StatusCode.NOT_FOUND:
                raise
        await self.node.proposer.propose(c.Barrier())
        try:
            return self._job_id(ref)
        except ServiceError:
            with self.lock:
                if request_id and request_id in self.node.replica.state.dedupe:
                    return ref.job_id
            raise

    def _job_proto(self, job_id: str) -> types_pb2.Job:
        with self.lock:
            job = self.node.replica.state.jobs.get(job_id)
            if job is None:
                raise ServiceError(grpc.StatusCode.NOT_FOUND, f"job_id: job {job_id!r} was deleted")
            return codec.job_to_proto(job)

    def _job_as_written(self, reply, spec=None) -> types_pb2.Job:
        """The job as this request left it. A later write (or delete) that committed before
        this answer was built must not show through: a client doing optimistic concurrency
        would take another writer's version for its own (found by the jepsen register
        workload). Fields no request sets (next fire, timestamps) are the current ones."""
        with self.lock:
            job = self.node.replica.state.jobs.get(reply.job_id)
            out = codec.job_to_proto(job) if job is not None else types_pb2.Job(
                job_id=reply.job_id)
        if job is None or out.version != reply.version:
            out.version = reply.version
            if spec is not None:
                out.spec.CopyFrom(codec.spec_to_proto(spec))
        return out

    def _run_proto(self, run_id: str) -> types_pb2.Run:
        with self.lock:
            run = self.node.replica.state.runs.get(run_id)
            if run is not None:
                return codec.run_to_proto(run)
        data = self.node.replica.history.get(run_id)
        if data is None:
            raise ServiceError(grpc.StatusCode.NOT_FOUND, f"run_id: no run {run_id!r}")
        return codec.run_to_proto(decode_run(data))

    def _now_ms(self) -> int:
        """Never before cluster time: a slot computed from it is after every fired slot."""
        with self.lock:
            return max(wall_ms(), self.node.replica.state.clock_ms)

    def _spec(self, msg: types_pb2.JobSpec):
        return validate_spec(codec.spec_from_proto(msg), self.node.spec_limits)

    async def _propose(self, command):
        self.require_leader()
        if "no-dedupe" in self.node.config.canaries:  # test-only jepsen canary
            command = dataclasses.replace(command, request_id="")
        return check(await self.node.proposer.propose(command))

    # -- jobs --------------------------------------------------------------------------------

    @translated
    async def CreateJob(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        spec = self._spec(request.spec)
        first = first_fire_ms(spec.schedule, self._now_ms(), hash_id=job_hash_id(spec.tenant, spec.name))
        reply = await self._propose(c.CreateJob(request.request_id, spec, first,
                                                self.node.config.max_jobs_per_tenant))
        return api_pb2.CreateJobResponse(job=self._job_as_written(reply, spec))

    @translated
    async def GetJob(self, request, context):  # noqa: N802
        await self.before_read(request.consistency)
        return api_pb2.GetJobResponse(job=self._job_proto(self._job_id(request.job)))

    @translated
    async def ListJobs(self, request, context):  # noqa: N802
        await self.before_read(request.consistency)
        limit = _page(request.limit, 100)
        out = api_pb2.ListJobsResponse()
        with self.lock:
            jobs = self.node.replica.state.jobs
            ids = sorted(
                (j for j in jobs
                 if (not request.tenant or jobs[j].spec.tenant == request.tenant)
                 and _after(j, request.after_job_id)),
                key=_job_sort_key,
            )
            for job_id in ids[:limit]:
                codec.job_to_proto(jobs[job_id], out.jobs.add())
        if len(ids) > limit:
            out.next_after_job_id = ids[limit - 1]
        return out

    @translated
    async def UpdateJob(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        job_id = await self._write_job_id(request.job, request.request_id)
        spec = self._spec(request.spec)
        nxt = first_fire_ms(spec.schedule, self._now_ms(), hash_id=job_hash_id(spec.tenant, spec.name))
        reply = await self._propose(
            c.UpdateJob(request.request_id, job_id, spec, request.expected_version, nxt))
        return api_pb2.UpdateJobResponse(job=self._job_as_written(reply, spec))

    @translated
    async def DeleteJob(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        job_id = await self._write_job_id(request.job, request.request_id)
        await self._propose(c.DeleteJob(request.request_id, job_id, request.expected_version))
        return api_pb2.DeleteJobResponse()

    @translated
    async def PauseJob(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        job_id = await self._write_job_id(request.job, request.request_id)
        reply = await self._propose(c.SetPaused(request.request_id, job_id, True, 0))
        return api_pb2.PauseJobResponse(job=self._job_as_written(reply))

    @translated
    async def ResumeJob(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        job_id = await self._write_job_id(request.job, request.request_id)
        now = self._now_ms()
        with self.lock:
            job = self.node.replica.state.jobs.get(job_id)  # None: a retry, answered by dedupe
            nxt = job.next_fire_ms if job else 0
            if nxt and job.spec.schedule.kind != ScheduleKind.ONCE:
                nxt = next_fire_after(job.spec.schedule, now, hash_id=job_hash_id(job.spec.tenant, job.spec.name))
        reply = await self._propose(c.SetPaused(request.request_id, job_id, False, nxt))
        return api_pb2.ResumeJobResponse(job=self._job_as_written(reply))

    @translated
    async def TriggerJob(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        job_id = await self._write_job_id(request.job, request.request_id)
        reply = await self._propose(c.TriggerJob(request.request_id, job_id))
        return api_pb2.TriggerJobResponse(run=self._run_proto(reply.run_id))

    # -- runs --------------------------------------------------------------------------------

    @translated
    async def GetRun(self, request, context):  # noqa: N802
        await self.before_read(request.consistency)
        return api_pb2.GetRunResponse(run=self._run_proto(request.run_id))

    @translated
    async def ListRuns(self, request, context):  # noqa: N802
        await self.before_read(request.consistency)
        limit = _page(request.limit, 50)
        before = request.before_ms or (1 << 62)
        job_id = self._job_id(request.job) if request.job.name or not request.job.job_id \
            else request.job.job_id
        runs: dict[str, types_pb2.Run] = {}
        with self.lock:
            st = self.node.replica.state
            for run_id in st.runs_by_job.get(job_id, []):
                run = st.runs.get(run_id)
                if run is not None and run.scheduled_for_ms < before:
                    runs[run_id] = codec.run_to_proto(run)
        for data in self.node.replica.history.list(job_id, before_ms=before, limit=limit):
            run = decode_run(data)
            runs.setdefault(run.run_id, codec.run_to_proto(run))
        ordered = sorted(runs.values(), key=lambda r: (r.scheduled_for_ms, r.run_id), reverse=True)
        return api_pb2.ListRunsResponse(runs=ordered[:limit])

    @translated
    async def CancelRun(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        reply = await self._propose(c.CancelRun(request.request_id, request.run_id,
                                                request.reason or "cancelled by request"))
        return api_pb2.CancelRunResponse(run=self._run_proto(reply.run_id))

    # -- dead letters --------------------------------------------------------------------------

    @translated
    async def ListDeadLetters(self, request, context):  # noqa: N802
        await self.before_read(request.consistency)
        limit = _page(request.limit, 100)
        out = api_pb2.ListDeadLettersResponse()
        with self.lock:
            for d in self.node.replica.state.dead_letters.values():
                if len(out.dead_letters) >= limit:
                    break
                if not request.tenant or d.tenant == request.tenant:
                    codec.dead_letter_to_proto(d, out.dead_letters.add())
        return out

    @translated
    async def ReplayDeadLetters(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        keys = [c.TaskKey(t.run_id, t.task_name) for t in request.tasks]
        if not keys:
            if not (request.all or request.tenant):
                raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                                   "tasks: name the tasks to replay, or set tenant or all")
            with self.lock:
                keys = [c.TaskKey(d.run_id, d.task_name)
                        for d in self.node.replica.state.dead_letters.values()
                        if request.all or d.tenant == request.tenant]
        reply = await self._propose(c.ReplayDeadLetters(request.request_id, tuple(keys)))
        return api_pb2.ReplayDeadLettersResponse(
            replayed=[api_pb2.TaskRef(run_id=r, task_name=t) for r, t in reply.tasks])


def _job_sort_key(job_id: str) -> tuple[int, str]:
    # "j12" sorts after "j9": numeric part first.
    digits = job_id[1:]
    return (int(digits), job_id) if digits.isdigit() else (1 << 62, job_id)


def _after(job_id: str, after: str) -> bool:
    return not after or _job_sort_key(job_id) > _job_sort_key(after)
