"""Raft's PreVote (Ongaro's thesis, section 9.6), which pysyncobj lacks.

A node whose election timer ran out first asks the others whether they would vote for it at
its next term, without changing any term or vote. Only when a majority says yes does it stand
for election (pysyncobj's own candidate step, term + 1). A node grants a pre-vote when it has
not heard a leader for `min_timeout_s` (the shortest election timeout), is not the leader
itself, and the asker's log is at least as up to date as its own.

Why: without it, a node that stalled (a long GC pause, a slow snapshot load) or was cut off
comes back with a higher term and deposes a healthy leader; a lower election timeout, which
makes failover faster, makes such stalls count more often. node/raft/DESIGN.md, "PreVote".

Pure logic: the node (`node.py`) feeds it times, terms and messages on the tick thread.
"""

from __future__ import annotations

import math

REQUEST, RESPONSE = "pre_vote", "pre_vote_response"


class PreVote:
    """One node's pre-vote rounds (as asker) and its answers (as voter). Tick thread only."""

    __slots__ = ("min_timeout_s", "leader_contact", "round_term", "granted", "won", "rounds")

    def __init__(self, min_timeout_s: float) -> None:
        self.min_timeout_s = min_timeout_s
        self.leader_contact = -math.inf  # monotonic time of the last append from a leader
        self.round_term: int | None = None  # the term asked for in the round under way
        self.granted: set[str] = set()
        self.won = False
        self.rounds = 0  # rounds started: a node that keeps asking does not hear its leader

    def heard_leader(self, now: float) -> None:
        """A leader's append arrived: any round under way is moot."""
        self.leader_contact = now
        self.round_term, self.granted, self.won = None, set(), False

    def stalled(self, now: float) -> None:
        """This node's tick stopped for an election timeout or longer (a long load or apply,
        CPU starvation): a leader's appends may wait unread in its sockets, so it answers as
        if it had heard a leader now. Without this, a follower back from a 3 s snapshot load
        granted a pre-vote before it read the leader's queued appends, and the asker deposed
        a healthy leader."""
        self.leader_contact = max(self.leader_contact, now)

    def start(self, self_id: str, current_term: int, last_log_index: int,
              last_log_term: int) -> dict:
        """Begin a round for `current_term + 1`; the message to send to every other member."""
        self.round_term, self.granted, self.won = current_term + 1, {self_id}, False
        self.rounds += 1
        return {"type": REQUEST, "term": current_term + 1, "last_log_index": last_log_index,
                "last_log_term": last_log_term}

    def take_win(self, current_term: int) -> bool:
        """True once after a round reached a majority while this node's term is still the
        one it asked from (the caller stands for election now)."""
        won = self.won and self.round_term == current_term + 1
        self.round_term, self.granted, self.won = None, set(), False
        return won

    def skip(self, current_term: int) -> None:
        """Stand without a round (the leader handed over with TimeoutNow)."""
        self.round_term, self.granted, self.won = current_term + 1, set(), True

    def answer(self, request: dict, *, now: float, leading: bool, current_term: int,
               last_log_index: int, last_log_term: int) -> dict:
        """This node's reply to a pre-vote request (nothing of this node changes)."""
        up_to_date = (request["last_log_term"], request["last_log_index"]) >= \
            (last_log_term, last_log_index)
        granted = (request["term"] > current_term and up_to_date and not leading
                   and now - self.leader_contact >= self.min_timeout_s)
        return {"type": RESPONSE, "term": request["term"], "granted": granted}

    def on_response(self, voter_id: str, response: dict, members: int,
                    current_term: int) -> bool:
        """Count a reply; True when this reply gave the round a majority of `members`. A
        round is void once this node's term moved (it voted for another meanwhile: standing
        then would depose the leader it just elected)."""
        if self.round_term is None or response["term"] != self.round_term \
                or current_term + 1 != self.round_term or not response["granted"] or self.won:
            return False
        self.granted.add(voter_id)
        if len(self.granted) * 2 > members:
            self.won = True
            return True
        return False
