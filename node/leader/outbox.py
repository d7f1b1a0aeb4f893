"""What the leader has queued for one worker stream, bounded (node/DESIGN.md, "Bounds of a
worker stream").

The servicer's writer takes messages out and writes them; everything else puts them in. A put
never waits and never grows the queue past its bound: `put_nowait` refuses a message when the
queue is full (the caller decides: the reader waits with `put`, a Cancel is left to the next
heartbeat's `revoked_tokens`). An Assign cannot be refused after its lease was granted, so the
dispatcher reserves its place before it proposes the grant (`reserve`) and puts it as reserved.
`close()` ends the stream: the writer gets the messages still queued, then None.

Loop thread only.
"""

from __future__ import annotations

import asyncio
from collections import deque

from gnomon.v1 import worker_pb2

# The defaults of Config.worker_outbox_max_messages and worker_outbox_max_bytes.
DEFAULT_MAX_MESSAGES = 1_024
DEFAULT_MAX_BYTES = 4 << 20


class Outbox:
    """A FIFO of ServerMessages holding at most `max_messages` (queued plus reserved) and,
    for what is not reserved, at most `max_bytes` of them."""

    __slots__ = ("max_messages", "max_bytes", "_items", "_bytes", "_reserved", "_closed",
                 "_end_taken", "_readable", "_room", "_full", "_settled")

    def __init__(self, max_messages: int = DEFAULT_MAX_MESSAGES,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._items: deque[tuple[worker_pb2.ServerMessage, int]] = deque()
        self._bytes = 0
        self._reserved = 0
        self._closed = False
        self._end_taken = False
        self._readable = asyncio.Event()  # a message, or the end, to take
        self._room = asyncio.Event()  # not full (or closed)
        self._room.set()
        self._full = asyncio.Event()  # full and open
        self._settled = asyncio.Event()  # no place reserved
        self._settled.set()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        return self._bytes

    @property
    def closed(self) -> bool:
        return self._closed

    def full(self) -> bool:
        return not self._closed and (len(self._items) + self._reserved >= self.max_messages
                                     or self._bytes >= self.max_bytes)

    def _changed(self) -> None:
        if self._reserved:
            self._settled.clear()
        else:
            self._settled.set()
        if self.full():
            self._room.clear()
            self._full.set()
        else:
            self._room.set()
            self._full.clear()

    # -- putting ----------------------------------------------------------------------------

    def reserve(self) -> bool:
        """Keep a place for one message (an Assign whose grant is being proposed); False when
        the queue is full or closed."""
        if self.full() or self._closed:
            return False
        self._reserved += 1
        self._changed()
        return True

    def unreserve(self) -> None:
        if self._reserved:
            self._reserved -= 1
            self._changed()

    def put_nowait(self, msg: worker_pb2.ServerMessage | None, *, reserved: bool = False) -> bool:
        """Queue `msg` (None: `close()`); False if the queue is closed, or full and `msg` has
        no reserved place."""
        if msg is None:
            self.close()
            return True
        if reserved:
            self.unreserve()
        if self._closed or (not reserved and self.full()):
            return False
        size = msg.ByteSize()
        self._items.append((msg, size))
        self._bytes += size
        self._readable.set()
        self._changed()
        return True

    async def put(self, msg: worker_pb2.ServerMessage) -> bool:
        """Queue `msg` once there is room; False if the queue was closed meanwhile."""
        while self.full():
            await self._room.wait()
        return self.put_nowait(msg)

    async def wait_room(self) -> None:
        """Until the queue is not full (or closed)."""
        while self.full():
            await self._room.wait()

    async def wait_settled(self) -> None:
        """Until no place is reserved: every grant proposed for this queue was answered."""
        await self._settled.wait()

    async def wait_full(self) -> None:
        """Until the queue is full (never, once closed)."""
        await self._full.wait()

    # -- taking -----------------------------------------------------------------------------

    def empty(self) -> bool:
        return not self._items and (not self._closed or self._end_taken)

    def get_nowait(self) -> worker_pb2.ServerMessage | None:
        """The oldest message; None once, after the last, when the queue was closed."""
        if self._items:
            msg, size = self._items.popleft()
            self._bytes -= size
            self._changed()
            return msg
        if self._closed and not self._end_taken:
            self._end_taken = True
            return None
        raise asyncio.QueueEmpty

    async def wait_readable(self) -> None:
        """Until a message (or the end) is queued; get_nowait() then does not raise."""
        while self.empty():
            self._readable.clear()
            await self._readable.wait()

    async def get(self) -> worker_pb2.ServerMessage | None:
        await self.wait_readable()
        return self.get_nowait()

    # -- ending -----------------------------------------------------------------------------

    def close(self) -> None:
        """The stream ends: nothing more is queued; the writer takes what is, then None."""
        self._closed = True
        self._reserved = 0
        self._readable.set()
        self._changed()

    def clear(self) -> None:
        """Drop every queued message (a stream ended for not reading them)."""
        self._items.clear()
        self._bytes = 0
        self._changed()
