"""CPU to decode a snapshot's tables of N jobs (`state_codec.decode_tables`, the bulk of a
restart at 1M jobs), in this process: for A/B runs of two checkouts.

    python -m gnomon.bench.decode_state [N]   # default 100,000; best of 3, GC off

The state is what N CreateJob commands leave (`scale.build_state`), encoded once by
`state_codec.encode_tables`.
"""

from __future__ import annotations

import gc
import sys
import time

from gnomon.bench.scale import build_state
from gnomon.node import state_codec


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    rows = {name: list(t) for name, t in
            state_codec.encode_tables(build_state(n, 1_796_000_000_000)).items()}
    best = float("inf")
    for _ in range(3):
        gc.collect()
        gc.disable()
        t0 = time.process_time()
        state_codec.decode_tables({name: iter(t) for name, t in rows.items()})
        best = min(best, time.process_time() - t0)
        gc.enable()
    print(f"{n:,} jobs: decode {best:.2f} s of CPU ({best / n * 1e6:.1f} us per job)")


if __name__ == "__main__":
    main()
