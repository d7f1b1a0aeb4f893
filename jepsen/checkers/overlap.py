"""Overlap policies, from the final run listing of each job.

A run SKIPPED with a reason starting "overlap" is legal only when the job's overlap policy
is bounded (not ALLOW_ALL) and another run of the job was active when the fire was decided
(created_ms); a SKIPPED run with reason "misfire" (or none: a node before reasons) is the
misfire checker's. For SKIP and TERMINATE_OTHER, whose runs start when they are created,
at no instant were more than max_active_runs runs of the job active ("with SKIP never two
active runs of one job"). Manual runs count as active runs but may carry a per-call
override, so only scheduled skips are judged.
"""

from __future__ import annotations

from typing import Any

ALLOW_ALL = "allow_all"
# Policies whose runs start at their created_ms (no QUEUED phase): their active intervals
# are [created_ms, finished_ms).
STARTS_AT_CREATION = ("skip", "terminate_other")


def reason_of(run: list) -> str:
    """The run summary's reason (the 8th element; absent in older summaries)."""
    return run[7] if len(run) > 7 else ""


def is_overlap_skip(run: list) -> bool:
    return run[1] == "skipped" and reason_of(run).startswith("overlap")


def is_circuit_skip(run: list) -> bool:
    return run[1] == "skipped" and reason_of(run).startswith("circuit")


def is_policy_skip(run: list) -> bool:
    """Skipped by the overlap policy or the circuit breaker (not the misfire policy)."""
    return is_overlap_skip(run) or is_circuit_skip(run)


def _active_at(run: list, t: int, *, ending_at_t: bool = False) -> bool:
    """Whether `run` was active at `t`. A run that finished at `t` itself counts only with
    `ending_at_t`: times are milliseconds, and within one ms the order of two entries (the
    fire that skipped, the completion that ended the other run) is not in the listing."""
    _run_id, state, _slot, _trigger, created, finished = run[:6]
    if state in ("skipped", "queued"):
        return False
    return created <= t and (finished == 0 or finished > t or (ending_at_t and finished == t))


def _has_breaker(job: dict[str, Any], reason: str) -> bool:
    """A job breaker's skip ("circuit open", "circuit half-open: probe ...") needs the job's
    breaker; a queue breaker's ("circuit open: queue Q") one on the queue Q (the workload
    lists the queues it gave breakers as job["queue_circuits"])."""
    if ": queue " in reason:
        queue = reason.split(": queue ", 1)[1].split(":", 1)[0]
        return queue in job.get("queue_circuits", ())
    return bool(job.get("circuit_breaker"))


def check_job(job_id: str, job: dict[str, Any], listed: list[list]) -> list[dict[str, Any]]:
    policy = job.get("overlap", ALLOW_ALL)
    limit = job.get("max_active_runs") or 1
    out: list[dict[str, Any]] = []
    for run in listed:
        if is_circuit_skip(run) and not _has_breaker(job, reason_of(run)):
            out.append({"type": "circuit-skip-without-breaker", "job_id": job_id, "run": run,
                        "explanation": "a slot was SKIPPED by a circuit breaker the job "
                                       "(or the queue the reason names) does not have"})
        if not is_overlap_skip(run) or run[3] != "schedule":
            continue
        if policy == ALLOW_ALL:
            out.append({"type": "overlap-skip-violates-policy", "job_id": job_id, "run": run,
                        "explanation": "a slot was SKIPPED for overlap under ALLOW_ALL"})
            continue
        created = run[4]
        # Lenient at the instant: a run that ended in the same ms may have ended after the
        # fire was decided (an overlap skip is then legal; seen under partition, the fire in
        # one entry and the other run's completion in the next, both at one ms).
        active = [r[0] for r in listed
                  if r[0] != run[0] and _active_at(r, created, ending_at_t=True)]
        if len(active) < limit:
            out.append({"type": "overlap-skip-without-active-run", "job_id": job_id,
                        "run": run, "active": active, "max_active_runs": limit,
                        "explanation": "a slot was SKIPPED for overlap while fewer than "
                                       "max_active_runs runs of the job were active"})
    if policy in STARTS_AT_CREATION:
        for run in listed:
            if run[1] in ("skipped", "queued"):
                continue
            t = run[4]
            active = [r[0] for r in listed if _active_at(r, t)]
            if len(active) > limit:
                out.append({"type": "overlap-bound-exceeded", "job_id": job_id,
                            "at_ms": t, "active": active, "max_active_runs": limit,
                            "explanation": f"more than max_active_runs runs of a {policy} "
                                           "job were active at once"})
                break
    return out
