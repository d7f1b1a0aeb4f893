"""Composition root: config -> replica -> raft -> proposer -> leader loops -> gRPC + metrics."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import random
import signal
from typing import cast

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from gnomon.node.api.grpc.access import AccessGuard, AccessServicer
from gnomon.node.api.grpc.base import NodeApi
from gnomon.node.api.grpc.cluster import ClusterServicer
from gnomon.node.api.grpc.decode import DecodeGuard
from gnomon.node.api.grpc.error_details import RichErrorDetails
from gnomon.node.api.grpc.jobs import JobServicer
from gnomon.node.api.grpc.operations import OperationsApi, OperationsServicer
from gnomon.node.api.grpc.relay import RelayServicer
from gnomon.node.api.grpc.telemetry import CallTelemetry
from gnomon.node.api.grpc.worker import WorkerServicer
from gnomon.node.clock import SYSTEM_CLOCK, Clock, mono_ms
from gnomon.node.config import Config
from gnomon.node.core.commands import Batch, SetLimits
from gnomon.node.core.model import Limits
from gnomon.node.core.results import Effects
from gnomon.node.leader.backfill import BackfillLimits, JobBackfillLoop
from gnomon.node.leader.dispatch import Dispatcher
from gnomon.node.leader.leases import LeaseTable, LeaseTiming
from gnomon.node.leader.session import Leadership
from gnomon.node.leader.trigger import TriggerLimits, TriggerLoop
from gnomon.node.ops import logs, metrics, observe, tracing
from gnomon.node.ops.leader_history import LeaderHistory
from gnomon.node.ops.operations import OperationError, TransferTimeout, transfer_leadership
from gnomon.node.ops.run_spans import RunSpanCollector
from gnomon.node.process import crash_process
from gnomon.node.raft.errors import NotCommitted, Overloaded
from gnomon.node.raft.node import RaftNode
from gnomon.node.raft.proposer import Proposer
from gnomon.node.raft.startup import refuse_to_start
from gnomon.node.replica import Replica
from gnomon.node.security import grpc_tls
from gnomon.node.security.auth import Authenticator, Principal, read_admin_token
from gnomon.node.security.reload import ServingCertificate
from gnomon.node.spec.validate import InputLimits
from gnomon.node.storage.history import HistoryError, HistoryStore
from gnomon.node.storage.history_copy import Backfill
from gnomon.node.storage.history_sink import HistorySink
from gnomon.node.tasks import Supervisor, run_steps
from gnomon.v1 import api_pb2, api_pb2_grpc, relay_pb2_grpc, worker_pb2, worker_pb2_grpc

log = logging.getLogger(__name__)

# Test-only switches that each break one promise (the jepsen harness shows its checkers catch
# them; jepsen/DESIGN.md). "no-dedupe" and "follower-read" are honoured by the servicers.
CANARIES = frozenset({"fire-on-isleader", "skip-token-check", "follower-read", "no-dedupe"})

GRPC_OPTIONS = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.max_receive_message_length", 16 << 20),
    ("grpc.max_send_message_length", 16 << 20),
]


class Node:
    """One scheduler node. Construct and `run()` on the main thread."""

    def __init__(self, config: Config):
        self.config = config
        self.rng = random.Random()
        # The one clock every leader loop reads "now" from (node/DESIGN.md).
        self.clock: Clock = SYSTEM_CLOCK
        self.input_limits = InputLimits(
            max_payload_bytes=config.max_payload_bytes,
            max_tasks_per_job=config.max_tasks_per_job,
            max_attempts=config.max_attempts,
            min_interval_ms=config.min_interval_ms,
            max_active_runs=config.max_active_runs,
            max_buffered_runs=config.max_buffered_runs,
            max_jitter_ms=config.max_jitter_ms,
            max_circuit_window_runs=config.max_circuit_window_runs,
        )
        os.makedirs(config.data_dir, exist_ok=True)
        history = HistorySink(_open_history(config), crash=crash_process,
                              write_attempts=config.history_write_attempts,
                              retry_backoff_ms=config.history_retry_backoff_ms)
        unknown = sorted(set(config.canaries) - CANARIES)
        if unknown:
            raise SystemExit(f"canaries: unknown {unknown}; known: {sorted(CANARIES)}")
        if config.canaries:
            log.warning("TEST-ONLY CANARIES ENABLED (promises broken on purpose): %s",
                        ", ".join(config.canaries))
        self.replica = Replica(history, crash=crash_process)
        self.raft: RaftNode | None = None
        self.proposer: Proposer | None = None
        self.relay_servicer: RelayServicer | None = None  # made in run()
        self.supervisor = Supervisor(crash_process)
        self._stopping = asyncio.Event()
        self._entries = observe.EntryCounter()
        self.leader_history = LeaderHistory(config.leader_history_max_entries)
        # Written on the tick thread after each entry; the health window starts at the start.
        self.last_apply_mono = mono_ms()

    def leader_grpc_addr(self) -> str | None:
        leader = self.raft.leader() if self.raft else None
        if leader is None or leader.node_id == self.config.node_id:
            return None
        if hasattr(self, "last_apply_mono") and self.fresh_leader() is None:
            return None  # a leader not heard from: "no leader" (the unit harness has no clock)
        return leader.grpc_addr

    def fresh_leader(self):
        """The leader this node knows, or None when it knows none or has heard nothing from
        it within the health window (observe.health_verdict): pysyncobj keeps naming a dead
        leader for as long as a follower reaches no other node (it never starts an election
        then), so its belief alone is no answer to "who leads"."""
        if self.raft is None or not observe.health_verdict(self)[0]:
            return None
        return self.raft.leader()

    # -- effects from the tick thread -> loop thread ------------------------------------------

    def _observe_applied(self, batch: Batch, replies: list, effects: Effects) -> None:
        self.last_apply_mono = mono_ms()
        self._entries.applied(self.replica.state, batch, replies, effects)

    def _on_applied(self, batch: Batch, replies: list, effects: Effects) -> None:
        if self.leadership.ready and _has_work(effects):
            self._to_loop(self._route_effects, effects)

    def _trace_applied(self, batch: Batch, replies: list, effects: Effects) -> None:
        """The leader turns what an entry closed (a fire, an attempt, a run) into spans, on
        the loop thread; a failure here is logged, never stops the node."""
        if not self.leadership.ready:
            return
        try:
            records = self._run_spans.collect(self.replica.state, batch, replies, effects)
        except Exception:  # noqa: BLE001 - tracing must never stop a replica
            log.exception("tracing: the spans of an entry were not recorded")
            return
        if records:
            self._to_loop(tracing.emit, records)

    def _route_effects(self, effects: Effects) -> None:
        if effects.jobs:
            self.trigger.jobs_changed(effects.jobs)
        if effects.leased:
            self.leases.leased(effects.leased)
        if effects.lease_ended:
            self.leases.ended(effects.lease_ended)
        if effects.cancelled:
            self.dispatcher.cancelled(effects.cancelled)
        if effects.dispatchable:
            self.dispatcher.dispatchable(effects.dispatchable)
        if effects.backfills:
            self.job_backfill.changed(effects.backfills)
        for scope, name in effects.circuit_opened:  # the leader says why fires are SKIPPED
            log.warning("circuit breaker of %s %s opened: its scheduled fires are recorded "
                        "SKIPPED (reason 'circuit open') until the cool-down's probe succeeds",
                        scope, name, extra=logs.fields(job=name) if scope == "job" else None)

    async def _start_leading(self, session: int) -> None:
        self.leases.start()
        self.trigger.start()
        self.dispatcher.start()
        self.job_backfill.start()
        await self._bootstrap_limits()

    async def _bootstrap_limits(self) -> None:
        """A new cluster's first leader proposes its config's limits (once: one request id,
        so a second first leader's proposal is answered from the dedupe table). Afterwards
        only SetLimits changes them; a node whose config differs says so."""
        with self.replica.lock:
            version, limits = self.replica.state.limits_version, self.replica.state.limits
        mine = self.config.initial_limits()
        if version == 0:
            assert self.proposer is not None  # run() made it before this node could lead
            try:
                await self.proposer.propose(SetLimits(LIMITS_BOOTSTRAP_ID, mine, bootstrap=True))
            except (NotCommitted, Overloaded) as exc:
                log.warning("initial limits not committed (%s); the next leader proposes them",
                            exc)
        elif limits != mine:
            log.warning("config limits differ from the cluster's replicated limits, which "
                        "apply: %s (change them with `gnomon cluster limits --set`)",
                        _limits_diff(mine, limits))

    async def _stop_leading(self) -> None:
        if self.relay_servicer is not None:
            self.relay_servicer.leader_lost()
        await self.job_backfill.stop()
        await self.trigger.stop()
        await self.dispatcher.stop()
        await self.leases.stop()

    # -- lifecycle ------------------------------------------------------------------------------

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        cfg = self.config
        # The raft node and proposer are made below, before a role change can reach the loop.
        self.leadership = Leadership(
            lambda: cast(RaftNode, self.raft), lambda: cast(Proposer, self.proposer),
            proof_interval_ms=cfg.proof_interval_ms,
            on_start=self._start_leading, on_stop=self._stop_leading, supervisor=self.supervisor,
            clock=self.clock,
        )
        self.replica.add_listener(self._observe_applied)
        self.replica.add_listener(self._on_applied)
        self._start_tracing()
        self.raft = RaftNode(cfg, self.replica, self._on_role)
        logs.set_term_source(self.raft.term)
        self.supervisor.spawn(Backfill(
            self.replica.history.store, cfg.peers, page_runs=cfg.history_backfill_page_runs,
            retry_s=cfg.history_backfill_retry_ms / 1000, rng=self.rng,
            channel=grpc_tls.peer_channel(cfg)).run(),
            name="history-backfill")
        self.raft.canary_apply_before_commit = "fire-on-isleader" in cfg.canaries
        self.proposer = Proposer(self.raft, cfg, self._committed, clock=self.clock)
        metrics.PENDING_PROPOSALS.set_function(self.proposer.pending)
        self.leases = LeaseTable(
            self.replica, self.proposer,
            LeaseTiming(heartbeat_interval_ms=cfg.heartbeat_interval_ms,
                        ack_slack_ms=3 * cfg.proof_interval_ms,
                        checkpoint_interval_ms=cfg.lease_checkpoint_interval_ms),
            rng=self.rng, supervisor=self.supervisor, clock=self.clock)
        self.dispatcher = Dispatcher(self.replica, self.proposer, self.leases,
                                     lease_ttl_ms=cfg.lease_ttl_ms,
                                     max_credits=cfg.max_worker_credits,
                                     supervisor=self.supervisor,
                                     queue_caps=cfg.queue_caps,
                                     priority_aging_ms=cfg.priority_aging_ms,
                                     clock=self.clock)
        self.trigger = TriggerLoop(
            self.replica, self.proposer,
            TriggerLimits.from_config(cfg),
            supervisor=self.supervisor, rng=self.rng, backlog=self.dispatcher,
            clock=self.clock)
        metrics.FIRES_PARKED.set_function(self.trigger.parked)
        self.job_backfill = JobBackfillLoop(
            self.replica, self.proposer,
            BackfillLimits(slots_per_step=cfg.backfill_slots_per_step,
                           step_interval_ms=cfg.backfill_step_interval_ms,
                           max_active_runs=cfg.backfill_max_active_runs),
            supervisor=self.supervisor, queued_tasks=self.dispatcher.ready_count)
        self.proposer.start()
        self.leadership.start()
        # One authenticator and guard for both ports (the same tokens, rules and rate limits).
        self.authenticator = self._authenticator()
        self.access_guard = AccessGuard(self, self.authenticator)
        self.serving = (ServingCertificate(cfg.tls_cert, cfg.tls_key, cfg.tls_client_ca)
                        if cfg.tls_cert else None)
        # One worker servicer for both ports: its lease calls are counted per node.
        self.worker_servicer = WorkerServicer(cast(NodeApi, self), self.dispatcher, self.leases,
                                              revalidate=self._revalidate)
        self.relay_servicer = RelayServicer(cast(NodeApi, self), self.worker_servicer,
                                            self.access_guard.authenticate_relayed)
        self.http = None
        if cfg.http_addr:  # before gRPC: a node that answers gRPC serves HTTP too
            from gnomon.node.api.http.server import HttpServer  # aiohttp only where it is served

            self.http = HttpServer(self)
            await self.http.start()
        server = await self._start_grpc()
        if cfg.metrics_addr:
            metrics.REGISTRY.register(observe.StateCollector(self))
            metrics.serve(cfg.metrics_addr)
        self.supervisor.spawn(self._watch_health(), name="health")
        if cfg.tls_reload_interval_ms:
            self.supervisor.spawn(self._reload_certificate(cfg.tls_reload_interval_ms / 1000),
                                  name="tls-reload")
        self._install_signals()
        log.info("node %s serving gRPC on %s, Raft on %s", cfg.node_id,
                 cfg.self_member.grpc_addr, cfg.self_member.raft_addr)
        await self._stopping.wait()
        await self._shutdown(server)

    def _start_tracing(self) -> None:
        """With tracing on (node/ops/DESIGN.md "Tracing"): the spans of runs from applied
        entries; the API ports' spans follow `tracing.enabled()`."""
        try:
            on = tracing.configure(tracing.mode_from_env(self.config.tracing), self.config.node_id)
        except (ImportError, ValueError) as exc:
            raise SystemExit(str(exc)) from None
        if on:
            self._run_spans = RunSpanCollector()
            self.replica.add_listener(self._trace_applied)

    async def _reload_certificate(self, interval_s: float) -> None:
        """The certificates follow their files (node/security/reload.py)."""
        assert self.raft is not None  # spawned by run() after it made the raft node
        while not self._stopping.is_set():
            await asyncio.sleep(interval_s)
            self.raft.peer_tls.refresh()
            if self.serving and self.serving.refresh() and self.http is not None:
                self.http.reload_tls()

    def _committed(self, sent_mono: int) -> None:
        metrics.COMMIT_SECONDS.observe(max(0, mono_ms() - sent_mono) / 1000)
        self.leadership.committed(sent_mono)

    async def _watch_health(self) -> None:
        """Keep the health service's answers current (every 100 ms): the whole node ("") and
        the write and worker services serve only while a leader with a fresh proof is known;
        ClusterService always serves while the process runs (status works without quorum:
        a liveness check). Counts leader changes on the way."""
        serving_names = ("", "gnomon.v1.JobService", "gnomon.v1.WorkerService")
        last: bool | None = None
        leader_seen: str | None = None
        assert self.raft is not None  # spawned by run() after it made the raft node
        while not self._stopping.is_set():
            leader = self.raft.leader()
            leader_id = leader.node_id if leader is not None else None
            if leader_id != leader_seen:
                metrics.LEADER_CHANGES.inc()
            leader_seen = leader_id
            fresh = self.fresh_leader()
            self.leader_history.observe(self.clock.wall_ms(), self.raft.term(),
                                        fresh.node_id if fresh is not None else "")
            serving, why = observe.health_verdict(self)
            if serving != last:
                status = (health_pb2.HealthCheckResponse.SERVING if serving
                          else health_pb2.HealthCheckResponse.NOT_SERVING)
                for name in serving_names:
                    await self._health.set(name, status)
                log.info("health: %s (%s)", "SERVING" if serving else "NOT_SERVING", why)
                last = serving
            try:
                async with asyncio.timeout(0.1):
                    await self._stopping.wait()
            except TimeoutError:
                pass

    def _on_role(self, old: int, new: int) -> None:  # tick thread
        self._to_loop(self.leadership.role_changed, old, new)

    def _to_loop(self, fn, *args) -> None:
        """Hand work from the tick thread to the loop (dropped once the loop has closed)."""
        if not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:  # closed between the check and the call: shutting down
                pass

    async def _start_grpc(self) -> grpc.aio.Server:
        auth = self.authenticator  # made in run(): the HTTP API shares it (node/api/http/auth.py)
        # A connection that has not finished its (TLS) handshake in time is closed.
        options = [*GRPC_OPTIONS, ("grpc.server_handshake_timeout_ms",
                                   self.config.grpc_handshake_timeout_ms)]
        guard = DecodeGuard(drain_s=self.config.stream_refusal_drain_ms / 1000)
        # Outermost first: CallTelemetry measures calls the guards refuse too; every abort
        # below it (access, decode, servicers) carries rich details.
        server = grpc.aio.server(options=options, interceptors=[
            CallTelemetry(), RichErrorDetails(), guard, self.access_guard])
        api_pb2_grpc.add_AccessServiceServicer_to_server(AccessServicer(self, auth), server)
        api = cast(NodeApi, self)  # started by run() after it made the raft node and proposer
        api_pb2_grpc.add_JobServiceServicer_to_server(JobServicer(api), server)
        api_pb2_grpc.add_ClusterServiceServicer_to_server(ClusterServicer(api), server)
        api_pb2_grpc.add_OperationsServiceServicer_to_server(
            OperationsServicer(cast(OperationsApi, self)), server)
        worker_pb2_grpc.add_WorkerServiceServicer_to_server(self.worker_servicer, server)
        relay_pb2_grpc.add_GatewayServiceServicer_to_server(self.relay_servicer, server)
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        # Server reflection: grpcurl and Postman list and call the services without .proto files.
        reflection.enable_server_reflection((
            api_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
            api_pb2.DESCRIPTOR.services_by_name["ClusterService"].full_name,
            api_pb2.DESCRIPTOR.services_by_name["AccessService"].full_name,
            api_pb2.DESCRIPTOR.services_by_name["OperationsService"].full_name,
            worker_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name,
            health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        creds = self.serving.grpc_credentials() if self.serving else None
        addr = self.config.self_member.grpc_addr
        bound = server.add_secure_port(addr, creds) if creds else server.add_insecure_port(addr)
        if bound == 0:
            raise SystemExit(f"grpc_addr: cannot bind {addr}")
        grpc_tls.warn_if_exposed(self.config)
        await server.start()
        # NOT_SERVING until _watch_health sees a leader with a fresh proof.
        for name in ("", "gnomon.v1.JobService", "gnomon.v1.WorkerService"):
            await self._health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self._health.set("gnomon.v1.ClusterService", health_pb2.HealthCheckResponse.SERVING)
        return server

    def _revalidate(self, principal: Principal) -> None:
        with self.replica.lock:
            self.authenticator.revalidate(principal)

    def _authenticator(self) -> Authenticator:
        cfg = self.config
        secret = read_admin_token(cfg.admin_token_file) if cfg.admin_token_file else None
        if secret is None:
            exposed = not grpc_tls.is_loopback(cfg.self_member.grpc_addr)
            log.log(logging.WARNING if exposed else logging.INFO,
                    "authentication is OFF (no --admin-token-file): every caller is admin")
        return Authenticator(secret, lambda: self.replica.state.access)

    def _install_signals(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._loop.add_signal_handler(sig, self._stopping.set)

    def stop(self) -> None:
        self._stopping.set()

    async def _shutdown(self, server: grpc.aio.Server) -> None:
        """Stop in order, bounded by shutdown_timeout_ms: a step that hangs (a peer that
        never answers, a disk that never returns) must not keep the process alive."""
        log.info("shutting down")
        raft, proposer = self.raft, self.proposer
        assert raft is not None and proposer is not None  # run() made them before serving
        timeout_s = self.config.shutdown_timeout_ms / 1000
        stuck = await run_steps([
            ("health", self._health.enter_graceful_shutdown),
            ("leadership transfer", self._transfer_if_leading),
            ("leader loops", self.leadership.stop),
            ("HTTP server", self.http.stop if self.http else _nothing),
            ("gRPC server", lambda: server.stop(grace=min(2.0, timeout_s / 4))),
            ("proposer", proposer.stop),
            ("background tasks", lambda: self.supervisor.cancel_all(timeout_s / 4)),
            ("raft", lambda: asyncio.to_thread(raft.destroy)),
            ("history", lambda: asyncio.to_thread(self.replica.history.close)),
            ("tracing", lambda: asyncio.to_thread(tracing.shutdown)),
        ], timeout_s)
        if stuck is not None:
            log.error("shutdown did not finish within %.1fs (stuck at: %s); exiting now",
                      timeout_s, stuck)
            logging.shutdown()
            os._exit(1)
        log.info("stopped")

    async def _transfer_if_leading(self) -> None:
        """On SIGTERM a leader hands over first, so the cluster does not wait for an election
        timeout (rolling restarts)."""
        if self.leadership.ready:
            timeout_s = min(3.0, self.config.shutdown_timeout_ms / 3000)
            try:
                await transfer_leadership(self, "", timeout_s)
            except (OperationError, TransferTimeout) as exc:
                log.warning("leadership not transferred before stopping: %s", exc)


LIMITS_BOOTSTRAP_ID = "gnomon:limits-bootstrap"


async def _nothing() -> None:
    return None


def _open_history(config: Config) -> HistoryStore:
    try:
        return HistoryStore(os.path.join(config.data_dir, "history"),
                            map_size=config.history_map_bytes,
                            max_runs_per_job=config.history_max_runs_per_job)
    except HistoryError as exc:
        refuse_to_start(config.data_dir, exc)


def _limits_diff(mine: Limits, cluster: Limits) -> str:
    return ", ".join(
        f"{f.name} {getattr(mine, f.name)} here, {getattr(cluster, f.name)} replicated"
        for f in dataclasses.fields(Limits) if getattr(mine, f.name) != getattr(cluster, f.name)
    )


def _has_work(effects: Effects) -> bool:
    return bool(effects.jobs or effects.leased or effects.lease_ended or effects.cancelled
                or effects.dispatchable or effects.backfills or effects.circuit_opened)
