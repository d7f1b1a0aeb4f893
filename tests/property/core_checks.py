"""Pieces shared by the core property tests: the workload vocabulary, the dedupe oracle and
the structural invariants of node/core/DESIGN.md ("Invariants"), as plain functions of a State.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter, OrderedDict
from dataclasses import dataclass, field, fields

from hypothesis import strategies as st

from gnomon.node.core.apply import reused_request_id
from gnomon.node.core.commands import SetLimits
from gnomon.node.core.dag import graph
from gnomon.node.core.errors import Code, Rejected
from gnomon.node.core.index import JobOrder
from gnomon.node.core.model import (
    TERMINAL_RUN_STATES,
    TERMINAL_TASK_STATES,
    DedupeEntry,
    DedupeKey,
    JobSpec,
    Limits,
    OverlapPolicy,
    RetryPolicy,
    Run,
    RunState,
    Schedule,
    ScheduleKind,
    State,
    TaskSpec,
    TaskState,
    dedupe_key,
)
from gnomon.node.core.results import LimitsReply, Reply
from gnomon.node.core.validate import queue_limit

T0 = 1_700_000_000_000
# What the first leader proposes (tight bounds, so that eviction, expiry and trimming happen).
LIMITS = Limits(dedupe_capacity=8, dedupe_max_age_ms=120_000, runs_retained_per_job=1,
                max_dead_letters=3, max_attempt_records=2)
BOOTSTRAP_ID = "gnomon:limits-bootstrap"

DAGS: list[dict[str, tuple[str, ...]]] = [
    {"a": ()},
    {"a": (), "b": ("a",)},
    {"a": (), "b": ("a",), "c": ("a",), "d": ("b", "c")},
    {"x": ("y",), "y": (), "z": ()},
    {"a": (), "b": (), "c": ("a", "b"), "d": ("c",)},
    {"a": (), "b": (), "x": ("b",), "c": ("a", "x")},
]
POLICIES = [
    RetryPolicy(max_attempts=1),
    RetryPolicy(max_attempts=2, initial_backoff_ms=500, jitter=-1.0),
    RetryPolicy(max_attempts=3, initial_backoff_ms=2_000, max_backoff_ms=5_000),
]
INTERVALS = [1_000, 5_000]
NAMES = [(tenant, name) for tenant in ("acme", "globex", "initech")
         for name in ("nightly", "hourly", "etl", "report")]
ACTIVE = frozenset({TaskState.READY, TaskState.LEASED, TaskState.RETRY_WAIT})
QUEUED = frozenset({TaskState.PENDING, TaskState.READY, TaskState.RETRY_WAIT})
REVIVABLE = frozenset({TaskState.DEAD, TaskState.UPSTREAM_FAILED})
# What a worker does with its lease in one step ("hold": still running, reports later).
OUTCOMES = ["complete"] * 4 + ["fail", "fail_final", "fail_final", "expire", "hold", "hold"]

# Replicated limits the SetLimits rule picks from (valid values; see INVALID_LIMITS).
LIMIT_CHOICES: dict[str, list[int]] = {
    "dedupe_capacity": [0, 1, 3, 8, 50],
    "dedupe_max_age_ms": [0, 1_000, 60_000, 120_000, 600_000],
    "runs_retained_per_job": [0, 1, 2, 4],
    "max_dead_letters": [1, 2, 3, 10],
    "max_attempt_records": [0, 1, 2, 5],
    "max_tokens_per_tenant": [1, 2, 1_000],
    "max_queue_circuits_per_tenant": [1, 2, 1_000],
}
# Smallest valid value per field (raft.proto / ClusterLimits); anything below is rejected.
AT_LEAST_ONE = ("max_dead_letters", "max_tokens_per_tenant", "max_queue_circuits_per_tenant")
LIMIT_MINIMUMS = {name: 1 if name in AT_LEAST_ONE else 0 for name in LIMIT_CHOICES}
assert set(LIMIT_CHOICES) == {f.name for f in fields(Limits)}

index = st.integers(min_value=0, max_value=10_000)
limit_values = st.fixed_dictionaries(
    {name: st.sampled_from(values) for name, values in LIMIT_CHOICES.items()})
# (output tail, exit code, duration) a worker reports with a completion or failure.
outputs = st.tuples(
    st.text(st.characters(codec="utf-8"), max_size=12),
    st.none() | st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 10**9),
)
reports = st.tuples(index, st.sampled_from(OUTCOMES), st.floats(0.0, 1.0), outputs)


def budget(default: int) -> int:
    """Hypothesis examples per test: GNOMON_PROPERTY_EXAMPLES raises it (e.g. nightly)."""
    return int(os.environ.get("GNOMON_PROPERTY_EXAMPLES", default))


def pick(items: list, i: int):
    return items[i % len(items)] if items else None


# (overlap policy, max_active_runs, max_buffered_runs): what a fire does while runs are active.
OVERLAPS = [
    (OverlapPolicy.ALLOW_ALL, None, 0),
    (OverlapPolicy.SKIP, None, 0),
    (OverlapPolicy.SKIP, 2, 0),
    (OverlapPolicy.BUFFER_ONE, None, 0),
    (OverlapPolicy.BUFFER_ALL, None, 2),
    (OverlapPolicy.CANCEL_OTHER, None, 0),
    (OverlapPolicy.TERMINATE_OTHER, None, 0),
    (OverlapPolicy.TERMINATE_OTHER, 2, 0),
]
# A manual trigger's override ("" is the job's own policy).
OVERRIDES = ["", "", "", OverlapPolicy.ALLOW_ALL, OverlapPolicy.SKIP, OverlapPolicy.BUFFER_ONE,
             OverlapPolicy.TERMINATE_OTHER]


def make_spec(name: int, dag: int, policy: int, interval: int, paused: bool = False,
              overlap: int = 0) -> JobSpec:
    tenant, job_name = pick(NAMES, name)
    overlap_policy, max_active, max_buffered = pick(OVERLAPS, overlap)
    return JobSpec(
        tenant=tenant,
        name=job_name,
        schedule=Schedule(kind=ScheduleKind.INTERVAL, interval_ms=pick(INTERVALS, interval)),
        tasks=tuple(
            TaskSpec(name=task, depends_on=deps, retry=pick(POLICIES, policy))
            for task, deps in pick(DAGS, dag).items()
        ),
        paused=paused,
        overlap_policy=overlap_policy,
        max_active_runs=max_active,
        max_buffered_runs=max_buffered,
    )


def check_overlap(state: State) -> None:
    """The overlap policy's facts: QUEUED runs wait only while their job is at its
    max_active_runs (a bounded policy), and the derived indexes hold exactly the job's
    RUNNING and QUEUED runs; a SKIPPED run says why."""
    for table, run_state in ((state.running_by_job, RunState.RUNNING),
                             (state.queued_by_job, RunState.QUEUED)):
        want: dict[str, set[str]] = {}
        for run in state.runs.values():
            if run.state == run_state:
                want.setdefault(run.job_id, set()).add(run.run_id)
        assert {job_id: set(ids) for job_id, ids in table.items()} == want, run_state
    for job_id, queued in state.queued_by_job.items():
        job = state.jobs.get(job_id)
        assert job is not None, f"queued runs {sorted(queued)} of deleted job {job_id}"
        limit = queue_limit(job.spec)
        running = len(state.running_by_job.get(job_id, ()))
        assert running >= limit, (job_id, sorted(queued), running, limit)
    for run in state.runs.values():
        if run.state == RunState.SKIPPED:
            assert run.reason == "misfire" or run.reason.startswith(("overlap", "circuit ")), \
                run.reason


# --- dedupe oracle ---------------------------------------------------------------------------


@dataclass
class DedupeModel:
    """What the dedupe table must hold: request ids per scope in first-seen order with the
    cluster time, reply and request fingerprint of their first application, forgetting the
    oldest beyond the count bound or older than the age bound (checked after every command,
    with the limits then in force). A repeat in the same scope with another fingerprint is
    refused and remembers nothing."""

    limits: Limits = Limits()
    entries: OrderedDict[DedupeKey, DedupeEntry] = field(default_factory=OrderedDict)

    def trim(self, now: int) -> None:
        age = self.limits.dedupe_max_age_ms
        while self.entries and (
            len(self.entries) > self.limits.dedupe_capacity
            or (age > 0 and now - next(iter(self.entries.values())).at_ms > age)
        ):
            self.entries.popitem(last=False)

    def apply(self, now: int, commands: tuple, replies: list[Reply]) -> list[bool]:
        """Follow one applied batch; per command, whether it was answered from the table
        (and then the reply must be the remembered one)."""
        self.trim(now)
        hits = []
        for command, reply in zip(commands, replies, strict=True):
            request_id = getattr(command, "request_id", "")
            key = dedupe_key(getattr(command, "request_scope", ""), request_id)
            fingerprint = getattr(command, "request_fingerprint", b"")
            entry = self.entries.get(key) if request_id else None
            hits.append(entry is not None)
            if entry is not None:
                want = entry.reply if entry.fingerprint == fingerprint else Rejected(
                    Code.FAILED_PRECONDITION, reused_request_id(request_id))
                assert reply == want, (key, reply)
                continue
            if isinstance(command, SetLimits) and isinstance(reply, LimitsReply):
                self.limits = command.limits
                self.trim(now)
            if request_id:
                self.entries[key] = DedupeEntry(now, reply, fingerprint)
                self.trim(now)
        return hits


# --- structural invariants -------------------------------------------------------------------


def check_structure(state: State, *, retention: int, attempt_records: int) -> None:
    """Facts that hold after every batch. `retention` bounds the unpinned terminal runs of a
    live job, `attempt_records` the records of one task instance."""
    assert {job_id: None for job_id in state.job_names.values()} == dict.fromkeys(state.jobs)
    for (tenant, name), job_id in state.job_names.items():
        assert (state.jobs[job_id].spec.tenant, state.jobs[job_id].spec.name) == (tenant, name)
    indexed = [rid for ids in state.runs_by_job.values() for rid in ids]
    assert sorted(indexed) == sorted(state.runs)
    check_bounds(state)
    leased_tokens = [inst.fencing_token for run in state.runs.values()
                     for inst in run.tasks.values() if inst.state == TaskState.LEASED]
    assert len(leased_tokens) == len(set(leased_tokens))
    assert all(0 < token <= state.last_token for token in leased_tokens)
    # A dead instance has a DLQ entry or left the queue by the bound (counted); an entry
    # always names a dead instance in memory.
    for key in state.dead_letters:
        run = state.runs.get(key[0])
        assert run is not None and run.tasks[key[1]].state == TaskState.DEAD, key
    # (A deleted job's dead letters left with it.)
    live = (r for r in state.runs.values() if r.job_id in state.jobs)
    unlisted = dead_keys(live) - set(state.dead_letters)
    assert len(unlisted) <= state.dead_letters_evicted, unlisted
    for run in state.runs.values():
        assert run.run_id in state.runs_by_job[run.job_id]
        check_run(run)
        for inst in run.tasks.values():
            check_attempts(state, inst.attempts, attempt_records)
    for job_id, ids in state.runs_by_job.items():
        unpinned = [rid for rid in ids if state.runs[rid].state in TERMINAL_RUN_STATES
                    and not any((rid, name) in state.dead_letters for name in state.runs[rid].tasks)]
        keep = retention if job_id in state.jobs else 0
        assert len(unpinned) <= keep, (job_id, unpinned, keep)


def check_bounds(state: State) -> None:
    """The dedupe table and the dead-letter queue respect the limits in force."""
    limits = state.limits
    assert len(state.dedupe) <= limits.dedupe_capacity
    times = [entry.at_ms for entry in state.dedupe.values()]
    assert times == sorted(times), "dedupe order is first-seen order"
    if limits.dedupe_max_age_ms > 0:
        assert all(state.clock_ms - at <= limits.dedupe_max_age_ms for at in times)
    assert len(state.dead_letters) <= limits.max_dead_letters


def check_attempts(state: State, attempts: tuple, bound: int) -> None:
    tokens = [record.fencing_token for record in attempts]
    assert all(a < b for a, b in itertools.pairwise(tokens)), tokens
    assert all(0 < token <= state.last_token for token in tokens)
    assert len(attempts) <= bound


def check_run(run: Run) -> None:
    states = [inst.state for inst in run.tasks.values()]
    if run.state == RunState.SKIPPED:
        assert states == []
        return
    if run.state == RunState.RUNNING:
        # Liveness: something can still move, or the run would be stuck forever.
        assert any(state in ACTIVE for state in states), (run.run_id, states)
        assert run.finished_ms == 0
    else:
        assert all(state in TERMINAL_TASK_STATES for state in states)
    dag = graph(run.spec)
    for name, inst in run.tasks.items():
        deps = [run.tasks[dep].state for dep in dag.deps[name]]
        if inst.state == TaskState.READY:
            assert all(dep == TaskState.SUCCEEDED for dep in deps)
        elif inst.state == TaskState.PENDING:
            assert deps and not all(dep == TaskState.SUCCEEDED for dep in deps)
        elif inst.state == TaskState.UPSTREAM_FAILED:
            assert any(dep in {TaskState.DEAD, TaskState.UPSTREAM_FAILED, TaskState.CANCELLED}
                       for dep in deps)


def check_deleted_job(state: State, job_id: str, cancel_running: bool) -> None:
    """After DeleteJob no run of the job has queued work; leased tasks only without
    cancel_running (they finish, nothing is dispatched again)."""
    assert job_id not in state.jobs
    for run_id in state.runs_by_job.get(job_id, ()):
        for name, inst in state.runs[run_id].tasks.items():
            assert inst.state not in QUEUED, (run_id, name, inst.state)
            if cancel_running:
                assert inst.state != TaskState.LEASED, (run_id, name)


# --- derived indexes -------------------------------------------------------------------------


def check_derived(state: State) -> None:
    """The derived indexes (not in snapshots) equal what the facts say."""
    assert state.active_runs == sum(run.state == RunState.RUNNING for run in state.runs.values())
    assert state.jobs_per_tenant == dict(Counter(job.spec.tenant for job in state.jobs.values()))

    def alive(seq: int) -> bool:
        return f"j{seq}" in state.jobs

    live = sorted(int(job_id[1:]) for job_id in state.jobs)
    check_pages(state.job_order, live, alive)
    by_tenant: dict[str, list[int]] = {}
    for seq in live:
        by_tenant.setdefault(state.jobs[f"j{seq}"].spec.tenant, []).append(seq)
    assert sorted(state.tenant_job_order) == sorted(by_tenant)
    for tenant, seqs in by_tenant.items():
        check_pages(state.tenant_job_order[tenant], seqs, alive)


def check_pages(order: JobOrder, live: list[int], alive) -> None:
    """Every page of `order` is the slice of the live job numbers a client expects."""
    assert len(order) == len(live)
    for after in (0, *live):
        for limit in (1, 2, len(live) + 1):
            assert order.page(after, limit, alive) == [s for s in live if s > after][:limit]


def dead_keys(runs) -> set[tuple[str, str]]:
    return {(run.run_id, name) for run in runs
            for name, inst in run.tasks.items() if inst.state == TaskState.DEAD}
