"""What every fault kind shares: how it says it cannot run now, what its start returns, and
the waits the second-tier faults use (a node's exit, a node catching up after a restart)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from gnomon.jepsen.history import INFO, NEMESIS

if TYPE_CHECKING:
    from gnomon.jepsen.nemesis import Nemesis

# A start returns what it did (recorded in the history) and how to undo it; the undo may return
# more facts for the stop event.
Stop = Callable[[], Awaitable[dict[str, Any] | None]]
Started = tuple[dict[str, Any], Stop]
StartFn = Callable[["Nemesis"], Awaitable[Started]]

# How long a restarted node may take to exit on a file it cannot use, and how long it may keep
# answering before the harness decides it accepted the file.
REFUSE_TIMEOUT_S = 30.0
ACCEPT_GRACE_S = 3.0
REJOIN_TIMEOUT_S = 30.0


class Skip(Exception):
    """The fault cannot be applied now (no leader known, no worker holding a lease)."""


def wall_ms() -> int:
    """Real time in ms (the harness never runs under libfaketime)."""
    return int(time.time() * 1000)


def names_file(text: str, file_name: str) -> str | None:
    """The first log line naming `file_name` exactly (raft.journal is not raft.journal.meta)."""
    pattern = re.compile(re.escape(file_name) + r"(?![.\w])")
    for line in text.splitlines():
        if pattern.search(line):
            return line.strip()[:400]
    return None


def last_lines(text: str, n: int = 3) -> list[str]:
    """The last `n` lines of a log, shortened, for the history."""
    return [line.strip()[:300] for line in text.strip().splitlines()[-n:]]


async def await_refusal(n: Nemesis, node_id: str, file_name: str) -> dict[str, Any]:
    """After restarting `node_id` on a file it must not use: did it exit non-zero naming the
    file, or did it come up and serve anyway (then: how many jobs it reports)?"""
    db, admin = n.ctx.db, n.ctx.admin
    loop = asyncio.get_running_loop()
    end = loop.time() + REFUSE_TIMEOUT_S
    answered_at: float | None = None
    status = None
    while loop.time() < end:
        if not db.nodes[node_id].alive():
            break
        if answered_at is not None and loop.time() - answered_at > ACCEPT_GRACE_S:
            break
        if answered_at is None:
            status = await db.status(admin, node_id, timeout_s=0.5)
            if status is not None:
                answered_at = loop.time()
        await asyncio.sleep(0.1)
    rc = await db.wait_exit(node_id, 0)
    text = db.log_since_start(node_id)
    line = names_file(text, file_name)
    out: dict[str, Any] = {"rc": rc, "refused": rc not in (None, 0) and line is not None,
                           "named_line": line, "log_tail": last_lines(text)}
    if rc is None:
        status = status or await db.status(admin, node_id, timeout_s=1.0)
        out["accepted_jobs"] = status.jobs if status else None
    return out


async def wait_rejoined(n: Nemesis, node_id: str, timeout_s: float = REJOIN_TIMEOUT_S
                        ) -> dict[str, Any]:
    """Until the restarted node has applied what the others had applied when it came back
    (polled, bounded); the final digest check judges its state."""
    db, admin = n.ctx.db, n.ctx.admin
    loop = asyncio.get_running_loop()
    started = loop.time()
    others = [s for i, s in (await db.statuses(admin)).items() if i != node_id]
    target = max((s.applied_index for s in others), default=0)
    while loop.time() - started < timeout_s:
        if not db.nodes[node_id].alive():
            return {"rejoined": False, "exited": db.nodes[node_id].proc.returncode,
                    "target_index": target}
        status = await db.status(admin, node_id, timeout_s=0.5)
        if status is not None and status.applied_index >= target:
            return {"rejoined": True, "rejoin_s": round(loop.time() - started, 2),
                    "target_index": target}
        await asyncio.sleep(0.2)
    return {"rejoined": False, "target_index": target}


def note(n: Nemesis, f: str, value: dict[str, Any]) -> None:
    """A nemesis observation between a start and its stop."""
    n.ctx.history.append(NEMESIS, INFO, f, value)
