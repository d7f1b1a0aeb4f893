"""The CLI as an operator meets it, against real nodes: cluster status from the leader and a
non-zero exit without one, "no leader" said so, --timeout bounding a call, `job get --json`
reading back through `job create -f`, export/import, lists of active runs, queues and workers
with a warning for a queue no worker serves, `-s` usage errors, `| head`, gnomon-node --help."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
import yaml

from gnomon.client import Client, JobSpec, OnceSchedule, TaskSpec
from gnomon.node.local.cluster import LocalCluster, wait_for
from tests.support.cluster import RawWorker, cli, module_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

FAR_FUTURE_MS = 4_102_444_800_000




@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    with module_cluster(tmp_path_factory.mktemp("cliops"), request=request) as c:
        yield c


def test_job_get_json_reads_back_through_job_create_f(cluster, tmp_path):
    s = cluster.servers
    code, _out, err = cli("-s", s, "job", "create", "--name", "roundtrip", "--interval", "1h",
                          "--queue", "rt", "--payload-json", '{"a": [1, 2]}', "--max-attempts",
                          "4", "--priority", "7")
    assert code == 0, err
    code, first, err = cli("-s", s, "--json", "job", "get", "roundtrip")
    assert code == 0, err
    path = tmp_path / "job.json"
    path.write_text(first)
    assert cli("-s", s, "job", "delete", "roundtrip")[0] == 0
    code, _out, err = cli("-s", s, "job", "create", "-f", str(path))
    assert code == 0, err
    code, second, err = cli("-s", s, "--json", "job", "get", "roundtrip")
    assert json.loads(second)["spec"] == json.loads(first)["spec"]
    cli("-s", s, "job", "delete", "roundtrip")


def test_export_import_is_idempotent(cluster, tmp_path):
    s = cluster.servers
    with Client(s) as client:
        for i in range(3):
            client.create_job(JobSpec(name=f"gitops-{i}", tenant="ops",
                                      schedule=OnceSchedule(at_ms=FAR_FUTURE_MS),
                                      tasks=[TaskSpec(name="main", queue="q")]))
    exported = tmp_path / "jobs.yaml"
    code, _out, err = cli("-s", s, "job", "export", "--tenant", "ops", "-o", str(exported))
    assert code == 0, err
    code, out, err = cli("-s", s, "--json", "job", "import", str(exported))
    assert code == 0, err
    result = json.loads(out)
    assert result["unchanged"] == [f"ops/gitops-{i}" for i in range(3)]
    assert result["created"] == result["updated"] == []
    cli("-s", s, "job", "delete", "gitops-2", "--tenant", "ops")
    docs = list(yaml.safe_load_all(exported.read_text()))
    next(d for d in docs if d["name"] == "gitops-1")["priority"] = 5
    text = yaml.safe_dump_all(docs, sort_keys=False)
    code, out, err = cli("-s", s, "--json", "job", "import", "-", stdin=text)
    assert code == 0, err
    result = json.loads(out)
    assert result["created"] == ["ops/gitops-2"] and result["updated"] == ["ops/gitops-1"]
    code, out, err = cli("-s", s, "--json", "job", "import", "-", stdin=text)
    assert json.loads(out)["unchanged"] == [f"ops/gitops-{i}" for i in range(3)]


def test_lists_of_active_runs_queues_and_workers_and_the_idle_queue_warning(cluster):
    s = cluster.servers
    code, _out, err = cli("-s", s, "job", "create", "--name", "lonely", "--interval", "200ms",
                          "--queue", "lonely-q")
    assert code == 0, err
    assert "no worker serves queue 'lonely-q'" in err
    worker = RawWorker(cluster.leader(), "w-lists", ("busy-q",))
    try:
        def listed():
            code, out, _err = cli("-s", s, "--json", "queue", "list")
            queues = {q["queue"]: q for q in json.loads(out)} if code == 0 else {}
            q = queues.get("lonely-q")
            return (queues, _err) if q and q["ready"] >= 1 and "busy-q" in queues else None

        queues, err = wait_for(listed, timeout_s=30, what="lonely-q with ready tasks")
        assert queues["lonely-q"]["workers"] == [] and queues["lonely-q"]["oldest_ready_age_ms"] >= 0
        assert queues["busy-q"]["workers"] == ["w-lists"]
        assert "queue 'lonely-q' has" in err and "no worker" in err
        code, out, err = cli("-s", s, "--json", "worker", "list")
        assert code == 0, err
        assert [w["worker_id"] for w in json.loads(out)] == ["w-lists"]
        assert json.loads(out)[0]["queues"] == ["busy-q"]
        listed_worker = json.loads(out)[0]
        assert listed_worker["connected_ms"] > 0 and listed_worker["last_heartbeat_ms"] == 0
        assert listed_worker["peer"].startswith("ipv4:127.0.0.1:")  # straight to the leader
        code, out, err = cli("-s", s, "--json", "run", "active")
        assert code == 0, err
        assert any(r["job_id"] for r in json.loads(out))
        code, out, _err = cli("-s", s, "run", "active")
        assert "lonely" in out or "@" in out
    finally:
        worker.close()
        cli("-s", s, "job", "delete", "lonely", "--cancel-running")


def test_pipe_into_head_does_not_fail(cluster):
    with Client(cluster.servers) as client:
        for i in range(250):
            client.create_job(JobSpec(name=f"many-{i:03d}-" + "x" * 60, tenant="pipe",
                                      schedule=OnceSchedule(at_ms=FAR_FUTURE_MS),
                                      tasks=[TaskSpec(name="main", queue="q")]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GNOMON_")}
    done = subprocess.run(
        ["bash", "-c", "set -o pipefail; \"$0\" -m gnomon.client.cli -s \"$1\" job export "
         "--tenant pipe | head -n 1", sys.executable, cluster.servers],
        capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.strip()


def test_server_flag_usage_errors():
    for bad in ("localhost", "http://127.0.0.1:7701", "127.0.0.1:notaport", "127.0.0.1:7701,x"):
        code, _out, err = cli("-s", bad, "job", "list")
        assert code == 2, (bad, err)
        assert "host:port" in err


def test_timeout_bounds_the_whole_call():
    """A node that accepts connections and never answers: the call ends at --timeout."""
    sink = socket.socket()
    sink.bind(("127.0.0.1", 0))
    sink.listen(64)
    try:
        addr = f"127.0.0.1:{sink.getsockname()[1]}"
        started = time.monotonic()
        code, _out, err = cli("-s", addr, "--timeout", "2", "job", "list")
        elapsed = time.monotonic() - started
    finally:
        sink.close()
    assert code == 3, err
    assert elapsed < 2 + 3, f"--timeout 2 took {elapsed:.1f}s"


def test_cluster_status_from_the_leader_and_no_leader(tmp_path):
    c = LocalCluster(tmp_path, 3).start()
    try:
        leader = c.leader()
        follower = next(n for n in c.nodes if n.node_id != leader.node_id)

        def answered():  # a follower that just started may not have heard from the leader yet
            code, out, _err = cli("-s", follower.grpc_addr, "--json", "cluster", "status")
            return json.loads(out) if code == 0 else None

        status = wait_for(answered, timeout_s=20, what="status with a leader")
        assert status["node_id"] == leader.node_id  # the leader answered: its match indexes
        others = [n for n in status["nodes"] if n["node_id"] != leader.node_id]
        wait_for(lambda: all(n["match_index"] > 0 for n in json.loads(
            cli("-s", follower.grpc_addr, "--json", "cluster", "status")[1])["nodes"]),
            timeout_s=20, what="match indexes from the leader")
        assert len(others) == 2
        survivor = c.nodes[0]
        for n in c.nodes[1:]:
            c.kill(n.node_id)

        def no_leader():
            code, out, err = cli("-s", survivor.grpc_addr, "--timeout", "3", "cluster", "status")
            return (code, out, err) if code == 3 else None

        code, out, err = wait_for(no_leader, timeout_s=30, what="status without a leader")
        assert "no leader" in err and "leader" in out

        def says_no_leader():
            # A leader cut off keeps its role for leader_fallback_timeout_s (its calls time
            # out meanwhile); then every call says there is no leader.
            code, _out, err = cli("-s", survivor.grpc_addr, "--timeout", "3", "job", "list")
            return err if code == 3 and "no leader" in err else None

        wait_for(says_no_leader, timeout_s=30, what='"no leader" from a node without quorum')
    finally:
        c.stop()


def test_gnomon_node_help_describes_every_option_with_its_default():
    from gnomon.node.config import _FIELDS, field_help

    helps = field_help()
    assert set(helps) == set(_FIELDS)
    for name, text in helps.items():
        assert "(default: " in text and f"GNOMON_{name.upper()}" in text, name
    done = subprocess.run([sys.executable, "-m", "gnomon.node.cli", "--help"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0
    flat = " ".join(done.stdout.split())
    for name in _FIELDS:
        flag = "--" + name.replace("_", "-").removesuffix("s" if name == "members" else "")
        assert flag in flat, flag
    assert flat.count("(default: ") == len(_FIELDS)
