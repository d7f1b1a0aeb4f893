"""Smoke tier: one fault kind per run, 3 nodes, every workload, about a minute each.
Each run must find no anomaly; the vacuity checker makes sure the fault happened and enough
operations succeeded.

Second tier: a whole-cluster outage with 300 jobs (catch-up checked slot by slot), storage
faults on one node (corrupt files and a full disk: it must refuse to run, the others carry
on), kills during snapshot writes with different local configs, and a wiped follower
replaced through RemoveNode and AddNode. Faults are shorter there
so that every requested kind happens in the run.

Gateways: two gateways in front of the nodes, every worker and client dialling them; one is
killed (streams forwarded one by one) or cut off from the nodes (workers over the relay). The
lease checker must hold through them: a gateway holds no lease."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gnomon.jepsen.nemesis import GROUPS
from tests.jepsen.conftest import jepsen_skip_reason
from tests.jepsen.harness import run

SMOKE = [
    ("isolate-leader", 1),
    ("kill-leader", 2),
    ("pause-leader", 3),
    ("pause-worker", 4),
    ("clock-jump", 5),
]
QUICK: dict[str, Any] = {"quiet_s": (2.0, 4.0), "fault_s": (3.0, 5.0)}
GATEWAY = [
    ("gateway-kill", 10, False),
    ("gateway-partition", 11, True),
]
SECOND_TIER = [
    ("outage", ("outage",), 6, 45, {}),
    ("storage", ("corrupt", "disk-full"), 7, 50, QUICK),
    ("snapshots-drift", ("snapshot-kill", "config-drift"), 8, 45, QUICK),
    ("membership", ("membership",), 9, 40, QUICK),
]


@pytest.mark.jepsen
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("nemesis", "seed"), SMOKE, ids=[n for n, _ in SMOKE])
def test_smoke(tmp_path, nemesis, seed):
    reason = jepsen_skip_reason(faketime=nemesis.startswith("clock"))
    if reason:
        pytest.skip(reason)
    results = run(tmp_path, workloads=("fire", "lease", "register"), nemeses=(nemesis,),
                  nodes=3, time_limit_s=45, seed=seed)
    assert results["valid"] is True, results["summary"]
    assert nemesis in results["faults"]


@pytest.mark.jepsen
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("name", "nemeses", "seed", "limit", "extra"), SECOND_TIER,
                         ids=[t[0] for t in SECOND_TIER])
def test_smoke_second_tier(tmp_path, name, nemeses, seed, limit, extra):
    reason = jepsen_skip_reason(faketime="outage" in nemeses)
    if reason:
        pytest.skip(reason)
    results = run(tmp_path, workloads=("fire", "lease", "register"), nemeses=nemeses,
                  nodes=3, time_limit_s=limit, seed=seed, **extra)
    assert results["valid"] is True, results["summary"]
    for group in nemeses:
        assert set(GROUPS[group]) & set(results["faults"]), (group, results["faults"])
    stats = results["checkers"]["faults"]["stats"]
    if name == "outage":
        # Slots due inside an outage were checked one by one against their policy.
        assert results["checkers"]["fire"]["stats"]["late_slots"], results["summary"]
    if name == "storage":
        assert sum(stats.get(k, {}).get("refused", 0) for k in GROUPS["corrupt"]) >= 1, stats
        assert stats["disk-full"]["stopped"] >= 1, stats
    if name == "snapshots-drift":
        assert stats["snapshot-kill"]["hits"] >= 1, stats
    if name == "membership":
        assert stats["member-replace"]["replaced"] >= 1, stats


@pytest.mark.jepsen
@pytest.mark.timeout(180)
@pytest.mark.parametrize(("nemesis", "seed", "relay"), GATEWAY, ids=[n for n, _, _ in GATEWAY])
def test_smoke_gateway(tmp_path, nemesis, seed, relay):
    reason = jepsen_skip_reason()
    if reason:
        pytest.skip(reason)
    results = run(tmp_path, workloads=("fire", "lease", "register"), nemeses=(nemesis,),
                  nodes=3, time_limit_s=30, seed=seed, gateways=2, gateway_relay=relay, **QUICK)
    assert results["valid"] is True, results["summary"]
    assert nemesis in results["faults"]
    # The faults hit gateways that held worker streams (not an idle one).
    history = Path(results["run_dir"]) / "history.jsonl"
    starts = [e["value"] for e in map(json.loads, history.read_text().splitlines())
              if e["process"] == "nemesis" and e["f"] == "start" and e["type"] == "ok"]
    assert any((s["streams"][s["gateway"]] or 0) > 0 for s in starts), starts
