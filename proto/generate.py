"""Regenerate the Python stubs of proto/gnomon/v1 (run by `make proto`).

Usage: python proto/generate.py [OUT_DIR]   (default: next to the .proto files)
tests/unit/test_proto_stubs.py generates into a temporary folder and compares.
"""

from __future__ import annotations

import sys
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
PROTO_FILES = sorted((PROTO_ROOT / "gnomon" / "v1").glob("*.proto"))


def generate(out_root: Path) -> list[Path]:
    """Write *_pb2.py, *_pb2.pyi and *_pb2_grpc.py under out_root/gnomon/v1; return them."""
    import grpc_tools
    from grpc_tools import protoc

    include = Path(grpc_tools.__file__).parent / "_proto"
    out_root.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *[str(p.relative_to(PROTO_ROOT)) for p in PROTO_FILES],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    out = out_root / "gnomon" / "v1"
    return sorted(p for p in out.iterdir() if p.name.endswith((".py", ".pyi")))


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else PROTO_ROOT
    for path in generate(target):
        print(path)
