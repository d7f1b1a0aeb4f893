"""Unpickling of Raft log entries without globals.

pysyncobj wraps each entry's bytes (our CommandBatch) in a pickle of ``(method id, args,
kwargs)`` and unpickles it on every replica when it applies the entry. An entry comes from an
authenticated member (node/raft/transport.py), but a pickle that names a class or function would
still run code chosen by whoever wrote it. The entries gnomon writes hold only ints, bytes,
tuples and dicts, so pysyncobj's `pickle.loads` is replaced by one that refuses every global
(but the latin-1 encoder that protocol 2 writes bytes with):
a crafted entry fails to decode (and the node stops, as for any entry it cannot apply)
instead of executing anything.

pysyncobj's own membership commands pickle its Node objects; gnomon never writes them and
writes its own, of plain strings (node/raft/membership.py, node/raft/DESIGN.md, Membership).
"""

from __future__ import annotations

import io
import pickle
import types

__all__ = ["EntryPickleError", "loads", "restrict_pysyncobj_unpickling"]


class EntryPickleError(pickle.UnpicklingError):
    """A log entry's pickle names a global (a class or a function)."""


def _latin1_bytes(text: str, encoding: str) -> bytes:
    # Pickle protocol 2 (pysyncobj's) writes bytes as _codecs.encode(str, "latin1").
    if encoding != "latin1" or type(text) is not str:
        raise EntryPickleError(f"a log entry asks for the {encoding!r} codec: refused")
    return text.encode("latin1")


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str):  # noqa: D102 - pickle's hook
        if (module, name) == ("_codecs", "encode"):
            return _latin1_bytes
        raise EntryPickleError(f"a log entry refers to {module}.{name}: refused (no globals)")


def loads(data: bytes | bytearray | memoryview) -> object:
    """`pickle.loads` for data that may hold only built-in values (no globals)."""
    return _NoGlobals(io.BytesIO(bytes(data))).load()


def restrict_pysyncobj_unpickling() -> None:
    """Make pysyncobj's SyncObj unpickle entries with `loads` (idempotent)."""
    from pysyncobj import syncobj

    if getattr(syncobj.pickle, "restricted", False):
        return
    original = syncobj.pickle
    syncobj.pickle = types.SimpleNamespace(
        restricted=True, dumps=original.dumps, dump=original.dump, to_bytes=original.to_bytes,
        loads=loads, load=_refuse_file_load)


def _refuse_file_load(_file) -> object:  # pragma: no cover - pysyncobj's file snapshots are off
    raise EntryPickleError("pysyncobj's own snapshot files are not used by gnomon")
