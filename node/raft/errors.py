"""What proposing and leader-only Raft actions raise (the servicers map them to codes)."""

from __future__ import annotations


class LeadershipLost(Exception):
    """A leader-only Raft action was asked of a node that does not lead."""


class Overloaded(Exception):
    """The proposer's queue is full: RESOURCE_EXHAUSTED, try later."""


class NotCommitted(Exception):
    """The entry did not commit (leader changed, timeout): the outcome may be unknown."""
