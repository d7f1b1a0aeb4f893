"""Prometheus metrics of a node (one registry per node process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry()

IS_LEADER = Gauge("gnomon_is_leader", "1 while this node leads and its term is committed",
                  registry=REGISTRY)
APPLIED_ENTRIES = Counter("gnomon_applied_entries_total", "Raft entries applied", registry=REGISTRY)
COMMANDS = Counter("gnomon_commands_total", "Commands committed by this leader", ["command"],
                   registry=REGISTRY)
REJECTED = Counter("gnomon_rejected_total", "Commands rejected by the state machine", ["code"],
                   registry=REGISTRY)
BATCH_SIZE = Histogram("gnomon_batch_commands", "Commands per Raft entry",
                       buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000), registry=REGISTRY)
COMMIT_SECONDS = Histogram("gnomon_commit_seconds", "Proposal to commit latency",
                           buckets=(.001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5),
                           registry=REGISTRY)
FIRES = Counter("gnomon_fires_total", "Fires committed by this leader", ["outcome"],
                registry=REGISTRY)
FIRE_LATENESS = Histogram("gnomon_fire_lateness_seconds", "Commit time minus scheduled_for",
                          buckets=(.01, .02, .05, .1, .2, .5, 1, 2, 5, 10, 30, 60, 300),
                          registry=REGISTRY)
LEASES_GRANTED = Counter("gnomon_leases_granted_total", "Leases granted", registry=REGISTRY)
LEASES_EXPIRED = Counter("gnomon_leases_expired_total", "Leases expired by the leader", ["reason"],
                         registry=REGISTRY)
WORKERS = Gauge("gnomon_workers_connected", "Worker streams on this node", registry=REGISTRY)
READY_TASKS = Gauge("gnomon_ready_tasks", "Tasks waiting for a worker (leader view)",
                    registry=REGISTRY)
PENDING_PROPOSALS = Gauge("gnomon_pending_proposals", "Commands waiting to be packed",
                          registry=REGISTRY)


def serve(addr: str) -> None:
    """Expose /metrics on host:port (a daemon thread)."""
    host, port = addr.rsplit(":", 1)
    start_http_server(int(port), addr=host, registry=REGISTRY)
