"""The leader changes this node saw (GetStatus.leader_changes): a bounded, node-local record
for operators, never replicated. Each node tells what it observed: a change it did not see
(it was down, or cut off) is not in its record, and a cause is what this node can know."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

# A transfer requested on this node explains a new leader seen within this long after it.
TRANSFER_WINDOW_MS = 30_000


@dataclass(frozen=True, slots=True)
class LeaderChange:
    at_ms: int  # this node's wall clock when it saw the change
    term: int
    leader_node_id: str  # "" : no leader known here
    previous_leader_node_id: str
    cause: str


class LeaderHistory:
    """The last `max_entries` (config leader_history_max_entries) leader changes, newest last;
    fed by the node's health watch (every 100 ms)."""

    def __init__(self, max_entries: int) -> None:
        self._changes: deque[LeaderChange] = deque(maxlen=max_entries)
        self._transfer: tuple[str, int] | None = None  # (to node, requested at ms)

    def note_transfer(self, to_node_id: str, now_ms: int) -> None:
        """A TransferLeadership call on this node (to "": any follower) is under way."""
        self._transfer = (to_node_id, now_ms)

    def observe(self, now_ms: int, term: int, leader_node_id: str) -> None:
        last = self._changes[-1] if self._changes else None
        if last is not None and (last.term, last.leader_node_id) == (term, leader_node_id):
            return
        previous = last.leader_node_id if last is not None else ""
        self._changes.append(LeaderChange(now_ms, term, leader_node_id, previous,
                                          self._cause(last, now_ms, term, leader_node_id)))

    def _cause(self, last: LeaderChange | None, now_ms: int, term: int, leader: str) -> str:
        if last is None:
            return "as this node found it when it started"
        if not leader:
            return ("no leader known here: an election under way, or this node is cut off "
                    "from a quorum")
        transfer = self._transfer
        if transfer is not None and now_ms - transfer[1] <= TRANSFER_WINDOW_MS and (
                not transfer[0] or transfer[0] == leader):
            self._transfer = None
            return "handed over by a TransferLeadership call on this node"
        if leader == last.leader_node_id or (not last.leader_node_id and leader ==
                                              self._last_leader()):
            return f"the same leader again, in term {term}"
        return f"elected in term {term}"

    def _last_leader(self) -> str:
        return next((c.leader_node_id for c in reversed(self._changes) if c.leader_node_id), "")

    def changes(self) -> list[LeaderChange]:
        """Newest first."""
        return list(reversed(self._changes))
