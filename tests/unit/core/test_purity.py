"""The core's purity contract as an allow-list (ARCHITECTURE section 2): node/core may import
only the standard-library modules it needs for pure computation, and itself. Anything else
(a clock, randomness, threads, I/O, logging, grpc, lmdb, pysyncobj, croniter, the rest of
gnomon) must come in through the commands. import-linter forbids the known offenders; this
test refuses everything not listed, so a new one cannot slip in unnoticed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[3] / "node" / "core"
ALLOWED = frozenset({
    "__future__", "array", "bisect", "collections", "collections.abc", "dataclasses", "functools",
    "hashlib", "heapq", "itertools", "typing",
})
OWN_PREFIX = "gnomon.node.core"


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: inside the core package
                continue
            found.append((node.lineno, node.module or ""))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "__import__":
            found.append((node.lineno, "__import__(...)"))
    return found


@pytest.mark.parametrize("path", sorted(CORE.glob("*.py")), ids=lambda p: p.name)
def test_core_imports_only_allowed_modules(path: Path) -> None:
    bad = [f"{path.name}:{line} imports {name}" for line, name in _imports(path)
           if name not in ALLOWED and name != OWN_PREFIX
           and not name.startswith(OWN_PREFIX + ".")]
    assert not bad, "node/core must stay pure (see the allow-list here): " + "; ".join(bad)


def test_the_allow_list_catches_an_offender(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("import time\nfrom gnomon.node import clock\nfrom . import model\n")
    names = [name for _, name in _imports(sample)]
    assert names == ["time", "gnomon.node"]
