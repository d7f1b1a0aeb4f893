"""The core's vertical slices (node/core/DESIGN.md, "Slices"): each command's handler lives in
the slice of its domain, which exports it in `HANDLER_PAIRS`; apply.py only assembles them.
Slices import each other downwards only, in the order below (so the import graph has no
cycle), and the shared modules under them import no slice but access."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from gnomon.node.core import HANDLERS

CORE = Path(__file__).resolve().parents[3] / "node" / "core"
DESIGN = CORE / "DESIGN.md"
PREFIX = "gnomon.node.core"

# Top to bottom: a slice imports only slices on lines below its own; slices on one line never
# import each other.
LAYERS = (
    ("apply",),
    ("backfill", "jobs", "limits", "rerun"),
    ("fire", "tasks"),
    ("runs",),
    ("circuits",),
    ("access", "common"),
)
SLICES = {name: depth for depth, line in enumerate(LAYERS) for name in line}
HANDLER_SLICES = sorted(set(SLICES) - {"apply", "common"})
# Model, commands, results and the pure helpers every slice shares.
SHARED = ("commands", "dag", "digest", "errors", "index", "job_health", "model", "results",
          "retry", "run_query", "run_waits", "spans", "transitions", "validate")


def _core_imports(path: Path) -> set[str]:
    """The core modules `path` imports (`from gnomon.node.core.x import ...` and
    `from gnomon.node.core import x`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == PREFIX:
                found |= {alias.name for alias in node.names}
            elif node.module.startswith(PREFIX + "."):
                found.add(node.module.removeprefix(PREFIX + ".").split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {alias.name.removeprefix(PREFIX + ".").split(".")[0]
                      for alias in node.names if alias.name.startswith(PREFIX + ".")}
    return found


def render_layers() -> str:
    return "\n".join(" | ".join(line) for line in LAYERS) + "\n"


def test_every_core_module_is_a_slice_or_shared():
    modules = {p.stem for p in CORE.glob("*.py")} - {"__init__"}
    assert modules == set(SLICES) | set(SHARED)


def test_slices_import_only_slices_below_them():
    bad = []
    for name, depth in sorted(SLICES.items()):
        for other in sorted(_core_imports(CORE / f"{name}.py") & set(SLICES)):
            if SLICES[other] <= depth:
                bad.append(f"{name} imports {other}")
    assert not bad, "slice order (node/core/DESIGN.md): " + "; ".join(bad)


def test_shared_modules_import_no_slice_but_access():
    bad = [f"{name} imports {other}" for name in SHARED
           for other in sorted(_core_imports(CORE / f"{name}.py") & set(SLICES) - {"access"})]
    assert not bad, "; ".join(bad)


def test_handlers_are_the_slices_pairs_each_defined_in_its_slice():
    pairs = []
    for name in HANDLER_SLICES:
        module = importlib.import_module(f"{PREFIX}.{name}")
        for command_type, handler in module.HANDLER_PAIRS:
            assert handler.__module__ == module.__name__, (command_type, handler)
            pairs.append((command_type, handler))
    assert dict(pairs) == HANDLERS and len(pairs) == len(HANDLERS)


def test_design_doc_shows_the_slice_order_of_this_test():
    text = DESIGN.read_text()
    doc = text.split("<!-- slices:begin -->\n```\n", 1)[1].split("```\n<!-- slices:end -->")[0]
    assert doc == render_layers()
