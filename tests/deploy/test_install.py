"""Each distribution installs into a fresh venv and imports: gnomon-client alone with the lowest
versions its pyproject allows (and none of the node's dependencies), gnomon with gnomon-client
at the lowest versions both allow (a floor below what the code needs is a user's VersionError
at import, whatever the resolver approved), and the image's install steps from
deploy/requirements.lock. The two wheels are built once per module, from what the
Dockerfile's build stage copies, and installed from a folder; each venv is made without pip
(this venv's pip installs into it with --python)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENT_DIST = ROOT / "client-dist"
OWN = {"gnomon", "gnomon-client"}
# What the node needs and a service that only creates jobs must not get.
SERVER_ONLY_MODULES = ("pysyncobj", "lmdb", "aiohttp", "cryptography", "prometheus_client",
                       "croniter")
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]


def _dependencies(project: Path) -> list[str]:
    return tomllib.loads((project / "pyproject.toml").read_text())["project"]["dependencies"]


def lowest_pins(*projects: Path) -> list[str]:
    """Each third-party dependency at its floor (`>=X` -> `==X`), exact pins as they are;
    the highest floor where two projects name one package."""
    floors: dict[str, str] = {}
    for project in projects:
        for dep in _dependencies(project):
            name = re.match(r"[A-Za-z0-9_.-]+", dep).group(0)
            if name in OWN:
                continue
            floor = re.search(r"(>=|==)\s*([0-9][0-9.]*)", dep)
            pin = floor.group(2) if floor else ""
            if name not in floors or _version(pin) > _version(floors[name]):
                floors[name] = pin
    return [f"{n}=={v}" if v else n for n, v in sorted(floors.items())]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p)


def _run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kwargs)
    assert done.returncode == 0, f"{argv}\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done


def _build_context(dest: Path) -> Path:
    """The Dockerfile's build stage: what its COPY lines put in /src, copied to dest."""
    lines = (ROOT / "deploy" / "Dockerfile").read_text().split("FROM ")[1].splitlines()
    for line in lines:
        words = line.split()
        if words[:1] != ["COPY"]:
            continue
        *sources, target = words[1:]
        for source in sources:
            to = dest / target / Path(source).name if target.endswith("/") else dest / target
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, to, ignore=shutil.ignore_patterns(
                    "build", "*.egg-info", "__pycache__"))
            else:
                to.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(ROOT / source, to)
    return dest


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    """gnomon-client's and gnomon's wheels, built once, as the Dockerfile's build stage does
    (from what it copies: a folder it misses fails here); no build backend warning."""
    src = _build_context(tmp_path_factory.mktemp("src"))
    out = tmp_path_factory.mktemp("wheels")
    done = _run([*PIP, "wheel", "-q", "--no-deps", "--wheel-dir", str(out),
                 str(src / "client-dist"), str(src)])
    # Every fresh set-up printed a wall of setuptools warnings (the dashboard's folder absent
    # from the packages; the editable install's notice, which the Makefile silences).
    assert "BuildBackendWarning" not in done.stderr, done.stderr[-3000:]
    assert {p.name.split("-")[0] for p in out.glob("*.whl")} == {"gnomon", "gnomon_client"}
    return out


def _venv(path: Path) -> Path:
    """A fresh venv without pip; its python."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(path)])
    return path / "bin" / "python"


def _install(python: Path, *args: str, env: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess:
    return _run([*PIP, "--python", str(python), "install", "-q", *args], env=env)


def _own_wheels(python: Path, wheels: Path, *names: str) -> None:
    _install(python, "--no-deps", "--no-index", "--find-links", str(wheels), *names)


@pytest.mark.timeout(600)
def test_the_client_installs_alone_at_its_lowest_versions(tmp_path, wheels):
    python = _venv(tmp_path / "venv")
    pins = lowest_pins(CLIENT_DIST)
    assert [p.split("==")[0] for p in pins] == ["grpcio", "protobuf", "pyyaml"]
    _install(python, *pins)
    _own_wheels(python, wheels, "gnomon-client")
    _run([*PIP, "--python", str(python), "check"])
    code = ("import importlib.util, gnomon.client, gnomon.client.cli, gnomon.v1.api_pb2_grpc\n"
            "from gnomon.client import Client, Worker\n"
            "from gnomon.client.ready_workers import shell, http\n"
            "import google.protobuf, grpc, yaml\n"
            f"present = [m for m in {SERVER_ONLY_MODULES!r} + ('gnomon.node', 'gnomon.gateway')"
            " if importlib.util.find_spec(m)]\n"
            "assert not present, present\n"
            "print(gnomon.client.__version__, google.protobuf.__version__, grpc.__version__)\n")
    done = _run([str(python), "-c", code], cwd=tmp_path)
    floors = dict(p.split("==") for p in pins)
    assert done.stdout.split() == ["0.1.0", floors["protobuf"], floors["grpcio"]]
    gnomon = str(python.parent / "gnomon")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GNOMON_")}
    assert _run([gnomon, "--version"], env=env).stdout.strip() == "gnomon 0.1.0"
    assert "create" in _run([gnomon, "job", "--help"], env=env).stdout
    # Commands that run the server distribution's code say which package to install.
    for command in (["dev"], ["dev", "--json"], ["gateway", "--help"], ["jepsen", "matrix"],
                    ["bench", "all"]):
        done = subprocess.run([gnomon, *command], capture_output=True, text=True, timeout=60,
                              env=env, cwd=tmp_path)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert "pip install gnomon " in done.stderr and "Traceback" not in done.stderr, \
            (command, done.stderr)
        assert f"`gnomon {command[0]}` needs the server distribution" in done.stderr
    assert not (tmp_path / ".gnomon").exists()  # `gnomon dev` started nothing


@pytest.mark.timeout(600)
def test_the_server_installs_at_the_lowest_versions(tmp_path, wheels):
    python = _venv(tmp_path / "venv")
    pins = lowest_pins(ROOT, CLIENT_DIST)
    _install(python, *pins)
    _own_wheels(python, wheels, "gnomon-client", "gnomon")
    _run([*PIP, "--python", str(python), "check"])
    code = ("import gnomon.client, gnomon.client.cli, gnomon.node.server, gnomon.node.cli\n"
            "import gnomon.gateway.cli, gnomon.jepsen, gnomon.bench\n"
            "from gnomon.client import Client, Worker\n"
            "import google.protobuf, grpc\n"
            "from gnomon.node.api.http import server\n"
            "assert all((server.STATIC / f).is_file() for f in ('index.html', 'app.js')), 'no UI'\n"
            "from gnomon.node.api.http.openapi import comments\n"
            "assert comments()['gnomon.v1.JobService.CreateJob'], 'no proto comments'\n"
            "from gnomon.node.version import VERSION\n"
            "assert VERSION == gnomon.client.__version__ == '0.1.0', VERSION\n"
            "print(google.protobuf.__version__, grpc.__version__)\n")
    done = _run([str(python), "-c", code], cwd=tmp_path)
    floors = dict(p.split("==") for p in pins if "==" in p)
    assert done.stdout.split() == [floors["protobuf"], floors["grpcio"]]
    for script in ("gnomon", "gnomon-node", "gnomon-gateway"):
        assert (python.parent / script).is_file(), script
    # The editable installs `make` does, with the Makefile's PYTHONWARNINGS.
    warnings = re.search(r"PYTHONWARNINGS=(\S+)", (ROOT / "Makefile").read_text())
    assert warnings, "the Makefile's editable install sets PYTHONWARNINGS"
    done = _install(python, "--no-deps", "-e", str(CLIENT_DIST), "-e", str(ROOT),
                    env={**os.environ, "PYTHONWARNINGS": warnings.group(1)})
    assert "BuildBackendWarning" not in done.stderr, done.stderr[-3000:]
    done = _run([str(python), "-c", "import gnomon.client, gnomon.node; "
                 "print(gnomon.client.__file__, gnomon.node.__file__)"], cwd=tmp_path)
    assert done.stdout.split() == [str(ROOT / "client" / "__init__.py"),
                                   str(ROOT / "node" / "__init__.py")]


@pytest.mark.timeout(600)
def test_the_image_install_steps_from_the_lock(tmp_path, wheels):
    """The Dockerfile's runtime install, run here (no container engine): the lock with
    --require-hashes --no-deps, then the two wheels --no-deps; nothing is missing."""
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "--require-hashes --no-deps -r /tmp/requirements.lock" in dockerfile
    python = _venv(tmp_path / "venv")
    _install(python, "--require-hashes", "--no-deps", "-r",
             str(ROOT / "deploy" / "requirements.lock"))
    _own_wheels(python, wheels, "gnomon-client", "gnomon")
    _run([*PIP, "--python", str(python), "check"])
    _run([str(python), "-c", "import gnomon.node.server, gnomon.node.cli, gnomon.gateway.cli, "
          "gnomon.client.cli"], cwd=tmp_path)
