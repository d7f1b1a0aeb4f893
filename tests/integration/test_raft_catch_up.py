"""A follower that fell far behind catches up through the transport's backpressure
(node/raft/DESIGN.md: appends beyond raft_send_backlog_bytes are dropped and asked for again,
instead of queueing until the link is closed and everything is resent)."""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor

import pytest

from gnomon.node.local.cluster import LocalCluster, wait_for
from gnomon.v1 import api_pb2, types_pb2

pytestmark = pytest.mark.integration

PAYLOAD = b"p" * (60 << 10)


def _spec(i: int) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        name=f"heavy-{i}", schedule=types_pb2.Schedule(
            once=types_pb2.OnceSchedule(at_ms=4_102_444_800_000)),
        tasks=[types_pb2.TaskSpec(name=f"t{k}", payload=PAYLOAD) for k in range(10)])


def test_a_follower_far_behind_catches_up(tmp_path):
    cluster = LocalCluster(tmp_path, overrides={"raft_send_backlog_bytes": str(1 << 20)}).start()
    try:
        leader = cluster.leader()
        behind = next(n for n in cluster.nodes if n is not leader)
        behind.proc.send_signal(signal.SIGSTOP)
        try:
            for i in range(40):  # about 24 MiB of entries it misses
                leader.jobs().CreateJob(api_pb2.CreateJobRequest(
                    request_id=f"heavy-{i}", spec=_spec(i)), timeout=30)
        finally:
            behind.proc.send_signal(signal.SIGCONT)
        target = cluster.status(leader, include_digest=False).commit_index

        def caught_up():
            st = cluster.status(behind, include_digest=False)
            return st.applied_index >= target

        wait_for(caught_up, timeout_s=90, what=f"{behind.node_id} to apply index {target}")
        log = behind.log_path.read_text()
        assert log.count("truncating already-applied") < 50, "it churned instead of catching up"
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()


def _small_spec(i: int) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        name=f"steady-{i}", schedule=types_pb2.Schedule(
            once=types_pb2.OnceSchedule(at_ms=4_102_444_800_000)),
        tasks=[types_pb2.TaskSpec(name="t")])


def test_followers_never_rewrite_what_they_hold_while_appends_are_in_flight(tmp_path):
    """pysyncobj moves a follower's nextIndex back to what each append reply names; with
    several appends in flight the leader then resends entries the follower holds, and the
    follower truncates and rewrites them (measured: 138 such truncations in ~35 s at 200
    fires/s, a follower seconds behind, and a new leader's first barrier waiting 0.1-0.5 s
    for it). node/raft/node.py keeps nextIndex from going back on success; a healthy cluster
    truncates nothing."""
    cluster = LocalCluster(tmp_path).start()
    try:
        leader = cluster.leader()
        stub = leader.jobs()

        def create(i: int) -> None:
            stub.CreateJob(api_pb2.CreateJobRequest(request_id=f"steady-{i}",
                                                    spec=_small_spec(i)), timeout=30)

        with ThreadPoolExecutor(16) as pool:  # concurrent calls: several entries in flight
            list(pool.map(create, range(1500)))
        target = cluster.status(leader, include_digest=False).commit_index
        for node in cluster.nodes:
            wait_for(lambda node=node: cluster.status(node, include_digest=False)
                     .applied_index >= target, timeout_s=30,
                     what=f"{node.node_id} to apply index {target}")
        truncations = {n.node_id: n.log_path.read_text().count("truncating already-applied")
                       for n in cluster.nodes}
        assert truncations == {n.node_id: 0 for n in cluster.nodes}
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()
