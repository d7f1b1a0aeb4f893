"""Scheduled jobs (fire and lease workloads): runs against the schedule, executions against runs.

Inputs: the jobs as created (first slot) and as paused in the final phase (the slot that was
next, i.e. every earlier slot must have fired), the final run listing, and the witness events
(task effects, and the cluster's answers to completion reports as the workers saw them).

Promises checked (ARCHITECTURE section 1):
- 1: one run per (job, slot); at most one *accepted* completion per task of a run (an
  execution the cluster accepted: a report acknowledged as accepted, or the final lease);
- 2: every slot between the first and the pause boundary has a run (no slot dropped); a run
  is SKIPPED only when the job's misfire policy allows it and the slot was late past its
  grace when it fired; every other run SUCCEEDED, with a witnessed execution, within
  `bound_s` after max(slot, final heal);
- 4: a completion acknowledged to a worker survives (the task is SUCCEEDED at the end), and a
  run a client once read still exists;
- counts of scheduled runs per job equal the number of slots;
- misfire policies slot by slot (checkers/misfire.py), with the whole-cluster outages the
  nemesis recorded: a slot due inside one was late by construction;
- catch-up: after the final heal every job's next slot reached the heal time within the
  bound (the high-water marks moved past every slot due before the heal).

With clocks moved forward for the rest of a run (outage-clock), slots are in node-clock time
and executions in real time: a slot's deadline starts when it was first due in real time.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from gnomon.jepsen.checkers import backfill, misfire, overlap
from gnomon.jepsen.history import FINAL, OK, WITNESS, Event
from gnomon.node.core.model import MisfirePolicy, Schedule
from gnomon.node.spec.schedules import next_fire_after

TERMINAL = {"succeeded", "failed", "cancelled", "skipped"}
EXECUTION_KINDS = {"fire", "lease-end"}
DEFAULT_GRACE_MS = 60_000


def witness_events(events: list[Event], f: str) -> list[Event]:
    return [e for e in events if e.process == WITNESS and e.f == f and e.type == OK]


def slots(schedule: Schedule, hash_id: str, first: int, boundary: int,
          limit: int = 100_000) -> list[int]:
    out = []
    slot = first
    while slot and slot < boundary and len(out) < limit:
        out.append(slot)
        slot = next_fire_after(schedule, slot, hash_id=hash_id)
    return out


def check(jobs: dict[str, dict[str, Any]], runs: dict[str, list[list]], events: list[Event],
          *, heal_wall_ms: int, bound_s: float, triggered: dict[str, str],
          nodes: int = 0, workload: str | None = None) -> dict[str, Any]:
    """`jobs`: job_id -> {name, tenant, schedule (core Schedule), policy, grace_ms, first_ms,
    boundary_ms}; `runs`: job_id -> run summaries (jepsen.client.run_summary);
    `triggered`: run_id -> request description for acknowledged manual triggers; `nodes`: the
    cluster size (whole-cluster outages); `workload`: whose final `caught-up` read to check."""
    windows = misfire.outage_windows(events, nodes) if nodes else []
    timeline = misfire.clock_timeline(events)
    policy_stats: Counter = Counter()
    anomalies: list[dict[str, Any]] = []
    effects = defaultdict(list)
    for e in witness_events(events, "effect"):
        effects[e.value["run_id"]].append(e)
    acks = defaultdict(list)
    for e in witness_events(events, "report-ack"):
        acks[(e.value["run_id"], e.value["task"])].append(e)
    all_runs = {r[0]: r for rs in runs.values() for r in rs}
    stats = {"jobs": len(jobs), "scheduled_runs": 0, "expected_slots": 0, "skipped": 0,
             "executions": sum(len(v) for r, v in effects.items() if _is_ours(r, jobs)),
             "manual_runs": 0}
    for job_id, job in sorted(jobs.items()):
        listed = runs.get(job_id, [])
        scheduled = [r for r in listed if r[3] == "schedule"]
        # No pause answer (final-pause-failed): up to the last listed slot, so a gap still
        # shows.
        boundary = job["boundary_ms"]
        if boundary is None:
            boundary = max((r[2] for r in scheduled), default=job["first_ms"]) + 1
        expected = slots(job["schedule"], f"{job['tenant']}/{job['name']}", job["first_ms"],
                         boundary)
        stats["scheduled_runs"] += len(scheduled)
        stats["expected_slots"] += len(expected)
        by_slot = defaultdict(list)
        for r in scheduled:
            by_slot[r[2]].append(r)
        for slot, rs in sorted(by_slot.items()):
            if len(rs) > 1:
                anomalies.append({"type": "duplicate-run", "job_id": job_id, "slot_ms": slot,
                                  "runs": rs})
        missing = [s for s in expected if s not in by_slot]
        extra = sorted(set(by_slot) - set(expected))
        if missing:
            anomalies.append({"type": "missing-slot", "job_id": job_id, "slots_ms": missing[:20],
                              "count": len(missing),
                              "explanation": "due slots before the pause boundary without a run"})
        if extra:
            anomalies.append({"type": "unexpected-run", "job_id": job_id, "slots_ms": extra[:20],
                              "explanation": "runs for instants not on the schedule or after "
                                             "the boundary the pause reported"})
        if len(scheduled) != len(expected):
            anomalies.append({"type": "run-count", "job_id": job_id, "runs": len(scheduled),
                              "slots": len(expected)})
        for r in scheduled:
            anomalies += _check_run(job, r, effects, acks, heal_wall_ms, bound_s, timeline)
            stats["skipped"] += r[1] == "skipped"
        anomalies += misfire.check_job(job_id, job, scheduled, windows, policy_stats)
        anomalies += overlap.check_job(job_id, job, listed)
        anomalies += backfill.check_job(job_id, job, listed)
        stats["backfill_runs"] = stats.get("backfill_runs", 0) + sum(
            backfill.is_backfill(r) for r in listed)
        stats["overlap_skips"] = stats.get("overlap_skips", 0) + sum(
            overlap.is_overlap_skip(r) for r in scheduled)
    for run_id, request in sorted(triggered.items()):
        stats["manual_runs"] += 1
        run = all_runs.get(run_id)
        if run is None:
            anomalies.append({"type": "lost-run", "run_id": run_id, "trigger": request,
                              "explanation": "an acknowledged manual trigger has no run"})
            continue
        anomalies += _check_run(None, run, effects, acks, heal_wall_ms, bound_s, timeline)
    for (run_id, task), evs in sorted(acks.items()):
        if run_id not in all_runs:
            continue
        anomalies += _check_acks(all_runs[run_id], task, evs)
    for run_id, evs in sorted(effects.items()):
        if run_id not in all_runs and _is_ours(run_id, jobs):
            anomalies.append({"type": "execution-of-unknown-run", "run_id": run_id,
                              "effects": [e.value for e in evs[:5]],
                              "explanation": "a task ran for a run the cluster does not have"})
    anomalies += check_catch_up(events, workload)
    stats["outages"] = len(windows)
    stats["late_slots"] = dict(sorted(policy_stats.items()))
    return {"valid": not anomalies, "anomalies": anomalies, "stats": stats}


def check_catch_up(events: list[Event], workload: str | None) -> list[dict[str, Any]]:
    """The final phase's `caught-up` read: `fail` means some job's next slot was still before
    the heal when the bound ran out (a fire high-water mark that stopped moving)."""
    last = None
    for e in events:
        if e.process == FINAL and e.f == "caught-up" and e.workload == workload \
                and e.type != "invoke":
            last = e
    if last is None or last.type == OK:
        return []
    return [{"type": "catch-up-incomplete", "workload": workload, **(last.value or {}),
             "explanation": "after the final heal some jobs still had due slots unfired at the "
                            "end of the bound: catch-up stalled"}]


def _is_ours(run_id: str, jobs: dict[str, dict[str, Any]]) -> bool:
    return run_id.split("@", 1)[0] in jobs


def _accepted(run: list, task: str, acks: dict) -> list[Event]:
    return [e for e in acks.get((run[0], task), []) if e.value["accepted"]]


def _check_run(job: dict[str, Any] | None, run: list, effects: dict, acks: dict,
               heal_wall_ms: int, bound_s: float,
               timeline: list[tuple[int, int]] | None = None) -> list[dict[str, Any]]:
    run_id, state, slot, _trigger, created_ms, _finished_ms, tasks = run[:7]
    out: list[dict[str, Any]] = []
    execs = [e for e in effects.get(run_id, []) if e.value["kind"] in EXECUTION_KINDS]
    if state == "skipped" and overlap.is_policy_skip(run):
        # Legal only with an active run and a bounded policy: checkers/overlap.py.
        if execs:
            out.append({"type": "skipped-but-executed", "run": run,
                        "effects": [e.value for e in execs[:3]]})
        return out
    if state == "skipped":
        policy = job["policy"] if job else MisfirePolicy.RUN_ALL
        grace = job["grace_ms"] if job and job["grace_ms"] > 0 else DEFAULT_GRACE_MS
        if policy == MisfirePolicy.RUN_ALL or created_ms - slot <= grace:
            out.append({"type": "skip-violates-policy", "run": run, "policy": policy,
                        "grace_ms": grace, "lateness_ms": created_ms - slot})
        if execs:
            out.append({"type": "skipped-but-executed", "run": run,
                        "effects": [e.value for e in execs[:3]]})
        return out
    if state != "succeeded":
        out.append({"type": "not-executed", "run": run,
                    "explanation": f"a due run is {state} at the end, {bound_s:g}s after the "
                                   "final heal"})
        return out
    due = misfire.due_real_ms(slot, timeline or [(0, 0)])
    deadline = max(due, heal_wall_ms) + int(bound_s * 1000)
    for task_name, _tstate, token, worker in tasks:
        mine = [e for e in execs if e.value["task"] == task_name
                and e.value["fencing_token"] == token and e.value["worker_id"] == worker]
        if not mine:
            out.append({"type": "completion-without-execution", "run": run, "task": task_name,
                        "token": token, "worker": worker,
                        "explanation": "the cluster accepted a completion under a lease whose "
                                       "holder never executed the task"})
            continue
        done = min([e.wall_ms for e in mine] + [e.wall_ms for e in _accepted(run, task_name,
                                                                               acks)])
        if done > deadline:
            out.append({"type": "late-execution", "run": run, "task": task_name,
                        "executed_wall_ms": done, "deadline_wall_ms": deadline})
    return out


def _check_acks(run: list, task: str, evs: list[Event]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    accepted = [e for e in evs if e.value["accepted"]]
    if len(accepted) > 1:
        out.append({"type": "double-accepted-completion", "run_id": run[0], "task": task,
                    "acks": [e.value for e in accepted],
                    "explanation": "the cluster accepted more than one completion for one "
                                   "task of one run"})
    final = {t[0]: t for t in run[6]}.get(task)
    for e in accepted:
        if final is None or final[1] != "succeeded":
            out.append({"type": "lost-completion", "run": run, "task": task, "ack": e.value,
                        "explanation": "a completion acknowledged to the worker is not in the "
                                       "final state"})
    return out
