"""PreVote's rules (node/raft/prevote.py): who grants, when a round wins, what resets it."""

from __future__ import annotations

import pytest

from gnomon.node.raft.prevote import PreVote


def _ask(pv: PreVote, term: int = 5, index: int = 10, log_term: int = 4) -> dict:
    return pv.start("a", term - 1, index, log_term)


@pytest.mark.parametrize("why, kwargs, granted", [
    ("no leader heard for min timeout, log as new", {}, True),
    ("heard a leader 0.1 s ago", {"contact_ago": 0.1}, False),
    ("this node leads", {"leading": True}, False),
    ("its own term is already the asked term", {"current_term": 5}, False),
    ("the asker's last entry has an older term", {"last_log_term": 5}, False),
    ("same last term, the asker has fewer entries", {"last_log_index": 11}, False),
    ("same last term, the asker has more entries", {"last_log_index": 9}, True),
])
def test_a_voter_grants_only_without_a_leader_and_to_a_log_as_new(why, kwargs, granted):
    voter = PreVote(min_timeout_s=0.25)
    now = 100.0
    voter.heard_leader(now - kwargs.get("contact_ago", 1.0))
    request = _ask(PreVote(0.25))
    reply = voter.answer(request, now=now, leading=kwargs.get("leading", False),
                         current_term=kwargs.get("current_term", 4),
                         last_log_index=kwargs.get("last_log_index", 10),
                         last_log_term=kwargs.get("last_log_term", 4))
    assert reply == {"type": "pre_vote_response", "term": 5, "granted": granted}, why


def test_answering_changes_nothing_of_the_voter():
    voter = PreVote(min_timeout_s=0.25)
    voter.answer(_ask(PreVote(0.25)), now=5.0, leading=False, current_term=1,
                 last_log_index=1, last_log_term=1)
    assert (voter.round_term, voter.granted, voter.won) == (None, set(), False)


def test_a_round_wins_with_a_majority_once():
    asker = PreVote(min_timeout_s=0.25)
    request = asker.start("a", 4, 10, 4)
    assert request == {"type": "pre_vote", "term": 5, "last_log_index": 10, "last_log_term": 4}
    yes = {"type": "pre_vote_response", "term": 5, "granted": True}
    assert not asker.on_response("b", {**yes, "granted": False}, members=5, current_term=4)
    assert not asker.on_response("b", {**yes, "term": 4}, members=5, current_term=4)  # older
    assert not asker.on_response("b", yes, members=5, current_term=4)
    assert asker.on_response("c", yes, members=5, current_term=4)  # a, b, c: 3 of 5
    assert not asker.on_response("d", yes, members=5, current_term=4)  # already won
    assert asker.take_win(4)
    assert not asker.take_win(4)


def test_a_round_is_void_once_the_term_moved():
    """Seen at start: n3 asked, then voted for n1 (its term moved to 1) and n1 led; n2's late
    grant then won n3's round, n3 stood at term 2 and deposed the leader it had elected."""
    asker = PreVote(min_timeout_s=0.25)
    asker.start("n3", 0, 0, 0)
    yes = {"type": "pre_vote_response", "term": 1, "granted": True}
    assert not asker.on_response("n2", yes, members=3, current_term=1)
    asker.start("n3", 0, 0, 0)
    assert asker.on_response("n2", yes, members=3, current_term=0)
    assert not asker.take_win(1)  # it voted (term 1) between the win and its next tick


def test_a_handover_stands_without_a_round():
    asker = PreVote(min_timeout_s=0.25)
    asker.skip(3)
    assert asker.take_win(3)


def test_a_leaders_append_ends_the_round():
    asker = PreVote(min_timeout_s=0.25)
    asker.start("a", 4, 10, 4)
    asker.heard_leader(7.0)
    assert not asker.on_response("b", {"type": "pre_vote_response", "term": 5,
                                       "granted": True}, members=3, current_term=4)
    assert not asker.take_win(4)


def test_a_voter_back_from_a_stall_refuses_for_a_min_timeout():
    """Its leader's appends may still wait unread: it answers as if it had heard a leader."""
    voter = PreVote(min_timeout_s=0.25)  # never heard a leader: it would grant
    voter.stalled(10.0)
    ask = {"type": "pre_vote", "term": 5, "last_log_index": 10, "last_log_term": 4}
    kwargs = {"leading": False, "current_term": 4, "last_log_index": 10, "last_log_term": 4}
    assert not voter.answer(ask, now=10.1, **kwargs)["granted"]
    assert voter.answer(ask, now=10.3, **kwargs)["granted"]
