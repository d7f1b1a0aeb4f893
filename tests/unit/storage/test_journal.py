"""DurableJournal: same semantics as pysyncobj's MemoryJournal, durable across reopen."""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pysyncobj.syncobj
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pysyncobj.journal import FileJournal, MemoryJournal

from gnomon.node.raft import journal as jmod
from gnomon.node.raft.journal import DurableJournal, JournalError, make_journal, patch_pysyncobj


def _raise(exc: BaseException) -> None:
    raise exc


def open_journal(path: Path | str, **kw) -> DurableJournal:
    kw.setdefault("on_fatal", _raise)
    return DurableJournal(str(path), **kw)


@pytest.fixture
def jpath(tmp_path: Path) -> Path:
    return tmp_path / "raft.journal"


def cmd(i: int, size: int = 40) -> bytes:
    return (b"%d:" % i) * (size // 3 + 1)


def fill(path: Path, n: int) -> list[tuple[bytes, int, int]]:
    j = open_journal(path)
    for i in range(1, n + 1):
        j.add(cmd(i), i, 1 + i // 3)
    entries = list(j[:])
    j.close()
    return entries


# -- equivalence with pysyncobj's MemoryJournal -------------------------------------------------

OPS = st.one_of(
    st.tuples(
        st.just("add"),
        st.binary(max_size=48),
        st.integers(0, 2**63 - 1),
        st.integers(0, 2**63 - 1),
    ),
    st.tuples(st.just("del_from"), st.integers(-4, 12)),
    st.tuples(st.just("del_to"), st.integers(-4, 12)),
    st.tuples(st.just("clear")),
    st.tuples(st.just("term"), st.integers(0, 10**6), st.one_of(st.none(), st.text(max_size=12))),
    st.tuples(st.just("reopen")),
)


def apply_op(j, op: tuple) -> None:
    name, *args = op
    if name == "add":
        j.add(*args)
    elif name == "del_from":
        j.deleteEntriesFrom(*args)
    elif name == "del_to":
        j.deleteEntriesTo(*args)
    elif name == "clear":
        j.clear()
    elif name == "term":
        j.setCurrentTerm(*args)


def assert_same(j: DurableJournal, m: MemoryJournal) -> None:
    assert len(j) == len(m)
    assert j[:] == m[:]
    if len(m):
        assert j[0] == m[0] and j[-1] == m[-1] and j[1:3] == m[1:3]
    assert j.getCurrentTerm() == m.getCurrentTerm()
    assert j.getVotedForNodeId() == m.getVotedForNodeId()


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(OPS, max_size=40), compact_min_bytes=st.sampled_from([0, 200, 1 << 20]))
def test_equivalent_to_memory_journal(ops: list[tuple], compact_min_bytes: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "j")
        j, m = open_journal(path, compact_min_bytes=compact_min_bytes), MemoryJournal()
        try:
            for op in ops:
                if op[0] == "reopen":
                    j.close()
                    j = open_journal(path, compact_min_bytes=compact_min_bytes)
                else:
                    apply_op(j, op)
                    apply_op(m, op)
                assert_same(j, m)
            j.close()
            j = open_journal(path)
            assert_same(j, m)
        finally:
            j.close()


# -- persistence --------------------------------------------------------------------------------


def test_reopen_gives_same_entries(jpath: Path) -> None:
    entries = fill(jpath, 50)
    j = open_journal(jpath)
    assert j[:] == entries
    j.deleteEntriesFrom(40)
    j.deleteEntriesTo(10)
    j.add(b"new", 41, 9)
    expected = list(j[:])
    j._destroy()
    j = open_journal(jpath)
    assert j[:] == expected and j[0][1] == 11 and j[-1] == (b"new", 41, 9)
    j.close()


def test_term_vote_and_commit_index_survive_reopen(jpath: Path) -> None:
    j = open_journal(jpath)
    assert (j.getCurrentTerm(), j.getVotedForNodeId(), j.getRaftCommitIndex()) == (0, None, 1)
    j.setRaftCommitIndex(7)
    j.setCurrentTerm(5, "10.0.0.1:4321")
    j.setRaftCommitIndex(9)
    j.close()
    j = open_journal(jpath)
    assert (j.getCurrentTerm(), j.getVotedForNodeId(), j.getRaftCommitIndex()) == (
        5,
        "10.0.0.1:4321",
        9,
    )
    j.setCurrentTerm(6, None)
    j.close()
    j = open_journal(jpath)
    assert (j.getCurrentTerm(), j.getVotedForNodeId()) == (6, None)
    j.close()


def trace_sync_calls(monkeypatch) -> list[tuple[str, str]]:
    """Record ("fsync", path) and ("replace", dst) calls made by the journal module."""
    calls: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        calls.append(("replace", dst))
        real_replace(src, dst)

    monkeypatch.setattr(jmod.os, "fsync", fsync)
    monkeypatch.setattr(jmod.os, "replace", replace)
    return calls


def test_add_is_fsynced_before_it_returns(jpath: Path, monkeypatch) -> None:
    j = open_journal(jpath)
    calls = trace_sync_calls(monkeypatch)
    j.add(b"x", 1, 1)
    assert calls == [("fsync", str(jpath))]
    j.close()


def test_deferred_adds_share_one_fsync_and_the_deferral_ends_with_it(
        jpath: Path, monkeypatch) -> None:
    j = open_journal(jpath)
    calls = trace_sync_calls(monkeypatch)
    j.defer_sync()
    for i in range(1, 4):
        j.add(b"x", i, 1)
    assert calls == []
    j.sync()
    assert calls == [("fsync", str(jpath))]
    assert (j.entries_added, j.fsyncs) == (3, 1)
    j.sync()  # nothing new: no fsync
    j.add(b"y", 4, 1)  # no longer deferred: fsynced before it returns
    assert calls == [("fsync", str(jpath))] * 2
    j.close()
    j = open_journal(jpath)
    assert [e[1] for e in j] == [1, 2, 3, 4]
    j.close()


def test_term_and_vote_are_durable_before_set_current_term_returns(
    jpath: Path, monkeypatch
) -> None:
    j = open_journal(jpath)
    calls = trace_sync_calls(monkeypatch)
    j.setCurrentTerm(3, "a:1")
    meta = str(jpath) + ".meta"
    assert calls == [("fsync", meta + ".tmp"), ("replace", meta), ("fsync", str(jpath.parent))]
    assert json.loads(Path(meta).read_bytes())["term"] == 3
    calls.clear()
    j.setCurrentTerm(3, "a:1")  # unchanged: nothing to write
    assert calls == []
    j.close()


def test_compaction_rewrites_file_with_live_entries_only(jpath: Path) -> None:
    j = open_journal(jpath, compact_min_bytes=4096)
    for i in range(1, 201):
        j.add(cmd(i, 100), i, 1)
    big = os.path.getsize(jpath)
    j.deleteEntriesTo(180)
    assert os.path.getsize(jpath) < big // 5
    live = list(j[:])
    j.add(b"after", 201, 2)
    j.close()
    j = open_journal(jpath)
    assert j[:] == [*live, (b"after", 201, 2)]
    j.close()


# -- torn and corrupt tails ---------------------------------------------------------------------


def torn_setup(jpath: Path) -> tuple[list, bytes, int]:
    entries = fill(jpath, 4)
    prefix_size = os.path.getsize(jpath)
    j = open_journal(jpath)
    j.add(cmd(5, 60), 5, 2)
    j.close()
    return entries, jpath.read_bytes(), prefix_size


def reopen_from(data: bytes, path: Path) -> DurableJournal:
    path.write_bytes(data)
    return open_journal(path)


def test_truncated_last_record_reopens_to_clean_prefix(jpath: Path, tmp_path: Path) -> None:
    entries, data, start = torn_setup(jpath)
    copy = tmp_path / "copy.journal"
    for cut in range(start, len(data)):
        j = reopen_from(data[:cut], copy)
        assert j[:] == entries, cut
        assert os.path.getsize(copy) == start
        j.add(b"next", 5, 3)
        j.close()
        j = open_journal(copy)
        assert j[:] == [*entries, (b"next", 5, 3)]
        j.close()


def test_flipped_byte_in_last_record_reopens_to_clean_prefix(jpath: Path, tmp_path: Path) -> None:
    entries, data, start = torn_setup(jpath)
    copy = tmp_path / "copy.journal"
    for offset in range(start, len(data)):
        bad = bytearray(data)
        bad[offset] ^= 0xFF
        j = reopen_from(bytes(bad), copy)
        assert j[:] == entries, offset
        j.close()


def test_corrupt_middle_record_refuses_to_open(jpath: Path) -> None:
    """A bad record with valid records after it is damage: cutting there would drop entries
    that were acknowledged (each was fsynced before its add returned)."""
    fill(jpath, 10)
    good = jpath.read_bytes()
    record = jmod._ENTRY_OVERHEAD + len(cmd(1))
    for offset in (3 * record + 20, 3 * record + 1, 8 * record + 2):  # payload, length, crc
        data = bytearray(good)
        data[len(jmod.MAGIC) + offset] ^= 1
        jpath.write_bytes(bytes(data))
        with pytest.raises(JournalError, match="valid records follow") as info:
            open_journal(jpath)
        assert str(jpath) in str(info.value)
        assert jpath.read_bytes() == bytes(data), "the file was changed"


def test_length_pointing_past_the_end_in_the_middle_is_damage(jpath: Path) -> None:
    fill(jpath, 10)
    data = bytearray(jpath.read_bytes())
    at = len(jmod.MAGIC) + 2 * (jmod._ENTRY_OVERHEAD + len(cmd(1)))
    data[at + 3] = 0x7F  # length ~2 GiB: looks like a torn tail, but records follow
    jpath.write_bytes(bytes(data))
    with pytest.raises(JournalError, match="valid records follow"):
        open_journal(jpath)


def test_reset_replaces_every_entry_atomically(jpath: Path) -> None:
    fill(jpath, 10)
    j = open_journal(jpath)
    j.reset([(b"a", 7, 2), (b"b", 8, 2)])
    j.add(b"c", 9, 3)
    j.close()
    j = open_journal(jpath)
    assert j[:] == [(b"a", 7, 2), (b"b", 8, 2), (b"c", 9, 3)]
    j.close()


def test_zero_filled_tail_is_dropped(jpath: Path) -> None:
    entries = fill(jpath, 3)
    with open(jpath, "ab") as f:
        f.write(b"\0" * 4096)  # file size extended by a crash before the data reached disk
    j = open_journal(jpath)
    assert j[:] == entries
    j.close()


# -- refusing what is not ours ------------------------------------------------------------------


def test_refuses_pysyncobj_file_journal(jpath: Path) -> None:
    fj = FileJournal(str(jpath))
    fj.add(b"x", 1, 1)
    fj._destroy()
    with pytest.raises(JournalError, match="not a gnomon journal"):
        open_journal(jpath)


def test_refuses_unreadable_meta(jpath: Path) -> None:
    Path(str(jpath) + ".meta").write_bytes(b"\x80\x02}q\x00.")  # pysyncobj's pickled meta
    with pytest.raises(JournalError, match="meta"):
        open_journal(jpath)


def test_second_open_is_refused_until_close(jpath: Path) -> None:
    j = open_journal(jpath)
    with pytest.raises(JournalError, match="already open"):
        open_journal(jpath)
    j.close()
    open_journal(jpath).close()


def test_fsync_failure_is_fatal_and_poisons(jpath: Path, monkeypatch) -> None:
    fatal: list[BaseException] = []
    j = DurableJournal(str(jpath), on_fatal=fatal.append)
    j.add(b"ok", 1, 1)

    def broken_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(jmod.os, "fsync", broken_fsync)
    with pytest.raises(JournalError):
        j.add(b"lost", 2, 1)
    assert len(fatal) == 1 and j[:] == [(b"ok", 1, 1)]
    monkeypatch.undo()
    with pytest.raises(JournalError, match="failed earlier"):
        j.add(b"again", 2, 1)
    j.close()
    assert "Fix the disk" in str(fatal[0])


@pytest.mark.parametrize(("code", "says"), [
    (errno.EMFILE, "this process is at its open-file limit (RLIMIT_NOFILE soft"),
    (errno.ENFILE, "the system is out of open files"),
])
def test_out_of_descriptors_is_named_not_the_disk(jpath: Path, monkeypatch, code, says) -> None:
    """The meta file is rewritten through a new temporary file: at the open-file limit that
    open fails with EMFILE, and the message says so rather than sending the operator to the
    disk."""
    fatal: list[BaseException] = []
    j = DurableJournal(str(jpath), on_fatal=fatal.append)

    def no_descriptor(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(jmod, "write_file_atomically", no_descriptor)
    with pytest.raises(JournalError):
        j.setCurrentTerm(7, None)
    message = str(fatal[0])
    assert "too many open files" in message and says in message
    assert "Fix the disk" not in message and "is not the cause" in message
    monkeypatch.undo()
    j.close()


# -- wiring into pysyncobj ----------------------------------------------------------------------


@pytest.fixture
def restore_create_journal(monkeypatch) -> Iterator[None]:
    monkeypatch.setattr(pysyncobj.syncobj, "createJournal", pysyncobj.syncobj.createJournal)
    yield


def test_patch_pysyncobj(jpath: Path, restore_create_journal: None) -> None:
    patch_pysyncobj(compact_min_bytes=1)
    assert isinstance(pysyncobj.syncobj.createJournal(None), MemoryJournal)
    j = pysyncobj.syncobj.createJournal(str(jpath))
    assert isinstance(j, DurableJournal) and j._compact_min_bytes == 1
    j.close()
    assert isinstance(make_journal(None), MemoryJournal)
