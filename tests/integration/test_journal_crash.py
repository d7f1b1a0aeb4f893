"""SIGKILL a process that appends to a DurableJournal: every acknowledged entry survives.

SIGKILL does not drop the page cache, so this checks the process-crash path (torn records,
recovery, continued appends); power loss is covered by the fsync discipline, not by this test.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pysyncobj.syncobj
import pytest
from pysyncobj import SyncObj, SyncObjConf, replicated

from gnomon.node.raft.journal import DurableJournal, patch_pysyncobj

pytestmark = pytest.mark.integration

CHILD = """
import sys
from gnomon.node.raft.journal import DurableJournal

def payload(i):
    return (b"%d," % i) * (1 + (i * 7919) % 20000)   # up to ~120 KB: large, tearable writes

j = DurableJournal(sys.argv[1])
i = j[-1][1] + 1 if len(j) else 1
for command, idx, term in j[:]:
    assert command == payload(idx), idx
print("ready", i - 1, flush=True)
while True:
    j.add(payload(i), i, 1)
    print(i, flush=True)   # acknowledged: add returned after fsync
    i += 1
"""

ROUNDS = 4
ACKS_PER_ROUND = 150
READ_DEADLINE_S = 20.0


def payload(i: int) -> bytes:
    return (b"%d," % i) * (1 + (i * 7919) % 20000)


def run_until_acks(path: Path, acks: int) -> int:
    """Start the child, read its acks until `acks` arrived, SIGKILL it; the last ack seen."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    last, seen, buf = -1, 0, b""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + READ_DEADLINE_S
    try:
        while seen < acks:
            remaining = deadline - time.monotonic()
            assert remaining > 0, "child too slow"
            if not sel.select(remaining):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            assert chunk, f"child exited: {proc.stderr.read().decode()}"
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.startswith(b"ready"):
                    continue
                last, seen = int(line), seen + 1
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
    return last


@pytest.mark.timeout(120)
def test_sigkill_mid_append_keeps_every_acknowledged_entry(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    for _ in range(ROUNDS):
        last_ack = run_until_acks(path, ACKS_PER_ROUND)
        j = DurableJournal(str(path))
        try:
            idxs = [e[1] for e in j[:]]
            assert idxs == list(range(1, len(idxs) + 1)), "not a clean prefix"
            assert len(idxs) >= last_ack, f"acknowledged entry {last_ack} lost"
            assert all(command == payload(idx) for command, idx, _ in j[:])
        finally:
            j.close()


# -- pysyncobj on top of DurableJournal ---------------------------------------------------------


class Counter(SyncObj):
    def __init__(self, addr: str, conf: SyncObjConf):
        super().__init__(addr, [], conf)
        self.value = 0

    @replicated
    def incr(self, by: int) -> int:
        self.value += by
        return self.value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_counter(data: Path, port: int) -> Counter:
    conf = SyncObjConf(
        journalFile=str(data / "raft.journal"),
        fullDumpFile=str(data / "raft.dump"),
        password="test",
        appendEntriesPeriod=0.01,
        raftMinTimeout=0.05,
        raftMaxTimeout=0.1,
        useFork=False,
        logCompactionMinEntries=10**9,
        logCompactionMinTime=10**9,
    )
    return Counter(f"127.0.0.1:{port}", conf)


@pytest.mark.timeout(60)
def test_pysyncobj_replays_its_state_from_durable_journal(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(pysyncobj.syncobj, "createJournal", pysyncobj.syncobj.createJournal)
    patch_pysyncobj()
    port = free_port()
    node = start_counter(tmp_path, port)
    try:
        for _ in range(20):
            node.incr(2, sync=True, timeout=10)
        term = node._getTerm()
    finally:
        node.destroy()
        node._SyncObj__thread.join(10)
    j = DurableJournal(str(tmp_path / "raft.journal"))  # the file pysyncobj wrote is ours
    assert len(j) >= 21 and j.getCurrentTerm() == term
    j.close()
    node = start_counter(tmp_path, port)
    try:
        assert node.incr(1, sync=True, timeout=10) == 41  # replayed 20 entries, then one more
        assert node._getTerm() > term
    finally:
        node.destroy()
        node._SyncObj__thread.join(10)
