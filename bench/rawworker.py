"""A lean worker process that speaks the raw worker protocol (grpc.aio, worker.proto) for load
generation: many streams per process, each completes every task the moment it is assigned.

    python -m gnomon.bench.rawworker --servers A,B,C --streams 4 --credits 200 --out w.json

Per stream: Hello -> Welcome -> Credits{n}; on Assign it records (scheduled_for, now) and
sends Complete at once, returning the credit; ReportAck counts a committed completion.
Heartbeats carry every lease not yet acknowledged, at the server's interval (or --heartbeat-s).
After a stream breaks it follows the `gnomon-leader` hint (else the next server), says Hello
with the leases whose completion was not acknowledged, and reports them again when resumed.
Stops by itself after --max-s, or when --stop-file appears; then writes --out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import time
from pathlib import Path

import grpc

from gnomon.v1 import worker_pb2, worker_pb2_grpc

W = worker_pb2


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Fleet:
    """The streams of one process and what they counted."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.servers = args.servers.split(",")
        self.leader = self.servers[0]
        self.stopping = False
        self.counts = {"assigns": 0, "acks": 0, "rejected": 0, "hb_sent": 0, "hb_acks": 0,
                       "sessions": 0, "reconnects": 0, "resumed": 0, "lost_leases": 0,
                       "cancels": 0, "errors": 0, "welcomed": 0}
        self.assigns: list[list] = []
        self.acks_per_100ms: dict[int, int] = {}
        self.assigns_per_100ms: dict[int, int] = {}
        self.hb_per_100ms: dict[int, int] = {}
        self.errors: dict[str, int] = {}
        self._channels: dict[tuple[str, int], grpc.aio.Channel] = {}

    def channel(self, addr: str, idx: int) -> grpc.aio.Channel:
        key = (addr, idx % self.args.channels)
        if key not in self._channels:
            self._channels[key] = grpc.aio.insecure_channel(addr, options=[
                ("grpc.keepalive_time_ms", 10_000), ("grpc.keepalive_timeout_ms", 5_000),
                ("grpc.http2.max_pings_without_data", 0)])
        return self._channels[key]

    def next_server(self, failed: str) -> None:
        if self.leader == failed:
            i = self.servers.index(failed) if failed in self.servers else -1
            self.leader = self.servers[(i + 1) % len(self.servers)]

    def error(self, what: str) -> None:
        self.counts["errors"] += 1
        self.errors[what] = self.errors.get(what, 0) + 1

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()


class StreamEnded(Exception):
    """The stream ended with a status (or before Welcome)."""

    def __init__(self, code: grpc.StatusCode, metadata) -> None:
        super().__init__(code.name)
        self.code = code
        self.metadata = metadata


class Stream:
    def __init__(self, fleet: Fleet, idx: int):
        self.fleet = fleet
        self.idx = idx
        self.worker_id = f"{fleet.args.id}-{idx}"
        # token -> LeaseRef completed by us, not yet acknowledged (re-sent after a reconnect)
        self.unacked: dict[int, W.LeaseRef] = {}
        self.out: asyncio.Queue | None = None
        self.owed = 0
        self.hb_interval_s = fleet.args.heartbeat_s or 2.0
        self.in_session = False
        self.welcome_ms = 0

    def send(self, msg: W.WorkerMessage) -> None:
        if self.out is not None:
            self.out.put_nowait(msg)

    async def run(self) -> None:
        f = self.fleet
        attempt = 0
        while not f.stopping:
            addr = f.leader
            call = worker_pb2_grpc.WorkerServiceStub(f.channel(addr, self.idx)).Connect()
            try:
                await self.session(call)
                attempt = 0
            except (grpc.aio.AioRpcError, StreamEnded) as exc:
                if f.stopping:
                    break
                if isinstance(exc, StreamEnded):
                    code, metadata = exc.code, exc.metadata
                else:
                    code, metadata = exc.code(), exc.trailing_metadata()
                hint = dict(metadata or ()).get("gnomon-leader")
                if hint:
                    f.leader = hint
                else:
                    f.next_server(addr)
                    f.error(code.name)
            except asyncio.CancelledError:
                call.cancel()
                raise
            finally:
                if self.in_session:
                    f.counts["welcomed"] -= 1
                self.in_session = False
                call.cancel()
            if f.stopping:
                break
            f.counts["reconnects"] += 1
            attempt += 1
            await asyncio.sleep(min(2.0, 0.05 * 2 ** min(attempt, 5)) * (0.5 + random.random()))

    async def session(self, call) -> None:
        f = self.fleet
        await call.write(W.WorkerMessage(hello=W.Hello(
            worker_id=self.worker_id, queues=[f.args.queue], held=list(self.unacked.values()),
            accepts_batches=f.args.batches)))
        first = await call.read()
        if first is grpc.aio.EOF or first.WhichOneof("msg") != "welcome":
            raise StreamEnded(await call.code(), await call.trailing_metadata())
        welcome = first.welcome
        if not f.args.heartbeat_s and welcome.heartbeat_interval_ms:
            self.hb_interval_s = welcome.heartbeat_interval_ms / 1000
        resumed = set(welcome.resumed_tokens)
        f.counts["resumed"] += len(resumed & set(self.unacked))
        f.counts["lost_leases"] += len(set(self.unacked) - resumed)
        self.unacked = {t: r for t, r in self.unacked.items() if t in resumed}
        f.counts["sessions"] += 1
        f.counts["welcomed"] += 1
        self.welcome_ms = wall_ms()
        self.in_session = True
        self.out = asyncio.Queue()
        for ref in self.unacked.values():
            self.send(W.WorkerMessage(complete=W.Complete(lease=ref)))
        if f.args.credits and not f.stopping:
            self.send(W.WorkerMessage(credits=W.Credits(credits=f.args.credits)))
        writer = asyncio.create_task(self.writer(call))
        beat = asyncio.create_task(self.heartbeats())
        try:
            await self.reader(call)
        finally:
            writer.cancel()
            beat.cancel()
            self.out = None
        code = await call.code()
        if not f.stopping:
            raise StreamEnded(code, await call.trailing_metadata())

    async def writer(self, call) -> None:
        q = self.out
        while True:
            msg = await q.get()
            if self.fleet.args.batches and not q.empty():
                for out in _coalesced(msg, q):
                    await call.write(out)
            else:
                await call.write(msg)
            if q.empty() and self.owed and not self.fleet.stopping:
                n, self.owed = self.owed, 0
                await call.write(W.WorkerMessage(credits=W.Credits(credits=n)))

    async def heartbeats(self) -> None:
        f = self.fleet
        await asyncio.sleep(self.hb_interval_s * random.random())
        while True:
            self.send(W.WorkerMessage(heartbeat=W.Heartbeat(leases=list(self.unacked.values()))))
            f.counts["hb_sent"] += 1
            await asyncio.sleep(self.hb_interval_s)

    async def reader(self, call) -> None:
        f = self.fleet
        record = f.args.record
        while True:
            msg = await call.read()
            if msg is grpc.aio.EOF:
                return
            kind = msg.WhichOneof("msg")
            if kind == "batch":
                for a in msg.batch.assigns:
                    self.on_assign(a, record)
                for ack in msg.batch.report_acks:
                    self.on_ack(ack)
            elif kind == "assign":
                self.on_assign(msg.assign, record)
            elif kind == "report_ack":
                self.on_ack(msg.report_ack)
            elif kind == "heartbeat_ack":
                f.counts["hb_acks"] += 1
                b = wall_ms() // 100
                f.hb_per_100ms[b] = f.hb_per_100ms.get(b, 0) + 1
            elif kind == "cancel":
                f.counts["cancels"] += 1

    def on_assign(self, a, record: str) -> None:
        f = self.fleet
        now = wall_ms()
        ref = a.lease
        f.counts["assigns"] += 1
        b = now // 100
        f.assigns_per_100ms[b] = f.assigns_per_100ms.get(b, 0) + 1
        if record == "lateness":
            f.assigns.append([a.scheduled_for_ms, now, a.attempt])
        elif record == "full":
            f.assigns.append([a.scheduled_for_ms, now, a.attempt, ref.run_id,
                              ref.fencing_token, self.welcome_ms])
        self.unacked[ref.fencing_token] = ref
        self.send(W.WorkerMessage(complete=W.Complete(lease=ref)))
        self.owed += 1

    def on_ack(self, ack) -> None:
        f = self.fleet
        if ack.accepted:
            f.counts["acks"] += 1
            b = wall_ms() // 100
            f.acks_per_100ms[b] = f.acks_per_100ms.get(b, 0) + 1
            self.unacked.pop(ack.lease.fencing_token, None)
        elif "report again" in ack.detail:
            f.error("report_not_committed")
            self.send(W.WorkerMessage(complete=W.Complete(lease=ack.lease)))
        else:
            f.counts["rejected"] += 1
            f.error("rejected: " + re.sub(r"'j\d+@\d+'|\d+", "N", ack.detail)[:90])
            self.unacked.pop(ack.lease.fencing_token, None)


# Completes merged into one Reports message at most.
_MAX_REPORTS = 256


def _coalesced(first, q: asyncio.Queue) -> list:
    """`first` and what else is queued now, in order, consecutive Completes merged into
    one Reports message each."""
    out, completes, msg = [], [], first
    while True:
        if msg.HasField("complete") and len(completes) < _MAX_REPORTS:
            completes.append(msg.complete)
        else:
            if completes:
                out.append(_reports(completes))
            completes = [msg.complete] if msg.HasField("complete") else []
            if not completes:
                out.append(msg)
        if q.empty():
            break
        msg = q.get_nowait()
    if completes:
        out.append(_reports(completes))
    return out


def _reports(completes: list):
    if len(completes) == 1:
        return W.WorkerMessage(complete=completes[0])
    return W.WorkerMessage(reports=W.Reports(completes=completes))


async def main_async(args: argparse.Namespace) -> None:
    fleet = Fleet(args)
    streams = [Stream(fleet, i) for i in range(args.streams)]
    stop_file = Path(args.stop_file) if args.stop_file else None
    t_end = time.monotonic() + args.max_s

    async def start(s: Stream, delay: float) -> None:
        await asyncio.sleep(delay)
        await s.run()

    tasks = [asyncio.create_task(start(s, i / args.connect_rate)) for i, s in
             enumerate(streams)]

    def progress() -> None:
        if args.progress:
            tmp = args.progress + ".tmp"
            Path(tmp).write_text(json.dumps(fleet.counts))
            os.replace(tmp, args.progress)

    while time.monotonic() < t_end and not (stop_file and stop_file.exists()):
        progress()
        await asyncio.sleep(0.2)
    # Stop: no more credits; let the acknowledgements of sent completions arrive.
    fleet.stopping = True
    drain_end = time.monotonic() + args.drain_s
    while time.monotonic() < drain_end and any(s.unacked for s in streams):
        await asyncio.sleep(0.05)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    fleet.counts["unacked_at_end"] = sum(len(s.unacked) for s in streams)
    fleet.counts["welcomed"] = 0
    progress()
    await fleet.close()
    Path(args.out).write_text(json.dumps({
        "counts": fleet.counts, "errors": fleet.errors, "assigns": fleet.assigns,
        "acks_per_100ms": fleet.acks_per_100ms, "assigns_per_100ms": fleet.assigns_per_100ms,
        "hb_per_100ms": fleet.hb_per_100ms,
    }))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", required=True)
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--channels", type=int, default=0, help="connections (0: one per stream)")
    p.add_argument("--credits", type=int, default=200)
    p.add_argument("--queue", default="default")
    p.add_argument("--no-batches", dest="batches", action="store_false",
                   help="one message per Assign/ack/Complete (no ServerBatch, no Reports)")
    p.add_argument("--record", choices=("none", "lateness", "full"), default="lateness")
    p.add_argument("--heartbeat-s", type=float, default=0.0, help="0: the server's interval")
    p.add_argument("--connect-rate", type=float, default=500.0, help="new streams per second")
    p.add_argument("--max-s", type=float, default=300.0)
    p.add_argument("--drain-s", type=float, default=3.0)
    p.add_argument("--id", default=f"raw{os.getpid()}")
    p.add_argument("--out", required=True)
    p.add_argument("--progress", default="")
    p.add_argument("--stop-file", default="")
    args = p.parse_args(argv)
    args.channels = args.channels or args.streams
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
