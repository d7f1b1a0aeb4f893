"""Request ids are remembered per scope (the caller and the RPC, stamped by the servicer):
the same id from two scopes is two requests with two effects; the same request again in its
scope gets the first reply and changes nothing; a different request under an id its scope
already used is refused and changes nothing. An empty scope is the legacy global scope."""

from __future__ import annotations

import dataclasses

from gnomon.node.core.commands import CancelRun, CreateJob, TriggerJob
from gnomon.node.core.errors import Code, Rejected
from gnomon.node.core.results import Effects, JobReply, RunReply

A = "t1/JobService.CreateJob/acme"
B = "t2/JobService.CreateJob/globex"
FP_A, FP_B = b"\xaa" * 32, b"\xbb" * 32


def _scoped(command, scope: str, fingerprint: bytes):
    return dataclasses.replace(command, request_scope=scope, request_fingerprint=fingerprint)


def test_the_same_request_id_from_two_scopes_has_two_effects(h):
    key = "release-2026-12-02"
    b_reply, _ = h.one(_scoped(CreateJob(key, h.spec(tenant="globex", name="b"), h.T0),
                               B, FP_B))
    a_reply, _ = h.one(_scoped(CreateJob(key, h.spec(tenant="acme", name="a"), h.T0),
                               A, FP_A))
    assert b_reply == JobReply("j1", 1) and a_reply == JobReply("j2", 1)
    assert {(j.spec.tenant, j.spec.name) for j in h.state.jobs.values()} == {
        ("globex", "b"), ("acme", "a")}
    # Runs too: each scope's trigger and cancel act on its own run.
    b_run, _ = h.one(_scoped(TriggerJob("run", "j1"), B, FP_B))
    a_run, _ = h.one(_scoped(TriggerJob("run", "j2"), A, FP_A))
    assert (b_run, a_run) == (RunReply("j1@manual-1"), RunReply("j2@manual-2"))
    h.one(_scoped(CancelRun("stop", "j1@manual-1"), B, FP_B))
    a_cancel, _ = h.one(_scoped(CancelRun("stop", "j2@manual-2"), A, FP_A))
    assert a_cancel == RunReply("j2@manual-2")
    assert h.run("j1@manual-1").state == h.run("j2@manual-2").state == "cancelled"
    assert list(h.state.dedupe) == [(B, key), (A, key), (B, "run"), (A, "run"), (B, "stop"),
                                    (A, "stop")]


def test_the_same_request_again_in_its_scope_gets_the_first_reply(h):
    command = _scoped(CreateJob("k", h.spec(), h.T0), A, FP_A)
    first, _ = h.one(command)
    before = h.digest()
    # The leader's own inputs (the first slot) differ on a retry: the fingerprint does not.
    again, effects = h.one(dataclasses.replace(command, next_fire_ms=h.T0 + 5))
    assert again == first == JobReply("j1", 1)
    assert effects == Effects() and h.digest() == before and len(h.state.jobs) == 1


def test_a_different_request_under_a_used_id_is_refused_and_changes_nothing(h):
    first, _ = h.one(_scoped(CreateJob("k", h.spec(name="a"), h.T0), A, FP_A))
    other = _scoped(CreateJob("k", h.spec(name="other"), h.T0), A, b"\x01" * 32)
    reply = h.rejects(other, Code.FAILED_PRECONDITION, "request_id: 'k' was already used")
    assert "different request" in reply.detail
    assert [j.spec.name for j in h.state.jobs.values()] == ["a"]
    # The id still answers its first request, and nothing of the refusal was remembered.
    again, _ = h.one(_scoped(CreateJob("k", h.spec(name="a"), h.T0), A, FP_A))
    assert again == first
    assert h.state.dedupe[(A, "k")].fingerprint == FP_A and len(h.state.dedupe) == 1


def test_the_legacy_scope_keeps_the_bare_request_id(h):
    """Entries written before scopes (empty scope and fingerprint) apply as before, and a
    scoped request never picks up a legacy entry's reply."""
    legacy = CreateJob("k", h.spec(name="old"), h.T0)
    first, _ = h.one(legacy)
    assert list(h.state.dedupe) == ["k"] and h.state.dedupe["k"].fingerprint == b""
    assert h.one(legacy)[0] == first and len(h.state.jobs) == 1
    scoped, _ = h.one(_scoped(CreateJob("k", h.spec(name="new"), h.T0), A, FP_A))
    assert scoped == JobReply("j2", 1) and list(h.state.dedupe) == ["k", (A, "k")]


def test_a_refused_reuse_is_not_remembered_as_the_answer(h):
    h.one(_scoped(TriggerJob("t", h.create()), A, FP_A))
    refused, _ = h.one(_scoped(TriggerJob("t", "j1", overlap_policy="skip"), A, FP_B))
    assert isinstance(refused, Rejected)
    assert h.state.dedupe[(A, "t")].reply == RunReply("j1@manual-1")
