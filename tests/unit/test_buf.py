"""`buf lint` and `buf breaking` against the 0.1.0 baseline (docs/STABILITY.md).

buf is the npm package @bufbuild/buf at the version .ci/run pins and installs under
.ci/tools (CI always has it); where it is absent locally the tests skip and say how to get it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "proto" / "baseline" / "gnomon-v1-0.1.0.binpb"


def _pinned_version() -> str:
    found = re.search(r"^BUF_VERSION=(\S+)$", (ROOT / ".ci" / "run").read_text(), re.M)
    assert found, ".ci/run pins BUF_VERSION"
    return found.group(1)


@pytest.fixture(scope="module")
def buf() -> str:
    local = ROOT / ".ci" / "tools" / "node_modules" / ".bin" / "buf"
    path = str(local) if local.exists() else shutil.which("buf")
    if path is None:
        pytest.skip(f"buf is not installed: npm install --no-save --prefix .ci/tools "
                    f"@bufbuild/buf@{_pinned_version()} (.ci/run does)")
    return path


def _run(buf: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([buf, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_buf_is_the_pinned_version(buf):
    """Lint rules change between buf versions: the result is the pinned version's."""
    found, pinned = _run(buf, "--version").stdout.strip(), _pinned_version()
    assert found == pinned, (f"{buf} is buf {found}; .ci/run pins {pinned}: npm install "
                             f"--no-save --prefix .ci/tools @bufbuild/buf@{pinned}")


def test_the_protos_pass_buf_lint(buf):
    done = _run(buf, "lint")
    assert done.returncode == 0, done.stdout + done.stderr


def _breaking(buf: str, root: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    image = tmp_path / "current.binpb"
    built = _run(buf, "build", "--exclude-source-info", "-o", str(image), cwd=root)
    assert built.returncode == 0, built.stderr
    return _run(buf, "breaking", str(image), "--against", str(BASELINE), cwd=root)


def test_nothing_released_at_0_1_0_is_broken(buf, tmp_path):
    done = _breaking(buf, ROOT, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_changed_field_type_is_caught(buf, tmp_path):
    """The check can fail: a copy of the protos with a field's type changed breaks it."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "proto", copy / "proto", ignore=shutil.ignore_patterns("*.py*"))
    shutil.copy(ROOT / "buf.yaml", copy / "buf.yaml")
    types = copy / "proto" / "gnomon" / "v1" / "types.proto"
    text = types.read_text()
    assert "int32 api_burst = 7;" in text
    types.write_text(text.replace("int32 api_burst = 7;", "int64 api_burst = 7;"))
    done = _breaking(buf, copy, tmp_path)
    assert done.returncode != 0
    assert 'name "api_burst" on message "Tenant" changed type' in done.stdout, done.stdout
