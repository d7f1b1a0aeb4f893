"""Same log, another process, another hash seed => same digests (ARCHITECTURE.md §8).

Hypothesis runs of the core state machine are recorded as encoded Raft batches; a child
interpreter started with a different PYTHONHASHSEED decodes and applies them from a fresh
state and prints the digest (and a hash of replies and effects) at checkpoints. Any iteration
over a set, or any other hash-order dependence in core or codec, shows up as a difference.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from gnomon.node.core.results import Effects, Reply
from tests.property.core_checks import budget
from tests.property.core_machine import CoreMachine

REPO = Path(__file__).resolve().parents[2]
CHECKPOINT_EVERY = 5
_U32 = struct.Struct(">I")

# Runs in the child: read the logs, replay each from a fresh state, print checkpoints.
CHILD = r"""
import hashlib, json, struct, sys
from gnomon.node import codec
from gnomon.node.core import apply_batch, digest, new_state

EVERY = int(sys.argv[2])
U32 = struct.Struct(">I")
data = open(sys.argv[1], "rb").read()
pos = 0

def u32():
    global pos
    (value,) = U32.unpack_from(data, pos)
    pos += U32.size
    return value

out = {"hash_probe": hash("gnomon"), "logs": []}
for _ in range(u32()):
    state, outcomes, checkpoints = new_state(), hashlib.sha256(), {}
    count = u32()
    for i in range(count):
        size = u32()
        batch = codec.batch_from_bytes(data[pos:pos + size])
        pos += size
        replies, effects = apply_batch(state, batch)
        outcomes.update(repr((replies, effects)).encode())
        if i % EVERY == EVERY - 1 or i == count - 1:
            checkpoints[i] = [digest(state), outcomes.hexdigest()]
    out["logs"].append(checkpoints)
print(json.dumps(out))
"""


class RecordingMachine(CoreMachine):
    """CoreMachine that also hashes replies and effects and hands its log over on teardown."""

    recorded: list[tuple[list[bytes], dict[int, list[str]]]] = []

    def __init__(self) -> None:
        self.outcomes = hashlib.sha256()
        self.checkpoints: dict[int, list[str]] = {}
        super().__init__()

    def propose(self, *commands: object, now: int | None = None) -> list[Reply]:
        replies = super().propose(*commands, now=now)
        effects: Effects = self.last_effects
        self.outcomes.update(repr((replies, effects)).encode())
        self.checkpoints[len(self.log) - 1] = [self.digests[-1], self.outcomes.hexdigest()]
        return replies

    def teardown(self) -> None:
        super().teardown()
        last = len(self.log) - 1
        wanted = {i: v for i, v in self.checkpoints.items()
                  if i % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1 or i == last}
        RecordingMachine.recorded.append((self.log, wanted))


def record_logs() -> list[tuple[list[bytes], dict[int, list[str]]]]:
    RecordingMachine.recorded = []
    run_state_machine_as_test(RecordingMachine, settings=settings(
        max_examples=budget(60) // 6,
        stateful_step_count=80,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    ))
    return RecordingMachine.recorded


def write_logs(path: Path, logs: list[list[bytes]]) -> None:
    parts = [_U32.pack(len(logs))]
    for log in logs:
        parts.append(_U32.pack(len(log)))
        for data in log:
            parts += [_U32.pack(len(data)), data]
    path.write_bytes(b"".join(parts))


def other_hash_seed() -> str:
    return "54321" if os.environ.get("PYTHONHASHSEED") == "12345" else "12345"


def replay_in_child(path: Path) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": other_hash_seed()}
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), str(CHECKPOINT_EVERY)],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_another_process_with_another_hash_seed_computes_the_same_digests(tmp_path):
    recorded = record_logs()
    assert len(recorded) >= 5 and sum(len(log) for log, _ in recorded) > 200
    path = tmp_path / "logs.bin"
    write_logs(path, [log for log, _ in recorded])
    child = replay_in_child(path)
    # The premise: string hashing (set and dict-of-str layout) differs between the processes.
    assert child["hash_probe"] != hash("gnomon")
    assert len(child["logs"]) == len(recorded)
    for n, ((_, want), got) in enumerate(zip(recorded, child["logs"], strict=True)):
        got = {int(i): v for i, v in got.items()}
        assert sorted(got) == sorted(want), f"log {n}: checkpoints differ"
        for i in sorted(want):
            assert got[i] == want[i], f"log {n}: replicas diverge by batch {i}"
