"""What the second-tier faults must have done, and what the node must have done about them.

Read off the nemesis events (their start and stop values carry the evidence):

- corrupt-*: the damaged file was there and was changed; where the node must refuse
  (disk.MODES), it exited non-zero with a log line naming the file (`corrupt-file-accepted`,
  `refused-without-naming-file`, `exit-zero-on-corrupt-file` otherwise); after the wipe it
  caught up (`rejoin-timeout`). Vacuity: at least one refusal.
- disk-full: the tmpfs was full (`disk-not-full`, vacuity) and the node stopped non-zero
  (`disk-full-node-kept-running`, `exit-zero-on-full-disk`); it came back once space was
  freed (`rejoin-timeout`).
- snapshot-kill: how many kills hit while a snapshot temp file existed; none in a run is
  `snapshot-kill-never-hit` (vacuity); a restarted node caught up (`rejoin-timeout`).
- outage-*: every node was stopped (`outage-incomplete`); outage-clock moved every clock.
- config-drift: the nodes' first configs differ in a replicated limit (vacuity), and every
  node reports the same replicated limits, one node's first values (`drift.limits_check`).
- member-replace: the wiped follower was removed and added back (`member-not-added`), then
  caught up (`rejoin-timeout`).
- while one node is down (corrupt-*, disk-full, member-replace), the others carry on: some client operation
  succeeded and some task executed between the fault's start and stop
  (`no-progress-while-one-node-down`; the correctness of what they did is every other checker's).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from gnomon.jepsen import drift
from gnomon.jepsen.history import NEMESIS, OK, WITNESS, Event

FULL_BYTES = 64 << 10
ONE_NODE_DOWN = {"corrupt-snapshot", "corrupt-journal", "corrupt-meta", "disk-full",
                 "member-replace"}
# A shorter window proves nothing: it may be all election (the victim led) and a client's
# back-off. Seen on a loaded machine: 2.0 s without one successful operation after a leader
# was killed, in a run whose other windows served 15 operations a second.
MIN_PROGRESS_WINDOW_S = 3.0


def nemesis_ops(events: list[Event]) -> list[tuple[Event, Event | None]]:
    """(start event, stop event or None) of every fault that started."""
    out: list[tuple[Event, Event | None]] = []
    for e in events:
        if e.process != NEMESIS or e.type != OK or not isinstance(e.value, dict):
            continue
        if e.f == "start":
            out.append((e, None))
        elif e.f == "stop" and out and out[-1][1] is None \
                and out[-1][0].value["kind"] == e.value.get("kind"):
            out[-1] = (out[-1][0], e)
    return out


def check(events: list[Event], kinds: list[str], *, nodes: int,
          limits: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Every second-tier fault's evidence, the vacuity guards, and (config-drift) the
    replicated limits every node reported after the heal."""
    anomalies: list[dict[str, Any]] = []
    stats: dict[str, Any] = defaultdict(Counter)
    for start_ev, stop_ev in nemesis_ops(events):
        start, stop = start_ev.value, stop_ev.value if stop_ev else None
        kind = start["kind"]
        fn = CHECKS.get(kind.split("-")[0] if kind.startswith("corrupt") else kind)
        if fn is not None:
            anomalies += fn(start, stop, stats[kind], nodes)
        if kind in ONE_NODE_DOWN and stop_ev is not None:
            anomalies += _progress(events, start_ev, stop_ev, stats[kind])
    anomalies += _vacuity(kinds, stats)
    if "config-drift" in kinds:
        anomalies += _drift(events, limits, stats["config-drift"])
    return {"valid": not anomalies, "anomalies": anomalies,
            "stats": {k: dict(v) for k, v in stats.items()}}


def _progress(events: list[Event], start: Event, stop: Event, st: Counter
              ) -> list[dict[str, Any]]:
    """While one node is down (refused or full), the others must serve: client operations
    succeed and tasks execute between the start and the stop of the fault."""
    window = [e for e in events[start.index + 1:stop.index]]
    held_s = (stop.time - start.time) / 1e9
    ok_ops = sum(1 for e in window if isinstance(e.process, int) and e.type == OK)
    effects = sum(1 for e in window if e.process == WITNESS and e.f == "effect")
    st["ok_ops_while_down"] += ok_ops
    st["effects_while_down"] += effects
    if held_s < MIN_PROGRESS_WINDOW_S or (ok_ops and effects):
        return []
    return [{"type": "no-progress-while-one-node-down", "kind": start.value["kind"],
             "node": start.value.get("node"), "held_s": round(held_s, 1), "ok_ops": ok_ops,
             "effects": effects,
             "explanation": "with one node down the others should have carried on: no client "
                            "operation succeeded or no task executed while it was down"}]


def _rejoin(start: dict[str, Any], stop: dict[str, Any] | None) -> list[dict[str, Any]]:
    if stop is None or stop.get("rejoined", True):
        return []
    return [{"type": "rejoin-timeout", "kind": start["kind"], "node": start.get("node"),
             "stop": stop, "explanation": "a node restarted after the fault did not catch up "
                                          "with the others within the bound"}]


def _corrupt(start: dict[str, Any], stop: dict[str, Any] | None, st: Counter,
             nodes: int) -> list[dict[str, Any]]:
    st["injected"] += 1
    st[f"mode:{start['mode']}"] += 1
    out = _rejoin(start, stop)
    if start.get("refused"):
        st["refused"] += 1
        return out
    if start["expect"] != "refuse":
        st["recovered" if start.get("rc") is None else "exited"] += 1
        return out
    st["flagged"] += 1
    base = {"kind": start["kind"], "node": start["node"], "file": start["file"],
            "mode": start["mode"], "offset": start.get("offset"), "rc": start.get("rc"),
            "log_tail": start.get("log_tail")}
    if start.get("rc") is None:
        out.append({"type": "corrupt-file-accepted", **base,
                    "jobs_reported": start.get("accepted_jobs"),
                    "explanation": "a node restarted on a damaged file kept running instead of "
                                   "refusing to start"})
    elif start["rc"] == 0:
        out.append({"type": "exit-zero-on-corrupt-file", **base,
                    "explanation": "the node stopped on a damaged file with exit status 0"})
    else:
        out.append({"type": "refused-without-naming-file", **base,
                    "explanation": "the node exited non-zero but its log never names the file "
                                   "it could not use"})
    return out


def _disk_full(start: dict[str, Any], stop: dict[str, Any] | None, st: Counter,
               nodes: int) -> list[dict[str, Any]]:
    st["injected"] += 1
    out = _rejoin(start, stop)
    base = {"node": start["node"], "free_bytes": start.get("free_bytes"), "rc": start.get("rc")}
    if start.get("free_bytes", FULL_BYTES) >= FULL_BYTES:
        out.append({"type": "disk-not-full", **base,
                    "explanation": "the filler did not fill the node's tmpfs"})
    if start.get("rc") is None:
        out.append({"type": "disk-full-node-kept-running", **base,
                    "log_tail": start.get("log_tail"),
                    "explanation": "a node whose disk is full kept running"})
    elif start["rc"] == 0:
        out.append({"type": "exit-zero-on-full-disk", **base})
    else:
        st["stopped"] += 1
        st["named_no_space"] += bool(start.get("no_space_line"))
    return out


def _snapshot_kill(start: dict[str, Any], stop: dict[str, Any] | None, st: Counter,
                   nodes: int) -> list[dict[str, Any]]:
    st["kills"] += 1
    st[f"trigger:{start['trigger']}"] += 1
    st[f"mode:{start['mode']}"] += 1
    st["hits"] += bool(start.get("hit"))
    st["orphans"] += start.get("orphans", 0)
    return _rejoin(start, stop)


def _outage(start: dict[str, Any], stop: dict[str, Any] | None, st: Counter,
            nodes: int) -> list[dict[str, Any]]:
    st["outages"] += 1
    out = []
    if len(start.get("stopped", ())) != nodes:
        out.append({"type": "outage-incomplete", "kind": start["kind"],
                    "stopped": start.get("stopped"),
                    "explanation": "not every node was stopped: no whole-cluster outage"})
    if stop is not None:
        st["down_s"] += round((stop["up_wall_ms"] - start["down_wall_ms"]) / 1000)
        if start["kind"] == "outage-clock":
            want = f"{stop['offset_ms'] / 1000:+.3f}"
            files = stop.get("clock_files", {})
            if len(files) != nodes or any(v != want for v in files.values()):
                out.append({"type": "clock-not-moved", "want": want, "files": files})
            st["jump_s"] += round(start.get("jump_s", 0))
    return out


def _member_replace(start: dict[str, Any], stop: dict[str, Any] | None, st: Counter,
                    nodes: int) -> list[dict[str, Any]]:
    st["replaced"] += 1
    if stop is None:
        return []
    if not stop.get("added"):
        return [{"type": "member-not-added", "node": start["node"], "stop": stop,
                 "explanation": "the wiped node was removed but AddNode did not make it a "
                                "member again"}]
    st["catch_up_ms"] += stop.get("catch_up_ms", 0)
    return _rejoin(start, stop)


CHECKS = {"corrupt": _corrupt, "disk-full": _disk_full, "snapshot-kill": _snapshot_kill,
          "member-replace": _member_replace, "outage-stop": _outage, "outage-kill": _outage, "outage-clock": _outage}


def _vacuity(kinds: list[str], stats: dict[str, Counter]) -> list[dict[str, Any]]:
    out = []
    corrupt = [k for k in kinds if k.startswith("corrupt")]
    total = Counter()
    for k in corrupt:
        total.update(stats.get(k, Counter()))
    if total["injected"] and not total["refused"] and not total["flagged"]:
        out.append({"type": "corrupt-never-refused",
                        "explanation": "no injected corruption made a node refuse to start"})
    sk = stats.get("snapshot-kill")
    if "snapshot-kill" in kinds and sk and sk["kills"] and not sk["hits"]:
        out.append({"type": "snapshot-kill-never-hit", "kills": sk["kills"],
                    "explanation": "no kill hit while a snapshot temp file existed: the run "
                                   "says nothing about crashes during a snapshot write"})
    return out


def _drift(events: list[Event], limits: dict[str, dict[str, Any]], st: Counter
           ) -> list[dict[str, Any]]:
    first = drift.first_configs(events)
    differ = [k for k in drift.REPLICATED if len({c.get(k) for c in first.values()}) > 1]
    st["replicated_keys_differing"] = len(differ)
    if limits:
        for node in drift.limits_sources(events, next(iter(limits.values()))):
            st[f"limits_from:{node}"] += 1
    out = drift.limits_check(events, limits)
    if not differ:
        out.append({"type": "configs-never-differed",
                    "explanation": "every node started with the same replicated limits"})
    return out
