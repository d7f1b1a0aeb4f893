"""Scripted in-process stand-ins for a gnomon node, for the client's unit tests ONLY.

They speak the gRPC contract (``api.proto``, ``worker.proto``) on 127.0.0.1 with just enough
behaviour to exercise the SDK's leader following, request-id reuse and worker stream loop. They
are not a model of the real node; integration tests against real nodes live in
``tests/integration``.
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio

from gnomon.v1 import api_pb2, api_pb2_grpc, types_pb2, worker_pb2, worker_pb2_grpc

JOB_METHODS = [
    "CreateJob",
    "GetJob",
    "ListJobs",
    "UpdateJob",
    "DeleteJob",
    "PauseJob",
    "ResumeJob",
    "TriggerJob",
    "GetRun",
    "ListRuns",
    "CancelRun",
    "ListDeadLetters",
    "ReplayDeadLetters",
]


@dataclass
class Abort:
    """Answer one call with an error status (and optional trailers)."""

    code: grpc.StatusCode
    details: str = ""
    leader: str | None = None
    reason: str | None = None

    def trailers(self) -> tuple[tuple[str, str], ...]:
        out = []
        if self.leader is not None:
            out.append(("gnomon-leader", self.leader))
        if self.reason is not None:
            out.append(("gnomon-reason", self.reason))
        return tuple(out)


@dataclass
class Hang:
    """Answer one call never (until the client gives up on the attempt)."""

    release: asyncio.Event = field(default_factory=asyncio.Event)


def default_response(method: str, request: Any) -> Any:
    if method in ("CreateJob", "UpdateJob"):
        return getattr(api_pb2, f"{method}Response")(
            job=types_pb2.Job(job_id="j1", spec=request.spec, version=1)
        )
    if method in ("GetJob", "PauseJob", "ResumeJob"):
        return getattr(api_pb2, f"{method}Response")(
            job=types_pb2.Job(
                job_id=request.job.job_id or "j1",
                spec=types_pb2.JobSpec(
                    tenant=request.job.tenant or "default",
                    name=request.job.name or "n",
                    schedule=types_pb2.Schedule(once=types_pb2.OnceSchedule(at_ms=1)),
                    tasks=[types_pb2.TaskSpec(name="main")],
                ),
                version=2,
                paused=method == "PauseJob",
            )
        )
    if method in ("TriggerJob", "GetRun", "CancelRun"):
        run_id = getattr(request, "run_id", "") or "j1@manual-1"
        return getattr(api_pb2, f"{method}Response")(
            run=types_pb2.Run(run_id=run_id, job_id="j1", state=types_pb2.RUN_STATE_RUNNING)
        )
    if method == "ReplayDeadLetters":
        return api_pb2.ReplayDeadLettersResponse(replayed=request.tasks)
    if method == "SetLimits":
        full = types_pb2.ClusterLimits(
            dedupe_capacity=100_000,
            dedupe_max_age_ms=86_400_000,
            runs_retained_per_job=20,
            max_dead_letters=100_000,
            max_attempt_records=10,
        )
        full.MergeFrom(request.limits)
        return api_pb2.SetLimitsResponse(limits=full, limits_version=2)
    return getattr(api_pb2, f"{method}Response")()


class FakeNode(api_pb2_grpc.JobServiceServicer, api_pb2_grpc.ClusterServiceServicer):
    """JobService + ClusterService answering from a script, then from ``respond``.

    Every request is recorded in ``calls`` as ``(method, request)``.
    """

    def __init__(
        self,
        script: list[Abort | Hang | Any] | None = None,
        respond: Callable[[str, Any], Any] = default_response,
        node_id: str = "fake",
    ) -> None:
        self.script: deque[Abort | Hang | Any] = deque(script or ())
        self.respond = respond
        self.node_id = node_id
        self.calls: list[tuple[str, Any]] = []

    async def _handle(self, method: str, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.calls.append((method, request))
        if self.script:
            step = self.script.popleft()
            if isinstance(step, Abort):
                await context.abort(step.code, step.details, trailing_metadata=step.trailers())
            if isinstance(step, Hang):
                await step.release.wait()
            else:
                return step
        return self.respond(method, request)

    async def GetStatus(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.calls.append(("GetStatus", request))
        return api_pb2.GetStatusResponse(node_id=self.node_id, term=3)

    @property
    def request_ids(self) -> list[str]:
        return [r.request_id for _, r in self.calls if hasattr(r, "request_id")]


def _delegate(name: str) -> Callable[..., Any]:
    async def method(self: FakeNode, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._handle(name, request, context)

    method.__name__ = name
    return method


for _name in [*JOB_METHODS, "SetLimits"]:
    setattr(FakeNode, _name, _delegate(_name))


# --- worker protocol ---------------------------------------------------------------------------

END = object()


@dataclass
class FakeStream:
    index: int
    outbox: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    hello: worker_pb2.Hello | None = None

    def send(self, **kw: Any) -> None:
        self.outbox.put_nowait(worker_pb2.ServerMessage(**kw))

    def abort(self, code: grpc.StatusCode, details: str = "", leader: str | None = None) -> None:
        self.outbox.put_nowait(Abort(code, details, leader=leader))


class FakeWorkerService(worker_pb2_grpc.WorkerServiceServicer):
    """The leader's end of ``WorkerService.Connect``, scripted by the test.

    Answers Hello with Welcome (resuming ``resume(hello)`` tokens, default: all held), acks
    every Heartbeat when ``auto_ack`` (tokens in ``revoked`` come back revoked), acks every
    report when ``auto_report_ack``; ends the stream when the worker half-closes. Every worker
    message lands in ``inbox`` as ``(stream index, message)``; the test pushes Assign/Cancel
    through ``streams[i].send``.
    """

    def __init__(
        self,
        *,
        heartbeat_interval_ms: int = 50,
        lease_ttl_ms: int = 5000,
        auto_ack: bool = True,
        auto_report_ack: bool = True,
        redirect_to: str | None = None,
        node_id: str = "fake-leader",
    ) -> None:
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.lease_ttl_ms = lease_ttl_ms
        self.auto_ack = auto_ack
        self.auto_report_ack = auto_report_ack
        self.redirect_to = redirect_to
        self.node_id = node_id
        self.revoked: set[int] = set()
        # While set, Connect answers UNAVAILABLE without a leader (an election is going on).
        self.refuse = False
        self.resume: Callable[[worker_pb2.Hello], list[int]] = lambda h: [
            lease.fencing_token for lease in h.held
        ]
        self.streams: list[FakeStream] = []
        self.inbox: asyncio.Queue[tuple[int, worker_pb2.WorkerMessage]] = asyncio.Queue()
        self.connects = 0

    async def Connect(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
        self.connects += 1
        if self.refuse:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "no leader elected yet")
        if self.redirect_to is not None:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                "not the leader",
                trailing_metadata=(("gnomon-leader", self.redirect_to),),
            )
        stream = FakeStream(index=len(self.streams))
        self.streams.append(stream)
        reader = asyncio.create_task(self._read(stream, request_iterator))
        try:
            while True:
                item = await stream.outbox.get()
                if item is END:
                    return
                if isinstance(item, Abort):
                    await context.abort(item.code, item.details, trailing_metadata=item.trailers())
                yield item
        finally:
            reader.cancel()

    async def _read(self, stream: FakeStream, request_iterator: Any) -> None:
        async for msg in request_iterator:
            kind = msg.WhichOneof("msg")
            if kind == "hello":
                stream.hello = msg.hello
                stream.send(
                    welcome=worker_pb2.Welcome(
                        node_id=self.node_id,
                        heartbeat_interval_ms=self.heartbeat_interval_ms,
                        lease_ttl_ms=self.lease_ttl_ms,
                        resumed_tokens=self.resume(msg.hello),
                    )
                )
            elif kind == "heartbeat" and self.auto_ack:
                tokens = [lease.fencing_token for lease in msg.heartbeat.leases]
                stream.send(
                    heartbeat_ack=worker_pb2.HeartbeatAck(
                        valid_tokens=[t for t in tokens if t not in self.revoked],
                        revoked_tokens=[t for t in tokens if t in self.revoked],
                    )
                )
            elif kind in ("complete", "fail") and self.auto_report_ack:
                lease = getattr(msg, kind).lease
                stream.send(report_ack=worker_pb2.ReportAck(lease=lease, accepted=True))
            await self.inbox.put((stream.index, msg))
        stream.outbox.put_nowait(END)

    async def expect(
        self, kind: str, *, timeout: float = 5.0, skip: tuple[str, ...] = ("heartbeat", "hello")
    ) -> tuple[int, Any]:
        """The next worker message of ``kind`` (skipping ``skip`` kinds); fails on any other."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"no {kind} within {timeout}s")
            try:
                index, msg = await asyncio.wait_for(self.inbox.get(), remaining)
            except TimeoutError:
                raise AssertionError(f"no {kind} within {timeout}s") from None
            got = msg.WhichOneof("msg")
            if got == kind:
                return index, getattr(msg, kind)
            if got not in skip:
                raise AssertionError(f"expected {kind}, got {got}: {msg}")


def assign(
    token: int,
    *,
    task_name: str = "main",
    run_id: str = "j1@1000",
    queue: str = "default",
    payload: bytes = b"",
    deadline_ms: int = 0,
    lease_ttl_ms: int = 0,
) -> worker_pb2.Assign:
    return worker_pb2.Assign(
        lease=worker_pb2.LeaseRef(run_id=run_id, task_name=task_name, fencing_token=token),
        job_id=run_id.partition("@")[0],
        tenant="default",
        queue=queue,
        attempt=1,
        idempotency_key=f"{run_id}:{task_name}",
        payload=payload,
        scheduled_for_ms=1000,
        lease_ttl_ms=lease_ttl_ms,
        deadline_ms=deadline_ms,
        max_attempts=3,
    )


async def start_server(*servicers: Any) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    for servicer in servicers:
        if isinstance(servicer, FakeNode):
            api_pb2_grpc.add_JobServiceServicer_to_server(servicer, server)
            api_pb2_grpc.add_ClusterServiceServicer_to_server(servicer, server)
        else:
            worker_pb2_grpc.add_WorkerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


def closed_address() -> str:
    """An address on which nothing listens (connection refused -> UNAVAILABLE)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"127.0.0.1:{port}"
