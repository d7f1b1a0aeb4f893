"""The membership nemesis: replace a node whose disk was wiped, the way an operator must
(node/raft/DESIGN.md, Membership).

    member-replace  kill -9 one follower, wipe its data directory, `RemoveNode` it (the
                    cluster runs with one voter fewer while the fault holds); stop: start it
                    empty with --join, `AddNode` it (it catches up as a learner, then votes),
                    and wait until it applied what the others had.

The checkers judge the run as usual: a replacement must not lose or double a fire, break a
lease's fencing or a register's linearizability; the final digests must agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gnomon.client import GnomonError
from gnomon.jepsen.fault import Skip, Started, note, wait_rejoined

if TYPE_CHECKING:
    from gnomon.jepsen.nemesis import Nemesis

KINDS = ("member-replace",)
CATCH_UP_TIMEOUT_S = 60.0


async def member_replace(n: Nemesis) -> Started:
    db, admin = n.ctx.db, n.ctx.admin
    leader = await n.leader()
    followers = [i for i in n.nodes() if i != leader and db.nodes[i].alive()
                 and not db.nodes[i].paused]
    if not followers:
        raise Skip("no running follower")
    node_id = followers[n.pick("member-replace", len(followers)) % len(followers)]
    node = db.nodes[node_id]
    db.kill(node_id)
    db.note_exit(node_id)
    db.wipe(node_id)
    try:
        removed = await admin.remove_node(node_id, timeout_s=20)
    except GnomonError as exc:
        db.start(node_id)  # as before (an empty member, filled by a snapshot)
        raise Skip(f"remove-node {node_id} failed: {exc}") from None
    # `changed` is false on a retry after the first attempt removed it: look at the members.
    members = [m.node_id for m in removed.members]
    note(n, "member-removed", {"node": node_id, "changed": removed.changed, "members": members})

    async def heal() -> dict[str, Any]:
        db.start(node_id, join=True)
        try:
            added = await admin.add_node(node_id, raft_address=node.raft_addr,
                                         grpc_address=node.grpc_addr,
                                         catch_up_timeout_s=CATCH_UP_TIMEOUT_S,
                                         timeout_s=CATCH_UP_TIMEOUT_S + 10)
        except GnomonError as exc:
            return {"added": False, "error": str(exc)}
        return {"added": node_id in [m.node_id for m in added.members],
                "changed": added.changed, "catch_up_ms": added.catch_up_ms,
                **await wait_rejoined(n, node_id)}

    return {"node": node_id, "leader": leader}, heal
