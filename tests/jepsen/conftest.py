"""The jepsen tier: real clusters in network namespaces. Skipped, with the reason, where the
machine cannot run it (not root, iptables or libfaketime missing)."""

from __future__ import annotations

import os

import pytest

from gnomon.jepsen.net import missing_tools


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "jepsen: fault-injection run of a real cluster (root)")


def jepsen_skip_reason(*, faketime: bool = False) -> str | None:
    if os.geteuid() != 0:
        return "the jepsen tier needs root (network namespaces, iptables)"
    missing = missing_tools(need_faketime=faketime)
    if missing:
        return f"the jepsen tier needs Debian packages: {' '.join(missing)} (.ci/run installs them)"
    return None


@pytest.fixture
def require_jepsen() -> None:
    reason = jepsen_skip_reason()
    if reason:
        pytest.skip(reason)
