"""Storage faults against real node processes: a damaged snapshot or journal, an exception in or
after apply, a failing history store, a full disk, a slow snapshot write or load, a crash
between a snapshot and the journal compaction. Never an empty, half-applied or shortened state.

Faults inside a node are injected by a `sitecustomize` module on the node's PYTHONPATH (written
by the `faults` fixture): it reads STORAGE_TEST_FAULTS (JSON: node id -> faults) and patches
the named function in that node only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import grpc
import pytest

from gnomon.node.raft.startup import EXIT_STORAGE
from gnomon.node.storage import snapshot_file as snapmod
from gnomon.v1 import api_pb2
from tests.support.cluster import LocalCluster, NodeProc, wait_for
from tests.support.jobs import create_jobs, finished_runs, once_job
from tests.support.metrics import samples, scrape

pytestmark = pytest.mark.integration

COMPACT_OFTEN = {"snapshot_min_entries": "20", "snapshot_min_time_s": "0.5"}
NEVER_COMPACT = {"snapshot_min_entries": "1000000", "snapshot_min_time_s": "100000"}
FAR = 4_102_444_800_000  # 2100-01-01: the jobs below never fire on their own

SITECUSTOMIZE = r'''
import json, os, sys, time

def _node_id():
    for i, arg in enumerate(sys.argv[:-1]):
        if arg == "--node-id":
            return sys.argv[i + 1]
    return None

_FAULTS = json.loads(os.environ.get("STORAGE_TEST_FAULTS", "{}")).get(_node_id() or "", {})

def _install(faults):
    import errno
    if "listener_raise_on" in faults:
        from gnomon.node import replica
        kind = faults["listener_raise_on"]
        original = replica.Replica.add_listener
        def add_listener(self, listener):
            def faulty(batch, replies, effects):
                if any(type(c).__name__ == kind for c in batch.commands):
                    raise RuntimeError("injected listener fault")
                return listener(batch, replies, effects)
            return original(self, faulty)
        replica.Replica.add_listener = add_listener
    if "history_fail" in faults:
        from gnomon.node.storage import history
        left = [faults["history_fail"]]
        original_put = history.HistoryStore.put_runs
        def put_runs(self, records, *args, **kwargs):
            records = list(records)
            if records and left[0] != 0:
                left[0] -= 1
                raise OSError(errno.EIO, "injected history write failure")
            return original_put(self, records, *args, **kwargs)
        history.HistoryStore.put_runs = put_runs
    machines = []
    if "slow_snapshot_s" in faults or "follower_snapshot_gate" in faults:
        from gnomon.node.raft import node as raft
        original_init = raft._StateMachine.__init__
        def init(self, *args, **kwargs):
            machines.append(self)
            original_init(self, *args, **kwargs)
        raft._StateMachine.__init__ = init
    def leads():
        return any(m._isLeader() for m in machines)
    if "slow_snapshot_s" in faults:
        from gnomon.node import replica
        delay, original_write = faults["slow_snapshot_s"], replica.write_snapshot
        # By default the leader's write (the one that hurts); "follower": a follower's.
        slow_leader = faults.get("slow_snapshot_on", "leader") == "leader"
        def slow_write(*args, **kwargs):
            if leads() == slow_leader:  # runs in the forked child
                time.sleep(delay)
            return original_write(*args, **kwargs)
        replica.write_snapshot = slow_write
    if "follower_snapshot_gate" in faults:
        # A follower starts no snapshot of its own until this file exists.
        from gnomon.node.raft import snapshotter
        gate, original_serialize = faults["follower_snapshot_gate"], \
            snapshotter.ForkSnapshotter.serialize
        def gated_serialize(self, data, serialize_id):
            if leads() or os.path.exists(gate):
                return original_serialize(self, data, serialize_id)
        snapshotter.ForkSnapshotter.serialize = gated_serialize
    if "slow_load_s" in faults:
        from gnomon.node.storage import state_codec
        delay, original_decode = faults["slow_load_s"], state_codec.decode_tables
        def slow_decode(*args, **kwargs):
            time.sleep(delay)
            return original_decode(*args, **kwargs)
        state_codec.decode_tables = slow_decode
    if faults.get("crash_before_compaction"):
        from gnomon.node.raft import journal
        min_index = faults["crash_before_compaction"]
        original_delete = journal.DurableJournal.deleteEntriesTo
        def delete_entries_to(self, entry_to):
            # Entries after the snapshot index exist (the window), and clients are writing.
            if len(self) > entry_to + 2 and self[entry_to][1] >= min_index:
                time.sleep(1.0)  # their acknowledgements reach the clients meanwhile
                os._exit(137)
            return original_delete(self, entry_to)
        journal.DurableJournal.deleteEntriesTo = delete_entries_to

    if "raft_deaf_gate" in faults:
        # While the gate file holds "<this node id> <peer id>", this node drops every Raft
        # message from that peer (a one-way network fault: it sends, it does not hear).
        from gnomon.node.raft import transport
        gate, original_frame = faults["raft_deaf_gate"], transport.TlsTransport._on_frame
        def deaf_frame(self, conn, payload):
            if os.path.exists(gate) and open(gate).read().split() == [_node_id(), conn.peer_id]:
                return
            return original_frame(self, conn, payload)
        transport.TlsTransport._on_frame = deaf_frame
    if "journal_fsync_gate" in faults:
        # While the gate file exists, an fsync of the Raft journal does not return.
        gate, real_fsync = faults["journal_fsync_gate"], os.fsync
        def gated_fsync(fd):
            if os.path.exists(gate) and os.readlink(f"/proc/self/fd/{fd}").endswith("journal"):
                while os.path.exists(gate):
                    time.sleep(0.01)
            return real_fsync(fd)
        os.fsync = gated_fsync

if _FAULTS:
    _install(_FAULTS)
'''


@pytest.fixture
def faults(tmp_path: Path, monkeypatch):
    """faults(node_id, **faults) arms faults for the nodes started afterwards."""
    site = tmp_path / "faults-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    armed: dict[str, dict] = {}

    def arm(node_id: str | None = None, **spec) -> None:
        if node_id is None:
            armed.clear()
        else:
            armed[node_id] = spec
        monkeypatch.setenv("STORAGE_TEST_FAULTS", json.dumps(armed))

    return arm


# -- helpers ------------------------------------------------------------------------------------




def on_leader(cluster: LocalCluster, what: str, call, exclude: set[str] = frozenset()):
    """call(leader) on whichever node leads, retried across a leader change (the requests
    carry request ids: a retry has one effect)."""
    def attempt():
        try:
            return call(cluster.leader(exclude=exclude)) or True
        except grpc.RpcError as exc:
            if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
            return None
    return wait_for(attempt, timeout_s=60, what=what)


def create_on_leader(cluster: LocalCluster, names: list[str], exclude: set[str] = frozenset()):
    """Create jobs on whichever node leads."""
    return on_leader(cluster, f"creating {names[:3]} on a leader",
                     lambda leader: create_jobs(leader, names), exclude)


def job_names(node: NodeProc) -> set[str]:
    req = api_pb2.ListJobsRequest(limit=1000, consistency=api_pb2.CONSISTENCY_STALE)
    return {j.spec.name for j in node.jobs().ListJobs(req, timeout=5).jobs}




def stale_run_ids(node: NodeProc, job_id: str) -> set[str]:
    req = api_pb2.ListRunsRequest(job=api_pb2.JobRef(job_id=job_id), limit=1000,
                                  consistency=api_pb2.CONSISTENCY_STALE)
    return {r.run_id for r in node.jobs().ListRuns(req, timeout=5).runs}


def exited(node: NodeProc) -> int | None:
    return None if node.proc is None else node.proc.poll()


def wait_exit(node: NodeProc, timeout_s: float = 60) -> int:
    code = wait_for(lambda: exited(node) is not None, timeout_s=timeout_s,
                    what=f"{node.node_id} to stop") and exited(node)
    assert code != 0, f"{node.node_id} exited with 0"
    return code


def log_of(node: NodeProc) -> str:
    return node.log_path.read_text(errors="replace")


def serves(node: NodeProc) -> bool:
    try:
        node.jobs().ListJobs(api_pb2.ListJobsRequest(limit=1), timeout=2)
        return True
    except grpc.RpcError:
        return False


def term_of(cluster: LocalCluster, node: NodeProc) -> int:
    return cluster.status(node, include_digest=False).term


def converged(cluster: LocalCluster) -> bool:
    st = [cluster.status(n) for n in cluster.nodes]
    return len({(s.applied_index, s.state_digest) for s in st}) == 1


def snapshot_mtime(node: NodeProc) -> float:
    path = node.data_dir / "snapshot.lmdb"
    return path.stat().st_mtime if path.exists() else 0.0


def snapshot_written_after(node: NodeProc, mtime: float) -> bool:
    return snapshot_mtime(node) > mtime


# -- 1. unreadable snapshot or journal: refuse to start -----------------------------------------


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


def _retag_version(path: Path) -> None:
    """A snapshot of another format version (trailer says 99): same bytes otherwise."""
    data = bytearray(path.read_bytes())
    at = len(data) - snapmod._TRAILER.size + len(snapmod._TRAILER_MAGIC)
    data[at:at + 4] = (99).to_bytes(4, "little")
    path.write_bytes(bytes(data))


DAMAGE = {
    "flipped byte": lambda p: _flip(p, p.stat().st_size // 2),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "foreign file": lambda p: p.write_bytes(b"\x80\x04not a snapshot" * 100),
    "other format version": _retag_version,
    "missing (journal compacted)": lambda p: p.unlink(),
}


def test_unreadable_snapshot_refuses_to_start_and_names_the_file(make_cluster):
    cluster = make_cluster(size=1, **COMPACT_OFTEN)
    node = cluster.nodes[0]
    create_jobs(cluster.leader(), [f"j{i}" for i in range(10)])
    snap = node.data_dir / "snapshot.lmdb"
    wait_for(lambda: snap.exists(), timeout_s=60, what="a snapshot")
    cluster.kill(node.node_id, signal.SIGTERM)
    good = snap.read_bytes()
    for what, damage in DAMAGE.items():
        snap.write_bytes(good)
        damage(snap)
        offset = node.log_path.stat().st_size
        cluster.start_node(node.node_id)
        assert wait_exit(node) == EXIT_STORAGE, what
        text = log_of(node)[offset:]
        assert str(snap) in text, f"{what}: the message does not name the file:\n{text[-2000:]}"
        assert "data directory" in text, f"{what}: no advice for the operator:\n{text[-2000:]}"
    snap.write_bytes(good)
    cluster.start_node(node.node_id)
    wait_for(lambda: len(job_names(cluster.leader())) == 10, timeout_s=60, what="10 jobs back")


def test_journal_record_corrupt_in_the_middle_refuses_to_start(make_cluster):
    cluster = make_cluster(size=1, **NEVER_COMPACT)
    node = cluster.nodes[0]
    create_jobs(cluster.leader(), [f"j{i}" for i in range(10)])
    cluster.kill(node.node_id, signal.SIGTERM)
    journal = node.data_dir / "raft.journal"
    _flip(journal, journal.stat().st_size // 3)
    cluster.start_node(node.node_id)
    assert wait_exit(node) == EXIT_STORAGE
    text = log_of(node)
    assert str(journal) in text and "data directory" in text, text[-2000:]


# -- 2. an exception in or after apply stops the node, once ---------------------------------------


def test_exception_after_apply_stops_that_node_and_the_rest_carries_on(make_cluster, faults):
    faults("n3", listener_raise_on="TriggerJob")
    cluster = make_cluster()
    n3 = cluster.node("n3")
    (job_id,) = create_on_leader(cluster, ["victim"])
    on_leader(cluster, "a trigger", lambda leader: leader.jobs().TriggerJob(
        api_pb2.TriggerJobRequest(request_id="t1", job=api_pb2.JobRef(job_id=job_id)),
        timeout=10))
    assert wait_exit(n3) == 70
    assert "FATAL" in log_of(n3) and "injected listener fault" in log_of(n3)
    create_on_leader(cluster, ["after"], exclude={"n3"})  # two of three still commit
    faults()  # disarm; n3 replays the entry once, like everyone else
    cluster.start_node("n3")
    wait_for(lambda: converged(cluster), timeout_s=60, what="equal digests after the restart")


# -- 10. history writes: retried durably, or the node stops ---------------------------------------


def test_transient_history_write_errors_lose_no_run(make_cluster, faults):
    faults("n1", history_fail=2)
    cluster = make_cluster(size=1, runs_retained_per_job="1", **COMPACT_OFTEN)
    node = cluster.nodes[0]
    (job_id,) = create_jobs(cluster.leader(), ["j"])
    runs = set(finished_runs(cluster.leader(), job_id, 8, "a"))
    mtime = snapshot_mtime(node)
    create_jobs(cluster.leader(), [f"pad{i}" for i in range(25)])  # a snapshot past the runs
    wait_for(lambda: snapshot_written_after(node, mtime), timeout_s=60, what="a new snapshot")
    cluster.kill(node.node_id, signal.SIGTERM)
    faults()
    cluster.start_node(node.node_id)
    cluster.leader()
    assert runs <= stale_run_ids(node, job_id), "runs evicted while the store failed are gone"


def test_persistent_history_write_error_stops_the_node(make_cluster, faults):
    faults("n3", history_fail=-1)
    cluster = make_cluster(runs_retained_per_job="1")
    n3 = cluster.node("n3")
    (job_id,) = create_on_leader(cluster, ["j"])
    on_leader(cluster, "3 finished runs", lambda leader: finished_runs(leader, job_id, 3, "a"))
    assert wait_exit(n3) == 70
    text = log_of(n3)
    assert str(n3.data_dir / "history") in text and "injected history write failure" in text
    create_on_leader(cluster, ["after"], exclude={"n3"})


# -- disk full ------------------------------------------------------------------------------------


@pytest.fixture
def tmpfs(tmp_path: Path):
    """mount(path, size) mounts a small tmpfs (root only); unmounted at teardown."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted: list[Path] = []

    def mount(path: Path, size: str) -> None:
        path.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
        mounted.append(path)

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _fill(directory: Path, leave_bytes: int) -> None:
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize - leave_bytes
    with open(directory / "filler", "wb") as f:
        while free > 0:
            try:
                free -= f.write(b"\0" * min(free, 1 << 20))
            except OSError:
                break


def test_full_disk_stops_that_node_with_a_message_and_the_rest_carries_on(make_cluster, tmpfs):
    cluster = make_cluster(**COMPACT_OFTEN)
    n3 = cluster.node("n3")
    cluster.kill("n3")
    shutil.rmtree(n3.data_dir, ignore_errors=True)
    tmpfs(n3.data_dir, "24m")
    cluster.start_node("n3")
    create_on_leader(cluster, ["before"])
    wait_for(lambda: "before" in job_names(n3), timeout_s=60, what="n3 to catch up")
    _fill(n3.data_dir, 64 << 10)
    i = 0

    def writes_until_n3_stops() -> bool:
        nonlocal i
        create_on_leader(cluster, [f"fill{i}"])  # n3 may lead: then it stops, others take over
        i += 1
        return exited(n3) is not None

    wait_for(writes_until_n3_stops, timeout_s=120, what="n3 to stop on the full disk")
    assert exited(n3) != 0
    text = log_of(n3)
    assert "No space left on device" in text and str(n3.data_dir) in text, text[-3000:]
    create_on_leader(cluster, ["after"], exclude={"n3"})


# -- 4. snapshots off the tick thread; loads do not start elections -------------------------------


def test_slow_snapshot_write_keeps_the_leader_and_commits(make_cluster, faults):
    for n in ("n1", "n2", "n3"):
        faults(n, slow_snapshot_s=3)  # only while the node leads
    cluster = make_cluster(**COMPACT_OFTEN)
    leader = cluster.leader()
    create_jobs(leader, [f"warm{i}" for i in range(25)])
    term = term_of(cluster, leader)
    mtimes = {n.node_id: snapshot_mtime(n) for n in cluster.nodes}
    i = 0

    def written_everywhere() -> bool:
        nonlocal i
        create_jobs(leader, [f"w{i}"])  # commits while the snapshots are being written
        i += 1
        return all(snapshot_written_after(n, mtimes[n.node_id]) for n in cluster.nodes)

    wait_for(written_everywhere, timeout_s=120, what="a slow snapshot on every node")
    assert term_of(cluster, leader) == term, "an election happened during a snapshot"
    assert cluster.status(leader, include_digest=False).leader_node_id == leader.node_id


def test_slow_snapshot_load_starts_no_election(make_cluster, faults):
    """A follower whose load takes longer than an election timeout, at start and when the
    leader sends it a snapshot, must not depose the leader when it is done (no PreVote)."""
    cluster = make_cluster(**COMPACT_OFTEN)
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes if n is not leader)
    create_jobs(leader, [f"j{i}" for i in range(25)])
    wait_for(lambda: (follower.data_dir / "snapshot.lmdb").exists(), timeout_s=60,
             what="a snapshot on the follower")
    term = term_of(cluster, leader)
    faults(follower.node_id, slow_load_s=3)
    for step, wipe in (("restart", False), ("wiped", True)):
        cluster.kill(follower.node_id, signal.SIGTERM)
        if wipe:
            shutil.rmtree(follower.data_dir)
            create_jobs(leader, [f"k{i}" for i in range(25)])  # the leader compacts past it
        cluster.start_node(follower.node_id)
        create_on_leader(cluster, [f"after-{step}"])
        wait_for(lambda step=step: f"after-{step}" in job_names(follower), timeout_s=90,
                 what=f"the follower to catch up ({step})")
        assert term_of(cluster, leader) == term, f"{step}: the follower's load started an election"
    assert "restored snapshot" in log_of(follower)


# -- PreVote: a follower that does not hear the leader does not depose it ------------------------


def test_a_follower_that_cannot_hear_the_leader_does_not_depose_it(tmp_path, faults):
    """A one-way fault: one follower stops receiving the leader's messages; it still reaches
    the others. Without PreVote its election timer ran out, it stood at a higher term and the
    leader, seeing that term, stepped down: a healthy leader lost to one deaf follower. With
    PreVote (node/raft/prevote.py) it asks first; the leader and the other follower still hear
    a leader and refuse. Run with GNOMON_TEST_PRE_VOTE=false to see it fail without."""
    gate = tmp_path / "deaf-gate"
    for n in ("n1", "n2", "n3"):
        faults(n, raft_deaf_gate=str(gate))
    cluster = LocalCluster(tmp_path / "c", metrics=True,
                           overrides={"raft_min_timeout_s": "0.3", "raft_max_timeout_s": "0.6"})
    cluster.env["GNOMON_RAFT_PRE_VOTE"] = os.environ.get("GNOMON_TEST_PRE_VOTE", "true")
    cluster.start()
    try:
        leader = cluster.leader()
        create_jobs(leader, ["before"])
        term = term_of(cluster, leader)
        deaf = next(n for n in cluster.nodes if n is not leader)
        gate.write_text(f"{deaf.node_id} {leader.node_id}")
        rounds = "gnomon_raft_pre_vote_rounds_total"

        def asked_twice() -> bool:
            return samples(scrape(deaf.metrics_addr)).get(rounds, 0) >= 2 \
                or term_of(cluster, leader) != term

        wait_for(asked_twice, timeout_s=30, what="the deaf follower's timer to run out twice")
        create_jobs(leader, ["while-deaf"])
        gate.unlink()
        create_on_leader(cluster, ["after"])
        wait_for(lambda: "after" in job_names(deaf), timeout_s=30, what="the follower to hear")
        assert term_of(cluster, leader) == term, "the deaf follower deposed the leader"
        assert cluster.status(leader, include_digest=False).leader_node_id == leader.node_id
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()


# -- group commit: no reply acknowledges an entry before its fsync -------------------------------


def test_followers_that_cannot_fsync_acknowledge_nothing(make_cluster, faults, tmp_path):
    """Followers defer the fsync of an append's entries to one per batch (node/raft/DESIGN.md,
    group commit); their replies must still leave only after it. With both followers stuck in
    the journal's fsync, a write must not commit; once they can write again, it does."""
    gates = {n: tmp_path / f"fsync-gate-{n}" for n in ("n1", "n2", "n3")}
    for n, gate in gates.items():
        faults(n, journal_fsync_gate=str(gate))
    cluster = make_cluster()
    leader = cluster.leader()
    create_jobs(leader, ["before"])
    for n in cluster.nodes:
        if n is not leader:
            gates[n.node_id].touch()
    request = api_pb2.CreateJobRequest(request_id="stuck", spec=once_job("stuck"))
    request.spec.schedule.once.at_ms = FAR
    with pytest.raises(grpc.RpcError) as err:
        leader.jobs().CreateJob(request, timeout=3)
    assert err.value.code() in (grpc.StatusCode.DEADLINE_EXCEEDED,
                                grpc.StatusCode.UNAVAILABLE), err.value
    assert "stuck" not in job_names(leader)
    for gate in gates.values():
        gate.unlink(missing_ok=True)
    on_leader(cluster, "the write after the followers recovered",
              lambda node: node.jobs().CreateJob(request, timeout=10))
    wait_for(lambda: all("stuck" in job_names(n) for n in cluster.nodes), timeout_s=30,
             what="the write on every node")


# -- the crash window between a new snapshot and the journal compaction ----------------------------


def test_crash_between_snapshot_and_compaction_keeps_acknowledged_entries(make_cluster, faults):
    faults("n1", crash_before_compaction=100)
    cluster = make_cluster(size=1, snapshot_min_entries="30", snapshot_min_time_s="0.3")
    node = cluster.nodes[0]
    leader = cluster.leader()
    acked: list[str] = []
    stop = threading.Event()

    def writer(w: int) -> None:
        i = 0
        while not stop.is_set():
            try:
                create_jobs(leader, [f"a{w}-{i}"])
                acked.append(f"a{w}-{i}")
            except grpc.RpcError:
                return
            i += 1

    threads = [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(3)]
    for t in threads:
        t.start()
    try:
        wait_exit(node, timeout_s=120)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    faults()
    cluster.start_node(node.node_id)
    cluster.leader()
    missing = set(acked) - job_names(node)
    assert not missing, f"{len(missing)} acknowledged jobs lost, e.g. {sorted(missing)[:5]}"


# -- a resumed follower: its own older snapshot against the one the leader sent -------------------


def test_resumed_follower_keeps_the_leaders_newer_snapshot(make_cluster, faults, tmp_path):
    """Seen: a follower resumed after SIGSTOP forks a snapshot at its old index while it
    installs the leader's newer one; when the child finished, its older file was renamed over
    the leader's (the journal already compacted past it), and the node could not start again
    ("entries 376..430 are missing", exit 65) until its next snapshot. The gate makes the
    follower fork exactly at the resume, the slow write makes the child finish after the
    leader's snapshot was installed."""
    gate = tmp_path / "snapshot-gate"
    for n in ("n1", "n2", "n3"):
        faults(n, slow_snapshot_s=4, slow_snapshot_on="follower",
               follower_snapshot_gate=str(gate))
    # The leader drops the link to the stopped follower soon (otherwise the entries it keeps
    # sending wait in the socket, and the resumed follower needs no snapshot).
    cluster = make_cluster(raft_peer_timeout_ms="1500", **COMPACT_OFTEN)
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes if n is not leader)
    create_jobs(leader, [f"before{i}" for i in range(30)])  # the follower's journal grows
    wait_for(lambda: "before29" in job_names(follower), timeout_s=60,
             what="the follower to apply the first jobs")
    assert follower.proc is not None
    leader_log = leader.log_path.stat().st_size
    follower.proc.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: re.search(rf"{follower.node_id}\b.* closed: nothing received",
                                   log_of(leader)[leader_log:]),
                 timeout_s=30, what="the leader to drop its link to the stopped follower")
        create_jobs(leader, [f"while{i}" for i in range(30)])
        mtime = snapshot_mtime(leader)
        i = 0

        def compacted_past_the_follower() -> bool:  # a leader snapshot after every write above
            nonlocal i
            create_jobs(leader, [f"more{i}"])
            i += 1
            return snapshot_written_after(leader, mtime)

        wait_for(compacted_past_the_follower, timeout_s=60, what="the leader to compact")
        offset = follower.log_path.stat().st_size
        gate.touch()
    finally:
        follower.proc.send_signal(signal.SIGCONT)

    received = re.compile(r"read snapshot \S+\.recv\.tmp at index (\d+)")
    # The outcome of the local snapshot: renamed into place (": N jobs") or dropped.
    local = re.compile(r"snapshotter: snapshot at index (\d+)(?::| (?:discarded|dropped))")

    def local_outcome_after_the_install() -> tuple[int, int, str] | None:
        text = log_of(follower)[offset:]
        got = received.search(text)
        after = local.search(text, got.end()) if got else None
        return (int(got.group(1)), int(after.group(1)), after.group(0)) if after else None

    installed, local_index, line = wait_for(local_outcome_after_the_install, timeout_s=60,
                                            what="the follower's own snapshot to finish")
    assert local_index < installed, f"no race: {line!r} after the leader's {installed}"
    cluster.kill(follower.node_id, signal.SIGTERM)
    faults()
    cluster.start_node(follower.node_id)

    def caught_up() -> bool:
        if exited(follower) is not None:
            raise AssertionError(f"{follower.node_id} did not start again (exit "
                                 f"{exited(follower)}):\n{log_of(follower)[-3000:]}")
        return converged(cluster)

    wait_for(caught_up, timeout_s=90, what="the restarted follower to converge")
    assert "are missing" not in log_of(follower)
