"""Every pysyncobj private that node/raft touches still exists in the installed pysyncobj, is
listed here, and has the source it had when node/raft was written against it.

node/raft/DESIGN.md lists them and why pysyncobj stays a pinned dependency rather than a
vendored fork. A new pysyncobj that renames one would otherwise fail far from the cause (an
AttributeError on the tick thread, or an override that is silently never called), and one that
changes what a method does under the same name would not fail at all; this fails at once and
names the member."""

import hashlib
import inspect
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import pysyncobj.syncobj
from pysyncobj.syncobj import SyncObj

# Members of SyncObj reached as _SyncObj__<name> from node/raft/node.py.
METHODS = ["onMessageReceived", "generateRaftTimeout", "doChangeCluster",
           "updateClusterConfiguration", "getCurrentLogIndex", "loadDumpFile", "onSetCodeVersion",
           "applyLogEntries"]
ATTRIBUTES = ["raftState", "commandsQueue", "raftNextIndex", "raftMatchIndex", "raftLog",
              "raftCommitIndex", "raftLastApplied", "raftElectionDeadline", "readonlyNodes",
              "connectedNodes", "transport", "serializer", "needLoadDumpFile"]
# Single-underscore members of SyncObj that node/raft overrides or calls.
PROTECTED = ["_applyCommand", "_checkCommandsToApply", "_getLeader", "_getTerm", "_isLeader",
             "_onTick"]
# Module attributes node/raft replaces.
MODULE = ["createJournal", "pickle"]
# sha256 (first 16 hex digits) of each method's source in pysyncobj 0.3.17: what node/raft's
# overrides and calls were written against. After a pysyncobj upgrade, re-read each changed
# method against its use (node/raft/DESIGN.md), then update its line here.
SOURCE_SHA256 = {
    "_SyncObj__onMessageReceived": "ddfe34b6c0282179",
    "_SyncObj__generateRaftTimeout": "92ed37d3620e781a",
    "_SyncObj__doChangeCluster": "247d4d4101b8cd3c",
    "_SyncObj__updateClusterConfiguration": "e2de42f3d1a46c96",
    "_SyncObj__getCurrentLogIndex": "e5af22ca246686bd",
    "_SyncObj__loadDumpFile": "ec66e83905de703b",
    "_SyncObj__onSetCodeVersion": "17b050edb193c853",
    "_SyncObj__applyLogEntries": "073db677773b5a2d",
    "_applyCommand": "827f207d515b2d64",
    "_checkCommandsToApply": "a386a8079361d204",
    "_getLeader": "90e3b8391a79e851",
    "_getTerm": "93bb30b770623bbd",
    "_isLeader": "56c32c31db26cdc0",
    "_onTick": "cc9eb08232d005ba",
}
RAFT = Path(__file__).resolve().parents[2] / "node" / "raft"


def test_the_private_methods_we_override_or_call_exist():
    missing = [m for m in METHODS if not callable(getattr(SyncObj, f"_SyncObj__{m}", None))]
    assert not missing, f"pysyncobj no longer has SyncObj.__{missing} (node/raft/DESIGN.md)"


def test_the_private_attributes_we_read_or_set_are_still_assigned_by_syncobj():
    source = inspect.getsource(SyncObj)
    missing = [a for a in ATTRIBUTES if f"self.__{a} =" not in source]
    assert not missing, f"SyncObj no longer assigns self.__{missing} (node/raft/DESIGN.md)"


def test_the_module_functions_we_replace_exist():
    missing = [n for n in MODULE if not hasattr(pysyncobj.syncobj, n)]
    assert not missing, f"pysyncobj.syncobj no longer has {missing} (node/raft/DESIGN.md)"


def test_the_overrides_in_node_raft_are_the_ones_listed():
    from gnomon.node.raft.node import _StateMachine

    overridden = sorted(name[len("_SyncObj__"):] for name in vars(_StateMachine)
                        if name.startswith("_SyncObj__"))
    assert set(overridden) <= set(METHODS), overridden


def test_the_protected_methods_we_override_or_call_exist():
    missing = [m for m in PROTECTED if not callable(getattr(SyncObj, m, None))]
    assert not missing, f"pysyncobj no longer has SyncObj.{missing} (node/raft/DESIGN.md)"


def test_every_private_node_raft_touches_is_listed_here():
    source = "\n".join(p.read_text() for p in sorted(RAFT.glob("*.py")))
    mangled = set(re.findall(r"_SyncObj__(\w+)", source))
    assert mangled <= set(METHODS + ATTRIBUTES), sorted(mangled - set(METHODS + ATTRIBUTES))
    protected = {f"_{n}" for n in re.findall(r"\._([A-Za-z]\w*)\b", source)
                 if f"_{n}" in vars(SyncObj) and not n.startswith("SyncObj__")}
    assert protected <= set(PROTECTED), sorted(protected - set(PROTECTED))


def test_the_installed_pysyncobj_is_the_pinned_one_with_the_source_we_read():
    root = Path(__file__).resolve().parents[2]
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"pysyncobj=={version('pysyncobj')}" in deps, "pysyncobj must stay pinned (==)"
    changed = [name for name, digest in SOURCE_SHA256.items()
               if hashlib.sha256(inspect.getsource(getattr(SyncObj, name)).encode())
               .hexdigest()[:16] != digest]
    assert not changed, (f"pysyncobj changed SyncObj.{changed}: re-read them against node/raft "
                         "(node/raft/DESIGN.md), then update SOURCE_SHA256")
    assert set(SOURCE_SHA256) == {f"_SyncObj__{m}" for m in METHODS} | set(PROTECTED)
