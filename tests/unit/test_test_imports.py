"""No test imports another test module: what tests share lives in tests/support/."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imported(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append(("." * node.level) + node.module)
        elif isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
    return out


def test_no_test_module_is_imported_by_another():
    offenders = [f"{path.relative_to(TESTS)} imports {mod}"
                 for path in sorted(TESTS.rglob("*.py"))
                 for mod in _imported(path)
                 if mod.rsplit(".", 1)[-1].startswith("test_")]
    assert not offenders, offenders
