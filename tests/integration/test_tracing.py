"""OpenTelemetry tracing end to end, against a real node exporting OTLP/HTTP to a receiver in
this test (real protobuf, decoded with opentelemetry-proto) and a worker in this process
exporting to an InMemorySpanExporter: one trace from the fire to the worker's execution, the
client's call continued by the node and linked to the run, per-call metrics, and trace ids in
the node's JSON log lines (node/ops/DESIGN.md, "Tracing")."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace  # noqa: E402
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from gnomon.client import (
    AsyncClient,
    Client,
    JobSpec,
    OnceSchedule,
    RunState,
    TaskContext,
    Worker,
    task,
)
from gnomon.client.ready_workers.shell import shell_task
from gnomon.node.local.cluster import LocalCluster, free_ports, wait_for, wait_for_async
from gnomon.node.ops.run_spans import attempt_span_id, attempt_traceparent, span_id, trace_id
from tests.support.http import call

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

FAR_FUTURE_MS = 4_102_444_800_000
WAIT_S = 60.0


class Receiver:
    """An OTLP/HTTP trace receiver: every span exported to POST /v1/traces, decoded."""

    def __init__(self) -> None:
        self.spans: list = []
        self.sent_by: dict[bytes, str] = {}  # span id -> the node that exported it
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                with receiver.lock:
                    for rs in request.resource_spans:
                        node = next((a.value.string_value for a in rs.resource.attributes
                                     if a.key == "service.instance.id"), "")
                        for ss in rs.scope_spans:
                            receiver.spans.extend(ss.spans)
                            receiver.sent_by.update((s.span_id, node) for s in ss.spans)
                answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def named(self, name: str) -> list:
        with self.lock:
            return [s for s in self.spans if s.name == name]

    def of_run(self, name: str, run_id: str) -> list:
        """The spans called `name` in the trace of `run_id`."""
        return [s for s in self.named(name) if _hex(s.trace_id) == trace_id(run_id)]


@pytest.fixture(scope="module")
def traced(tmp_path_factory, request) -> Iterator[tuple[LocalCluster, Receiver]]:
    receiver = Receiver()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100",
           "OTEL_SERVICE_NAME": "gnomon-test-node", "GNOMON_LOG_FORMAT": "json",
           "GNOMON_HTTP_ACCESS_LOG": "true"}
    # 3 nodes: the last test kills the leader (a long lease: it must outlive the election).
    cluster = LocalCluster(tmp_path_factory.mktemp("tracing"), 3,
                           {"tracing": "otlp", "lease_ttl_ms": "30000"}, env=env,
                           metrics=True, http=True).start()
    try:
        cluster.leader()
        yield cluster, receiver
    finally:
        cluster.stop()
        if request.session.testsfailed:
            print(cluster.logs())
        receiver.server.shutdown()


@pytest.fixture(scope="module")
def worker_spans() -> InMemorySpanExporter:
    """The test process's tracer provider (the worker's and the client's spans)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


def _hex(raw: bytes) -> int:
    return int.from_bytes(raw, "big")


async def test_one_trace_from_the_client_call_to_the_workers_execution(traced, worker_spans):
    cluster, receiver = traced
    seen: list[str] = []

    @task(name="main", queue="traced")
    async def main(ctx: TaskContext) -> str:
        seen.append(ctx.traceparent)
        return "ok"

    tracer = trace.get_tracer("test")
    async with AsyncClient(cluster.servers, timeout_s=30) as client:
        async with Worker(client, tasks=[main], max_concurrency=1):
            with tracer.start_as_current_span("caller") as caller:
                job = await client.create_job(
                    JobSpec.single("traced", OnceSchedule(FAR_FUTURE_MS), queue="traced"))
                run_id = (await client.trigger_job(job.job_id)).run_id
            run = await client.wait_run(run_id, timeout_s=WAIT_S, poll_interval_s=0.1)
    assert run.state is RunState.SUCCEEDED
    trace_of_run = trace_id(run_id)
    attempt_id = attempt_span_id(run_id, "main", 1)

    # The worker: its execution span is the attempt span's child, in the run's trace.
    executions = await wait_for_async(
        lambda: [s for s in worker_spans.get_finished_spans() if s.name == "gnomon.task main"],
        timeout_s=WAIT_S, what="the worker's execution span")
    execution = executions[0]
    assert execution.context.trace_id == trace_of_run
    assert execution.parent is not None and execution.parent.span_id == attempt_id
    assert execution.attributes["gnomon.run_id"] == run_id
    assert seen == [f"00-{trace_of_run:032x}-{execution.context.span_id:016x}-01"]

    # The node: trigger -> run -> attempt, with the ids derived from the run.
    wait_for(lambda: receiver.of_run("gnomon.run", run_id)
             and receiver.of_run("gnomon.task_attempt", run_id),
             timeout_s=WAIT_S, what="the run's spans at the receiver")
    (trigger,) = receiver.of_run("gnomon.trigger", run_id)
    (run_span,) = receiver.of_run("gnomon.run", run_id)
    (attempt,) = receiver.of_run("gnomon.task_attempt", run_id)
    assert {_hex(s.trace_id) for s in (trigger, run_span, attempt)} == {trace_of_run}
    assert (_hex(trigger.span_id), trigger.parent_span_id) == (span_id(run_id, "fire"), b"")
    assert _hex(run_span.span_id) == span_id(run_id, "run")
    assert _hex(run_span.parent_span_id) == _hex(trigger.span_id)
    assert (_hex(attempt.span_id), _hex(attempt.parent_span_id)) == (attempt_id,
                                                                     _hex(run_span.span_id))

    # The client's call: the node's server span continues the caller's trace and links the run.
    calls = wait_for(lambda: [s for s in receiver.named("gnomon.v1.JobService/TriggerJob")
                              if _hex(s.trace_id) == caller.get_span_context().trace_id],
                     timeout_s=WAIT_S, what="the TriggerJob call's span")
    call = calls[0]
    assert _hex(call.trace_id) == caller.get_span_context().trace_id
    assert _hex(call.parent_span_id) == caller.get_span_context().span_id
    assert [(_hex(link.trace_id), _hex(link.span_id)) for link in call.links] == [
        (trace_of_run, span_id(run_id, "fire"))]


def test_per_call_metrics_access_log_and_trace_ids_in_logs(traced):
    cluster, receiver = traced
    node = cluster.leader()
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    request = urllib.request.Request(f"{node.url}/v1/jobs/no-such-job",
                                     headers={"traceparent": traceparent})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 404

    # The HTTP span continues the header's trace, named by the route's template.
    spans = wait_for(lambda: [s for s in receiver.named("GET /v1/jobs/{job_id}")
                              if _hex(s.trace_id) == 0x0af7651916cd43dd8448eb211c80319c],
                     timeout_s=WAIT_S, what="the HTTP request's span")
    assert _hex(spans[0].parent_span_id) == 0xb7ad6b7169203331

    # The access line, in JSON, carries the span's ids; the path is the raw one.
    def access_line() -> dict | None:
        for line in node.log_path.read_text().splitlines():
            if '"gnomon.http.access"' in line and "no-such-job" in line:
                return json.loads(line)
        return None

    line = wait_for(access_line, timeout_s=WAIT_S, what="the access log line")
    assert line["http"]["route"] == "/v1/jobs/{job_id}" and line["http"]["status"] == 404
    assert line["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    assert line["span_id"] == f"{_hex(spans[0].span_id):016x}"

    # A malformed traceparent starts a trace of its own; the request is answered as ever.
    bad = urllib.request.Request(f"{node.url}/v1/jobs/bad-trace", headers={"traceparent": "00-zz"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(bad, timeout=10)
    assert refused.value.code == 404
    # An unknown gRPC method is counted under "unknown", not its name.
    with grpc.insecure_channel(node.grpc_addr) as channel:
        with pytest.raises(grpc.RpcError) as unknown:
            channel.unary_unary("/gnomon.v1.JobService/NoSuchMethod")(b"", timeout=10)
    assert unknown.value.code() == grpc.StatusCode.UNIMPLEMENTED

    # Per-call histograms: route templates and registered methods, never raw paths.
    scraped = urllib.request.urlopen(f"http://{node.metrics_addr}/metrics", timeout=10).read()
    text = scraped.decode()
    assert ('gnomon_http_request_duration_seconds_count{method="GET",route="/v1/jobs/{job_id}",'
            'status="404"}') in text
    assert "no-such-job" not in text and "NoSuchMethod" not in text
    assert ('gnomon_grpc_server_handling_seconds_count{code="UNIMPLEMENTED",method="unknown",'
            'service="unknown"}') in text
    # (cluster.leader() called ListJobs; a follower's answers are UNAVAILABLE)
    assert ('gnomon_grpc_server_handling_seconds_count{code="OK",method="ListJobs",'
            'service="gnomon.v1.JobService"}') in text



async def test_shell_tasks_get_traceparent_and_lease_calls_name_the_attempt(traced, worker_spans):
    """The shell worker hands its execution span to the command as TRACEPARENT; a worker of
    the HTTP protocol gets the attempt's traceparent with its lease."""
    cluster, _ = traced
    node = cluster.leader()
    script = "import os; print(os.environ['TRACEPARENT'])"
    async with AsyncClient(cluster.servers, timeout_s=30) as client:
        async with Worker(client, tasks=[shell_task("traced-shell")], max_concurrency=1):
            job = await client.create_job(JobSpec.single(
                "traced-shell", OnceSchedule(FAR_FUTURE_MS), queue="traced-shell",
                payload={"argv": [sys.executable, "-c", script]}))
            run_id = (await client.trigger_job(job.job_id)).run_id
            run = await client.wait_run(run_id, timeout_s=WAIT_S, poll_interval_s=0.1)
        assert run.state is RunState.SUCCEEDED
        execution = await wait_for_async(
            lambda: [s for s in worker_spans.get_finished_spans()
                     if s.attributes.get("gnomon.run_id") == run_id],
            timeout_s=WAIT_S, what="the shell task's execution span")
        ids = execution[0].context
        assert execution[0].parent.span_id == attempt_span_id(run_id, "main", 1)
        assert run.task("main").output_tail.strip() == f"00-{ids.trace_id:032x}-{ids.span_id:016x}-01"

        polled = await client.create_job(JobSpec.single("traced-poll", OnceSchedule(FAR_FUTURE_MS),
                                                        queue="traced-poll"))
        polled_run = (await client.trigger_job(polled.job_id)).run_id
    ask = {"workerId": "poller", "queues": ["traced-poll"], "capacity": 1, "waitMs": "10000"}
    leased = call(node.url, "POST", "/v1/worker/lease", ask, timeout=15)
    assert leased.status == 200, leased.text
    [leased_task] = leased.json["tasks"]
    assert leased_task["traceparent"] == attempt_traceparent(polled_run, "main", 1)


def test_the_blocking_client_carries_the_callers_trace(traced, worker_spans):
    """Its calls run on its own loop thread; the caller's span still becomes their parent."""
    cluster, receiver = traced
    with Client(cluster.servers, timeout_s=30) as client:
        with trace.get_tracer("test").start_as_current_span("blocking-caller") as caller:
            client.list_jobs()
    ids = caller.get_span_context()
    calls = wait_for(lambda: [s for s in receiver.named("gnomon.v1.JobService/ListJobs")
                              if _hex(s.trace_id) == ids.trace_id],
                     timeout_s=WAIT_S, what="the ListJobs call's span in the caller's trace")
    assert _hex(calls[0].parent_span_id) == ids.span_id


def test_a_collector_that_is_gone_costs_a_bounded_queue(tmp_path):
    """Spans wait for export in a queue of OTEL_BSP_MAX_QUEUE_SIZE: with the collector
    unreachable the node drops what does not fit, says so without a line per span, and keeps
    answering."""
    closed = free_ports(1)[0]  # nothing listens there
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed}",
           "OTEL_BSP_MAX_QUEUE_SIZE": "16", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "8",
           "OTEL_BSP_SCHEDULE_DELAY": "600000"}
    cluster = LocalCluster(tmp_path, 1, {"tracing": "otlp"}, env=env).start()
    try:
        node = cluster.leader()
        for _ in range(100):  # a span each: more than the queue holds
            cluster.status(node, include_digest=False)
        assert cluster.status(node, include_digest=False).leader_node_id == node.node_id
        dropped = wait_for(lambda: [line for line in node.log_path.read_text().splitlines()
                                    if "Queue full, dropping" in line],
                           timeout_s=WAIT_S, what="the node to say it drops spans")
        # The SDK warns per dropped span; the node lets one line through per 10 s.
        assert len(dropped) <= 2, dropped
        # Stopping does not wait out the exporter's retries (the node's shutdown is bounded
        # and gives up with exit code 1 when a step hangs).
        node.proc.send_signal(signal.SIGTERM)
        assert node.proc.wait(timeout=WAIT_S) == 0
        assert "queued spans not exported" in node.log_path.read_text()
    finally:
        cluster.stop()


async def test_the_shell_worker_command_exports_its_spans(traced, tmp_path):
    """`gnomon worker shell --tracing otlp`: its execution span reaches the collector as the
    attempt's child, and it stops promptly."""
    cluster, receiver = traced
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GNOMON_", "OTEL_"))}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
    env["OTEL_BSP_SCHEDULE_DELAY"] = "100"
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "gnomon.client.cli", "--server", cluster.servers, "worker",
             "shell", "--queue", "traced-cli", "--tracing", "otlp", "--shutdown-grace", "1"],
            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        async with AsyncClient(cluster.servers, timeout_s=30) as client:
            job = await client.create_job(JobSpec.single(
                "traced-cli", OnceSchedule(FAR_FUTURE_MS), queue="traced-cli",
                payload={"argv": ["true"]}))
            run_id = (await client.trigger_job(job.job_id)).run_id
            run = await client.wait_run(run_id, timeout_s=WAIT_S, poll_interval_s=0.1)
        assert run.state is RunState.SUCCEEDED
        (execution,) = await asyncio.to_thread(
            wait_for, lambda: receiver.of_run("gnomon.task main", run_id), timeout_s=WAIT_S,
            what="the shell worker's span at the collector")
        assert _hex(execution.parent_span_id) == attempt_span_id(run_id, "main", 1)
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=WAIT_S)
    assert code == 0, (tmp_path / "worker.log").read_text()[-2000:]


async def test_a_new_leader_ends_the_attempt_in_the_same_trace(traced, worker_spans):
    """The leader that granted an attempt dies while the worker runs it; the next leader
    records the attempt's end under the span id the worker was given, in the run's trace.
    (Last in this file: it kills the shared cluster's leader, and restarts it after.)"""
    cluster, receiver = traced
    started, release = asyncio.Event(), asyncio.Event()

    @task(name="main", queue="failover")
    async def held(ctx: TaskContext) -> str:
        started.set()
        await release.wait()
        return "ok"

    first = cluster.leader()
    try:
        async with AsyncClient(cluster.servers, timeout_s=60) as client:
            async with Worker(client, tasks=[held], max_concurrency=1):
                job = await client.create_job(
                    JobSpec.single("failover", OnceSchedule(FAR_FUTURE_MS), queue="failover"))
                run_id = (await client.trigger_job(job.job_id)).run_id
                await asyncio.wait_for(started.wait(), WAIT_S)
                await wait_for_async(lambda: receiver.of_run("gnomon.trigger", run_id),
                                     timeout_s=WAIT_S, what="the first leader's trigger span",
                                     interval_s=0.05)
                cluster.kill(first.node_id)
                second = await asyncio.to_thread(cluster.leader, 60.0, {first.node_id})
                release.set()
                run = await client.wait_run(run_id, timeout_s=WAIT_S, poll_interval_s=0.1)
    finally:
        release.set()
        if not first.alive():
            cluster.start_node(first.node_id)
    assert run.state is RunState.SUCCEEDED
    (attempt,) = wait_for(lambda: receiver.of_run("gnomon.task_attempt", run_id),
                          timeout_s=WAIT_S, what="the attempt's span")
    assert receiver.sent_by[attempt.span_id] == second.node_id != first.node_id
    assert _hex(attempt.span_id) == attempt_span_id(run_id, "main", 1)
    (trigger,) = receiver.of_run("gnomon.trigger", run_id)
    assert receiver.sent_by[trigger.span_id] == first.node_id
    (execution,) = [s for s in worker_spans.get_finished_spans()
                    if s.attributes.get("gnomon.run_id") == run_id]
    assert execution.parent.span_id == _hex(attempt.span_id)
    assert execution.context.trace_id == trace_id(run_id)
