"""Smoke tier: one fault kind per run, 3 nodes, every workload, about a minute each.
Each run must find no anomaly; the vacuity checker makes sure the fault happened and enough
operations succeeded."""

from __future__ import annotations

import pytest

from tests.jepsen.conftest import jepsen_skip_reason
from tests.jepsen.harness import run

SMOKE = [
    ("isolate-leader", 1),
    ("kill-leader", 2),
    ("pause-leader", 3),
    ("pause-worker", 4),
    ("clock-jump", 5),
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
