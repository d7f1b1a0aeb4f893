"""Every pysyncobj private that node/raft touches still exists in the installed pysyncobj.

node/raft/DESIGN.md lists them and why. A new pysyncobj that renames one would otherwise
fail far from the cause (an AttributeError on the tick thread, or an override that is
silently never called); this fails at once and names the member."""

import inspect

import pysyncobj.syncobj
from pysyncobj.syncobj import SyncObj

# Members of SyncObj reached as _SyncObj__<name> from node/raft/node.py.
METHODS = ["onMessageReceived", "generateRaftTimeout", "doChangeCluster",
           "updateClusterConfiguration", "getCurrentLogIndex", "loadDumpFile", "onSetCodeVersion"]
ATTRIBUTES = ["raftState", "commandsQueue", "raftNextIndex", "raftMatchIndex", "raftLog",
              "raftCommitIndex", "raftLastApplied", "raftElectionDeadline", "readonlyNodes",
              "connectedNodes", "transport", "serializer", "needLoadDumpFile"]
# Module attributes node/raft replaces.
MODULE = ["createJournal", "pickle"]


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
