"""The hypothesis state machine of the replicated core (ARCHITECTURE.md §1, §8).

A simulated leader proposes random command batches. Every batch goes through the real Raft
codec (`batch_to_bytes` -> `batch_from_bytes`, checked to give the same batch back) and the
decoded batch is applied to every replica: the primary, a second replica, and, from a random
point on, a third one restored from an encoded snapshot of the primary (sometimes through a
real snapshot file) that replays every later batch. Replicas must agree on replies, effects
and digest after every batch. The leader's wall clock jumps back and forth while cluster time
only moves forward, a deposed leader re-proposes stale Fires, stale-token completions and
lease checkpoints, clients retry requests within and beyond the dedupe age, and the limits
change (also to invalid values) mid-run.

The log (encoded batches and the primary's digest after each) is kept in `self.log` /
`self.digests` so another process can replay it (test_replay_other_process.py).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gnomon.node import codec
from gnomon.node.core import apply_batch, digest, new_state
from gnomon.node.core.apply import reused_request_id
from gnomon.node.core.commands import (
    BackfillStep,
    Barrier,
    Batch,
    CancelBackfill,
    CancelRun,
    CheckpointLeases,
    CompleteTask,
    CreateJob,
    CreateJobItem,
    CreateJobs,
    DeleteJob,
    ExpiredLease,
    ExpireLeases,
    FailTask,
    Fire,
    GrantLeases,
    LeaseCheckpoint,
    LeaseGrant,
    ReplayDeadLetters,
    ResetCircuit,
    SetLimits,
    SetPaused,
    SetQueueCircuit,
    StartBackfill,
    TaskKey,
    TriggerJob,
    UpdateJob,
)
from gnomon.node.core.errors import Code, Rejected
from gnomon.node.core.model import (
    TERMINAL_TASK_STATES,
    AttemptOutcome,
    BackfillStatus,
    CircuitBreaker,
    DedupeKey,
    Limits,
    RunState,
    RunTrigger,
    State,
    TaskInstance,
    TaskState,
    dedupe_key,
)
from gnomon.node.core.results import (
    Done,
    Effects,
    JobReply,
    JobsReply,
    LimitsReply,
    Replayed,
    Reply,
    RunReply,
)
from gnomon.node.core.validate import effective_max_active_runs
from gnomon.node.storage import state_codec
from gnomon.node.storage.snapshot_file import (
    FORMAT_VERSION,
    SnapshotMeta,
    read_snapshot,
    write_snapshot,
)
from tests.property.core_checks import (
    BOOTSTRAP_ID,
    LIMIT_CHOICES,
    LIMIT_MINIMUMS,
    LIMITS,
    NAMES,
    OVERRIDES,
    REVIVABLE,
    T0,
    DedupeModel,
    check_deleted_job,
    check_derived,
    check_overlap,
    check_structure,
    dead_keys,
    index,
    limit_values,
    make_spec,
    pick,
    reports,
)

# Core bugs this machine found, each with a strict xfail in
# tests/unit/core/test_found_by_property.py. While one is open the machine checks the weaker
# form noted here; set the flag to False when the xfail test passes.
# SetLimits lowering runs_retained_per_job trims nothing: check against the highest value set.
OPEN_BUG_RETENTION_NOT_TRIMMED = False
# A deleted job's work comes back (retryable failure of a lease it kept, replay of its dead
# letters): check "no queued work" right after the delete only, not on every later step.
OPEN_BUG_DELETED_JOB_WORK_REVIVES = False

# Snapshot files are slow (LMDB + fsync): at most this many per example, the rest in memory.
FILE_ROUND_TRIPS_PER_EXAMPLE = 1
# The backfill slots the simulated leader computes: a grid of this step (the schedule the
# core never sees; scheduled fires land anywhere, which spans treat conservatively).
BACKFILL_GRID_MS = 10_000
BREAKERS = [CircuitBreaker(1, 100, 1_000), CircuitBreaker(2, 50, 5_000),
            CircuitBreaker(3, 60, 60_000)]


def _key(command) -> DedupeKey:
    """The key of `command`'s request id in State.dedupe."""
    return dedupe_key(command.request_scope, command.request_id)


@dataclasses.dataclass(frozen=True)
class Before:
    """What a batch is checked against: the primary just before it was applied."""

    clock: int
    runs: frozenset[str]
    tasks: dict[tuple[str, str], TaskInstance]
    dead_letters: frozenset[tuple[str, str]]
    evicted: int

    @staticmethod
    def of(state: State) -> Before:
        return Before(
            clock=state.clock_ms,
            runs=frozenset(state.runs),
            tasks={(run.run_id, name): dataclasses.replace(inst)
                   for run in state.runs.values() for name, inst in run.tasks.items()},
            dead_letters=frozenset(state.dead_letters),
            evicted=state.dead_letters_evicted,
        )


class CoreMachine(RuleBasedStateMachine):
    """Random leader behaviour against three replicas of the core, through the real codec."""

    def __init__(self) -> None:
        super().__init__()
        self.primary: State = new_state()
        self.replica: State = new_state()
        self.restored: State | None = None
        self.leader_now = T0
        self.term = 1
        self.created_runs: set[str] = set()
        self.max_token = 0
        self.fires: list[Fire] = []
        self.grants: list[tuple[str, str, int]] = []
        # dedupe key -> (command, the reply the dedupe table should give back)
        self.requests: dict[DedupeKey, tuple[object, Reply]] = {}
        self.request_seq = 0
        self.dedupe = DedupeModel()
        # job_id -> cancel_running of the DeleteJob that removed it.
        self.deleted: dict[str, bool] = {}
        # Dead letters that left the queue by the bound (each at most once: never replayable).
        self.evicted_letters: set[tuple[str, str]] = set()
        self.retention_high = 0
        self.attempt_records_high = 0
        self.file_round_trips = 0
        self.log: list[bytes] = []
        self.digests: list[str] = []
        self.last_effects = Effects()
        self.last_hits: list[bool] = []
        # (job_id, slot) -> runs that ran for it (scheduled or backfilled, not skipped).
        self.slot_runs: dict[tuple[str, int], int] = {}
        self.steps: list[BackfillStep] = []
        # The first leader of the cluster proposes the initial limits, once.
        bootstrap = SetLimits(BOOTSTRAP_ID, LIMITS)
        reply = self.propose(bootstrap)[0]
        assert reply == LimitsReply(1) and self.primary.limits == LIMITS
        self.remember(bootstrap, reply)

    # -- proposing ---------------------------------------------------------------------------

    def propose(self, *commands: object, now: int | None = None) -> list[Reply]:
        """Encode one batch, decode it, apply it to every replica, check every invariant that
        relates a batch to the state before it."""
        batch = Batch(now_ms=self.leader_now if now is None else now,
                      commands=tuple(commands))
        data = codec.batch_to_bytes(batch)
        decoded = codec.batch_from_bytes(data)
        assert decoded == batch
        before = Before.of(self.primary)
        replies, effects = apply_batch(self.primary, decoded)
        want = digest(self.primary)
        assert apply_batch(self.replica, decoded) == (replies, effects)
        if self.restored is None:
            assert digest(self.replica) == want
        else:
            # Digests cost most of the run: while a restored replica follows, it is the one
            # compared after every batch; the second replica at snapshots and teardown.
            assert apply_batch(self.restored, decoded) == (replies, effects)
            assert digest(self.restored) == want
            check_derived(self.restored)
        self.log.append(data)
        self.digests.append(want)
        self.last_effects = effects
        self.last_hits = self.dedupe.apply(self.primary.clock_ms, decoded.commands, replies)
        self._check_batch(before, decoded, replies, effects)
        return replies

    def _check_batch(self, before: Before, batch: Batch, replies: list[Reply],
                     effects: Effects) -> None:
        state = self.primary
        assert state.clock_ms == max(before.clock, batch.now_ms)
        self._check_new_runs(before.runs, [run.run_id for run in effects.evicted_runs])
        self._check_tokens([token for _, _, token in effects.leased])
        self.grants.extend(effects.leased)
        replayed = {key for reply, hit in zip(replies, self.last_hits, strict=True)
                    if isinstance(reply, Replayed) and not hit for key in reply.tasks}
        self._check_terminal_tasks(before, bool(replayed))
        self._check_dead_letter_flow(before, replayed, effects)
        self._check_new_attempts(before)
        self._check_overlap_starts(before, batch, replies)
        # Lowering a bound trims lazily in places: remember the highest values in force.
        self.retention_high = max(self.retention_high, state.limits.runs_retained_per_job)
        self.attempt_records_high = max(self.attempt_records_high,
                                        state.limits.max_attempt_records)

    def _check_overlap_starts(self, before: Before, batch: Batch, replies: list[Reply]) -> None:
        """A fire (scheduled or manual) that started a run under a bounded overlap policy
        leaves at most max_active_runs runs of its job running ("with SKIP, never two
        active runs of one job"); one that did not start a run skipped or queued it."""
        state = self.primary
        for command, reply, hit in zip(batch.commands, replies, self.last_hits, strict=True):
            if hit or not isinstance(command, Fire | TriggerJob):
                continue
            run = state.runs.get(reply.run_id) if isinstance(reply, RunReply) else None
            job = state.jobs.get(command.job_id)
            if run is None or job is None or run.run_id in before.runs:
                continue
            policy = getattr(command, "overlap_policy", "") or job.spec.overlap_policy
            limit = effective_max_active_runs(job.spec, policy)
            running = len(state.running_by_job.get(job.job_id, ()))
            if run.state == RunState.RUNNING and limit:
                assert running <= limit, (run.run_id, policy, running, limit)
                event(f"overlap {policy}: started within the bound")
            elif run.state in (RunState.SKIPPED, RunState.QUEUED, RunState.CANCELLED):
                event(f"overlap {policy}: {run.state}")

    def quiet_now(self) -> int:
        """A batch time that does not move the cluster clock (so digests can be compared)."""
        return min(self.leader_now, self.primary.clock_ms)

    def next_slot(self, offset: int) -> int:
        # The leader computes slots after max(its clock, cluster time): never a fired slot again.
        return max(self.leader_now, self.primary.clock_ms) + 1 + offset

    def request_id(self, fresh: bool) -> str:
        if not fresh:
            return ""
        self.request_seq += 1
        return f"r{self.request_seq}"

    def remember(self, command: object, reply: Reply) -> None:
        if getattr(command, "request_id", ""):
            self.requests[_key(command)] = (command, reply)

    def job_ids(self) -> list[str]:
        return list(self.primary.jobs) + ["j404"]

    def instances(self, states: frozenset[str] | None = None) -> list[tuple[str, str]]:
        return [
            (run.run_id, name)
            for run in self.primary.runs.values()
            for name, inst in run.tasks.items()
            if states is None or inst.state in states
        ]

    def is_current(self, run_id: str, task: str, token: int) -> bool:
        run = self.primary.runs.get(run_id)
        inst = run.tasks.get(task) if run else None
        return inst is not None and inst.state == TaskState.LEASED and inst.fencing_token == token

    def find_instance(self, run_id: str, task: str) -> TaskInstance | None:
        """The instance in memory, or in a run this batch handed to the history store."""
        run = self.primary.runs.get(run_id) or next(
            (r for r in self.last_effects.evicted_runs if r.run_id == run_id), None)
        return run.tasks[task] if run else None

    # -- cross-batch invariants ---------------------------------------------------------------

    def _check_new_runs(self, before: frozenset[str], evicted: list[str]) -> None:
        created = [rid for rid in list(self.primary.runs) + evicted if rid not in before]
        for run_id in created:
            assert run_id not in self.created_runs, f"run {run_id} created twice"
            self.created_runs.add(run_id)
        runs = {r.run_id: r for r in self.last_effects.evicted_runs}
        for run_id in created:
            run = self.primary.runs.get(run_id) or runs[run_id]
            if run.trigger != RunTrigger.MANUAL and run.state != RunState.SKIPPED:
                key = (run.job_id, run.scheduled_for_ms)
                self.slot_runs[key] = self.slot_runs.get(key, 0) + 1
                # A slot runs at most once: a backfilled slot never runs twice, nor a slot
                # the schedule ran.
                assert self.slot_runs[key] == 1, (key, run_id)
                event(f"slot ran ({run.trigger})")

    def _check_tokens(self, tokens: list[int]) -> None:
        for token in tokens:
            assert token > self.max_token, "fencing tokens must strictly increase"
            self.max_token = token
        assert self.primary.last_token == self.max_token

    def _check_terminal_tasks(self, before: Before, replayed: bool) -> None:
        for (run_id, name), old in before.tasks.items():
            run = self.primary.runs.get(run_id)
            if old.state not in TERMINAL_TASK_STATES or run is None:
                continue
            new = run.tasks[name].state
            if new != old.state:
                assert replayed and old.state in REVIVABLE, f"{run_id}:{name} {old.state} -> {new}"

    def _check_dead_letter_flow(self, before: Before, replayed: set, effects: Effects) -> None:
        """Every task that died got a DLQ entry; every entry that left the queue was replayed,
        left with its deleted job, or was counted in dead_letters_evicted (exactly once)."""
        state = self.primary
        died = {key for key in dead_keys([*state.runs.values(), *effects.evicted_runs])
                if key not in before.tasks or before.tasks[key].state != TaskState.DEAD}
        assert not replayed - before.dead_letters
        gone = (before.dead_letters | died) - set(state.dead_letters) - replayed
        # A deleted job's dead letters leave with it (replaying them would queue work of no
        # job); the others left because of the bound, counted.
        gone = {key for key in gone if key[0].split("@", 1)[0] in state.jobs}
        assert len(gone) == state.dead_letters_evicted - before.evicted, gone
        if gone:
            event("dead letters evicted by the bound")
        assert not gone & self.evicted_letters
        self.evicted_letters |= gone

    def _check_new_attempts(self, before: Before) -> None:
        """A finished lease appends one record, keeping the newest max_attempt_records; a
        lowered bound trims the oldest at once."""
        state = self.primary
        for run in state.runs.values():
            for name, inst in run.tasks.items():
                old = before.tasks.get((run.run_id, name))
                old_records = old.attempts if old else ()
                if inst.attempts == old_records:
                    continue
                keep = state.limits.max_attempt_records
                if len(inst.attempts) <= keep and inst.attempts == (
                        old_records[len(old_records) - keep:] if keep else ()):
                    continue  # a lowered max_attempt_records trimmed the oldest
                newest = inst.attempts[-1]
                assert 0 < len(inst.attempts) <= state.limits.max_attempt_records
                assert inst.attempts[:-1] == old_records[len(old_records) + 1 - len(inst.attempts):]
                assert (newest.fencing_token, newest.attempt, newest.finished_ms) == (
                    old.fencing_token, old.attempt, state.clock_ms)
                assert (newest.worker_id, newest.started_ms) == (old.worker_id, old.started_ms)

    # -- jobs --------------------------------------------------------------------------------

    @initialize(dags=st.lists(index, min_size=1, max_size=3), policy=index, overlap=index)
    def some_jobs(self, dags, policy, overlap):
        for name, dag in enumerate(dags):
            spec = make_spec(name, dag, policy, name, overlap=overlap + name)
            self.propose(CreateJob("", spec, self.next_slot(0)))

    @rule(name=index, dag=index, policy=index, interval=index, paused=st.booleans(),
          offset=st.integers(0, 20_000), quota=st.sampled_from([0, 0, 0, 2]),
          with_id=st.booleans(), overlap=index)
    def create_job(self, name, dag, policy, interval, paused, offset, quota, with_id, overlap):
        spec = make_spec(name, dag, policy, interval, paused, overlap)
        command = CreateJob(self.request_id(with_id), spec,
                            self.next_slot(offset), max_jobs_per_tenant=quota)
        self.remember(command, self.propose(command)[0])

    @rule(names=st.lists(index, min_size=1, max_size=4), dag=index, policy=index,
          interval=index, offset=st.integers(0, 20_000), quota=st.sampled_from([0, 0, 3]),
          with_id=st.booleans())
    def create_jobs(self, names, dag, policy, interval, offset, quota, with_id):
        """Bulk create: each item as a CreateJob of its own, in order (names taken by an
        earlier item and the quota filled by earlier ones reject the later items only)."""
        items = tuple(CreateJobItem(make_spec(n, dag, policy, interval), self.next_slot(offset))
                      for n in names)
        before = dict(self.primary.job_names)
        command = CreateJobs(self.request_id(with_id), items, quota)
        reply = self.propose(command)[0]
        self.remember(command, reply)
        assert isinstance(reply, JobsReply) and len(reply.items) == len(items)
        taken = set(before)
        for item, one in zip(items, reply.items, strict=True):
            key = (item.spec.tenant, item.spec.name)
            if key in taken:
                assert isinstance(one, Rejected) and one.code == Code.ALREADY_EXISTS, one
            elif isinstance(one, JobReply):
                assert self.primary.job_names[key] == one.job_id and one.version == 1
                taken.add(key)
            else:
                assert one.code == Code.RESOURCE_EXHAUSTED and quota, one
        assert set(self.primary.job_names) == taken

    @rule(job=index, dag=index, policy=index, interval=index, version=st.sampled_from([0, 1, -1]),
          offset=st.integers(0, 20_000), with_id=st.booleans(), overlap=index)
    def update_job(self, job, dag, policy, interval, version, offset, with_id, overlap):
        job_id = pick(self.job_ids(), job)
        current = self.primary.jobs.get(job_id)
        expected = {0: 0, 1: current.version if current else 1, -1: 99}[version]
        name = NAMES.index((current.spec.tenant, current.spec.name)) if current else 0
        command = UpdateJob(self.request_id(with_id), job_id,
                            make_spec(name, dag, policy, interval, overlap=overlap), expected,
                            self.next_slot(offset))
        self.remember(command, self.propose(command)[0])

    @rule(job=index, with_id=st.booleans(), cancel_running=st.booleans(),
          version=st.sampled_from([0, 0, 1, -1]), busy=st.booleans())
    def delete_job(self, job, with_id, cancel_running, version, busy):
        """Queued work of the job is cancelled; leased work too with cancel_running. `busy`
        prefers a job with leased tasks or dead letters (the interesting deletes)."""
        job_id = pick((busy and self.busy_jobs()) or self.job_ids(), job)
        current = self.primary.jobs.get(job_id)
        expected = {0: 0, 1: current.version if current else 1, -1: 99}[version]
        leased = {key: (inst.fencing_token, inst.worker_id)
                  for rid in self.primary.runs_by_job.get(job_id, ())
                  for key, inst in self._tasks_of(rid) if inst.state == TaskState.LEASED}
        command = DeleteJob(self.request_id(with_id), job_id, expected, cancel_running)
        reply = self.propose(command)[0]
        self.remember(command, reply)
        if self.last_hits[0] or reply != Done():
            assert reply == Done() or isinstance(reply, Rejected)
            return
        self.deleted[job_id] = cancel_running
        event(f"delete: {len(leased)} leased, cancel_running={cancel_running}")
        check_deleted_job(self.primary, job_id, cancel_running)
        cancelled = {(run_id, task): (token, worker)
                     for run_id, task, token, _, worker in self.last_effects.cancelled}
        assert cancelled == (leased if cancel_running else {})
        for (run_id, task), (token, _) in leased.items():
            inst = self.find_instance(run_id, task)
            assert inst is not None
            if cancel_running:
                assert inst.state == TaskState.CANCELLED
                assert self._last_outcome(inst, token) in (None, AttemptOutcome.CANCELLED)
            else:
                assert (inst.state, inst.fencing_token) == (TaskState.LEASED, token)

    def busy_jobs(self) -> list[str]:
        """Live jobs with a leased task or a dead letter in memory."""
        busy = {run.job_id for run in self.primary.runs.values()
                if any(inst.state in (TaskState.LEASED, TaskState.DEAD)
                       for inst in run.tasks.values())}
        return [job_id for job_id in self.primary.jobs if job_id in busy]

    def _tasks_of(self, run_id: str):
        return (((run_id, name), inst) for name, inst in self.primary.runs[run_id].tasks.items())

    def _last_outcome(self, inst: TaskInstance, token: int) -> str | None:
        """The outcome recorded for the lease `token` (None when no records are kept)."""
        if self.primary.limits.max_attempt_records == 0:
            return None
        newest = inst.attempts[-1]
        assert newest.fencing_token == token
        return newest.outcome

    @rule(count=st.integers(1, 40), name=index, now=st.integers(0, 3))
    def churn_jobs(self, count, name, now):
        """Many jobs created and deleted in one batch (the paging index compacts dead seqs);
        only one time in four (`now`), it is a long batch."""
        free = [i for i, key in enumerate(NAMES) if key not in self.primary.job_names]
        if not free or now:
            return
        spec = make_spec(pick(free, name), 0, 0, 0)
        first = self.primary.job_seq + 1
        commands = []
        for seq in range(first, first + count):
            commands += [CreateJob("", spec, self.next_slot(0)), DeleteJob("", f"j{seq}")]
            self.deleted[f"j{seq}"] = False
        replies = self.propose(*commands)
        assert replies == [r for seq in range(first, first + count)
                           for r in (JobReply(f"j{seq}", 1), Done())]

    @rule(job=index, paused=st.booleans(), offset=st.integers(0, 20_000), with_id=st.booleans())
    def set_paused(self, job, paused, offset, with_id):
        command = SetPaused(self.request_id(with_id), pick(self.job_ids(), job), paused,
                            self.next_slot(offset))
        self.remember(command, self.propose(command)[0])

    # -- limits ------------------------------------------------------------------------------

    @rule(values=limit_values, invalid=st.sampled_from([None] * 5 + list(LIMIT_CHOICES)),
          below=st.sampled_from([1, 1_000_000]),
          version=st.sampled_from(["any", "any", "current", "wrong"]), with_id=st.booleans())
    def set_limits(self, values, invalid, below, version, with_id):
        """Valid limits apply at once (bounds trim); invalid ones or a wrong expected version
        are rejected and change nothing."""
        state = self.primary
        limits = Limits(**values)
        if invalid is not None:
            limits = dataclasses.replace(limits, **{invalid: LIMIT_MINIMUMS[invalid] - below})
        old_limits, old_version = state.limits, state.limits_version
        expected = {"any": 0, "current": old_version, "wrong": old_version + 1}[version]
        before = digest(state)
        command = SetLimits(self.request_id(with_id), limits, expected)
        reply = self.propose(command, now=self.quiet_now())[0]
        self.remember(command, reply)
        event(f"set_limits: {type(reply).__name__}")
        if version == "wrong":
            assert isinstance(reply, Rejected) and reply.code == Code.FAILED_PRECONDITION
            assert "expected_version" in reply.detail
        elif invalid is not None:
            assert isinstance(reply, Rejected) and reply.code == Code.INVALID_ARGUMENT
            assert f"limits.{invalid}" in reply.detail, reply.detail
        else:
            assert reply == LimitsReply(old_version + 1)
            assert (state.limits, state.limits_version) == (limits, old_version + 1)
            return
        assert (state.limits, state.limits_version) == (old_limits, old_version)
        if not with_id:
            assert digest(state) == before

    # -- firing ------------------------------------------------------------------------------

    @rule(job=index, skip=st.integers(0, 4), last=st.integers(0, 9), gap=st.integers(1, 30_000))
    def fire_due(self, job, skip, last, gap):
        job_id = pick(self.job_ids(), job)
        current = self.primary.jobs.get(job_id)
        slot = current.next_fire_ms if current else T0
        # The leader fires a slot only once its own clock has reached it.
        self.leader_now = max(self.leader_now, slot)
        command = Fire(job_id, slot, 0 if last == 0 else slot + gap, skip=skip == 0)
        self.fires.append(command)
        self.propose(command)

    @rule()
    def fire_all_due_twice(self):
        """The trigger loop packs every due fire into one batch; a duplicate must be a no-op."""
        due = [job for job in self.primary.jobs.values()
               if job.next_fire_ms and not job.paused and job.next_fire_ms <= self.leader_now]
        fires = [Fire(job.job_id, job.next_fire_ms, job.next_fire_ms + 1_000) for job in due]
        self.fires.extend(fires)
        replies = self.propose(*fires, *fires)
        assert all(reply == RunReply("") for reply in replies[len(fires):])

    @precondition(lambda self: self.fires)
    @rule(i=index)
    def deposed_leader_refires(self, i):
        live = [fire for fire in self.fires if fire.job_id in self.primary.jobs]
        stale = pick(live or self.fires, i)
        job = self.primary.jobs.get(stale.job_id)
        was_due = job is not None and not job.paused and job.next_fire_ms == stale.scheduled_for_ms
        replies = self.propose(stale)
        if not was_due:
            assert replies == [RunReply("")]

    @rule(job=index, with_id=st.booleans(), override=index)
    def trigger(self, job, with_id, override):
        command = TriggerJob(self.request_id(with_id), pick(self.job_ids(), job),
                             pick(OVERRIDES, override))
        self.remember(command, self.propose(command)[0])

    # -- backfill and queue breakers ------------------------------------------------------

    @rule(job=index, back=st.integers(1, 30), length=st.integers(0, 30), override=index,
          with_id=st.booleans())
    def start_backfill(self, job, back, length, override, with_id):
        """A BackfillJob of a past range on the grid (the leader counted its slots)."""
        job_id = pick(self.job_ids(), job)
        now = self.primary.clock_ms
        to_ms = now // BACKFILL_GRID_MS * BACKFILL_GRID_MS
        from_ms = max(0, to_ms - back * BACKFILL_GRID_MS + length)
        total = len(range(-(-from_ms // BACKFILL_GRID_MS) * BACKFILL_GRID_MS, to_ms,
                          BACKFILL_GRID_MS))
        command = StartBackfill(self.request_id(with_id), job_id, from_ms, to_ms, total,
                                pick(["", *OVERRIDES], override))
        reply = self.propose(command)[0]
        event("start backfill: " + (reply.detail.split(":")[0] if isinstance(reply, Rejected)
                                    else "ok"))
        self.remember(command, reply)

    @rule(job=index, room=st.integers(1, 5))
    def backfill_step(self, job, room):
        """The leader's next slots of a running backfill, from its replicated cursor."""
        running = [j for j in self.primary.jobs.values()
                   if j.backfill is not None and j.backfill.status == BackfillStatus.RUNNING]
        if not running:
            return
        found = pick(running, job)
        bf = found.backfill
        first = -(-bf.next_slot_ms // BACKFILL_GRID_MS) * BACKFILL_GRID_MS
        slots = tuple(s for s in range(first, bf.to_ms, BACKFILL_GRID_MS))[:room]
        done = len(slots) < room or (slots and slots[-1] + BACKFILL_GRID_MS >= bf.to_ms)
        cursor = bf.to_ms if done or not slots else slots[-1] + 1
        step = BackfillStep(found.job_id, bf.next_slot_ms, slots, cursor, bool(done))
        self.steps.append(step)
        before = found.backfill
        assert not isinstance(self.propose(step)[0], Rejected)
        after = self.primary.jobs[found.job_id].backfill
        event(f"backfill step: {after.created - before.created} created, "
              f"{after.skipped - before.skipped} skipped")

    @precondition(lambda self: self.steps)
    @rule(i=index)
    def deposed_leader_resteps(self, i):
        """A step proposed again (retry, deposed leader): creates no run of a slot twice
        (the invariant in _check_new_runs); a stale cursor makes it a no-op."""
        step = pick(self.steps, i)
        job = self.primary.jobs.get(step.job_id)
        stale = job is None or job.backfill is None or job.backfill.next_slot_ms != step.cursor_ms
        before = digest(self.primary)
        self.propose(step, now=self.quiet_now())
        if stale:
            assert digest(self.primary) == before

    @rule(job=index, with_id=st.booleans())
    def cancel_backfill(self, job, with_id):
        command = CancelBackfill(self.request_id(with_id), pick(self.job_ids(), job))
        self.remember(command, self.propose(command)[0])

    @rule(name=index, breaker=st.sampled_from([None, *BREAKERS]), with_id=st.booleans(),
          reset=st.booleans())
    def queue_circuit(self, name, breaker, with_id, reset):
        tenant, _ = pick(NAMES, name)
        command = (ResetCircuit(self.request_id(with_id), "", tenant, "default") if reset
                   else SetQueueCircuit(self.request_id(with_id), tenant, "default", breaker))
        self.remember(command, self.propose(command)[0])

    @rule(run=index, with_id=st.booleans())
    def cancel(self, run, with_id):
        run_id = pick(list(self.primary.runs) + ["j404@1"], run)
        command = CancelRun(self.request_id(with_id), run_id, "test")
        self.remember(command, self.propose(command)[0])

    # -- leases ------------------------------------------------------------------------------

    @rule(picks=st.lists(index, min_size=1, max_size=3), ttl=st.integers(1, 60_000))
    def grant_anything(self, picks, ttl):
        """Grants of arbitrary instances (and a missing one): refused one by one."""
        pool = self.instances() + [("j404@1", "a")]
        grants = tuple(LeaseGrant(*pick(pool, i), f"w{i % 3}", ttl) for i in picks)
        self.propose(GrantLeases(grants))

    @rule(picks=st.lists(index, min_size=1, max_size=3), wait=st.booleans())
    def dispatch(self, picks, wait):
        """The leader leases dispatchable instances (optionally waiting for due retries)."""
        pool = self.instances(frozenset({TaskState.READY, TaskState.RETRY_WAIT}))
        chosen = list(dict.fromkeys(pick(pool, i) for i in picks if pool))
        if wait:
            due = [self.primary.runs[r].tasks[t].retry_at_ms for r, t in chosen]
            self.leader_now = max([self.leader_now, *due])
        grants = tuple(LeaseGrant(r, t, f"w{n}", 30_000) for n, (r, t) in enumerate(chosen))
        replies = self.propose(GrantLeases(grants))
        for grant, token in zip(grants, replies[0].tokens, strict=True):
            inst = self.primary.runs[grant.run_id].tasks[grant.task_name]
            if isinstance(token, Rejected):
                continue
            assert (inst.state, inst.fencing_token, inst.worker_id) == (
                TaskState.LEASED, token, grant.worker_id)
            assert (inst.lease_ttl_ms, inst.lease_remaining_ms) == (30_000, 0)

    @rule(picks=st.lists(reports, min_size=1, max_size=3))
    def workers_report(self, picks):
        """Workers holding current leases report outcomes (with output tail, exit code and
        duration), several in one batch."""
        leased = self.instances(frozenset({TaskState.LEASED}))
        if not leased:
            return
        chosen = {pick(leased, i): (outcome, draw, output) for i, outcome, draw, output in picks}
        chosen = {key: how for key, how in chosen.items() if how[0] != "hold"}
        if not chosen:
            return
        tokens = {key: self.primary.runs[key[0]].tasks[key[1]].fencing_token for key in chosen}
        commands = [self.report(run_id, task, tokens[run_id, task], *how)
                    for (run_id, task), how in chosen.items()]
        replies = self.propose(*commands)
        assert not any(isinstance(reply, Rejected) for reply in replies)
        for key, (outcome, _, output) in chosen.items():
            inst = self.find_instance(*key)
            assert inst is not None and inst.state != TaskState.LEASED
            self._check_report_recorded(inst, tokens[key], outcome, output)

    def _check_report_recorded(self, inst: TaskInstance, token: int, outcome: str,
                               output: tuple[str, int | None, int]) -> None:
        recorded = self._last_outcome(inst, token)
        if recorded is None:
            return
        newest = inst.attempts[-1]
        if outcome == "expire":
            assert (recorded, newest.error, newest.exit_code) == (
                AttemptOutcome.EXPIRED, "timeout", None)
            return
        want = AttemptOutcome.SUCCEEDED if outcome == "complete" else AttemptOutcome.FAILED
        assert recorded == want
        assert newest.error == {"complete": "", "fail": "boom", "fail_final": "fatal"}[outcome]
        assert (newest.output_tail, newest.exit_code, newest.duration_ms) == output

    @rule(rounds=st.lists(st.lists(reports, min_size=1, max_size=4), min_size=1, max_size=4))
    def work(self, rounds):
        """Lease and finish dispatchable instances right away, a few rounds (drives runs on);
        an idle cluster gets a manual run of some job first."""
        for picks in rounds:
            if not self.instances(frozenset({TaskState.READY, TaskState.RETRY_WAIT})):
                job_id = pick(list(self.primary.jobs), picks[0][0])
                if job_id is not None:
                    self.propose(TriggerJob("", job_id))
            self.dispatch([i for i, *_ in picks], wait=True)
            self.workers_report(picks)

    @staticmethod
    def report(run_id: str, task: str, token: int, outcome: str, draw: float,
               output: tuple[str, int | None, int]) -> object:
        tail, exit_code, duration = output
        return {
            "complete": lambda: CompleteTask(run_id, task, token, b"r", tail, exit_code, duration),
            "fail": lambda: FailTask(run_id, task, token, "boom", True, draw, tail, exit_code,
                                     duration),
            "fail_final": lambda: FailTask(run_id, task, token, "fatal", False, draw, tail,
                                           exit_code, duration),
            "expire": lambda: ExpireLeases((ExpiredLease(run_id, task, token, "timeout", draw),)),
        }[outcome]()

    @precondition(lambda self: self.grants)
    @rule(i=index, kind=st.sampled_from(["complete", "fail", "expire", "checkpoint"]))
    def deposed_worker_reports(self, i, kind):
        """A completion / failure / expiry / checkpoint with a token that is no longer current."""
        run_id, task, token = pick(self.grants, i)
        if self.is_current(run_id, task, token):
            return  # still current: not stale
        command = {
            "complete": CompleteTask(run_id, task, token, output_tail="late", exit_code=0),
            "fail": FailTask(run_id, task, token, "late", True),
            "expire": ExpireLeases((ExpiredLease(run_id, task, token),)),
            "checkpoint": CheckpointLeases((LeaseCheckpoint(run_id, task, token, 5_000),)),
        }[kind]
        before = digest(self.primary)
        replies = self.propose(command, now=self.quiet_now())
        assert digest(self.primary) == before
        assert isinstance(replies[0], Rejected) or kind in ("expire", "checkpoint")

    @rule(picks=st.lists(st.tuples(index, st.integers(-1_000, 60_000), st.booleans()),
                         min_size=1, max_size=4))
    def checkpoint_leases(self, picks):
        """The leader checkpoints remaining lease time: current tokens record it (clamped at
        0, the last one per lease wins), stale ones are ignored."""
        leased = self.instances(frozenset({TaskState.LEASED}))
        stale = [g for g in self.grants if not self.is_current(*g)]
        checkpoints = []
        for i, remaining, use_stale in picks:
            if use_stale and stale:
                checkpoints.append(LeaseCheckpoint(*pick(stale, i), remaining))
            elif leased:
                run_id, task = pick(leased, i)
                token = self.primary.runs[run_id].tasks[task].fencing_token
                checkpoints.append(LeaseCheckpoint(run_id, task, token, remaining))
        if not checkpoints:
            return
        expected = {(cp.run_id, cp.task_name): max(0, cp.remaining_ms) for cp in checkpoints
                    if self.is_current(cp.run_id, cp.task_name, cp.fencing_token)}
        remaining_before = {(run.run_id, name): inst.lease_remaining_ms
                            for run in self.primary.runs.values()
                            for name, inst in run.tasks.items()}
        before = digest(self.primary)
        assert self.propose(CheckpointLeases(tuple(checkpoints)), now=self.quiet_now()) == [Done()]
        for (run_id, task), old in remaining_before.items():
            inst = self.primary.runs[run_id].tasks[task]
            assert inst.lease_remaining_ms == expected.get((run_id, task), old)
        if all(remaining_before[key] == ms for key, ms in expected.items()):
            assert digest(self.primary) == before

    # -- dead letters ------------------------------------------------------------------------

    @rule(picks=st.lists(index, min_size=1, max_size=3), bogus=st.integers(0, 4),
          with_id=st.booleans())
    def replay(self, picks, bogus, with_id):
        keys = list(self.primary.dead_letters)
        chosen = [TaskKey(*pick(keys, i)) for i in picks if keys]
        if bogus == 0 or not chosen:
            chosen.append(TaskKey("j404@1", "a"))
        command = ReplayDeadLetters(self.request_id(with_id), tuple(chosen))
        self.remember(command, self.propose(command)[0])

    @precondition(lambda self: self.primary.dead_letters)
    @rule(picks=st.lists(index, min_size=1, max_size=3))
    def replay_dead_letters(self, picks):
        keys = list(self.primary.dead_letters)
        chosen = tuple(TaskKey(*pick(keys, i)) for i in picks)
        replies = self.propose(ReplayDeadLetters("", chosen))
        assert not isinstance(replies[0], Rejected)
        assert all(key not in self.primary.dead_letters for key in replies[0].tasks)

    @rule(i=index)
    def replay_evicted_letter(self, i):
        """A dead task whose entry left the queue by the bound cannot be replayed."""
        gone = sorted(key for key in self.evicted_letters if key[0] in self.primary.runs)
        if not gone:
            return
        before = digest(self.primary)
        reply = self.propose(ReplayDeadLetters("", (TaskKey(*pick(gone, i)),)),
                             now=self.quiet_now())[0]
        assert isinstance(reply, Rejected) and reply.code == Code.NOT_FOUND
        assert digest(self.primary) == before

    # -- requests and time --------------------------------------------------------------------

    @precondition(lambda self: self.requests)
    @rule(i=index, wait=st.sampled_from(["none", "short", "edge", "past_edge", "long"]))
    def client_retries(self, i, wait):
        """A retry within the dedupe age bound gets the first answer and changes nothing;
        beyond it the request is forgotten and may apply again. Cluster time only moves
        forward (an empty batch from the leader advances it first)."""
        command, first_reply = pick(list(self.requests.values()), i)
        key = _key(command)
        entry = self.primary.dedupe.get(key)
        max_age = self.primary.limits.dedupe_max_age_ms
        target = self._retry_time(entry.at_ms if entry else None, max_age, wait)
        if target > self.primary.clock_ms:
            self.leader_now = max(self.leader_now, target)
            self.propose(now=target)
        kept = self.primary.dedupe.get(key)
        if entry is not None and max_age > 0:
            age = self.primary.clock_ms - entry.at_ms
            assert (kept is not None) == (age <= max_age), (age, max_age)
        before = digest(self.primary)
        reply = self.propose(command, now=self.quiet_now())[0]
        event(f"client retry: {'answered from dedupe' if kept else 'forgotten'} ({wait})")
        if kept is not None:
            assert reply == first_reply == kept.reply
            assert digest(self.primary) == before
            return
        assert not self.last_hits[0]
        self.remember(command, reply)
        if isinstance(command, TriggerJob) and command.job_id in self.primary.jobs:
            assert isinstance(reply, RunReply) and reply != first_reply

    @precondition(lambda self: self.requests)
    @rule(i=index, same_caller=st.booleans())
    def request_id_reused(self, i, same_caller):
        """Another caller (its own scope) sends a remembered request id: another request,
        applied as such, never answered with the first caller's reply. The same caller sends
        a different request (another fingerprint) under a remembered id: refused, nothing
        changes, and the id keeps answering the first request."""
        command, first_reply = pick(list(self.requests.values()), i)
        if same_caller:
            entry = self.primary.dedupe.get(_key(command))
            if entry is None:  # forgotten: it would apply as a new request
                return
            other = dataclasses.replace(
                command, request_fingerprint=command.request_fingerprint + b"/other")
            before = digest(self.primary)
            reply = self.propose(other, now=self.quiet_now())[0]
            event("request id reused by its caller for another request")
            assert reply == Rejected(Code.FAILED_PRECONDITION,
                                     reused_request_id(command.request_id)), reply
            assert digest(self.primary) == before
            assert self.primary.dedupe[_key(command)] == entry
            return
        self.request_seq += 1
        other = dataclasses.replace(command, request_scope=f"t{self.request_seq}/Rpc/tenant",
                                    request_fingerprint=b"another caller's request")
        reply = self.propose(other)[0]
        event("request id reused by another caller")
        assert not self.last_hits[0]
        self.remember(other, reply)
        if isinstance(command, TriggerJob) and command.job_id in self.primary.jobs:
            assert isinstance(reply, RunReply) and reply != first_reply

    def _retry_time(self, at_ms: int | None, max_age: int, wait: str) -> int:
        clock = self.primary.clock_ms
        if at_ms is None or max_age == 0:
            return clock + {"none": 0, "short": 1_000}.get(wait, 1_000_000)
        return {"none": clock, "short": clock + 1_000, "edge": at_ms + max_age,
                "past_edge": at_ms + max_age + 1, "long": at_ms + 10 * max_age}[wait]

    @rule(delta=st.integers(0, 10_000),
          rounds=st.lists(st.lists(reports, min_size=1, max_size=4), min_size=1, max_size=3))
    def leader_tick(self, delta, rounds):
        """Time passes on the leader: the trigger loop fires what is due, dispatch leases
        ready work and workers report (the steady state most steps should look like)."""
        self.leader_now += delta
        self.fire_all_due_twice()
        self.work(rounds)

    @rule(delta=st.integers(-300_000, 600_000), new_term=st.booleans())
    def leader_clock_jumps(self, delta, new_term):
        """The leader's wall clock jumps (and sometimes another node leads)."""
        self.leader_now = max(0, self.leader_now + delta)
        self.term += new_term

    @rule(empty=st.booleans())
    def barrier(self, empty):
        self.propose() if empty else self.propose(Barrier())

    # -- snapshots -----------------------------------------------------------------------------

    @rule(via_file=st.booleans())
    def follower_installs_snapshot(self, via_file):
        """A third replica restores from a snapshot of the primary and replays the tail."""
        self.restored = self.snapshot_round_trip(via_file)

    @rule(which=st.sampled_from(["primary", "replica"]), via_file=st.booleans())
    def restart_from_snapshot(self, which, via_file):
        setattr(self, which, self.snapshot_round_trip(via_file))

    def snapshot_round_trip(self, via_file: bool) -> State:
        """The primary's state through state_codec (and sometimes a real snapshot file)."""
        want = digest(self.primary)
        assert digest(self.replica) == want
        if via_file and self.file_round_trips < FILE_ROUND_TRIPS_PER_EXAMPLE:
            self.file_round_trips += 1
            state = self._through_file(want)
        else:
            tables = state_codec.encode_tables(self.primary)
            state = state_codec.decode_tables({name: iter(t) for name, t in tables.items()})
        assert digest(state) == want
        check_derived(state)
        return state

    def _through_file(self, want: str) -> State:
        meta = SnapshotMeta(FORMAT_VERSION, raft_index=len(self.log), state_digest=want,
                            written_ms=self.primary.clock_ms, jobs=len(self.primary.jobs),
                            runs=len(self.primary.runs))
        with tempfile.TemporaryDirectory(prefix="gnomon-property-") as tmp:
            path = os.path.join(tmp, "snapshot.lmdb")
            write_snapshot(path, meta, b"raft", state_codec.encode_tables(self.primary))
            with read_snapshot(path) as snap:
                assert (snap.meta, snap.raft_data) == (meta, b"raft")
                return state_codec.decode_tables(
                    {name: snap.iter_table(name) for name in state_codec.TABLES})

    def teardown(self) -> None:
        assert digest(self.replica) == digest(self.primary)

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def structure(self):
        retention = self.primary.limits.runs_retained_per_job
        if OPEN_BUG_RETENTION_NOT_TRIMMED:
            retention = max(retention, self.retention_high)
        records = max(self.attempt_records_high, self.primary.limits.max_attempt_records)
        check_structure(self.primary, retention=retention, attempt_records=records)
        check_derived(self.primary)
        check_overlap(self.primary)
        if self.restored is not None:
            check_overlap(self.restored)

    @invariant()
    def dedupe_matches_model(self):
        assert self.primary.limits == self.dedupe.limits
        assert list(self.primary.dedupe.items()) == list(self.dedupe.entries.items())

    @invariant()
    def dead_tasks_are_listed_or_counted(self):
        state = self.primary
        assert len(self.evicted_letters) == state.dead_letters_evicted
        assert not self.evicted_letters & set(state.dead_letters)
        live_jobs = [r for r in state.runs.values() if r.job_id in state.jobs]
        assert dead_keys(live_jobs) <= set(state.dead_letters) | self.evicted_letters

    @invariant()
    def deleted_jobs_have_no_queued_work(self):
        if OPEN_BUG_DELETED_JOB_WORK_REVIVES:
            return
        for job_id, cancel_running in self.deleted.items():
            check_deleted_job(self.primary, job_id, cancel_running)
