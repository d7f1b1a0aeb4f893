"""Every benchmark scenario runs in --quick mode and produces its table and JSON (and PNGs
when matplotlib is installed). Benchmarks measure; nothing here asserts a speed.

Peers run only where they are installed (elsewhere the table says "not installed");
GNOMON_BENCH_TEST_PEERS=0 skips them even then.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gnomon.bench import SCENARIOS

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_quick_scenario_writes_table_and_json(name: str, tmp_path: Path) -> None:
    args = [sys.executable, "-m", "gnomon.bench", name, "--quick", "--out", str(tmp_path)]
    if os.environ.get("GNOMON_BENCH_TEST_PEERS", "1") == "0":
        args.append("--no-peers")
    proc = subprocess.run(args, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"## {name} (--quick)" in proc.stdout
    assert "| measure | gnomon | peer |" in proc.stdout
    doc = json.loads((tmp_path / f"{name}.json").read_text())
    assert doc["scenario"] == name and doc["quick"] is True
    assert doc["rows"], "the table has no rows"
    assert doc["machine_before"]["cpus"] and doc["table"].startswith(f"## {name}")
    if importlib.util.find_spec("matplotlib") is not None:
        assert doc["plots"], "matplotlib is installed but no plot was written"
        for png in doc["plots"]:
            assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
