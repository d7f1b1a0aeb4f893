"""`gnomon run list` across jobs: the filters, one page, the table or JSON.

A job alone keeps the per-job listing (ListRuns: memory and the history store, paged by
--before); any filter, or no job, lists the runs in memory across jobs
(ListRunsAcrossJobs), which pages with --page-token.
"""

from __future__ import annotations

import argparse
from typing import Any

from .render import render_runs_across_jobs, run_json
from .values import UsageError

# The flags that make `run list` a listing across jobs.
_ACROSS = ("state", "trigger", "queue", "since", "until", "late", "errors", "sort",
           "page_token")


def across_jobs(args: argparse.Namespace) -> bool:
    """Whether the flags ask for runs across jobs (no job, or a filter of that listing)."""
    job = args.job or args.job_flag
    return not job or any(getattr(args, name) for name in _ACROSS)


def check_flags(args: argparse.Namespace) -> None:
    """Refuse flags that do not mix, before any call."""
    if args.job and args.job_flag:
        raise UsageError("name one job: gnomon run list JOB (or --job JOB)")
    if not 0 < args.limit <= 1000:
        raise UsageError("--limit must be between 1 and 1000")
    if args.before and across_jobs(args):
        raise UsageError("--before pages one job's runs; across jobs use --page-token")
    if args.late_ms and not args.late:
        raise UsageError("--late-ms goes with --late")
    if args.late_ms < 0:
        raise UsageError("--late-ms must not be negative")
    if args.since and args.until and args.until <= args.since:
        raise UsageError("--until must be after --since")


def list_across_jobs(ctx: Any, job_id: str | None) -> None:
    """One page across jobs, printed (a table, or with --json the runs as a list; the next
    page's token then goes to stderr, so stdout stays one JSON value)."""
    a = ctx.args
    page = ctx.client.list_runs_across_jobs(
        tenants=a.tenant or None, job_id=job_id, queue=a.queue, states=a.state,
        triggers=a.trigger, since_ms=a.since or 0, until_ms=a.until or 0, late=a.late,
        late_ms=a.late_ms, errors=a.errors, sort=a.sort or "created_desc", limit=a.limit,
        page_token=a.page_token or "")
    if ctx.json and page.next_page_token:
        print(f"more: --page-token {page.next_page_token}", file=ctx.err)
    ctx.emit(render_runs_across_jobs(page.runs, page.next_page_token),
             [run_json(r) for r in page.runs])
