"""node/memo.py: a cache by object identity, bounded."""

from __future__ import annotations

from gnomon.node.memo import ByIdentity


def test_computed_once_per_object_and_not_shared_by_an_equal_object():
    calls: list[tuple] = []
    cached = ByIdentity(lambda t: calls.append(t) or len(calls), max_entries=2)
    a, b = (1, [2]), (1, [2])  # equal, not the same object
    assert cached(a) == cached(a) == 1
    assert cached(b) == 2
    assert calls == [a, b]


def test_a_full_cache_starts_again_and_answers_the_same():
    cached = ByIdentity(lambda t: sum(t[1]), max_entries=2)
    objs = [(i, [i, i]) for i in range(5)]
    assert [cached(o) for o in objs] == [cached(o) for o in objs] == [0, 2, 4, 6, 8]
    assert len(cached._entries) <= 2
