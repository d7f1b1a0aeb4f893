"""Opening storage: the journal is aligned to the snapshot it continues (the tail after the
snapshot is kept), and a snapshot and journal that do not fit together refuse to start."""

from __future__ import annotations

from pathlib import Path

import pytest

from gnomon.node.raft.journal import DurableJournal
from gnomon.node.raft.startup import StorageError, align_journal, check_files


def _raise(exc: BaseException) -> None:
    raise exc


def e(idx: int, term: int = 1) -> tuple[bytes, int, int]:
    return (b"cmd-%d" % idx, idx, term)


@pytest.fixture
def journal(tmp_path: Path):
    j = DurableJournal(str(tmp_path / "raft.journal"), on_fatal=_raise)
    yield j
    j.close()


def fill(j: DurableJournal, first: int, last: int, term: int = 1) -> None:
    for i in range(first, last + 1):
        j.add(*e(i, term))


def align(j: DurableJournal, index: int | None, term: int = 1) -> None:
    last = e(index, term) if index is not None else None
    before = e(index - 1, term) if index is not None else None
    align_journal(j, last=last, before=before, snapshot_path="/d/snapshot.lmdb")


def indexes(j: DurableJournal) -> list[int]:
    return [entry[1] for entry in j[:]]


def reopened(j: DurableJournal) -> list[int]:
    j.close()
    again = DurableJournal(j.path, on_fatal=_raise)
    try:
        return indexes(again)
    finally:
        again.close()


def test_compacted_journal_is_left_as_it_is(journal: DurableJournal) -> None:
    fill(journal, 9, 14)
    align(journal, 10)
    assert indexes(journal) == [9, 10, 11, 12, 13, 14]


def test_crash_before_compaction_keeps_the_tail(journal: DurableJournal) -> None:
    """pysyncobj would clear the journal here, dropping 11..14 (acknowledged entries)."""
    fill(journal, 1, 14)
    align(journal, 10)
    assert indexes(journal) == [9, 10, 11, 12, 13, 14]
    assert reopened(journal) == [9, 10, 11, 12, 13, 14]


def test_journal_starting_at_the_snapshot_entry_is_rebuilt_with_its_tail(
        journal: DurableJournal) -> None:
    fill(journal, 10, 12)
    align(journal, 10)
    assert indexes(journal) == [9, 10, 11, 12]
    assert reopened(journal) == [9, 10, 11, 12]


def test_journal_older_than_the_snapshot_restarts_from_it(journal: DurableJournal) -> None:
    fill(journal, 1, 6)
    align(journal, 10)
    assert indexes(journal) == [9, 10]


def test_other_entry_at_the_snapshot_index_restarts_from_it(journal: DurableJournal) -> None:
    """Log matching: another term at index 10 means the tail is not the snapshot's history."""
    fill(journal, 1, 14, term=1)
    align(journal, 10, term=2)
    assert indexes(journal) == [9, 10] and journal[-1][2] == 2


def test_empty_journal_gets_the_snapshot_entries(journal: DurableJournal) -> None:
    align(journal, 10)
    assert indexes(journal) == [9, 10]


def test_gap_between_snapshot_and_journal_refuses(journal: DurableJournal) -> None:
    fill(journal, 15, 20)
    with pytest.raises(StorageError, match=r"entries 11\.\.14 are missing") as info:
        align(journal, 10)
    assert journal.path in str(info.value) and "snapshot.lmdb" in str(info.value)


def test_compacted_journal_without_snapshot_refuses(journal: DurableJournal) -> None:
    fill(journal, 9, 12)
    with pytest.raises(StorageError, match="missing, but the journal"):
        align(journal, None)


def test_fresh_journal_without_snapshot_is_fine(journal: DurableJournal) -> None:
    fill(journal, 1, 3)
    align(journal, None)
    assert indexes(journal) == [1, 2, 3]


def test_snapshot_without_journal_refuses(tmp_path: Path) -> None:
    (tmp_path / "snapshot.lmdb").write_bytes(b"x")
    with pytest.raises(StorageError, match="raft.journal: missing"):
        check_files(str(tmp_path / "snapshot.lmdb"), str(tmp_path / "raft.journal"))
    (tmp_path / "raft.journal").write_bytes(b"")
    check_files(str(tmp_path / "snapshot.lmdb"), str(tmp_path / "raft.journal"))
