"""Stateful property test of the replicated state machine (ARCHITECTURE.md §1, §8).

A simulated leader proposes random command batches; every batch is applied to two replicas.
The leader's wall clock jumps back and forth, a deposed leader re-proposes stale Fires and
stale-token completions, clients retry requests, and replicas restart from snapshots
(copy.deepcopy stands in for the snapshot round trip at this layer).
"""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from gnomon.node.core import apply_batch, digest, new_state
from gnomon.node.core.commands import (
    Barrier,
    Batch,
    CancelRun,
    CompleteTask,
    CreateJob,
    DeleteJob,
    ExpiredLease,
    ExpireLeases,
    FailTask,
    Fire,
    GrantLeases,
    LeaseGrant,
    ReplayDeadLetters,
    SetPaused,
    TaskKey,
    TriggerJob,
    UpdateJob,
)
from gnomon.node.core.dag import graph
from gnomon.node.core.errors import Rejected
from gnomon.node.core.model import (
    TERMINAL_RUN_STATES,
    TERMINAL_TASK_STATES,
    JobSpec,
    Limits,
    RetryPolicy,
    RunState,
    Schedule,
    ScheduleKind,
    State,
    TaskSpec,
    TaskState,
)
from gnomon.node.core.results import RunReply

LIMITS = Limits(dedupe_capacity=8, runs_retained_per_job=1)
T0 = 1_700_000_000_000

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
REVIVABLE = frozenset({TaskState.DEAD, TaskState.UPSTREAM_FAILED})

OUTCOMES = ["complete"] * 4 + ["fail", "fail_final", "fail_final", "expire"]

index = st.integers(min_value=0, max_value=10_000)


def pick(items: list, i: int):
    return items[i % len(items)] if items else None


def make_spec(name: int, dag: int, policy: int, interval: int, paused: bool = False) -> JobSpec:
    tenant, job_name = pick(NAMES, name)
    return JobSpec(
        tenant=tenant,
        name=job_name,
        schedule=Schedule(kind=ScheduleKind.INTERVAL, interval_ms=pick(INTERVALS, interval)),
        tasks=tuple(
            TaskSpec(name=task, depends_on=deps, retry=pick(POLICIES, policy))
            for task, deps in pick(DAGS, dag).items()
        ),
        paused=paused,
    )


class CoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.primary: State = new_state(LIMITS)
        self.replica: State = new_state(LIMITS)
        self.leader_now = T0
        self.created_runs: set[str] = set()
        self.max_token = 0
        self.fires: list[Fire] = []
        self.grants: list[tuple[str, str, int]] = []
        self.requests: list[tuple[object, object]] = []
        self.request_seq = 0

    # -- proposing ---------------------------------------------------------------------------

    def propose(self, *commands: object, now: int | None = None) -> list:
        """Apply one batch to both replicas and check every cross-batch invariant."""
        batch = Batch(now_ms=self.leader_now if now is None else now, commands=commands)
        clock_before = self.primary.clock_ms
        runs_before = set(self.primary.runs)
        tasks_before = self._task_states()
        replies, effects = apply_batch(self.primary, batch)
        replica_replies, replica_effects = apply_batch(self.replica, batch)
        assert replies == replica_replies
        assert effects == replica_effects
        assert digest(self.primary) == digest(self.replica)
        assert self.primary.clock_ms == max(clock_before, batch.now_ms)
        self._check_new_runs(runs_before, [run.run_id for run in effects.evicted_runs])
        self._check_tokens([token for _, _, token in effects.leased])
        self.grants.extend(effects.leased)
        replayed = any(isinstance(command, ReplayDeadLetters) for command in commands)
        self._check_terminal_tasks(tasks_before, replayed)
        return replies

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

    def remember(self, command: object, reply: object) -> None:
        if getattr(command, "request_id", ""):
            self.requests.append((command, reply))

    def job_ids(self) -> list[str]:
        return list(self.primary.jobs) + ["j404"]

    def instances(self, states: frozenset[str] | None = None) -> list[tuple[str, str]]:
        return [
            (run.run_id, name)
            for run in self.primary.runs.values()
            for name, inst in run.tasks.items()
            if states is None or inst.state in states
        ]

    # -- cross-batch invariants ---------------------------------------------------------------

    def _task_states(self) -> dict[tuple[str, str], str]:
        return {key: self.primary.runs[key[0]].tasks[key[1]].state for key in self.instances()}

    def _check_new_runs(self, before: set[str], evicted: list[str]) -> None:
        created = [rid for rid in list(self.primary.runs) + evicted if rid not in before]
        for run_id in created:
            assert run_id not in self.created_runs, f"run {run_id} created twice"
            self.created_runs.add(run_id)

    def _check_tokens(self, tokens: list[int]) -> None:
        for token in tokens:
            assert token > self.max_token, "fencing tokens must strictly increase"
            self.max_token = token
        assert self.primary.last_token == self.max_token

    def _check_terminal_tasks(self, before: dict[tuple[str, str], str], replayed: bool) -> None:
        for (run_id, name), old in before.items():
            run = self.primary.runs.get(run_id)
            if old not in TERMINAL_TASK_STATES or run is None:
                continue
            new = run.tasks[name].state
            if new != old:
                assert replayed and old in REVIVABLE, f"{run_id}:{name} {old} -> {new}"

    # -- jobs --------------------------------------------------------------------------------

    @initialize(dags=st.lists(index, min_size=1, max_size=3), policy=index)
    def some_jobs(self, dags, policy):
        for name, dag in enumerate(dags):
            self.propose(CreateJob("", make_spec(name, dag, policy, name), self.next_slot(0)))

    @rule(name=index, dag=index, policy=index, interval=index, paused=st.booleans(),
          offset=st.integers(0, 20_000), quota=st.sampled_from([0, 0, 0, 2]),
          with_id=st.booleans())
    def create_job(self, name, dag, policy, interval, paused, offset, quota, with_id):
        command = CreateJob(self.request_id(with_id), make_spec(name, dag, policy, interval, paused),
                            self.next_slot(offset), max_jobs_per_tenant=quota)
        self.remember(command, self.propose(command)[0])

    @rule(job=index, dag=index, policy=index, interval=index, version=st.sampled_from([0, 1, -1]),
          offset=st.integers(0, 20_000), with_id=st.booleans())
    def update_job(self, job, dag, policy, interval, version, offset, with_id):
        job_id = pick(self.job_ids(), job)
        current = self.primary.jobs.get(job_id)
        expected = {0: 0, 1: current.version if current else 1, -1: 99}[version]
        name = NAMES.index((current.spec.tenant, current.spec.name)) if current else 0
        command = UpdateJob(self.request_id(with_id), job_id,
                            make_spec(name, dag, policy, interval), expected,
                            self.next_slot(offset))
        self.remember(command, self.propose(command)[0])

    @rule(job=index, with_id=st.booleans())
    def delete_job(self, job, with_id):
        command = DeleteJob(self.request_id(with_id), pick(self.job_ids(), job))
        self.remember(command, self.propose(command)[0])

    @rule(job=index, paused=st.booleans(), offset=st.integers(0, 20_000), with_id=st.booleans())
    def set_paused(self, job, paused, offset, with_id):
        command = SetPaused(self.request_id(with_id), pick(self.job_ids(), job), paused,
                            self.next_slot(offset))
        self.remember(command, self.propose(command)[0])

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

    @rule(job=index, with_id=st.booleans())
    def trigger(self, job, with_id):
        command = TriggerJob(self.request_id(with_id), pick(self.job_ids(), job))
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
        replies = self.propose(GrantLeases(tuple(LeaseGrant(r, t, "w", 30_000)
                                                 for r, t in chosen)))
        for (run_id, task), token in zip(chosen, replies[0].tokens, strict=True):
            inst = self.primary.runs[run_id].tasks[task]
            assert isinstance(token, Rejected) or inst.fencing_token == token

    @rule(picks=st.lists(st.tuples(index, st.sampled_from(OUTCOMES), st.floats(0.0, 1.0)),
                         min_size=1, max_size=3))
    def workers_report(self, picks):
        """Workers holding current leases report outcomes, several in one batch."""
        leased = self.instances(frozenset({TaskState.LEASED}))
        if not leased:
            return
        chosen = {pick(leased, i): (outcome, draw) for i, outcome, draw in picks}
        commands = [self.report(run_id, task, outcome, draw)
                    for (run_id, task), (outcome, draw) in chosen.items()]
        replies = self.propose(*commands)
        assert not any(isinstance(reply, Rejected) for reply in replies)
        for run_id, task in chosen:
            run = self.primary.runs.get(run_id)
            assert run is None or run.tasks[task].state != TaskState.LEASED

    @rule(rounds=st.lists(st.lists(st.tuples(index, st.sampled_from(OUTCOMES),
                                              st.floats(0.0, 1.0)), min_size=1, max_size=4),
                          min_size=1, max_size=4))
    def work(self, rounds):
        """Lease and finish dispatchable instances right away, a few rounds (drives runs on)."""
        for picks in rounds:
            self.dispatch([i for i, _, _ in picks], wait=True)
            self.workers_report(picks)

    def report(self, run_id: str, task: str, outcome: str, draw: float) -> object:
        token = self.primary.runs[run_id].tasks[task].fencing_token
        return {
            "complete": CompleteTask(run_id, task, token, b"r"),
            "fail": FailTask(run_id, task, token, "boom", True, draw),
            "fail_final": FailTask(run_id, task, token, "fatal", False, draw),
            "expire": ExpireLeases((ExpiredLease(run_id, task, token, "timeout", draw),)),
        }[outcome]

    @precondition(lambda self: self.grants)
    @rule(i=index, kind=st.sampled_from(["complete", "fail", "expire"]))
    def deposed_worker_reports(self, i, kind):
        """A completion / failure / expiry with a token that is no longer current."""
        grant = pick(self.grants, i)
        if grant is None:
            return
        run_id, task, token = grant
        run = self.primary.runs.get(run_id)
        inst = run.tasks[task] if run else None
        if inst is not None and inst.state == TaskState.LEASED and inst.fencing_token == token:
            return  # still current: not stale
        command = {
            "complete": CompleteTask(run_id, task, token),
            "fail": FailTask(run_id, task, token, "late", True),
            "expire": ExpireLeases((ExpiredLease(run_id, task, token),)),
        }[kind]
        before = digest(self.primary)
        replies = self.propose(command, now=self.quiet_now())
        assert digest(self.primary) == before
        assert isinstance(replies[0], Rejected) or kind == "expire"

    # -- dead letters, requests, time, snapshots ----------------------------------------------

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

    @precondition(lambda self: self.requests)
    @rule(i=index)
    def client_retries(self, i):
        entry = pick(self.requests, i)
        if entry is None:
            return
        command, first_reply = entry
        if command.request_id not in self.primary.dedupe:
            return  # forgotten (bounded dedupe): a retry would apply again
        before = digest(self.primary)
        assert self.propose(command, now=self.quiet_now()) == [first_reply]
        assert digest(self.primary) == before

    @rule(delta=st.integers(-300_000, 600_000))
    def leader_clock_jumps(self, delta):
        self.leader_now = max(0, self.leader_now + delta)

    @rule(empty=st.booleans())
    def barrier(self, empty):
        self.propose() if empty else self.propose(Barrier())

    @rule(which=st.sampled_from(["primary", "replica"]))
    def restart_from_snapshot(self, which):
        snapshot = copy.deepcopy(self.primary)
        assert digest(snapshot) == digest(self.primary)
        setattr(self, which, snapshot)

    # -- structural invariants -----------------------------------------------------------------

    @invariant()
    def structure(self):
        check_structure(self.primary)


def check_structure(state: State) -> None:
    assert {job_id: None for job_id in state.job_names.values()} == dict.fromkeys(state.jobs)
    for (tenant, name), job_id in state.job_names.items():
        assert (state.jobs[job_id].spec.tenant, state.jobs[job_id].spec.name) == (tenant, name)
    indexed = [rid for ids in state.runs_by_job.values() for rid in ids]
    assert sorted(indexed) == sorted(state.runs)
    assert len(state.dedupe) <= LIMITS.dedupe_capacity
    leased_tokens = [inst.fencing_token for run in state.runs.values()
                     for inst in run.tasks.values() if inst.state == TaskState.LEASED]
    assert len(leased_tokens) == len(set(leased_tokens))
    assert all(0 < token <= state.last_token for token in leased_tokens)
    dead = {(run.run_id, name) for run in state.runs.values()
            for name, inst in run.tasks.items() if inst.state == TaskState.DEAD}
    assert dead == set(state.dead_letters)
    for run in state.runs.values():
        assert run.run_id in state.runs_by_job[run.job_id]
        check_run(run)
    for job_id, ids in state.runs_by_job.items():
        unpinned = [rid for rid in ids if state.runs[rid].state in TERMINAL_RUN_STATES
                    and not any((rid, name) in state.dead_letters for name in state.runs[rid].tasks)]
        keep = LIMITS.runs_retained_per_job if job_id in state.jobs else 0
        assert len(unpinned) <= keep


def check_run(run) -> None:
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


CoreMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCoreStateMachine = CoreMachine.TestCase
