"""Replica and HistorySink: an exception in or after apply stops the node (never a retry),
history writes are retried then fatal, readable while pending, and snapshots round-trip."""

from __future__ import annotations

import errno
import pickle
import threading
from pathlib import Path

import pytest

from gnomon.node import codec
from gnomon.node import replica as replica_mod
from gnomon.node.core import commands as c
from gnomon.node.core import digest
from gnomon.node.core.model import JobSpec, Schedule, TaskSpec
from gnomon.node.replica import Replica
from gnomon.node.storage.history import HistoryStore
from gnomon.node.storage.history_sink import HistorySink
from gnomon.node.storage.snapshot_file import SnapshotError
from gnomon.node.storage.state_codec import decode_run

SPEC = JobSpec(tenant="t", name="j", schedule=Schedule(kind="once", at_ms=1 << 50),
               tasks=(TaskSpec(name="main"),))


class Crashed(Exception):
    pass


class Crashes(list):
    def __call__(self, reason: str) -> None:
        self.append(reason)
        raise Crashed(reason)


@pytest.fixture
def crashes() -> Crashes:
    return Crashes()


@pytest.fixture
def store(tmp_path: Path):
    s = HistoryStore(str(tmp_path / "history"), map_size=64 << 20)
    yield s


@pytest.fixture
def replica(store: HistoryStore, crashes: Crashes):
    sink = HistorySink(store, crash=crashes, retry_backoff_ms=1)
    r = Replica(sink, crash=crashes)
    yield r
    sink.close()


def entry(*commands, now_ms: int = 1_000) -> bytes:
    return codec.batch_to_bytes(c.Batch(now_ms=now_ms, commands=tuple(commands)))


def evicting_entries(job_id: str = "j1") -> list[bytes]:
    """A job, then runs triggered and cancelled past the retention bound (evictions)."""
    out = [entry(c.SetLimits("l", _limits(runs_retained_per_job=1))),
           entry(c.CreateJob("c", SPEC, 1 << 50))]
    for i in range(4):
        out.append(entry(c.TriggerJob(f"t{i}", job_id)))
        out.append(entry(c.CancelRun(f"x{i}", f"{job_id}@manual-{i + 1}", "test")))
    return out


def _limits(**kw):
    from gnomon.node.core.model import Limits

    return Limits(**kw)


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt(), SystemExit(3)])
def test_an_exception_in_apply_stops_the_node(replica: Replica, crashes: Crashes,
                                              monkeypatch, exc: BaseException) -> None:
    def broken(state, batch):
        raise exc

    monkeypatch.setattr(replica_mod, "apply_batch", broken)
    with pytest.raises(Crashed):
        replica.apply_entry(entry(c.Barrier()))
    assert len(crashes) == 1 and crashes[0].startswith("applying the entry failed")


def test_an_exception_in_a_listener_stops_the_node(replica: Replica, crashes: Crashes) -> None:
    calls = []

    def listener(batch, replies, effects):
        calls.append(batch)
        raise ValueError("listener bug")

    replica.add_listener(listener)
    with pytest.raises(Crashed):
        replica.apply_entry(entry(c.Barrier()))
    assert crashes == ["notifying listeners after apply failed: ValueError('listener bug')"]
    assert replica.applied_entries == 1 and len(calls) == 1


def test_an_exception_handing_runs_to_the_history_stops_the_node(
        replica: Replica, crashes: Crashes, monkeypatch) -> None:
    def broken(runs):
        raise MemoryError()

    monkeypatch.setattr(replica.history, "put", broken)
    with pytest.raises(Crashed):
        for data in evicting_entries():
            replica.apply_entry(data)
    assert crashes[0].startswith("handing evicted runs to the history store failed")


def test_an_undecodable_entry_stops_the_node(replica: Replica, crashes: Crashes) -> None:
    with pytest.raises(Crashed):
        replica.apply_entry(b"\xff\xff not a batch")
    assert crashes[0].startswith("decoding the entry failed")


# -- history sink ---------------------------------------------------------------------------------


def test_evicted_runs_reach_the_store(replica: Replica, store: HistoryStore) -> None:
    for data in evicting_entries():
        replica.apply_entry(data)
    assert replica.history.flush(10)
    assert {r[2] for r in store.iter_all()} == {"j1@manual-1", "j1@manual-2", "j1@manual-3"}
    assert replica.history.written(replica.history.mark())


def test_transient_write_errors_are_retried(store: HistoryStore, crashes: Crashes,
                                            monkeypatch) -> None:
    failures = [2]
    original = store.put_runs

    def flaky(records):
        if failures[0]:
            failures[0] -= 1
            raise OSError(errno.EIO, "disk hiccup")
        return original(records)

    monkeypatch.setattr(store, "put_runs", flaky)
    sink = HistorySink(store, crash=crashes, write_attempts=3, retry_backoff_ms=1)
    r = Replica(sink, crash=crashes)
    for data in evicting_entries():
        r.apply_entry(data)
    assert sink.flush(10)
    assert crashes == [] and len(list(store.iter_all())) == 3
    sink.close()


def test_a_write_that_keeps_failing_stops_the_node(store: HistoryStore, monkeypatch) -> None:
    stopped = threading.Event()
    reasons: list[str] = []

    def crash(reason: str) -> None:
        reasons.append(reason)
        stopped.set()

    def broken(records):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store, "put_runs", broken)
    sink = HistorySink(store, crash=crash, write_attempts=3, retry_backoff_ms=1)
    r = Replica(sink, crash=crash)
    for data in evicting_entries():
        r.apply_entry(data)
    assert stopped.wait(10)
    assert store.path in reasons[0] and "failed 3 times" in reasons[0]
    assert "No space left on device" in reasons[0]
    mark = sink.mark()
    assert not sink.written(mark), "a failed write must not count as written"
    assert sink.get("j1@manual-1") is not None, "still readable while not written"


def test_pending_runs_are_listed_without_waiting_for_the_writer(store: HistoryStore,
                                                               crashes: Crashes,
                                                               monkeypatch) -> None:
    gate = threading.Event()
    gate.set()
    original = store.put_runs

    def gated(records):
        gate.wait(10)
        return original(records)

    monkeypatch.setattr(store, "put_runs", gated)
    sink = HistorySink(store, crash=crashes)
    r = Replica(sink, crash=crashes)
    entries = evicting_entries()
    for data in entries[:6]:  # evicts manual-1
        r.apply_entry(data)
    assert sink.flush(10)
    gate.clear()  # the writer stalls: manual-2 and manual-3 stay pending
    for data in entries[6:]:
        r.apply_entry(data)
    listed = [decode_run(d).run_id for d in sink.list("j1", before_ms=0, limit=10)]
    assert sorted(listed) == ["j1@manual-1", "j1@manual-2", "j1@manual-3"]
    assert sink.get("j1@manual-3") is not None
    assert not sink.written(sink.mark())
    gate.set()
    assert sink.flush(10) and sink.written(sink.mark())
    sink.close()


# -- snapshots -----------------------------------------------------------------------------------


def test_snapshot_round_trip_with_the_state_digest(replica: Replica, tmp_path: Path,
                                                   crashes: Crashes) -> None:
    replica._digest_snapshots = True
    for data in evicting_entries():
        replica.apply_entry(data)
    raft_data = ((b"e10", 10, 2), (b"e9", 9, 2), set())
    path = str(tmp_path / "snap")
    figures = replica.write_snapshot(path, raft_data)
    assert figures["index"] == 10 and figures["jobs"] == 1 and figures["bytes"] > 0
    loaded = replica.read_snapshot(path)
    assert digest(loaded.state) == digest(replica.state)
    assert loaded.raft_data == raft_data and loaded.index == 10
    assert loaded.meta.state_digest == digest(replica.state)


def test_snapshot_without_digest_by_default(replica: Replica, tmp_path: Path) -> None:
    replica.apply_entry(entry(c.CreateJob("c", SPEC, 1 << 50)))
    path = str(tmp_path / "snap")
    replica.write_snapshot(path, ((b"e2", 2, 1), (b"e1", 1, 1), set()))
    assert replica.read_snapshot(path).meta.state_digest == ""


def test_undecodable_snapshot_content_is_a_snapshot_error(replica: Replica,
                                                          tmp_path: Path) -> None:
    from gnomon.node.storage.snapshot_file import FORMAT_VERSION, SnapshotMeta, write_snapshot

    path = str(tmp_path / "snap")
    write_snapshot(path, SnapshotMeta(FORMAT_VERSION, 2, "", 0, 0, 0),
                   pickle.dumps(((b"", 2, 1), (b"", 1, 1), set())),
                   {"jobs": [(b"\x00" * 8 + b"j1", b"\xff\xff garbage")]})
    with pytest.raises(SnapshotError, match="cannot decode"):
        replica.read_snapshot(path)


def test_a_new_history_store_beside_a_snapshot_is_incomplete(tmp_path: Path,
                                                             crashes: Crashes) -> None:
    first = HistorySink(HistoryStore(str(tmp_path / "h1"), map_size=64 << 20), crash=crashes)
    r = Replica(first, crash=crashes)
    r.apply_entry(entry(c.CreateJob("c", SPEC, 1 << 50)))
    r.write_snapshot(str(tmp_path / "snap"), ((b"e7", 7, 1), (b"e6", 6, 1), set()))
    loaded = r.read_snapshot(str(tmp_path / "snap"))
    first.close()
    reopened = HistorySink(HistoryStore(str(tmp_path / "h1"), map_size=64 << 20),
                           crash=crashes)
    Replica(reopened, crash=crashes).restored(loaded)
    assert reopened.store.backfill() is None, "an existing store stays complete"
    reopened.close()
    fresh = HistorySink(HistoryStore(str(tmp_path / "h2"), map_size=64 << 20), crash=crashes)
    r2 = Replica(fresh, crash=crashes)
    r2.restored(loaded)
    assert fresh.store.backfill().needs_index == 7
    assert len(r2.state.jobs) == 1
    fresh.close()
