"""Checks every run gets, whatever its workloads.

- terminal-states: once a client saw a run in a terminal state (and which lease finished each
  task), every later read shows exactly that;
- request-ids: a request sent twice under one request id (client chaos) had one effect: both
  answers agree, unless another operation on the same job overlapped it (then the second
  answer may legitimately show that other write);
- lost-runs: a run a client once read still exists at the end (promise 4);
- replicas: after the final heal all replicas reach equal state digests at equal indexes
  (any two sampled at one index must agree; valid only if one index is common to all);
- vacuity: enough successful operations per second, and every requested fault happened;
- crashes: no node or worker process exited on its own;
- availability: after the final heal a leader answered a linearizable read within 60 s.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gnomon.jepsen.history import FINAL, INVOKE, NEMESIS, OK, Event, Op, pair


def run_observations(events: list[Event]) -> list[tuple[int, list]]:
    """(history index, run summary) for every run a read returned, in order."""
    out = []
    for e in events:
        if e.type == OK and e.f in ("read-runs", "final-runs") and isinstance(e.value, dict):
            out += [(e.index, r) for r in e.value.get("runs", [])]
    return out


def check_terminal_states(events: list[Event]) -> dict[str, Any]:
    first: dict[str, tuple[int, list]] = {}
    anomalies = []
    observations = run_observations(events)
    for index, run in observations:
        run_id, state = run[0], run[1]
        if state not in ("succeeded", "failed", "cancelled", "skipped"):
            if run_id in first:
                anomalies.append({"type": "terminal-state-changed", "run_id": run_id,
                                  "first": first[run_id][1], "first_index": first[run_id][0],
                                  "later": run, "later_index": index})
            continue
        outcome = [state, [t[:3] for t in run[6]]]
        if run_id not in first:
            first[run_id] = (index, run)
        elif [first[run_id][1][1], [t[:3] for t in first[run_id][1][6]]] != outcome:
            anomalies.append({"type": "terminal-state-changed", "run_id": run_id,
                              "first": first[run_id][1], "first_index": first[run_id][0],
                              "later": run, "later_index": index})
    return {"valid": not anomalies, "anomalies": anomalies[:50],
            "stats": {"observations": len(observations), "terminal_runs": len(first)}}


def check_lost_runs(events: list[Event], final_runs: set[str]) -> dict[str, Any]:
    seen: dict[str, int] = {}
    for index, run in run_observations(events):
        seen.setdefault(run[0], index)
    lost = sorted(r for r in seen if r not in final_runs)
    anomalies = [{"type": "lost-run", "run_id": r, "first_seen_index": seen[r],
                  "explanation": "a run a client read is missing from the final state"}
                 for r in lost]
    return {"valid": not anomalies, "anomalies": anomalies[:50], "stats": {"runs_seen": len(seen)}}


def _target(op: Op) -> str | None:
    v = op.invoke.value or {}
    return v.get("key") or v.get("job_id")


def check_request_ids(events: list[Event]) -> dict[str, Any]:
    ops = [op for op in pair(events) if op.invoke.process not in (NEMESIS, FINAL)]
    by_target: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        t = _target(op)
        if t is not None:
            by_target[t].append(op)
    anomalies = []
    checked = skipped = 0
    for op in ops:
        v = (op.complete.value if op.complete else None) or {}
        replies = v.get("replies") if isinstance(v, dict) else None
        if not replies:
            continue
        a, b = replies
        if "info" in (a["type"], b["type"]):
            continue
        start, end = op.invoke.index, op.complete.index
        writes = ("create", "update", "delete", "trigger")
        overlapping = [o for o in by_target.get(_target(op), []) if o is not op
                       and o.invoke.f in writes and o.invoke.index < end
                       and (o.complete is None or o.complete.index > start)]
        # A trigger's answer names its own run whatever else happens; other answers show
        # the job as it is now, so a concurrent write may change them legitimately.
        if overlapping and op.invoke.f != "trigger":
            skipped += 1
            continue
        checked += 1
        if a != b:
            kind = "request-id-two-effects" if a["type"] == b["type"] == OK \
                else "request-id-answers-differ"
            anomalies.append({"type": kind, "request_id": v.get("request_id"),
                              "op": {"f": op.invoke.f, "value": op.invoke.value,
                                     "invoke_index": op.invoke.index},
                              "first_answer": a, "retry_answer": b,
                              "explanation": "the same request id, sent twice, got two different "
                                             "answers (with no other write on the job in "
                                             "between): it was not deduplicated"})
    return {"valid": not anomalies, "anomalies": anomalies,
            "stats": {"retried_requests": checked, "skipped_concurrent": skipped}}


def check_digests(samples: dict[str, dict[int, str]], expected_nodes: list[str]
                  ) -> dict[str, Any]:
    """`samples`: node -> {applied index: digest} taken after the final heal."""
    missing = [n for n in expected_nodes if not samples.get(n)]
    common = set.intersection(*(set(s) for s in samples.values())) if samples else set()
    shared = sorted({i for s in samples.values() for i in s
                     if sum(i in t for t in samples.values()) > 1})
    anomalies = []
    # Any two replicas sampled at one index must agree, even if not every node has it.
    for index in shared:
        digests = {n: samples[n][index] for n in samples if index in samples[n]}
        if len(set(digests.values())) > 1:
            anomalies.append({"type": "replica-divergence", "applied_index": index,
                              "digests": digests,
                              "explanation": "replicas that applied the same log prefix hold "
                                             "different states"})
            break
    if anomalies:
        valid: bool | str = False
    elif missing or not common:
        valid = "unknown"
    else:
        valid = True
    return {"valid": valid, "anomalies": anomalies,
            "stats": {"compared_at": sorted(common)[-3:], "nodes": sorted(samples),
                      "unsampled": missing}}


def check_vacuity(events: list[Event], *, workloads: list[str], requested: list[str],
                  duration_s: float, min_ok_rate: float) -> dict[str, Any]:
    anomalies = []
    ok_by_workload: dict[str, int] = defaultdict(int)
    for op in pair(events):
        if op.complete is not None and op.complete.type == OK and op.invoke.workload:
            ok_by_workload[op.invoke.workload] += 1
    for w in workloads:
        rate = ok_by_workload[w] / max(duration_s, 1e-9)
        if rate < min_ok_rate:
            anomalies.append({"type": "too-few-ok-operations", "workload": w,
                              "ok": ok_by_workload[w], "rate_per_s": round(rate, 2),
                              "minimum_per_s": min_ok_rate})
    happened: dict[str, int] = defaultdict(int)
    for e in events:
        if e.process == NEMESIS and e.f == "start" and e.type == OK:
            happened[e.value["kind"]] += 1
    groups = _requested_groups(requested)
    for name, kinds in groups.items():
        if not any(happened[k] for k in kinds):
            anomalies.append({"type": "fault-never-happened", "nemesis": name,
                              "explanation": "a requested fault was never injected: the run "
                                             "proves nothing about it"})
    return {"valid": not anomalies, "anomalies": anomalies,
            "stats": {"ok_ops": dict(ok_by_workload), "faults": dict(happened)}}


def _requested_groups(requested: list[str]) -> dict[str, list[str]]:
    from gnomon.jepsen.nemesis import GROUPS

    out = {}
    for name in requested:
        if name not in ("none", ""):
            out[name] = list(GROUPS.get(name, (name,)))
    return out


def check_availability(events: list[Event]) -> dict[str, Any]:
    """After the final heal a leader served linearizable reads within the bound."""
    failed = [e for e in events if e.process == FINAL and e.f == "leader" and e.type == "fail"]
    anomalies = [{"type": "no-leader-after-heal", "error": e.error,
                  "explanation": "every fault was healed, yet no leader answered a "
                                 "linearizable read within 60 s"} for e in failed]
    return {"valid": not anomalies, "anomalies": anomalies}


def check_crashes(crashed: list[str]) -> dict[str, Any]:
    anomalies = [{"type": "process-crashed", "process": c,
                  "explanation": "a node or worker exited on its own (see its log)"}
                 for c in crashed]
    return {"valid": not anomalies, "anomalies": anomalies}


def op_counts(events: list[Event]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for e in events:
        if e.process in (NEMESIS,) or e.type == INVOKE or isinstance(e.process, str):
            continue
        counts[e.type] += 1
    return dict(counts)
