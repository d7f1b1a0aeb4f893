"""Single-file LMDB snapshots: round trip, integrity, versioning."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from gnomon.node.storage import snapshot_file as snapmod
from gnomon.node.storage.snapshot_file import (
    FORMAT_VERSION,
    SnapshotError,
    SnapshotMeta,
    read_snapshot,
    write_snapshot,
)

META = SnapshotMeta(
    format_version=FORMAT_VERSION,
    raft_index=12345,
    state_digest="ab" * 32,
    written_ms=1_700_000_000_000,
    jobs=3,
    runs=100_000,
)
RAFT_DATA = b"\x80\x04pickled raft tuple" * 10


def records(table: str, n: int) -> list[tuple[bytes, bytes]]:
    rnd = random.Random(table)
    return [
        (b"%s:%08d" % (table.encode(), i), rnd.randbytes(rnd.randrange(0, 300))) for i in range(n)
    ]


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "snapshot.lmdb.tmp")


def test_round_trip_100k_records_in_several_tables(path: str) -> None:
    tables = {
        "jobs": records("jobs", 3),
        "runs": records("runs", 60_000),
        "dedupe": records("d", 40_000),
    }
    shuffled = {name: random.Random(1).sample(items, len(items)) for name, items in tables.items()}
    write_snapshot(path, META, RAFT_DATA, {k: iter(v) for k, v in shuffled.items()})
    with read_snapshot(path) as snap:
        assert snap.meta == META
        assert snap.raft_data == RAFT_DATA
        assert snap.tables == ["dedupe", "jobs", "runs"]
        for name, items in tables.items():
            assert list(snap.iter_table(name)) == sorted(items)
        with pytest.raises(KeyError):
            snap.iter_table("nope")


def test_one_file_and_no_lock_file_left(path: str, tmp_path: Path) -> None:
    write_snapshot(path, META, RAFT_DATA, {"runs": records("runs", 1000)})
    assert os.listdir(tmp_path) == [os.path.basename(path)]
    st = os.stat(path)
    assert st.st_size < 1 << 20  # not the 64 GiB map size
    read_snapshot(path).close()
    assert os.listdir(tmp_path) == [os.path.basename(path)]


def test_overwrites_a_leftover_file(path: str) -> None:
    write_snapshot(path, META, b"old", {"old": records("old", 500)})
    write_snapshot(path, META, b"new", {"new": records("new", 5)})
    with read_snapshot(path) as snap:
        assert snap.raft_data == b"new" and snap.tables == ["new"]


def test_empty_tables_and_no_tables(path: str) -> None:
    write_snapshot(path, META, b"", {"jobs": [], "runs": iter(())})
    with read_snapshot(path) as snap:
        assert snap.tables == ["jobs", "runs"]
        assert list(snap.iter_table("jobs")) == [] and list(snap.iter_table("runs")) == []
        assert snap.raft_data == b""
    write_snapshot(path, META, RAFT_DATA, {})
    with read_snapshot(path) as snap:
        assert snap.tables == [] and snap.raft_data == RAFT_DATA


def test_flipped_bytes_are_detected(path: str) -> None:
    write_snapshot(path, META, RAFT_DATA, {"runs": records("runs", 2000), "jobs": records("j", 10)})
    data = Path(path).read_bytes()
    rnd = random.Random(7)
    offsets = {0, 4096, len(data) - 1, len(data) - 40} | {
        rnd.randrange(len(data)) for _ in range(60)
    }
    for offset in sorted(offsets):
        bad = bytearray(data)
        bad[offset] ^= 1 << rnd.randrange(8)
        Path(path).write_bytes(bytes(bad))
        with pytest.raises(SnapshotError):
            read_snapshot(path).close()


def test_truncated_file_is_detected(path: str) -> None:
    write_snapshot(path, META, RAFT_DATA, {"runs": records("runs", 2000)})
    data = Path(path).read_bytes()
    for cut in (0, 10, 4096, len(data) // 2, len(data) - 1):
        Path(path).write_bytes(data[:cut])
        with pytest.raises(SnapshotError):
            read_snapshot(path).close()


def test_damage_is_caught_before_lmdb_reads_a_page(path: str, monkeypatch) -> None:
    """LMDB trusts its pages (a flipped byte can abort the process): the trailer's SHA-256
    over every byte is checked first, and it is the only integrity check needed."""
    write_snapshot(path, META, RAFT_DATA, {"runs": records("runs", 100)})
    data = bytearray(Path(path).read_bytes())
    data[len(data) // 3] ^= 0x01
    Path(path).write_bytes(bytes(data))

    def no_lmdb(*args, **kwargs):
        raise AssertionError("LMDB opened a damaged file")

    monkeypatch.setattr(snapmod.lmdb, "open", no_lmdb)
    with pytest.raises(SnapshotError, match="file digest mismatch"):
        read_snapshot(path)


def test_version_mismatch(path: str, monkeypatch) -> None:
    monkeypatch.setattr(snapmod, "FORMAT_VERSION", 7)
    write_snapshot(path, SnapshotMeta(7, 1, "", 0, 0, 0), b"", {})
    monkeypatch.undo()
    with pytest.raises(SnapshotError, match=f"format version 7, this build reads version "
                                            f"{FORMAT_VERSION}"):
        read_snapshot(path)


def test_write_returns_the_file_size(path: str) -> None:
    size = write_snapshot(path, META, RAFT_DATA, {"runs": records("runs", 10)})
    assert size == os.path.getsize(path)


def test_writer_rejects_wrong_meta_version(path: str) -> None:
    with pytest.raises(ValueError):
        write_snapshot(path, SnapshotMeta(99, 1, "", 0, 0, 0), b"", {})


def test_missing_file(path: str) -> None:
    with pytest.raises(SnapshotError, match="no snapshot file"):
        read_snapshot(path)
