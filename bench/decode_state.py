"""CPU to load a snapshot of N jobs in this process, for A/B runs of two checkouts:
`state_codec.decode_tables` alone (best of 3, GC off), then the node's own
`Replica.read_snapshot` of a file written by `Replica.write_snapshot` (verify + decode +
freeze: the bulk of a restart at 1M jobs).

    python -m gnomon.bench.decode_state [N]   # default 100,000

The state is what N CreateJob commands leave (`scale.build_state`).
"""

from __future__ import annotations

import gc
import sys
import tempfile
import time
from pathlib import Path

from gnomon.bench.scale import build_state
from gnomon.node.replica import Replica
from gnomon.node.storage import state_codec
from gnomon.node.storage.history import HistoryStore
from gnomon.node.storage.history_sink import HistorySink


def _decode_s(state) -> float:
    rows = {name: list(t) for name, t in state_codec.encode_tables(state).items()}
    best = float("inf")
    for _ in range(3):
        gc.collect()
        gc.disable()
        t0 = time.process_time()
        state_codec.decode_tables({name: iter(t) for name, t in rows.items()})
        best = min(best, time.process_time() - t0)
        gc.enable()
    return best


def _read_snapshot_s(state, root: Path) -> float:
    (root / "history").mkdir()
    history = HistorySink(HistoryStore(str(root / "history"), map_size=64 << 20))
    try:
        replica = Replica(history, crash=lambda reason: None)
        replica.state = state
        path = str(root / "snapshot.lmdb")
        replica.write_snapshot(path, ((b"", 5, 2), {}))
        replica.state = None
        gc.collect()
        t0 = time.process_time()
        replica.read_snapshot(path)
        return time.process_time() - t0
    finally:
        history.close()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    state = build_state(n, 1_796_000_000_000)
    decode = _decode_s(state)
    print(f"{n:,} jobs: decode_tables {decode:.2f} s of CPU ({decode / n * 1e6:.1f} us per job)")
    with tempfile.TemporaryDirectory(prefix="gnomon-decode-") as tmp:
        read = _read_snapshot_s(state, Path(tmp))
    print(f"{n:,} jobs: Replica.read_snapshot {read:.2f} s of CPU")


if __name__ == "__main__":
    main()
