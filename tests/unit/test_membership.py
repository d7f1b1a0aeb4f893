"""node/raft/membership.py: the entry form (plain strings, readable without globals), the member
file a restarted node starts from, and the refusal of a removed node's data directory."""

from __future__ import annotations

import dataclasses

import pytest

from gnomon.node.config import Config, ConfigError, Member
from gnomon.node.raft import entries
from gnomon.node.raft.membership import (
    ADD,
    REMOVE,
    Membership,
    decode_change,
    encode_change,
    from_records,
    load_members,
    to_records,
)

N1 = Member("n1", "127.0.0.1:7001", "127.0.0.1:8001")
N2 = Member("n2", "127.0.0.1:7002", "127.0.0.1:8002", "127.0.0.1:9002")
N3 = Member("n3", "127.0.0.1:7003", "127.0.0.1:8003")


def test_an_entry_holds_plain_strings_that_decode_without_globals():
    for kind in (ADD, REMOVE):
        body = entries.loads(encode_change(kind, N2))
        assert decode_change(body) == (kind, N2)


def test_pysyncobj_shapes_and_garbage_are_not_changes():
    assert decode_change(["add", "127.0.0.1:7002"]) is None
    assert decode_change(["add", "n2", "a", "b", 5]) is None
    assert decode_change(("add", "n2", "a", "b", "c")) is None
    assert decode_change(["swap", "n2", "a", "b", "c"]) is None


def test_records_round_trip_and_an_old_node_set_is_not_records():
    records = to_records([N3, N1, N2])
    assert [r[0] for r in records] == ["n1", "n2", "n3"]
    assert from_records(records) == (N1, N2, N3)
    assert from_records({object()}) is None
    assert from_records(()) is None


def _config(tmp_path, *members: Member, node_id: str = "n1") -> Config:
    return Config(node_id=node_id, members=members, data_dir=str(tmp_path))


def test_a_restart_takes_the_members_of_its_file_over_the_flags(tmp_path):
    assert load_members(_config(tmp_path, N1, N2)) == (N1, N2)  # no file yet: the flags
    m = Membership(str(tmp_path), "n1", [N1, N2])
    m.add(N3)
    assert load_members(_config(tmp_path, N1, N2)) == (N1, N2, N3)
    m.remove("n2")
    assert load_members(_config(tmp_path, N1, N2)) == (N1, N3)


def test_a_removed_node_refuses_its_data_directory(tmp_path):
    Membership(str(tmp_path), "n2", [N1, N3]).save()
    with pytest.raises(ConfigError, match="node_id: 'n2' was removed from the cluster"):
        load_members(_config(tmp_path, N1, N2, N3, node_id="n2"))


def test_a_joining_node_writes_no_file(tmp_path):
    m = Membership(str(tmp_path), "n3", [N1, N2, N3])
    m.joining = True
    m.replace([N1, N2])  # the leader's snapshot from before the add
    assert not (tmp_path / "members.json").exists()
    m.joining = False
    m.add(N3)
    assert load_members(dataclasses.replace(_config(tmp_path, N3), node_id="n3")) == (N1, N2, N3)


def test_a_damaged_file_names_itself(tmp_path):
    (tmp_path / "members.json").write_text("{not json")
    with pytest.raises(ConfigError, match="members: .*members.json cannot be read"):
        load_members(_config(tmp_path, N1))
