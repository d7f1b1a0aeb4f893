"""Leader-local dispatch: which ready task goes to which connected worker.

Ready tasks wait in one heap per (queue, tenant), ordered by job priority (higher first)
with an age credit (`priority_aging_ms`: one priority point per that much waiting, so a low
priority task is not starved), then by the time they became ready. Queues are namespaced by tenant: a worker whose token is
scoped to tenants (node/security/auth.py) is matched only with heaps of those tenants; an unscoped
worker (admin, or authentication off) with every tenant's heap of its queues. Workers announce credits (free slots); each round matches credits
with heads of the queues the worker serves, commits ONE GrantLeases command for the round
(the worker choice is in the command) and then pushes Assign on the workers' streams.
Retry-wait tasks sit in a time heap until their retry_at_ms.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from gnomon.node.clock import SYSTEM_CLOCK, Clock
from gnomon.node.core.commands import GrantLeases, LeaseGrant
from gnomon.node.core.errors import Rejected
from gnomon.node.core.model import DEFAULT_MAX_ATTEMPTS, TaskState
from gnomon.node.leader.leases import LeaseTable
from gnomon.node.leader.outbox import Outbox
from gnomon.node.leader.ports import LockedState, LoopProposes
from gnomon.node.ops import logs, metrics, tracing
from gnomon.node.ops.run_spans import attempt_traceparent
from gnomon.node.raft.errors import NotCommitted, Overloaded
from gnomon.node.tasks import Supervisor
from gnomon.v1 import worker_pb2

log = logging.getLogger(__name__)

MAX_GRANTS_PER_ROUND = 2_000


def ready_rank(priority: int, ready_ms: int, aging_ms: int) -> tuple[int, int]:
    """Heap order of a ready task (smaller goes first). With aging, the effective priority
    `priority + waited / aging_ms` orders tasks alike at every instant, so it is the fixed
    key `ready_ms - priority * aging_ms`: a task is passed by one that became ready after it
    only while that one's priority lead is worth more than the time between them, i.e. it
    waits behind later tasks for at most (their priority - its) x aging_ms. Without aging
    (0): strict priority, then age."""
    if aging_ms > 0:
        return ready_ms - priority * aging_ms, -priority
    return -priority, ready_ms


class ReadyHeap:
    """The ready tasks of one (queue, tenant), best first by `ready_rank`; entries of tasks
    that left READY since are dropped when popped (the dispatcher checks)."""

    __slots__ = ("_items", "_aging_ms")

    def __init__(self, aging_ms: int = 0) -> None:
        self._items: list[tuple[int, int, int, str, str]] = []
        self._aging_ms = aging_ms

    def push(self, priority: int, ready_ms: int, seq: int, run_id: str, task_name: str) -> None:
        heapq.heappush(self._items,
                       (*ready_rank(priority, ready_ms, self._aging_ms), seq, run_id, task_name))

    def head(self) -> tuple[int, int, int, str, str]:
        return self._items[0]

    def pop(self) -> tuple[str, str]:
        """(run_id, task_name) of the best entry, removed."""
        entry = heapq.heappop(self._items)
        return entry[3], entry[4]

    def __len__(self) -> int:
        return len(self._items)

    def prune(self, live) -> None:
        """Drop the entries for which `live(run_id, task_name)` is false."""
        self._items = [e for e in self._items if live(e[3], e[4])]
        heapq.heapify(self._items)


@dataclass(eq=False)
class WorkerSession:
    """One connected worker stream (leader side)."""

    worker_id: str
    queues: tuple[str, ...]
    # The tenants whose tasks it may take; None: every tenant.
    tenants: tuple[str, ...] | None = None
    credits: int = 0
    # Its Hello set accepts_batches: queued Assigns and ReportAcks go out as ServerBatch.
    batches: bool = False
    # What is queued for it, bounded (node/leader/outbox.py); a full outbox is granted nothing.
    outbox: Outbox = field(default_factory=Outbox)
    closed: bool = False
    # For operators (ListWorkers): when the stream was accepted and last heartbeated (wall ms
    # of the leader), and where it came from (the peer address, "relay" through a gateway's).
    connected_ms: int = 0
    last_heartbeat_ms: int = 0
    peer: str = ""
    # Drained by an operator (DrainWorker): granted nothing more; its leases run out.
    draining: bool = False

    def send(self, msg: worker_pb2.ServerMessage) -> bool:
        """Queue `msg` if the session is open and its outbox has room."""
        return not self.closed and self.outbox.put_nowait(msg)

    def end(self) -> None:
        """No more messages: the writer sends what is queued and ends the stream."""
        self.closed = True
        self.outbox.close()


class FairShare:
    """Stride scheduling over tenants: each grant advances its tenant's pass by 1/weight;
    the tenant with the lowest pass goes next. A tenant that was idle starts at the current
    virtual time, so idle time is not saved up as credit; a busy tenant alone takes every
    free slot (it borrows what others leave)."""

    def __init__(self) -> None:
        self._pass: dict[str, float] = {}
        self._vtime = 0.0

    def next(self, candidates) -> str:
        return min(candidates, key=lambda t: (max(self._pass.get(t, 0.0), self._vtime), t))

    def charge(self, tenant: str, weight: int) -> None:
        start = max(self._pass.get(tenant, 0.0), self._vtime)
        self._vtime = start
        self._pass[tenant] = start + 1.0 / max(1, weight)


class Dispatcher:
    def __init__(self, replica: LockedState, proposer: LoopProposes, leases: LeaseTable, *,
                 lease_ttl_ms: int, max_credits: int, supervisor: Supervisor,
                 queue_caps: Mapping[str, int] | None = None, priority_aging_ms: int = 0,
                 clock: Clock = SYSTEM_CLOCK):
        self._aging_ms = priority_aging_ms
        self._clock = clock
        self._supervisor = supervisor
        # queue -> most tasks leased at once (config queue_max_concurrency).
        self._queue_caps = dict(queue_caps or {})
        self._replica = replica
        self._proposer = proposer
        self._leases = leases
        self._ttl_ms = lease_ttl_ms
        self._max_credits = max_credits
        self.sessions: dict[str, WorkerSession] = {}
        self._order: deque[str] = deque()
        self._ready: dict[tuple[str, str], ReadyHeap] = {}
        self._queue_tenants: dict[str, dict[str, None]] = {}  # queue -> tenants with a heap
        self._waiting: list[tuple[int, str, str]] = []
        # Grants proposed, not yet answered: (run_id, task_name) -> (tenant, queue), and
        # their count per ("tenant", name) and ("queue", name).
        self._granting: dict[tuple[str, str], tuple[str, str]] = {}
        self._inflight: Counter[tuple[str, str]] = Counter()
        self._fair = FairShare()
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        # Callers waiting for the end of the next matching round (next_round).
        self._round_waiters: list[asyncio.Future] = []

    # -- sessions (called by the worker servicer) -------------------------------------------

    def attach(self, session: WorkerSession) -> None:
        old = self.sessions.get(session.worker_id)
        if old is not None:
            old.end()
        else:
            self._order.append(session.worker_id)
        self.sessions[session.worker_id] = session
        metrics.WORKERS.set(len(self.sessions))

    def detach(self, session: WorkerSession) -> None:
        session.closed = True
        if self.sessions.get(session.worker_id) is session:
            del self.sessions[session.worker_id]
            self._order.remove(session.worker_id)
        metrics.WORKERS.set(len(self.sessions))

    def add_credits(self, session: WorkerSession, credits: int) -> None:
        session.credits = max(0, min(self._max_credits, session.credits + credits))
        self._wake.set()

    def close_all(self) -> None:
        for s in list(self.sessions.values()):
            s.end()

    async def next_round(self) -> None:
        """Until the matching loop has run once more: credits added before the call were
        matched (their grants proposed, each Assign's place reserved), or the loop stopped."""
        if self._task is None:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._round_waiters.append(waiter)
        self._wake.set()
        await waiter

    def _round_done(self) -> None:
        waiters, self._round_waiters = self._round_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- leader session ------------------------------------------------------------------------

    def start(self) -> None:
        self._ready.clear()
        self._queue_tenants.clear()
        self._waiting.clear()
        self._granting.clear()
        self._inflight.clear()
        self._fair = FairShare()
        with self._replica.lock:
            for run in self._replica.state.runs.values():
                for inst in run.tasks.values():
                    self._index(run, inst)
        self._task = self._supervisor.spawn(self._run(), name="dispatch", critical=True)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._round_done()
        self.close_all()

    def dispatchable(self, keys: list[tuple[str, str]]) -> None:
        """Effects hook: these tasks became READY or RETRY_WAIT."""
        if self._task is None:
            return
        with self._replica.lock:
            runs = self._replica.state.runs
            for run_id, task_name in keys:
                run = runs.get(run_id)
                if run is not None and task_name in run.tasks:
                    self._index(run, run.tasks[task_name])
        self._wake.set()

    def cancelled(self, items: list[tuple[str, str, int, str, str]]) -> None:
        """Effects hook: leases revoked by a cancel: push Cancel to the workers holding them.

        The holder comes from the replicated grant (the effect), not from the lease table:
        apply ends the lease in the same batch, and the table forgets it first."""
        for run_id, task_name, token, reason, worker_id in items:
            session = self.sessions.get(worker_id)
            if session is not None:
                lease = worker_pb2.LeaseRef(run_id=run_id, task_name=task_name, fencing_token=token)
                # A full outbox (a worker that does not read) loses the Cancel: its next
                # heartbeat's ack revokes the token, and a report for it is refused.
                session.send(worker_pb2.ServerMessage(cancel=worker_pb2.Cancel(lease=lease,
                                                                                 reason=reason)))

    def _index(self, run, inst) -> None:
        if inst.state == TaskState.READY:
            self._heap(run, inst.task_name).push(run.spec.priority, inst.ready_ms,
                                                 next(self._seq), run.run_id, inst.task_name)
        elif inst.state == TaskState.RETRY_WAIT:
            heapq.heappush(self._waiting, (inst.retry_at_ms, run.run_id, inst.task_name))

    def _heap(self, run, task_name: str) -> ReadyHeap:
        queue = run.spec.task(task_name).queue or "default"
        tenant = run.spec.tenant
        heap = self._ready.get((queue, tenant))
        if heap is None:
            heap = self._ready[(queue, tenant)] = ReadyHeap(self._aging_ms)
            self._queue_tenants.setdefault(queue, {})[tenant] = None
        return heap

    def ready_count(self, tenant: str) -> int:
        """Tasks of `tenant` waiting for a worker (leader view; entries of tasks that left
        READY since are counted until popped, so this may run a little high)."""
        return sum(len(self._ready.get((queue, tenant), ())) for queue, tenants in
                   self._queue_tenants.items() if tenant in tenants)

    def ready_in(self, queue: str, tenant: str) -> int:
        """Tasks of `tenant` waiting for a worker on `queue` (same caveat as ready_count)."""
        heap = self._ready.get((queue, tenant))
        return len(heap) if heap is not None else 0

    def prune(self, queue: str, tenant: str) -> int:
        """Drop the entries of tasks that left READY (cancelled, deleted) from that heap and
        return what is left: O(its size), for a caller that must not act on a stale count."""
        heap = self._ready.get((queue, tenant))
        if heap is None:
            return 0
        with self._replica.lock:
            runs = self._replica.state.runs

            def live(run_id: str, task_name: str) -> bool:
                run = runs.get(run_id)
                inst = run.tasks.get(task_name) if run else None
                return inst is not None and inst.state == TaskState.READY

            heap.prune(live)
        return len(heap)

    def _keys(self, session: WorkerSession) -> list[tuple[str, str]]:
        """The heaps a session may take from."""
        keys: list[tuple[str, str]] = []
        for queue in session.queues:
            tenants = self._queue_tenants.get(queue, {})
            wanted = tenants if session.tenants is None else \
                [t for t in session.tenants if t in tenants]
            keys.extend((queue, t) for t in wanted)
        return keys

    # -- matching -------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            delay = 0.5
            if self._waiting:
                delay = min(delay, max(0.0, (self._waiting[0][0] - self._clock.wall_ms()) / 1000))
            try:
                async with asyncio.timeout(delay):  # not wait_for: see trigger.py
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            self._release_waiting(self._clock.wall_ms())
            grants = self._match()
            metrics.READY_TASKS.set(sum(len(h) for h in self._ready.values()))
            if grants:
                self._supervisor.spawn(self._grant(grants), name="dispatch-grant")
            self._round_done()

    def _release_waiting(self, now_ms: int) -> None:
        if not self._waiting or self._waiting[0][0] > now_ms:
            return
        with self._replica.lock:
            runs = self._replica.state.runs
            while self._waiting and self._waiting[0][0] <= now_ms:
                _, run_id, task_name = heapq.heappop(self._waiting)
                run = runs.get(run_id)
                inst = run.tasks.get(task_name) if run else None
                if run is not None and inst is not None and inst.state == TaskState.RETRY_WAIT:
                    self._heap(run, task_name).push(run.spec.priority, inst.retry_at_ms,
                                                    next(self._seq), run_id, task_name)

    def _match(self) -> list[tuple[WorkerSession, LeaseGrant]]:
        grants: list[tuple[WorkerSession, LeaseGrant]] = []
        with self._replica.lock:
            runs = self._replica.state.runs
            tenants = self._replica.state.access.tenants
            progress = True
            while progress and len(grants) < MAX_GRANTS_PER_ROUND:
                progress = False
                # Round robin over workers: one task each per pass.
                for worker_id in list(self._order):
                    session = self.sessions[worker_id]
                    # A place in its outbox for the Assign, kept until the grant is answered.
                    if session.credits <= 0 or session.closed or session.draining \
                            or not session.outbox.reserve():
                        continue
                    picked = self._pick(session, runs, tenants)
                    if picked is None:
                        session.outbox.unreserve()
                        continue
                    key, (queue, tenant) = picked
                    session.credits -= 1
                    self._granting[key] = (tenant, queue)
                    self._inflight[("tenant", tenant)] += 1
                    self._inflight[("queue", queue)] += 1
                    grants.append((session, LeaseGrant(key[0], key[1], worker_id, self._ttl_ms)))
                    progress = True
        return grants

    def _pick(self, session: WorkerSession, runs, tenants):
        """The next task for `session` and its heap (queue, tenant): the tenant furthest
        behind its weighted share (and under its concurrency cap) among those with ready
        work in the session's queues that are under their caps, then that tenant's best task
        by priority and age. Work over a cap waits, counted; it is neither lost nor failed."""
        by_tenant: dict[str, list[tuple[str, str]]] = {}
        for key in self._keys(session):
            if not self._ready.get(key):
                continue
            cap = self._queue_caps.get(key[0], 0)
            if cap and self._held("queue", key[0]) >= cap:
                metrics.TASKS_OVER_CAP.inc()
                continue
            by_tenant.setdefault(key[1], []).append(key)
        while by_tenant:
            tenant = self._fair.next(by_tenant)
            record = tenants.get(tenant)
            cap = record.max_concurrency if record is not None else 0
            if cap and self._held("tenant", tenant) >= cap:
                del by_tenant[tenant]
                metrics.TASKS_OVER_CAP.inc()
                continue
            found = self._pop_best(by_tenant[tenant], runs)
            if found is None:
                del by_tenant[tenant]
                continue
            self._fair.charge(tenant, record.weight if record is not None else 1)
            return found
        return None

    def _held(self, kind: str, name: str) -> int:
        """Leases a tenant or queue holds, counting grants not answered yet (an answered
        grant is in the lease table before `_grant` resumes: effects reach the loop first)."""
        table = self._leases.by_tenant if kind == "tenant" else self._leases.by_queue
        return table.get(name, 0) + self._inflight[(kind, name)]

    def _pop_best(self, keys: list[tuple[str, str]], runs):
        """The best live task among the heads of the `keys` heaps, and its heap key."""
        while True:
            best = None
            for q in keys:
                heap = self._ready.get(q)
                if heap and (best is None or heap.head() < self._ready[best].head()):
                    best = q
            if best is None:
                return None
            run_id, task_name = self._ready[best].pop()
            run = runs.get(run_id)
            inst = run.tasks.get(task_name) if run else None
            if (inst is not None and inst.state in (TaskState.READY, TaskState.RETRY_WAIT)
                    and (run_id, task_name) not in self._granting):
                return (run_id, task_name), best

    async def _grant(self, grants: list[tuple[WorkerSession, LeaseGrant]]) -> None:
        try:
            reply = await self._proposer.propose(GrantLeases(tuple(g for _, g in grants)))
            tokens = reply.tokens
        except (NotCommitted, Overloaded) as exc:
            log.warning("grants not committed (%s)", exc)
            tokens = [Rejected("UNAVAILABLE", str(exc))] * len(grants)
        for (session, grant), token in zip(grants, tokens, strict=True):
            key = (grant.run_id, grant.task_name)
            held = self._granting.pop(key, None)
            if held is not None:
                self._inflight[("tenant", held[0])] -= 1
                self._inflight[("queue", held[1])] -= 1
            if isinstance(token, Rejected):
                session.credits += 1
                session.outbox.unreserve()
                self.dispatchable([key])  # re-index if it is still ready
                continue
            metrics.LEASES_GRANTED.inc()
            log.debug("lease of %s granted", grant.task_name,
                      extra=logs.fields(job=grant.run_id.rsplit("@", 1)[0], run=grant.run_id,
                                        token=token, worker=grant.worker_id))
            if session.closed:
                self._leases.expire_now(token)
                continue
            assign = self._assign(grant, token)
            if assign is None:
                session.outbox.unreserve()
            else:
                session.outbox.put_nowait(worker_pb2.ServerMessage(assign=assign), reserved=True)
        self._wake.set()

    def _assign(self, grant: LeaseGrant, token: int) -> worker_pb2.Assign | None:
        with self._replica.lock:
            run = self._replica.state.runs.get(grant.run_id)
            inst = run.tasks.get(grant.task_name) if run else None
            if run is None or inst is None or inst.fencing_token != token:
                return None  # already cancelled or expired by a later entry
            spec = run.spec.task(grant.task_name)
            return worker_pb2.Assign(
                lease=worker_pb2.LeaseRef(run_id=run.run_id, task_name=inst.task_name,
                                          fencing_token=token),
                job_id=run.job_id, tenant=run.tenant, queue=spec.queue or "default",
                attempt=inst.attempt, idempotency_key=inst.idempotency_key, payload=spec.payload,
                scheduled_for_ms=run.scheduled_for_ms, lease_ttl_ms=inst.lease_ttl_ms,
                deadline_ms=inst.started_ms + spec.timeout_ms if spec.timeout_ms else 0,
                max_attempts=spec.retry.max_attempts or DEFAULT_MAX_ATTEMPTS,
                traceparent=(attempt_traceparent(run.run_id, inst.task_name, inst.attempt)
                             if tracing.enabled() else ""),
            )
