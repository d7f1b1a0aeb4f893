"""Bytes per job and snapshot load time, in one process, with the node's own code.

    python -m gnomon.bench.job_memory [N] [--types]   # default 100,000

For two job shapes (a daily interval job with one task, and a 4-task DAG cron job on a
named queue and tenant), N jobs are created the way a node creates them: `CreateJobs`
commands encoded as Raft entries by `codec.batch_to_bytes`, decoded by
`codec.batch_from_bytes` and applied by `core.apply_batch` (so each job holds the objects a
replica holds after the API created it). Then the state is encoded into snapshot tables and
decoded again (what a restart holds). Per shape and stage: bytes per job (traced by
tracemalloc: allocated bytes, no fragmentation) and, for the restore, CPU seconds of
`state_codec.decode_tables` (GC off, as in `Replica.read_snapshot`). `--types` adds the
bytes per job by object type of the restored state (a walk from `State`). Figures are
printed and written as JSON to bench/results/job_memory-<N>.json.
"""

from __future__ import annotations

import gc
import json
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gnomon.node import codec
from gnomon.node.core import apply_batch, new_state
from gnomon.node.core.commands import Batch, CreateJobItem, CreateJobs
from gnomon.node.core.model import JobSpec, Schedule, State, TaskSpec
from gnomon.node.storage import state_codec

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
NOW = 1_796_000_000_000
RESULTS = Path(__file__).resolve().parent / "results"


def one_task(i: int, n: int) -> JobSpec:
    """The scale bench's job: daily interval, its own phase, one task on the default queue."""
    sched = Schedule(kind="interval", interval_ms=DAY_MS,
                     anchor_ms=NOW + HOUR_MS + (i * (23 * HOUR_MS)) // n)
    return JobSpec(tenant="default", name=f"s-{i}", schedule=sched,
                   tasks=(TaskSpec(name="main"),))


_CRONS = ("*/5 * * * *", "0 * * * *", "15 3 * * *", "0 0 * * 1")


def dag4(i: int, n: int) -> JobSpec:
    """A cron job of 4 tasks (a -> b, c -> d) on a tenant's queue; a few distinct crons."""
    tasks = (TaskSpec(name="extract", queue="etl"),
             TaskSpec(name="clean", queue="etl", depends_on=("extract",)),
             TaskSpec(name="enrich", queue="etl", depends_on=("extract",)),
             TaskSpec(name="load", queue="etl", depends_on=("clean", "enrich")))
    sched = Schedule(kind="cron", expression=_CRONS[i % len(_CRONS)], timezone="Europe/Paris")
    return JobSpec(tenant="acme", name=f"pipeline-{i}", schedule=sched, tasks=tasks)


SHAPES: dict[str, Callable[[int, int], JobSpec]] = {"1-task": one_task, "dag-4": dag4}


def apply_jobs(n: int, make: Callable[[int, int], JobSpec]) -> State:
    """N jobs through the Raft codec and apply, 1,000 per CreateJobs entry."""
    state = new_state()
    for start in range(0, n, 1000):
        items = tuple(CreateJobItem(make(i, n), NOW + HOUR_MS + i)
                      for i in range(start, min(n, start + 1000)))
        entry = codec.batch_to_bytes(Batch(now_ms=NOW, commands=(CreateJobs("", items),)))
        apply_batch(state, codec.batch_from_bytes(entry))
    return state


def _traced(build: Callable[[], Any]) -> tuple[Any, int]:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    out = build()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return out, after - before


def _decode(rows: dict[str, list]) -> State:
    gc.disable()
    try:
        return state_codec.decode_tables({name: iter(t) for name, t in rows.items()})
    finally:
        gc.enable()


def by_type(state: State, n: int) -> dict[str, float]:
    """Bytes per job by object type, reachable from `state` (each object counted once)."""
    seen: set[int] = set()
    sizes: Counter[str] = Counter()
    stack: list[object] = [state]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type):
            continue
        seen.add(id(obj))
        sizes[type(obj).__name__] += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return {k: round(v / n, 1) for k, v in sizes.most_common(16)}


def measure(n: int, shape: str, types: bool) -> dict[str, Any]:
    make = SHAPES[shape]
    t0 = time.process_time()
    state, applied = _traced(lambda: apply_jobs(n, make))
    apply_s = time.process_time() - t0
    rows = {name: list(t) for name, t in state_codec.encode_tables(state).items()}
    snapshot_bytes = sum(len(k) + len(v) for t in rows.values() for k, v in t)
    del state
    gc.collect()
    best = float("inf")
    for _ in range(2):
        gc.collect()
        t0 = time.process_time()
        restored = _decode(rows)
        best = min(best, time.process_time() - t0)
        del restored
    restored, restored_bytes = _traced(lambda: _decode(rows))
    out: dict[str, Any] = {
        "jobs": n, "shape": shape,
        "applied_bytes_per_job": round(applied / n, 1),
        "restored_bytes_per_job": round(restored_bytes / n, 1),
        "apply_cpu_s": round(apply_s, 2),
        "decode_cpu_s": round(best, 2),
        "decode_us_per_job": round(best / n * 1e6, 2),
        "snapshot_record_bytes_per_job": round(snapshot_bytes / n, 1),
    }
    if types:
        out["restored_by_type"] = by_type(restored, n)
    return out


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 100_000
    types = "--types" in sys.argv
    results = []
    for shape in SHAPES:
        r = measure(n, shape, types)
        results.append(r)
        print(f"{n:,} jobs, {shape}: {r['applied_bytes_per_job']:.0f} B/job applied, "
              f"{r['restored_bytes_per_job']:.0f} B/job restored; decode "
              f"{r['decode_cpu_s']:.2f} s CPU ({r['decode_us_per_job']:.1f} us/job); "
              f"snapshot records {r['snapshot_record_bytes_per_job']:.0f} B/job")
        if types:
            print("  restored, bytes per job by type:", r["restored_by_type"])
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"job_memory-{n}.json"
    path.write_text(json.dumps({"at": time.strftime("%Y-%m-%dT%H:%M:%S"), "results": results},
                               indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
