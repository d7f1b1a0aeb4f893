"""Prometheus metrics of a node (one registry per node process).

Event metrics (counters, histograms) are updated where the event happens; figures that are a
view of the state (jobs, runs and tasks by state, backlog per queue, DLQ depth, leases held,
Raft indexes, snapshot and history sizes) are read at scrape time by `observe.StateCollector`.
Names follow Prometheus conventions: base units (seconds, bytes), `_total` on counters.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

REGISTRY = CollectorRegistry()
# Process (CPU, memory, file descriptors) and runtime (Python version, GC) metrics.
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

IS_LEADER = Gauge("gnomon_is_leader", "1 while this node leads and its term is committed",
                  registry=REGISTRY)
APPLIED_ENTRIES = Counter("gnomon_applied_entries_total", "Raft entries applied", registry=REGISTRY)
COMMANDS = Counter("gnomon_commands_total", "Commands applied on this node, by command",
                   ["command"], registry=REGISTRY)
REJECTED = Counter("gnomon_rejected_total",
                   "Commands the state machine rejected on this node, by reason code", ["code"],
                   registry=REGISTRY)
BATCH_SIZE = Histogram("gnomon_batch_commands", "Commands per Raft entry (proposal batch size)",
                       buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000), registry=REGISTRY)
COMMIT_SECONDS = Histogram("gnomon_commit_seconds",
                           "Proposal to commit latency of the entries this leader proposed",
                           buckets=(.001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5),
                           registry=REGISTRY)
FIRES = Counter("gnomon_fires_total", "Fires committed by this leader", ["outcome"],
                registry=REGISTRY)
FIRE_LATENESS = Histogram("gnomon_fire_lateness_seconds", "Commit time minus scheduled_for",
                          buckets=(.01, .02, .05, .1, .2, .5, 1, 2, 5, 10, 30, 60, 300),
                          registry=REGISTRY)
RUNS_ENDED = Counter("gnomon_runs_ended_total", "Runs that ended on this replica, by outcome",
                     ["outcome"], registry=REGISTRY)
CIRCUIT_OPENS = Counter("gnomon_circuit_opens_total",
                        "Circuit breakers that opened on this replica, by scope (job, queue)",
                        ["scope"], registry=REGISTRY)
CIRCUIT_SKIPPED = Counter("gnomon_circuit_skipped_fires_total",
                          "Scheduled fires recorded SKIPPED because a breaker held them, by "
                          "scope (job, queue)", ["scope"], registry=REGISTRY)
LEASES_GRANTED = Counter("gnomon_leases_granted_total", "Leases granted", registry=REGISTRY)
LEASES_EXPIRED = Counter("gnomon_leases_expired_total", "Leases expired by the leader", ["reason"],
                         registry=REGISTRY)
LEASES_RENEWED = Counter("gnomon_leases_renewed_total",
                         "Lease renewals acknowledged by this leader (heartbeats)",
                         registry=REGISTRY)
WORKERS = Gauge("gnomon_workers_connected", "Worker streams on this node", registry=REGISTRY)
WORKER_POLLS = Gauge("gnomon_worker_polls", "Lease calls of workers without a stream (LeaseTasks, "
                     "POST /v1/worker/lease) waiting on this node", registry=REGISTRY)
WORKER_STREAMS_DROPPED = Counter(
    "gnomon_worker_streams_dropped_total",
    "Worker streams ended (RESOURCE_EXHAUSTED) because the worker did not read what it was "
    "sent for worker_stall_timeout_ms", registry=REGISTRY)
TASKS_OVER_CAP = Counter("gnomon_tasks_over_cap_total",
                         "Times a ready task waited because its tenant held max_concurrency "
                         "leases", registry=REGISTRY)
READY_TASKS = Gauge("gnomon_ready_tasks", "Tasks waiting for a worker (leader view)",
                    registry=REGISTRY)
PENDING_PROPOSALS = Gauge("gnomon_pending_proposals", "Commands waiting to be packed",
                          registry=REGISTRY)
FIRES_PARKED = Gauge("gnomon_fires_parked",
                     "Jobs whose due fire waits in the trigger because its queue's backlog "
                     "is at fire_admission_max_ready (leader)", registry=REGISTRY)
LEADER_CHANGES = Counter("gnomon_leader_changes_total",
                         "Times the leader known to this node changed (including to none)",
                         registry=REGISTRY)
# The HTTP port's connection bounds (gnomon.httpguard, httpguard/connections.py).
HTTP_CONNECTIONS = Gauge("gnomon_http_connections", "Connections open on the HTTP port",
                         registry=REGISTRY)
HTTP_REFUSED = Counter(
    "gnomon_http_connections_refused_total",
    "HTTP connections closed as they were accepted, by reason: port (http_max_connections), "
    "address (http_max_connections_per_address), descriptors (fewer than "
    "reserved_descriptors free)", ["reason"], registry=REGISTRY)
HTTP_TIMED_OUT = Counter(
    "gnomon_http_connections_timed_out_total",
    "HTTP connections closed because a TLS handshake or a request's headers "
    "(http_header_timeout_ms) or body (http_body_timeout_ms) did not arrive in time, or "
    "its response was not read in time (http_write_timeout_ms), by phase",
    ["phase"], registry=REGISTRY)
HTTP_ACCEPT_ERRORS = Counter(
    "gnomon_http_accept_errors_total",
    "Times accept failed on the HTTP port (EMFILE, ENFILE, ENOBUFS...) and it paused for "
    "http_accept_backoff_ms", registry=REGISTRY)
# Per call on the API ports (node/api/grpc/telemetry.py, node/api/http/telemetry.py). Labels
# are bounded: registered methods only (an unknown method is "unknown"), HTTP route
# templates, never raw paths.
_CALL_BUCKETS = (.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30)
GRPC_SECONDS = Histogram(
    "gnomon_grpc_server_handling_seconds",
    "gRPC calls served by this node, from the call's start to its status (a stream: its "
    "whole life), by service, method and status code",
    ["service", "method", "code"], buckets=_CALL_BUCKETS, registry=REGISTRY)
HTTP_SECONDS = Histogram(
    "gnomon_http_request_duration_seconds",
    "HTTP requests served by this node, from the handler's start to its response, by "
    "method, route template (\"unmatched\" for none) and status",
    ["method", "route", "status"], buckets=_CALL_BUCKETS, registry=REGISTRY)


def serve(addr: str) -> None:
    """Expose /metrics on host:port (a daemon thread)."""
    host, port = addr.rsplit(":", 1)
    start_http_server(int(port), addr=host, registry=REGISTRY)
