"""Prometheus text from a node's /metrics, as a dict of samples."""

from __future__ import annotations

import urllib.request


def scrape(addr: str) -> str:
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as resp:
        return resp.read().decode()


def samples(text: str) -> dict[str, float]:
    """`name{labels}` -> value, for every sample line."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def total(s: dict[str, float], name: str) -> float:
    """Sum over every label set of one sample name."""
    return sum(v for k, v in s.items() if k == name or k.startswith(name + "{"))
