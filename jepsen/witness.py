"""The witness: an effect store outside the cluster that tasks report to, over HTTP.

It listens on the bridge address in the root namespace (reachable from every worker
namespace, cut off by no partition). It is *fenced* like a store that honours gnomon's tokens:
per idempotency key it remembers the highest fencing token seen and accepts an effect only
with a token >= that. Every request becomes a `witness` event in the history:

- POST /effect  {kind, job_id, scheduled_for_ms, run_id, task, fencing_token,
                 idempotency_key, worker_id, attempt} -> {accepted, max_token}
- POST /ack     {run_id, task, fencing_token, worker_id, accepted, detail}: the cluster's answer
                 to a worker's completion report (what the worker was told)
- POST /begin   {...as effect}: a worker started a task (which workers hold leases now)
- POST /hello   {worker_id}: a worker process is up
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gnomon.jepsen.history import OK, WITNESS, History

# A worker counts as holding a lease for this long after a begin without an ack.
HOLD_WINDOW_S = 15.0


class Witness:
    def __init__(self, history: History, host: str, port: int = 7900):
        self.history = history
        self.addr = (host, port)
        self._lock = threading.Lock()
        self._max_token: dict[str, int] = {}
        self._holding: dict[str, dict[tuple[str, int], float]] = {}
        self.workers: set[str] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.addr[0]}:{self.addr[1]}"

    def start(self) -> None:
        witness = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length", "0"))
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                    reply = witness.handle(self.path.strip("/"), body)
                    code = 200
                except (ValueError, KeyError) as exc:
                    reply, code = {"error": repr(exc)}, 400
                data = json.dumps(reply).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(self.addr, Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="witness",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- requests ----------------------------------------------------------------------------

    def handle(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        if kind == "hello":
            with self._lock:
                self.workers.add(body["worker_id"])
            self.history.append(WITNESS, OK, "worker-up", body)
            return {}
        if kind == "effect":
            return self._effect(body)
        if kind == "begin":
            with self._lock:
                held = self._holding.setdefault(body["worker_id"], {})
                held[(body["run_id"], int(body["fencing_token"]))] = time.monotonic()
            self.history.append(WITNESS, OK, "begin", body)
            return {}
        if kind == "ack":
            with self._lock:
                held = self._holding.get(body["worker_id"], {})
                held.pop((body["run_id"], int(body["fencing_token"])), None)
            self.history.append(WITNESS, OK, "report-ack", body)
            return {}
        raise KeyError(f"unknown witness endpoint {kind!r}")

    def _effect(self, body: dict[str, Any]) -> dict[str, Any]:
        key = body["idempotency_key"]
        token = int(body["fencing_token"])
        with self._lock:
            highest = self._max_token.get(key, 0)
            accepted = token >= highest
            if accepted:
                self._max_token[key] = token
            # Appended under the lock: the history order is the order of decisions.
            self.history.append(WITNESS, OK, "effect",
                                {**body, "accepted": accepted, "max_token": highest})
        return {"accepted": accepted, "max_token": max(highest, token)}

    def holders(self) -> list[str]:
        """Workers that began a task recently and have not had its report answered."""
        now = time.monotonic()
        with self._lock:
            return sorted(w for w, held in self._holding.items()
                          if any(now - t < HOLD_WINDOW_S for t in held.values()))
