"""A clock that moves only when a test moves it: a `gnomon.node.clock.Clock` for the leader
loops under test. asyncio's timers stay real; only what the loops read as "now" is fake."""

from __future__ import annotations

T0 = 1_700_000_000_000  # the default wall ms (2023-11-14)
M0 = 5_000_000  # the default monotonic ms (only differences mean anything)


class FakeClock:
    """Wall and monotonic ms; set `wall` / `mono` directly, or move both with `advance`."""

    def __init__(self, wall: int = T0, mono: int = M0) -> None:
        self.wall = wall
        self.mono = mono

    def wall_ms(self) -> int:
        return self.wall

    def mono_ms(self) -> int:
        return self.mono

    def advance(self, ms: int) -> None:
        """Both clocks move `ms` forward (a monotonic clock never goes back)."""
        if ms < 0:
            raise ValueError(f"advance({ms}): time only moves forward")
        self.wall += ms
        self.mono += ms
