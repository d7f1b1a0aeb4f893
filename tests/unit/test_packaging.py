"""The explicit package list in pyproject.toml covers every package folder."""

import re
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


def _requirement(name: str) -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    found = [d for d in deps if re.match(rf"{re.escape(name)}\s*[<>=!~]", d)]
    assert found, f"{name} is not a dependency"
    return found[0]


def _floor(requirement: str) -> tuple[int, ...]:
    match = re.search(r">=\s*([0-9.]+)", requirement)
    assert match, f"{requirement!r} has no floor (>=)"
    return tuple(int(p) for p in match.group(1).split("."))


def test_the_protobuf_floor_is_the_gencode_version_of_the_committed_stubs():
    needed = set()
    for stub in sorted((ROOT / "proto" / "gnomon" / "v1").glob("*_pb2.py")):
        m = re.search(r"ValidateProtobufRuntimeVersion\(\s*\S+,\s*(\d+),\s*(\d+),\s*(\d+),",
                      stub.read_text())
        assert m, f"{stub.name}: no runtime version check"
        needed.add(tuple(int(g) for g in m.groups()))
    requirement = _requirement("protobuf")
    assert _floor(requirement) >= max(needed), (requirement, max(needed))
    assert f"<{max(needed)[0] + 1}" in requirement.replace(" ", ""), requirement


def test_the_grpc_floors_are_the_generated_version_of_the_committed_stubs():
    versions = {re.search(r"GRPC_GENERATED_VERSION = '([0-9.]+)'", s.read_text()).group(1)
                for s in (ROOT / "proto" / "gnomon" / "v1").glob("*_pb2_grpc.py")}
    needed = max(tuple(int(p) for p in v.split(".")) for v in versions)
    for name in ("grpcio", "grpcio-health-checking", "grpcio-reflection"):
        requirement = _requirement(name)
        assert "==" not in requirement, f"{requirement}: a range, not a pin, for users' resolvers"
        assert _floor(requirement) >= needed, (requirement, needed)
