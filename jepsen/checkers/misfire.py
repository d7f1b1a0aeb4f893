"""Misfire policies slot by slot, with what the history says about outages.

A fire is decided by a leader at its wall time D (the cluster clock of the nodes), then
committed; the run records `created_ms` >= D (cluster time is max(clock, batch stamp), and the
batch is stamped after the decision). From the outside D is unknown, but bounded:

- always D <= created_ms, so a run SKIPPED with `created_ms - slot <= grace` was on time when
  decided (anomaly), and a RUN_LATEST run SKIPPED whose next slot is after `created_ms` was the
  latest due one (anomaly: RUN_LATEST runs the latest missed slot);
- during a whole-cluster outage (every node stopped or dead, from `down` to `up`, recorded by
  the nemesis in node-clock time) no decision is made, so a slot due inside the outage has
  D >= up: if `up - slot > grace` it was late when it fired. Then SKIP must have SKIPPED it,
  and RUN_LATEST must have SKIPPED it if its next slot was also due by `up`.

Clock faults on single nodes can move a decision time backwards; the bounds hold with the
offsets this harness applies to every node alike (outage-clock only moves clocks forward).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from gnomon.jepsen.checkers import overlap
from gnomon.jepsen.history import NEMESIS, OK, Event
from gnomon.node.core.model import DEFAULT_MISFIRE_GRACE_MS, MisfirePolicy
from gnomon.node.spec.schedules import next_fire_after

# Slack for "no decision between down and up": signal delivery and the harness's clock reads.
MARGIN_MS = 250
WHOLE_CLUSTER = ("outage-stop", "outage-kill", "outage-clock", "kill-all")


@dataclass(frozen=True)
class Window:
    """A whole-cluster outage in node-clock milliseconds."""

    kind: str
    down_ms: int
    up_ms: int


def outage_windows(events: list[Event], nodes: int) -> list[Window]:
    """Every completed whole-cluster outage: start `down_wall_ms` + offset then, stop
    `up_wall_ms` + offset after (the clock may have jumped in between)."""
    out: list[Window] = []
    open_: dict[str, Any] | None = None
    for e in events:
        if e.process != NEMESIS or e.type != OK or not isinstance(e.value, dict):
            continue
        v = e.value
        if e.f == "start" and "down_wall_ms" in v and len(v.get("nodes", ())) == nodes:
            open_ = v
        elif e.f == "stop" and open_ is not None and v.get("kind") == open_["kind"] \
                and "up_wall_ms" in v:
            out.append(Window(open_["kind"], open_["down_wall_ms"] + open_.get("offset_ms", 0),
                              v["up_wall_ms"] + v.get("offset_ms", 0)))
            open_ = None
    return out


def clock_timeline(events: list[Event]) -> list[tuple[int, int]]:
    """(real ms, offset ms) from then on, for every change of the clock every node shares."""
    out = [(0, 0)]
    for e in events:
        if e.process == NEMESIS and e.type == OK and e.f == "stop" \
                and isinstance(e.value, dict) and "up_wall_ms" in e.value:
            offset = e.value.get("offset_ms", 0)
            if offset != out[-1][1]:
                out.append((e.value["up_wall_ms"], offset))
    return out


def due_real_ms(slot_ms: int, timeline: list[tuple[int, int]]) -> int:
    """The real time at which node-clock instant `slot_ms` was first due: a slot the clocks
    jumped over became due at the jump."""
    for k, (start, offset) in enumerate(timeline):
        end = timeline[k + 1][0] if k + 1 < len(timeline) else None
        real = slot_ms - offset
        if real < start:
            return start
        if end is None or real < end:
            return real
    return slot_ms - timeline[-1][1]


def _late_by(slot: int, windows: list[Window]) -> int | None:
    """How late a slot due inside an outage was at least when it fired (None: not inside)."""
    for w in windows:
        if w.down_ms + MARGIN_MS < slot < w.up_ms:
            return w.up_ms - slot
    return None


def _up_of(slot: int, windows: list[Window]) -> int:
    return next(w.up_ms for w in windows if w.down_ms + MARGIN_MS < slot < w.up_ms)


def check_job(job_id: str, job: dict[str, Any], scheduled: list[list],
              windows: list[Window], stats: Counter) -> list[dict[str, Any]]:
    """Every scheduled run of one job against its policy (see the module docstring)."""
    policy = job["policy"]
    grace = job["grace_ms"] if job["grace_ms"] > 0 else DEFAULT_MISFIRE_GRACE_MS
    hash_id = f"{job['tenant']}/{job['name']}"
    out: list[dict[str, Any]] = []
    for run in scheduled:
        _run_id, state, slot, _trigger, created, _finished, _tasks = run[:7]
        if overlap.is_policy_skip(run):
            continue  # the overlap policy's or breaker's skip (checkers/overlap.py)
        nxt = next_fire_after(job["schedule"], slot, hash_id=hash_id)
        late = _late_by(slot, windows)
        skipped = state == "skipped"
        if late is not None and late > grace + MARGIN_MS:
            stats[f"{policy}:late-{'skipped' if skipped else 'ran'}"] += 1
            out += _late_slot(job_id, run, policy, grace, late, nxt, _up_of(slot, windows))
        if skipped and policy == MisfirePolicy.RUN_LATEST and nxt > created:
            out.append({"type": "latest-slot-skipped", "job_id": job_id, "run": run,
                        "next_slot_ms": nxt, "policy": policy,
                        "explanation": "RUN_LATEST skipped a slot whose next slot was not due "
                                       "yet when the fire was decided (<= created_ms): the "
                                       "latest missed slot must run"})
    return out


def _late_slot(job_id: str, run: list, policy: str, grace: int, late: int, nxt: int,
               up: int) -> list[dict[str, Any]]:
    skipped = run[1] == "skipped"
    base = {"job_id": job_id, "run": run, "policy": policy, "grace_ms": grace,
            "late_at_least_ms": late}
    if policy == MisfirePolicy.SKIP and not skipped:
        return [{"type": "late-slot-ran", **base,
                 "explanation": "a slot due during a whole-cluster outage fired later than "
                                "its grace, yet ran: SKIP must record it SKIPPED"}]
    if policy == MisfirePolicy.RUN_LATEST and not skipped and nxt <= up - MARGIN_MS:
        return [{"type": "superseded-slot-ran", **base, "next_slot_ms": nxt,
                 "explanation": "a late slot ran although its next slot was due too when the "
                                "cluster came back: RUN_LATEST runs only the latest"}]
    return []
