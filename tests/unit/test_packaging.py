"""The explicit package list in pyproject.toml covers every package folder."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAPPED = {"gnomon.v1": "proto/gnomon/v1", "gnomon.node": "node", "gnomon.client": "client"}


def _package_folders() -> set[str]:
    found = set()
    for prefix, folder in MAPPED.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            found.add(".".join([prefix, *rel.parts]) if rel.parts else prefix)
    return found


def test_every_package_folder_is_listed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(config["package-dir"]) == set(MAPPED)
    missing = _package_folders() - set(config["packages"])
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"
