"""What a task function receives (``TaskContext``) and the lease state behind it."""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .._time import InstantField

__all__ = ["TaskContext"]

DEFAULT_OUTPUT_TAIL_BYTES = 8192


class LeaseState:
    """A lease as the worker sees it. ``valid_until`` is ``time.monotonic()`` seconds.

    Shared between the event loop (which renews and fences it) and task threads (which read
    it): every field is a single attribute read or an ``Event``, so no lock is needed.
    """

    __slots__ = ("valid_until", "fenced", "cancelled")

    def __init__(self, valid_until: float = math.inf) -> None:
        self.valid_until = valid_until
        # Sticky: once the lease is revoked, cancelled, lost or lapsed, it never becomes valid
        # again, even if a late heartbeat ack would say so.
        self.fenced = False
        self.cancelled = threading.Event()

    def valid(self, now: float | None = None) -> bool:
        if self.fenced:
            return False
        return (time.monotonic() if now is None else now) < self.valid_until

    def renew(self, until: float) -> None:
        if not self.fenced and until > self.valid_until:
            self.valid_until = until

    def fence(self) -> None:
        self.fenced = True


class OutputTail:
    """The last ``limit_bytes`` of text a task wrote, for ``Complete/Fail.output_tail``."""

    __slots__ = ("_limit", "_text", "_lock")

    def __init__(self, limit_bytes: int = DEFAULT_OUTPUT_TAIL_BYTES) -> None:
        self._limit = max(0, limit_bytes)
        self._text = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        if not self._limit or not text:
            return
        with self._lock:
            self._text += text
            # A character is at least one byte, so `limit` characters always cover `limit` bytes.
            if len(self._text) > 2 * self._limit:
                self._text = self._text[-self._limit :]

    def tail(self) -> str:
        with self._lock:
            data = self._text.encode()
        return data[-self._limit :].decode(errors="ignore") if self._limit else ""


class ExitCode:
    """The process exit code a task recorded (``TaskContext.set_exit_code``); None if none.
    One attribute, written by the task's thread and read by the event loop: no lock."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: int | None = None


class TraceParent:
    """The W3C traceparent a task hands on: the attempt's as sent, replaced by the worker's
    execution span's while one runs (gnomon.client.tracing). One attribute: no lock."""

    __slots__ = ("value",)

    def __init__(self, value: str = "") -> None:
        self.value = value


_INT32 = range(-(2**31), 2**31)


@dataclass(frozen=True, slots=True, eq=False)
class TaskContext:
    """The one argument of a task function: what to run, under which lease.

    Key every external effect by ``idempotency_key`` (stable across attempts and replays) and,
    where the effect store supports it, reject writes with a ``fencing_token`` lower than one
    already seen: execution is at-least-once.
    """

    run_id: str
    job_id: str
    tenant: str
    task_name: str
    queue: str
    attempt: int
    max_attempts: int
    scheduled_for_ms: int
    idempotency_key: str
    fencing_token: int
    deadline_ms: int
    """Wall-clock deadline of this attempt (ms since the epoch); 0 if none."""
    payload: bytes
    worker_id: str = ""
    _lease: LeaseState = field(default_factory=LeaseState, repr=False)
    _output: OutputTail = field(default_factory=OutputTail, repr=False)
    _exit_code: ExitCode = field(default_factory=ExitCode, repr=False)
    _trace: TraceParent = field(default_factory=TraceParent, repr=False)

    scheduled_for = InstantField("the slot the run fires for", zero_is_epoch=True)
    deadline = InstantField("None: no deadline")

    def json(self) -> Any:
        """The payload decoded as JSON; ``None`` for an empty payload."""
        return json.loads(self.payload) if self.payload else None

    def lease_valid(self) -> bool:
        """Whether this worker may still act for the task: False once the lease was revoked,
        cancelled or lost, or no heartbeat was acknowledged for ``lease_ttl - safety_margin``.
        Check it before an effect that cannot be fenced downstream."""
        return self._lease.valid()

    def is_cancelled(self) -> bool:
        """Whether the task was asked to stop. Async tasks are also cancelled; sync tasks run
        in a thread that cannot be interrupted and should poll this (or ``wait_cancelled``)."""
        return self._lease.cancelled.is_set()

    def wait_cancelled(self, timeout_s: float) -> bool:
        """Block up to ``timeout_s`` (for sync tasks, instead of ``time.sleep``); True if
        cancelled."""
        return self._lease.cancelled.wait(timeout_s)

    def write(self, text: str) -> None:
        """Append to the task's output; its tail is reported with the result or failure and
        kept in the task's attempt record (``Attempt.output_tail``, ``gnomon run get``)."""
        self._output.write(text)

    def output_tail(self) -> str:
        """The tail of what the task wrote so far, as it would be reported now."""
        return self._output.tail()

    def set_exit_code(self, code: int | None) -> None:
        """Record the exit code of the process this attempt ran (negative: killed by that
        signal, as Python's ``returncode``); reported with the result or failure
        (``Attempt.exit_code``). None clears it."""
        if code is not None and (isinstance(code, bool) or not isinstance(code, int)):
            raise TypeError(f"an exit code is an int, not {type(code).__name__}")
        if code is not None and code not in _INT32:
            raise ValueError(f"exit code {code} is outside the 32-bit range")
        self._exit_code.value = code

    @property
    def traceparent(self) -> str:
        """The W3C traceparent of this execution ("" when the cluster does not trace): the
        worker's execution span when it traces, else the attempt's span. Hand it on to what
        the task calls (the shell worker sets ``TRACEPARENT``, the HTTP worker the
        ``traceparent`` header)."""
        return self._trace.value

    @property
    def exit_code(self) -> int | None:
        """The exit code recorded with ``set_exit_code`` (None if none)."""
        return self._exit_code.value
