"""``Failover``: the one rule for the next node after a failed attempt, shared by client calls
and the worker's reconnects."""

from __future__ import annotations

import random

from gnomon.client._transport import MAX_IMMEDIATE_REDIRECTS, Backoff, Failover, Router

SERVERS = ("a:1", "b:1", "c:1")


def make(*, pinned: bool = False) -> Failover:
    return Failover(Router(SERVERS), Backoff(0.1, 1.0), random.Random(7), pinned=pinned)


def test_a_named_leader_is_tried_at_once_then_backoff_takes_over():
    failover = make()
    address = "a:1"
    for _ in range(MAX_IMMEDIATE_REDIRECTS):
        step = failover.next(address, "x:1" if address != "x:1" else "y:1")
        assert step.redirected and step.delay_s == 0.0
        address = step.address
    # Two confused nodes naming each other do not make us spin: the next one backs off.
    step = failover.next(address, "z:1")
    assert not step.redirected and step.delay_s > 0
    assert step.address in SERVERS


def test_without_a_hint_the_next_server_is_tried_after_a_growing_backoff():
    failover = make()
    first = failover.next("a:1", None)
    second = failover.next(first.address, None)
    assert (first.address, second.address) == ("b:1", "c:1")
    assert 0.05 <= first.delay_s <= 0.1 and 0.1 <= second.delay_s <= 0.2


def test_success_prefers_the_node_and_resets_the_backoff():
    failover = make()
    failover.next("a:1", None)
    failover.next("b:1", None)
    failover.succeeded("c:1")
    assert failover.router.current() == "c:1"
    assert failover.next("c:1", None).delay_s <= 0.1


def test_a_pinned_failover_never_leaves_its_address():
    failover = make(pinned=True)
    step = failover.next("b:1", "a:1")
    assert step.address == "b:1" and not step.redirected and step.delay_s > 0
    failover.succeeded("b:1")
    assert failover.router.current() == "a:1"  # the shared router was not touched
