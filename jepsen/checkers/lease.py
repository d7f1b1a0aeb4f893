"""Fencing (promise 3), from the witness's point of view.

The witness accepts an effect for a task instance only with a token >= the highest it has seen
for that instance. Workers tell the witness what the cluster answered to each completion.
Anomalies:

- `witness-rejected-accepted-token`: the witness had to reject an effect under token t, yet the
  cluster accepted a completion under t (a stale holder's completion went through);
- `stale-completion-accepted`: the cluster accepted a completion under a token lower than one
  it granted for the same instance (or other than the final one);
- `double-completion`: two completions of one instance accepted;
- `token-reuse` (every workload): one token value granted for two instances or two workers;
  tokens are cluster-wide and strictly increasing.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gnomon.jepsen.checkers.schedule import witness_events
from gnomon.jepsen.history import Event


def instance(v: dict[str, Any]) -> tuple[str, str]:
    return v["run_id"], v["task"]


def check(events: list[Event], runs: dict[str, list[list]], queue_jobs: set[str]
          ) -> dict[str, Any]:
    """`runs`: final run summaries of the lease jobs; `queue_jobs`: their job ids."""
    final = {(r[0], t[0]): t for rs in runs.values() for r in rs for t in r[6]}
    effects = defaultdict(list)
    tokens = defaultdict(set)
    for e in witness_events(events, "effect") + witness_events(events, "begin"):
        v = e.value
        if v["run_id"].split("@", 1)[0] not in queue_jobs:
            continue
        tokens[instance(v)].add(v["fencing_token"])
        if e.f == "effect":
            effects[instance(v)].append(e)
    acks = defaultdict(list)
    for e in witness_events(events, "report-ack"):
        v = e.value
        if v["run_id"].split("@", 1)[0] in queue_jobs:
            acks[instance(v)].append(e)
            tokens[instance(v)].add(v["fencing_token"])
    anomalies: list[dict[str, Any]] = []
    stale_attempts = stale_rejected = 0
    for inst, evs in sorted(acks.items()):
        accepted = [e for e in evs if e.value["accepted"]]
        highest = max(tokens[inst])
        for e in evs:
            if e.value["fencing_token"] < highest:
                stale_attempts += 1
                stale_rejected += not e.value["accepted"]
        if len(accepted) > 1:
            anomalies.append({"type": "double-completion", "instance": inst,
                              "acks": [e.value for e in accepted]})
        for e in accepted:
            t = e.value["fencing_token"]
            rejected = [x.value for x in effects[inst]
                        if x.value["fencing_token"] == t and not x.value["accepted"]]
            if rejected:
                anomalies.append({
                    "type": "witness-rejected-accepted-token", "instance": inst, "token": t,
                    "ack": e.value, "rejected_effects": rejected[:3],
                    "explanation": "the fenced store refused this token's effect (it had seen "
                                   "a newer one), but the cluster accepted its completion"})
            fin = final.get(inst)
            if t < highest or (fin is not None and fin[2] != t):
                anomalies.append({
                    "type": "stale-completion-accepted", "instance": inst, "token": t,
                    "highest_token_seen": highest, "final": fin, "ack": e.value,
                    "explanation": "a completion under a superseded lease was accepted"})
    return {"valid": not anomalies, "anomalies": anomalies,
            "stats": {"instances": len(tokens), "completion_reports": sum(map(len,
                                                                              acks.values())),
                      "stale_completion_attempts": stale_attempts,
                      "stale_completions_rejected": stale_rejected,
                      "witness_rejections": sum(1 for evs in effects.values() for e in evs
                                                if not e.value["accepted"])}}


def check_tokens(events: list[Event]) -> dict[str, Any]:
    """Every fencing token names one lease: one instance, one worker."""
    owners: dict[int, set[tuple[str, str, str]]] = defaultdict(set)
    for f in ("begin", "effect", "report-ack"):
        for e in witness_events(events, f):
            v = e.value
            owners[v["fencing_token"]].add((v["run_id"], v["task"], v["worker_id"]))
    anomalies = [{"type": "token-reuse", "token": t, "holders": sorted(o),
                  "explanation": "one fencing token was granted for two leases"}
                 for t, o in sorted(owners.items()) if len(o) > 1]
    return {"valid": not anomalies, "anomalies": anomalies, "stats": {"tokens": len(owners)}}
