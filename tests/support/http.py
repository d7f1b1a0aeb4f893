"""A small HTTP client for the tests: http.client, no redirect following, JSON bodies."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass
class Resp:
    status: int
    headers: dict[str, str]
    text: str

    @property
    def json(self):
        return json.loads(self.text)

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0]


def call(base: str, method: str, path: str, body: object = None, *,
         headers: dict[str, str] | None = None, raw: bytes | None = None,
         timeout: float = 10.0) -> Resp:
    """One request to `base` (a node's URL, or a full URL in `path`)."""
    if path.startswith("http://"):
        parts = urlsplit(path)
        base, path = f"http://{parts.netloc}", parts.path + (f"?{parts.query}" if parts.query else "")
    conn = http.client.HTTPConnection(urlsplit(base).netloc, timeout=timeout)
    try:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        hdrs = {"Content-Type": "application/json"} if data is not None else {}
        hdrs.update(headers or {})
        conn.request(method, path, body=data, headers=hdrs)
        r = conn.getresponse()
        return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode())
    finally:
        conn.close()


def paused_job(node, name: str, queue: str = "") -> str:
    """A paused hourly job of one task (on `queue`), made through `node`'s HTTP API; its id."""
    task = {"name": "main", **({"queue": queue} if queue else {})}
    spec = {"name": name, "paused": True, "tasks": [task],
            "schedule": {"interval": {"intervalMs": "3600000"}}}
    r = call(node.url, "POST", "/v1/jobs", {"spec": spec})
    assert r.status == 201, r.text
    return r.json["job"]["jobId"]


def trigger(node, job_id: str) -> str:
    """A manual run of the job, through `node`'s HTTP API; its run id."""
    r = call(node.url, "POST", f"/v1/jobs/{job_id}/trigger", {})
    assert r.status == 200, r.text
    return r.json["run"]["runId"]
