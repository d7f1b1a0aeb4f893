"""A worker process inside its own network namespace (started by the runner).

`--mode sdk`: gnomon's worker SDK (`gnomon.client.Worker`) with two tasks, `fire` (queue fire,
short) and `hold` (queue lease, longer than several heartbeats). Each reports its effects to
the witness with its run id, fencing token, idempotency key and worker id, and the worker
forwards every ReportAck (what the cluster said about a completion) to the witness.

`--mode zombie`: a protocol-level worker that does NOT self-fence: it keeps running a task
after its lease was revoked or lapsed and always reports the completion with the token it was
given. It models a stalled or buggy worker; only the cluster's token check stands between it
and a stale completion (promise 3).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import queue
import random
import threading
import time
import urllib.request
from typing import Any

import grpc
import grpc.aio

from gnomon.client import TaskContext, Worker, task
from gnomon.client._transport import leader_hint
from gnomon.v1 import worker_pb2, worker_pb2_grpc

log = logging.getLogger("gnomon.jepsen.worker")

FIRE_QUEUE = "fire"
LEASE_QUEUE = "lease"
MAX_RESENDS = 8


def post(witness: str, path: str, body: dict[str, Any], attempts: int = 5) -> dict[str, Any]:
    data = json.dumps(body).encode()
    last: Exception | None = None
    for i in range(attempts):
        req = urllib.request.Request(witness + path, data=data,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=3) as resp:
                return json.loads(resp.read() or b"{}")
        except OSError as exc:
            last = exc
            time.sleep(0.05 * (i + 1))
    raise RuntimeError(f"witness {witness}{path} unreachable: {last!r}")


class Reporter:
    """Posts to the witness from a thread, so the worker's event loop never waits on HTTP."""

    def __init__(self, witness: str):
        self.witness = witness
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._run, name="reporter", daemon=True).start()

    def send(self, path: str, body: dict[str, Any]) -> None:
        self._queue.put((path, body))

    def _run(self) -> None:
        while True:
            path, body = self._queue.get()
            try:
                post(self.witness, path, body)
            except RuntimeError as exc:
                log.warning("%s", exc)


def effect_body(ctx: TaskContext, kind: str) -> dict[str, Any]:
    return {"kind": kind, "job_id": ctx.job_id, "scheduled_for_ms": ctx.scheduled_for_ms,
            "run_id": ctx.run_id, "task": ctx.task_name, "fencing_token": ctx.fencing_token,
            "idempotency_key": ctx.idempotency_key, "worker_id": ctx.worker_id,
            "attempt": ctx.attempt}


# -- SDK mode --------------------------------------------------------------------------------


def sdk_tasks(witness: str, rng: random.Random) -> list:
    @task(name="fire", queue=FIRE_QUEUE)
    def fire(ctx: TaskContext) -> dict:
        post(witness, "/begin", effect_body(ctx, "begin"))
        if ctx.wait_cancelled(rng.uniform(0.1, 0.5)):
            raise RuntimeError("cancelled before the effect")
        reply = post(witness, "/effect", effect_body(ctx, "fire"))
        return {"witness_accepted": reply["accepted"]}

    @task(name="hold", queue=LEASE_QUEUE)
    def hold(ctx: TaskContext) -> dict:
        post(witness, "/begin", effect_body(ctx, "begin"))
        post(witness, "/effect", effect_body(ctx, "lease-start"))
        duration = (ctx.json() or {}).get("duration_ms", 3000) / 1000
        if ctx.wait_cancelled(duration):
            raise RuntimeError("lease lost while holding")
        reply = post(witness, "/effect", effect_body(ctx, "lease-end"))
        if not reply["accepted"]:
            raise RuntimeError(f"fenced out by the witness (max token {reply['max_token']})")
        return {"witness_accepted": True}

    return [fire, hold]


class ObservedWorker(Worker):
    """The SDK worker, forwarding each ReportAck to the witness (a private hook of the SDK;
    checked at start-up so a rename fails loudly)."""

    reporter: Reporter

    def _on_report_ack(self, ack: worker_pb2.ReportAck) -> None:
        self.reporter.send("/ack", {
            "run_id": ack.lease.run_id, "task": ack.lease.task_name,
            "fencing_token": ack.lease.fencing_token, "worker_id": self.worker_id,
            "accepted": ack.accepted, "detail": ack.detail,
        })
        super()._on_report_ack(ack)


async def run_sdk(args: argparse.Namespace) -> None:
    if not callable(getattr(Worker, "_on_report_ack", None)):
        raise SystemExit("gnomon.client.Worker._on_report_ack is gone: update jepsen/workerproc")
    rng = random.Random(args.seed)
    queues = args.queues.split(",")
    tasks = [t for t in sdk_tasks(args.witness, rng) if t.queue in queues]
    worker = ObservedWorker(args.servers.split(","), tasks=tasks,
                            queues=queues, worker_id=args.worker_id,
                            max_concurrency=args.concurrency, shutdown_grace_s=1.0)
    worker.reporter = Reporter(args.witness)
    post(args.witness, "/hello", {"worker_id": args.worker_id, "mode": "sdk"})
    await worker.run()


# -- zombie mode -----------------------------------------------------------------------------


class Zombie:
    """Speaks the worker protocol by hand; never self-fences; always reports."""

    def __init__(self, args: argparse.Namespace):
        self.servers = args.servers.split(",")
        self.worker_id = args.worker_id
        self.witness = args.witness
        self.queues = args.queues.split(",")
        self.reporter = Reporter(args.witness)
        self.held: dict[int, worker_pb2.Assign] = {}
        # Tasks that finished but whose report no ReportAck answered: sent again on reconnect.
        self.finished: set[int] = set()
        self.resends: dict[int, int] = {}
        self.call: grpc.aio.StreamStreamCall | None = None
        self.connected = asyncio.Event()
        self.hb_interval = 0.5
        self.credits = 4
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()

    def _spawn(self, coro) -> None:
        # The loop keeps only weak references to tasks: hold them until they finish.
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("zombie task failed", exc_info=task.exception())

    async def run(self) -> None:
        post(self.witness, "/hello", {"worker_id": self.worker_id, "mode": "zombie"})
        index, preferred = 0, None
        while True:
            addr = preferred or self.servers[index % len(self.servers)]
            async with grpc.aio.insecure_channel(addr) as channel:
                try:
                    await self._session(worker_pb2_grpc.WorkerServiceStub(channel))
                    preferred = None
                except grpc.aio.AioRpcError as exc:
                    hint = leader_hint(exc)
                    preferred = hint if hint and hint != addr else None
                    if preferred is None:
                        index += 1
                finally:
                    self.call = None
                    self.connected.clear()
            await asyncio.sleep(0.2)

    async def _session(self, stub: worker_pb2_grpc.WorkerServiceStub) -> None:
        call = stub.Connect()
        held = [a.lease for a in self.held.values()]
        await call.write(worker_pb2.WorkerMessage(hello=worker_pb2.Hello(
            worker_id=self.worker_id, queues=self.queues, held=held)))
        first = await asyncio.wait_for(call.read(), 5)
        if first is grpc.aio.EOF or first.WhichOneof("msg") != "welcome":
            call.cancel()
            return
        self.hb_interval = max(0.1, first.welcome.heartbeat_interval_ms / 1000)
        self.call = call
        self.connected.set()
        outstanding = self.credits - len(self.held)
        if outstanding > 0:
            await self._write(worker_pb2.WorkerMessage(credits=worker_pb2.Credits(
                credits=outstanding)))
        for token in sorted(self.finished):
            if token in self.held:
                self.resends.pop(token, None)
                self._spawn(self._report(self.held[token]))
        beat = asyncio.create_task(self._heartbeats(call))
        try:
            while True:
                msg = await call.read()
                if msg is grpc.aio.EOF:
                    return
                kind = msg.WhichOneof("msg")
                if kind == "assign" and msg.assign.lease.fencing_token not in self.held:
                    self.held[msg.assign.lease.fencing_token] = msg.assign
                    log.info("assigned %s token %d", msg.assign.lease.run_id,
                             msg.assign.lease.fencing_token)
                    self._spawn(self._execute(msg.assign))
                elif kind == "report_ack":
                    self._on_ack(msg.report_ack)
                # heartbeat acks, revocations and cancels are ignored: that is the point.
        finally:
            beat.cancel()
            call.cancel()

    async def _write(self, msg: worker_pb2.WorkerMessage) -> bool:
        async with self._write_lock:
            call = self.call
            if call is None:
                return False
            try:
                await call.write(msg)
                return True
            except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                return False

    async def _heartbeats(self, call: grpc.aio.StreamStreamCall) -> None:
        while self.call is call:
            await asyncio.sleep(self.hb_interval)
            leases = [a.lease for a in self.held.values()]
            await self._write(worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat(
                leases=leases)))

    async def _execute(self, assign: worker_pb2.Assign) -> None:
        body = {"job_id": assign.job_id, "scheduled_for_ms": assign.scheduled_for_ms,
                "run_id": assign.lease.run_id, "task": assign.lease.task_name,
                "fencing_token": assign.lease.fencing_token,
                "idempotency_key": assign.idempotency_key, "worker_id": self.worker_id,
                "attempt": assign.attempt}
        try:
            await asyncio.to_thread(post, self.witness, "/begin", {**body, "kind": "begin"})
            await asyncio.to_thread(post, self.witness, "/effect", {**body, "kind": "lease-start"})
            payload = json.loads(assign.payload or b"{}")
            await asyncio.sleep(payload.get("duration_ms", 3000) / 1000)
            await asyncio.to_thread(post, self.witness, "/effect", {**body, "kind": "lease-end"})
        except RuntimeError as exc:
            log.warning("zombie effect failed: %s", exc)
        self.finished.add(assign.lease.fencing_token)
        await self._report(assign)

    async def _report(self, assign: worker_pb2.Assign, delay_s: float = 0.0) -> None:
        await asyncio.sleep(delay_s)
        msg = worker_pb2.WorkerMessage(complete=worker_pb2.Complete(lease=assign.lease,
                                                                     result=b"zombie"))
        for _ in range(100):
            await self.connected.wait()
            if await self._write(msg):
                log.info("reported %s token %d", assign.lease.run_id, assign.lease.fencing_token)
                return
            await asyncio.sleep(0.2)
        log.error("could not report %s token %d", assign.lease.run_id,
                  assign.lease.fencing_token)

    def _on_ack(self, ack: worker_pb2.ReportAck) -> None:
        token = ack.lease.fencing_token
        log.info("report for %s token %d: accepted=%s %s", ack.lease.run_id, token,
                 ack.accepted, ack.detail)
        self.reporter.send("/ack", {"run_id": ack.lease.run_id, "task": ack.lease.task_name,
                                    "fencing_token": token, "worker_id": self.worker_id,
                                    "accepted": ack.accepted, "detail": ack.detail})
        if ack.accepted or not ack.retry:
            self.finished.discard(token)
            if self.held.pop(token, None) is not None:
                self._spawn(self._write(worker_pb2.WorkerMessage(
                    credits=worker_pb2.Credits(credits=1))))
        else:
            # Not committed (leader change, overload): again after a pause, a bounded number
            # of times; after that only a reconnect sends it again.
            assign = self.held.get(token)
            self.resends[token] = self.resends.get(token, 0) + 1
            if assign is not None and self.resends[token] <= MAX_RESENDS:
                self._spawn(self._report(assign, delay_s=min(2.0, 0.1 * 2 ** self.resends[token])))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="gnomon-jepsen-worker")
    parser.add_argument("--mode", choices=("sdk", "zombie"), default="sdk")
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--servers", required=True)
    parser.add_argument("--witness", required=True)
    parser.add_argument("--queues", default=f"{FIRE_QUEUE},{LEASE_QUEUE}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=8, help="SDK mode: tasks at once")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s {args.worker_id} %(levelname)s %(name)s: %(message)s")
    runner = run_sdk(args) if args.mode == "sdk" else Zombie(args).run()
    asyncio.run(runner)


if __name__ == "__main__":
    main()
