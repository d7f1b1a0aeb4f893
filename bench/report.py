"""The report of a benchmark: progress lines, the machine it ran on, a table, JSON under bench/results/, plots.

Everything runs on this machine and talks to 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnomon.bench.stats import ratio

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"


def now_ms() -> int:
    return int(time.time() * 1000)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def machine_info() -> dict[str, Any]:
    mem = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    commit = ""
    with contextlib.suppress(Exception):
        commit = subprocess.run(["git", "-C", str(BENCH_DIR), "describe", "--always", "--dirty"],
                                capture_output=True, text=True, timeout=5).stdout.strip()
    return {"cpus": os.cpu_count(), "mem_gib": round(mem / 2**30, 1),
            "python": platform.python_version(), "platform": platform.platform(),
            "loadavg": [round(x, 2) for x in os.getloadavg()], "git": commit,
            "time": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}


# -- the report -----------------------------------------------------------------------------


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != value:
            return "-"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}".rstrip("0").rstrip(".")
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


@dataclass
class Row:
    measure: str
    gnomon: Any
    peer: str = ""
    peer_value: Any = None
    ratio: float | None = None
    goal: str = ""
    met: bool | None = None


@dataclass
class Report:
    """What a scenario prints and writes: a table, raw data, plots, notes on what ran where."""

    name: str
    quick: bool
    title: str = ""
    rows: list[Row] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    plots: list[str] = field(default_factory=list)
    machine_before: dict[str, Any] = field(default_factory=machine_info)
    started: float = field(default_factory=time.time)

    def add(self, measure: str, gnomon: Any, *, peer: str = "", peer_value: Any = None,
            higher_is_better: bool | None = None, goal: str = "", met: bool | None = None) -> None:
        r = None
        if isinstance(gnomon, int | float) and isinstance(peer_value, int | float):
            r = ratio(float(gnomon), float(peer_value))
        self.rows.append(Row(measure, gnomon, peer, peer_value, r, goal, met))

    def render(self) -> str:
        lines = [f"## {self.name}{' (--quick)' if self.quick else ''}: {self.title}", ""]
        lines += ["| measure | gnomon | peer | peer value | gnomon/peer | goal | met |",
                  "|---|---|---|---|---|---|---|"]
        for r in self.rows:
            met = "" if r.met is None else ("yes" if r.met else "**no**")
            lines.append(f"| {r.measure} | {fmt(r.gnomon)} | {r.peer} | {fmt(r.peer_value)} | "
                         f"{fmt(r.ratio)} | {r.goal} | {met} |")
        if self.setup:
            lines += ["", "Setup: " + " ".join(self.setup)]
        for n in self.notes:
            lines.append(f"- {n}")
        return "\n".join(lines)

    def write(self, out_dir: Path) -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"{self.name}.json"
        doc = {
            "scenario": self.name, "quick": self.quick, "title": self.title,
            "command": " ".join(["python -m gnomon.bench", *sys.argv[1:]]),
            "machine_before": self.machine_before, "machine_after": machine_info(),
            "duration_s": round(time.time() - self.started, 1),
            "setup": self.setup, "notes": self.notes,
            "rows": [r.__dict__ for r in self.rows], "data": self.data, "plots": self.plots,
            "table": self.render(),
        }
        path.write_text(json.dumps(doc, indent=1, default=str))
        return path


# -- plots (matplotlib, Agg; optional) ------------------------------------------------------


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        return None
    if matplotlib is None:  # blocked (sys.modules entry None)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(report: Report, out_dir: Path, stem: str, title: str, xlabel: str, ylabel: str,
         series: dict[str, tuple[Sequence[float], Sequence[float]]], *, kind: str = "line",
         logy: bool = False) -> None:
    """One PNG with a line (or step/bar) per series; noted in the report when matplotlib is
    missing."""
    plt = _pyplot()
    if plt is None:
        if "matplotlib missing: no PNG plots" not in report.notes:
            report.notes.append("matplotlib missing: no PNG plots (pip install '.[bench]')")
        return
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    for label, (xs, ys) in series.items():
        if kind == "bar":
            ax.bar([str(x) for x in xs], ys, label=label)
        elif kind == "step":
            ax.step(xs, ys, where="post", label=label)
        else:
            ax.plot(xs, ys, label=label, marker="." if len(xs) < 40 else None)
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if len(series) > 1:
        ax.legend()
    fig.tight_layout()
    path = out_dir / f"{report.name}_{stem}.png"
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    report.plots.append(path.name)


def cdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    ordered = sorted(values)
    n = len(ordered)
    if n > 2000:  # thin out for plotting
        step = n / 2000
        idx = [int(i * step) for i in range(2000)] + [n - 1]
        return [ordered[i] for i in idx], [100 * (i + 1) / n for i in idx]
    return ordered, [100 * (i + 1) / n for i in range(n)]
