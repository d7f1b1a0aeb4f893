"""Proposer batching and admission control, against a stand-in for pysyncobj that commits
every entry at once (the real Raft path is covered by the integration tests)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from gnomon.node import codec
from gnomon.node.config import Config
from gnomon.node.core.commands import Barrier, CompleteTask
from gnomon.node.core.results import Done
from gnomon.node.raft.errors import Overloaded
from gnomon.node.raft.proposer import Proposer


class InstantRaft:
    """Commits each submitted entry on the next loop turn; replies Done per command."""

    def __init__(self) -> None:
        self.entries: list[int] = []
        self.hold = asyncio.Event()
        self.hold.set()

    def term(self) -> int:
        return 1

    def submit(self, data: bytes, callback) -> None:
        batch = codec.batch_from_bytes(data)
        self.entries.append(len(batch.commands))

        async def later():
            await self.hold.wait()
            callback([Done()] * len(batch.commands), 0)

        asyncio.get_running_loop().create_task(later())


def _config(**kw) -> Config:
    return dataclasses.replace(Config(), **kw)


async def test_waiting_commands_share_one_entry():
    raft = InstantRaft()
    raft.hold.clear()
    proposer = Proposer(raft, _config(max_inflight_batches=1), lambda _ms: None)
    proposer.start()
    first = asyncio.create_task(proposer.propose(Barrier()))
    await asyncio.sleep(0)  # the first entry goes out alone and blocks the pipeline
    rest = [asyncio.create_task(proposer.propose(Barrier())) for _ in range(50)]
    raft.hold.set()
    assert await first == Done()
    assert await asyncio.gather(*rest) == [Done()] * 50
    assert raft.entries == [1, 50]
    await proposer.stop()


async def test_entry_size_is_bounded_by_bytes():
    raft = InstantRaft()
    raft.hold.clear()
    proposer = Proposer(raft, _config(max_inflight_batches=1, max_batch_bytes=10_000),
                        lambda _ms: None)
    proposer.start()
    blocker = asyncio.create_task(proposer.propose(Barrier()))
    await asyncio.sleep(0)
    big = [CompleteTask("r@1", f"t{i}", i + 1, b"x" * 4_000) for i in range(6)]
    pending = asyncio.create_task(proposer.propose_many(big))
    raft.hold.set()
    await blocker
    assert len(await pending) == 6
    assert raft.entries[1:] == [2, 2, 2]
    await proposer.stop()


async def test_full_queue_is_refused_not_dropped():
    raft = InstantRaft()
    raft.hold.clear()
    proposer = Proposer(raft, _config(max_pending_commands=10, max_inflight_batches=1),
                        lambda _ms: None)
    proposer.start()
    blocker = asyncio.create_task(proposer.propose(Barrier()))
    await asyncio.sleep(0)
    accepted = asyncio.create_task(proposer.propose_many([Barrier()] * 10))
    await asyncio.sleep(0)
    with pytest.raises(Overloaded, match="max_pending_commands"):
        await proposer.propose(Barrier())
    raft.hold.set()
    await blocker
    assert len(await accepted) == 10
    await proposer.stop()
