"""JobService: translate requests into commands and replies into messages; nothing else."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, cast

import grpc

from gnomon.node import codec
from gnomon.node.api.grpc import job_health, run_listing
from gnomon.node.api.grpc.access import request_scope, scoped
from gnomon.node.api.grpc.base import ServicerBase, translated
from gnomon.node.api.grpc.errors import REJECTED_CODES, ServiceError, check, status_of
from gnomon.node.core import commands as c
from gnomon.node.core.apply import reused_request_id
from gnomon.node.core.errors import Rejected
from gnomon.node.core.job_health import job_health as core_job_health
from gnomon.node.core.job_health import tenant_backlogs
from gnomon.node.core.model import DEFAULT_TENANT, ScheduleKind, State, dedupe_key, queue_key
from gnomon.node.core.results import Discarded, Done, JobReply, JobsReply, Replayed, RunReply
from gnomon.node.core.run_query import RunCursor, query_runs, sort_value
from gnomon.node.core.run_waits import DispatchBounds, WorkerView, explain_run
from gnomon.node.leader.backfill import count_slots
from gnomon.node.ops import tracing
from gnomon.node.spec.schedules import (
    bounded_first,
    check_schedule,
    job_hash_id,
    preview,
)
from gnomon.node.spec.validate import (
    merge_params,
    validate_backfill_range,
    validate_breaker,
    validate_id,
    validate_queue_ref,
    validate_request_id,
    validate_spec,
)
from gnomon.node.storage.state_codec import decode_run
from gnomon.v1 import api_pb2, api_pb2_grpc, types_pb2

MAX_PAGE = 1000
MAX_REASON_CHARS = 500  # a replay's reason, kept in the audit log
# A page of jobs stays under this many bytes (the rest follows via next_after_job_id), below
# gRPC's default 4 MiB receive limit: 1000 jobs of up to 100 tasks with 64 KiB payloads would
# not fit even the 16 MiB limit of the node and the SDK.
MAX_PAGE_BYTES = 4_000_000
_MISFIRE_NUMBERS = tuple(types_pb2.MisfirePolicy.values())
_OVERLAP_NUMBERS = tuple(types_pb2.OverlapPolicy.values())


def _page(limit: int, default: int) -> int:
    if limit < 0:
        raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT, "limit: must not be negative")
    return min(limit or default, MAX_PAGE)


def _check_enums(spec: types_pb2.JobSpec) -> None:
    # codec maps enum numbers to names and fails on one it does not know.
    if spec.misfire_policy not in _MISFIRE_NUMBERS:
        names = ", ".join(types_pb2.MisfirePolicy.keys())
        raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"spec.misfire_policy: must be one of {names}, got {spec.misfire_policy}")
    _check_overlap_number("spec.overlap_policy", spec.overlap_policy)
    _check_schedule_enums("spec.schedule", spec.schedule)


# The cron schedule's enums (the fuzz test found them unchecked: an unknown number was a
# KeyError in codec, answered UNKNOWN with a traceback).
_CRON_ENUMS = (("dialect", types_pb2.CronDialect),
               ("dst_nonexistent", types_pb2.DstNonexistentPolicy),
               ("dst_ambiguous", types_pb2.DstAmbiguousPolicy))


def _check_schedule_enums(field: str, schedule: types_pb2.Schedule) -> None:
    if not schedule.HasField("cron"):
        return
    for name, enum in _CRON_ENUMS:
        number = getattr(schedule.cron, name)
        if number not in enum.values():
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"{field}.cron.{name}: must be one of "
                               f"{', '.join(enum.keys())}, got {number}")


def _check_overlap_number(field: str, number: int) -> None:
    if number not in _OVERLAP_NUMBERS:
        names = ", ".join(types_pb2.OverlapPolicy.keys())
        raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"{field}: must be one of {names}, got {number}")


_REPLIES: dict[type, type | tuple[type, ...]] = {
    c.CreateJob: JobReply, c.CreateJobs: JobsReply, c.UpdateJob: JobReply, c.SetPaused: JobReply,
    c.DeleteJob: Done, c.TriggerJob: RunReply, c.CancelRun: RunReply, c.RerunRun: RunReply,
    c.CancelTask: RunReply, c.ResetCircuit: (JobReply, Done), c.ReplayDeadLetters: Replayed,
    c.StartBackfill: JobReply, c.CancelBackfill: JobReply, c.SetQueueCircuit: Done,
    c.DiscardDeadLetters: Discarded}


def _answering(command, reply):
    """`reply`, if it can answer `command`. Apply keys dedupe by (the caller's scope,
    request_id) and refuses a request whose fingerprint differs, so a reply of another
    request should never come back; this stays as a second line: such a reply must not pass
    for this one's (before scopes, one crashed ReplayDeadLetters and made a DeleteJob report
    success)."""
    job_id = getattr(command, "job_id", None)
    if isinstance(reply, _REPLIES[type(command)]) and (
            not isinstance(reply, JobReply) or not job_id or reply.job_id == job_id) and (
            not isinstance(reply, JobsReply) or len(reply.items) == len(command.items)):
        return reply
    raise ServiceError(grpc.StatusCode.FAILED_PRECONDITION, reused_request_id(command.request_id))


def item_detail(index: int, detail: str) -> str:
    """A single-spec message ("spec.name: ...") as the bulk request's ("specs[3].name: ...")."""
    if detail.startswith("spec.") or detail.startswith("spec:"):
        return f"specs[{index}]{detail[4:]}"
    return f"specs[{index}]: {detail}"


def _item_error(index: int, code: grpc.StatusCode, detail: str) -> api_pb2.CreateJobsResult:
    return api_pb2.CreateJobsResult(error=api_pb2.ItemError(
        code=code.name, message=item_detail(index, detail)))


def _check_ref(ref: api_pb2.JobRef) -> None:
    # Before any barrier: a request refused as malformed must not commit anything.
    validate_id("job.job_id", ref.job_id, required=False)
    if not (ref.job_id or ref.name):
        raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT, "job: set job_id, or tenant and name")


class JobServicer(ServicerBase, api_pb2_grpc.JobServiceServicer):
    # -- helpers -----------------------------------------------------------------------------

    def _job_id(self, ref: api_pb2.JobRef) -> str:
        if ref.job_id:
            if self.read(lambda st: ref.job_id in st.jobs):
                return ref.job_id
            raise ServiceError(grpc.StatusCode.NOT_FOUND, f"job.job_id: no job {ref.job_id!r}")
        _check_ref(ref)
        key = (ref.tenant or DEFAULT_TENANT, ref.name)
        job_id = self.read(lambda st: st.job_names.get(key))
        if job_id is None:
            raise ServiceError(grpc.StatusCode.NOT_FOUND,
                               f"job.name: tenant {key[0]!r} has no job named {key[1]!r}")
        return job_id

    def _spec_of(self, job_id: str):
        """The job's spec (specs are never changed in place), None once deleted."""
        return self.read(lambda st: job.spec if (job := st.jobs.get(job_id)) else None)

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
            # Only this caller's own request id counts (the scope apply keys it by).
            key = dedupe_key(request_scope(), request_id)
            if request_id and self.read(lambda st: key in st.dedupe):
                return ref.job_id
            raise

    def _job_proto(self, job_id: str) -> types_pb2.Job:
        out = self.read(lambda st: codec.job_to_proto(job) if (job := st.jobs.get(job_id))
                        else None)
        if out is None:
            raise ServiceError(grpc.StatusCode.NOT_FOUND, f"job_id: job {job_id!r} was deleted")
        return out

    def _job_as_written(self, reply, spec=None) -> types_pb2.Job:
        """The job as this request left it. A later write (or delete) that committed before
        this answer was built must not show through: a client doing optimistic concurrency
        would take another writer's version for its own (found by the jepsen register
        workload). Fields no request sets (next fire, timestamps) are the current ones."""
        return self.read(lambda st: _as_written(st.jobs.get(reply.job_id), reply.job_id,
                                                reply.version, spec))

    async def _run_proto(self, run_id: str) -> types_pb2.Run:
        active = self.read(lambda st: codec.run_to_proto(run)
                           if (run := st.runs.get(run_id)) is not None else None)
        if active is not None:
            return active
        # LMDB reads go to a thread: the loop never waits on the disk.
        data = await asyncio.to_thread(self.node.replica.history.get, run_id)
        if data is None:
            raise ServiceError(grpc.StatusCode.NOT_FOUND, f"run_id: no run {run_id!r}")
        return codec.run_to_proto(decode_run(data))

    def _runs_job_id(self, ref: api_pb2.JobRef) -> str:
        """The job whose runs to list. By id, a deleted job's runs stay listable; an id the
        cluster never gave out is NOT_FOUND. By name, only a live job is found."""
        if ref.name or not ref.job_id:
            return self._job_id(ref)
        if self.read(lambda st: ref.job_id in st.jobs or 0 < _seq_of(ref.job_id) <= st.job_seq):
            return ref.job_id
        raise ServiceError(grpc.StatusCode.NOT_FOUND,
                           f"job.job_id: no job {ref.job_id!r} was ever created")

    def _check_identity(self, job_id: str, spec) -> None:
        """apply refuses a new tenant or name too, but only after committing the request:
        refuse it before proposing, so that it changes nothing."""
        now = self._spec_of(job_id)
        if now is None:  # deleted meanwhile, or a retry answered by dedupe: apply decides
            return
        if spec.tenant != now.tenant:
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"spec.tenant: job {job_id!r} belongs to tenant "
                               f"{now.tenant!r}, not {spec.tenant!r} (a job cannot change "
                               "tenant)")
        if spec.name != now.name:
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"spec.name: job {job_id!r} is named {now.name!r}, not "
                               f"{spec.name!r} (a job cannot be renamed)")

    def _now_ms(self) -> int:
        """Never before cluster time: a slot computed from it is after every fired slot."""
        return max(self.node.clock.wall_ms(), self.read(lambda st: st.clock_ms))

    def _spec(self, msg: types_pb2.JobSpec):
        _check_enums(msg)
        return validate_spec(codec.spec_from_proto(msg), self.node.input_limits)

    async def _propose(self, command, request):
        """Propose `command`, made from `request`, stamped with the scope of this caller's
        request id and the fingerprint of `request` (access.scoped)."""
        self.require_leader()
        if "no-dedupe" in self.node.config.canaries:  # test-only jepsen canary
            command = dataclasses.replace(command, request_id="")
        command = scoped(command, request)
        return _answering(command, check(await self.node.proposer.propose(command)))

    # -- jobs --------------------------------------------------------------------------------

    @translated
    async def CreateJob(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        spec = self._spec(request.spec)
        first = bounded_first(spec, self._now_ms(), hash_id=job_hash_id(spec.tenant, spec.name))
        reply = await self._propose(c.CreateJob(request.request_id, spec, first,
                                                self.node.config.max_jobs_per_tenant), request)
        return api_pb2.CreateJobResponse(job=self._job_as_written(reply, spec))

    @translated
    async def CreateJobs(self, request, context):  # noqa: N802
        """Every spec validated on its own, the valid ones created by one command (one Raft
        entry, one request id); `results[i]` answers `specs[i]`."""
        validate_request_id(request.request_id)
        self._check_bulk_size(len(request.specs), request.ByteSize())
        results: list[api_pb2.CreateJobsResult | None] = [None] * len(request.specs)
        items: list[tuple[int, c.CreateJobItem]] = []
        now = self._now_ms()
        for index, msg in enumerate(request.specs):
            try:
                spec = self._spec(msg)
                first = bounded_first(spec, now, hash_id=job_hash_id(spec.tenant, spec.name))
            except Exception as exc:  # noqa: BLE001 - only mapped (input) errors are items
                mapped = status_of(exc)
                if mapped is None:
                    raise
                results[index] = _item_error(index, *mapped)
                continue
            items.append((index, c.CreateJobItem(spec, first)))
        if items:
            reply = await self._propose(c.CreateJobs(
                request.request_id, tuple(item for _, item in items),
                self.node.config.max_jobs_per_tenant), request)
            self._fill_results(results, items, reply)
        # Every index holds its result now (an error above, or _fill_results).
        return api_pb2.CreateJobsResponse(
            results=cast(list[api_pb2.CreateJobsResult], results))

    def _check_bulk_size(self, count: int, size_bytes: int) -> None:
        limit = self.node.config.create_jobs_max_specs
        if not 0 < count <= limit:
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"specs: {count} specs; a call takes 1 to {limit} "
                               "(create_jobs_max_specs)")
        # The call is one log entry: it must fit the largest entry the Raft port carries.
        entry = self.node.config.max_entry_bytes
        if size_bytes > entry:
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"specs: {size_bytes} bytes of specs, more than one log entry "
                               f"holds ({entry} bytes); send fewer specs per call")

    def _fill_results(self, results: list, items: list[tuple[int, c.CreateJobItem]],
                      reply: JobsReply) -> None:
        """Each created job as this call left it (see `_job_as_written`), in one read."""

        def fill(st: State) -> None:
            for (index, item), one in zip(items, reply.items, strict=True):
                if isinstance(one, Rejected):
                    results[index] = _item_error(index, REJECTED_CODES[one.code], one.detail)
                    continue
                results[index] = api_pb2.CreateJobsResult(job=_as_written(
                    st.jobs.get(one.job_id), one.job_id, one.version, item.spec))

        self.read(fill)

    @translated
    async def GetJob(self, request, context):  # noqa: N802
        _check_ref(request.job)
        await self.before_read(request.consistency)
        return api_pb2.GetJobResponse(job=self._job_proto(self._job_id(request.job)))

    @translated
    async def ListJobs(self, request, context):  # noqa: N802
        limit = _page(request.limit, 100)
        after = _after_seq(request.after_job_id)
        await self.before_read(request.consistency)
        out = api_pb2.ListJobsResponse()

        now, workers = 0, None  # health: the leader's time and workers, counted before the read
        if request.health:
            now, sessions = self._now_ms(), self._worker_sessions()
            workers = job_health.WorkerCounts(sessions.values()) if sessions is not None else None

        def page(st: State) -> tuple[list[int], int]:
            order = st.tenant_job_order.get(request.tenant) if request.tenant else st.job_order
            seqs = order.page(after, limit + 1, lambda n: f"j{n}" in st.jobs) if order else []
            size = 0
            backlogs = tenant_backlogs(st) if request.health else {}
            for i, seq in enumerate(seqs[:limit]):
                found = st.jobs[f"j{seq}"]
                job = codec.job_to_proto(found)
                health = job_health.health_to_proto(
                    core_job_health(st, found, backlogs), found.spec.tenant, now_ms=now,
                    workers=workers) if request.health else None
                size += job.ByteSize() + (health.ByteSize() if health is not None else 0)
                if size > MAX_PAGE_BYTES and i:
                    return seqs, i
                out.jobs.append(job)
                if health is not None:
                    out.health[found.job_id].CopyFrom(health)
            return seqs, limit

        seqs, shown = self.read(page)
        if len(seqs) > shown:
            out.next_after_job_id = f"j{seqs[shown - 1]}"
        return out

    def _worker_sessions(self) -> dict[str, Any] | None:
        """The leader's worker sessions (leader.dispatch), None on a node that does not lead:
        workers connect to the leader only."""
        dispatcher = getattr(self.node, "dispatcher", None)
        if dispatcher is None or not self.node.leadership.ready:
            return None
        return dict(dispatcher.sessions)

    @translated
    async def UpdateJob(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        spec = self._spec(request.spec)
        job_id = await self._write_job_id(request.job, request.request_id)
        self._check_identity(job_id, spec)
        nxt = bounded_first(spec, self._now_ms(), hash_id=job_hash_id(spec.tenant, spec.name))
        reply = await self._propose(
            c.UpdateJob(request.request_id, job_id, spec, request.expected_version, nxt), request)
        return api_pb2.UpdateJobResponse(job=self._job_as_written(reply, spec))

    @translated
    async def DeleteJob(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        job_id = await self._write_job_id(request.job, request.request_id)
        await self._propose(c.DeleteJob(request.request_id, job_id, request.expected_version,
                                        request.cancel_running), request)
        return api_pb2.DeleteJobResponse()

    @translated
    async def PauseJob(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        job_id = await self._write_job_id(request.job, request.request_id)
        reply = await self._propose(c.SetPaused(request.request_id, job_id, True, 0), request)
        return api_pb2.PauseJobResponse(job=self._job_as_written(reply))

    @translated
    async def ResumeJob(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        job_id = await self._write_job_id(request.job, request.request_id)
        now = self._now_ms()
        # None: a retry, answered by dedupe.
        nxt, spec = self.read(lambda st: (job.next_fire_ms, job.spec)
                              if (job := st.jobs.get(job_id)) else (0, None))
        # Cron evaluation outside the lock: the tick thread applies meanwhile.
        if nxt and spec is not None and spec.schedule.kind != ScheduleKind.ONCE:
            nxt = bounded_first(spec, now, hash_id=job_hash_id(spec.tenant, spec.name))
        reply = await self._propose(c.SetPaused(request.request_id, job_id, False, nxt), request)
        return api_pb2.ResumeJobResponse(job=self._job_as_written(reply))

    @translated
    async def TriggerJob(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        _check_overlap_number("overlap_policy", request.overlap_policy)
        job_id = await self._write_job_id(request.job, request.request_id)
        overlap = codec.overlap_from_proto(request.overlap_policy, "")
        params: bytes = b""
        payloads: tuple[c.TaskPayload, ...] = ()
        if request.params_json:
            spec = self._spec_of(job_id)
            if spec is not None:  # None: a retry answered by dedupe
                params, payloads = merge_params(spec, request.params_json,
                                                self.node.input_limits)
        reply = await self._propose(c.TriggerJob(request.request_id, job_id, overlap, params,
                                                 payloads), request)
        call_span = tracing.current_span()
        if call_span is not None and reply.run_id:  # the caller's trace -> the run's own
            call_span.link_run(reply.run_id)
        return api_pb2.TriggerJobResponse(run=await self._run_proto(reply.run_id))

    @translated
    async def PreviewSchedule(self, request, context):  # noqa: N802
        """Any node answers from its state (a job's schedule) or the request alone."""
        count = request.count or 5
        limit = self.node.config.max_preview_fires
        if not 0 < count <= limit:
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"count: must be in 1..{limit} (0 means 5), got {request.count}")
        if request.after_ms < 0:
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"after_ms: must be >= 0 (0 means now), got {request.after_ms}")
        if request.HasField("job") and (request.job.job_id or request.job.name):
            if request.HasField("schedule"):
                raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                                   "schedule: give a job or a schedule, not both")
            _check_ref(request.job)
            spec = self._spec_of(self._job_id(request.job))
            if spec is None:
                raise ServiceError(grpc.StatusCode.NOT_FOUND,
                                   f"job: {request.job.job_id or request.job.name!r} was deleted")
            schedule, hash_id = spec.schedule, job_hash_id(spec.tenant, spec.name)
        elif request.HasField("schedule"):
            _check_schedule_enums("schedule", request.schedule)
            schedule = codec.schedule_from_proto(request.schedule)
            tenant = request.tenant or DEFAULT_TENANT
            hash_id = job_hash_id(tenant, request.name) if request.name else ""
            check_schedule(schedule, min_interval_ms=self.node.input_limits.min_interval_ms,
                           field="schedule", hash_id=hash_id)
        else:
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               "job: give a job (job_id, or tenant and name) or a schedule")
        after = request.after_ms or self._now_ms()
        fires, zone, reading = preview(schedule, after, count, hash_id=hash_id)
        return api_pb2.PreviewScheduleResponse(
            fires=[api_pb2.PreviewFire(at_ms=at, utc=utc, local=local, dst_note=note)
                   for at, utc, local, note in fires],
            timezone=zone, reading=reading)

    # -- runs --------------------------------------------------------------------------------

    @translated
    async def GetRun(self, request, context):  # noqa: N802
        validate_id("run_id", request.run_id)
        await self.before_read(request.consistency)
        return api_pb2.GetRunResponse(run=await self._run_proto(request.run_id))

    @translated
    async def ListRuns(self, request, context):  # noqa: N802
        limit = _page(request.limit, 50)
        _check_ref(request.job)
        await self.before_read(request.consistency)
        before = request.before_ms or (1 << 62)
        job_id = self._runs_job_id(request.job)
        runs: dict[str, types_pb2.Run] = self.read(lambda st: {
            run_id: codec.run_to_proto(run) for run_id in st.runs_by_job.get(job_id, [])
            if (run := st.runs.get(run_id)) is not None and run.scheduled_for_ms < before})
        history = await asyncio.to_thread(self.node.replica.history.list, job_id,
                                          before_ms=before, limit=limit)
        for data in history:
            run = decode_run(data)
            runs.setdefault(run.run_id, codec.run_to_proto(run))
        ordered = sorted(runs.values(), key=lambda r: (r.scheduled_for_ms, r.run_id), reverse=True)
        return api_pb2.ListRunsResponse(runs=ordered[:limit])

    @translated
    async def ListRunsAcrossJobs(self, request, context):  # noqa: N802
        """Runs in memory across jobs (node/core/run_query.py); the access rule has scoped
        `request.tenant` to the caller's tenants."""
        query = run_listing.parse(request)
        await self.before_read(request.consistency)
        out = api_pb2.ListRunsAcrossJobsResponse()

        def page(st: State) -> None:
            found = query_runs(st, query.flt, sort=query.sort, limit=query.limit,
                               after=query.after)
            nxt, size = found.next, 0
            for i, run in enumerate(found.runs):
                msg = codec.run_to_proto(run)
                size += msg.ByteSize()
                if size > MAX_PAGE_BYTES and i:  # the rest follows on the next page
                    last = found.runs[i - 1]
                    nxt = RunCursor(sort_value(last, query.sort, st.clock_ms), last.run_id)
                    break
                out.runs.append(msg)
            if nxt is not None:
                out.next_page_token = run_listing.encode_token(nxt, query.sort)

        self.read(page)
        return out

    @translated
    async def ExplainRun(self, request, context):  # noqa: N802
        """What a run waits for (node/core/run_waits.py), the leader's workers and bounds in."""
        validate_id("run_id", request.run_id)
        await self.before_read(request.consistency)
        sessions = self._worker_sessions()
        workers = None if sessions is None else tuple(
            WorkerView(tuple(s.queues), s.tenants, s.credits) for s in sessions.values())
        cfg = self.node.config
        bounds = DispatchBounds(cfg.queue_caps, cfg.fire_admission_max_ready)

        def explain(st: State):
            run = st.runs.get(request.run_id)
            if run is None:
                return None
            return codec.run_to_proto(run), explain_run(st, run, workers, bounds)

        found = self.read(explain)
        run, waits = found if found is not None else (await self._run_proto(request.run_id), [])
        out = api_pb2.ExplainRunResponse(run=run, workers_known=workers is not None)
        for w in waits:
            out.waits.add(kind=codec.enum_to_proto(api_pb2.WaitKind.DESCRIPTOR, w.kind),
                          task_name=w.task, detail=w.detail, limit=w.limit,
                          limit_value=w.limit_value, current=w.current, change=w.change)
        return out

    @translated
    async def CancelRun(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        validate_id("run_id", request.run_id)
        reply = await self._propose(c.CancelRun(request.request_id, request.run_id,
                                                request.reason or "cancelled by request"), request)
        return api_pb2.CancelRunResponse(run=await self._run_proto(reply.run_id))

    @translated
    async def ResetCircuit(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        if request.queue or request.tenant:
            if request.job.job_id or request.job.name:
                raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                                   "queue: give a job or a tenant's queue, not both")
            tenant, queue = validate_queue_ref(request.tenant, request.queue)
            await self._propose(c.ResetCircuit(request.request_id, "", tenant, queue), request)
            return api_pb2.ResetCircuitResponse(queue_circuit=self._queue_circuit(tenant, queue))
        job_id = await self._write_job_id(request.job, request.request_id)
        reply = await self._propose(c.ResetCircuit(request.request_id, job_id), request)
        return api_pb2.ResetCircuitResponse(job=self._job_as_written(reply))

    def _queue_circuit(self, tenant: str, queue: str) -> types_pb2.QueueCircuit | None:
        return self.read(lambda st: codec.queue_circuit_to_proto(qc) if (
            qc := st.queue_circuits.get(queue_key(tenant, queue))) is not None else None)

    @translated
    async def SetQueueCircuit(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        tenant, queue = validate_queue_ref(request.tenant, request.queue)
        breaker = None
        if request.HasField("breaker"):
            breaker = codec.breaker_from_proto(request.breaker)
            validate_breaker(breaker, "breaker", self.node.input_limits)
        await self._propose(c.SetQueueCircuit(request.request_id, tenant, queue, breaker), request)
        return api_pb2.SetQueueCircuitResponse(queue_circuit=self._queue_circuit(tenant, queue))

    @translated
    async def ListQueueCircuits(self, request, context):  # noqa: N802
        await self.before_read(request.consistency)
        return api_pb2.ListQueueCircuitsResponse(queue_circuits=self.read(lambda st: [
            codec.queue_circuit_to_proto(qc) for qc in st.queue_circuits.values()
            if not request.tenant or qc.tenant == request.tenant]))

    # -- backfill ----------------------------------------------------------------------------

    @translated
    async def BackfillJob(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        _check_overlap_number("overlap_policy", request.overlap_policy)
        to_ms = validate_backfill_range(request.from_ms, request.to_ms, self._now_ms())
        job_id = await self._write_job_id(request.job, request.request_id)
        spec = self._spec_of(job_id)
        total, limit = 0, self.node.config.backfill_max_slots
        if spec is not None:  # None: a retry answered by dedupe
            total = await asyncio.to_thread(count_slots, spec.schedule,
                                            job_hash_id(spec.tenant, spec.name),
                                            request.from_ms, to_ms, limit)
            if total > limit:
                raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"to_ms: [from_ms, to_ms) holds more than the node's "
                                   f"backfill_max_slots {limit} slots of the job's schedule; "
                                   "backfill a shorter range")
        overlap = codec.overlap_from_proto(request.overlap_policy, "")
        reply = await self._propose(c.StartBackfill(request.request_id, job_id, request.from_ms,
                                                    to_ms, total, overlap), request)
        return api_pb2.BackfillJobResponse(job=self._job_as_written(reply))

    @translated
    async def CancelBackfill(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        job_id = await self._write_job_id(request.job, request.request_id)
        reply = await self._propose(c.CancelBackfill(request.request_id, job_id), request)
        return api_pb2.CancelBackfillResponse(job=self._job_as_written(reply))

    @translated
    async def RerunRun(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        validate_id("run_id", request.run_id)
        reply = await self._propose(c.RerunRun(request.request_id, request.run_id), request)
        return api_pb2.RerunRunResponse(run=await self._run_proto(reply.run_id))

    @translated
    async def RetryTask(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        validate_id("run_id", request.run_id)
        validate_id("task_name", request.task_name)
        reply = await self._propose(c.RerunRun(request.request_id, request.run_id,
                                               (request.task_name,)), request)
        return api_pb2.RetryTaskResponse(run=await self._run_proto(reply.run_id))

    @translated
    async def CancelTask(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        validate_id("run_id", request.run_id)
        validate_id("task_name", request.task_name)
        reply = await self._propose(c.CancelTask(request.request_id, request.run_id,
                                                 request.task_name,
                                                 request.reason or "cancelled by request"), request)
        return api_pb2.CancelTaskResponse(run=await self._run_proto(reply.run_id))

    # -- dead letters --------------------------------------------------------------------------

    @translated
    async def ListDeadLetters(self, request, context):  # noqa: N802
        limit = _page(request.limit, 100)
        await self.before_read(request.consistency)
        out = api_pb2.ListDeadLettersResponse()

        def page(st: State) -> None:
            for d in st.dead_letters.values():
                if len(out.dead_letters) >= limit:
                    break
                if not request.tenant or d.tenant == request.tenant:
                    codec.dead_letter_to_proto(d, out.dead_letters.add())

        self.read(page)
        return out

    @translated
    async def ReplayDeadLetters(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        _check_reason(request.reason)
        keys = [c.TaskKey(t.run_id, t.task_name) for t in request.tasks]
        if not keys:
            if not (request.all or request.tenant):
                raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                                   "tasks: name the tasks to replay, or set tenant or all")
            # A tenant-scoped token's `all` has its tenant filled in by the access rule:
            # every tenant only when none is set (admins).
            keys = self.read(lambda st: [
                c.TaskKey(d.run_id, d.task_name) for d in st.dead_letters.values()
                if d.tenant == request.tenant or (request.all and not request.tenant)])
        reply = await self._propose(c.ReplayDeadLetters(request.request_id, tuple(keys)), request)
        return api_pb2.ReplayDeadLettersResponse(
            replayed=[api_pb2.TaskRef(run_id=r, task_name=t) for r, t in reply.tasks])

    @translated
    async def DiscardDeadLetters(self, request, context):  # noqa: N802
        validate_request_id(request.request_id)
        _check_reason(request.reason)
        if not request.tasks:
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               "tasks: name at least one dead letter to discard")
        for i, t in enumerate(request.tasks):
            validate_id(f"tasks[{i}].run_id", t.run_id)
            validate_id(f"tasks[{i}].task_name", t.task_name)
        keys = tuple(c.TaskKey(t.run_id, t.task_name) for t in request.tasks)
        reply = await self._propose(c.DiscardDeadLetters(request.request_id, keys), request)
        return api_pb2.DiscardDeadLettersResponse(
            discarded=[api_pb2.TaskRef(run_id=r, task_name=t) for r, t in reply.tasks])


def _check_reason(reason: str) -> None:
    if len(reason) > MAX_REASON_CHARS or not reason.isprintable():
        raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"reason: at most {MAX_REASON_CHARS} printable characters")


def _as_written(job, job_id: str, version: int, spec) -> types_pb2.Job:
    """The job at `version` as its writer left it (JobServicer._job_as_written): the current
    job, or, once a later write or a delete moved it on, its id, that version and `spec`
    (None: the current spec)."""
    out = codec.job_to_proto(job) if job is not None else types_pb2.Job(job_id=job_id)
    if job is None or out.version != version:
        out.version = version
        if spec is not None:
            out.spec.CopyFrom(codec.spec_to_proto(spec))
    return out


def _seq_of(job_id: str) -> int:
    """The sequence number of a job id "j<n>"; 0 if it is not one."""
    digits = job_id[1:]
    return int(digits) if job_id.startswith("j") and digits.isdigit() else 0


def _after_seq(after_job_id: str) -> int:
    if not after_job_id:
        return 0
    seq = _seq_of(after_job_id)
    if not seq:
        raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"after_job_id: {after_job_id!r} is not a job id (j<number>)")
    return seq
