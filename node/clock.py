"""The node's clocks. Wall time only enters the state machine through command timestamps."""

from __future__ import annotations

import time


def wall_ms() -> int:
    """Wall-clock time in ms since the epoch (may jump; the core clamps it to never go back)."""
    return time.time_ns() // 1_000_000


def mono_ms() -> int:
    """Monotonic ms for leader-local deadlines (lease expiry, leadership proof)."""
    return time.monotonic_ns() // 1_000_000
