"""Linearizability: the Wing & Gong search with Lowe's memoisation, P-compositionally.

A history is linearizable if every operation can be given a single instant between its
invocation and its completion such that the operations, in that order, are a legal run of a
sequential model. Search (Lowe, "Testing for linearizability", 2017): walk a list of call and
return entries; at a call, try to linearize that operation now (if the model accepts it and
the pair (linearized set, model state) was not tried before), else move on; at a return whose
operation is not yet linearized, backtrack. Operations with an unknown outcome (`info`) have no
return entry: they may be linearized at any point after their call, or never.

P-compositionality (Horn & Kroening): when the model is a product of independent keys, the
history is linearizable iff each key's sub-history is, so each key is searched alone.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

UNKNOWN = object()
"""The output of an operation whose outcome the client never learnt."""


class Model(Protocol):
    def init(self) -> Hashable: ...

    def step(self, state: Hashable, op: Any, output: Any) -> tuple[bool, Hashable]:
        """(whether `op` may return `output` in `state`, the state after it). For an unknown
        output, return True and the state after the op took effect."""


@dataclass(slots=True)
class Operation:
    id: int
    call: int            # position of the invocation in the history
    ret: int | None      # position of the completion; None = unknown outcome (info)
    input: Any
    output: Any = UNKNOWN
    process: Any = None


@dataclass
class Result:
    valid: bool | None   # None: search budget exhausted
    explored: int = 0
    # When not linearizable: the longest linearizable prefix found and the op it stuck at.
    linearized: list[Operation] = field(default_factory=list)
    stuck: list[Operation] = field(default_factory=list)
    final_state: Any = None


class _Entry:
    __slots__ = ("op", "is_call", "match", "prev", "next")

    def __init__(self, op: Operation | None, is_call: bool):
        self.op = op
        self.is_call = is_call
        self.match: _Entry | None = None
        self.prev: _Entry | None = None
        self.next: _Entry | None = None


def _build(ops: list[Operation]) -> tuple[_Entry, int]:
    events: list[tuple[float, int, _Entry]] = []
    for op in ops:
        call = _Entry(op, True)
        events.append((op.call, 1, call))
        if op.ret is not None:
            ret = _Entry(op, False)
            call.match = ret
            # Returns sort before calls at the same position (they never share one anyway).
            events.append((op.ret, 0, ret))
    events.sort(key=lambda e: (e[0], e[1]))
    head = _Entry(None, False)
    prev = head
    for _, _, entry in events:
        prev.next = entry
        entry.prev = prev
        prev = entry
    return head, sum(1 for op in ops if op.ret is not None)


def _lift(entry: _Entry) -> None:
    entry.prev.next = entry.next
    if entry.next:
        entry.next.prev = entry.prev
    m = entry.match
    if m is not None:
        m.prev.next = m.next
        if m.next:
            m.next.prev = m.prev


def _unlift(entry: _Entry) -> None:
    m = entry.match
    if m is not None:
        m.prev.next = m
        if m.next:
            m.next.prev = m
    entry.prev.next = entry
    if entry.next:
        entry.next.prev = entry


def check(model: Model, ops: list[Operation], *, max_explored: int = 2_000_000) -> Result:
    """Whether `ops` (one key's operations) are linearizable with respect to `model`."""
    head, pending_returns = _build(ops)
    state = model.init()
    linearized = 0
    cache: set[tuple[int, Hashable]] = {(0, state)}
    stack: list[tuple[_Entry, Hashable]] = []
    explored = 0
    best: list[Operation] = []
    best_state: Hashable = state
    stuck: list[Operation] = []
    stuck_depth = 0
    entry = head.next
    while pending_returns:
        explored += 1
        if explored > max_explored:
            return Result(None, explored)
        if entry is not None and entry.is_call:
            ok, new_state = model.step(state, entry.op.input, entry.op.output)
            key = (linearized | (1 << entry.op.id), new_state)
            if ok and key not in cache:
                cache.add(key)
                stack.append((entry, state))
                state = new_state
                linearized |= 1 << entry.op.id
                if entry.match is not None:
                    pending_returns -= 1
                _lift(entry)
                if len(stack) > len(best):
                    best = [e.op for e, _ in stack]
                    best_state = state
                entry = head.next
            else:
                entry = entry.next
            continue
        # A return whose operation is not linearized yet: undo the last choice.
        if entry is not None and len(stack) >= len(best) and (
                not stuck or len(stack) >= stuck_depth):
            stuck, stuck_depth = [entry.op], len(stack)
        if not stack:
            return Result(False, explored, best, stuck, best_state)
        top, state = stack.pop()
        linearized &= ~(1 << top.op.id)
        if top.match is not None:
            pending_returns += 1
        _unlift(top)
        entry = top.next
    return Result(True, explored, [e.op for e, _ in stack], [], state)


def check_keys(model_for: Callable[[Hashable], Model],
               ops_by_key: dict[Hashable, list[Operation]],
               *, max_explored: int = 2_000_000) -> dict[Hashable, Result]:
    """P-compositional check: one search per key."""
    return {key: check(model_for(key), _renumber(ops), max_explored=max_explored)
            for key, ops in ops_by_key.items()}


def _renumber(ops: Iterable[Operation]) -> list[Operation]:
    out = []
    for i, op in enumerate(sorted(ops, key=lambda o: o.call)):
        out.append(Operation(i, op.call, op.ret, op.input, op.output, op.process))
    return out
