"""Ran-slot spans: inclusive (lo, hi) slot ranges, sorted and disjoint (Job.ran_spans).

A span says every slot of the job's schedule inside it got a run that was not skipped, so
a backfill must not run any of them again. Spans only grow (and merge); beyond
MAX_RAN_SPANS the two oldest merge, which can only make more slots count as ran.
"""

from __future__ import annotations

from bisect import bisect_right

from gnomon.node.core.model import MAX_RAN_SPANS

Spans = tuple[tuple[int, int], ...]


def covers(spans: Spans, slot_ms: int) -> bool:
    """Whether `slot_ms` lies in one of the spans."""
    i = bisect_right(spans, (slot_ms, 1 << 62)) - 1
    return i >= 0 and spans[i][0] <= slot_ms <= spans[i][1]


def add(spans: Spans, lo: int, hi: int, limit: int = MAX_RAN_SPANS) -> Spans:
    """`spans` with [lo, hi] added, overlapping spans merged, at most `limit` kept."""
    if spans and spans[-1][0] <= lo <= spans[-1][1]:  # the common case: extend the last
        return (*spans[:-1], (spans[-1][0], max(spans[-1][1], hi)))
    if not spans or lo > spans[-1][1]:  # a new newest span
        return _bounded([*spans, (lo, hi)], limit)
    merged: list[tuple[int, int]] = []
    for span in sorted((*spans, (lo, hi))):
        if merged and span[0] <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], span[1]))
        else:
            merged.append(span)
    return _bounded(merged, limit)


def _bounded(spans: list[tuple[int, int]], limit: int) -> Spans:
    while len(spans) > max(1, limit):
        spans[0:2] = [(spans[0][0], spans[1][1])]
    return tuple(spans)
