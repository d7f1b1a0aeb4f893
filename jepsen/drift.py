"""Different local configs (`config-drift`).

Every node starts with its own seeded values of the limits that change what apply does
(replicated through the log: a node's own values only bootstrap a new cluster, through its
first leader) and of settings that may differ between nodes without harm. The fault restarts
one node with fresh values. The checks: equal digests (always on), and every node reports the
same replicated limits, namely the bootstrap values of one node's first config.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from gnomon.jepsen.fault import Started, wait_rejoined
from gnomon.jepsen.history import INFO, NEMESIS, History

if TYPE_CHECKING:
    from gnomon.jepsen.db import DB
    from gnomon.jepsen.nemesis import Nemesis

# Values stay large enough for the workloads (request-id retries within seconds, runs read
# back through the history store).
REPLICATED = {
    "dedupe_capacity": (2_000, 10_000, 100_000),
    "dedupe_max_age_ms": (120_000, 600_000, 86_400_000),
    "runs_retained_per_job": (3, 10, 20, 50),
    "max_dead_letters": (10, 100, 100_000),
}
# Per-node settings that must not change what any client sees.
HARMLESS = {
    "trigger_tick_ms": (20, 50, 100),
    "max_batch_commands": (200, 1_000),
    "max_inflight_batches": (8, 32),
    "max_worker_credits": (100, 1_000),
    "snapshot_min_entries": (2_000, 20_000),
    "snapshot_min_time_s": (10, 60),
}


def flags(rng: random.Random, keep: frozenset[str] = frozenset()) -> dict[str, str]:
    """One node's local config: a seeded value for every drifted key except those in `keep`
    (set by another fault of the run, e.g. snapshot cadence); the draws do not depend on it."""
    drawn = {k: str(rng.choice(v)) for k, v in {**REPLICATED, **HARMLESS}.items()}
    return {k: v for k, v in drawn.items() if k not in keep}


def kept_keys(db: DB) -> frozenset[str]:
    """Node flags the run's other faults or the user set: drift leaves them alone."""
    return frozenset(db.reserved) & (set(REPLICATED) | set(HARMLESS))


def prepare(db: DB, rng: random.Random, history: History) -> None:
    """Give every node its own first config (before the cluster starts), and make the
    first two nodes differ in every replicated limit that has room to."""
    for node_id in db.nodes:
        db.node_flags[node_id] = {**db.node_flags.get(node_id, {}),
                                  **flags(rng, kept_keys(db))}
    ids = list(db.nodes)
    if len(ids) > 1:
        a, b = db.node_flags[ids[0]], db.node_flags[ids[1]]
        for key, values in REPLICATED.items():
            if key in a and key in b and a[key] == b[key]:
                b[key] = str(next(v for v in values if str(v) != a[key]))
    history.append(NEMESIS, INFO, "node-config",
                   {"nodes": {i: dict(db.node_flags[i]) for i in ids}, "generation": 0})


async def config_drift(n: Nemesis) -> Started:
    """Restart one node (kill -9) with fresh local values."""
    db = n.ctx.db
    node_id = n.rng.choice(n.nodes())
    new = flags(n.rng, kept_keys(db))
    db.kill(node_id)
    db.node_flags[node_id] = {**db.node_flags.get(node_id, {}), **new}
    db.start(node_id)
    rejoin = await wait_rejoined(n, node_id)

    async def keep() -> None:
        return None

    return {"node": node_id, "flags": new, **rejoin}, keep


def first_configs(events: list) -> dict[str, dict[str, str]]:
    """Each node's first local config, from the `node-config` event."""
    return next((e.value["nodes"] for e in events
                 if e.process == NEMESIS and e.f == "node-config"), {})


def limits_sources(events: list, cluster: dict[str, Any]) -> list[str]:
    """The nodes whose first local values are the cluster's replicated limits."""
    return [node for node, cfg in first_configs(events).items()
            if all(str(cluster.get(k)) == cfg[k] for k in REPLICATED
                   if k in cluster and k in cfg)]


def limits_check(events: list, limits: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """`limits`: node -> the replicated limits its final status reported."""
    anomalies: list[dict[str, Any]] = []
    first = first_configs(events)
    if not first or not limits:
        return anomalies
    seen = {tuple(sorted(v.items())) for v in limits.values()}
    if len(seen) > 1:
        anomalies.append({"type": "limits-differ", "limits": limits,
                          "explanation": "nodes report different replicated limits"})
        return anomalies
    cluster = next(iter(limits.values()))
    if not limits_sources(events, cluster):
        anomalies.append({"type": "limits-not-bootstrapped", "limits": cluster,
                          "first_configs": {i: {k: c[k] for k in REPLICATED if k in c}
                                            for i, c in first.items()},
                          "explanation": "the replicated limits are no node's first local "
                                         "values: a later local config was applied"})
    return anomalies
