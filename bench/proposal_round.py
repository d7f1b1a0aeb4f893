"""A timeline of one proposal round: one CreateJob on an idle 3-node cluster, seen in the
system calls of the leader and a follower (strace, every thread), from the request's bytes
arriving at the leader's gRPC port to its answer leaving it.

    python -m gnomon.bench.proposal_round [--warmup 20]

Prints each step with its time since the request arrived and writes
bench/results/proposal_round.json. Needs strace (Debian package strace) and ptrace rights.
strace slows every system call it sees: the absolute times are inflated, the order and the
gaps between steps are what this is for.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gnomon.bench.report import RESULTS_DIR
from gnomon.node.local.cluster import LocalCluster
from gnomon.v1 import api_pb2, types_pb2

_LINE = re.compile(r"^(?P<tid>\d+)\s+(?P<ts>\d+\.\d+) (?P<call>\w+)\((?P<fd>\d+)<(?P<what>(?:->|[^>])*)>")
_CALLS = "trace=fsync,fdatasync,write,sendto,sendmsg,recvfrom,recvmsg,read"


def _spec(name: str) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        name=name, schedule=types_pb2.Schedule(once=types_pb2.OnceSchedule(at_ms=4_102_444_800_000)),
        tasks=[types_pb2.TaskSpec(name="main")])


def _strace(pid: int, out: Path) -> subprocess.Popen:
    tids = sorted(os.listdir(f"/proc/{pid}/task"))
    args = ["strace", "-ttt", "-T", "-yy", "-e", _CALLS, "-o", str(out)]
    for tid in tids:
        args += ["-p", tid]
    return subprocess.Popen(args, stderr=subprocess.DEVNULL)


def _kind(call: str, what: str, grpc_port: str, raft_ports: set[str]) -> str | None:
    """What a system call on `what` (strace -yy's description of the fd) was for."""
    if call in ("fsync", "fdatasync"):
        return "fsync " + os.path.basename(what)
    if "TCP" not in what:
        return None
    if "->" not in what:
        return None
    ports = {(re.findall(r":(\d+)", side) or [""])[-1] for side in what.split("->", 1)}
    if grpc_port in ports:
        return ("gRPC in" if call.startswith(("recv", "read")) else "gRPC out")
    if ports & raft_ports:
        return ("Raft in" if call.startswith(("recv", "read")) else "Raft out")
    return None


def _events(path: Path, who: str, grpc_port: str, raft_ports: set[str]) -> list[tuple[float, str, str]]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        m = _LINE.match(line)
        if not m or "= -1 EAGAIN" in line:
            continue
        kind = _kind(m.group("call"), m.group("what"), grpc_port, raft_ports)
        took = re.search(r"<(\d+\.\d+)>$", line)
        if kind:
            if kind.startswith("fsync") and took:
                kind += f", {float(took.group(1)) * 1000:.2f} ms"
            out.append((float(m.group("ts")), who, f"{kind} (thread {m.group('tid')})"))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--warmup", type=int, default=20)
    a = p.parse_args()
    if shutil.which("strace") is None:
        sys.exit("strace is not installed (apt-get install strace)")
    with tempfile.TemporaryDirectory(prefix="gnomon-bench-round-") as tmp:
        root = Path(tmp)
        cluster = LocalCluster(root / "c").start()
        try:
            leader = cluster.leader()
            follower = next(n for n in cluster.nodes if n is not leader)
            stub = leader.jobs()
            for i in range(a.warmup):
                stub.CreateJob(api_pb2.CreateJobRequest(request_id=f"w{i}", spec=_spec(f"w{i}")),
                               timeout=10)
            raft_ports = {n.raft_addr.rsplit(":", 1)[1] for n in cluster.nodes}
            grpc_port = leader.grpc_addr.rsplit(":", 1)[1]
            traces = {"leader": root / "leader.strace", "follower": root / "follower.strace"}
            tracers = [_strace(leader.proc.pid, traces["leader"]),
                       _strace(follower.proc.pid, traces["follower"])]
            time.sleep(1.0)  # strace attaches to every thread before the round starts
            sent = time.time()
            stub.CreateJob(api_pb2.CreateJobRequest(request_id="round", spec=_spec("round")),
                           timeout=10)
            answered = time.time()
            client_ms = (answered - sent) * 1000
            time.sleep(0.2)
            for t in tracers:
                t.terminate()
                t.wait(timeout=10)
            events = sorted(_events(traces["leader"], "leader", grpc_port, raft_ports)
                            + _events(traces["follower"], "follower", "-", raft_ports))
        finally:
            cluster.stop()
    # The request: the leader's first gRPC read after the client sent it; the answer: its
    # last gRPC write before the client had it.
    first_in = next((e for e in events if e[0] >= sent and e[1] == "leader"
                     and e[2].startswith("gRPC in")), None)
    if first_in is None:
        sys.exit("no gRPC request seen in the leader's trace")
    last_out = max((e for e in events if e[0] <= answered and e[1] == "leader"
                    and e[2].startswith("gRPC out")), default=first_in)
    window = [e for e in events if first_in[0] <= e[0] <= last_out[0]]
    rows = []
    for ts, who, what in window:
        if rows and rows[-1][1:] == [who, what]:
            continue  # one line per run of the same call on the same thread
        rows.append([round((ts - first_in[0]) * 1000, 3), who, what])
    print(f"one CreateJob through the leader: {client_ms:.2f} ms at the client (traced)")
    print("| ms after the request arrived | node | system call |")
    print("|---|---|---|")
    for ms, who, what in rows:
        print(f"| {ms:.3f} | {who} | {what} |")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "proposal_round.json").write_text(json.dumps(
        {"client_ms": client_ms, "timeline": rows}, indent=1))


if __name__ == "__main__":
    main()
