"""A bounded cache keyed by the identity of an immutable object (a frozen JobSpec shared by
every run of its job): no hashing of the object, which for a spec costs about as much as
the work being saved."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class ByIdentity(Generic[K, V]):
    """`fn(obj)` computed once per object while it is cached (at most `max_entries`; full:
    start again). Entries keep their object alive, so a reused id cannot match (`is`).
    Only for immutable objects and pure `fn`."""

    def __init__(self, fn: Callable[[K], V], max_entries: int = 1024) -> None:
        self._fn = fn
        self._max = max_entries
        self._entries: dict[int, tuple[K, V]] = {}

    def __call__(self, obj: K) -> V:
        hit = self._entries.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        if len(self._entries) >= self._max:
            self._entries.clear()
        value = self._fn(obj)
        self._entries[id(obj)] = (obj, value)
        return value

    def clear(self) -> None:
        self._entries.clear()
