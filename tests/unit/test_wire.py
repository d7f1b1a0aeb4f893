"""The Raft port's codec (node/raft/wire.py) and entry unpickling (node/raft/entries.py)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gnomon.node.raft import entries, wire

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 63) - 1)
    | st.floats(allow_nan=False) | st.binary(max_size=64) | st.text(max_size=32),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)


@given(values)
def test_round_trip(value):
    assert wire.decode(wire.encode(value)) == value


@settings(max_examples=500)
@given(st.binary(max_size=256))
def test_decode_is_total(data):
    """Any bytes decode to plain values or raise CodecError, never anything else."""
    try:
        wire.decode(data)
    except wire.CodecError:
        pass


def test_decode_refuses_deep_nesting_and_trailing_bytes():
    deep: object = 1
    for _ in range(wire.MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(wire.CodecError):
        wire.decode(wire.encode(deep))
    with pytest.raises(wire.CodecError):
        wire.decode(wire.encode(1) + b"\x00")


def test_a_length_beyond_the_input_allocates_nothing():
    with pytest.raises(wire.CodecError):
        wire.decode(bytes([0x06]) + (2**32 - 1).to_bytes(4, "big") + b"x")


def test_frame_reader_refuses_a_header_over_the_limit_before_its_body():
    reader = wire.FrameReader(limit=16)
    assert reader.feed(wire.frame(b"0123456789")) == [b"0123456789"]
    assert reader.feed(wire.PING) == [b""]
    with pytest.raises(wire.FrameTooLarge):
        reader.feed((2**31).to_bytes(4, "big"))
    assert reader.buffered == 0


def test_frames_split_anywhere_reassemble():
    data = b"".join(wire.frame(wire.encode({"i": i})) for i in range(5))
    reader = wire.FrameReader(limit=1 << 10)
    out = []
    for i in range(0, len(data), 3):
        out += reader.feed(data[i:i + 3])
    assert [wire.decode(p) for p in out] == [{"i": i} for i in range(5)]


@pytest.mark.parametrize("message", [
    {"type": "request_vote", "term": 3, "last_log_index": 10, "last_log_term": 2},
    {"type": "append_entries", "term": 3, "commit_index": 9, "prevLogIdx": 8,
     "prevLogTerm": 2, "entries": [(b"\x00cmd", 9, 3)]},
    {"type": "append_entries", "term": 3, "commit_index": 9, "serialized": (b"s", True, False)},
    {"type": "next_node_idx", "next_node_idx": 4, "reset": False, "success": True},
])
def test_pysyncobj_messages_pass_the_shape_check(message):
    assert wire.check_message(wire.decode(wire.encode(message))) == message


@pytest.mark.parametrize(("message", "named"), [
    ({"type": "request_vote", "term": "3", "last_log_index": 1, "last_log_term": 1},
     "request_vote.term"),
    ({"type": "append_entries", "term": 1, "commit_index": 0, "transmission": "start",
      "data": b"\x80\x02"}, "append_entries.transmission"),
    ({"type": "append_entries", "term": 1, "commit_index": 0, "entries": [(b"x", 1)]},
     "append_entries.entries"),
    ({"type": "shutdown"}, "unknown message type"),
    ([1, 2], "not a dict"),
])
def test_malformed_messages_are_refused_naming_the_field(message, named):
    with pytest.raises(wire.CodecError, match=named):
        wire.check_message(message)


def test_entries_unpickle_what_pysyncobj_writes():
    from pysyncobj import pickle as pysyncobj_pickle

    data = pysyncobj_pickle.dumps((0, (b"\x00\xffbatch bytes",), {}))
    assert entries.loads(data) == (0, (b"\x00\xffbatch bytes",), {})


def test_entries_refuse_globals(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    with pytest.raises(entries.EntryPickleError, match="no globals"):
        entries.loads(pickle.dumps((0, (Evil(),), {}), protocol=2))
    with pytest.raises(entries.EntryPickleError, match="codec"):
        entries.loads(b"\x80\x02c_codecs\nencode\nq\x00X\x01\x00\x00\x00xX\x04\x00\x00\x00zlib"
                      b"\x86Rq\x01.")
    assert not marker.exists()


def test_pysyncobj_is_patched_once_and_keeps_dumping():
    from pysyncobj import syncobj

    entries.restrict_pysyncobj_unpickling()
    entries.restrict_pysyncobj_unpickling()
    assert syncobj.pickle.loads is entries.loads
    assert syncobj.pickle.loads(syncobj.pickle.dumps((1, (b"x",), {}))) == (1, (b"x",), {})
