"""The replicated bounds: SetLimits (and Barrier, which does nothing), and bringing what is
already there within them: the dedupe table (also trimmed by every batch), attempt records and
retained runs.

Imports `tasks` (the dead-letter bound) and `runs` (retention); apply.py trims the dedupe table
through `_trim_dedupe`.
"""

from __future__ import annotations

from gnomon.node.core.commands import Barrier, SetLimits
from gnomon.node.core.common import Ctx
from gnomon.node.core.errors import Code, Rejected
from gnomon.node.core.results import Done, LimitsReply, Reply
from gnomon.node.core.runs import _enforce_retention
from gnomon.node.core.tasks import _bound_dead_letters
from gnomon.node.core.validate import validate_limits


def _barrier(ctx: Ctx, cmd: Barrier) -> Reply:
    return Done()


def _set_limits(ctx: Ctx, cmd: SetLimits) -> Reply:
    state = ctx.state
    if cmd.expected_version and cmd.expected_version != state.limits_version:
        return Rejected(
            Code.FAILED_PRECONDITION,
            f"expected_version: the limits are at version {state.limits_version}, "
            f"not {cmd.expected_version}",
        )
    if cmd.bootstrap and state.limits_version:
        return LimitsReply(version=state.limits_version)  # set already: the bootstrap is late
    rejected = validate_limits(cmd.limits)
    if rejected:
        return rejected
    old, state.limits = state.limits, cmd.limits
    state.limits_version += 1
    _trim_dedupe(ctx)
    _bound_dead_letters(ctx)
    if (cmd.limits.runs_retained_per_job < old.runs_retained_per_job
            or cmd.limits.max_attempt_records < old.max_attempt_records):
        _trim_all_runs(ctx)
    return LimitsReply(version=state.limits_version)


def _trim_dedupe(ctx: Ctx) -> None:
    """Forget the oldest request ids beyond the count bound or older than the age bound."""
    dedupe, limits = ctx.state.dedupe, ctx.limits
    oldest_kept = ctx.now - limits.dedupe_max_age_ms if limits.dedupe_max_age_ms > 0 else None
    while dedupe:
        first = next(iter(dedupe.values()))
        if len(dedupe) <= limits.dedupe_capacity and (
            oldest_kept is None or first.at_ms >= oldest_kept
        ):
            return
        dedupe.popitem(last=False)


def _trim_all_runs(ctx: Ctx) -> None:
    """Lowered retention or attempt bounds apply to what is already there: O(runs), an
    administrator's rare command."""
    keep = ctx.limits.max_attempt_records
    for run in ctx.state.runs.values():
        for inst in run.tasks.values():
            if len(inst.attempts) > keep:
                inst.attempts = inst.attempts[len(inst.attempts) - keep :] if keep else ()
    for job_id in list(ctx.state.retained):
        _enforce_retention(ctx, job_id)


HANDLER_PAIRS = [(Barrier, _barrier), (SetLimits, _set_limits)]
