"""The proposer: packs waiting commands into one Raft entry, one future per call.

Thread rule: everything runs on the event loop thread, except the commit callbacks, which
pysyncobj calls on its tick thread and which hand over with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pysyncobj import FAIL_REASON
from pysyncobj.config import SERIALIZER_STATE  # noqa: F401 - re-exported for tests

from gnomon.node import codec
from gnomon.node.clock import SYSTEM_CLOCK, Clock
from gnomon.node.config import Config
from gnomon.node.core import commands as c
from gnomon.node.core.errors import Rejected
from gnomon.node.process import crash_process
from gnomon.node.raft.errors import NotCommitted, Overloaded
from gnomon.node.raft.node import RaftNode

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Group:
    """The commands of one `propose_many` call: one future for all of them (not one per
    command: at thousands of commands per second the futures, and gathering them, were a
    few per cent of the leader's CPU)."""

    future: asyncio.Future
    replies: list
    left: int


@dataclass(slots=True)
class _Pending:
    command: c.Command
    group: _Group
    index: int
    size: int


class Proposer:
    """Packs waiting commands into one Raft entry and resolves one future per command.

    Bounded: at most `max_pending_commands` queued (else Overloaded) and
    `max_inflight_batches` entries waiting for commit. pysyncobj's own batching is off.
    """

    def __init__(self, raft: RaftNode, config: Config, on_committed: Callable[[int], None],
                 *, clock: Clock = SYSTEM_CLOCK):
        """`clock`: the leadership's (a committed entry's send time is its proof)."""
        self._raft = raft
        self._clock = clock
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
            _fail(p.group, NotCommitted("node stopping"))
        self._queue.clear()

    def pending(self) -> int:
        return len(self._queue)

    @contextlib.asynccontextmanager
    async def paused(self):
        """No new entry is sent while inside (commands wait in the queue); entered once every
        entry in flight has committed or failed. A leadership transfer needs a follower whose
        log ends at the leader's last entry, which a steady stream of entries prevents."""
        n = self._config.max_inflight_batches
        taken = 0
        try:
            for _ in range(n):
                await self._inflight.acquire()
                taken += 1
            yield
        finally:
            for _ in range(taken):
                self._inflight.release()

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
        if not commands:
            return []
        group = _Group(self._loop.create_future(), [None] * len(commands), len(commands))
        self._queue.extend(_Pending(cmd, group, i, approx_size(cmd))
                           for i, cmd in enumerate(commands))
        self._wake.set()
        timeout = (timeout_ms or self._config.commit_timeout_ms) / 1000
        try:
            # Not wait_for (it can swallow a cancel on 3.11, see trigger.py).
            async with asyncio.timeout(timeout):
                return await group.future
        except TimeoutError:
            raise NotCommitted(f"not committed within {timeout:.1f}s") from None

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
        return c.Batch(now_ms=self._clock.wall_ms(), commands=tuple(p.command for p in waiting)), waiting

    def _send(self, batch: c.Batch, waiting: list[_Pending]) -> None:
        data = codec.batch_to_bytes(batch)
        sent_mono = self._clock.mono_ms()

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
                group = p.group
                group.replies[p.index] = reply
                group.left -= 1
                if not group.left and not group.future.done():
                    group.future.set_result(group.replies)
            return
        for p in waiting:
            _fail(p.group, NotCommitted(f"entry not committed (reason {reason})"))


def _fail(group: _Group, exc: Exception) -> None:
    """A call fails as a whole when any entry of its commands does not commit (some of them
    may have: the outcome is unknown, as after a timeout)."""
    if not group.future.done():
        group.future.set_exception(exc)


def _fatal_if_failed(task: asyncio.Task) -> None:
    """The proposer loop only ends by cancellation; anything else is a bug: stop the node."""
    if not task.cancelled() and task.exception() is not None:
        log.error("proposer failed", exc_info=task.exception())
        crash_process(f"proposer failed: {task.exception()!r}")


# Per command class: which of the fields approx_size counts it has (looked up per command
# with getattr, this was 3% of a saturated leader).
_SIZED_FIELDS: dict[type, tuple[bool, bool, bool, bool, str]] = {}


def approx_size(cmd: c.Command) -> int:
    """Bytes a command adds to an entry, roughly: the variable parts plus a fixed overhead."""
    fields = _SIZED_FIELDS.get(type(cmd))
    if fields is None:
        has_items, has_spec, has_result, has_error = (
            hasattr(cmd, name) for name in ("items", "spec", "result", "error"))
        fields = _SIZED_FIELDS[type(cmd)] = (
            has_items, has_spec, has_result, has_error,
            next((name for name in ("grants", "leases") if hasattr(cmd, name)), ""))
    has_items, has_spec, has_result, has_error, nested = fields
    # The fields are probed per class with hasattr (above), which does not narrow the union.
    cmd_: Any = cmd
    size = 96
    if has_items or has_spec:
        specs = [item.spec for item in cmd_.items] if has_items else []
        if has_spec and cmd_.spec is not None:
            specs.append(cmd_.spec)
        size *= max(1, len(specs))
        for one in specs:
            size += sum(len(t.payload) + 64 for t in one.tasks)
    if has_result:
        size += len(cmd_.result)
    if has_error:
        size += len(cmd_.error)
    if nested:  # GrantLeases, ExpireLeases: ~64 bytes per item
        size += 64 * len(getattr(cmd_, nested))
    return size


def is_rejected(reply: object, code: str | None = None) -> bool:
    return isinstance(reply, Rejected) and (code is None or reply.code == code)


__all__ = ["NotCommitted", "Overloaded", "Proposer", "approx_size", "is_rejected"]
