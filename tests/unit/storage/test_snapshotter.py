"""ForkSnapshotter: snapshots written by a forked child, renamed only once the history writer
caught up, failures and hangs bounded, received files verified before they replace ours."""

from __future__ import annotations

import logging
import os
import pickle
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from pysyncobj.config import SERIALIZER_STATE

from gnomon.node.raft.snapshotter import ForkSnapshotter
from gnomon.node.storage.snapshot_file import (
    FORMAT_VERSION,
    SnapshotError,
    SnapshotMeta,
    read_snapshot,
    write_snapshot,
)

LAST, BEFORE = (b"cmd-10", 10, 3), (b"cmd-9", 9, 3)
DATA = (None, LAST, BEFORE, {"n1", "n2"})
DATA_20 = (None, (b"cmd-20", 20, 3), (b"cmd-19", 19, 3), {"n1", "n2"})


@dataclass
class Loaded:
    path: str
    value: bytes
    raft_data: tuple

    @property
    def index(self) -> int:
        return self.raft_data[0][1]


class Host:
    """A replica stand-in: its state is one value; the child writes it as a snapshot."""

    def __init__(self) -> None:
        self.value = b"v1"
        self.delay_s = 0.0
        self.fail = False
        self.enqueued = 0
        self.written = 0
        self.incomplete: list[int] = []
        self.hold: int | None = None  # a pipe's read end: the child writes once a byte comes

    def write_snapshot(self, tmp_path: str, raft_data: tuple) -> dict:
        time.sleep(self.delay_s)
        if self.hold is not None:
            os.read(self.hold, 1)
        if self.fail:
            raise OSError(28, "No space left on device")
        meta = SnapshotMeta(FORMAT_VERSION, raft_data[0][1], "", 0, 1, 0)
        size = write_snapshot(tmp_path, meta, pickle.dumps(raft_data),
                              {"state": [(b"value", self.value)]})
        return {"index": raft_data[0][1], "jobs": 1, "runs": 0, "bytes": size}

    def read_snapshot(self, path: str) -> Loaded:
        with read_snapshot(path) as snap:
            (_, value), = snap.iter_table("state")
            return Loaded(path, value, pickle.loads(snap.raft_data))

    def history_mark(self) -> int:
        return self.enqueued

    def history_written(self, mark: int) -> bool:
        return self.written >= mark

    def history_incomplete(self, needs_index: int) -> None:
        self.incomplete.append(needs_index)


def crash(reason: str) -> None:
    raise AssertionError(f"crash: {reason}")


@pytest.fixture
def host() -> Host:
    return Host()


def make(tmp_path: Path, host: Host, name: str = "snapshot.lmdb", **kw) -> ForkSnapshotter:
    kw.setdefault("retry_s", 60.0)
    return ForkSnapshotter(str(tmp_path / name), host, crash=crash, **kw)


def finish(s: ForkSnapshotter, timeout_s: float = 30.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state, _ = s.checkSerializing()
        if state != SERIALIZER_STATE.SERIALIZING:
            return state
        time.sleep(0.01)
    raise AssertionError("the snapshot did not finish")


def test_child_writes_the_state_as_it_was_at_the_fork(tmp_path: Path, host: Host) -> None:
    s = make(tmp_path, host)
    host.delay_s = 0.3
    s.serialize(DATA, 9)
    host.value = b"changed after the fork"  # the parent goes on applying
    assert s.checkSerializing() == (SERIALIZER_STATE.SERIALIZING, 9)
    assert not (tmp_path / "snapshot.lmdb").exists()
    assert finish(s) == SERIALIZER_STATE.SUCCESS
    loaded = host.read_snapshot(str(tmp_path / "snapshot.lmdb"))
    assert loaded.value == b"v1" and loaded.raft_data == DATA[1:]
    assert s.checkSerializing() == (SERIALIZER_STATE.NOT_SERIALIZING, None)
    assert s.figures.index == 10 and s.figures.fork_ms > 0 and s.figures.bytes > 0
    assert os.listdir(tmp_path) == ["snapshot.lmdb"]


def test_success_waits_for_the_history_writer(tmp_path: Path, host: Host) -> None:
    """Runs evicted before the snapshot index must be stored before the journal forgets the
    entries that evicted them (pysyncobj deletes the prefix on SUCCESS)."""
    s = make(tmp_path, host)
    host.enqueued = 5
    host.written = 4
    s.serialize(DATA, 9)
    time.sleep(0.5)  # the child is long done
    for _ in range(5):
        assert s.checkSerializing()[0] == SERIALIZER_STATE.SERIALIZING
    assert not (tmp_path / "snapshot.lmdb").exists(), "renamed before the history was written"
    host.enqueued = 7  # handed over after the fork: not waited for
    host.written = 5
    assert s.checkSerializing() == (SERIALIZER_STATE.SUCCESS, 9)


def test_a_failed_child_reports_once_then_backs_off(tmp_path: Path, host: Host,
                                                   caplog) -> None:
    s = make(tmp_path, host, retry_s=0.5)
    host.fail = True
    with caplog.at_level(logging.WARNING, logger="gnomon.node.raft.snapshotter"):
        s.serialize(DATA, 9)
        assert finish(s) == SERIALIZER_STATE.FAILED
    assert "No space left on device" in caplog.text
    assert s.checkSerializing() == (SERIALIZER_STATE.NOT_SERIALIZING, None)
    s.serialize(DATA, 9)  # within retry_s: nothing starts
    assert s.checkSerializing() == (SERIALIZER_STATE.NOT_SERIALIZING, None)
    assert os.listdir(tmp_path) == []
    time.sleep(0.6)
    host.fail = False
    s.serialize(DATA, 9)
    assert finish(s) == SERIALIZER_STATE.SUCCESS
    assert s.figures.failed == 1 and s.figures.completed == 1


def test_a_hung_child_is_killed(tmp_path: Path, host: Host) -> None:
    s = make(tmp_path, host, child_timeout_s=0.3)
    host.delay_s = 30
    started = time.monotonic()
    s.serialize(DATA, 9)
    assert finish(s) == SERIALIZER_STATE.FAILED
    assert time.monotonic() - started < 20
    assert os.listdir(tmp_path) == []


def test_a_second_serialize_while_one_runs_is_ignored(tmp_path: Path, host: Host) -> None:
    s = make(tmp_path, host)
    host.delay_s = 0.2
    s.serialize(DATA, 9)
    child = s._child
    s.serialize((None, (b"x", 20, 3), (b"y", 19, 3), set()), 19)
    assert s._child is child
    assert finish(s) == SERIALIZER_STATE.SUCCESS


def test_leftovers_of_a_crashed_writer_are_removed(tmp_path: Path, host: Host) -> None:
    (tmp_path / "snapshot.lmdb").write_bytes(b"current")
    for name in ("snapshot.lmdb.123-10.tmp", "snapshot.lmdb.recv.tmp"):
        (tmp_path / name).write_bytes(b"partial")
    make(tmp_path, host)
    assert os.listdir(tmp_path) == ["snapshot.lmdb"]


# -- sending to and receiving from a follower ---------------------------------------------------


def transmit(leader: ForkSnapshotter, follower: ForkSnapshotter, damage=None) -> bool:
    accepted = False
    for _ in range(10_000):
        data = leader.getTransmissionData("n2")
        assert data is not None
        chunk, first, last = data
        if damage is not None and first:
            chunk = damage(chunk)
        accepted = follower.setTransmissionData((chunk, first, last))
        if last:
            return accepted
    raise AssertionError("transmission did not end")


def test_a_snapshot_goes_to_a_follower_chunk_by_chunk(tmp_path: Path, host: Host) -> None:
    (tmp_path / "a").mkdir()
    leader = make(tmp_path / "a", host, chunk_bytes=4096)
    leader.serialize(DATA, 9)
    assert finish(leader) == SERIALIZER_STATE.SUCCESS
    (tmp_path / "b").mkdir()
    follower_host = Host()
    follower = ForkSnapshotter(str(tmp_path / "b" / "snapshot.lmdb"), follower_host,
                               crash=crash)
    assert transmit(leader, follower)
    loaded = follower.take_received()
    assert loaded.value == b"v1" and loaded.index == 10
    assert follower.take_received() is None
    assert follower_host.incomplete == [10], "history not marked incomplete before install"
    assert (tmp_path / "b" / "snapshot.lmdb").read_bytes() == \
        (tmp_path / "a" / "snapshot.lmdb").read_bytes()


def test_a_damaged_snapshot_from_the_leader_is_discarded(tmp_path: Path, host: Host,
                                                        caplog) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    leader = make(tmp_path / "a", host, chunk_bytes=4096)
    leader.serialize(DATA, 9)
    assert finish(leader) == SERIALIZER_STATE.SUCCESS
    follower_host = Host()
    follower = ForkSnapshotter(str(tmp_path / "b" / "snapshot.lmdb"), follower_host,
                               crash=crash)
    (tmp_path / "b" / "snapshot.lmdb").write_bytes(b"the current one")

    def flip(chunk: bytes) -> bytes:
        return chunk[:100] + bytes([chunk[100] ^ 1]) + chunk[101:]

    with caplog.at_level(logging.ERROR, logger="gnomon.node.raft.snapshotter"):
        assert not transmit(leader, follower, damage=flip)
    assert "rejected" in caplog.text and "digest" in caplog.text
    assert (tmp_path / "b" / "snapshot.lmdb").read_bytes() == b"the current one"
    assert follower.take_received() is None and follower_host.incomplete == []
    assert os.listdir(tmp_path / "b") == ["snapshot.lmdb"]
    assert transmit(leader, follower), "the next, undamaged transmission is accepted"


def test_a_new_snapshot_restarts_transmissions_from_its_first_byte(tmp_path: Path,
                                                                  host: Host) -> None:
    s = make(tmp_path, host, chunk_bytes=4096)
    s.serialize(DATA, 9)
    assert finish(s) == SERIALIZER_STATE.SUCCESS
    first = s.getTransmissionData("n2")
    assert first is not None and first[1]
    s.serialize((None, (b"x", 20, 3), (b"y", 19, 3), set()), 19)
    assert finish(s) == SERIALIZER_STATE.SUCCESS
    again = s.getTransmissionData("n2")
    assert again is not None and again[1], "a transmission continued into another file"


def test_nothing_to_send_without_a_file(tmp_path: Path, host: Host) -> None:
    assert make(tmp_path, host).getTransmissionData("n2") is None


def test_a_receive_without_its_first_chunk_is_ignored(tmp_path: Path, host: Host) -> None:
    s = make(tmp_path, host)
    assert s.setTransmissionData(None) is False
    assert s.setTransmissionData((b"middle", False, True)) is False


def test_deserialize_reads_the_current_file(tmp_path: Path, host: Host) -> None:
    s = make(tmp_path, host)
    s.serialize(DATA, 9)
    assert finish(s) == SERIALIZER_STATE.SUCCESS
    assert s.deserialize() == DATA


def test_close_stops_a_running_child(tmp_path: Path, host: Host) -> None:
    s = make(tmp_path, host)
    host.delay_s = 30
    s.serialize(DATA, 9)
    pid = s._child.pid
    s.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    assert os.listdir(tmp_path) == []


def test_fork_with_another_thread_holding_a_lock(tmp_path: Path, host: Host) -> None:
    """The child never takes a lock another thread may hold at the fork (the replica lock is
    held by readers on the loop thread): it must finish anyway."""
    lock = threading.Lock()
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(5)
    try:
        s = make(tmp_path, host, child_timeout_s=20)
        s.serialize(DATA, 9)
        assert finish(s) == SERIALIZER_STATE.SUCCESS
    finally:
        release.set()
        t.join()


def test_read_errors_are_snapshot_errors(tmp_path: Path, host: Host) -> None:
    (tmp_path / "snapshot.lmdb").write_bytes(b"junk" * 100)
    with pytest.raises(SnapshotError):
        make(tmp_path, host).deserialize()


def test_a_failed_fork_backs_off_like_a_failed_child(tmp_path: Path, host: Host,
                                                    monkeypatch) -> None:
    s = make(tmp_path, host, retry_s=60)

    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    fds_before = len(os.listdir("/proc/self/fd"))
    s.serialize(DATA, 9)
    assert s.checkSerializing() == (SERIALIZER_STATE.NOT_SERIALIZING, None)
    assert s.figures.failed == 1 and len(os.listdir("/proc/self/fd")) == fds_before
    monkeypatch.undo()
    s.serialize(DATA, 9)  # still backing off
    assert s._child is None


# -- install order: a file is installed only if it is newer than the one in place ---------------


@pytest.fixture
def leader_at_20(tmp_path: Path) -> ForkSnapshotter:
    """A leader whose snapshot is at index 20 (ready to send)."""
    (tmp_path / "leader").mkdir()
    leader = make(tmp_path / "leader", Host(), chunk_bytes=4096)
    leader.serialize(DATA_20, 19)
    assert finish(leader) == SERIALIZER_STATE.SUCCESS
    return leader


def index_in_place(s: ForkSnapshotter) -> int:
    with read_snapshot(s.path) as snap:
        return snap.meta.raft_index


def test_a_child_that_finishes_after_the_leaders_snapshot_was_installed_is_dropped(
        tmp_path: Path, host: Host, leader_at_20: ForkSnapshotter, caplog) -> None:
    """Seen on a resumed follower: it forked at its old index, installed the leader's newer
    snapshot meanwhile, and the child's older file was renamed over it afterwards (the journal,
    already replaced by the leader's, then started after the file's last entry: the node could
    not start)."""
    hold_r, hold_w = os.pipe()
    host.hold = hold_r
    follower = make(tmp_path, host)
    try:
        follower.serialize(DATA, 9)  # the child blocks before writing
        assert follower.checkSerializing() == (SERIALIZER_STATE.SERIALIZING, 9)
        with caplog.at_level(logging.INFO, logger="gnomon.node.raft.snapshotter"):
            assert transmit(leader_at_20, follower)
            assert follower.take_received().index == 20
            os.write(hold_w, b"x")  # the child may finish now (if it still runs)
            state = finish(follower)
    finally:
        os.close(hold_r)
        os.close(hold_w)
    assert index_in_place(follower) == 20, "the older snapshot replaced the leader's"
    assert state == SERIALIZER_STATE.NOT_SERIALIZING, "pysyncobj told to compact to index 9"
    assert follower.installed_index == 20
    assert "snapshot at index 10 discarded" in caplog.text
    assert follower.figures.discarded == 1 and follower.figures.completed == 0
    assert sorted(os.listdir(tmp_path)) == ["leader", "snapshot.lmdb"], "the child's file stayed"


def test_a_finished_child_waiting_for_history_is_dropped_by_the_leaders_snapshot(
        tmp_path: Path, host: Host, leader_at_20: ForkSnapshotter) -> None:
    """The child wrote its file, the history writer had not caught up yet (step 3), and the
    leader's snapshot arrived: the child's file must not follow it into place."""
    host.enqueued, host.written = 5, 4
    follower = make(tmp_path, host)
    follower.serialize(DATA, 9)
    child = follower._child
    assert child is not None
    deadline = time.monotonic() + 30
    while child.report is None:  # the child has exited and was reaped
        assert follower.checkSerializing()[0] == SERIALIZER_STATE.SERIALIZING
        assert time.monotonic() < deadline, "the child did not finish"
        time.sleep(0.01)
    assert transmit(leader_at_20, follower)
    host.written = 5
    state = follower.checkSerializing()
    assert index_in_place(follower) == 20, "the older snapshot replaced the leader's"
    assert state == (SERIALIZER_STATE.NOT_SERIALIZING, None)
    assert sorted(os.listdir(tmp_path)) == ["leader", "snapshot.lmdb"]


def test_nothing_older_than_the_snapshot_in_place_is_written_or_installed(
        tmp_path: Path, host: Host, leader_at_20: ForkSnapshotter, caplog) -> None:
    follower = make(tmp_path, host)
    assert transmit(leader_at_20, follower)
    follower.take_received()
    follower.serialize(DATA_20, 19)  # pysyncobj, right after the install: the same state
    assert follower._child is None
    follower.serialize(DATA, 9)
    assert follower._child is None
    assert follower.checkSerializing() == (SERIALIZER_STATE.NOT_SERIALIZING, None)
    (tmp_path / "older").mkdir()
    older = make(tmp_path / "older", Host(), chunk_bytes=4096)
    older.serialize(DATA, 9)
    assert finish(older) == SERIALIZER_STATE.SUCCESS
    with caplog.at_level(logging.INFO, logger="gnomon.node.raft.snapshotter"):
        assert not transmit(older, follower), "an older snapshot from a leader was installed"
    assert "snapshot at index 10 sent by the leader discarded" in caplog.text
    assert follower.take_received() is None and host.incomplete == [20]
    assert index_in_place(follower) == 20
    assert sorted(os.listdir(tmp_path)) == ["leader", "older", "snapshot.lmdb"]
    follower.serialize((None, (b"cmd-21", 21, 3), (b"cmd-20", 20, 3), set()), 20)
    assert finish(follower) == SERIALIZER_STATE.SUCCESS, "a newer one is written as before"
    assert index_in_place(follower) == 21 == follower.installed_index
