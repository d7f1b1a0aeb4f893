"""HistoryStore: ordering, pagination, idempotence, per-job cap, persistence."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gnomon.node.storage.history import Backfill, HistoryStore


def rec(job: str, ms: int) -> tuple[str, int, str, bytes]:
    run_id = f"{job}@{ms}"
    return job, ms, run_id, f"run {run_id}".encode()


def enc(job: str, ms: int) -> bytes:
    return rec(job, ms)[3]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[HistoryStore]:
    s = HistoryStore(str(tmp_path / "history"), map_size=64 << 20)
    yield s
    s.close()


def test_put_get_and_newest_first(store: HistoryStore) -> None:
    store.put_runs([rec("a", 300), rec("a", 100), rec("b", 200), rec("a", 200)])
    assert store.get_run("a@100") == enc("a", 100)
    assert store.get_run("missing") is None
    assert store.list_runs("a") == [enc("a", 300), enc("a", 200), enc("a", 100)]
    assert store.list_runs("b") == [enc("b", 200)]
    assert store.list_runs("c") == []


def test_same_ms_orders_by_run_id_descending(store: HistoryStore) -> None:
    store.put_runs([("j", 5, "j@5:x", b"x"), ("j", 5, "j@5:y", b"y"), ("j", 6, "j@6", b"z")])
    assert store.list_runs("j") == [b"z", b"y", b"x"]


def test_job_ids_that_prefix_each_other_do_not_mix(store: HistoryStore) -> None:
    store.put_runs([rec("job", 1), rec("job1", 2), rec("jo", 3), rec("job\x00", 4)])
    assert store.list_runs("job") == [enc("job", 1)]
    assert store.list_runs("jo") == [enc("jo", 3)]
    assert store.list_runs("job1") == [enc("job1", 2)]


def test_pagination_with_before_ms(store: HistoryStore) -> None:
    store.put_runs([rec("a", ms) for ms in range(10, 200, 10)] + [rec("b", 5), rec("Z", 500)])
    pages, before = [], 0
    while page := store.list_runs("a", before_ms=before, limit=7):
        pages.append(page)
        before = int(page[-1].decode().rsplit("@", 1)[1])
    assert [len(p) for p in pages] == [7, 7, 5]
    assert sum(pages, []) == [enc("a", ms) for ms in range(190, 0, -10)]
    assert store.list_runs("a", before_ms=100, limit=2) == [enc("a", 90), enc("a", 80)]
    assert store.list_runs("a", before_ms=10) == []
    assert store.list_runs("a", before_ms=10**15, limit=1) == [enc("a", 190)]


def test_re_put_is_idempotent(store: HistoryStore) -> None:
    store.put_runs([rec("a", 1), rec("a", 2)])
    store.put_runs([rec("a", 1), rec("a", 2), rec("a", 1)])
    assert store.list_runs("a") == [enc("a", 2), enc("a", 1)]
    assert len(list(store.iter_all())) == 2
    store.put_runs([("a", 1, "a@1", b"updated")])
    assert store.get_run("a@1") == b"updated"
    assert store.list_runs("a") == [enc("a", 2), b"updated"]


def test_per_job_cap_drops_oldest(tmp_path: Path) -> None:
    store = HistoryStore(str(tmp_path / "h"), map_size=64 << 20, max_runs_per_job=3)
    try:
        store.put_runs([rec("a", ms) for ms in (5, 1, 4, 2, 3)] + [rec("b", 1)])
        assert store.list_runs("a") == [enc("a", 5), enc("a", 4), enc("a", 3)]
        assert store.get_run("a@1") is None and store.get_run("a@2") is None
        store.put_runs([rec("a", 0)])  # older than all kept: dropped at once
        assert store.list_runs("a") == [enc("a", 5), enc("a", 4), enc("a", 3)]
        store.put_runs([rec("a", 6), rec("a", 5)])
        assert store.list_runs("a") == [enc("a", 6), enc("a", 5), enc("a", 4)]
        assert store.list_runs("b") == [enc("b", 1)]
        assert sorted(r[2] for r in store.iter_all()) == ["a@4", "a@5", "a@6", "b@1"]
    finally:
        store.close()


def test_reopen_persists(tmp_path: Path) -> None:
    path = str(tmp_path / "h")
    store = HistoryStore(path, map_size=64 << 20)
    records = [rec("a", 1), rec("b", 2), rec("a", 3)]
    store.put_runs(records)
    store.close()
    store = HistoryStore(path, map_size=64 << 20)
    try:
        assert sorted(store.iter_all()) == sorted(records)
        assert store.list_runs("a") == [enc("a", 3), enc("a", 1)]
    finally:
        store.close()


def test_reader_thread_sees_whole_batches(store: HistoryStore) -> None:
    """A reader on another thread sees each put_runs batch entirely or not at all."""
    batches, batch_size = 50, 20
    errors: list[str] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            n = len(store.list_runs("a", limit=10**6))
            if n % batch_size:
                errors.append(f"partial batch visible: {n}")

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for b in range(batches):
            store.put_runs(rec("a", b * batch_size + i) for i in range(batch_size))
    finally:
        done.set()
        reader.join()
    assert errors == []
    assert len(store.list_runs("a", limit=10**6)) == batches * batch_size


def test_rejects_negative_time(store: HistoryStore) -> None:
    with pytest.raises(ValueError):
        store.put_runs([("a", -1, "a@-1", b"")])


# -- completeness and backfill ------------------------------------------------------------------


def test_new_store_is_complete_and_says_it_was_created(tmp_path: Path) -> None:
    path = str(tmp_path / "h")
    store = HistoryStore(path, map_size=64 << 20)
    assert store.created and store.backfill() is None
    store.close()
    store = HistoryStore(path, map_size=64 << 20)
    assert not store.created
    store.close()


def test_backfill_marker_survives_reopen_and_keeps_the_larger_index(tmp_path: Path) -> None:
    path = str(tmp_path / "h")
    store = HistoryStore(path, map_size=64 << 20)
    store.mark_incomplete(40)
    store.import_page([rec("a", 1)], "a@1")
    store.mark_incomplete(30)  # an older snapshot asks for less: keep 40, restart the copy
    store.close()
    store = HistoryStore(path, map_size=64 << 20)
    try:
        assert store.backfill() == Backfill(40, "")
        store.import_page([rec("a", 2)], "a@2")
        assert store.backfill() == Backfill(40, "a@2")
        assert not store.mark_complete(39), "a newer snapshot asks for more"
        assert store.mark_complete(40) and store.backfill() is None
        assert store.mark_complete(40)
        assert store.get_run("a@1") == enc("a", 1)
    finally:
        store.close()


def test_pages_in_run_id_order_with_resume_point(store: HistoryStore) -> None:
    records = [rec("a", ms) for ms in range(1, 26)]
    store.put_runs(records)
    got, after, pages = [], "", 0
    while True:
        page, more = store.page(after, limit=10, max_bytes=1 << 20)
        got += page
        pages += 1
        if not more:
            break
        after = page[-1][2]
    assert pages == 3 and got == sorted(records, key=lambda r: r[2])


def test_pages_are_bounded_in_bytes(store: HistoryStore) -> None:
    store.put_runs([("a", i, f"a@{i:03d}", b"x" * 1000) for i in range(10)])
    page, more = store.page("", limit=100, max_bytes=2500)
    assert len(page) == 3 and more
    page, more = store.page("a@009", limit=100, max_bytes=10)
    assert page == [] and not more
