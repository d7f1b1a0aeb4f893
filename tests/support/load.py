"""Load for operator tests (rolling restart, membership changes): an SDK worker that counts
executions per run, a writer of acknowledged jobs, a ticking job, and the checks that nothing
acknowledged was lost and no fire was lost or doubled."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from dataclasses import dataclass

import grpc

from gnomon.client import (
    AlreadyExists,
    Client,
    GnomonError,
    IntervalSchedule,
    JobSpec,
    OnceSchedule,
    RetryPolicy,
    RunState,
    TaskSpec,
    Worker,
    task,
)
from gnomon.node.local.cluster import LocalCluster, wait_for
from gnomon.v1 import api_pb2, api_pb2_grpc

FAR_FUTURE_MS = 4_102_444_800_000


class WorkerThread:
    """An SDK worker on its own loop thread; counts executions per run id."""

    def __init__(self, servers: str, queue: str) -> None:
        self.executions: Counter = Counter()
        self._stop = threading.Event()
        lock = threading.Lock()

        @task(name="main", queue=queue)
        def main(ctx) -> str:
            with lock:
                self.executions[ctx.run_id] += 1
            return "ok"

        async def serve() -> None:
            async with Worker(servers, tasks=[main], worker_id="roller", shutdown_grace_s=5,
                              reconnect_max_s=0.5):
                while not self._stop.is_set():
                    await asyncio.sleep(0.05)

        self._thread = threading.Thread(target=lambda: asyncio.run(serve()), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


class Writer:
    """Creates jobs one after another; remembers those whose creation was acknowledged."""

    def __init__(self, servers: str) -> None:
        self.acked: list[str] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(servers,), daemon=True)
        self._thread.start()

    def _run(self, servers: str) -> None:
        with Client(servers, timeout_s=30) as client:
            i = 0
            while not self._stop.is_set():
                name = f"load-{i}"
                spec = JobSpec(name=name, schedule=OnceSchedule(at_ms=FAR_FUTURE_MS),
                               tasks=[TaskSpec(name="main", queue="never")], paused=True)
                try:
                    client.create_job(spec, request_id=f"roll-{i}")
                    self.acked.append(name)
                except AlreadyExists:  # an earlier attempt of the same request committed
                    self.acked.append(name)
                except GnomonError as exc:
                    self.errors.append(f"{name}: {exc}")
                i += 1
                self._stop.wait(0.05)  # about 20 writes/s: load, not a flood

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def status(addr: str):
    # A fresh channel per probe: a channel refused while the node restarted backs off for
    # seconds before it dials again.
    with grpc.insecure_channel(addr) as channel:
        return api_pb2_grpc.ClusterServiceStub(channel).GetStatus(api_pb2.GetStatusRequest(),
                                                                  timeout=2)


def caught_up(c: LocalCluster, node_id: str) -> bool:
    target = status(c.leader().grpc_addr).commit_index
    return status(c.node(node_id).grpc_addr).applied_index >= target


@dataclass
class LoadOutcome:
    writes_acked: int
    lost_writes: list[str]
    write_errors: list[str]
    fires: int
    span_s: float
    lost_fires: list[int]
    doubled: dict[str, int]
    not_succeeded: list[str]

    def line(self, what: str) -> str:
        return (f"{what}: {self.writes_acked} writes acknowledged, {len(self.lost_writes)} "
                f"lost, {len(self.write_errors)} failed calls; {self.fires} fires over "
                f"{self.span_s:.1f}s, lost {len(self.lost_fires)}, doubled {len(self.doubled)}, "
                f"not succeeded {len(self.not_succeeded)}")


class TickLoad:
    """A job firing every `interval_ms` on queue "roll", its worker, and a writer: start it,
    change the cluster, then `finish()` for the outcome (every replica at one digest)."""

    def __init__(self, cluster: LocalCluster, client: Client, interval_ms: int = 500) -> None:
        self.cluster, self.client, self.interval_ms = cluster, client, interval_ms
        self.tick = client.create_job(JobSpec(
            name="tick", schedule=IntervalSchedule(interval_ms=interval_ms),
            tasks=[TaskSpec(name="main", queue="roll",
                            retry=RetryPolicy(max_attempts=10, initial_backoff_ms=100))]))
        self.worker = WorkerThread(cluster.servers, "roll")
        self.writer = Writer(cluster.servers)
        wait_for(lambda: len(self.writer.acked) >= 20, timeout_s=30, what="load running")

    def fired(self) -> int:
        return len(self.client.list_runs(self.tick.job_id, limit=1000))

    def wait_progress(self, what: str) -> None:
        """Writes and fires both go on (after a change to the cluster)."""
        acked, fired = len(self.writer.acked), self.fired()
        wait_for(lambda: len(self.writer.acked) > acked + 5, timeout_s=60,
                 what=f"writes go on after {what}")
        wait_for(lambda: self.fired() >= fired + 2, timeout_s=60,
                 what=f"fires go on after {what}")

    def finish(self) -> LoadOutcome:
        client, writer = self.client, self.writer
        writer.stop()
        client.pause_job(self.tick.job_id)

        def settled():
            runs = client.list_runs(self.tick.job_id, limit=1000)
            return runs if runs and all(r.state != RunState.RUNNING for r in runs) else None

        runs = wait_for(settled, timeout_s=60, what="every tick run ended")
        self.worker.stop()
        nodes = [n for n in self.cluster.nodes if n.alive()]

        def replicas_agree():
            seen = {(st.applied_index, st.state_digest) for st in
                    (self.cluster.status(n) for n in nodes)}
            return len(seen) == 1

        wait_for(replicas_agree, timeout_s=60, what="every replica at one index and digest")
        names = {j.spec.name for j in client.iter_jobs("default")}
        slots = sorted(r.scheduled_for_ms for r in runs)
        expected = list(range(slots[0], slots[-1] + 1, self.interval_ms))
        return LoadOutcome(
            writes_acked=len(writer.acked), lost_writes=[n for n in writer.acked if n not in names],
            write_errors=list(writer.errors), fires=len(slots),
            span_s=(slots[-1] - slots[0]) / 1000, lost_fires=sorted(set(expected) - set(slots)),
            doubled={rid: n for rid, n in self.worker.executions.items() if n > 1},
            not_succeeded=[r.run_id for r in runs if r.state != RunState.SUCCEEDED])
