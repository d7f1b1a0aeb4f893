"""A leader in one process for the loop and servicer unit tests: everything real but pysyncobj.

What is real: the `Replica` (over a real `HistorySink` and `HistoryStore` in tmp_path), the
core, the codec, the `Proposer`, the leader loops, `Leadership`, the servicers, and the effect
routing, which is `server.Node`'s own (`_on_applied`, `_route_effects`, `_to_loop`,
`_start_leading`, `_stop_leading` are borrowed from the class, not copied), so a change there
shows here.

What stands in: `LocalRaft`, for pysyncobj only. `submit(data, callback)` applies the entry
through `replica.apply_entry` on a later loop turn, in submission order, and calls back with
the replies and FAIL_REASON.SUCCESS, as pysyncobj's tick thread does after commit. Knobs:
`hold()`/`release()` (a commit that is late), `fail(...)` (an entry that does not commit:
leader changed, not leader, pysyncobj's queue full), `refuse_submits` (submit raises),
`leader_flag` (what pysyncobj believes; a non-leader fails its entries NOT_LEADER, as
raft.py's `_StateMachine` does, unless `fail_when_not_leader` is off).

Time: one `FakeClock` (tests/support/clock.py) that moves only when a test says so. The leader
loops, `Leadership`, the proposer and the servicers (through `node.clock`) are given it, as
server.py gives them the system clock. asyncio's own timers stay real; the loops' ticks are
made short instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pysyncobj import FAIL_REASON

from gnomon.node import codec
from gnomon.node.config import Config, Member
from gnomon.node.core import commands as c
from gnomon.node.core.model import (
    JobSpec,
    MisfirePolicy,
    RetryPolicy,
    Schedule,
    ScheduleKind,
    TaskSpec,
)
from gnomon.node.core.results import JobReply
from gnomon.node.leader.backfill import BackfillLimits, JobBackfillLoop
from gnomon.node.leader.dispatch import Dispatcher, WorkerSession
from gnomon.node.leader.leases import LeaseTable, LeaseTiming
from gnomon.node.leader.session import Leadership
from gnomon.node.leader.trigger import TriggerLimits, TriggerLoop
from gnomon.node.local.cluster import wait_for_async
from gnomon.node.ops.leader_history import LeaderHistory
from gnomon.node.raft.membership import Membership
from gnomon.node.raft.node import LEADER
from gnomon.node.raft.proposer import Proposer
from gnomon.node.replica import Replica
from gnomon.node.server import Node
from gnomon.node.spec.validate import InputLimits
from gnomon.node.storage.history import HistoryStore
from gnomon.node.storage.history_sink import HistorySink
from gnomon.node.tasks import Supervisor
from gnomon.v1 import worker_pb2
from tests.support.clock import T0, FakeClock

HOUR = 3_600_000

MEMBERS = (
    Member("n1", "127.0.0.1:7001", "127.0.0.1:8001"),
    Member("n2", "127.0.0.1:7002", "127.0.0.1:8002"),
    Member("n3", "127.0.0.1:7003", "127.0.0.1:8003"),
)


class Aborted(Exception):
    """What the stand-in context raises from abort(), as grpc.aio raises AbortError."""

    def __init__(self, code, details: str, trailing: tuple) -> None:
        super().__init__(f"{code}: {details}")
        self.code = code
        self.details = details
        self.trailing = dict(trailing)


class Context:
    """The part of grpc.aio.ServicerContext the servicers use."""

    def __init__(self) -> None:
        self.written: list = []
        self.aborted: Aborted | None = None
        self._wrote = asyncio.Event()

    async def abort(self, code, details: str = "", trailing_metadata: tuple = ()):
        self.aborted = Aborted(code, details, tuple(trailing_metadata))
        raise self.aborted

    async def write(self, message) -> None:
        self.written.append(message)
        self._wrote.set()


@dataclasses.dataclass
class _Failure:
    when: Callable[[c.Batch], bool]
    reason: int
    times: int


class LocalRaft:
    """pysyncobj's place: commits entries in order on later loop turns (see module doc)."""

    def __init__(self, replica: Replica, config: Config) -> None:
        self._replica = replica
        self._config = config
        self._loop = asyncio.get_running_loop()
        self._queue: deque = deque()
        self._held = False
        self._failures: list[_Failure] = []
        self.leader_flag = True
        self.leader_member: Member | None = config.self_member
        self.membership = Membership(str(config.data_dir), config.node_id, config.members)
        self.current_term = 1
        self.refuse_submits: Exception | None = None
        # Like raft.py's _StateMachine: a node that is not leader fails queued proposals
        # (NOT_LEADER) instead of forwarding them.
        self.fail_when_not_leader = True
        self.submitted: list[c.Batch] = []  # every entry handed over, in order
        self.committed: list[c.Batch] = []  # every entry applied, in order
        self.replies: list[list] = []  # apply's replies, per committed entry
        self.failed: list[tuple[c.Batch, int]] = []  # entries answered with a failure
        self.errors: list[BaseException] = []  # apply_entry raised (the node would stop)

    # -- what the Proposer, Leadership and servicers call ---------------------------------

    def term(self) -> int:
        return self.current_term

    def is_leader(self) -> bool:
        return self.leader_flag

    def leader(self) -> Member | None:
        return self.leader_member

    def status(self) -> dict:
        n = len(self.committed)
        out: dict[str, Any] = {"raft_term": self.current_term, "commit_idx": n,
                               "last_applied": n, "state": LEADER if self.leader_flag else 0}
        for m in self._config.peers:
            out[f"partner_node_status_server_{m.raft_addr}"] = 2
            out[f"match_idx_server_{m.raft_addr}"] = n
        return out

    def journal_counts(self) -> tuple[int, int]:
        return len(self.committed), len(self.committed)

    def tick_gaps(self) -> tuple[dict[float, int], float]:
        return {}, 0.0

    def pre_vote_rounds(self) -> int:
        return 0

    def submit(self, data: bytes, callback) -> None:
        if self.refuse_submits is not None:
            raise self.refuse_submits
        batch = codec.batch_from_bytes(data)
        self.submitted.append(batch)
        self._queue.append((data, batch, callback))
        self._loop.call_soon(self._drain)

    # -- knobs ----------------------------------------------------------------------------

    def hold(self) -> None:
        """Entries wait (a slow commit) until release()."""
        self._held = True

    def release(self) -> None:
        self._held = False
        self._loop.call_soon(self._drain)

    def fail(self, when: Callable[[c.Batch], bool] = lambda b: True, *,
             reason: int = FAIL_REASON.LEADER_CHANGED, times: int = 1) -> None:
        """The next `times` entries matching `when` do not commit (callback gets `reason`)."""
        self._failures.append(_Failure(when, reason, times))

    def waiting(self) -> int:
        return len(self._queue)

    # -- committing -----------------------------------------------------------------------

    def _drain(self) -> None:
        while self._queue and not self._held:
            data, batch, callback = self._queue.popleft()
            reason = self._failure_for(batch)
            if reason is None and self.fail_when_not_leader and not self.leader_flag:
                reason = FAIL_REASON.NOT_LEADER
            if reason is not None:
                self.failed.append((batch, reason))
                callback(None, reason)
                continue
            try:
                replies = self._replica.apply_entry(data)
            except BaseException as exc:  # noqa: BLE001 - the harness reports it
                self.errors.append(exc)
                callback(None, FAIL_REASON.DISCARDED)
                continue
            self.committed.append(batch)
            self.replies.append(replies)
            callback(replies, FAIL_REASON.SUCCESS)

    def _failure_for(self, batch: c.Batch) -> int | None:
        for f in self._failures:
            if f.times > 0 and f.when(batch):
                f.times -= 1
                return f.reason
        return None


def has(kind: type) -> Callable[[c.Batch], bool]:
    """An entry predicate: the entry holds a command of type `kind`."""
    return lambda batch: any(isinstance(cmd, kind) for cmd in batch.commands)


def commands_of(batches: list[c.Batch], kind: type) -> list:
    return [cmd for b in batches for cmd in b.commands if isinstance(cmd, kind)]


def replies_to(raft: LocalRaft, kind: type) -> list:
    """apply's replies to the committed commands of type `kind`, in commit order."""
    return [reply for b, replies in zip(raft.committed, raft.replies, strict=True)
            for cmd, reply in zip(b.commands, replies, strict=True) if isinstance(cmd, kind)]


class RecordingProposer(Proposer):
    """The real Proposer, counting the calls the loops make (their chunks) as they happen."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.calls: list[list] = []
        self.inflight: dict[type, int] = {}
        self.max_inflight: dict[type, int] = {}

    async def propose_many(self, commands: list, *, timeout_ms: int | None = None) -> list:
        kinds = {type(cmd) for cmd in commands}
        self.calls.append(list(commands))
        for k in kinds:
            self.inflight[k] = self.inflight.get(k, 0) + 1
            self.max_inflight[k] = max(self.max_inflight.get(k, 0), self.inflight[k])
        try:
            return await super().propose_many(commands, timeout_ms=timeout_ms)
        finally:
            for k in kinds:
                self.inflight[k] -= 1

    def chunks(self, kind: type) -> list[list]:
        return [call for call in self.calls if call and isinstance(call[0], kind)]


class Worker:
    """A worker's session as the servicer attaches it; `received` collects its outbox."""

    def __init__(self, h, worker_id: str, queues: tuple[str, ...] = ("default",)) -> None:
        self.session = WorkerSession(worker_id, queues)
        self.received: list = []
        h.dispatcher.attach(self.session)

    def drain(self) -> list:
        while not self.session.outbox.empty():
            self.received.append(self.session.outbox.get_nowait())
        return self.received

    def of(self, kind: str) -> list:
        return [getattr(m, kind) for m in self.drain()
                if m is not None and m.WhichOneof("msg") == kind]


def node_config(**overrides) -> Config:
    base = Config(
        node_id="n1", members=MEMBERS, raft_tls_cert="unused", raft_tls_key="unused",
        raft_tls_ca="unused",
        proof_interval_ms=50, lease_ttl_ms=10_000, heartbeat_interval_ms=2_000,
        lease_checkpoint_interval_ms=20, trigger_tick_ms=10, commit_timeout_ms=5_000,
        max_output_tail_bytes=64, max_result_bytes=1_024,
    )
    return dataclasses.replace(base, **overrides)


class Harness:
    """One node's leader side in-process. The node-like surface the servicers use
    (servicers/base.py NodeApi) is this object's."""

    # Borrowed from the composition root, so the routing under test is the node's.
    _on_applied = Node._on_applied
    _route_effects = Node._route_effects
    _to_loop = Node._to_loop
    _start_leading = Node._start_leading
    _stop_leading = Node._stop_leading
    _bootstrap_limits = Node._bootstrap_limits
    leader_grpc_addr = Node.leader_grpc_addr

    def __init__(self, data_dir: Path, clock: FakeClock, config: Config,
                 trigger_limits: TriggerLimits | None = None) -> None:
        self.clock = clock
        self.config = config
        self.rng = random.Random(7)
        self.input_limits = InputLimits(
            max_payload_bytes=config.max_payload_bytes,
            max_tasks_per_job=config.max_tasks_per_job,
            max_attempts=config.max_attempts,
            min_interval_ms=config.min_interval_ms,
        )
        data_dir.mkdir(parents=True, exist_ok=True)
        self.crashes: list[str] = []
        self.fatal: list[str] = []
        self.relay_servicer = None  # no gateway relays here (Node._stop_leading ends them)
        self.leader_history = LeaderHistory(config.leader_history_max_entries)
        self.history = HistorySink(HistoryStore(str(data_dir / "history"), map_size=64 << 20))
        self.replica = Replica(self.history, crash=self.crashes.append)
        self.supervisor = Supervisor(self.fatal.append)
        self._loop = asyncio.get_running_loop()
        self.raft = LocalRaft(self.replica, config)
        self.leadership = Leadership(
            lambda: self.raft, lambda: self.proposer, proof_interval_ms=config.proof_interval_ms,
            on_start=self._start_leading, on_stop=self._stop_leading, supervisor=self.supervisor,
            clock=clock,
        )
        self.proposer = RecordingProposer(self.raft, config, self.leadership.committed,
                                          clock=clock)
        self.leases = LeaseTable(
            self.replica, self.proposer,
            LeaseTiming(heartbeat_interval_ms=config.heartbeat_interval_ms,
                        ack_slack_ms=3 * config.proof_interval_ms,
                        checkpoint_interval_ms=config.lease_checkpoint_interval_ms),
            rng=self.rng, supervisor=self.supervisor, clock=clock)
        self.dispatcher = Dispatcher(self.replica, self.proposer, self.leases,
                                     lease_ttl_ms=config.lease_ttl_ms,
                                     max_credits=config.max_worker_credits,
                                     supervisor=self.supervisor,
                                     priority_aging_ms=config.priority_aging_ms,
                                     clock=clock)
        self.trigger = TriggerLoop(
            self.replica, self.proposer,
            trigger_limits or TriggerLimits.from_config(config),
            supervisor=self.supervisor, rng=self.rng, backlog=self.dispatcher,
            clock=clock)
        self.job_backfill = JobBackfillLoop(
            self.replica, self.proposer,
            BackfillLimits(slots_per_step=config.backfill_slots_per_step,
                           step_interval_ms=config.backfill_step_interval_ms,
                           max_active_runs=config.backfill_max_active_runs),
            supervisor=self.supervisor, queued_tasks=self.dispatcher.ready_count)
        self.replica.add_listener(self._on_applied)
        self.proposer.start()
        self.leadership.start()

    @property
    def state(self):
        return self.replica.state

    # -- leadership ---------------------------------------------------------------------

    async def lead(self) -> None:
        """Become leader the way a node does: role change, own barrier, loops started."""
        self.raft.leader_flag = True
        self.raft.leader_member = self.config.self_member
        self.leadership.role_changed(0, LEADER)
        await until(lambda: self.leadership.ready, "the leader session starts")
        # The bootstrap SetLimits proposal of a new cluster's first leader.
        await until(lambda: self.state.limits_version > 0 or self.fatal, "initial limits")

    async def demote(self, leader: Member | None = None) -> None:
        self.raft.leader_flag = False
        self.raft.leader_member = leader
        self.leadership.role_changed(LEADER, 0)
        # ready drops first, then the loops are stopped (on_stop): wait for both.
        await until(lambda: not self.leadership.ready and not loop_tasks(),
                    "the leader session ends and its loops stop")

    # -- proposing through the real proposer ---------------------------------------------

    async def propose(self, *commands):
        replies = await self.proposer.propose_many(list(commands))
        return replies[0] if len(replies) == 1 else replies

    async def create_job(self, name: str = "job", *, tenant: str = "acme",
                         next_fire_ms: int = 0, **spec_kw) -> str:
        spec = make_spec(name, tenant=tenant, **spec_kw)
        reply = await self.propose(c.CreateJob("", spec, next_fire_ms or T0 + HOUR))
        assert isinstance(reply, JobReply), reply
        return reply.job_id

    async def run_now(self, job_id: str) -> str:
        """A manual run of the job (TriggerJob); its root tasks are READY."""
        reply = await self.propose(c.TriggerJob("", job_id))
        assert reply.run_id, reply
        return reply.run_id

    async def grant(self, run_id: str, task: str = "a", worker: str = "w1",
                    ttl_ms: int | None = None) -> int:
        """Lease one task through a GrantLeases command (as dispatch would); the token."""
        ttl = self.config.lease_ttl_ms if ttl_ms is None else ttl_ms
        reply = await self.propose(c.GrantLeases((c.LeaseGrant(run_id, task, worker, ttl),)))
        token = reply.tokens[0]
        assert isinstance(token, int), token
        return token

    def follow(self, *commands) -> list:
        """Apply an entry another leader committed, as a follower receives it."""
        batch = c.Batch(now_ms=self.clock.wall, commands=tuple(commands))
        return self.replica.apply_entry(codec.batch_to_bytes(batch))

    def inst(self, run_id: str, task: str = "a"):
        return self.state.runs[run_id].tasks[task]

    async def close(self) -> None:
        self.raft.release()
        await self.leadership.stop()
        await self.proposer.stop()
        await self.supervisor.cancel_all(2.0)
        self.history.close()

    def check_healthy(self) -> None:
        assert self.raft.errors == [], self.raft.errors
        assert self.crashes == [], self.crashes
        assert self.fatal == [], self.fatal


def make_spec(name: str = "job", *, tenant: str = "acme", interval_ms: int = HOUR,
              tasks: dict[str, tuple[str, ...]] | None = None, queue: str = "default",
              priority: int = 0, misfire_policy: str = MisfirePolicy.RUN_ALL,
              misfire_grace_ms: int = 0, paused: bool = False, payload: bytes = b"p",
              timeout_ms: int = 0, max_attempts: int = 3, schedule: Schedule | None = None,
              anchor_ms: int = T0, **overlap) -> JobSpec:
    """A job spec; the default schedule is every `interval_ms` from `anchor_ms` (slots
    T0 + k * interval_ms)."""
    dag = tasks if tasks is not None else {"a": ()}
    retry = RetryPolicy(max_attempts=max_attempts, initial_backoff_ms=1_000,
                        max_backoff_ms=10_000, multiplier=2.0, jitter=-1.0)
    return JobSpec(
        tenant=tenant, name=name,
        schedule=schedule or Schedule(ScheduleKind.INTERVAL, interval_ms=interval_ms,
                                      anchor_ms=anchor_ms),
        tasks=tuple(TaskSpec(t, queue=queue, depends_on=deps, payload=payload,
                             timeout_ms=timeout_ms, retry=retry) for t, deps in dag.items()),
        priority=priority, misfire_policy=misfire_policy, misfire_grace_ms=misfire_grace_ms,
        paused=paused, **overlap,  # overlap_policy, max_active_runs, max_buffered_runs
    )


LOOP_TASKS = frozenset({"trigger", "dispatch", "lease-expiry", "lease-checkpoints"})


def loop_tasks() -> set[str]:
    """Names of the leader loops' tasks that are running now."""
    return {t.get_name() for t in asyncio.all_tasks() if not t.done()} & LOOP_TASKS


async def until(predicate: Callable[[], object], what: str, timeout_s: float = 5.0):
    """Wait until `predicate()` is truthy, at most `timeout_s`; returns the truthy value."""
    return await wait_for_async(predicate, timeout_s=timeout_s, what=what)


async def turns(n: int = 50) -> None:
    """Give the loop `n` turns (for 'nothing more happens' checks when nothing is timed)."""
    for _ in range(n):
        await asyncio.sleep(0)


class Stream:
    """The request side of WorkerService.Connect, fed by the test; counts what the servicer
    read (`read`) and what it has not yet (`unread`)."""

    def __init__(self) -> None:
        self._q: asyncio.Queue = asyncio.Queue()
        self.read = 0

    def send(self, **msg) -> None:
        self._q.put_nowait(worker_pb2.WorkerMessage(**msg))

    def close(self) -> None:
        self._q.put_nowait(None)

    @property
    def unread(self) -> int:
        return self._q.qsize()

    def __aiter__(self):
        return self

    async def __anext__(self):
        msg = await self._q.get()
        if msg is None:
            raise StopAsyncIteration
        self.read += 1
        return msg


class WorkerConn:
    """One worker's Connect stream on the harness node, as `principal` (the access guard's
    part; ANONYMOUS: authentication off, everyone is admin). `clean`: waiting fails if the
    stream ended with an exception."""

    def __init__(self, h, worker_id: str = "w1", *, principal=None, held=(),
                 context: Context | None = None, clean: bool = False,
                 revalidate=None) -> None:
        from gnomon.node.api.grpc.access import set_principal
        from gnomon.node.api.grpc.worker import WorkerServicer
        from gnomon.node.security.auth import ANONYMOUS
        from gnomon.v1 import worker_pb2

        self.stream, self.context, self._clean = Stream(), context or Context(), clean
        self.stream.send(hello=worker_pb2.Hello(
            worker_id=worker_id, queues=["default"],
            held=[worker_pb2.LeaseRef(fencing_token=t) for t in held]))
        svc = WorkerServicer(h, h.dispatcher, h.leases,
                             **({"revalidate": revalidate} if revalidate else {}))
        set_principal(principal or ANONYMOUS)
        self.task = asyncio.create_task(svc.Connect(self.stream, self.context))

    def of(self, kind: str) -> list:
        return [getattr(m, kind) for m in self.context.written if m.WhichOneof("msg") == kind]

    async def wait(self, kind: str, n: int = 1) -> list:
        await until(lambda: len(self.of(kind)) >= n or self.task.done(), f"{n} {kind}")
        if self._clean:
            assert not self.task.done() or self.task.exception() is None
        return self.of(kind)

    async def end(self):
        self.stream.close()
        async with asyncio.timeout(5):
            return await asyncio.gather(self.task, return_exceptions=True)
