"""pysyncobj adapter: one replicated method, proposal batching, leadership events.

Thread rules: pysyncobj's tick thread runs `_apply` (on every node, also on journal replay)
and every callback; the asyncio loop thread proposes. Results cross over with
`loop.call_soon_threadsafe`; nothing on the tick thread blocks on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.config import SERIALIZER_STATE  # noqa: F401 - re-exported for tests

from gnomon.node import codec, journal
from gnomon.node.clock import mono_ms, wall_ms
from gnomon.node.config import Config
from gnomon.node.core import commands as c
from gnomon.node.core.errors import Code, Rejected
from gnomon.node.replica import crash_process

log = logging.getLogger(__name__)

# pysyncobj's _RAFT_STATE values, as passed to onStateChanged.
ROLE_NAMES = {0: "follower", 1: "candidate", 2: "leader"}
LEADER = 2


class ApplyHost:
    """What the Raft adapter needs from the replica (rqlite style: the consumer's interface)."""

    def apply_entry(self, data: bytes) -> list: ...  # pragma: no cover
    def write_snapshot(self, tmp_path: str, raft_data: tuple) -> None: ...  # pragma: no cover
    def load_snapshot(self, path: str) -> tuple: ...  # pragma: no cover


class _StateMachine(SyncObj):
    def __init__(self, self_addr: str, others: list[str], conf: SyncObjConf, host: ApplyHost):
        # Set before super().__init__(): excluded from pysyncobj's own bookkeeping.
        self._host = host
        super().__init__(self_addr, others, conf)

    # The only replicated method: pysyncobj numbers them by sorted name, so a second one would
    # misroute old log entries. Its argument is a serialized gnomon.v1.CommandBatch.
    @replicated
    def _apply(self, batch: bytes) -> list:
        return self._host.apply_entry(batch)

    def _checkCommandsToApply(self):  # noqa: N802 - pysyncobj's name
        # pysyncobj forwards a follower's proposals to the leader. A deposed leader's proposals
        # must never commit (ARCHITECTURE section 4), so a non-leader fails them instead. This
        # runs on the tick thread, the only writer of the raft state: the check cannot race.
        if self._SyncObj__raftState != LEADER:
            queue = self._SyncObj__commandsQueue
            while True:
                try:
                    _command, callback = queue.get_nowait()
                except Exception:  # noqa: BLE001 - pysyncobj's Queue.Empty
                    break
                if callback is not None and not isinstance(callback, tuple):
                    callback(None, FAIL_REASON.NOT_LEADER)
            return
        super()._checkCommandsToApply()


def build_conf(config: Config, host: ApplyHost, on_role: Callable[[int, int], None]) -> SyncObjConf:
    data = config.data_dir
    os.makedirs(data, exist_ok=True)
    host_part = config.self_member.raft_addr.rsplit(":", 1)[0]
    return SyncObjConf(
        password=config.cluster_secret,
        bindAddress=config.self_member.raft_addr if host_part else None,
        appendEntriesUseBatch=False,
        appendEntriesPeriod=config.append_entries_period_s,
        raftMinTimeout=config.raft_min_timeout_s,
        raftMaxTimeout=config.raft_max_timeout_s,
        leaderFallbackTimeout=config.leader_fallback_timeout_s,
        # Keep idle links up and re-dial fast: halves failover (DEPENDENCY-NOTES).
        connectionTimeout=3600.0,
        connectionRetryTime=0.5,
        journalFile=os.path.join(data, "raft.journal"),
        fullDumpFile=os.path.join(data, "snapshot.lmdb"),
        serializer=host.write_snapshot,
        deserializer=host.load_snapshot,
        logCompactionMinEntries=config.snapshot_min_entries,
        logCompactionMinTime=config.snapshot_min_time_s,
        onStateChanged=on_role,
        dynamicMembershipChange=False,
        commandsWaitLeader=False,
        useFork=False,
    )


class RaftNode:
    """The Raft side of a node: start it on the main thread (pysyncobj's tick thread dies with
    the thread that constructed it)."""

    def __init__(self, config: Config, host: ApplyHost, on_role: Callable[[int, int], None]):
        journal.patch_pysyncobj()
        self.config = config
        conf = build_conf(config, host, on_role)
        self._sync = _StateMachine(
            config.self_member.raft_addr, [m.raft_addr for m in config.peers], conf, host
        )
        self._by_raft = {m.raft_addr: m for m in config.members}
        self._host = host
        # Test-only jepsen canary "fire-on-isleader": act on pysyncobj's belief.
        self.speculate = False

    # -- proposing ------------------------------------------------------------------------

    def submit(self, data: bytes, callback: Callable[[object, int], None]) -> None:
        """Append one entry (thread-safe); callback(result, fail_reason) runs on the tick thread."""
        if self.speculate and self._sync._isLeader():
            # The canary breaks ARCHITECTURE section 1.1 on purpose: apply before commit.
            callback(self._host.apply_entry(data), FAIL_REASON.SUCCESS)
        self._sync._apply(data, callback=callback)

    # -- leadership and status (racy reads of pysyncobj fields: advisory only) -------------

    def is_leader(self) -> bool:
        return self._sync._isLeader()

    def leader(self):
        node = self._sync._getLeader()
        return self._by_raft.get(node.id) if node is not None else None

    def term(self) -> int:
        return self._sync._getTerm()

    def status(self) -> dict:
        try:
            return self._sync.getStatus()
        except RuntimeError:  # a dict changed size under us on the tick thread: retry once
            return self._sync.getStatus()

    def transfer_leadership(self) -> None:
        try:
            self._sync.transferLeadership()
        except Exception:  # noqa: BLE001 - best effort on shutdown
            log.exception("leadership transfer failed")

    def destroy(self) -> None:
        self._sync.destroy()


@dataclass
class _Pending:
    command: c.Command
    future: asyncio.Future
    size: int


class Overloaded(Exception):
    """The proposer's queue is full: RESOURCE_EXHAUSTED, try later."""


class NotCommitted(Exception):
    """The entry did not commit (leader changed, timeout): the outcome may be unknown."""


class Proposer:
    """Packs waiting commands into one Raft entry and resolves one future per command.

    Bounded: at most `max_pending_commands` queued (else Overloaded) and
    `max_inflight_batches` entries waiting for commit. pysyncobj's own batching is off.
    """

    def __init__(self, raft: RaftNode, config: Config, on_committed: Callable[[int], None]):
        self._raft = raft
        self._config = config
        self._queue: list[_Pending] = []
        self._wake = asyncio.Event()
        self._inflight = asyncio.Semaphore(config.max_inflight_batches)
        self._loop = asyncio.get_running_loop()
        self._on_committed = on_committed
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="proposer")
        self._task.add_done_callback(_fatal_if_failed)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for p in self._queue:
            if not p.future.done():
                p.future.set_exception(NotCommitted("node stopping"))
        self._queue.clear()

    def pending(self) -> int:
        return len(self._queue)

    def room_for_loops(self) -> int:
        """Commands a leader loop may still queue: loops stop at `max_loop_pending_commands`
        (and at three quarters of `max_pending_commands` at most) so that the rest of the
        queue stays free for client requests."""
        cap = self._config.max_pending_commands
        return min(self._config.max_loop_pending_commands, cap - cap // 4) - len(self._queue)

    async def propose(self, command: c.Command, *, timeout_ms: int | None = None):
        """Commit one command and return its reply (a Rejected value is returned, not raised)."""
        return (await self.propose_many([command], timeout_ms=timeout_ms))[0]

    async def propose_many(self, commands: list, *, timeout_ms: int | None = None) -> list:
        """Commit commands (possibly across several entries); replies in order."""
        if len(self._queue) + len(commands) > self._config.max_pending_commands:
            raise Overloaded(
                f"{len(self._queue)} commands waiting for commit "
                f"(max_pending_commands {self._config.max_pending_commands})"
            )
        futures = []
        for cmd in commands:
            fut = self._loop.create_future()
            self._queue.append(_Pending(cmd, fut, approx_size(cmd)))
            futures.append(fut)
        self._wake.set()
        timeout = (timeout_ms or self._config.commit_timeout_ms) / 1000
        try:
            # Not wait_for (it can swallow a cancel on 3.11, see trigger.py).
            async with asyncio.timeout(timeout):
                results = await asyncio.gather(*futures)
        except TimeoutError:
            raise NotCommitted(f"not committed within {timeout:.1f}s") from None
        return list(results)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                await self._inflight.acquire()
                batch, waiting = self._take_batch()
                self._send(batch, waiting)

    def _take_batch(self) -> tuple[c.Batch, list[_Pending]]:
        n, size = 0, 0
        limit_n, limit_bytes = self._config.max_batch_commands, self._config.max_batch_bytes
        for p in self._queue:
            if n >= limit_n or (n and size + p.size > limit_bytes):
                break
            n, size = n + 1, size + p.size
        waiting, self._queue = self._queue[:n], self._queue[n:]
        return c.Batch(now_ms=wall_ms(), commands=tuple(p.command for p in waiting),
                       term=self._raft.term()), waiting

    def _send(self, batch: c.Batch, waiting: list[_Pending]) -> None:
        data = codec.batch_to_bytes(batch)
        sent_mono = mono_ms()

        def done(result, reason):  # tick thread
            try:
                self._loop.call_soon_threadsafe(self._resolve, waiting, result, reason, sent_mono)
            except RuntimeError:  # the loop has closed: the node is stopping
                pass

        try:
            self._raft.submit(data, done)
        except Exception as exc:  # noqa: BLE001 - pysyncobj queue full or stopped
            self._resolve(waiting, None, repr(exc), sent_mono)

    def _resolve(self, waiting: list[_Pending], result, reason, sent_mono: int) -> None:
        self._inflight.release()
        if reason == FAIL_REASON.SUCCESS:
            self._on_committed(sent_mono)
            for p, reply in zip(waiting, result, strict=True):
                if not p.future.done():
                    p.future.set_result(reply)
            return
        for p in waiting:
            if not p.future.done():
                p.future.set_exception(NotCommitted(f"entry not committed (reason {reason})"))


def _fatal_if_failed(task: asyncio.Task) -> None:
    """The proposer loop only ends by cancellation; anything else is a bug: stop the node."""
    if not task.cancelled() and task.exception() is not None:
        log.error("proposer failed", exc_info=task.exception())
        crash_process(f"proposer failed: {task.exception()!r}")


def approx_size(cmd: c.Command) -> int:
    """Bytes a command adds to an entry, roughly: the variable parts plus a fixed overhead."""
    spec = getattr(cmd, "spec", None)
    size = 96
    if spec is not None:
        size += sum(len(t.payload) + 64 for t in spec.tasks)
    return size + len(getattr(cmd, "result", b"")) + len(getattr(cmd, "error", ""))


def is_rejected(reply: object, code: str | None = None) -> bool:
    return isinstance(reply, Rejected) and (code is None or reply.code == code)


__all__ = ["Code", "LEADER", "NotCommitted", "Overloaded", "Proposer", "RaftNode", "ROLE_NAMES"]
