"""The register workload's checker: jobs as versioned registers, checked for linearizability.

Each key is a job name. Its sequential model: absent, or (value, version). `create` makes it
(value, 1) or fails `already-exists`; `update` (optionally with an expected version) bumps the
version or fails `not-found` / `conflict`; `delete` removes it or fails the same ways; `read`
returns (value, version) or `not-found`. Business rejections are results the model must
explain; any other failure of a write is an unknown outcome (`info`); a failed read tells
nothing and is dropped.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from gnomon.jepsen.checkers import wgl
from gnomon.jepsen.history import FAIL, INFO, OK, Event, Op, pair

MODEL_ERRORS = frozenset({"not-found", "already-exists", "conflict"})
Absent = None


class RegisterModel:
    def init(self) -> Hashable:
        return Absent

    def step(self, state: Any, op: tuple, output: Any) -> tuple[bool, Hashable]:
        f = op[0]
        if f == "create":
            result, new = (("fail", "already-exists"), state) if state is not Absent \
                else (("ok", 1), (op[1], 1))
        elif f == "update":
            if state is Absent:
                result, new = ("fail", "not-found"), state
            elif op[2] and op[2] != state[1]:
                result, new = ("fail", "conflict"), state
            else:
                result, new = ("ok", state[1] + 1), (op[1], state[1] + 1)
        elif f == "delete":
            if state is Absent:
                result, new = ("fail", "not-found"), state
            elif op[1] and op[1] != state[1]:
                result, new = ("fail", "conflict"), state
            else:
                result, new = ("ok",), Absent
        elif f == "read":
            result, new = (("fail", "not-found") if state is Absent else ("ok", state)), state
        else:
            raise ValueError(f"unknown register op {f!r}")
        if output is wgl.UNKNOWN:
            return True, new
        return output == result, new


def to_operation(op: Op, index: int) -> tuple[str, wgl.Operation] | None:
    """(key, operation) for one client op of the register workload; None if it tells nothing."""
    inv, comp = op.invoke, op.complete
    v = inv.value or {}
    f = inv.f
    key = v.get("key")
    if key is None or f not in ("create", "update", "delete", "read"):
        return None
    if f == "create":
        inp: tuple = ("create", v["value"])
    elif f == "update":
        inp = ("update", v["value"], v.get("expected_version", 0))
    elif f == "delete":
        inp = ("delete", v.get("expected_version", 0))
    else:
        inp = ("read",)
    typ = comp.type if comp else INFO
    out: Any = wgl.UNKNOWN
    if typ == OK:
        r = comp.value or {}
        if f == "read":
            out = ("ok", (r.get("value"), r.get("version")))
        elif f == "delete":
            out = ("ok",)
        else:
            out = ("ok", r.get("version"))
    elif typ == FAIL and comp.error in MODEL_ERRORS:
        out = ("fail", comp.error)
    elif typ == FAIL or f == "read":
        return None  # certainly no effect (or a read that never answered)
    ret = comp.index if comp and out is not wgl.UNKNOWN else None
    return key, wgl.Operation(index, inv.index, ret, inp, out, inv.process)


def register_ops(events: Iterable[Event], workload: str = "register"
                 ) -> dict[str, list[wgl.Operation]]:
    by_key: dict[str, list[wgl.Operation]] = {}
    for i, op in enumerate(pair(events)):
        if op.invoke.workload != workload:
            continue
        got = to_operation(op, i)
        if got is not None:
            by_key.setdefault(got[0], []).append(got[1])
    return by_key


def check(events: list[Event], *, max_explored: int = 2_000_000) -> dict[str, Any]:
    by_key = register_ops(events)
    results = wgl.check_keys(lambda _k: RegisterModel(), by_key, max_explored=max_explored)
    anomalies = []
    unknown = []
    for key, res in sorted(results.items()):
        if res.valid is None:
            unknown.append(key)
        elif not res.valid:
            anomalies.append(_evidence(key, res, events))
    valid: bool | str = False if anomalies else ("unknown" if unknown else True)
    return {
        "valid": valid,
        "anomalies": anomalies,
        "stats": {"keys": len(by_key), "ops": sum(len(v) for v in by_key.values()),
                  "unknown_outcomes": sum(1 for v in by_key.values() for o in v
                                          if o.ret is None),
                  "explored": sum(r.explored for r in results.values()),
                  "search_budget_exhausted": unknown},
    }


def _evidence(key: str, res: wgl.Result, events: list[Event]) -> dict[str, Any]:
    def show(op: wgl.Operation) -> dict[str, Any]:
        inv = events[op.call]
        comp = events[op.ret] if op.ret is not None else None
        return {"process": inv.process, "f": inv.f, "value": inv.value,
                "invoke_index": inv.index,
                "complete": None if comp is None else
                {"index": comp.index, "type": comp.type, "value": comp.value,
                 "error": comp.error}}

    stuck = res.stuck[0] if res.stuck else None
    return {
        "type": "non-linearizable",
        "key": key,
        "explanation": (
            "no order of the operations on this key respects real time and the register "
            "model; the search got furthest with the prefix below and could not place the "
            "'stuck' operation"),
        "linearizable_prefix_tail": [show(o) for o in res.linearized[-6:]],
        "state_after_prefix": res.final_state,
        "stuck": show(stuck) if stuck else None,
        "concurrent_with_stuck": [
            show(o) for o in _overlapping(stuck, res)] if stuck else [],
    }


def _overlapping(stuck: wgl.Operation, res: wgl.Result) -> list[wgl.Operation]:
    # Only the prefix is known here; that is where the conflicting writes are.
    end = stuck.ret if stuck.ret is not None else float("inf")
    return [o for o in res.linearized
            if o.call <= end and (o.ret is None or o.ret >= stuck.call)][-6:]
