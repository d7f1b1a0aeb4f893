"""The package installs into a fresh venv with the lowest versions pyproject.toml allows, and
imports: the client, the CLI and the node (a floor below what the code needs is a user's
VersionError at import, whatever the resolver approved)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def lowest_pins() -> list[str]:
    """Each dependency at its floor (`>=X` -> `==X`); exact pins as they are."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = []
    for dep in deps:
        name = re.match(r"[A-Za-z0-9_.-]+", dep).group(0)
        floor = re.search(r"(>=|==)\s*([0-9][0-9.]*)", dep)
        pins.append(f"{name}=={floor.group(2)}" if floor else name)
    return pins


@pytest.mark.timeout(600)
def test_lowest_allowed_versions_install_and_import(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
           "--disable-pip-version-check"]
    # A current pip, as `make` installs (it shows the build backend's warnings).
    done = subprocess.run([*pip, "--upgrade", "pip"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    done = subprocess.run([*pip, *lowest_pins()], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    done = subprocess.run([*pip, "--no-deps", str(ROOT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    # Every fresh set-up printed a wall of setuptools warnings (the dashboard's folder absent
    # from the packages; the editable install's notice, which the Makefile silences).
    assert "BuildBackendWarning" not in done.stderr, done.stderr[-3000:]
    code = ("import gnomon.client, gnomon.client.cli, gnomon.node.server, gnomon.node.cli\n"
            "from gnomon.client import Client, Worker\n"
            "import google.protobuf, grpc\n"
            "from gnomon.node.api.http import server\n"
            "assert all((server.STATIC / f).is_file() for f in ('index.html', 'app.js')), 'no UI'\n"
            "from gnomon.node.api.http.openapi import comments\n"
            "assert comments()['gnomon.v1.JobService.CreateJob'], 'no proto comments'\n"
            "print(google.protobuf.__version__, grpc.__version__)\n")
    done = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True,
                          text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    pins = dict(p.split("==") for p in lowest_pins() if "==" in p)
    assert done.stdout.split() == [pins["protobuf"], pins["grpcio"]]
    # The editable install `make` does, with the Makefile's PYTHONWARNINGS.
    warnings = re.search(r"PYTHONWARNINGS=(\S+)", (ROOT / "Makefile").read_text())
    assert warnings, "the Makefile's editable install sets PYTHONWARNINGS"
    make_env = {**os.environ, "PYTHONWARNINGS": warnings.group(1)}
    done = subprocess.run([*pip, "--no-deps", "-e", str(ROOT)], capture_output=True, text=True,
                          env=make_env)
    assert done.returncode == 0 and "BuildBackendWarning" not in done.stderr, done.stderr[-3000:]
