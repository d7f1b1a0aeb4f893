"""The two distributions built from this repository: gnomon-client (client-dist/pyproject.toml:
the SDK, the CLI, the gnomon.v1 stubs) and gnomon (pyproject.toml: the node, the gateway, the
harness, the benchmarks). Their explicit package lists cover every package folder, neither
ships a package of the other, their versions are one, and the floors are what the generated
code needs."""

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = {"gnomon": ROOT, "gnomon-client": ROOT / "client-dist"}


def _project(name: str) -> dict:
    return tomllib.loads((PROJECTS[name] / "pyproject.toml").read_text())


def _package_folders(name: str) -> set[str]:
    found = set()
    for prefix, folder in _project(name)["tool"]["setuptools"]["package-dir"].items():
        base = (PROJECTS[name] / folder).resolve()
        assert base.is_dir(), f"{name}: package-dir maps {prefix} to missing folder {folder}"
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            if "results" in rel.parts:
                continue
            found.add(".".join([prefix, *rel.parts]) if rel.parts else prefix)
    return found


def test_core_packages_are_mapped():
    assert {"gnomon.node", "gnomon.gateway"} <= set(
        _project("gnomon")["tool"]["setuptools"]["package-dir"])
    assert set(_project("gnomon-client")["tool"]["setuptools"]["package-dir"]) == {
        "gnomon.v1", "gnomon.client"}


@pytest.mark.parametrize("name", sorted(PROJECTS))
def test_every_package_folder_is_listed(name):
    listed = set(_project(name)["tool"]["setuptools"]["packages"])
    missing = _package_folders(name) - listed
    where = PROJECTS[name].relative_to(ROOT) / "pyproject.toml"
    assert not missing, f"add to [tool.setuptools] packages in {where}: {sorted(missing)}"
    absent = [p for p in listed if not _folder(name, p).is_dir()]
    assert not absent, f"{where} lists packages with no folder: {absent}"


def _folder(name: str, package: str) -> Path:
    """Where a listed package's files are (data-only packages have no __init__.py)."""
    mapping = _project(name)["tool"]["setuptools"]["package-dir"]
    prefix = max((p for p in mapping if package == p or package.startswith(p + ".")), key=len)
    rest = package[len(prefix):].lstrip(".").split(".") if package != prefix else []
    return PROJECTS[name].joinpath(mapping[prefix], *rest)


def test_no_package_is_in_both_distributions():
    server = set(_project("gnomon")["tool"]["setuptools"]["packages"])
    client = set(_project("gnomon-client")["tool"]["setuptools"]["packages"])
    assert not server & client
    assert not any(p.startswith(("gnomon.client", "gnomon.v1")) for p in server)


def test_the_versions_are_one_and_the_server_pins_the_client():
    server, client = _project("gnomon")["project"], _project("gnomon-client")["project"]
    assert server["version"] == client["version"]
    assert f"gnomon-client=={client['version']}" in server["dependencies"]
    assert client["scripts"] == {"gnomon": "gnomon.client.cli:main"}
    assert "gnomon" not in server["scripts"]


def test_the_sdk_and_the_node_report_their_distributions_version():
    import gnomon.client
    from gnomon.node.version import VERSION

    assert gnomon.client.__version__ == version("gnomon-client")
    assert VERSION == version("gnomon")
    assert gnomon.client.__version__ == VERSION == _project("gnomon")["project"]["version"]


def test_the_client_needs_only_grpcio_protobuf_and_pyyaml():
    names = {re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower()
             for d in _project("gnomon-client")["project"]["dependencies"]}
    assert names == {"grpcio", "protobuf", "pyyaml"}


def _requirement(project: str, name: str) -> str:
    deps = _project(project)["project"]["dependencies"]
    found = [d for d in deps if re.match(rf"{re.escape(name)}\s*[<>=!~]", d)]
    assert found, f"{name} is not a dependency of {project}"
    return found[0]


def _floor(requirement: str) -> tuple[int, ...]:
    match = re.search(r">=\s*([0-9.]+)", requirement)
    assert match, f"{requirement!r} has no floor (>=)"
    return tuple(int(p) for p in match.group(1).split("."))


@pytest.mark.parametrize("project", sorted(PROJECTS))
def test_the_protobuf_floor_is_the_gencode_version_of_the_committed_stubs(project):
    needed = set()
    for stub in sorted((ROOT / "proto" / "gnomon" / "v1").glob("*_pb2.py")):
        m = re.search(r"ValidateProtobufRuntimeVersion\(\s*\S+,\s*(\d+),\s*(\d+),\s*(\d+),",
                      stub.read_text())
        assert m, f"{stub.name}: no runtime version check"
        needed.add(tuple(int(g) for g in m.groups()))
    requirement = _requirement(project, "protobuf")
    assert _floor(requirement) >= max(needed), (requirement, max(needed))
    assert f"<{max(needed)[0] + 1}" in requirement.replace(" ", ""), requirement


@pytest.mark.parametrize(("project", "name"), [
    ("gnomon-client", "grpcio"), ("gnomon", "grpcio"), ("gnomon", "grpcio-health-checking"),
    ("gnomon", "grpcio-reflection")])
def test_the_grpc_floors_are_the_generated_version_of_the_committed_stubs(project, name):
    versions = {re.search(r"GRPC_GENERATED_VERSION = '([0-9.]+)'", s.read_text()).group(1)
                for s in (ROOT / "proto" / "gnomon" / "v1").glob("*_pb2_grpc.py")}
    needed = max(tuple(int(p) for p in v.split(".")) for v in versions)
    requirement = _requirement(project, name)
    assert "==" not in requirement, f"{requirement}: a range, not a pin, for users' resolvers"
    assert _floor(requirement) >= needed, (requirement, needed)
