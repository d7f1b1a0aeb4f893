"""etcd 3.4 peer: a three-member cluster on loopback ports (Debian's etcd-server), and load
processes speaking etcd's v3 gRPC API (LeaseGrant, LeaseKeepAlive, Put, Status).

The few etcdserverpb messages needed are declared here with protobuf descriptors (field
numbers from etcd's rpc.proto), so no generated stubs or etcd client library are needed.

    python -m gnomon.bench.etcd_peer grant --endpoint 127.0.0.1:P --seconds 10 --out g.json
    python -m gnomon.bench.etcd_peer keepalive --endpoint 127.0.0.1:P --leases 1000 ...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _build() -> dict[str, Any]:
    fdp = descriptor_pb2.FileDescriptorProto(name="gnomon_bench_etcd.proto",
                                             package="etcdserverpb", syntax="proto3")

    def msg(name: str, *fields: tuple[str, int, int, str]) -> None:
        m = fdp.message_type.add(name=name)
        for fname, number, ftype, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=_F.LABEL_OPTIONAL)
            if type_name:
                f.type_name = type_name

    u64, i64, s, b, msg_t = _F.TYPE_UINT64, _F.TYPE_INT64, _F.TYPE_STRING, _F.TYPE_BYTES, \
        _F.TYPE_MESSAGE
    hdr = ".etcdserverpb.ResponseHeader"
    msg("ResponseHeader", ("cluster_id", 1, u64, ""), ("member_id", 2, u64, ""),
        ("revision", 3, i64, ""), ("raft_term", 4, u64, ""))
    msg("LeaseGrantRequest", ("TTL", 1, i64, ""), ("ID", 2, i64, ""))
    msg("LeaseGrantResponse", ("header", 1, msg_t, hdr), ("ID", 2, i64, ""), ("TTL", 3, i64, ""),
        ("error", 4, s, ""))
    msg("LeaseKeepAliveRequest", ("ID", 1, i64, ""))
    msg("LeaseKeepAliveResponse", ("header", 1, msg_t, hdr), ("ID", 2, i64, ""),
        ("TTL", 3, i64, ""))
    msg("PutRequest", ("key", 1, b, ""), ("value", 2, b, ""), ("lease", 3, i64, ""))
    msg("PutResponse", ("header", 1, msg_t, hdr))
    msg("StatusRequest")
    msg("StatusResponse", ("header", 1, msg_t, hdr), ("version", 2, s, ""),
        ("dbSize", 3, i64, ""), ("leader", 4, u64, ""), ("raftIndex", 5, u64, ""),
        ("raftTerm", 6, u64, ""))
    pool = descriptor_pool.DescriptorPool()
    fd = pool.Add(fdp)
    return {m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(
        f"etcdserverpb.{m.name}")) for m in fdp.message_type} | {"_fd": fd}


PB = _build()


class EtcdClient:
    """Async calls on one channel to one member."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self.channel = grpc.aio.insecure_channel(endpoint)
        ser = lambda m: m.SerializeToString()  # noqa: E731
        self.grant = self.channel.unary_unary(
            "/etcdserverpb.Lease/LeaseGrant", request_serializer=ser,
            response_deserializer=PB["LeaseGrantResponse"].FromString)
        self.keepalive = self.channel.stream_stream(
            "/etcdserverpb.Lease/LeaseKeepAlive", request_serializer=ser,
            response_deserializer=PB["LeaseKeepAliveResponse"].FromString)
        self.put = self.channel.unary_unary(
            "/etcdserverpb.KV/Put", request_serializer=ser,
            response_deserializer=PB["PutResponse"].FromString)
        self.status = self.channel.unary_unary(
            "/etcdserverpb.Maintenance/Status", request_serializer=ser,
            response_deserializer=PB["StatusResponse"].FromString)

    async def close(self) -> None:
        await self.channel.close()


# -- the cluster ------------------------------------------------------------------------------


@dataclass
class Member:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen | None = None
    member_id: int = 0

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"


@dataclass
class EtcdCluster:
    root: Path
    size: int = 3
    members: list[Member] = field(default_factory=list)

    @staticmethod
    def available() -> bool:
        return shutil.which("etcd") is not None

    def __post_init__(self) -> None:
        from gnomon.node.local.cluster import free_ports

        ports = free_ports(2 * self.size)
        for i in range(self.size):
            self.members.append(Member(f"e{i + 1}", ports[2 * i], ports[2 * i + 1],
                                       self.root / f"e{i + 1}", self.root / f"e{i + 1}.log"))

    def _args(self, m: Member, state: str) -> list[str]:
        initial = ",".join(f"{x.name}=http://127.0.0.1:{x.peer_port}" for x in self.members)
        return ["etcd", "--name", m.name, "--data-dir", str(m.data_dir),
                "--listen-client-urls", f"http://127.0.0.1:{m.client_port}",
                "--advertise-client-urls", f"http://127.0.0.1:{m.client_port}",
                "--listen-peer-urls", f"http://127.0.0.1:{m.peer_port}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{m.peer_port}",
                "--initial-cluster", initial, "--initial-cluster-state", state,
                "--initial-cluster-token", "gnomon-bench", "--logger", "zap",
                "--log-level", "error", "--enable-pprof=false"]

    def start(self) -> EtcdCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        for m in self.members:
            self.start_member(m, "new")
        self.wait_leader(timeout_s=30)
        return self

    def start_member(self, m: Member, state: str = "existing") -> None:
        log = open(m.log_path, "ab")  # noqa: SIM115 - owned by the child
        m.proc = subprocess.Popen(self._args(m, state), stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def alive(self) -> list[Member]:
        return [m for m in self.members if m.proc is not None and m.proc.poll() is None]

    def pids(self) -> dict[str, int]:
        return {m.name: m.proc.pid for m in self.alive()}

    def leader(self, timeout_s: float = 10.0) -> Member:
        return asyncio.run(self._leader(timeout_s))

    def wait_leader(self, timeout_s: float = 30.0) -> Member:
        return self.leader(timeout_s)

    async def _leader(self, timeout_s: float) -> Member:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for m in self.alive():
                c = EtcdClient(m.endpoint)
                try:
                    st = await c.status(PB["StatusRequest"](), timeout=1)
                    m.member_id = st.header.member_id
                    if st.leader and st.leader == st.header.member_id:
                        return m
                except grpc.aio.AioRpcError:
                    pass
                finally:
                    await c.close()
            await asyncio.sleep(0.05)
        raise TimeoutError("no etcd leader")

    def kill(self, m: Member) -> None:
        if m.proc is not None and m.proc.poll() is None:
            m.proc.kill()
            m.proc.wait()

    def stop(self) -> None:
        from gnomon.bench.cluster import terminate

        for m in self.members:
            terminate(m.proc)


async def first_put_after(endpoints: list[str], t0: float, deadline_s: float = 30.0
                          ) -> tuple[float, str]:
    """Seconds from monotonic `t0` until a Put succeeds on any of `endpoints` (tried every
    10 ms with a 200 ms timeout)."""
    clients = [EtcdClient(e) for e in endpoints]
    try:
        i = 0
        while time.monotonic() - t0 < deadline_s:
            c = clients[i % len(clients)]
            i += 1
            try:
                await c.put(PB["PutRequest"](key=b"bench/failover", value=b"x"), timeout=0.2)
                return time.monotonic() - t0, c.endpoint
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.01)
        return float("nan"), ""
    finally:
        for c in clients:
            await c.close()


# -- load processes -----------------------------------------------------------------------------


async def grant_load(endpoint: str, seconds: float, concurrency: int) -> dict[str, Any]:
    c = EtcdClient(endpoint)
    done, errors = 0, 0
    lat: list[float] = []
    t_end = time.monotonic() + seconds

    async def loop() -> None:
        nonlocal done, errors
        while time.monotonic() < t_end:
            t0 = time.perf_counter()
            try:
                await c.grant(PB["LeaseGrantRequest"](TTL=60), timeout=5)
                done += 1
                if len(lat) < 50_000:
                    lat.append((time.perf_counter() - t0) * 1000)
            except grpc.aio.AioRpcError:
                errors += 1

    t0 = time.monotonic()
    await asyncio.gather(*(loop() for _ in range(concurrency)))
    elapsed = time.monotonic() - t0
    await c.close()
    return {"done": done, "errors": errors, "seconds": elapsed, "latency_ms": lat}


async def keepalive_load(endpoint: str, seconds: float, leases: int, streams: int,
                         window: int) -> dict[str, Any]:
    c = EtcdClient(endpoint)
    ids = []
    for _ in range(leases):
        ids.append((await c.grant(PB["LeaseGrantRequest"](TTL=60), timeout=5)).ID)
    acks = 0
    t_end = time.monotonic() + seconds

    async def stream(k: int) -> None:
        nonlocal acks
        mine = ids[k::streams] or ids[:1]
        call = c.keepalive()
        sent = 0

        async def writer() -> None:
            nonlocal sent
            while time.monotonic() < t_end:
                if sent - acks_local[0] < window:
                    await call.write(PB["LeaseKeepAliveRequest"](ID=mine[sent % len(mine)]))
                    sent += 1
                else:
                    await asyncio.sleep(0)
                    await ack_event.wait()
                    ack_event.clear()
            await call.done_writing()

        acks_local = [0]
        ack_event = asyncio.Event()
        w = asyncio.create_task(writer())
        try:
            while time.monotonic() < t_end:
                msg = await call.read()
                if msg is grpc.aio.EOF:
                    break
                acks_local[0] += 1
                acks += 1
                ack_event.set()
        finally:
            w.cancel()
            call.cancel()

    t0 = time.monotonic()
    await asyncio.gather(*(stream(k) for k in range(streams)), return_exceptions=True)
    elapsed = time.monotonic() - t0
    await c.close()
    return {"acks": acks, "seconds": elapsed, "leases": leases, "streams": streams}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=("grant", "keepalive"))
    p.add_argument("--endpoint", required=True)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--leases", type=int, default=1000)
    p.add_argument("--streams", type=int, default=50)
    p.add_argument("--window", type=int, default=32)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    if a.mode == "grant":
        result = asyncio.run(grant_load(a.endpoint, a.seconds, a.concurrency))
    else:
        result = asyncio.run(keepalive_load(a.endpoint, a.seconds, a.leases, a.streams, a.window))
    Path(a.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
