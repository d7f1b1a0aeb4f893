"""The ready-made shell worker (``gnomon worker shell``): every task of its queues runs the
command its payload names, as a subprocess in a process group of its own.

Payload (JSON object)::

    {"argv": ["pg_dump", "-f", "/backups/db.sql"],  # the command; or:
     "command": "pg_dump mydb | gzip > db.gz",      # run by /bin/sh -c (argv or command)
     "env": {"PGHOST": "db"},                        # added to the worker's environment
     "cwd": "/srv/app",                              # default: the worker's directory
     "retry_on_exit": true,                          # false: a non-zero exit dead-letters
     "fatal_exit_codes": [2, 64]}                    # these exit codes dead-letter at once

The command sees the task in its environment: ``GNOMON_RUN_ID``, ``GNOMON_JOB_ID``,
``GNOMON_TENANT``, ``GNOMON_TASK_NAME``, ``GNOMON_QUEUE``, ``GNOMON_ATTEMPT``,
``GNOMON_MAX_ATTEMPTS``, ``GNOMON_SCHEDULED_FOR_MS``, ``GNOMON_IDEMPOTENCY_KEY``,
``GNOMON_FENCING_TOKEN``, ``GNOMON_DEADLINE_MS`` (0: none) and ``GNOMON_WORKER_ID``, and
``TRACEPARENT`` when the cluster traces (the worker's execution span, W3C trace context: a
traced command continues the run's trace); these override the payload's ``env``.

Every attempt reports the process's exit code (negative: killed by that signal), the tail of
its output (stdout and stderr interleaved) and its duration: ``gnomon run get RUN`` shows them.

Outcome: exit 0 succeeds (result ``{"exit_code": 0, "output_tail": ...}``); a non-zero exit
fails the attempt, retried per the task's retry policy unless ``retry_on_exit`` is false or the
code is in ``fatal_exit_codes``; death by a signal is retried; a command that cannot start (not
found, not executable, no such ``cwd``) or a malformed payload dead-letters. When the attempt's
timeout passes, the run is cancelled, the lease is revoked or the worker stops, the whole
process group gets SIGTERM, then SIGKILL after the worker's kill grace.

Anyone who can create jobs on these queues can run commands as the worker's user: serve them
only to trusted job authors.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import NonRetryableError
from ..worker.context import OutputTail, TaskContext
from ..worker.task import TaskDefinition
from .base import (
    BadPayload,
    ExpectedFailure,
    catch_all_task,
    payload_object,
    string_map,
    task_fields,
)

__all__ = [
    "BadPayload",
    "CommandFailed",
    "CommandFailedFinal",
    "ShellCommand",
    "parse_shell_payload",
    "shell_task",
    "task_environment",
]

log = logging.getLogger("gnomon.worker.shell")

DEFAULT_KILL_GRACE_S = 5.0
# The failure message quotes this much of the output (the full tail goes in output_tail).
_ERROR_TAIL_CHARS = 1500
_RESULT_TAIL_BYTES = 2048
# After the command exits, how long a background child may keep its output pipe open.
_DRAIN_S = 1.0
_PAYLOAD_KEYS = ("argv", "command", "env", "cwd", "retry_on_exit", "fatal_exit_codes")


class CommandFailed(ExpectedFailure):
    """The command exited non-zero or was killed by a signal (retryable)."""


class CommandFailedFinal(ExpectedFailure, NonRetryableError):
    """The command could not start, or exited with a code the payload marks final."""


@dataclass(frozen=True, slots=True)
class ShellCommand:
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    retry_on_exit: bool = True
    fatal_exit_codes: frozenset[int] = frozenset()


def parse_shell_payload(payload: bytes) -> ShellCommand:
    """The command of a shell task's payload; BadPayload names what is wrong."""
    data = payload_object(payload, keys=_PAYLOAD_KEYS, example='{"argv": ["echo", "hi"]}')
    if ("argv" in data) == ("command" in data):
        raise BadPayload("payload: set exactly one of argv (a list) or command (a /bin/sh string)")
    if "argv" in data:
        argv = data["argv"]
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise BadPayload("payload.argv: expected a non-empty list of strings")
    else:
        if not isinstance(data["command"], str) or not data["command"].strip():
            raise BadPayload("payload.command: expected a non-empty string")
        argv = ["/bin/sh", "-c", data["command"]]
    env = string_map(data, "env")
    cwd = data.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise BadPayload("payload.cwd: expected a string")
    retry_on_exit = data.get("retry_on_exit", True)
    if not isinstance(retry_on_exit, bool):
        raise BadPayload("payload.retry_on_exit: expected true or false")
    fatal = data.get("fatal_exit_codes", [])
    if not isinstance(fatal, list) or not all(
        isinstance(c, int) and not isinstance(c, bool) for c in fatal
    ):
        raise BadPayload("payload.fatal_exit_codes: expected a list of integers")
    return ShellCommand(tuple(argv), env, cwd, retry_on_exit, frozenset(fatal))


def task_environment(ctx: TaskContext) -> dict[str, str]:
    """The GNOMON_* variables describing the task, and TRACEPARENT when it has one."""
    env = {f"GNOMON_{name.upper()}": str(value) for name, value in task_fields(ctx).items()}
    if ctx.traceparent:
        env["TRACEPARENT"] = ctx.traceparent
    return env


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _copy_output(stream: asyncio.StreamReader, ctx: TaskContext, tail: OutputTail) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while chunk := await stream.read(65536):
        text = decoder.decode(chunk)
        ctx.write(text)
        tail.write(text)
    rest = decoder.decode(b"", final=True)
    ctx.write(rest)
    tail.write(rest)


async def _terminate(proc: asyncio.subprocess.Process, grace_s: float) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace_s``, reap the leader."""
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), grace_s)
    except TimeoutError:
        log.warning("process group %d ignored SIGTERM for %.1fs; killing it", proc.pid, grace_s)
    # Children may outlive the leader: the group gets SIGKILL either way.
    _signal_group(proc.pid, signal.SIGKILL)
    await proc.wait()


def _output_excerpt(tail: str) -> str:
    text = tail.strip()
    if not text:
        return "no output"
    if len(text) > _ERROR_TAIL_CHARS:
        text = "..." + text[-_ERROR_TAIL_CHARS:]
    return f"output tail: {text}"


async def run_command(
    ctx: TaskContext, *, kill_grace_s: float = DEFAULT_KILL_GRACE_S, base_env: Mapping[str, str]
) -> dict[str, Any]:
    """Run the command of ``ctx.payload``; see the module docstring for the outcome."""
    command = parse_shell_payload(ctx.payload)
    env = {**base_env, **command.env, **task_environment(ctx)}
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *command.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=command.cwd,
            env=env,
            start_new_session=True,
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as e:
        raise CommandFailedFinal(f"cannot start {command.argv[0]!r}: {e.strerror or e}") from None
    except OSError as e:
        raise CommandFailed(f"cannot start {command.argv[0]!r}: {e}") from None
    log.info(
        "%s attempt %d: started pid %d: %s",
        ctx.idempotency_key,
        ctx.attempt,
        proc.pid,
        " ".join(command.argv),
    )
    tail = OutputTail(_RESULT_TAIL_BYTES)
    assert proc.stdout is not None
    pump = asyncio.create_task(_copy_output(proc.stdout, ctx, tail))
    try:
        try:
            code = await proc.wait()
        except asyncio.CancelledError:
            log.info(
                "%s: stopping pid %d (cancelled, timed out or shutting down)",
                ctx.idempotency_key,
                proc.pid,
            )
            await _terminate(proc, kill_grace_s)
            raise
        try:
            await asyncio.wait_for(asyncio.shield(pump), _DRAIN_S)
        except TimeoutError:
            log.info(
                "%s: output still open after exit (a background child?); not waiting",
                ctx.idempotency_key,
            )
    finally:
        pump.cancel()
        if proc.returncode is None:
            # Cancelled again while terminating: do not leave the group running.
            _signal_group(proc.pid, signal.SIGKILL)
        else:
            # Reported with the Complete or Fail (Attempt.exit_code), also after a timeout.
            ctx.set_exit_code(proc.returncode)
    elapsed = time.monotonic() - started
    log.info("%s: pid %d exited with %d after %.2fs", ctx.idempotency_key, proc.pid, code, elapsed)
    if code == 0:
        return {"exit_code": 0, "output_tail": tail.tail()}
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        raise CommandFailed(f"killed by {name}; {_output_excerpt(tail.tail())}")
    if not command.retry_on_exit or code in command.fatal_exit_codes:
        raise CommandFailedFinal(f"exit code {code} (not retried); {_output_excerpt(tail.tail())}")
    raise CommandFailed(f"exit code {code}; {_output_excerpt(tail.tail())}")


def shell_task(
    queue: str,
    *,
    kill_grace_s: float = DEFAULT_KILL_GRACE_S,
    base_env: Mapping[str, str] | None = None,
) -> TaskDefinition:
    """A catch-all task for ``queue`` that runs each task's command. ``base_env`` defaults to
    the worker's environment."""
    env = dict(os.environ if base_env is None else base_env)

    async def shell(ctx: TaskContext) -> dict[str, Any]:
        return await run_command(ctx, kill_grace_s=kill_grace_s, base_env=env)

    return catch_all_task(queue, shell)
