"""Regenerate the Python stubs of proto/gnomon/v1 (run by `make proto`), and comments.json:
every message, field, enum value, service and method's leading comment by full name (the
OpenAPI document's descriptions; the compiled descriptors carry no comments).

Usage: python proto/generate.py [OUT_DIR]   (default: next to the .proto files)
tests/unit/test_proto_stubs.py generates into a temporary folder and compares.
"""

from __future__ import annotations

import json
import sys
import tempfile
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
    (out / COMMENTS).write_text(json.dumps(comments(include), indent=1, sort_keys=True) + "\n")
    return sorted(p for p in out.iterdir() if p.name.endswith((".py", ".pyi", ".json")))


COMMENTS = "comments.json"
# Field numbers of the descriptor.proto messages that a source location's path walks.
_CHILDREN = {"file": {4: "message", 5: "enum", 6: "service"},
             "message": {2: "field", 3: "message", 4: "enum", 8: "oneof"},
             "enum": {2: "value"}, "service": {2: "method"}}


def comments(include: Path) -> dict[str, str]:
    """Full name (gnomon.v1.JobSpec.priority, gnomon.v1.JobService.CreateJob) -> its leading
    comment (else its trailing one), lines joined; only the elements that have one."""
    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", "--include_source_info",
                f"--descriptor_set_out={out}",
                *[str(p.relative_to(PROTO_ROOT)) for p in PROTO_FILES]]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    found: dict[str, str] = {}
    for f in files:
        for loc in f.source_code_info.location:
            comment = loc.leading_comments or loc.trailing_comments
            text = " ".join(line.strip() for line in comment.splitlines()).strip()
            name = _full_name(f, list(loc.path)) if text else None
            if name:
                found[name] = text
    return found


def _full_name(f, path: list[int]) -> str | None:
    """The full name of the element at a source location's path, None if it names none."""
    node, kind, name = f, "file", f.package
    while path:
        if len(path) < 2 or path[0] not in _CHILDREN.get(kind, {}):
            return None
        kind = _CHILDREN[kind][path[0]]
        container = {"message": "message_type" if node is f else "nested_type",
                     "enum": "enum_type", "service": "service", "field": "field",
                     "oneof": "oneof_decl", "value": "value", "method": "method"}[kind]
        node = getattr(node, container)[path[1]]
        name = f"{name}.{node.name}"
        path = path[2:]
    return None if kind == "file" else name


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else PROTO_ROOT
    for path in generate(target):
        print(path)
