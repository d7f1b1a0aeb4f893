"""A small harness around apply_batch for the core table tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from gnomon.node.core import apply_batch, digest, new_state
from gnomon.node.core.commands import (
    Batch,
    CompleteTask,
    CreateJob,
    FailTask,
    Fire,
    GrantLeases,
    LeaseGrant,
)
from gnomon.node.core.errors import Rejected
from gnomon.node.core.model import (
    JobSpec,
    Limits,
    RetryPolicy,
    Run,
    Schedule,
    ScheduleKind,
    TaskInstance,
    TaskSpec,
)
from gnomon.node.core.results import Effects, JobReply, Reply, RunReply

T0 = 1_000_000
INTERVAL = 60_000

# Retry policy without jitter so backoff numbers are exact in tests.
NO_JITTER = RetryPolicy(max_attempts=3, initial_backoff_ms=1_000, max_backoff_ms=10_000,
                        multiplier=2.0, jitter=-1.0)


def make_spec(
    tasks: Mapping[str, Sequence[str]] | None = None,
    *,
    tenant: str = "acme",
    name: str = "nightly",
    interval_ms: int = INTERVAL,
    retry: RetryPolicy = NO_JITTER,
    paused: bool = False,
) -> JobSpec:
    """A job whose DAG is {task: deps}; default a single task 'a'."""
    dag = {"a": ()} if tasks is None else tasks
    return JobSpec(
        tenant=tenant,
        name=name,
        schedule=Schedule(kind=ScheduleKind.INTERVAL, interval_ms=interval_ms),
        tasks=tuple(
            TaskSpec(name=task, depends_on=tuple(deps), retry=retry) for task, deps in dag.items()
        ),
        paused=paused,
    )


class Harness:
    """Owns one state; `now` only moves when a test says so."""

    T0 = T0
    INTERVAL = INTERVAL
    NO_JITTER = NO_JITTER
    spec = staticmethod(make_spec)

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.state = new_state(self.limits)
        self.now = T0

    # -- applying ------------------------------------------------------------------------

    def apply(self, *commands: object, now: int | None = None) -> tuple[list[Reply], Effects]:
        batch = Batch(now_ms=self.now if now is None else now, commands=tuple(commands))
        return apply_batch(self.state, batch)

    def one(self, command: object, now: int | None = None) -> tuple[Reply, Effects]:
        replies, effects = self.apply(command, now=now)
        return replies[0], effects

    def digest(self) -> str:
        return digest(self.state)

    def rejects(self, command: object, code: str, fragment: str) -> Rejected:
        """Apply at the current cluster time and check a rejection that changed nothing."""
        before = self.digest()
        reply, effects = self.one(command, now=self.state.clock_ms)
        assert isinstance(reply, Rejected), reply
        assert reply.code == code, reply
        assert fragment in reply.detail, reply.detail
        assert self.digest() == before
        assert effects == Effects()
        return reply

    def unchanged(self, command: object) -> Reply:
        """Apply at the current cluster time and check that nothing changed."""
        before = self.digest()
        reply, _ = self.one(command, now=self.state.clock_ms)
        assert self.digest() == before
        return reply

    # -- shortcuts -----------------------------------------------------------------------

    def create(self, spec: JobSpec | None = None, next_fire_ms: int | None = None) -> str:
        spec = spec or make_spec()
        first = self.now + INTERVAL if next_fire_ms is None else next_fire_ms
        reply, _ = self.one(CreateJob(request_id="", spec=spec, next_fire_ms=first))
        assert isinstance(reply, JobReply), reply
        return reply.job_id

    def fire(self, job_id: str, skip: bool = False) -> str:
        """Fire the job's due slot at that instant; the next slot is one interval later."""
        slot = self.state.jobs[job_id].next_fire_ms
        self.now = max(self.now, slot)
        reply, _ = self.one(Fire(job_id=job_id, scheduled_for_ms=slot,
                                 next_fire_ms=slot + INTERVAL, skip=skip))
        assert isinstance(reply, RunReply) and reply.run_id, reply
        return reply.run_id

    def grant(self, run_id: str, task: str, worker: str = "w1") -> int:
        reply, _ = self.one(GrantLeases((LeaseGrant(run_id, task, worker, 30_000),)))
        token = reply.tokens[0]  # type: ignore[union-attr]
        assert isinstance(token, int), token
        return token

    def complete(self, run_id: str, task: str) -> Effects:
        token = self.grant(run_id, task)
        reply, effects = self.one(CompleteTask(run_id, task, token, b"ok"))
        assert not isinstance(reply, Rejected), reply
        return effects

    def fail(self, run_id: str, task: str, retryable: bool = True, draw: float = 0.5) -> Effects:
        token = self.grant(run_id, task)
        reply, effects = self.one(FailTask(run_id, task, token, "boom", retryable, draw))
        assert not isinstance(reply, Rejected), reply
        return effects

    def kill(self, run_id: str, task: str) -> Effects:
        """Fail the task for good (non-retryable) -> DEAD."""
        return self.fail(run_id, task, retryable=False)

    def run(self, run_id: str) -> Run:
        return self.state.runs[run_id]

    def inst(self, run_id: str, task: str) -> TaskInstance:
        return self.state.runs[run_id].tasks[task]

    def task_states(self, run_id: str) -> dict[str, str]:
        return {name: inst.state for name, inst in self.run(run_id).tasks.items()}


@pytest.fixture
def h() -> Harness:
    return Harness()


@pytest.fixture
def small() -> Harness:
    """Tight limits so dedupe eviction and run retention show up quickly."""
    return Harness(Limits(dedupe_capacity=3, runs_retained_per_job=2))
