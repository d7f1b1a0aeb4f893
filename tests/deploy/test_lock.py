"""deploy/requirements.lock, from which the image installs its third-party packages, pins
exactly the runtime dependency closure of the two pyproject.toml files' requirements, for the
image's Python (3.11 on Linux): every package the closure reaches at a version that satisfies
every range asking for it, with hashes, and nothing else. Each package's own requirements are
read from this venv, which `make` installs with the lock as constraints, so the lock cannot
drift from pyproject.toml silently; deploy/README.md says how to compile it again."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "deploy" / "requirements.lock"
PROJECTS = (ROOT / "pyproject.toml", ROOT / "client-dist" / "pyproject.toml")
OWN = {"gnomon", "gnomon-client"}
# The image's interpreter (deploy/Dockerfile: python:3.11-slim), whatever runs the test.
IMAGE_ENV = {**default_environment(), "python_version": "3.11", "python_full_version": "3.11.0",
             "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
             "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def _lock() -> dict[str, tuple[str, int]]:
    """Package -> (pinned version, number of hashes)."""
    pins: dict[str, tuple[str, int]] = {}
    current = None
    for line in LOCK.read_text().splitlines():
        pin = re.match(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", line)
        if pin:
            current = canonicalize_name(pin.group(1))
            assert current not in pins, f"{current} is pinned twice"
            pins[current] = (pin.group(2), 0)
        elif line.strip().startswith("--hash=sha256:") and current:
            version, hashes = pins[current]
            pins[current] = (version, hashes + 1)
        elif line and not line.startswith((" ", "#")):
            raise AssertionError(f"requirements.lock: not a pinned requirement: {line!r}")
    return pins


def _roots() -> list[Requirement]:
    reqs = [Requirement(d) for p in PROJECTS
            for d in tomllib.loads(p.read_text())["project"]["dependencies"]]
    return [r for r in reqs if canonicalize_name(r.name) not in OWN]


def _applies(req: Requirement, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate({**IMAGE_ENV, "extra": e}) for e in extras | {""})


def _requires(name: str, version: str, extras: set[str]) -> list[Requirement]:
    """The requirements of a locked package at its pinned version, read from this venv."""
    try:
        dist = distribution(name)
    except PackageNotFoundError:
        raise AssertionError(f"{name} is not installed here: make .venv/.installed") from None
    assert dist.version == version, (
        f"this venv has {name} {dist.version}, the lock {version}: make .venv/.installed "
        "(it installs with the lock as constraints)")
    reqs = [Requirement(r) for r in dist.requires or []]
    return [r for r in reqs if _applies(r, extras)]


def test_the_lock_pins_exactly_the_runtime_closure_with_hashes():
    lock = _lock()
    unhashed = [n for n, (_, hashes) in lock.items() if hashes == 0]
    assert not unhashed, f"no --hash for {unhashed}: compile with --generate-hashes"
    reached: set[str] = set()
    problems: list[str] = []
    pending = [(r, "pyproject.toml") for r in _roots() if _applies(r, set())]
    while pending:
        req, wanted_by = pending.pop()
        name = canonicalize_name(req.name)
        if name not in lock:
            problems.append(f"{name} (wanted by {wanted_by}: {req}) is not in the lock")
            continue
        version = lock[name][0]
        if not req.specifier.contains(version, prereleases=True):
            problems.append(f"{name}=={version} does not satisfy {wanted_by}'s {req}")
        if name in reached:
            continue
        reached.add(name)
        pending += [(r, name) for r in _requires(name, version, set(req.extras))]
    extra = sorted(set(lock) - reached)
    if extra:
        problems.append(f"pinned but required by nothing: {extra}")
    assert not problems, "deploy/requirements.lock has drifted (deploy/README.md, 'The lock " \
        "file'):\n" + "\n".join(problems)


def test_the_readme_compiles_the_lock_with_the_command_it_was_compiled_with():
    command = re.search(r"^#    (pip-compile .*)$", LOCK.read_text(), re.M)
    assert command, "the lock's header names the pip-compile command"
    readme = " ".join((ROOT / "deploy" / "README.md").read_text().replace("\\\n", " ").split())
    assert command.group(1) in readme, command.group(1)
