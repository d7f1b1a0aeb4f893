"""A load process for the API scenario: `--clients` concurrent clients (one channel each) that
CreateJob (gnomon) or Put (etcd) in a loop until `--seconds` have passed.

    python -m gnomon.bench.apiload gnomon --target 127.0.0.1:P --clients 50 --seconds 10 --out f
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

import grpc

from gnomon.bench.load import interval_spec
from gnomon.v1 import api_pb2, api_pb2_grpc


async def _client(kind: str, target: str, idx: int, t_end: float, lat: list[float],
                  errors: dict[str, int]) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        if kind == "gnomon":
            stub = api_pb2_grpc.JobServiceStub(channel)
        else:
            from gnomon.bench.etcd_peer import PB, EtcdClient

            etcd = EtcdClient(target)
        i = 0
        tag = f"{os.getpid()}-{idx}"
        while time.monotonic() < t_end:
            t0 = time.perf_counter()
            try:
                if kind == "gnomon":
                    await stub.CreateJob(api_pb2.CreateJobRequest(
                        request_id=f"l-{tag}-{i}",
                        spec=interval_spec(f"l-{tag}-{i}", 3_600_000, 0)), timeout=10)
                else:
                    await etcd.put(PB["PutRequest"](key=f"bench/{tag}/{i}".encode(), value=b"x"),
                                   timeout=10)
                lat.append((time.perf_counter() - t0) * 1000)
            except grpc.aio.AioRpcError as exc:
                errors[exc.code().name] = errors.get(exc.code().name, 0) + 1
            i += 1
        if kind != "gnomon":
            await etcd.close()


async def _main(kind: str, target: str, clients: int, seconds: float) -> dict:
    lat: list[float] = []
    errors: dict[str, int] = {}
    t0 = time.monotonic()
    await asyncio.gather(*(_client(kind, target, i, t0 + seconds, lat, errors)
                           for i in range(clients)))
    return {"done": len(lat), "seconds": time.monotonic() - t0, "latency_ms": lat,
            "errors": errors}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=("gnomon", "etcd"))
    p.add_argument("--target", required=True)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    Path(a.out).write_text(json.dumps(asyncio.run(_main(a.kind, a.target, a.clients,
                                                        a.seconds))))


if __name__ == "__main__":
    main()
