"""CreateJobs: bulk create, each item on its own, one request id for the whole command."""

from __future__ import annotations

import dataclasses

import pytest

from gnomon.node.core import digest
from gnomon.node.core.commands import CreateJob, CreateJobItem, CreateJobs
from gnomon.node.core.errors import Code, Rejected
from gnomon.node.core.results import JobReply, JobsReply


def _items(h, *names: str, tenant: str = "acme") -> tuple[CreateJobItem, ...]:
    return tuple(CreateJobItem(h.spec(name=n, tenant=tenant), h.T0 + 100) for n in names)


def test_creates_every_item_in_order_as_single_creates_would(h):
    reply, effects = h.one(CreateJobs("", _items(h, "a", "b", "c")))
    assert reply == JobsReply((JobReply("j1", 1), JobReply("j2", 1), JobReply("j3", 1)))
    assert effects.jobs == ["j1", "j2", "j3"]
    assert [h.state.job_names[("acme", n)] for n in "abc"] == ["j1", "j2", "j3"]
    assert h.state.jobs["j2"].next_fire_ms == h.T0 + 100
    assert h.state.jobs_per_tenant["acme"] == 3


def test_same_state_as_the_equivalent_single_creates(h):
    from tests.unit.core.conftest import Harness

    other = Harness()
    h.one(CreateJobs("", _items(h, "a", "b")))
    for item in _items(other, "a", "b"):
        other.one(CreateJob("", item.spec, item.next_fire_ms))
    assert digest(h.state) == digest(other.state)


@pytest.mark.parametrize(
    "case, code, fragment",
    [
        ("taken", Code.ALREADY_EXISTS, "spec.name: tenant 'acme' already has a job named 'a'"),
        ("twice", Code.ALREADY_EXISTS, "spec.name: tenant 'acme' already has a job named 'b'"),
        ("cyclic", Code.INVALID_ARGUMENT, "dependency cycle"),
        ("empty", Code.INVALID_ARGUMENT, "at least one task"),
    ],
)
def test_a_bad_item_fails_alone(h, case, code, fragment):
    h.create(h.spec(name="a"))
    bad = {
        "taken": CreateJobItem(h.spec(name="a"), 0),
        "twice": CreateJobItem(h.spec(name="b"), 0),
        "cyclic": CreateJobItem(h.spec({"x": ["y"], "y": ["x"]}, name="cyc"), 0),
        "empty": CreateJobItem(dataclasses.replace(h.spec(name="e"), tasks=()), 0),
    }[case]
    reply, _ = h.one(CreateJobs("", (*_items(h, "b"), bad, *_items(h, "c"))))
    first, middle, last = reply.items
    assert first == JobReply("j2", 1) and last == JobReply("j3", 1)
    assert isinstance(middle, Rejected) and middle.code == code and fragment in middle.detail
    assert set(h.state.job_names) == {("acme", "a"), ("acme", "b"), ("acme", "c")}


def test_quota_rejects_the_items_past_it_and_counts_the_earlier_ones(h):
    h.create(h.spec(name="x"))
    items = (*_items(h, "a", "b", "c"), *_items(h, "g", tenant="globex"))
    reply, _ = h.one(CreateJobs("", items, max_jobs_per_tenant=3))
    assert reply.items[:2] == (JobReply("j2", 1), JobReply("j3", 1))
    assert reply.items[2] == Rejected(
        Code.RESOURCE_EXHAUSTED, "spec.tenant: tenant 'acme' already has 3 jobs, the limit is 3")
    assert reply.items[3] == JobReply("j4", 1)  # another tenant's quota is its own


def test_one_request_id_answers_a_retry_with_the_first_reply_and_no_effect(h):
    first, _ = h.one(CreateJobs("bulk-1", _items(h, "a", "b")))
    before = digest(h.state)
    again, effects = h.one(CreateJobs("bulk-1", _items(h, "a", "b")))
    assert again == first and effects.jobs == []
    assert digest(h.state) == before
    assert list(h.state.dedupe) == ["bulk-1"]  # one dedupe entry for the whole call


def test_empty_command_creates_nothing(h):
    reply, effects = h.one(CreateJobs("", ()))
    assert reply == JobsReply(()) and effects.jobs == [] and not h.state.jobs
