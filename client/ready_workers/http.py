"""The ready-made HTTP worker (``gnomon worker http``): every task of its queues is one HTTP
request to the URL its payload names.

Payload (JSON object)::

    {"url": "https://hooks.example.com/nightly",  # http:// or https:// (required)
     "method": "POST",                            # default POST
     "body": {"report": "daily"},                 # JSON value -> application/json; a string
                                                  # -> text/plain; absent -> the task context
     "headers": {"Authorization": "Bearer ..."},
     "timeout_s": 30}                             # per request, also capped by the deadline

The request carries the task in headers: ``Idempotency-Key`` (``<run_id>:<task_name>``, the
same for every attempt: dedupe on it), ``X-Gnomon-Fencing-Token`` (strictly increasing per
attempt: reject lower ones), ``X-Gnomon-Run-Id``, ``X-Gnomon-Attempt``, ``X-Gnomon-Job-Id``,
``X-Gnomon-Task-Name``, ``X-Gnomon-Scheduled-For-Ms``, and ``traceparent`` when the cluster
traces (W3C trace context: the receiver's span joins the run's trace); these override the
payload's headers.
With a signing secret (``--signing-secret-file``) it is also signed the Standard Webhooks
way (``webhook-id``, ``webhook-timestamp``, ``webhook-signature``; signing.py).

Every attempt's output (``Attempt.output_tail``) is the request line with the response status
and the response body's tail (or the connection error); its duration is reported too.

Outcome: 2xx succeeds (result ``{"status": 200, "body": <tail>}``); 5xx, 408, 425, 429, a
timeout or a connection error is retried per the task's retry policy; any other status
(4xx, and 3xx: redirects are not followed) or a malformed payload dead-letters.
"""

from __future__ import annotations

import http.client
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import NonRetryableError
from .._version import VERSION
from ..worker.context import TaskContext
from ..worker.task import TaskDefinition
from .base import (
    BadPayload,
    ExpectedFailure,
    catch_all_task,
    payload_object,
    string_map,
    task_fields,
)
from .signing import signature_headers

__all__ = ["HttpRequest", "RequestFailed", "RequestRejected", "http_task", "parse_http_payload"]

log = logging.getLogger("gnomon.worker.http")

DEFAULT_TIMEOUT_S = 30.0
USER_AGENT = f"gnomon-worker-http/{VERSION}"
_MAX_READ_BYTES = 64 * 1024
_BODY_TAIL_CHARS = 2048
_RETRYABLE_4XX = frozenset({408, 425, 429})
_PAYLOAD_KEYS = ("url", "method", "body", "headers", "timeout_s")


class RequestFailed(ExpectedFailure):
    """5xx, 408/425/429, timeout or connection error: retryable."""


class RequestRejected(ExpectedFailure, NonRetryableError):
    """Any other non-2xx status: retrying the same request cannot help."""


@dataclass(frozen=True, slots=True)
class HttpRequest:
    url: str
    method: str = "POST"
    body: Any = None
    has_body: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float | None = None


def parse_http_payload(payload: bytes) -> HttpRequest:
    """The request of an HTTP task's payload; BadPayload names what is wrong."""
    data = payload_object(payload, keys=_PAYLOAD_KEYS, example='{"url": "https://..."}')
    url = data.get("url")
    if not isinstance(url, str) or urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise BadPayload("payload.url: expected an http:// or https:// URL")
    if not urllib.parse.urlsplit(url).hostname:
        raise BadPayload("payload.url: no host")
    method = data.get("method", "POST")
    if not isinstance(method, str) or not method.isalpha():
        raise BadPayload("payload.method: expected an HTTP method such as POST")
    headers = string_map(data, "headers")
    timeout = data.get("timeout_s")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        raise BadPayload("payload.timeout_s: expected a positive number of seconds")
    return HttpRequest(
        url=url,
        method=method.upper(),
        body=data.get("body"),
        has_body="body" in data,
        headers=headers,
        timeout_s=float(timeout) if timeout is not None else None,
    )


# The task's fields a request carries in X-Gnomon-* headers, and in the default body.
_HEADER_FIELDS = ("fencing_token", "run_id", "attempt", "job_id", "task_name", "scheduled_for_ms")
_BODY_FIELDS = (
    "run_id",
    "job_id",
    "tenant",
    "task_name",
    "attempt",
    "scheduled_for_ms",
    "idempotency_key",
    "fencing_token",
)


def context_headers(ctx: TaskContext) -> dict[str, str]:
    """``Idempotency-Key``, the ``X-Gnomon-*`` headers describing the task and, when the
    cluster traces, ``traceparent`` (W3C trace context of the worker's execution span)."""
    fields = task_fields(ctx)
    headers = {"Idempotency-Key": ctx.idempotency_key}
    if ctx.traceparent:
        headers["traceparent"] = ctx.traceparent
    for name in _HEADER_FIELDS:
        title = "-".join(word.title() for word in name.split("_"))
        headers[f"X-Gnomon-{title}"] = str(fields[name])
    return headers


def _context_body(ctx: TaskContext) -> dict[str, Any]:
    fields = task_fields(ctx)
    return {name: fields[name] for name in _BODY_FIELDS}


def _encode_body(req: HttpRequest, ctx: TaskContext) -> tuple[bytes | None, str | None]:
    if req.method in ("GET", "HEAD", "DELETE") and not req.has_body:
        return None, None
    body = req.body if req.has_body else _context_body(ctx)
    if body is None:
        return b"", None
    if isinstance(body, str):
        return body.encode(), "text/plain; charset=utf-8"
    return json.dumps(body, separators=(",", ":")).encode(), "application/json"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # Following a redirect could turn the POST into a GET or send the effect elsewhere.
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _body_tail(data: bytes) -> str:
    text = data.decode(errors="replace")
    return text[-_BODY_TAIL_CHARS:]


def send_request(
    ctx: TaskContext, *, default_timeout_s: float = DEFAULT_TIMEOUT_S,
    signing_secret: bytes | None = None,
) -> dict[str, Any]:
    """Send the task's request (blocking); see the module docstring for the outcome."""
    req = parse_http_payload(ctx.payload)
    ours = context_headers(ctx)
    lowered = {k.lower() for k in ours}
    headers = {k: v for k, v in req.headers.items() if k.lower() not in lowered}
    headers.update(ours)
    body, content_type = _encode_body(req, ctx)
    names = {k.lower() for k in headers}
    if content_type and "content-type" not in names:
        headers["Content-Type"] = content_type
    if "user-agent" not in names:
        headers["User-Agent"] = USER_AGENT
    if signing_secret is not None:
        headers = {k: v for k, v in headers.items() if not k.lower().startswith("webhook-")}
        headers.update(signature_headers(signing_secret, ctx.idempotency_key, body or b""))
    timeout = req.timeout_s or default_timeout_s
    if ctx.deadline_ms:
        timeout = min(timeout, max(0.001, ctx.deadline_ms / 1000 - time.time()))
    request = urllib.request.Request(req.url, data=body, headers=headers, method=req.method)
    what = f"{req.method} {req.url}"
    try:
        with _OPENER.open(request, timeout=timeout) as resp:
            status, data = resp.status, resp.read(_MAX_READ_BYTES)
    except urllib.error.HTTPError as e:
        status = e.code
        try:
            data = e.read(_MAX_READ_BYTES)
        except (OSError, http.client.HTTPException):
            data = b""
        finally:
            e.close()
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        reason = getattr(e, "reason", None) or e
        log.info("%s attempt %d: %s failed: %s", ctx.idempotency_key, ctx.attempt, what, reason)
        ctx.write(f"{what}: {reason}\n")
        raise RequestFailed(f"{what}: {reason}") from None
    log.info("%s attempt %d: %s -> %d", ctx.idempotency_key, ctx.attempt, what, status)
    # The attempt's output (Attempt.output_tail): the status line and the response's tail.
    body_tail = _body_tail(data)
    ctx.write(f"{what} -> HTTP {status}\n{body_tail}")
    if body_tail and not body_tail.endswith("\n"):
        ctx.write("\n")
    if 200 <= status < 300:
        return {"status": status, "body": body_tail}
    message = f"{what} -> HTTP {status}: {body_tail[:500] or 'no body'}"
    if status >= 500 or status in _RETRYABLE_4XX:
        raise RequestFailed(message)
    raise RequestRejected(message)


def http_task(queue: str, *, default_timeout_s: float = DEFAULT_TIMEOUT_S,
              signing_secret: bytes | None = None) -> TaskDefinition:
    """A catch-all task for ``queue`` that sends each task's request (in the worker's thread
    pool: a request cannot be interrupted, its timeout bounds it), signed when
    `signing_secret` is given."""

    def http(ctx: TaskContext) -> dict[str, Any]:
        return send_request(ctx, default_timeout_s=default_timeout_s,
                            signing_secret=signing_secret)

    return catch_all_task(queue, http)
