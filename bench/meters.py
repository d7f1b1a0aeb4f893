"""Measuring processes on this machine: CPU seconds and RSS from /proc, a CPU meter over process trees.

Everything runs on this machine and talks to 127.0.0.1 only.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


# -- /proc meters ---------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of one process (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_bytes(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def process_tree(pid: int) -> list[int]:
    """pid and all its descendants (Celery's prefork children, for example)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


class CpuMeter:
    """CPU used by named groups of processes between start() and stop(), and peak RSS.

    `groups` maps a name to a callable returning the group's root pids (children included).
    """

    def __init__(self, groups: dict[str, Callable[[], list[int]]], sample_s: float = 0.5):
        self.groups = groups
        self.sample_s = sample_s
        self._start: dict[str, dict[int, float]] = {}
        self._last: dict[str, dict[int, float]] = {}
        self.peak_rss: dict[str, int] = {}
        self._t0 = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _pids(self, name: str) -> list[int]:
        return [p for root in self.groups[name]() for p in process_tree(root)]

    def _sample(self) -> None:
        for name in self.groups:
            pids = self._pids(name)
            last = self._last.setdefault(name, {})
            for p in pids:
                last[p] = cpu_seconds(p)
            rss = sum(rss_bytes(p) for p in pids)
            self.peak_rss[name] = max(self.peak_rss.get(name, 0), rss)

    def start(self) -> CpuMeter:
        self._t0 = time.monotonic()
        for name in self.groups:
            self._start[name] = {p: cpu_seconds(p) for p in self._pids(name)}
        self._sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.sample_s):
            self._sample()

    def stop(self) -> dict[str, dict[str, float]]:
        self._stop.set()
        if self._thread:
            self._thread.join()
        self._sample()
        wall = max(1e-6, time.monotonic() - self._t0)
        out = {}
        for name in self.groups:
            first, last = self._start.get(name, {}), self._last.get(name, {})
            used = sum(last[p] - first.get(p, 0.0) for p in last)
            out[name] = {"cpu_s": round(used, 2), "core_pct": round(100 * used / wall, 1),
                         "peak_rss_mib": round(self.peak_rss.get(name, 0) / 2**20, 1)}
        out["_wall_s"] = {"wall_s": round(wall, 2)}
        return out


def cpu_ms_per_task(cpu: dict[str, dict[str, float]], tasks: float,
                    only: tuple[str, ...] = ()) -> float | None:
    """CPU (user + system, from /proc) of every measured group over the window, summed, in
    ms per task completed in it; `only`: just the groups whose name contains one of these."""
    if not tasks or not cpu:
        return None
    used = sum(v.get("cpu_s", 0.0) for k, v in cpu.items() if not k.startswith("_")
               and (not only or any(o in k for o in only)))
    return round(1000 * used / tasks, 3)
