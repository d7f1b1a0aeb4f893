"""``python -m gnomon.node.local.dev``: a three-node development cluster on fixed loopback ports with
its data under one directory (``.gnomon/`` by default), for ``gnomon dev`` and ``make run``.

Prints each node's addresses (the HTTP API and dashboard of each node at its gRPC port - 100:
http://127.0.0.1:7601/ by default) and log file, waits for a leader, starts one gateway in
front of the nodes (gRPC at the first gRPC port - 1, HTTP 100 below: 7700 and 7600) and prints
it, prints ``ready``, then blocks until SIGINT/SIGTERM (or until ``--parent-pid`` exits) and
stops the gateway and the nodes. Restarting on the
same directory resumes the cluster with its jobs and runs. Exit codes: 0 stopped cleanly,
1 a node failed to start (a port in use among other causes: its log says so), 2 bad arguments.

`gnomon dev` (client/cli/dev.py) starts this module and checks its arguments first: the port
lists, their overlap and whether the ports are free are checked there, once.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from gnomon.node.local.cluster import LocalCluster, NodeProc, stop_process
from gnomon.node.local.gateway import gateway_argv
from gnomon.v1 import api_pb2

__all__ = ["DEFAULT_GRPC_PORTS", "DEFAULT_RAFT_PORTS", "GATEWAY_PORT_OFFSET", "HTTP_PORT_OFFSET",
           "DevCluster", "main"]

# The client CLI's default servers (gnomon.client.cli.dev) name the same gRPC ports.
DEFAULT_GRPC_PORTS = (7701, 7702, 7703)
DEFAULT_RAFT_PORTS = (7801, 7802, 7803)
# Prometheus /metrics of each node, served when the gRPC ports are the default ones.
DEFAULT_METRICS_PORTS = (7901, 7902, 7903)
# A node's HTTP API and dashboard (node/api/http) listen on its gRPC port + this (7601...);
# client/cli/dev.py prints the dashboard URL by the same rule.
HTTP_PORT_OFFSET = -100
# The gateway's gRPC port is the first node's gRPC port + this (7700); its HTTP port is that
# + HTTP_PORT_OFFSET (7600). client/cli/dev.py checks and prints them by the same rule.
GATEWAY_PORT_OFFSET = -1
HOST = "127.0.0.1"
_READY_TIMEOUT_S = 60.0
_LOG_TAIL_CHARS = 2000


@dataclass
class DevCluster(LocalCluster):
    """A LocalCluster on the given ports instead of free ones (secured as any LocalCluster:
    its own probes speak TLS with the dev CA and carry the admin token)."""

    grpc_ports: tuple[int, ...] = DEFAULT_GRPC_PORTS
    raft_ports: tuple[int, ...] = DEFAULT_RAFT_PORTS
    metrics_ports: tuple[int, ...] = ()

    @property
    def gateway_addr(self) -> str:
        return f"{HOST}:{self.grpc_ports[0] + GATEWAY_PORT_OFFSET}"

    @property
    def gateway_http_addr(self) -> str:
        return f"{HOST}:{self.grpc_ports[0] + GATEWAY_PORT_OFFSET + HTTP_PORT_OFFSET}"

    def start_gateway(self) -> subprocess.Popen:
        """`python -m gnomon.gateway` in front of the nodes, its log ROOT/gateway.log; its
        workers over one relay to the leader, with the cluster's gateway token."""
        argv = gateway_argv(self, self.gateway_addr, http_listen=self.gateway_http_addr,
                            relay=True)
        fd = os.open(self.root / "gateway.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            return subprocess.Popen(argv, stdout=fd, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        finally:
            os.close(fd)

    def _place_nodes(self) -> None:
        self.size = len(self.grpc_ports)
        self.nodes = [
            NodeProc(
                f"n{i + 1}",
                f"{HOST}:{raft}",
                f"{HOST}:{grpc_port}",
                self.root / f"n{i + 1}",
                self.root / f"n{i + 1}.log",
            )
            for i, (grpc_port, raft) in enumerate(
                zip(self.grpc_ports, self.raft_ports, strict=True)
            )
        ]
        for node, port in zip(self.nodes, self.metrics_ports, strict=False):
            node.metrics_addr = f"{HOST}:{port}"
        for node, port in zip(self.nodes, self.grpc_ports, strict=True):
            node.http_addr = f"{HOST}:{port + HTTP_PORT_OFFSET}"


def _ports(text: str) -> tuple[int, ...]:
    # `gnomon dev` validated the list already; this module is its subprocess.
    return tuple(int(p) for p in text.split(","))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gnomon.node.local.dev", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--root", default=".gnomon", help="data and log directory (default .gnomon)")
    p.add_argument(
        "--grpc-ports",
        type=_ports,
        default=DEFAULT_GRPC_PORTS,
        help="three gRPC ports on 127.0.0.1 (default 7701,7702,7703)",
    )
    p.add_argument(
        "--raft-ports",
        type=_ports,
        default=DEFAULT_RAFT_PORTS,
        help="three Raft ports on 127.0.0.1 (default 7801,7802,7803)",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext gRPC and HTTP ports without authentication (default: TLS with a "
        "throwaway CA under ROOT/tls and a bootstrap admin token in ROOT/tls/admin.token)",
    )
    p.add_argument(
        "--parent-pid",
        type=int,
        default=0,
        help="stop when this process exits (used by `gnomon dev`)",
    )
    return p


def _leader(cluster: DevCluster) -> NodeProc | None:
    for node in cluster.nodes:
        if not node.alive():
            continue
        try:
            node.jobs().ListJobs(api_pb2.ListJobsRequest(limit=1), timeout=1)
            return node
        except grpc.RpcError:
            continue
    return None


def write_dev_state(root: Path, cluster: DevCluster, *, secure: bool) -> None:
    """``ROOT/dev.json``: how this cluster is reached (its gRPC addresses, whether it speaks
    TLS with tokens, where the CA and admin token are). The ``gnomon`` CLI run beside it reads
    this file, not whatever ``ROOT/tls`` an earlier cluster left (client/cli/dev.py)."""
    state = {"grpc": [n.grpc_addr for n in cluster.nodes], "secure": secure,
             "gateway": cluster.gateway_addr}
    if secure:
        state |= {"ca_file": "tls/ca.crt", "token_file": "tls/admin.token"}
    tmp = root / "dev.json.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(state, fh)
        fh.write("\n")
    os.replace(tmp, root / "dev.json")


def _shown(path: Path) -> str:
    """``path`` relative to the current directory when it is below it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
    except OSError:
        return "(no log)"


def _wait_listening(addr: str, proc: subprocess.Popen, stop: threading.Event) -> None:
    """Until `addr` accepts connections, `proc` exits, `stop` is set, or 30 s."""
    host, port = addr.rsplit(":", 1)
    deadline = time.monotonic() + 30
    while proc.poll() is None and not stop.is_set() and time.monotonic() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            stop.wait(0.05)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    root = Path(args.root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    metrics_ports = DEFAULT_METRICS_PORTS if args.grpc_ports == DEFAULT_GRPC_PORTS else ()
    cluster = DevCluster(root, grpc_ports=args.grpc_ports, raft_ports=args.raft_ports,
                         metrics_ports=metrics_ports, secure=not args.insecure,
                         mutual_tls=False)
    resumed = any(n.data_dir.exists() for n in cluster.nodes)
    gateway: subprocess.Popen | None = None
    write_dev_state(root, cluster, secure=not args.insecure)
    cluster.start()
    try:
        print(
            f"gnomon dev cluster: {'resuming' if resumed else 'new'} data in {_shown(root)}/",
            flush=True,
        )
        for n in cluster.nodes:
            print(
                f"  {n.node_id}  grpc {n.grpc_addr}  raft {n.raft_addr}  log {_shown(n.log_path)}"
                + (f"  metrics http://{n.metrics_addr}/metrics" if n.metrics_addr else "")
                + f"  dashboard {n.url}/",
                flush=True,
            )
        deadline = time.monotonic() + _READY_TIMEOUT_S
        leader = None
        while leader is None and not stop.is_set():
            dead = [n for n in cluster.nodes if not n.alive()]
            if dead:
                n = dead[0]
                assert n.proc is not None  # cluster.start() started every node
                print(
                    f"gnomon dev: node {n.node_id} exited with code {n.proc.returncode} while "
                    f"starting; last lines of {n.log_path}:\n{_tail(n.log_path)}",
                    file=sys.stderr,
                    flush=True,
                )
                return 1
            if time.monotonic() > deadline:
                print(
                    f"gnomon dev: no leader within {_READY_TIMEOUT_S:g}s; "
                    f"see the logs in {_shown(root)}/",
                    file=sys.stderr,
                    flush=True,
                )
                return 1
            leader = _leader(cluster)
            if leader is None:
                stop.wait(0.2)
        if leader is not None:
            gateway = cluster.start_gateway()
            _wait_listening(cluster.gateway_http_addr, gateway, stop)
            scheme = "https" if cluster.secure else "http"
            print(f"  gateway  grpc {cluster.gateway_addr}  log {_shown(root / 'gateway.log')}"
                  f"  dashboard {scheme}://{cluster.gateway_http_addr}/", flush=True)
            print(f"  leader {leader.node_id} ({leader.grpc_addr})\nready", flush=True)
        reported: set[str] = set()
        while not stop.wait(0.5):
            if args.parent_pid and os.getppid() != args.parent_pid:
                print("gnomon dev: parent process gone; stopping", file=sys.stderr, flush=True)
                break
            if gateway is not None and gateway.poll() is not None and "gateway" not in reported:
                reported.add("gateway")
                print(f"gnomon dev: the gateway exited (code {gateway.returncode}); see "
                      f"{_shown(root / 'gateway.log')}", file=sys.stderr, flush=True)
            for n in cluster.nodes:
                if not n.alive() and n.node_id not in reported:
                    assert n.proc is not None  # cluster.start() started every node
                    reported.add(n.node_id)
                    print(
                        f"gnomon dev: node {n.node_id} exited (code {n.proc.returncode}); "
                        f"see {_shown(n.log_path)}",
                        file=sys.stderr,
                        flush=True,
                    )
        return 0
    finally:
        if gateway is not None:
            stop_process(gateway, timeout_s=10)
        cluster.stop()
        print("gnomon dev cluster: stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
