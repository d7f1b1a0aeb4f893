"""The resource tier's measure: a node's footprint before, during and after an attack.

`with attack("name", node) as a:` reads the node's RSS, open descriptors, threads
and Raft term before; samples its RSS and descriptors every 50 ms meanwhile (the peaks); after, waits for the
descriptors to come back (the attack's connections closed and seen) and asserts the bounds:
RSS growth under `rss_bound_mib`, descriptors back within `fds_slack`, the term unchanged
(no attack may cost the cluster an election). `honest` (a callable) is called in a loop by
one thread during the attack: every call must succeed, and its latencies are recorded.

Every measured attack is a row of RESULTS; tests/conftest.py prints them as a table at the
end of the session (and writes them as JSON to $GNOMON_RESOURCE_REPORT when set): the
figures are measured properties, not claims. Nothing here asserts a speed.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gnomon.node.local.cluster import NodeProc, wait_for
from gnomon.v1 import api_pb2

RESULTS: list[dict[str, Any]] = []
SAMPLE_S = 0.05


@dataclass(frozen=True)
class Footprint:
    rss_mib: float
    fds: int
    threads: int


def footprint(pid: int) -> Footprint:
    status = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            status[key] = value.split()
    return Footprint(rss_mib=round(int(status["VmRSS"][0]) / 1024, 1),
                     fds=len(os.listdir(f"/proc/{pid}/fd")), threads=int(status["Threads"][0]))


@dataclass
class Attack:
    name: str
    before: Footprint
    term_before: int
    peak_rss_mib: float = 0.0
    peak_fds: int = 0
    after: Footprint | None = None
    term_after: int = 0
    honest_ms: list[float] = field(default_factory=list)
    honest_failures: list[str] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        assert self.after is not None
        lat = sorted(self.honest_ms)
        return {"attack": self.name, "rss_before_mib": self.before.rss_mib,
                "rss_peak_mib": self.peak_rss_mib, "rss_after_mib": self.after.rss_mib,
                "fds_before": self.before.fds, "fds_peak": self.peak_fds,
                "fds_after": self.after.fds,
                "threads_before": self.before.threads, "threads_after": self.after.threads,
                "term_before": self.term_before, "term_after": self.term_after,
                "honest_calls": len(lat), "honest_failures": len(self.honest_failures),
                "honest_p50_ms": round(statistics.median(lat), 1) if lat else None,
                "honest_max_ms": round(lat[-1], 1) if lat else None}


@contextlib.contextmanager
def attack(name: str, node: NodeProc, *, rss_bound_mib: float = 64,
           fds_slack: int = 8, honest: Callable[[], Any] | None = None,
           settle_s: float = 15.0) -> Iterator[Attack]:
    """Measure `node` around the body of the with-block (the attack); see the module doc."""
    pid = node.proc.pid
    a = Attack(name, footprint(pid), _term(node))
    a.peak_rss_mib, a.peak_fds = a.before.rss_mib, a.before.fds
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(SAMPLE_S):
            with contextlib.suppress(OSError, KeyError):
                now = footprint(pid)
                a.peak_rss_mib = max(a.peak_rss_mib, now.rss_mib)
                a.peak_fds = max(a.peak_fds, now.fds)

    def call_honestly() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            try:
                honest()  # type: ignore[misc]  # only started when given
            except Exception as exc:  # noqa: BLE001 - every failure is the finding
                a.honest_failures.append(repr(exc)[:200])
            a.honest_ms.append((time.perf_counter() - t) * 1000)
            stop.wait(0.05)

    threads = [threading.Thread(target=sample, daemon=True)]
    if honest is not None:
        threads.append(threading.Thread(target=call_honestly, daemon=True))
    for t in threads:
        t.start()
    try:
        yield a
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    # Descriptors the attack opened are closed by the node's own timeouts, or by the client.
    wait_for(lambda: footprint(pid).fds <= a.before.fds + fds_slack, timeout_s=settle_s,
             what=f"{name}: the node's descriptors back within {fds_slack} of "
                  f"{a.before.fds} (now {footprint(pid).fds})", interval_s=0.1)
    a.after = footprint(pid)
    a.peak_rss_mib = max(a.peak_rss_mib, a.after.rss_mib)
    a.term_after = _term(node)
    RESULTS.append(a.row())
    assert a.peak_rss_mib - a.before.rss_mib < rss_bound_mib, a.row()
    assert a.term_after == a.term_before, ("the attack cost an election", a.row())
    assert not a.honest_failures, (a.honest_failures[:3], a.row())


def _term(node: NodeProc) -> int:
    return node.cluster().GetStatus(api_pb2.GetStatusRequest(), timeout=5).term


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table (the closing note's figures)."""
    head = ("| attack | RSS before / peak / after MiB | fds before / peak / after | term | honest "
            "calls (failed) p50 / max ms |\n|---|---|---|---|---|\n")
    return head + "".join(
        f"| {r['attack']} | {r['rss_before_mib']} / {r['rss_peak_mib']} / {r['rss_after_mib']} "
        f"| {r['fds_before']} / {r['fds_peak']} / {r['fds_after']} | "
        f"{r['term_before']} -> {r['term_after']} | "
        f"{r['honest_calls']} ({r['honest_failures']}) {r['honest_p50_ms']} / "
        f"{r['honest_max_ms']} |\n" for r in rows)


def write_report(path: str) -> None:
    with open(path, "w") as fh:
        json.dump(RESULTS, fh, indent=1)


__all__ = ["RESULTS", "Attack", "Footprint", "attack", "footprint", "table", "write_report"]
