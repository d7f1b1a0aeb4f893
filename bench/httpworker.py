"""A process of HTTP workers for load generation: each long-polls `POST /v1/worker/lease`
(capacity 1) and completes every task the moment it is leased (`POST /v1/worker/complete`).

    python -m gnomon.bench.httpworker --url http://127.0.0.1:7601 --workers 100 --out h.json

Records, per task, (scheduled_for_ms, received_ms), and completions accepted per 100 ms, as
bench/rawworker.py does for stream workers. Stops after --max-s or when --stop-file appears;
then writes --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp


def wall_ms() -> int:
    return int(time.time() * 1000)


class Fleet:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stopping = False
        self.counts = {"leases": 0, "tasks": 0, "accepted": 0, "refused": 0, "errors": 0}
        self.assigns: list[list[int]] = []
        self.acks_per_100ms: dict[int, int] = {}

    async def worker(self, session: aiohttp.ClientSession, idx: int) -> None:
        url = self.args.url.rstrip("/") + "/v1/worker/"
        worker_id = f"{self.args.id}-{idx}"
        lease = {"workerId": worker_id, "queues": [self.args.queue], "capacity": 1,
                 "waitMs": self.args.wait_ms}
        while not self.stopping:
            try:
                async with session.post(url + "lease", json=lease) as r:
                    answer: dict[str, Any] = await r.json()
                self.counts["leases"] += 1
                for task in answer.get("tasks", []):
                    self.counts["tasks"] += 1
                    self.assigns.append([int(task.get("scheduledForMs", 0)), wall_ms()])
                    report = {"leaseId": task["leaseId"], "workerId": worker_id,
                              "fencingToken": task["fencingToken"]}
                    async with session.post(url + "complete", json=report) as r:
                        done = await r.json()
                    if done.get("accepted"):
                        self.counts["accepted"] += 1
                        bucket = wall_ms() // 100
                        self.acks_per_100ms[bucket] = self.acks_per_100ms.get(bucket, 0) + 1
                    else:
                        self.counts["refused"] += 1
            except (aiohttp.ClientError, TimeoutError, ValueError, KeyError):
                self.counts["errors"] += 1
                await asyncio.sleep(0.1)


async def main_async(args: argparse.Namespace) -> None:
    fleet = Fleet(args)
    stop_file = Path(args.stop_file) if args.stop_file else None
    timeout = aiohttp.ClientTimeout(total=args.wait_ms / 1000 + 30)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        tasks = [asyncio.create_task(fleet.worker(session, i)) for i in range(args.workers)]
        t_end = time.monotonic() + args.max_s
        while time.monotonic() < t_end and not (stop_file and stop_file.exists()):
            await asyncio.sleep(0.2)
        fleet.stopping = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    Path(args.out).write_text(json.dumps({"counts": fleet.counts, "assigns": fleet.assigns,
                                          "acks_per_100ms": fleet.acks_per_100ms}))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="the leader's HTTP address")
    p.add_argument("--workers", type=int, default=100)
    p.add_argument("--queue", default="default")
    p.add_argument("--wait-ms", type=int, default=10_000)
    p.add_argument("--id", default="h")
    p.add_argument("--max-s", type=float, default=300.0)
    p.add_argument("--stop-file", default="")
    p.add_argument("--out", required=True)
    asyncio.run(main_async(p.parse_args(argv)))


if __name__ == "__main__":
    main()
