"""JobOrder: job sequence numbers in creation order, for paging without sorting.

Job ids are `j<seq>` with `seq` from one replicated counter, so creation order is numeric
order and every new id is the largest: `add` appends. Deletion is lazy (the list keeps the
number until more than half of it is dead), so add and remove cost O(1) amortized and a
page costs O(log n + page size). The numbers are a machine-int array (8 bytes each), not a
list of int objects (36): at a million jobs the two orders were 60 MB.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable

_COMPACT_MIN = 64


class JobOrder:
    __slots__ = ("_seqs", "_dead")

    def __init__(self) -> None:
        self._seqs: array[int] = array("q")
        self._dead = 0

    def add(self, seq: int) -> None:
        if self._seqs and seq <= self._seqs[-1]:
            raise ValueError(f"job sequence {seq} is not after {self._seqs[-1]}")
        self._seqs.append(seq)

    def remove(self, alive: Callable[[int], bool]) -> None:
        """One number died (its job is gone); compact when most of the list is dead."""
        self._dead += 1
        if self._dead > _COMPACT_MIN and 2 * self._dead > len(self._seqs):
            self._seqs = array("q", [s for s in self._seqs if alive(s)])
            self._dead = 0

    def page(self, after_seq: int, limit: int, alive: Callable[[int], bool]) -> list[int]:
        """Up to `limit` live numbers greater than `after_seq`, ascending."""
        out: list[int] = []
        i = bisect.bisect_right(self._seqs, after_seq)
        seqs = self._seqs
        while i < len(seqs) and len(out) < limit:
            if alive(seqs[i]):
                out.append(seqs[i])
            i += 1
        return out

    def __len__(self) -> int:
        return len(self._seqs) - self._dead


class RunFifo:
    """Run ids in the order they ended (one job's terminal runs in memory): push at the
    back, pop at the front, both O(1) amortized. A replicated fact (its order decides which
    run leaves memory first), so the digest and snapshots see its live items only."""

    __slots__ = ("_items", "_head")

    def __init__(self, items: list[str] | None = None) -> None:
        self._items: list[str] = list(items or ())
        self._head = 0

    def push(self, run_id: str) -> None:
        self._items.append(run_id)

    def pop(self) -> str:
        run_id = self._items[self._head]
        self._head += 1
        if self._head > _COMPACT_MIN and 2 * self._head > len(self._items):
            del self._items[: self._head]
            self._head = 0
        return run_id

    def items(self) -> list[str]:
        return self._items[self._head :]

    def __len__(self) -> int:
        return len(self._items) - self._head
