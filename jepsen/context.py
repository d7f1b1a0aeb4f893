"""What a test is (options) and what a running test has (context), shared by every part."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gnomon.client import AsyncClient
from gnomon.jepsen.history import History

if TYPE_CHECKING:
    from gnomon.jepsen.db import DB
    from gnomon.jepsen.gateways import Gateways
    from gnomon.jepsen.net import Net
    from gnomon.jepsen.procs import Procs
    from gnomon.jepsen.witness import Witness

WORKLOADS = ("fire", "lease", "register")

# Short timings so a one-minute run sees several faults (and leases expire within a fault).
NODE_DEFAULTS = {
    "lease_ttl_ms": "3000",
    "heartbeat_interval_ms": "500",
    "raft_min_timeout_s": "0.3",
    "raft_max_timeout_s": "0.7",
    "leader_fallback_timeout_s": "1.5",
    "proof_interval_ms": "300",
}


@dataclass
class TestOptions:
    __test__ = False  # not a pytest test class

    workloads: tuple[str, ...] = ("fire", "lease", "register")
    nemeses: tuple[str, ...] = ("partition",)
    nodes: int = 3
    time_limit_s: float = 60.0
    seed: int = 0
    out_dir: Path = Path("store")
    canaries: tuple[str, ...] = ()
    sdk_workers: int = 2
    zombies: int = 1
    # Quiet time between faults and, per fault, how long it lasts (seconds).
    quiet_s: tuple[float, float] = (3.0, 6.0)
    fault_s: tuple[float, float] = (5.0, 10.0)
    # After the final heal every due slot must have executed within this bound.
    heal_bound_s: float = 30.0
    # Whole-cluster outages: how long (real seconds), and how far outage-clock moves every
    # node's clock forward (seconds, for the rest of the run).
    outage_s: tuple[float, float] = (8.0, 15.0)
    outage_jump_s: tuple[float, float] = (45.0, 120.0)
    # Quiet time after an outage (clients on, no fault): the catch-up happens under load.
    outage_quiet_s: tuple[float, float] = (6.0, 10.0)
    # Jobs of the fire workload; 0: FIRE_JOBS, or OUTAGE_FIRE_JOBS when an outage runs.
    fire_jobs: int = 0
    # Tasks an SDK worker runs at once; 0: 8, or 32 when an outage runs.
    worker_concurrency: int = 0
    # disk-full: the size of the tmpfs under each node's data directory (MiB).
    disk_mb: int = 96
    # Vacuity: at least this many successful client operations per second of workload.
    min_ok_rate: float = 0.5
    node_overrides: dict[str, str] = field(default_factory=dict)
    # Per-node flags (node id -> key -> value), on top of node_overrides.
    node_flags: dict[str, dict[str, str]] = field(default_factory=dict)
    # Gateways beside the nodes (workers and clients dial them); relay: their worker streams
    # over one relay to the leader (`--worker-upstream relay`).
    gateways: int = 0
    gateway_relay: bool = False
    name: str = ""

    @property
    def lease_ttl_ms(self) -> int:
        return int(self.node_config()["lease_ttl_ms"])

    def node_config(self) -> dict[str, str]:
        return {**NODE_DEFAULTS, **self.node_overrides}

    def label(self) -> str:
        gateways = (f"-g{self.gateways}{'r' if self.gateway_relay else ''}"
                    if self.gateways else "")
        return self.name or (f"{'+'.join(self.workloads)}-{'+'.join(self.nemeses)}"
                             f"-n{self.nodes}{gateways}-s{self.seed}")

    def to_json(self) -> dict[str, Any]:
        return {
            "workloads": list(self.workloads), "nemeses": list(self.nemeses),
            "nodes": self.nodes, "time_limit_s": self.time_limit_s, "seed": self.seed,
            "canaries": list(self.canaries), "sdk_workers": self.sdk_workers,
            "zombies": self.zombies, "quiet_s": list(self.quiet_s),
            "fault_s": list(self.fault_s), "heal_bound_s": self.heal_bound_s,
            "min_ok_rate": self.min_ok_rate, "node_config": self.node_config(),
            "node_flags": self.node_flags, "outage_s": list(self.outage_s),
            "outage_jump_s": list(self.outage_jump_s),
            "outage_quiet_s": list(self.outage_quiet_s), "fire_jobs": self.fire_jobs,
            "disk_mb": self.disk_mb, "worker_concurrency": self.worker_concurrency,
            "gateways": self.gateways, "gateway_relay": self.gateway_relay,
        }


@dataclass
class Context:
    opts: TestOptions
    run_dir: Path
    history: History
    net: Net
    db: DB
    procs: Procs
    witness: Witness
    admin: AsyncClient
    rng: random.Random
    node_ids: list[str]
    # Set by the runner: when the workload phase started / the final heal finished (wall ms).
    start_wall_ms: int = 0
    heal_wall_ms: int = 0
    chaos: bool = False
    # Per workload, whatever its final phase read (jobs, runs, registers).
    finals: dict[str, Any] = field(default_factory=dict)
    digests: dict[str, Any] = field(default_factory=dict)
    # The fault kinds of this run, and each node's replicated limits after the heal.
    kinds: list[str] = field(default_factory=list)
    limits: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The gateways (None without --gateways).
    gateways: Gateways | None = None

    def child_rng(self, name: str) -> random.Random:
        return random.Random(f"{self.opts.seed}/{name}")
