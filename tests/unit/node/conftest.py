"""Fixtures for the node unit tests: a controlled clock and in-process leaders (harness.py)."""

from __future__ import annotations

import pytest

from gnomon.node.leader import leases
from tests.support.clock import FakeClock

from .harness import Harness, node_config


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    clk = FakeClock()
    # The expiry loop's tick (0.1 s) is real time; short, so tests wait little.
    monkeypatch.setattr(leases, "EXPIRY_TICK_S", 0.002)
    return clk


@pytest.fixture
async def make(tmp_path, clock):
    """make(trigger_limits=None, **config_overrides) -> a Harness (not leading yet)."""
    made: list[Harness] = []

    async def factory(trigger_limits=None, **overrides) -> Harness:
        h = Harness(tmp_path / f"node{len(made)}", clock, node_config(**overrides),
                    trigger_limits)
        made.append(h)
        return h

    yield factory
    for h in made:
        await h.close()
    for h in made:
        h.check_healthy()


@pytest.fixture
async def h(make) -> Harness:
    return await make()


@pytest.fixture
async def leader(make) -> Harness:
    node = await make()
    await node.lead()
    return node
