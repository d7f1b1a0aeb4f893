"""Tokens as replicated state (node/core/access.py): rules, revocation, the log codec, the
snapshot tables and the digest."""

from __future__ import annotations

import hashlib

import pytest

from gnomon.node import codec
from gnomon.node.core import apply_batch, digest, new_state
from gnomon.node.core import commands as c
from gnomon.node.core.access import CreateToken, RevokeToken, TokenReply
from gnomon.node.core.errors import Code, Rejected
from gnomon.node.storage import state_codec

T0 = 1_790_000_000_000


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _apply(state, *commands, now=T0):
    # Through the log codec, as a replica applies entries.
    batch = codec.batch_from_bytes(codec.batch_to_bytes(c.Batch(now_ms=now, commands=commands)))
    replies, _ = apply_batch(state, batch)
    return replies


def _create(name="ci", role="tenant-writer", tenants=("acme",), secret="s1", **kw):
    return CreateToken(f"req-{name}-{secret}", name, role, tenants, _hash(secret), **kw)


def test_create_and_revoke():
    st = new_state()
    (reply,) = _apply(st, _create())
    assert reply == TokenReply("t1")
    token = st.access.tokens["t1"]
    assert (token.role, token.tenants, token.created_ms) == ("tenant-writer", ("acme",), T0)
    assert st.access.by_hash[_hash("s1")] == "t1"
    (reply,) = _apply(st, RevokeToken("rev-1", "t1"), now=T0 + 5)
    assert reply == TokenReply("t1") and st.access.tokens["t1"].revoked_ms == T0 + 5
    (again,) = _apply(st, RevokeToken("rev-2", "t1"), now=T0 + 9)
    assert again == TokenReply("t1") and st.access.tokens["t1"].revoked_ms == T0 + 5


@pytest.mark.parametrize(("command", "code", "named"), [
    (_create(role="root"), Code.INVALID_ARGUMENT, "role"),
    (_create(role="admin"), Code.INVALID_ARGUMENT, "tenants"),
    (_create(role="gateway"), Code.INVALID_ARGUMENT, "tenants: a gateway token is not scoped"),
    (_create(tenants=()), Code.INVALID_ARGUMENT, "tenants"),
    (_create(tenants=("a", "a")), Code.INVALID_ARGUMENT, "tenants"),
    (_create(name=""), Code.INVALID_ARGUMENT, "name"),
    (_create(expires_ms=T0 - 1), Code.INVALID_ARGUMENT, "expires_ms"),
    (CreateToken("r", "x", "worker", ("a",), "not-hex"), Code.INVALID_ARGUMENT,
     "secret_sha256"),
    (RevokeToken("r", "t9"), Code.NOT_FOUND, "token_id"),
])
def test_bad_commands_change_nothing(command, code, named):
    st = new_state()
    (reply,) = _apply(st, command)
    assert isinstance(reply, Rejected) and reply.code == code and named in reply.detail
    assert not st.access.tokens and not st.access.by_hash and st.access.token_seq == 0


def test_a_gateway_token_names_no_tenant():
    st = new_state()
    (reply,) = _apply(st, _create(name="gw", role="gateway", tenants=()))
    assert reply == TokenReply("t1") and st.access.tokens["t1"].tenants == ()


def test_a_secret_is_used_once():
    st = new_state()
    _apply(st, _create(name="a"))
    (reply,) = _apply(st, _create(name="b"))
    assert isinstance(reply, Rejected) and reply.code == Code.ALREADY_EXISTS


def test_snapshot_tables_round_trip_with_the_same_digest():
    st = new_state()
    _apply(st, _create(name="a", secret="x"), _create(name="w", role="worker", secret="y"),
           RevokeToken("rev", "t1"))
    tables = {name: iter(rows) for name, rows in state_codec.encode_tables(st).items()}
    back = state_codec.decode_tables(tables)
    assert back.access.tokens == st.access.tokens
    assert back.access.by_hash == st.access.by_hash and back.access.token_seq == 2
    assert digest(back) == digest(st)


def test_a_snapshot_without_the_access_table_still_loads():
    st = new_state()
    tables = {name: iter(rows) for name, rows in state_codec.encode_tables(st).items()
              if name != "access"}
    assert digest(state_codec.decode_tables(tables)) == digest(st)


def test_tokens_change_the_digest_only_once_used():
    empty = new_state()
    used = new_state()
    _apply(used, _create())
    assert digest(used) != digest(empty)


def test_tenants_create_update_and_quota():
    from gnomon.node.core.access import SetTenant, Tenant, TenantReply

    from ..node.harness import make_spec  # a valid job spec of a tenant

    st = new_state()
    (reply,) = _apply(st, SetTenant("t-1", Tenant("acme", weight=3, max_jobs=1), create=True))
    assert reply == TenantReply("acme") and st.access.tenants["acme"].created_ms == T0
    (dup,) = _apply(st, SetTenant("t-2", Tenant("acme"), create=True))
    assert isinstance(dup, Rejected) and dup.code == Code.ALREADY_EXISTS
    (missing,) = _apply(st, SetTenant("t-3", Tenant("globex")))
    assert isinstance(missing, Rejected) and missing.code == Code.NOT_FOUND
    (bad,) = _apply(st, SetTenant("t-4", Tenant("acme", weight=0)))
    assert isinstance(bad, Rejected) and "weight" in bad.detail
    first, second = (c.CreateJob(f"job-{i}", make_spec(f"j{i}", tenant="acme"), T0 + 60_000)
                     for i in (1, 2))
    ok, over = _apply(st, first, second)
    assert not isinstance(ok, Rejected)
    assert isinstance(over, Rejected) and over.code == Code.RESOURCE_EXHAUSTED
    (reply,) = _apply(st, SetTenant("t-5", Tenant("acme", weight=1, max_jobs=5)), now=T0 + 9)
    t = st.access.tenants["acme"]
    assert (t.weight, t.max_jobs, t.created_ms, t.updated_ms) == (1, 5, T0, T0 + 9)
    tables = {name: iter(rows) for name, rows in state_codec.encode_tables(st).items()}
    back = state_codec.decode_tables(tables)
    assert back.access.tenants == st.access.tenants and digest(back) == digest(st)


def test_payload_bytes_quota_counts_creates_updates_and_deletes():
    from gnomon.node.core.access import SetTenant, Tenant

    from ..node.harness import make_spec

    st = new_state()
    _apply(st, SetTenant("t", Tenant("acme", max_payload_bytes=10), create=True))
    (first,) = _apply(st, c.CreateJob("a", make_spec("a", payload=b"123456"), T0 + 60_000))
    assert not isinstance(first, Rejected) and st.access.payload_bytes["acme"] == 6
    (over,) = _apply(st, c.CreateJob("b", make_spec("b", payload=b"12345"), T0 + 60_000))
    assert isinstance(over, Rejected) and over.code == Code.RESOURCE_EXHAUSTED
    assert "max_payload_bytes" in over.detail
    (grow,) = _apply(st, c.UpdateJob("u", first.job_id, make_spec("a", payload=b"x" * 11),
                                     1, T0 + 60_000))
    assert isinstance(grow, Rejected) and grow.code == Code.RESOURCE_EXHAUSTED
    _apply(st, c.UpdateJob("u2", first.job_id, make_spec("a", payload=b"x" * 9), 1,
                           T0 + 60_000))
    assert st.access.payload_bytes["acme"] == 9
    tables = {name: iter(rows) for name, rows in state_codec.encode_tables(st).items()}
    assert state_codec.decode_tables(tables).access.payload_bytes == {"acme": 9}
    _apply(st, c.DeleteJob("d", first.job_id))
    assert "acme" not in st.access.payload_bytes


def _bounded(bound: int):
    import dataclasses

    from gnomon.node.core.model import Limits

    st = new_state()
    st.limits = dataclasses.replace(Limits(), max_tokens_per_tenant=bound)
    return st


def test_a_tenant_at_its_token_bound_is_refused_and_nothing_changes():
    st = _bounded(2)
    _apply(st, _create(secret="a"), _create(secret="b"), _create(tenants=("globex",), secret="g"))
    before = (dict(st.access.tokens), dict(st.access.by_hash), st.access.token_seq)
    (reply,) = _apply(st, _create(secret="c"))
    assert reply.code == Code.RESOURCE_EXHAUSTED
    assert "'acme' has 2 tokens, the most max_tokens_per_tenant (2)" in reply.detail
    assert (dict(st.access.tokens), dict(st.access.by_hash), st.access.token_seq) == before
    # Another tenant's room is its own.
    (reply,) = _apply(st, _create(tenants=("globex",), secret="g2"))
    assert reply == TokenReply("t4")


def test_at_the_bound_the_oldest_dead_token_of_the_tenant_is_forgotten():
    st = _bounded(2)
    _apply(st, _create(secret="a"), _create(secret="b", expires_ms=T0 + 10))
    _apply(st, RevokeToken("rev", "t1"))
    (reply,) = _apply(st, _create(secret="c"), now=T0 + 5)  # t1 revoked: forgotten
    assert reply == TokenReply("t3") and sorted(st.access.tokens) == ["t2", "t3"]
    assert _hash("a") not in st.access.by_hash
    (reply,) = _apply(st, _create(secret="d"), now=T0 + 20)  # t2 expired: forgotten
    assert reply == TokenReply("t4") and sorted(st.access.tokens) == ["t3", "t4"]


def test_a_multi_tenant_token_needs_room_in_every_tenant_and_cluster_tokens_count_apart():
    st = _bounded(1)
    _apply(st, _create(tenants=("globex",), secret="g"))
    (reply,) = _apply(st, _create(tenants=("acme", "globex"), secret="both"))
    assert reply.code == Code.RESOURCE_EXHAUSTED and "'globex'" in reply.detail
    assert sorted(st.access.tokens) == ["t1"]
    (reply,) = _apply(st, _create(role="admin", tenants=(), secret="root"))
    assert reply == TokenReply("t2")
    (reply,) = _apply(st, _create(role="admin", tenants=(), secret="root2"))
    assert reply.code == Code.RESOURCE_EXHAUSTED and "(cluster-wide)" in reply.detail
