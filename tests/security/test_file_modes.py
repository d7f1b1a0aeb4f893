"""Files are 0600 and directories 0700 whatever the umask: under umask 022 the journal and
the snapshot (every payload, an unsalted SHA-256 of every token) and `gnomon backup create`
output were 0644, and a node started without a word with a 0644 admin token file."""

from __future__ import annotations

import os
import stat

import pytest

from gnomon.client import Client, JobSpec, OnceSchedule, TLSConfig
from gnomon.node.local.cluster import LocalCluster, wait_for

pytestmark = pytest.mark.integration

FAR = 4_102_444_800_000


def _modes(root) -> dict[str, int]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = stat.S_IMODE(os.lstat(path).st_mode)
    return out


def test_a_node_under_umask_022_writes_nothing_others_can_read(tmp_path):
    cluster = LocalCluster(tmp_path, 1, secure=True, mutual_tls=False,
                           overrides={"snapshot_min_entries": "5", "snapshot_min_time_s": "0.1"})
    token_file = tmp_path / "tls" / "admin.token"
    cluster.admin_token()
    token_file.chmod(0o644)  # a careless operator's token file
    old = os.umask(0o022)
    try:
        cluster.start()
    finally:
        os.umask(old)
    node = cluster.nodes[0]
    try:
        cluster.leader()
        with Client(cluster.servers, tls=TLSConfig(**cluster.client_tls()),
                    token=cluster.admin_token()) as client:
            for i in range(12):  # enough entries for a snapshot
                client.create_job(JobSpec.single(f"j{i}", OnceSchedule(FAR)))
            wait_for(lambda: any(name.startswith("snapshot") for name in
                                 os.listdir(node.data_dir)), timeout_s=30, what="a snapshot")
            old = os.umask(0o022)
            try:
                backup = tmp_path / "out" / "state.backup"
                backup.parent.mkdir()
                client.create_backup(path=str(backup))
            finally:
                os.umask(old)
        loose = {p: oct(m) for p, m in _modes(node.data_dir).items() if m & 0o077}
        assert not loose, loose
        assert stat.S_IMODE(backup.stat().st_mode) == 0o600
        log = node.log_path.read_text()
        assert f"admin_token_file: {token_file} is readable by group and others (mode 0644)" \
            in log, log[-3000:]
    finally:
        cluster.stop()
