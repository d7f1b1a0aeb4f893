"""Each canary (a test-only node switch that breaks one promise) is caught by its checker.

The same scenarios without the canary are clean: see test_smoke and the matrix."""

from __future__ import annotations

import pytest

from tests.jepsen.harness import anomaly_types, run

pytestmark = [pytest.mark.jepsen, pytest.mark.timeout(240)]


def test_fire_on_isleader_is_caught_by_the_fire_checker(require_jepsen, tmp_path):
    # Workers stay reachable from an isolated leader that still believes it leads.
    results = run(tmp_path, workloads=("fire",), nemeses=("isolate-leader",), nodes=3,
                  time_limit_s=25, seed=11, canaries=("fire-on-isleader",))
    assert results["valid"] is False
    assert "double-accepted-completion" in anomaly_types(results, "fire")


def test_skip_token_check_is_caught_by_the_lease_checker(require_jepsen, tmp_path):
    # Zombies report after losing their lease; only the token check rejects them.
    results = run(tmp_path, workloads=("lease",), nemeses=("pause-worker",), nodes=3,
                  time_limit_s=30, seed=12, canaries=("skip-token-check",), sdk_workers=0,
                  zombies=2)
    assert results["valid"] is False
    assert "stale-completion-accepted" in anomaly_types(results, "lease")


def test_follower_read_is_caught_by_the_register_checker(require_jepsen, tmp_path):
    results = run(tmp_path, workloads=("register",), nemeses=("isolate-one",), nodes=3,
                  time_limit_s=25, seed=13, canaries=("follower-read",))
    assert results["valid"] is False
    assert "non-linearizable" in anomaly_types(results, "register")


def test_no_dedupe_is_caught_by_the_request_id_checker(require_jepsen, tmp_path):
    results = run(tmp_path, workloads=("register",), nemeses=("client",), nodes=3,
                  time_limit_s=20, seed=14, canaries=("no-dedupe",))
    assert results["valid"] is False
    assert "request-id-two-effects" in anomaly_types(results, "request-ids")
