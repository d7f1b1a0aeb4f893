"""``gnomon dev --headless-seconds N``: three nodes, the demo worker and the example jobs come up
in a fresh directory, runs succeed, everything stops; a second start resumes the same data."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gnomon.node.local.cluster import free_ports

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _dev(
    cwd: Path, grpc: list[int], raft: list[int], seconds: float
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GNOMON_")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gnomon.client.cli",
            "--json",
            "dev",
            "--headless-seconds",
            str(seconds),
            "--grpc-ports",
            ",".join(map(str, grpc)),
            "--raft-ports",
            ",".join(map(str, raft)),
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=150,
    )


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_dev_runs_examples_stops_and_resumes(tmp_path):
    ports = free_ports(6)
    grpc, raft = ports[:3], ports[3:]

    first = _dev(tmp_path, grpc, raft, 8)
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    assert set(summary["jobs"]) == {"hello-every-5s", "etl-every-30s", "flaky-export"}
    # The DAG was triggered on creation, the 5 s cron fired at least once.
    assert summary["jobs"]["etl-every-30s"].get("succeeded", 0) >= 1
    assert sum(summary["jobs"]["hello-every-5s"].values()) >= 1
    assert summary["runs"]["succeeded"] >= 1
    # The failing example was retried into the dead-letter queue.
    assert summary["jobs"]["flaky-export"].get("failed", 0) >= 1
    assert summary["dead_letters"] >= 1
    for created in ("hello-every-5s", "etl-every-30s", "flaky-export"):
        assert f"{created:<16} created" in first.stderr
    assert "gnomon cluster status" in first.stderr  # what to try next
    data = tmp_path / ".gnomon"
    # Secure by default: a throwaway CA and an admin token (0600), printed with the dashboard.
    token = (data / "tls" / "admin.token").read_text().strip()
    assert (data / "tls" / "admin.token").stat().st_mode & 0o777 == 0o600
    assert (data / "tls" / "ca.crt").exists() and f"#token={token}" in first.stderr
    for name in ("n1.log", "n2.log", "n3.log", "worker.log", "n1", "n2", "n3"):
        assert (data / name).exists(), name
    # Everything stopped: nothing listens on the cluster's ports any more.
    assert not [p for p in ports if _listening(p)]

    second = _dev(tmp_path, grpc, raft, 2)
    assert second.returncode == 0, second.stderr
    assert "resuming data in .gnomon/" in second.stderr
    assert "hello-every-5s   resumed" in second.stderr
    resumed = json.loads(second.stdout)
    assert resumed["runs"]["succeeded"] >= summary["runs"]["succeeded"]
    assert not [p for p in ports if _listening(p)]


def test_dev_refuses_busy_ports(tmp_path):
    ports = free_ports(6)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", ports[0]))
        busy.listen()
        proc = _dev(tmp_path, ports[:3], ports[3:], 1)
    assert proc.returncode == 3
    # Our busy port is named first; a port derived from the ones given (HTTP, gateway) may be
    # named too, when another process of the machine happens to hold it.
    head = proc.stderr.split(" on 127.0.0.1 already in use", 1)[0]
    assert head.startswith(f"gnomon: unavailable: port(s) {ports[0]}"), proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stdout == ""
    assert not (tmp_path / ".gnomon").exists()
