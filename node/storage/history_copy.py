"""History backfill: copy run history from a peer after installing a snapshot.

The run history store is per node and not part of the Raft snapshot (a snapshot is written on
every compaction and shipped to lagging followers: the history can be far larger than the
state). So a node that installs a snapshot sent by the leader, or finds its history store new
beside an existing snapshot, lacks the runs evicted by entries up to the snapshot's index. The
store records that (`HistoryStore.backfill()`: the index needed and a resume point), and
`Backfill` copies pages of history from a peer whose own history is complete, over
`ClusterService.ExportHistory` on the gRPC port, until the final page; then it clears the
marker. Puts are idempotent and the resume point is stored with each page, so an interrupted
copy (peer down, node restart) continues where it stopped. Runs evicted after the snapshot
index reach this node's store through its own apply, like on every node.

Thread rule: both sides run on the asyncio loop; LMDB calls go to worker threads.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Callable, Sequence

import grpc

from gnomon.node.config import Member
from gnomon.node.storage.history import Backfill as Needed
from gnomon.node.storage.history import HistoryStore
from gnomon.node.storage.history_sink import HistorySink
from gnomon.v1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

MAX_PAGE_RUNS = 10_000
_FLUSH_TIMEOUT_S = 30.0
_STREAM_IDLE_TIMEOUT_S = 60.0


class ExportRefused(Exception):
    """This node cannot serve its history now (FAILED_PRECONDITION, the reason is the text)."""


async def export_pages(sink: HistorySink, applied_index: Callable[[], int],
                       request: api_pb2.ExportHistoryRequest, *,
                       page_bytes: int) -> AsyncIterator[api_pb2.ExportHistoryPage]:
    """The pages ExportHistory streams; ExportRefused before the first one if this node's
    history is incomplete or behind `min_applied_index`."""
    store = sink.store
    missing = await asyncio.to_thread(store.backfill)
    if missing is not None:
        raise ExportRefused(f"history on this node lacks runs evicted up to index "
                            f"{missing.needs_index} (it is backfilling itself)")
    applied = applied_index()
    if applied < request.min_applied_index:
        raise ExportRefused(f"this node applied index {applied}, the request needs "
                            f"{request.min_applied_index}")
    # Runs evicted by entries up to `applied` were handed to the sink before the index moved
    # on; once written they are in the store, which is what the pages read.
    if not await asyncio.to_thread(sink.flush, _FLUSH_TIMEOUT_S):
        raise ExportRefused("the history writer is behind; try again")
    limit = min(request.page_runs or 1000, MAX_PAGE_RUNS)
    after = request.after_run_id
    while True:
        records, more = await asyncio.to_thread(store.page, after, limit=limit,
                                                max_bytes=page_bytes)
        page = api_pb2.ExportHistoryPage(last=not more)
        for job_id, scheduled_for_ms, run_id, data in records:
            page.records.add(job_id=job_id, scheduled_for_ms=scheduled_for_ms, run_id=run_id,
                             run=data)
        yield page
        if not more or not records:
            return
        after = records[-1][2]


async def serve_export(node, request: api_pb2.ExportHistoryRequest,
                       context) -> AsyncIterator[api_pb2.ExportHistoryPage]:
    """The ExportHistory handler of ClusterService (`node` is the server's Node)."""
    try:
        async for page in export_pages(node.replica.history, node.raft.applied_index, request,
                                       page_bytes=node.config.history_backfill_page_bytes):
            yield page
    except ExportRefused as exc:
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))


class Backfill:
    """Copies missing history from peers until the store is complete (loop thread).

    `page_runs` per page; `retry_s` between rounds when no peer could serve (all down, all
    incomplete, or behind the needed index)."""

    def __init__(self, store: HistoryStore, peers: Sequence[Member], *, page_runs: int,
                 retry_s: float, rng: random.Random,
                 channel: Callable[[str], grpc.aio.Channel] = grpc.aio.insecure_channel):
        self._store = store
        self._peers = list(peers)
        self._page_runs = page_runs
        self._retry_s = retry_s
        self._rng = rng
        self._channel = channel

    async def run(self) -> None:
        """Forever: whenever the store lacks history, copy it (a snapshot may arrive later)."""
        while True:
            needed = await asyncio.to_thread(self._store.backfill)
            if needed is not None and await self._round(needed):
                continue
            await asyncio.sleep(self._retry_s * (0.5 + self._rng.random()))

    async def _round(self, needed: Needed) -> bool:
        """Try each peer once (in random order); True when the store is complete."""
        peers = self._rng.sample(self._peers, len(self._peers))
        for peer in peers:
            try:
                if await self._copy_from(peer, needed):
                    return True
            except grpc.aio.AioRpcError as exc:
                log.info("history backfill from %s: %s %s", peer.node_id, exc.code().name,
                         exc.details())
            except TimeoutError:
                log.info("history backfill from %s: no page for %.0fs", peer.node_id,
                         _STREAM_IDLE_TIMEOUT_S)
            latest = await asyncio.to_thread(self._store.backfill)
            needed = latest or needed
        log.info("history backfill: no peer could serve runs up to index %d; retrying",
                 needed.needs_index)
        return False

    async def _copy_from(self, peer: Member, needed: Needed) -> bool:
        request = api_pb2.ExportHistoryRequest(after_run_id=needed.after,
                                               page_runs=self._page_runs,
                                               min_applied_index=needed.needs_index)
        copied = 0
        async with self._channel(peer.grpc_addr) as channel:
            call = api_pb2_grpc.ClusterServiceStub(channel).ExportHistory(request)
            after = needed.after
            while True:
                async with asyncio.timeout(_STREAM_IDLE_TIMEOUT_S):
                    page = await call.read()
                if page is grpc.aio.EOF:
                    return False  # ended without its final page: resume later
                records = [(r.job_id, r.scheduled_for_ms, r.run_id, r.run) for r in page.records]
                after = records[-1][2] if records else after
                await asyncio.to_thread(self._store.import_page, records, after)
                copied += len(records)
                if page.last:
                    break
        complete = await asyncio.to_thread(self._store.mark_complete, needed.needs_index)
        log.info("history backfill from %s: %d runs copied; history %s", peer.node_id, copied,
                 "complete" if complete else "needs more (a newer snapshot was installed)")
        return complete
