"""Backfills: StartBackfill, BackfillStep (a compare-and-set on the cursor), CancelBackfill.

Imports `fire` (each slot is admitted like a fire) and `common`.
"""

from __future__ import annotations

from gnomon.node.core import spans
from gnomon.node.core.commands import BackfillStep, CancelBackfill, StartBackfill
from gnomon.node.core.common import Ctx, _find_job
from gnomon.node.core.errors import Code, Rejected
from gnomon.node.core.fire import _admit
from gnomon.node.core.model import (
    OVERLAP_POLICIES,
    Backfill,
    BackfillStatus,
    Job,
    RunState,
    RunTrigger,
)
from gnomon.node.core.results import Done, JobReply, Reply
from gnomon.node.core.transitions import BackfillEvent, move_backfill


def _start_backfill(ctx: Ctx, cmd: StartBackfill) -> Reply:
    job = _find_job(ctx.state, cmd.job_id)
    if isinstance(job, Rejected):
        return job
    rejected = _check_backfill(ctx, job, cmd)
    if rejected:
        return rejected
    done = cmd.total_slots == 0
    number = job.backfill.number + 1 if job.backfill is not None else 1
    job.backfill = Backfill(
        number=number, from_ms=cmd.from_ms, to_ms=cmd.to_ms, next_slot_ms=cmd.from_ms,
        total_slots=cmd.total_slots, overlap_policy=cmd.overlap_policy,
        status=BackfillStatus.DONE if done else BackfillStatus.RUNNING,
        started_ms=ctx.now, finished_ms=ctx.now if done else 0)
    ctx.effects.jobs.append(job.job_id)
    ctx.effects.backfills.append(job.job_id)
    return JobReply(job_id=job.job_id, version=job.version)


def _check_backfill(ctx: Ctx, job: Job, cmd: StartBackfill) -> Rejected | None:
    if cmd.overlap_policy and cmd.overlap_policy not in OVERLAP_POLICIES:
        return Rejected(Code.INVALID_ARGUMENT,
                        f"overlap_policy: must be one of {', '.join(OVERLAP_POLICIES)}, "
                        f"got {cmd.overlap_policy!r}")
    if cmd.from_ms < 0:
        return Rejected(Code.INVALID_ARGUMENT, f"from_ms: must be >= 0, got {cmd.from_ms}")
    if cmd.to_ms <= cmd.from_ms:
        return Rejected(Code.INVALID_ARGUMENT, f"to_ms: must be after from_ms ({cmd.from_ms}), "
                        f"got {cmd.to_ms}")
    if cmd.to_ms > ctx.now:
        return Rejected(Code.INVALID_ARGUMENT, f"to_ms: must not be after now ({ctx.now}), got "
                        f"{cmd.to_ms}: slots to come are the schedule's")
    if cmd.total_slots < 0:
        return Rejected(Code.INVALID_ARGUMENT,
                        f"total_slots: must be >= 0, got {cmd.total_slots}")
    bf = job.backfill
    if bf is not None and bf.status == BackfillStatus.RUNNING:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"job_id: job {job.job_id!r} has a backfill running ({bf.created} runs "
                        f"created, {bf.skipped} slots skipped of {bf.total_slots}): cancel it "
                        "first")
    return None


def _backfill_step(ctx: Ctx, cmd: BackfillStep) -> Reply:
    state = ctx.state
    job = state.jobs.get(cmd.job_id)
    bf = job.backfill if job is not None else None
    if (job is None or bf is None or bf.status != BackfillStatus.RUNNING
            or bf.next_slot_ms != cmd.cursor_ms):
        return Done()  # a retried or stale step (deposed leader, cancelled): a no-op
    last = cmd.cursor_ms - 1
    for index, slot in enumerate(cmd.slots_ms):
        if slot <= last or slot >= bf.to_ms:
            return Rejected(Code.INVALID_ARGUMENT,
                            f"slots_ms[{index}]: {slot} is not after {last} and before "
                            f"to_ms {bf.to_ms}")
        last = slot
    if cmd.next_cursor_ms <= last:
        return Rejected(Code.INVALID_ARGUMENT,
                        f"next_cursor_ms: must be after the last slot {last}, got "
                        f"{cmd.next_cursor_ms}")
    created, skipped, span_hi = bf.created, bf.skipped, bf.span_hi_ms
    policy = bf.overlap_policy or job.spec.overlap_policy
    for slot in cmd.slots_ms:
        if spans.covers(job.ran_spans, slot):
            if span_hi:  # consecutive slots: nothing between them to leave out
                job.ran_spans = spans.add(job.ran_spans, span_hi, slot)
            skipped, span_hi = skipped + 1, slot  # it ran already: never twice
            continue
        run_id = f"{job.job_id}@backfill-{bf.number}-{slot}"
        if (job.next_fire_ms and slot >= job.next_fire_ms) or slot > ctx.now \
                or run_id in state.runs:
            skipped, span_hi = skipped + 1, 0  # the schedule's own slot
            continue
        _admit(ctx, job, run_id, slot, RunTrigger.BACKFILL, policy)
        run = state.runs.get(run_id)
        if run is None or run.state == RunState.SKIPPED:
            skipped, span_hi = skipped + 1, 0  # the overlap policy skipped it
            continue
        created += 1
        job.ran_spans = spans.add(job.ran_spans, span_hi or slot, slot)
        span_hi = slot
    done = cmd.done or cmd.next_cursor_ms >= bf.to_ms
    job.backfill = move_backfill(
        bf, BackfillEvent.FINISH if done else BackfillEvent.STEP,
        next_slot_ms=min(cmd.next_cursor_ms, bf.to_ms), created=created, skipped=skipped,
        span_hi_ms=span_hi, finished_ms=ctx.now if done else 0)
    ctx.effects.backfills.append(job.job_id)
    return Done()


def _cancel_backfill(ctx: Ctx, cmd: CancelBackfill) -> Reply:
    job = _find_job(ctx.state, cmd.job_id)
    if isinstance(job, Rejected):
        return job
    bf = job.backfill
    if bf is None or bf.status != BackfillStatus.RUNNING:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"job_id: job {job.job_id!r} has no backfill running")
    job.backfill = move_backfill(bf, BackfillEvent.CANCEL, finished_ms=ctx.now)
    ctx.effects.jobs.append(job.job_id)
    ctx.effects.backfills.append(job.job_id)
    return JobReply(job_id=job.job_id, version=job.version)


HANDLER_PAIRS = [(StartBackfill, _start_backfill), (BackfillStep, _backfill_step), (CancelBackfill, _cancel_backfill)]
