"""Server-sent events: which runs and jobs changed, and cluster role changes.

Events name what changed, never carry it: a page fetches what it shows through the API, so an
event stream has no shape of its own to drift. Every node streams (changes come from the
applied log, on followers too).

Bounds: at most `max_streams` streams per node; each stream holds at most `max_ids` pending
run and job ids. A client that does not keep up (its ids overflow, or one write does not finish
within `write_timeout_s`) gets one `resync` event instead of the ids (refetch everything), or
is disconnected: a slow browser holds a bounded amount of node memory.

Events (`event:` names; `data:` is JSON):
  hello    {"nodeId"}                                 once, on connect
  changes  {"runIds": [...], "jobIds": [...]}        runs/jobs created or changed
  cluster  {"nodeId", "leaderNodeId", "term", "role"} on connect and on every change
  resync   {}                                         ids were dropped: refetch what you show
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading

import grpc
from aiohttp import web

from gnomon.node.api.http.problems import Problem
from gnomon.node.core.results import Replayed, RunReply
from gnomon.node.raft.node import ROLE_NAMES

log = logging.getLogger(__name__)

KEEPALIVE_S = 15.0
CLUSTER_POLL_S = 0.2


class Subscriber:
    def __init__(self, max_ids: int):
        self.max_ids = max_ids
        self.runs: dict[str, None] = {}
        self.jobs: dict[str, None] = {}
        self.overflow = False
        self.cluster: dict | None = None
        self.wake = asyncio.Event()

    def add(self, runs, jobs) -> None:
        if self.overflow:
            return
        self.runs.update(dict.fromkeys(runs))
        self.jobs.update(dict.fromkeys(jobs))
        if len(self.runs) + len(self.jobs) > self.max_ids:
            self.overflow = True
            self.runs.clear()
            self.jobs.clear()
        self.wake.set()

    def take(self) -> list[tuple[str, dict]]:
        out: list[tuple[str, dict]] = []
        if self.cluster is not None:
            out.append(("cluster", self.cluster))
            self.cluster = None
        if self.overflow:
            out.append(("resync", {}))
            self.overflow = False
        elif self.runs or self.jobs:
            out.append(("changes", {"runIds": list(self.runs), "jobIds": list(self.jobs)}))
            self.runs, self.jobs = {}, {}
        self.wake.clear()
        return out


class EventHub:
    """Collects changes from the tick thread and fans them out to the streams on the loop."""

    def __init__(self, node, *, max_streams: int, max_ids: int = 512,
                 write_timeout_s: float = 30.0):
        self.node = node
        self.max_streams = max_streams
        self.max_ids = max_ids
        self.write_timeout_s = write_timeout_s
        self.subscribers: set[Subscriber] = set()
        self._lock = threading.Lock()
        self._runs: dict[str, None] = {}
        self._jobs: dict[str, None] = {}
        self._scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cluster: dict = {}
        self._poller: asyncio.Task | None = None
        self.closed = asyncio.Event()

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.node.replica.add_listener(self._on_applied)
        self._poller = self.node.supervisor.spawn(self._poll_cluster(), name="http-events")

    async def stop(self) -> None:
        self.closed.set()
        for s in self.subscribers:
            s.wake.set()
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)

    # -- tick thread ---------------------------------------------------------------------

    def _on_applied(self, batch, replies, effects) -> None:
        if not self.subscribers:
            return
        runs: list[str] = []
        for reply in replies:
            if isinstance(reply, RunReply) and reply.run_id:
                runs.append(reply.run_id)
            elif isinstance(reply, Replayed):
                runs.extend(r for r, _ in reply.tasks)
        for items in (effects.dispatchable, effects.leased, effects.lease_ended,
                      effects.cancelled):
            runs.extend(x[0] for x in items)
        if not runs and not effects.jobs:
            return
        with self._lock:
            if len(self._runs) + len(self._jobs) <= 4 * self.max_ids:
                self._runs.update(dict.fromkeys(runs))
                self._jobs.update(dict.fromkeys(effects.jobs))
            if self._scheduled:
                return
            self._scheduled = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._flush)

    # -- loop ----------------------------------------------------------------------------

    def _flush(self) -> None:
        with self._lock:
            runs, jobs = self._runs, self._jobs
            self._runs, self._jobs = {}, {}
            self._scheduled = False
        for s in self.subscribers:
            s.add(runs, jobs)

    def _cluster_view(self) -> dict:
        raft = self.node.raft
        leader = raft.leader()
        return {"nodeId": self.node.config.node_id,
                "leaderNodeId": leader.node_id if leader else "",
                "term": int(raft.term()),
                "role": ROLE_NAMES.get(raft.status().get("state"), "unknown")}

    async def _poll_cluster(self) -> None:
        while True:
            view = self._cluster_view() if self.subscribers else self._cluster
            if view != self._cluster:
                self._cluster = view
                for s in self.subscribers:
                    s.cluster = view
                    s.wake.set()
            await asyncio.sleep(CLUSTER_POLL_S)

    async def stream(self, request: web.Request,
                     headers: dict[str, str] | None = None) -> web.StreamResponse:
        """Serve one stream; `headers` (CORS, server.py) go on its answer."""
        if len(self.subscribers) >= self.max_streams:
            raise Problem(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"events: this node serves at most {self.max_streams} event streams "
                          "(http_max_event_streams); close one or use another node",
                          headers={"Retry-After": "5"})
        resp = web.StreamResponse(headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-store",
            "X-Accel-Buffering": "no", **(headers or {})})
        await resp.prepare(request)
        sub = Subscriber(self.max_ids)
        sub.cluster = self._cluster_view()
        sub.wake.set()
        self.subscribers.add(sub)
        try:
            await self._write(resp, [("hello", {"nodeId": self.node.config.node_id})])
            while not self.closed.is_set():
                try:
                    await asyncio.wait_for(sub.wake.wait(), KEEPALIVE_S)
                except TimeoutError:
                    await asyncio.wait_for(resp.write(b": keepalive\n\n"), self.write_timeout_s)
                    continue
                await self._write(resp, sub.take())
        except (ConnectionError, TimeoutError):
            pass
        finally:
            self.subscribers.discard(sub)
        return resp

    async def _write(self, resp: web.StreamResponse, events: list[tuple[str, dict]]) -> None:
        if not events:
            return
        text = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
        await asyncio.wait_for(resp.write(text.encode()), self.write_timeout_s)
