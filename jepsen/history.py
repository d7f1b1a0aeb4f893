"""The history: every operation, fault and witness observation of a run, in order.

Jepsen's model: a client *process* invokes an operation (`invoke`) and later learns its outcome:
`ok` (it happened), `fail` (it certainly did not happen) or `info` (unknown: it may happen at
any later time, or never). Nemesis and witness events share the same log. One JSON object per
line; `time` is nanoseconds since the start of the run (monotonic), `wall_ms` the real clock.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
NEMESIS = "nemesis"
WITNESS = "witness"
FINAL = "final"


@dataclass(slots=True)
class Event:
    index: int
    time: int
    wall_ms: int
    process: int | str
    type: str
    f: str
    value: Any = None
    error: str | None = None
    workload: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        d = asdict(self)
        if not d["extra"]:
            del d["extra"]
        for key in ("error", "workload"):
            if d[key] is None:
                del d[key]
        return json.dumps(d, separators=(",", ":"), sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Event:
        return cls(
            index=d["index"], time=d["time"], wall_ms=d.get("wall_ms", 0), process=d["process"],
            type=d["type"], f=d["f"], value=d.get("value"), error=d.get("error"),
            workload=d.get("workload"), extra=d.get("extra", {}),
        )


class History:
    """Append-only, thread-safe; written through to a JSONL file as events arrive."""

    def __init__(self, path: Path | None = None):
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self._t0 = time.monotonic_ns()
        self._fh = open(path, "w", encoding="utf-8") if path else None  # noqa: SIM115

    def now(self) -> int:
        return time.monotonic_ns() - self._t0

    def append(self, process: int | str, type: str, f: str, value: Any = None, *,
               error: str | None = None, workload: str | None = None,
               **extra: Any) -> Event:
        with self._lock:
            ev = Event(len(self.events), self.now(), time.time_ns() // 1_000_000, process, type,
                       f, value, error, workload, extra)
            self.events.append(ev)
            if self._fh:
                self._fh.write(ev.to_json() + "\n")
        return ev

    def flush(self) -> None:
        with self._lock:
            if self._fh:
                self._fh.flush()

    def close(self) -> None:
        with self._lock:
            if self._fh:
                self._fh.close()
                self._fh = None

    def snapshot(self) -> list[Event]:
        with self._lock:
            return list(self.events)


def load(path: Path) -> list[Event]:
    with open(path, encoding="utf-8") as fh:
        return [Event.from_dict(json.loads(line)) for line in fh if line.strip()]


@dataclass(slots=True)
class Op:
    """An invocation paired with its completion (None while pending / crashed)."""

    invoke: Event
    complete: Event | None

    @property
    def type(self) -> str:
        return self.complete.type if self.complete else INFO

    @property
    def f(self) -> str:
        return self.invoke.f


def pair(events: Iterable[Event]) -> list[Op]:
    """Client operations as (invoke, completion) pairs, in invocation order.

    A process has at most one operation outstanding; an invocation without a completion is
    treated as `info` (crashed)."""
    open_ops: dict[int | str, Op] = {}
    ops: list[Op] = []
    for ev in events:
        if ev.process in (NEMESIS, WITNESS):
            continue
        if ev.type == INVOKE:
            op = Op(ev, None)
            open_ops[ev.process] = op
            ops.append(op)
        elif ev.process in open_ops:
            open_ops.pop(ev.process).complete = ev
    return ops
