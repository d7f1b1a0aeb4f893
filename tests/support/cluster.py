"""Integration-test helpers over gnomon.node.local.cluster."""

from __future__ import annotations

import contextlib
import io
import sys
import time
from collections.abc import Iterator

import grpc

from gnomon.node.local.cluster import LocalCluster, NodeProc, wait_for

__all__ = ["LocalCluster", "NodeProc", "RawWorker", "cli", "module_cluster", "wait_for"]


def cli(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    """Run the `gnomon` CLI in this process: (exit code, stdout, stderr)."""
    from gnomon.client.cli import main as gnomon

    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    try:
        code = gnomon(list(args), stdout=out, stderr=err)
    finally:
        sys.stdin = old
    return code, out.getvalue(), err.getvalue()


@contextlib.contextmanager
def module_cluster(root, overrides: dict[str, str] | None = None, *, request=None,
                   size: int = 3, http: bool = False, metrics: bool = False,
                   secure: bool = False) -> Iterator[LocalCluster]:
    """A cluster for a fixture: started, a leader waited for, stopped at the end; its logs
    printed when a test of the session failed meanwhile (pass `request`). `http`: every node
    serves the HTTP API and dashboard too (NodeProc.url), waited for; `metrics`: /metrics;
    `secure`: mutual TLS and bearer tokens (LocalCluster.admin_token, client_tls)."""
    cluster = LocalCluster(root, size, dict(overrides or {}), http=http,
                           metrics=metrics, secure=secure).start()
    failed_before = request.session.testsfailed if request is not None else 0
    try:
        leader = cluster.leader()
        # A follower that has not yet heard from the leader answers "no leader" (a test that
        # starts on a follower's dashboard would see that page).
        wait_for(lambda: all(_knows_leader(cluster, n, leader.node_id) for n in cluster.nodes),
                 timeout_s=30, what=f"every node to know {leader.node_id} as leader")
        if http:  # tests use followers' HTTP and gRPC ports at once
            wait_for(lambda: all(_port_up(a) for n in cluster.nodes
                                 for a in (n.http_addr, n.grpc_addr)), timeout_s=30,
                     what="every node's HTTP and gRPC ports")
        yield cluster
    finally:
        cluster.stop()
        if request is not None and request.session.testsfailed > failed_before:
            print(cluster.logs())


def _knows_leader(cluster: LocalCluster, node, leader_id: str) -> bool:
    try:
        return cluster.status(node, include_digest=False).leader_node_id == leader_id
    except grpc.RpcError:
        return False


def _port_up(addr: str) -> bool:
    import socket

    host, port = addr.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        return True
    except OSError:
        return False


class RawWorker:
    """A worker speaking the stream protocol by hand (to test the node, not the SDK)."""

    def __init__(self, node: NodeProc, worker_id: str, queues: tuple[str, ...] = ("default",),
                 *, channel: grpc.Channel | None = None, metadata: tuple = (),
                 batches: bool = False, held=()):
        import queue as queue_mod
        import threading

        from gnomon.v1 import worker_pb2, worker_pb2_grpc

        self.pb = worker_pb2
        self._out: queue_mod.Queue = queue_mod.Queue()
        self.inbox: queue_mod.Queue = queue_mod.Queue()
        # Sizes of the ServerBatch messages received (their parts go into the inbox).
        self.batch_sizes: list[int] = []
        self._out.put(worker_pb2.WorkerMessage(hello=worker_pb2.Hello(
            worker_id=worker_id, queues=list(queues), accepts_batches=batches,
            held=list(held))))  # LeaseRefs still held (a reconnect)
        stub = worker_pb2_grpc.WorkerServiceStub(channel) if channel else node.workers()
        self._call = stub.Connect(iter(self._out.get, None), metadata=metadata or None)
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()
        self.welcome = self.next("welcome")

    def _pump(self) -> None:
        try:
            for msg in self._call:
                if msg.WhichOneof("msg") != "batch":
                    self.inbox.put(msg)
                    continue
                self.batch_sizes.append(len(msg.batch.assigns) + len(msg.batch.report_acks))
                for assign in msg.batch.assigns:
                    self.inbox.put(self.pb.ServerMessage(assign=assign))
                for ack in msg.batch.report_acks:
                    self.inbox.put(self.pb.ServerMessage(report_ack=ack))
        except grpc.RpcError as exc:
            self.inbox.put(exc)

    def next(self, kind: str, timeout_s: float = 30.0):
        """The next server message of `kind` (others are dropped)."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no {kind} within {timeout_s}s")
            try:
                msg = self.inbox.get(timeout=remaining)
            except Exception:  # noqa: BLE001 - queue.Empty
                raise AssertionError(f"no {kind} within {timeout_s}s") from None
            if isinstance(msg, grpc.RpcError):
                raise AssertionError(f"stream ended while waiting for {kind}: {msg}")
            if msg.WhichOneof("msg") == kind:
                return getattr(msg, kind)

    def credits(self, n: int) -> None:
        self._out.put(self.pb.WorkerMessage(credits=self.pb.Credits(credits=n)))

    def heartbeat(self, leases) -> None:
        self._out.put(self.pb.WorkerMessage(heartbeat=self.pb.Heartbeat(leases=list(leases))))

    def complete(self, lease, result: bytes = b"ok") -> None:
        self._out.put(self.pb.WorkerMessage(complete=self.pb.Complete(lease=lease, result=result)))

    def reports(self, completes, fails=()) -> None:
        """One Reports message: a Complete of each lease in `completes`, and each
        (lease, error, retryable) of `fails`."""
        self._out.put(self.pb.WorkerMessage(reports=self.pb.Reports(
            completes=[self.pb.Complete(lease=lease, result=b"ok") for lease in completes],
            fails=[self.pb.Fail(lease=lease, error=error, retryable=retryable)
                   for lease, error, retryable in fails])))

    def fail(self, lease, error: str, retryable: bool, *, exit_code: int | None = None,
             output_tail: str = "", duration_ms: int = 0) -> None:
        self._out.put(self.pb.WorkerMessage(fail=self.pb.Fail(
            lease=lease, error=error, retryable=retryable, exit_code=exit_code,
            output_tail=output_tail, duration_ms=duration_ms)))

    def close(self) -> None:
        self._out.put(None)
        self._call.cancel()
