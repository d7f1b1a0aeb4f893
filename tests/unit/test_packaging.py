"""The explicit package list in pyproject.toml covers every package folder."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _package_folders(mapping: dict[str, str]) -> set[str]:
    found = set()
    for prefix, folder in mapping.items():
        base = ROOT / folder
        assert base.is_dir(), f"package-dir maps {prefix} to missing folder {folder}"
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            if "results" in rel.parts:
                continue
            found.add(".".join([prefix, *rel.parts]) if rel.parts else prefix)
    return found


def test_core_packages_are_mapped():
    assert {"gnomon.v1", "gnomon.node", "gnomon.client"} <= set(CONFIG["package-dir"])


def test_every_package_folder_is_listed():
    missing = _package_folders(CONFIG["package-dir"]) - set(CONFIG["packages"])
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"
