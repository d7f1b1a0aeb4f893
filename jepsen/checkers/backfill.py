"""Backfilled runs, from the final run listing of each job.

A backfill run (trigger "backfill", id "<job>@backfill-<n>-<slot>", n the job's backfill) is a slot of the job's
schedule that had not run: every slot has at most one run that was not SKIPPED, whichever
made it (the schedule or a backfill; "a backfilled slot at most once"), a backfill run's
slot is on the schedule, and a SKIPPED backfill run says why (only the overlap policy skips
one). Backfill runs are not scheduled runs: the schedule checker's slot counts leave them
out, and an execution of one is an execution of a known run.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from gnomon.node.core.model import Schedule
from gnomon.node.spec.schedules import next_fire_after

BACKFILL = "backfill"
_BACKFILL_ID = re.compile(r"[^@]+@backfill-\d+-\d+")
RUNS_A_SLOT = ("schedule", BACKFILL)


def is_backfill(run: list) -> bool:
    return run[3] == BACKFILL


def _on_schedule(schedule: Schedule | None, hash_id: str, slot: int) -> bool:
    if schedule is None:
        return True
    try:
        return next_fire_after(schedule, slot - 1, hash_id=hash_id) == slot
    except ValueError:
        return False


def check_job(job_id: str, job: dict[str, Any], listed: list[list]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    ran = defaultdict(list)
    hash_id = f"{job.get('tenant', '')}/{job.get('name', '')}"
    for run in listed:
        run_id, state, slot, trigger = run[:4]
        if trigger in RUNS_A_SLOT and state != "skipped":
            ran[slot].append(run_id)
        if trigger != BACKFILL:
            continue
        if not _BACKFILL_ID.fullmatch(run_id) or not run_id.startswith(f"{job_id}@") \
                or not run_id.endswith(f"-{slot}"):
            out.append({"type": "backfill-run-id", "job_id": job_id, "run": run,
                        "explanation": "a backfill run is not named <job>@backfill-<n>-<slot>"})
        if not _on_schedule(job.get("schedule"), hash_id, slot):
            out.append({"type": "backfill-slot-off-schedule", "job_id": job_id, "run": run,
                        "explanation": "a backfill ran an instant that is not a slot of the "
                                       "job's schedule"})
        reason = run[7] if len(run) > 7 else ""
        if state == "skipped" and not reason.startswith("overlap"):
            out.append({"type": "backfill-skip-without-reason", "job_id": job_id, "run": run,
                        "explanation": "a backfill slot was SKIPPED for no overlap reason"})
    for slot, run_ids in sorted(ran.items()):
        if len(run_ids) > 1:
            out.append({"type": "slot-ran-twice", "job_id": job_id, "slot_ms": slot,
                        "runs": run_ids,
                        "explanation": "a slot has more than one run that was not skipped "
                                       "(scheduled and backfilled, or backfilled twice)"})
    return out
