"""The committed generated stubs equal a fresh generation from the .proto files."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_committed_stubs_match_fresh_generation(tmp_path):
    spec = importlib.util.spec_from_file_location("generate", ROOT / "proto" / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    fresh = generate.generate(tmp_path)
    assert fresh
    committed_dir = ROOT / "proto" / "gnomon" / "v1"
    stale = [p.name for p in fresh if (committed_dir / p.name).read_bytes() != p.read_bytes()]
    assert not stale, f"run `make proto` and commit: {stale}"
