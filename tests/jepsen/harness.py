"""Run one harness test in-process and explain a failure with the run's summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gnomon.jepsen.context import TestOptions
from gnomon.jepsen.runner import run_test


def run(out: Path, **kwargs: Any) -> dict[str, Any]:
    results = run_test(TestOptions(out_dir=out, **kwargs))
    print(results["summary"])
    return results


def anomaly_types(results: dict[str, Any], checker: str) -> set[str]:
    return {a["type"] for a in results["checkers"][checker]["anomalies"]}
