"""Priority with aging (issue 9), on the dispatcher's own ready heap (node/leader/dispatch.py).

A low priority task under a continuous stream of high priority ones is dispatched within
its bound: it waits behind tasks that became ready after it for at most (their priority -
its) x priority_aging_ms, so with arrivals no faster than dispatch it goes within that plus
the time to serve what was ready before it. Strict priority (aging 0) starves it.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gnomon.node.leader.dispatch import ReadyHeap, ready_rank

TICK_MS = 100


def _simulate(aging_ms: int, low: int, high: int, backlog: int, rate: int, capacity: int,
              arrive_tick: int, horizon_ticks: int) -> int | None:
    """Ticks the low task waited until popped (None: not within the horizon). Each tick
    `rate` high tasks become ready, then `capacity` tasks are dispatched."""
    heap, seq = ReadyHeap(aging_ms), 0
    for _ in range(backlog):
        seq += 1
        heap.push(high, 0, seq, f"h{seq}", "main")
    for tick in range(horizon_ticks):
        now = tick * TICK_MS
        for _ in range(rate):
            seq += 1
            heap.push(high, now, seq, f"h{seq}", "main")
        if tick == arrive_tick:
            seq += 1
            heap.push(low, now, seq, "low", "main")
        for _ in range(capacity):
            if len(heap) and heap.pop()[0] == "low":
                return tick - arrive_tick
    return None


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(aging_ms=st.sampled_from([1, 10, 100, 1_000]), low=st.integers(-100, 99),
       lead=st.integers(1, 200), backlog=st.integers(0, 50), rate=st.integers(1, 5),
       spare=st.integers(0, 2), arrive_tick=st.integers(0, 20))
def test_a_low_priority_task_is_dispatched_within_the_bound(aging_ms, low, lead, backlog, rate,
                                                            spare, arrive_tick):
    high = min(100, low + lead)
    capacity = rate + spare  # arrivals never outpace dispatch: the backlog does not grow
    # What was ready before it (the initial backlog, and at most `rate` per tick since,
    # minus what was served) plus what may pass it: tasks ready within the priority lead.
    bound_ticks = (backlog + rate) // capacity + (high - low) * aging_ms // TICK_MS + 2
    waited = _simulate(aging_ms, low, high, backlog, rate, capacity, arrive_tick,
                       horizon_ticks=arrive_tick + bound_ticks + 5)
    assert waited is not None and waited <= bound_ticks, (waited, bound_ticks)


def test_strict_priority_starves_it():
    assert _simulate(0, -10, 10, backlog=5, rate=2, capacity=2, arrive_tick=3,
                     horizon_ticks=1_000) is None
    assert _simulate(10, -10, 10, backlog=5, rate=2, capacity=2, arrive_tick=3,
                     horizon_ticks=1_000) is not None


@given(p1=st.integers(-100, 100), p2=st.integers(-100, 100), t1=st.integers(0, 10**6),
       t2=st.integers(0, 10**6), aging_ms=st.integers(1, 10_000), wait=st.integers(0, 10**7))
def test_the_rank_is_effective_priority_at_any_instant(p1, p2, t1, t2, aging_ms, wait):
    """Ordering by the fixed key equals ordering by priority + waited / aging_ms, now."""
    now = max(t1, t2) + wait
    eff1 = p1 * aging_ms + (now - t1)  # effective priority, scaled by aging_ms
    eff2 = p2 * aging_ms + (now - t2)
    if eff1 != eff2:
        assert (ready_rank(p1, t1, aging_ms) < ready_rank(p2, t2, aging_ms)) == (eff1 > eff2)


@given(p1=st.integers(-100, 100), p2=st.integers(-100, 100), t1=st.integers(0, 10**6),
       t2=st.integers(0, 10**6))
def test_without_aging_it_is_strict_priority_then_age(p1, p2, t1, t2):
    if (p1, t1) != (p2, t2):
        first = ready_rank(p1, t1, 0) < ready_rank(p2, t2, 0)
        assert first == ((-p1, t1) < (-p2, t2))
