"""History backfill over a real gRPC server: pages from a complete peer, refusals when a peer
is incomplete or behind, and resuming an interrupted copy from the stored resume point."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest

from gnomon.node.config import Member
from gnomon.node.storage.history import HistoryStore
from gnomon.node.storage.history_copy import Backfill, serve_export
from gnomon.node.storage.history_sink import HistorySink
from gnomon.v1 import api_pb2, api_pb2_grpc


def rec(i: int) -> tuple[str, int, str, bytes]:
    return "j1", 1000 + i, f"j1@{1000 + i:05d}", b"run %d" % i


class Peer(api_pb2_grpc.ClusterServiceServicer):
    """A node as ExportHistory sees it: its history sink, applied index and config."""

    def __init__(self, path: Path, applied: int, *, break_after_pages: int = 0) -> None:
        self.sink = HistorySink(HistoryStore(str(path), map_size=64 << 20))
        self.node = SimpleNamespace(
            replica=SimpleNamespace(history=self.sink),
            raft=SimpleNamespace(applied_index=lambda: self.applied),
            config=SimpleNamespace(history_backfill_page_bytes=1 << 20))
        self.applied = applied
        self.break_after_pages = break_after_pages
        self.requests: list[api_pb2.ExportHistoryRequest] = []

    async def ExportHistory(self, request, context):  # noqa: N802
        self.requests.append(request)
        pages = 0
        async for page in serve_export(self.node, request, context):
            if self.break_after_pages and pages == self.break_after_pages:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "peer went away")
            pages += 1
            yield page


@pytest.fixture
async def cluster(tmp_path: Path):
    servers = []

    async def start(peer: Peer) -> Member:
        server = grpc.aio.server()
        api_pb2_grpc.add_ClusterServiceServicer_to_server(peer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append((server, peer))
        return Member(f"p{len(servers)}", "127.0.0.1:1", f"127.0.0.1:{port}")

    yield start
    for server, peer in servers:
        await server.stop(0)
        peer.sink.close()


@pytest.fixture
def importer(tmp_path: Path):
    store = HistoryStore(str(tmp_path / "importer"), map_size=64 << 20)
    store.put_runs([rec(30)])  # evicted after the snapshot: this node applied it itself
    store.mark_incomplete(50)
    yield store
    store.close()


def backfill(store: HistoryStore, peers: list[Member]) -> Backfill:
    return Backfill(store, peers, page_runs=7, retry_s=0.01, rng=random.Random(1))


async def test_copies_every_page_from_a_complete_peer(tmp_path: Path, cluster, importer):
    peer = Peer(tmp_path / "peer", applied=60)
    peer.sink.store.put_runs([rec(i) for i in range(30)])
    member = await cluster(peer)
    assert await backfill(importer, [member])._round(importer.backfill())
    assert importer.backfill() is None
    assert sorted(r[2] for r in importer.iter_all()) == sorted(rec(i)[2] for i in range(31))
    assert len(peer.requests) == 1 and peer.requests[0].min_applied_index == 50


async def test_incomplete_or_lagging_peers_are_skipped(tmp_path: Path, cluster, importer):
    incomplete = Peer(tmp_path / "a", applied=60)
    incomplete.sink.store.mark_incomplete(10)
    lagging = Peer(tmp_path / "b", applied=49)
    good = Peer(tmp_path / "c", applied=50)
    good.sink.store.put_runs([rec(1)])
    members = [await cluster(p) for p in (incomplete, lagging, good)]
    assert await backfill(importer, members)._round(importer.backfill())
    assert importer.get_run(rec(1)[2]) == rec(1)[3]


async def test_no_peer_can_serve(tmp_path: Path, cluster, importer):
    lagging = Peer(tmp_path / "a", applied=1)
    member = await cluster(lagging)
    assert not await backfill(importer, [member])._round(importer.backfill())
    assert importer.backfill().needs_index == 50


async def test_an_interrupted_copy_resumes_after_the_last_stored_page(tmp_path: Path, cluster,
                                                                      importer):
    peer = Peer(tmp_path / "peer", applied=60, break_after_pages=2)
    peer.sink.store.put_runs([rec(i) for i in range(30)])
    member = await cluster(peer)
    b = backfill(importer, [member])
    assert not await b._round(importer.backfill())
    resume = importer.backfill().after
    assert resume == rec(13)[2], "two pages of seven stored, with their resume point"
    peer.break_after_pages = 0
    assert await b._round(importer.backfill())
    assert peer.requests[-1].after_run_id == resume
    assert len(list(importer.iter_all())) == 31


async def test_run_loop_completes_in_the_background(tmp_path: Path, cluster, importer):
    peer = Peer(tmp_path / "peer", applied=60)
    peer.sink.store.put_runs([rec(i) for i in range(3)])
    member = await cluster(peer)
    task = asyncio.create_task(backfill(importer, [member]).run())
    try:
        for _ in range(500):
            if importer.backfill() is None:
                break
            await asyncio.sleep(0.01)
        assert importer.backfill() is None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
