"""GetStatus's digest is of the state at the applied index it answers with: both are read
under one lock. Read apart, 2 of 18 indexes came back with two different digests while
writes went on."""

from __future__ import annotations

import threading

from tests.support.http import call


def test_one_applied_index_has_one_digest_on_every_node_under_writes(cluster):
    leader = cluster.leader()
    stop = threading.Event()

    def write() -> None:
        for i in range(400):
            if stop.is_set():
                return
            spec = {"name": f"digest-{i}", "schedule": {"interval": {"intervalMs": "3600000"}},
                    "tasks": [{"name": "main"}]}
            call(leader.url, "POST", "/v1/jobs", {"spec": spec})

    writer = threading.Thread(target=write)
    writer.start()
    seen: dict[str, set[str]] = {}
    try:
        for _ in range(40):
            for node in cluster.nodes:
                st = call(node.url, "GET", "/v1/cluster?include_digest=true").json
                seen.setdefault(st["appliedIndex"], set()).add(st["stateDigest"])
    finally:
        stop.set()
        writer.join(timeout=60)
    torn = {index: digests for index, digests in seen.items() if len(digests) > 1}
    assert not torn, torn
    assert len(seen) > 10, seen  # the writes moved the index while the statuses were read
