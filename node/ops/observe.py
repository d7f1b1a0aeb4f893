"""What an operator sees of a node: state-derived metrics read at scrape time, the per-entry
counters fed from the tick thread, the health service's verdict, and the queue view that the
metrics and `gnomon queue list` share.

Scrape-time figures scan the runs in memory under the replica lock (O(runs in memory), which
`runs_retained_per_job` bounds); nothing here writes to the replicated state.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gnomon.node.clock import mono_ms, wall_ms
from gnomon.node.core.errors import Rejected
from gnomon.node.core.model import RunState, State, TaskState
from gnomon.node.ops import metrics

__all__ = ["EntryCounter", "QueueView", "StateCollector", "health_verdict", "queue_views"]


@dataclass
class QueueView:
    """One queue as the leader sees it: ready tasks, the oldest one's ready time, its workers."""

    queue: str
    ready: int = 0
    oldest_ready_ms: int = 0
    leased: int = 0
    workers: list[str] = field(default_factory=list)


def queue_views(st: State, sessions: dict[str, Any] | None = None) -> dict[str, QueueView]:
    """Ready and leased tasks per queue from the state (call under the replica lock), and the
    workers connected here serving each queue (leader only: workers connect to the leader)."""
    views: dict[str, QueueView] = {}
    for run in st.runs.values():
        if run.state != RunState.RUNNING:
            continue
        for inst in run.tasks.values():
            if inst.state not in (TaskState.READY, TaskState.LEASED):
                continue
            name = run.spec.task(inst.task_name).queue or "default"
            view = views.get(name) or views.setdefault(name, QueueView(name))
            if inst.state == TaskState.READY:
                view.ready += 1
                if not view.oldest_ready_ms or inst.ready_ms < view.oldest_ready_ms:
                    view.oldest_ready_ms = inst.ready_ms
            else:
                view.leased += 1
    for worker_id, session in (sessions or {}).items():
        for name in session.queues:
            view = views.get(name) or views.setdefault(name, QueueView(name))
            view.workers.append(worker_id)
    return views


class EntryCounter:
    """Per-entry counters, fed on the tick thread after each apply (every replica alike):
    commands by kind, rejections by code, batch size, runs that ended by outcome."""

    def __init__(self, remember: int = 10_000) -> None:
        self._counted: OrderedDict[str, None] = OrderedDict()
        self._remember = remember

    def applied(self, st: State, batch: Any, replies: list, effects: Any) -> None:
        metrics.APPLIED_ENTRIES.inc()
        n = len(batch.commands)
        metrics.BATCH_SIZE.observe(n)
        kinds = Counter(type(cmd).__name__ for cmd in batch.commands)
        for kind, count in kinds.items():
            metrics.COMMANDS.labels(kind).inc(count)
        for reply in replies:
            if isinstance(reply, Rejected):
                metrics.REJECTED.labels(reply.code).inc()
        for scope, _name in effects.circuit_opened:
            metrics.CIRCUIT_OPENS.labels(scope).inc()
        for scope in effects.circuit_skipped:
            metrics.CIRCUIT_SKIPPED.labels(scope).inc()
        self._runs_ended(st, batch, effects)

    def _runs_ended(self, st: State, batch: Any, effects: Any) -> None:
        candidates: set[str] = set()
        for cmd in batch.commands:
            run_id = getattr(cmd, "run_id", None)
            if run_id:
                candidates.add(run_id)
            elif hasattr(cmd, "scheduled_for_ms"):  # Fire: the run it created may be skipped
                candidates.add(f"{cmd.job_id}@{cmd.scheduled_for_ms}")
            for lease in getattr(cmd, "leases", ()) or ():
                if getattr(lease, "run_id", None):
                    candidates.add(lease.run_id)
        candidates.update(k[0] for k in effects.lease_ended)
        candidates.update(k[0] for k in effects.cancelled)
        ended: Counter[str] = Counter()  # one labels() lookup per outcome, not per run
        for run_id in candidates:
            run = st.runs.get(run_id)
            if run is None or run.state == RunState.RUNNING or run_id in self._counted:
                continue
            if run.finished_ms != st.clock_ms and run.state != RunState.SKIPPED:
                continue  # ended in an earlier entry
            self._counted[run_id] = None
            if len(self._counted) > self._remember:
                self._counted.popitem(last=False)
            ended[run.state] += 1
        for state, count in ended.items():
            metrics.RUNS_ENDED.labels(state).inc(count)


def health_verdict(node: Any) -> tuple[bool, str]:
    """(serving, why): a node serves while it knows a leader whose proof is fresh.

    The leader commits an entry at least every proof_interval (ARCHITECTURE section 4): the
    leader itself checks its own proof; a follower checks that it applied an entry within
    3 proof intervals plus the longest election timeout (commit indexes travel with
    heartbeats; a loaded machine delays them)."""
    raft = getattr(node, "raft", None)
    if raft is None:
        return False, "starting"
    leader = raft.leader()
    if leader is None:
        return False, "no leader"
    cfg = node.config
    if leader.node_id == cfg.node_id:
        if not node.leadership.ready:
            return False, "leader, term not committed yet"
        if not node.leadership.fresh():
            return False, "leader, proof stale"
        return True, "leader"
    # Slack for a loaded machine: a follower that misses this long also misses an election
    # timeout, so it is no tighter than Raft's own view of a dead leader.
    window = 3 * cfg.proof_interval_ms + int(cfg.raft_max_timeout_s * 1000) + 200
    age = mono_ms() - node.last_apply_mono
    if age > window:
        return False, f"follower, nothing applied for {age} ms (leader proof stale)"
    return True, "follower"


def _dir_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


# Below this many jobs the breaker/backfill gauges are counted on every scrape.
JOB_SCAN_EXACT = 100_000


class StateCollector:
    """Scrape-time metrics of one node (a prometheus_client custom collector)."""

    def __init__(self, node: Any) -> None:
        self.node = node
        # The per-job counts (breakers by state, running backfills) and when they were
        # taken (mono ms): see _job_counts.
        self._job_counts: tuple[Counter, int] = (Counter(), 0)
        self._job_counts_ms = -1

    def describe(self):  # no families at registration: collect() needs a running node
        return []

    def collect(self):
        node = self.node
        yield from self._raft()
        yield from self._state()
        yield from self._storage()
        serving, _why = health_verdict(node)
        yield _gauge("gnomon_health_serving",
                     "1 while the health service answers SERVING (a leader with a fresh proof)",
                     1 if serving else 0)

    def _raft(self):
        raft = self.node.raft
        if raft is None:
            return
        status = raft.status()
        yield _gauge("gnomon_raft_term", "Current Raft term", status.get("raft_term", 0))
        yield _gauge("gnomon_raft_commit_index", "Raft commit index known here",
                     status.get("commit_idx", 0))
        yield _gauge("gnomon_raft_applied_index", "Last Raft entry applied here",
                     status.get("last_applied", 0))
        yield _gauge("gnomon_raft_has_leader", "1 while this node knows a leader",
                     1 if raft.leader() is not None else 0)
        yield _gauge("gnomon_raft_members", "Voting members in this node's configuration "
                     "(node/raft/DESIGN.md, Membership)", len(raft.membership.members()))
        appended, fsyncs = raft.journal_counts()
        yield CounterMetricFamily("gnomon_raft_journal_entries", "Raft entries appended to "
                                  "this node's journal", value=appended)
        yield CounterMetricFamily("gnomon_raft_journal_fsyncs", "fsyncs of this node's journal "
                                  "file (group commit: one per batch of appended entries)",
                                  value=fsyncs)
        yield CounterMetricFamily("gnomon_raft_pre_vote_rounds", "Pre-vote rounds this node "
                                  "started: its election timer ran out (it did not hear a "
                                  "leader)", value=raft.pre_vote_rounds())
        gaps, longest = raft.tick_gaps()
        fam = CounterMetricFamily("gnomon_raft_tick_gaps", "Gaps between the starts of two Raft "
                                  "ticks longer than over_seconds (no heartbeat is sent "
                                  "meanwhile)", labels=["over_seconds"])
        for bound, count in gaps.items():
            fam.add_metric([f"{bound:g}"], count)
        yield fam
        yield _gauge("gnomon_raft_longest_tick_gap_seconds",
                     "The longest gap between two Raft ticks since the start", longest)

    def _state(self):
        node = self.node
        now = wall_ms()
        with node.replica.lock:
            st = node.replica.state
            jobs = len(st.jobs)
            runs = Counter(run.state for run in st.runs.values())
            tasks: Counter = Counter()
            for run in st.runs.values():
                if run.state == RunState.RUNNING:
                    tasks.update(inst.state for inst in run.tasks.values())
            views = queue_views(st)
            dead, evicted = len(st.dead_letters), st.dead_letters_evicted
            all_jobs = list(st.jobs.values()) if self._job_counts_due(jobs) else None
            queue_circuits = list(st.queue_circuits.values())
        if all_jobs is not None:  # counted outside the lock (O(jobs))
            self._job_counts = _job_counts(all_jobs)
            self._job_counts_ms = mono_ms()
            del all_jobs
        yield _gauge("gnomon_jobs", "Jobs in the replicated state", jobs)
        fam = GaugeMetricFamily("gnomon_runs", "Runs in memory, by state", labels=["state"])
        for state in (RunState.RUNNING, RunState.QUEUED, RunState.SUCCEEDED,
                      RunState.FAILED, RunState.CANCELLED, RunState.SKIPPED):
            fam.add_metric([state], runs.get(state, 0))
        yield fam
        fam = GaugeMetricFamily("gnomon_tasks", "Tasks of running runs, by state",
                                labels=["state"])
        for state in (TaskState.PENDING, TaskState.READY, TaskState.LEASED, TaskState.RETRY_WAIT,
                      TaskState.SUCCEEDED, TaskState.DEAD, TaskState.UPSTREAM_FAILED,
                      TaskState.CANCELLED):
            fam.add_metric([state], tasks.get(state, 0))
        yield fam
        backlog = GaugeMetricFamily("gnomon_queue_ready_tasks", "Ready tasks per queue",
                                    labels=["queue"])
        oldest = GaugeMetricFamily("gnomon_queue_oldest_ready_age_seconds",
                                   "Age of the oldest ready task per queue", labels=["queue"])
        for name, view in sorted(views.items()):
            backlog.add_metric([name], view.ready)
            age = max(0, now - view.oldest_ready_ms) / 1000 if view.oldest_ready_ms else 0
            oldest.add_metric([name], age)
        yield backlog
        yield oldest
        yield _gauge("gnomon_dead_letters", "Tasks in the dead-letter queue (DLQ depth)", dead)
        c = CounterMetricFamily("gnomon_dead_letters_evicted",
                                "Dead letters dropped because of limits.max_dead_letters")
        c.add_metric([], evicted)
        yield c
        leases = getattr(node, "leases", None)
        held = len(leases.deadlines) if leases is not None and node.leadership.ready else 0
        yield _gauge("gnomon_leases_held", "Leases this leader tracks", held)
        yield from _circuits(*self._job_counts, queue_circuits)

    def _job_counts_due(self, jobs: int) -> bool:
        """Whether to count the jobs again: on every scrape below JOB_SCAN_EXACT jobs; above,
        at most once per `jobs / JOB_SCAN_EXACT` seconds (10 s at a million). The scan walks
        every job (its list is taken under the lock, holding the tick thread): at 1M jobs
        tens of ms per scrape, paid on every scrape (the scale bench scrapes the leader
        every 50 ms during its fire herd). While a snapshot child runs, touching every job
        object also copies the pages it shares with the parent."""
        if jobs < JOB_SCAN_EXACT or self._job_counts_ms < 0:
            return True
        return mono_ms() - self._job_counts_ms >= jobs * 1000 // JOB_SCAN_EXACT

    def _storage(self):
        node = self.node
        cfg = node.config
        raft = node.raft
        if raft is not None:
            f = raft.snapshots.figures
            c = CounterMetricFamily("gnomon_snapshots", "Snapshots written by this node")
            c.add_metric([], f.completed)
            yield c
            c = CounterMetricFamily("gnomon_snapshot_failures", "Snapshots that failed here")
            c.add_metric([], f.failed)
            yield c
            yield _gauge("gnomon_snapshot_duration_seconds",
                         "Time the last snapshot took (fork and write)",
                         (f.fork_ms + f.child_ms) / 1000)
            yield _gauge("gnomon_snapshot_index", "Raft index of the last snapshot", f.index)
            path = raft.snapshots.path
            size = os.path.getsize(path) if os.path.exists(path) else 0
            yield _gauge("gnomon_snapshot_size_bytes", "Size of the snapshot file", size)
        yield _gauge("gnomon_history_store_bytes", "Size of the run history store on disk",
                     _dir_bytes(os.path.join(cfg.data_dir, "history")))
        try:
            usage = shutil.disk_usage(cfg.data_dir)
        except OSError:
            return
        yield _gauge("gnomon_data_dir_free_bytes", "Free bytes on the data directory's disk",
                     usage.free)
        yield _gauge("gnomon_data_dir_capacity_bytes", "Size of the data directory's disk",
                     usage.total)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


_CIRCUIT_STATES = ("closed", "open", "half_open")


def _job_counts(jobs: list) -> tuple[Counter, int]:
    """Jobs with a breaker by its state, and jobs whose backfill runs."""
    by_state = Counter(job.circuit.status for job in jobs if job.spec.circuit_breaker)
    backfills = sum(1 for job in jobs
                    if job.backfill is not None and job.backfill.status == "running")
    return by_state, backfills


def _circuits(by_state: Counter, backfills: int, queue_circuits: list):
    """Breakers by state: jobs counted (one series per state, bounded), queues each."""
    fam = GaugeMetricFamily("gnomon_job_circuits", "Jobs with a circuit breaker, by state",
                            labels=["state"])
    for state in _CIRCUIT_STATES:
        fam.add_metric([state], by_state.get(state, 0))
    yield fam
    fam = GaugeMetricFamily("gnomon_queue_circuit_state",
                            "A queue's circuit breaker: 1 for its current state",
                            labels=["tenant", "queue", "state"])
    for qc in queue_circuits:
        for state in _CIRCUIT_STATES:
            fam.add_metric([qc.tenant, qc.queue, state], 1 if qc.circuit.status == state else 0)
    yield fam
    yield _gauge("gnomon_backfills_running", "Job backfills still creating runs", backfills)
