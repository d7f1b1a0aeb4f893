"""Results: `results.json`, `report.html` (timeline with fault windows shaded, latency and
throughput plots, every checker with its evidence) and the short summary in Jepsen's words."""

from __future__ import annotations

import html
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from gnomon.jepsen.context import Context
from gnomon.jepsen.history import FINAL, NEMESIS, OK, WITNESS, Event, pair

COLORS = {"ok": "#2e7d32", "fail": "#c62828", "info": "#f9a825"}
W, PAD = 1100, 60


def write(run_dir: Path, ctx: Context, results: dict[str, Any]) -> None:
    results["summary"] = summary(results)
    (run_dir / "results.json").write_text(json.dumps(results, indent=2, default=str))
    (run_dir / "report.html").write_text(render_html(ctx.history.snapshot(), results))


def fault_windows(events: list[Event]) -> list[tuple[float, float, str]]:
    """(start s, end s, label) of every fault that took effect."""
    out: list[tuple[float, float, str]] = []
    open_: tuple[float, float, str] | None = None
    end_of_run = events[-1].time / 1e9 if events else 0.0
    for e in events:
        if e.process != NEMESIS or e.type != OK:
            continue
        if e.f == "start":
            v = e.value or {}
            detail = v.get("node") or v.get("worker") or v.get("nodes") or v.get("groups") or ""
            open_ = (e.time / 1e9, end_of_run, f"{v.get('kind')} {detail}".strip())
        elif e.f in ("stop", "heal") and open_ is not None:
            out.append((open_[0], e.time / 1e9, open_[2]))
            open_ = None
    if open_ is not None:
        out.append(open_)
    return out


def summary(results: dict[str, Any]) -> str:
    t = results["test"]
    n_ops = results["operations"]
    faults: dict[str, int] = defaultdict(int)
    for k in results["faults"]:
        faults[k] += 1
    lines = [
        f"{t['label']}: {'+'.join(t['workloads'])} under {'+'.join(t['nemeses']) or 'no faults'}"
        f", {t['nodes']} nodes, seed {t['seed']}, {results['duration_s']}s",
        f"  {n_ops} operations ({', '.join(f'{v} {k}' for k, v in sorted(results['op_counts'].items()))})"
        f"; faults: {', '.join(f'{k} x{v}' for k, v in sorted(faults.items())) or 'none'}",
    ]
    anomalies = [(name, a) for name, c in results["checkers"].items() for a in c["anomalies"]]
    unknown = [name for name, c in results["checkers"].items() if c["valid"] == "unknown"]
    if not anomalies:
        verdict = f"  no anomalies found in {n_ops} operations"
        if unknown:
            verdict += f" (inconclusive: {', '.join(unknown)})"
        lines.append(verdict)
    else:
        lines.append(f"  {len(anomalies)} anomalies found in {n_ops} operations:")
        for name, a in anomalies[:10]:
            evidence = json.dumps({k: v for k, v in a.items() if k != "type"}, default=str)
            lines.append(f"  - {name}: {a['type']}: {evidence[:400]}")
        if len(anomalies) > 10:
            lines.append(f"  ... and {len(anomalies) - 10} more in results.json")
    notes = _log_notes(results.get("node_logs") or {})
    if notes:
        lines.append(f"  node logs (information): {notes}")
    lines.append(f"  report: {results['run_dir']}/report.html")
    return "\n".join(lines)


def _log_notes(node_logs: dict[str, dict[str, int]]) -> str:
    """Snapshot failures and children killed by a signal, per node (FATAL lines are expected
    from injected faults, so they are not listed)."""
    keys = ("snapshot_failed", "child_killed_by_signal", "traceback")
    return "; ".join(f"{node} " + ", ".join(f"{k} x{c[k]}" for k in keys if c.get(k))
                     for node, c in sorted(node_logs.items()) if any(c.get(k) for k in keys))


# -- HTML --------------------------------------------------------------------------------------


def _x(t: float, t_max: float) -> float:
    return PAD + (W - 2 * PAD) * (t / t_max if t_max else 0)


def _shade(windows: list[tuple[float, float, str]], t_max: float, top: int, height: int) -> str:
    parts = []
    for a, b, label in windows:
        x0, x1 = _x(a, t_max), _x(b, t_max)
        parts.append(f'<rect x="{x0:.1f}" y="{top}" width="{max(1.0, x1 - x0):.1f}" '
                     f'height="{height}" fill="#ef9a9a" opacity="0.35">'
                     f'<title>{html.escape(label)} {a:.1f}-{b:.1f}s</title></rect>')
    return "".join(parts)


def _axis(t_max: float, y: int) -> str:
    parts = [f'<line x1="{PAD}" y1="{y}" x2="{W - PAD}" y2="{y}" stroke="#555"/>']
    step = max(1, int(t_max / 12) or 1)
    for s in range(0, int(t_max) + 1, step):
        x = _x(s, t_max)
        parts.append(f'<text x="{x:.1f}" y="{y + 14}" font-size="10" '
                     f'text-anchor="middle">{s}s</text>')
    return "".join(parts)


def timeline_svg(events: list[Event], windows: list[tuple[float, float, str]]) -> str:
    t_max = max((e.time for e in events), default=1) / 1e9 or 1.0
    ops = [op for op in pair(events) if op.invoke.process != FINAL]
    lanes = sorted({str(op.invoke.workload) for op in ops}) + ["witness", "nemesis"]
    row = 28
    height = row * len(lanes) + 40
    parts = [f'<svg width="{W}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
             _shade(windows, t_max, 0, row * len(lanes))]
    for i, lane in enumerate(lanes):
        parts.append(f'<text x="4" y="{i * row + 18}" font-size="11">{html.escape(lane)}</text>')
    for op in ops:
        lane = lanes.index(str(op.invoke.workload))
        t0 = op.invoke.time / 1e9
        t1 = op.complete.time / 1e9 if op.complete else t_max
        color = COLORS.get(op.type, "#999")
        y = lane * row + 6 + (hash(op.invoke.process) % 4) * 4
        parts.append(f'<line x1="{_x(t0, t_max):.1f}" y1="{y}" x2="{_x(t1, t_max):.1f}" '
                     f'y2="{y}" stroke="{color}" stroke-width="3"><title>'
                     f'{html.escape(op.f)} {op.type} {t0:.2f}s</title></line>')
    wl = lanes.index("witness")
    for e in events:
        if e.process == WITNESS and e.f in ("effect", "report-ack"):
            accepted = (e.value or {}).get("accepted", True)
            parts.append(f'<circle cx="{_x(e.time / 1e9, t_max):.1f}" cy="{wl * row + 14}" '
                         f'r="2" fill="{"#1565c0" if accepted else "#c62828"}"/>')
    for a, _b, label in windows:
        parts.append(f'<text x="{_x(a, t_max):.1f}" y="{(len(lanes) - 1) * row + 18}" '
                     f'font-size="10">{html.escape(label[:40])}</text>')
    parts.append(_axis(t_max, row * len(lanes) + 4))
    parts.append("</svg>")
    return "".join(parts)


def latency_svg(events: list[Event], windows: list[tuple[float, float, str]]) -> str:
    import math

    t_max = max((e.time for e in events), default=1) / 1e9 or 1.0
    ops = [op for op in pair(events) if op.complete is not None and op.invoke.process != FINAL]
    h = 240
    parts = [f'<svg width="{W}" height="{h + 30}" xmlns="http://www.w3.org/2000/svg">',
             _shade(windows, t_max, 0, h)]
    lo, hi = 0.0, 5.0  # log10 ms: 1 ms .. 100 s

    def y(ms: float) -> float:
        v = min(hi, max(lo, math.log10(max(ms, 1.0))))
        return h - (v - lo) / (hi - lo) * h

    for decade in range(0, 6):
        parts.append(f'<text x="4" y="{y(10 ** decade) + 4:.1f}" font-size="10">'
                     f'{10 ** decade} ms</text>')
    for op in ops:
        ms = (op.complete.time - op.invoke.time) / 1e6
        parts.append(f'<circle cx="{_x(op.invoke.time / 1e9, t_max):.1f}" cy="{y(ms):.1f}" '
                     f'r="1.8" fill="{COLORS.get(op.type, "#999")}"><title>{html.escape(op.f)} '
                     f'{ms:.0f} ms</title></circle>')
    parts.append(_axis(t_max, h + 2))
    parts.append("</svg>")
    return "".join(parts)


def throughput_svg(events: list[Event], windows: list[tuple[float, float, str]]) -> str:
    t_max = max((e.time for e in events), default=1) / 1e9 or 1.0
    bins: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for op in pair(events):
        if op.complete is not None and op.invoke.process != FINAL:
            bins[op.type][int(op.complete.time / 1e9)] += 1
    peak = max((c for b in bins.values() for c in b.values()), default=1)
    h = 200
    parts = [f'<svg width="{W}" height="{h + 30}" xmlns="http://www.w3.org/2000/svg">',
             _shade(windows, t_max, 0, h),
             f'<text x="4" y="12" font-size="10">{peak}/s</text>']
    for typ, b in bins.items():
        pts = " ".join(f"{_x(s + 0.5, t_max):.1f},{h - b.get(s, 0) / peak * (h - 10):.1f}"
                       for s in range(0, int(t_max) + 1))
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{COLORS.get(typ, "#999")}" '
                     f'stroke-width="1.5"/>')
    parts.append(_axis(t_max, h + 2))
    parts.append("</svg>")
    return "".join(parts)


def render_html(events: list[Event], results: dict[str, Any]) -> str:
    windows = fault_windows(events)
    verdict = {True: ("#2e7d32", "valid"), False: ("#c62828", "INVALID")}.get(
        results["valid"], ("#f9a825", "unknown"))
    rows = []
    for name, c in results["checkers"].items():
        color = {True: "#2e7d32", False: "#c62828"}.get(c["valid"], "#f9a825")
        body = html.escape(json.dumps({k: v for k, v in c.items() if k != "valid"}, indent=1,
                                      default=str)[:20000])
        rows.append(f'<tr><td>{html.escape(name)}</td><td style="color:{color}">'
                    f'{c["valid"]}</td><td>{len(c["anomalies"])}</td>'
                    f'<td><details><summary>details</summary><pre>{body}</pre></details></td></tr>')
    faults = "".join(f"<li>{a:.1f}-{b:.1f}s: {html.escape(label)}</li>" for a, b, label in windows)
    return f"""<!doctype html><html><head><meta charset="utf-8">
<title>gnomon jepsen: {html.escape(results['test']['label'])}</title>
<style>body{{font-family:sans-serif;margin:20px}} td,th{{padding:4px 8px;vertical-align:top}}
pre{{font-size:11px;max-height:400px;overflow:auto}}</style></head><body>
<h1>gnomon jepsen: {html.escape(results['test']['label'])}
 <span style="color:{verdict[0]}">{verdict[1]}</span></h1>
<pre>{html.escape(results.get('summary', ''))}</pre>
<h2>Timeline</h2><p>Client operations per workload (green ok, red fail, yellow info), witness
observations (blue accepted, red rejected); fault windows shaded.</p>
{timeline_svg(events, windows)}
<h2>Latency</h2>{latency_svg(events, windows)}
<h2>Throughput (completions per second)</h2>{throughput_svg(events, windows)}
<h2>Faults</h2><ul>{faults or '<li>none</li>'}</ul>
<h2>Checkers</h2><table border="1" cellspacing="0"><tr><th>checker</th><th>valid</th>
<th>anomalies</th><th></th></tr>{''.join(rows)}</table>
<h2>Test</h2><pre>{html.escape(json.dumps(results['test'], indent=1, default=str))}</pre>
<p>History: history.jsonl; node logs: n*/node.log; results: results.json.</p>
</body></html>
"""
