"""A client agent: runs inside a client namespace and executes operations for the harness.

Protocol on stdin/stdout, one JSON object per line (pipes cross namespaces, sockets would not
need to): the harness writes `{"id": n, "process": p, "op": {...}}`; the agent answers
`{"id": n, "type": ..., "value": ..., "error": ...}` when the call ends. Operations of
different processes run concurrently; each process has its own JepsenClient, bound to the
node the harness assigned to it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from typing import Any

from gnomon.jepsen.client import JepsenClient, outcome

log = logging.getLogger("gnomon.jepsen.agent")


class Agent:
    def __init__(self, servers: list[str], seed: int):
        self.servers = servers
        self.seed = seed
        self.clients: dict[str, JepsenClient] = {}
        self._out_lock = asyncio.Lock()

    def client_for(self, process: Any, node_index: int) -> JepsenClient:
        key = f"{process}"
        client = self.clients.get(key)
        if client is None:
            own = self.servers[node_index % len(self.servers)]
            ordered = [own] + [s for s in self.servers if s != own]
            client = JepsenClient(ordered, read_server=own)
            self.clients[key] = client
        return client

    async def handle(self, msg: dict[str, Any]) -> None:
        op = msg["op"]
        try:
            client = self.client_for(msg.get("group", msg["process"]), msg.get("node", 0))
            result = await client.invoke(op)
        except Exception as exc:  # noqa: BLE001 - report, never die: the harness waits
            log.exception("op %s failed", op)
            kind = "info" if op.get("f") in ("create", "update", "delete", "trigger") else "fail"
            result = outcome(kind, error=f"agent: {exc!r}")
        await self.write({"id": msg["id"], **result})

    async def write(self, obj: dict[str, Any]) -> None:
        async with self._out_lock:
            sys.stdout.write(json.dumps(obj, default=str) + "\n")
            sys.stdout.flush()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 24)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        await self.write({"id": 0, "type": "ok", "value": "ready"})
        tasks: set[asyncio.Task] = set()
        while True:
            line = await reader.readline()
            if not line:
                break
            msg = json.loads(line)
            t = asyncio.create_task(self.handle(msg))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
        for t in tasks:
            t.cancel()
        for c in self.clients.values():
            await c.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="gnomon-jepsen-agent")
    parser.add_argument("--servers", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="agent")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s {args.name} %(levelname)s %(name)s: %(message)s")
    asyncio.run(Agent(args.servers.split(","), args.seed).run())


if __name__ == "__main__":
    main()
