"""The leader changes a node saw (node/ops/leader_history.py): one entry per change, a cause
this node can know, and no more than its bound."""

from __future__ import annotations

from gnomon.node.ops.leader_history import TRANSFER_WINDOW_MS, LeaderHistory


def test_each_change_once_with_its_cause_newest_first():
    h = LeaderHistory(10)
    h.observe(1_000, 1, "n1")
    h.observe(1_100, 1, "n1")  # unchanged: no entry
    h.observe(2_000, 1, "")
    h.observe(3_000, 2, "n2")
    h.observe(4_000, 3, "n2")
    h.note_transfer("n3", 5_000)
    h.observe(5_500, 4, "n3")
    got = [(c.term, c.leader_node_id, c.previous_leader_node_id, c.cause) for c in h.changes()]
    assert got == [
        (4, "n3", "n2", "handed over by a TransferLeadership call on this node"),
        (3, "n2", "n2", "the same leader again, in term 3"),
        (2, "n2", "", "elected in term 2"),
        (1, "", "n1", "no leader known here: an election under way, or this node is cut off "
                      "from a quorum"),
        (1, "n1", "", "as this node found it when it started"),
    ]


def test_a_transfer_explains_only_its_own_new_leader_within_its_window():
    h = LeaderHistory(10)
    h.observe(0, 1, "n1")
    h.note_transfer("n3", 1_000)
    h.observe(2_000, 2, "n2")  # another node won: an election, not the transfer
    assert h.changes()[0].cause == "elected in term 2"
    h.note_transfer("", 3_000)  # to any follower
    h.observe(3_000 + TRANSFER_WINDOW_MS + 1, 3, "n3")  # too late to be that transfer's
    assert h.changes()[0].cause == "elected in term 3"


def test_at_its_bound_the_oldest_change_is_forgotten():
    h = LeaderHistory(3)
    for term in range(1, 6):
        h.observe(term * 1_000, term, f"n{term % 2}")
    assert [c.term for c in h.changes()] == [5, 4, 3]
