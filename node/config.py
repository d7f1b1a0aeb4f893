"""Node configuration: defaults < TOML file < GNOMON_* environment < command-line flags.

Every limit the node enforces is a field here (ARCHITECTURE section 7).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gnomon.node.core.model import Limits
from gnomon.node.core.validate import validate_limits

FRAME_SLACK_BYTES = 64 << 10  # message fields and codec overhead around entries or chunks
TASK_SPEC_SLACK_BYTES = 4 << 10  # a task's name, queue, needs and options beside its payload


class ConfigError(ValueError):
    """A configuration value is missing or breaks a rule; the message names it."""


@dataclass(frozen=True)
class Member:
    """One cluster member: its id, its Raft address, its gRPC address and (optionally) the
    HTTP address it serves the HTTP API and dashboard on (where followers redirect writes)."""

    node_id: str
    raft_addr: str
    grpc_addr: str
    http_addr: str = ""

    @classmethod
    def parse(cls, text: str) -> Member:
        """`id=raft_host:port,grpc_host:port[,http_host:port]` (the form of --member and
        GNOMON_MEMBERS)."""
        try:
            node_id, addrs = text.split("=", 1)
            parts = [a.strip() for a in addrs.split(",")]
            if len(parts) not in (2, 3):
                raise ValueError
        except ValueError:
            raise ConfigError(
                f"member: {text!r} is not 'id=raft_host:port,grpc_host:port[,http_host:port]'"
            ) from None
        return cls(node_id.strip(), *parts)


@dataclass(frozen=True)
class Config:
    node_id: str = ""
    members: tuple[Member, ...] = ()
    data_dir: str = ".gnomon/node"
    # A new node joining a running cluster: it waits (never standing for election) until
    # `gnomon cluster add-node` made it a member; ignored once its data directory knows it
    # is one (node/raft/DESIGN.md, Membership). Flag form: --join (no value).
    join: bool = False
    # AddNode: how long the new node may take to catch up as a learner, and how many
    # entries behind the commit index it may still be when it is made a voter.
    membership_catch_up_timeout_ms: int = 120_000
    membership_catch_up_lag_entries: int = 64
    # The Raft port: mutual TLS with one cluster CA (node/raft/DESIGN.md). Paths, never key
    # material; the certificate names this node by the URI urn:gnomon:node:<node_id>.
    raft_tls_cert: str = ""
    raft_tls_key: str = ""
    raft_tls_ca: str = ""
    # Bounds of the Raft port: the largest frame (an append batch or a snapshot chunk, with
    # room to spare), how long a connection may take to authenticate, how many may be
    # authenticating at once, the accept backlog, silence before a link is dropped, bytes
    # queued for a peer that does not read, and the re-dial interval.
    raft_max_frame_bytes: int = 16 << 20
    raft_append_batch_bytes: int = 8 << 20
    raft_handshake_timeout_ms: int = 5_000
    raft_unauthenticated_idle_ms: int = 2_000
    raft_max_unauthenticated: int = 64
    raft_listen_backlog: int = 128
    raft_peer_timeout_ms: int = 10_000
    raft_max_send_buffer_bytes: int = 256 << 20
    # Above this many bytes queued for a peer, new append messages to it are dropped (it
    # asks again from where it is); below raft_max_send_buffer_bytes.
    raft_send_backlog_bytes: int = 32 << 20
    raft_connect_retry_ms: int = 500
    # The gRPC port (clients and workers): TLS when tls_cert and tls_key are set; mutual TLS
    # (clients must present a certificate of that CA) when tls_client_ca is set too. Other
    # nodes dial it (history backfill) trusting raft_tls_ca and presenting the node's Raft
    # certificate, so the server certificate must chain to the cluster CA.
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    # How often those three files are checked for a change (cert-manager renews them in
    # place): a changed, loadable pair is presented to new connections of the gRPC and HTTP
    # ports without a restart. 0: never.
    tls_reload_interval_ms: int = 5_000
    # Authentication: when set, every call needs a bearer token; this file holds the
    # bootstrap admin token (one word, >= 32 characters; the same file on every node).
    admin_token_file: str = ""
    # A client connection that has not completed its handshake within this is closed.
    grpc_handshake_timeout_ms: int = 10_000
    metrics_addr: str = ""  # "host:port"; empty disables the metrics endpoint
    # Logs on stderr: "text" or "json" (one event per line either way), and the least level.
    log_format: str = "text"
    log_level: str = "info"
    # OpenTelemetry traces (the otel extra; node/ops/DESIGN.md "Tracing"): "otlp" (to
    # OTEL_EXPORTER_OTLP_ENDPOINT), "console" or "none"; unset: OTEL_TRACES_EXPORTER if it
    # names one of those, else none.
    tracing: str = ""
    # One log line per HTTP request (method, route, status, duration; logger gnomon.http.access).
    http_access_log: bool = False
    # "host:port" of the HTTP/JSON API and dashboard (node/api/http); empty: not served.
    http_addr: str = ""
    # Bounds of the HTTP port's connections (node/api/http/DESIGN.md, "Connections"): a
    # request's line and headers must all arrive within http_header_timeout_ms of the
    # connection opening (a TLS handshake is bounded by it too) or of the first byte of a
    # following request, and its body within http_body_timeout_ms of its headers, else the
    # connection is closed; a kept-alive connection with no request is closed after
    # http_idle_timeout_ms. A response not all written within http_write_timeout_ms (its
    # client stopped reading) is cut and its connection closed.
    http_header_timeout_ms: int = 10_000
    http_body_timeout_ms: int = 30_000
    http_idle_timeout_ms: int = 60_000
    http_write_timeout_ms: int = 30_000
    # Connections open on the HTTP port at once, and from one client address (behind a proxy,
    # docker's userland proxy included, every client has the proxy's: raise it); more are
    # closed as they are accepted (plaintext: after a 503), in
    # gnomon_http_connections_refused_total.
    http_max_connections: int = 1_024
    http_max_connections_per_address: int = 128
    # After accept fails on the HTTP port (EMFILE, ENFILE, ENOBUFS...) it accepts nothing for
    # this long; failed accepts, refused connections and timeouts are logged at most once per
    # http_error_log_interval_ms per kind, with a count.
    http_accept_backoff_ms: int = 1_000
    http_error_log_interval_ms: int = 10_000
    # Open-file descriptors kept free for the journal, snapshots and the gRPC port: the HTTP
    # port refuses connections while fewer are free (the node raises its soft RLIMIT_NOFILE
    # to the hard limit at start). At least 16.
    reserved_descriptors: int = 128
    # Server-sent event streams one node serves at once (each bounded in memory).
    http_max_event_streams: int = 64
    # JSON arrays and objects one HTTP request body may hold (counted before it is parsed,
    # after authentication): a 16 MiB body of 5.5M empty arrays cost 1.9 s and 408 MiB.
    http_max_json_containers: int = 100_000
    # Web origins besides the cluster's own (every member's http_addr) whose pages may call a
    # node that does not authenticate (no admin_token_file), as "https://host[:port]",
    # comma-separated; exactly as a browser sends Origin (lowercase, no path, no default
    # port). With authentication any origin may (node/security/DESIGN.md, "Web pages").
    http_cors_origins: tuple[str, ...] = field(default=())
    # Raft timing (seconds, pysyncobj's units).
    raft_min_timeout_s: float = 0.3
    raft_max_timeout_s: float = 0.7
    leader_fallback_timeout_s: float = 1.5
    # Ask the others before standing for election (node/raft/prevote.py). Off only while
    # upgrading from a build without it: such a build drops the link a pre-vote arrives on.
    raft_pre_vote: bool = True
    # A tick applies committed entries for at most this long (whole entries), then sends its
    # heartbeats and reads; the rest waits for the next tick (node/raft/DESIGN.md).
    raft_apply_budget_ms: int = 50
    append_entries_period_s: float = 0.05
    # Leadership proof: an entry committed at least this often (ARCHITECTURE section 4).
    proof_interval_ms: int = 300
    # Leases.
    lease_ttl_ms: int = 10_000
    heartbeat_interval_ms: int = 2_000
    # How often the leader writes down the deadlines of leases whose worker went quiet.
    lease_checkpoint_interval_ms: int = 1_000
    # Trigger loop: longest sleep between looks at the heap; chunking of due fires.
    trigger_tick_ms: int = 50
    max_fires_per_proposal: int = 1_000
    max_fire_proposals_inflight: int = 2
    max_catch_up_slots_per_job: int = 100
    # Fire admission: while this many tasks of a tenant wait for a worker on a queue, that
    # tenant's fires whose first tasks go to that queue wait in the trigger (late, not lost);
    # 0: no bound. Past capacity the cluster then spends its work on tasks it can run.
    fire_admission_max_ready: int = 10_000
    # Proposer.
    max_batch_commands: int = 1_000
    max_batch_bytes: int = 1 << 20
    max_pending_commands: int = 20_000
    # Leader loops (catch-up fires) queue at most this many (and at most 3/4 of the above);
    # the rest is for clients.
    max_loop_pending_commands: int = 15_000
    max_inflight_batches: int = 32
    commit_timeout_ms: int = 5_000
    # Limits on input.
    max_payload_bytes: int = 64 << 10
    max_result_bytes: int = 64 << 10
    max_tasks_per_job: int = 100
    max_attempts: int = 100
    min_interval_ms: int = 100
    max_jobs_per_tenant: int = 100_000
    # Specs one CreateJobs call may carry (more: INVALID_ARGUMENT, nothing created).
    create_jobs_max_specs: int = 1_000
    max_worker_credits: int = 1_000
    # Bounds of one worker stream (node/DESIGN.md, "Bounds of a worker stream"): messages and
    # bytes queued for the worker (while full its requests are not read and it is granted
    # nothing), reports read from it and not yet acknowledged (at the bound its requests are
    # not read), how long its queue may stay full with nothing read before the stream is
    # ended with RESOURCE_EXHAUSTED, and the leases one Heartbeat or Hello may name (more:
    # INVALID_ARGUMENT).
    worker_outbox_max_messages: int = 1_024
    worker_outbox_max_bytes: int = 4 << 20
    worker_max_pending_reports: int = 1_024
    worker_stall_timeout_ms: int = 10_000
    worker_max_heartbeat_leases: int = 4_096
    # Workers without a stream (WorkerService.LeaseTasks, HTTP POST /v1/worker/lease): the
    # longest a lease call may wait for a task, and how many may wait on this node at once
    # (more: RESOURCE_EXHAUSTED, Retry-After).
    worker_poll_max_wait_ms: int = 30_000
    worker_max_polls: int = 1_000
    # Gateways' relays (GatewayService.Relay, node/api/grpc/relay.py): relays open at once,
    # worker streams on one relay, frames in one relay message, messages of one relayed
    # stream not yet taken by its servicer (beyond: that stream ends RESOURCE_EXHAUSTED), and
    # frames queued towards one gateway (a full queue makes its streams' writes wait).
    max_relays: int = 64
    # Leader changes this node remembers for GetStatus (node-local, never replicated).
    leader_history_max_entries: int = 20
    relay_max_streams: int = 50_000
    relay_max_frames: int = 4_096
    relay_stream_buffer_messages: int = 2_048
    relay_down_max_frames: int = 16_384
    # A request stream refused with INVALID_ARGUMENT is read on (and discarded) up to the
    # client's half-close, for at most this long, before the status goes out: a status that
    # meets a write still in flight reaches an asyncio client as INTERNAL.
    stream_refusal_drain_ms: int = 1_000
    # Most tasks of a queue leased at once, as "queue=N,queue2=M" (others: no cap). Work
    # over it waits (gnomon_tasks_over_cap_total), never fails. Leader-local.
    queue_max_concurrency: str = ""
    max_output_tail_bytes: int = 4 << 10
    # Bounds of a job's overlap fields (spec.max_active_runs, spec.max_buffered_runs).
    max_active_runs: int = 100
    max_buffered_runs: int = 1_000
    # Fire instants one PreviewSchedule lists at most.
    max_preview_fires: int = 100
    # A job's jitter_ms at most; the cluster's spread of fires over a window by a hash of
    # the job id (0: none), so that jobs with one schedule make a ramp, not a spike.
    max_jitter_ms: int = 3_600_000
    fire_spread_window_ms: int = 0
    # A job's circuit_breaker.window_runs at most.
    max_circuit_window_runs: int = 100
    # Job backfill (BackfillJob): slots one backfill may cover at most (more is refused,
    # INVALID_ARGUMENT); slots the leader proposes per step, steps at most this often, and
    # runs of one backfill active (running or queued) at once: pacing, so that a backfill
    # never stampedes admission or the workers.
    backfill_max_slots: int = 10_000
    backfill_slots_per_step: int = 20
    backfill_step_interval_ms: int = 500
    backfill_max_active_runs: int = 10
    # Dispatch inside a queue: a ready task's priority counts one point more per this much
    # waiting (0: strict priority, a low one may wait forever). A task waits behind tasks
    # that became ready after it for at most (their priority - its) x this.
    priority_aging_ms: int = 1_000
    # Replicated limits: the first leader of a new cluster proposes these; later changes go
    # through `gnomon cluster limits --set` (a node's own value is never applied on its own).
    dedupe_capacity: int = 100_000
    dedupe_max_age_ms: int = 86_400_000
    runs_retained_per_job: int = 20
    max_dead_letters: int = 100_000
    max_attempt_records: int = 10
    max_tokens_per_tenant: int = 1_000
    max_queue_circuits_per_tenant: int = 1_000
    # Per-node history store of runs evicted from memory.
    history_max_runs_per_job: int = 10_000
    history_map_bytes: int = 8 << 30
    # A failed history write is retried this many times in all (backoff doubling from
    # history_retry_backoff_ms), then the node stops (node/storage/DESIGN.md).
    history_write_attempts: int = 5
    history_retry_backoff_ms: int = 200
    # Backfill after a snapshot install: runs per page copied from a peer, page byte bound,
    # wait between attempts when no peer can serve.
    history_backfill_page_runs: int = 1_000
    history_backfill_page_bytes: int = 4 << 20
    history_backfill_retry_ms: int = 2_000
    # Snapshots: compact the log after this many entries or seconds.
    snapshot_min_entries: int = 20_000
    snapshot_min_time_s: float = 60.0
    # The forked snapshot writer is killed after this long; after a failed snapshot the next
    # one starts no sooner than snapshot_retry_s. Bytes per message to a lagging follower.
    snapshot_child_timeout_s: float = 900.0
    snapshot_retry_s: float = 30.0
    snapshot_send_chunk_bytes: int = 1 << 20
    # The longest a SIGTERM shutdown may take before the process exits anyway.
    shutdown_timeout_ms: int = 10_000
    # Test-only fault switches (see jepsen canaries); never set in production.
    canaries: tuple[str, ...] = field(default=())

    @property
    def self_member(self) -> Member:
        for m in self.members:
            if m.node_id == self.node_id:
                return m
        raise ConfigError(f"node_id: {self.node_id!r} is not one of the members")

    @property
    def peers(self) -> tuple[Member, ...]:
        return tuple(m for m in self.members if m.node_id != self.node_id)

    def validate(self) -> Config:
        if not self.node_id:
            raise ConfigError("node_id: required (--node-id or GNOMON_NODE_ID)")
        if not self.members:
            raise ConfigError("members: at least one --member id=raft_addr,grpc_addr is required")
        self.self_member  # noqa: B018 - raises when node_id is not a member
        self._validate_raft_port()
        self.queue_caps  # noqa: B018 - raises for a malformed queue_max_concurrency
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("tls_cert: tls_cert and tls_key are set together (or neither)")
        if self.tls_client_ca and not self.tls_cert:
            raise ConfigError("tls_client_ca: needs tls_cert and tls_key (mutual TLS is TLS)")
        if self.tls_reload_interval_ms < 0:
            raise ConfigError(f"tls_reload_interval_ms: must be >= 0 (0: never), got "
                              f"{self.tls_reload_interval_ms}")
        if self.log_format not in ("text", "json"):
            raise ConfigError(f"log_format: {self.log_format!r} is not text or json")
        if self.tracing not in ("", "none", "otlp", "console"):
            raise ConfigError(f"tracing: {self.tracing!r} is not otlp, console or none")
        if self.log_level not in ("debug", "info", "warning", "error"):
            raise ConfigError(f"log_level: {self.log_level!r} is not debug, info, warning "
                              "or error")
        for name in ("backfill_max_slots", "backfill_slots_per_step",
                     "backfill_step_interval_ms", "backfill_max_active_runs"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("http_header_timeout_ms", "http_body_timeout_ms", "http_idle_timeout_ms",
                     "http_write_timeout_ms", "http_max_connections", "http_max_connections_per_address",
                     "http_accept_backoff_ms", "http_error_log_interval_ms"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.http_max_connections_per_address > self.http_max_connections:
            raise ConfigError(f"http_max_connections_per_address: must be at most "
                              f"http_max_connections ({self.http_max_connections}), got "
                              f"{self.http_max_connections_per_address}")
        if self.reserved_descriptors < 16:
            raise ConfigError(f"reserved_descriptors: must be >= 16 (the journal, a snapshot "
                              f"and the gRPC port need some at once), got "
                              f"{self.reserved_descriptors}")
        if self.http_max_json_containers < 1:
            raise ConfigError(f"http_max_json_containers: must be >= 1, got "
                              f"{self.http_max_json_containers}")
        for origin in self.http_cors_origins:
            check_origin(origin)
        for name in ("worker_outbox_max_messages", "worker_outbox_max_bytes",
                     "worker_max_pending_reports", "worker_stall_timeout_ms",
                     "worker_max_heartbeat_leases", "worker_max_polls", "max_relays",
                     "relay_max_streams", "relay_max_frames", "relay_stream_buffer_messages",
                     "relay_down_max_frames", "leader_history_max_entries"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.worker_poll_max_wait_ms < 0:
            raise ConfigError(f"worker_poll_max_wait_ms: must be >= 0, got "
                              f"{self.worker_poll_max_wait_ms}")
        if self.stream_refusal_drain_ms < 0:
            raise ConfigError(f"stream_refusal_drain_ms: must be >= 0 (0: no drain), got "
                              f"{self.stream_refusal_drain_ms}")
        if self.fire_admission_max_ready < 0:
            raise ConfigError(f"fire_admission_max_ready: must be >= 0 (0: no bound), got "
                              f"{self.fire_admission_max_ready}")
        if self.priority_aging_ms < 0:
            raise ConfigError(f"priority_aging_ms: must be >= 0 (0: strict priority), got "
                              f"{self.priority_aging_ms}")
        if self.heartbeat_interval_ms * 2 > self.lease_ttl_ms:
            raise ConfigError("heartbeat_interval_ms: must be at most half of lease_ttl_ms")
        rejected = validate_limits(self.initial_limits())
        if rejected:
            raise ConfigError(rejected.detail.removeprefix("limits."))
        return self

    @property
    def queue_caps(self) -> dict[str, int]:
        """queue_max_concurrency as {queue: cap} (validate() checked the form)."""
        caps: dict[str, int] = {}
        for item in filter(None, (p.strip() for p in self.queue_max_concurrency.split(","))):
            queue, sep, value = item.partition("=")
            if not sep or not queue.strip() or not value.strip().isdigit() or int(value) < 1:
                raise ConfigError(f"queue_max_concurrency: {item!r} is not queue=N with N >= 1")
            caps[queue.strip()] = int(value)
        return caps

    @property
    def max_entry_bytes(self) -> int:
        """The largest Raft log entry this node proposes: a batch, or one command above the
        batch bound (a job of max_tasks_per_job tasks with max_payload_bytes each)."""
        job = self.max_tasks_per_job * (self.max_payload_bytes + TASK_SPEC_SLACK_BYTES)
        return max(self.max_batch_bytes, job, self.max_result_bytes + self.max_output_tail_bytes
                   + TASK_SPEC_SLACK_BYTES)

    def _validate_raft_port(self) -> None:
        for name in ("raft_tls_cert", "raft_tls_key", "raft_tls_ca"):
            if not getattr(self, name):
                raise ConfigError(
                    f"{name}: required: the Raft port accepts only peers with a certificate "
                    f"of the cluster CA (`gnomon dev` and `python -m gnomon.node.certs` make "
                    f"them)")
        for name in ("raft_max_frame_bytes", "raft_append_batch_bytes",
                     "raft_handshake_timeout_ms", "raft_unauthenticated_idle_ms",
                     "raft_max_unauthenticated", "raft_listen_backlog", "raft_peer_timeout_ms",
                     "raft_max_send_buffer_bytes", "raft_connect_retry_ms",
                     "raft_send_backlog_bytes", "membership_catch_up_timeout_ms",
                     "raft_apply_budget_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}: must be positive")
        if self.membership_catch_up_lag_entries < 0:
            raise ConfigError("membership_catch_up_lag_entries: must be >= 0")
        if self.raft_send_backlog_bytes >= self.raft_max_send_buffer_bytes:
            raise ConfigError("raft_send_backlog_bytes: must be below raft_max_send_buffer_bytes")
        # A proposal batch is one log entry and must fit an append message whole: pysyncobj
        # splits a larger one and its peer unpickles the pieces (node/raft/DESIGN.md).
        entry = self.max_entry_bytes
        if entry + FRAME_SLACK_BYTES > self.raft_append_batch_bytes:
            raise ConfigError(
                f"raft_append_batch_bytes: must be at least {entry + FRAME_SLACK_BYTES} (the "
                f"largest log entry, from max_batch_bytes or max_tasks_per_job x "
                f"max_payload_bytes, plus {FRAME_SLACK_BYTES} bytes)")
        largest = max(self.raft_append_batch_bytes + entry, self.snapshot_send_chunk_bytes)
        if largest + FRAME_SLACK_BYTES > self.raft_max_frame_bytes:
            raise ConfigError(
                f"raft_max_frame_bytes: must be at least {largest + FRAME_SLACK_BYTES} "
                f"(raft_append_batch_bytes plus the largest log entry, or "
                f"snapshot_send_chunk_bytes, plus {FRAME_SLACK_BYTES} bytes)")

    def initial_limits(self) -> Limits:
        """The replicated limits this node proposes when it is a new cluster's first leader."""
        return Limits(**{f.name: getattr(self, f.name) for f in dataclasses.fields(Limits)})


def web_origin(scheme: str, host_port: str) -> str:
    """The origin a browser sends for pages at scheme://host_port (RFC 6454: lowercase,
    no default port)."""
    host_port = host_port.lower()
    default = {"http": ":80", "https": ":443"}.get(scheme, "")
    if default and host_port.endswith(default):
        host_port = host_port.removesuffix(default)
    return f"{scheme}://{host_port}"


def check_origin(origin: str) -> None:
    """An http_cors_origins entry is one origin as a browser writes it, or ConfigError."""
    from urllib.parse import urlsplit

    form = "'https://host[:port]' or 'http://host[:port]'"
    try:
        parts = urlsplit(origin)
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        raise ConfigError(f"http_cors_origins: {origin!r} is not an origin ({form})") from None
    if (parts.scheme not in ("http", "https") or not parts.hostname or parts.path
            or parts.query or parts.fragment or "@" in parts.netloc or origin.endswith(("?", "#"))):
        raise ConfigError(f"http_cors_origins: {origin!r} is not an origin ({form}: no path, "
                          "no '*', never 'null')")
    canonical = web_origin(parts.scheme, parts.netloc)
    if origin != canonical:
        raise ConfigError(f"http_cors_origins: {origin!r}: write it as a browser sends it, "
                          f"{canonical!r}")


_FIELDS = {f.name: f for f in dataclasses.fields(Config)}


def _coerce(name: str, raw: object) -> Any:
    """`raw` (a flag, variable or TOML value) as the type of the field `name`."""
    kind = _FIELDS[name].type
    if name == "members":
        return tuple(m if isinstance(m, Member) else _member(m)
                     for m in _items(name, raw, ";") if m)
    if name == "canaries":
        return tuple(str(x) for x in _items(name, raw, ",") if x)
    if name == "http_cors_origins":
        return tuple(str(x).strip() for x in _items(name, raw, ",") if str(x).strip())
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text not in ("1", "true", "yes", "on", "0", "false", "no", "off", ""):
            raise ConfigError(f"{name}: {raw!r} is not true or false")
        return text in ("1", "true", "yes", "on")
    if kind in ("int", "float"):
        try:
            if isinstance(raw, str | int | float):
                return int(raw) if kind == "int" else float(raw)
        except (ValueError, OverflowError):
            pass
        raise ConfigError(f"{name}: {raw!r} is not a {kind}")
    return str(raw)


def _items(name: str, raw: object, sep: str) -> Sequence[object]:
    if isinstance(raw, str):
        return raw.split(sep)
    if isinstance(raw, list | tuple):
        return raw
    raise ConfigError(f"{name}: {raw!r} is not a list")


def _member(item: object) -> Member:
    if isinstance(item, dict):
        return Member(str(item["id"]), str(item["raft"]), str(item["grpc"]),
                      str(item.get("http", "")))
    return Member.parse(str(item))


_FIELD_TEXT = {
    "node_id": "this node's id, one of the members",
    "members": "a member as id=raft_host:port,grpc_host:port[,http_host:port]; repeat for "
               "each (env: ';'-separated)",
    "data_dir": "directory of the Raft journal, snapshots and the run history",
    "canaries": "test-only fault switches (comma-separated); never in production",
}


def field_help() -> dict[str, str]:
    """`--help` text of every Config field: the comment beside or above it in this file, its
    default and its variable."""
    import inspect
    import re

    comments: dict[str, str] = {}
    block: list[str] = []
    group = ""
    for line in inspect.getsource(Config).splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            block.append(stripped.lstrip("# ").strip())
            continue
        m = re.match(r"\s+(\w+): [^=]+=(.*?)(?:#\s*(.*))?$", line)
        if m:
            if block:
                group, block = " ".join(block), []
            comments[m.group(1)] = (m.group(3) or "").strip() or group
            continue
        if not stripped:
            block, group = [], ""
    out = {}
    for name, f in _FIELDS.items():
        text = _FIELD_TEXT.get(name) or comments.get(name) or name.replace("_", " ")
        default = (f.default if f.default is not dataclasses.MISSING
                   else f.default_factory() if f.default_factory is not dataclasses.MISSING
                   else None)
        shown = "none" if default in ("", ()) else default
        out[name] = f"{text} (default: {shown}; env GNOMON_{name.upper()})".replace("%", "%%")
    return out


def load(argv: list[str] | None = None, env: dict[str, str] | None = None) -> Config:
    """Build the config from flags (argv), GNOMON_* variables and an optional TOML file."""
    env = dict(os.environ) if env is None else env
    parser = argparse.ArgumentParser(
        prog="gnomon-node", description="Run a gnomon scheduler node. Each option is also a "
        "GNOMON_<NAME> variable and a key of the --config file; flags win over variables, "
        "variables over the file. `gnomon-node restore FILE --data-dir DIR` prepares a data "
        "directory from a backup.")
    parser.add_argument("--config", metavar="FILE",
                        help="TOML file (keys as below, [[members]] tables; env GNOMON_CONFIG)")
    helps = field_help()
    for name in _FIELDS:
        if _FIELDS[name].type == "bool":
            # --x turns it on, --no-x off (a default-on setting such as raft_pre_vote).
            parser.add_argument("--" + name.replace("_", "-"), dest=name,
                                action=argparse.BooleanOptionalAction, default=None,
                                help=helps[name])
            continue
        parser.add_argument(
            "--" + name.replace("_", "-").removesuffix("s" if name == "members" else ""),
            dest=name,
            action="append" if name == "members" else "store",
            metavar=_FIELDS[name].type.upper().replace("TUPLE[MEMBER, ...]", "MEMBER")
            .replace("TUPLE[STR, ...]", "LIST"),
            help=helps[name],
        )
    args = parser.parse_args(argv)
    values: dict[str, object] = {}
    path = args.config or env.get("GNOMON_CONFIG")
    if path:
        with open(path, "rb") as fh:
            values.update(tomllib.load(fh))
    for name in _FIELDS:
        if f"GNOMON_{name.upper()}" in env:
            values[name] = env[f"GNOMON_{name.upper()}"]
        if getattr(args, name) is not None:
            values[name] = getattr(args, name)
    unknown = sorted(set(values) - set(_FIELDS))
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown configuration key")
    return Config(**{k: _coerce(k, v) for k, v in values.items()}).validate()
