"""The node's clocks. Wall time only enters the state machine through command timestamps.

The leader loops read "now" through a `Clock` they are given (node/DESIGN.md, "The leader's
clock"), so tests can move it; the module functions serve everything else.
"""

from __future__ import annotations

import time
from typing import Protocol


def wall_ms() -> int:
    """Wall-clock time in ms since the epoch (may jump; the core clamps it to never go back)."""
    return time.time_ns() // 1_000_000


def mono_ms() -> int:
    """Monotonic ms for leader-local deadlines (lease expiry, leadership proof)."""
    return time.monotonic_ns() // 1_000_000


class Clock(Protocol):
    """Where a leader loop reads the time: wall ms for schedules, monotonic ms for deadlines."""

    def wall_ms(self) -> int:
        """Wall-clock ms since the epoch."""
        ...

    def mono_ms(self) -> int:
        """Monotonic ms (only differences mean anything)."""
        ...


class SystemClock:
    """The host's clocks: the module functions above."""

    def wall_ms(self) -> int:
        return wall_ms()

    def mono_ms(self) -> int:
        return mono_ms()


SYSTEM_CLOCK: Clock = SystemClock()
