"""gnomon.node: a scheduler node.

Snapshots are written by a child forked from the Raft tick thread (node/raft/snapshotter.py) that
never uses gRPC. gRPC's own fork handlers would pause its threads around every fork (the tick
thread waits meanwhile) and log a line each time: they are off unless the environment says
otherwise. This must run before grpc is first imported, hence here.
"""

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
