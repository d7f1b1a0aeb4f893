"""Statistics of the benchmarks: percentiles, summaries, ratios, rates over time.

Everything runs on this machine and talks to 127.0.0.1 only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# -- statistics ----------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1]) of unsorted values; nan when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))])


def summary(values: Sequence[float], digits: int = 1) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {"n": len(ordered), "p50": round(pct(ordered, 0.5), digits),
            "p90": round(pct(ordered, 0.9), digits), "p99": round(pct(ordered, 0.99), digits),
            "max": round(ordered[-1], digits),
            "mean": round(sum(ordered) / len(ordered), digits)}


def median(values: Iterable[float]) -> float:
    """The median (mean of the middle two for an even count); nan when empty."""
    vals = sorted(v for v in values if v == v)
    if not vals:
        return float("nan")
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b or a != a or b != b:
        return None
    return round(a / b, 2)


def rate_in_window(buckets: dict[int, int], t0_ms: int, t1_ms: int) -> float:
    """Events per second in [t0, t1) from counts per 100 ms bucket (bucket = ms // 100)."""
    total = sum(v for b, v in buckets.items() if t0_ms // 100 <= b < t1_ms // 100)
    return total / max(1e-9, (t1_ms - t0_ms) / 1000)


def rate_series(buckets: dict[int, int], t0_ms: int, width_ms: int = 1000
                ) -> tuple[list[float], list[float]]:
    """(seconds since t0, events/s) per `width_ms` window, for plots."""
    if not buckets:
        return [], []
    per: dict[int, int] = {}
    for b, v in buckets.items():
        w = (b * 100 - t0_ms) // width_ms
        per[w] = per.get(w, 0) + v
    lo, hi = min(per), max(per)
    xs = [w * width_ms / 1000 for w in range(lo, hi + 1)]
    return xs, [per.get(w, 0) * 1000 / width_ms for w in range(lo, hi + 1)]
