"""apply_batch: the replicated state machine's only transition function.

Runs on the Raft tick thread of every node (and again on journal replay). Pure: all
non-deterministic inputs are fields of the commands; business-rule violations are returned as
Rejected values and change nothing. One handler per command type, registered in HANDLERS.

The handlers live in vertical slices (DESIGN.md, "Slices"), each exporting `HANDLER_PAIRS`;
this module keeps the batch and command loop, request-id dedupe and the assembled table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from gnomon.node.core import access, backfill, circuits, fire, jobs, limits, rerun, runs, tasks
from gnomon.node.core.commands import Batch, Command
from gnomon.node.core.common import Ctx
from gnomon.node.core.errors import Code, Rejected, UnknownCommand
from gnomon.node.core.jobs import index_job
from gnomon.node.core.limits import _trim_dedupe
from gnomon.node.core.model import DedupeEntry, Limits, State, dedupe_key
from gnomon.node.core.results import Effects, Reply

# index_job: node/storage/state_codec.py rebuilds the paging indexes with it on restore.
__all__ = ["HANDLERS", "Ctx", "Handler", "apply_batch", "apply_command", "handler_table",
           "index_job", "new_state", "reused_request_id"]

Handler = Callable[[Ctx, Any], Reply]


def new_state(limits: Limits | None = None) -> State:
    """The state of a fresh cluster (before the first log entry)."""
    return State() if limits is None else State(limits=limits)


def apply_batch(state: State, batch: Batch) -> tuple[list[Reply], Effects]:
    """Apply one Raft entry: advance cluster time, then every command in order.

    Raises UnknownCommand for a command type this build does not know (the node must stop).
    """
    state.clock_ms = max(state.clock_ms, batch.now_ms)
    ctx = Ctx(state=state, effects=Effects(), now=state.clock_ms)
    _trim_dedupe(ctx)
    replies = [apply_command(ctx, command) for command in batch.commands]
    return replies, ctx.effects


def apply_command(ctx: Ctx, command: Command) -> Reply:
    """One command, with request-id dedupe for the commands that carry one.

    A request id is remembered per `request_scope` (the caller and the RPC, stamped by the
    servicer; "" is the legacy global scope): the same id from another scope is another
    request. Within a scope, a repeat with the same `request_fingerprint` gets the first
    reply and changes nothing; one with a different fingerprint is refused (and changes
    nothing), never answered with the other request's reply (DESIGN.md, "Request ids")."""
    handler = HANDLERS.get(type(command))
    if handler is None:
        raise UnknownCommand(f"no handler for command type {type(command).__name__}")
    request_id: str = getattr(command, "request_id", "")
    if not request_id:
        return handler(ctx, command)
    key = dedupe_key(getattr(command, "request_scope", ""), request_id)
    fingerprint: bytes = getattr(command, "request_fingerprint", b"")
    entry = ctx.state.dedupe.get(key)
    if entry is not None:
        if entry.fingerprint != fingerprint:
            return Rejected(Code.FAILED_PRECONDITION, reused_request_id(request_id))
        return cast(Reply, entry.reply)
    reply = handler(ctx, command)
    ctx.state.dedupe[key] = DedupeEntry(ctx.now, reply, fingerprint)
    _trim_dedupe(ctx)
    return reply


def reused_request_id(request_id: str) -> str:
    """The message of a request id that already names another request of the same caller
    (the servicers use it too, so both read alike)."""
    return (f"request_id: {request_id!r} was already used by this caller for a different "
            "request (a retry must repeat the request exactly); use a new request_id for "
            "each request")


def handler_table(pairs: list[tuple[type, Handler]]) -> dict[type, Handler]:
    """The command type -> handler table; a type registered twice is a bug, not a dict key
    that quietly wins."""
    table: dict[type, Handler] = {}
    for command_type, handler in pairs:
        if command_type in table:
            raise ValueError(f"HANDLERS: {command_type.__name__} registered twice")
        table[command_type] = handler
    return table


HANDLERS: dict[type, Handler] = handler_table([
    *jobs.HANDLER_PAIRS,
    *fire.HANDLER_PAIRS,
    *runs.HANDLER_PAIRS,
    *tasks.HANDLER_PAIRS,
    *rerun.HANDLER_PAIRS,
    *circuits.HANDLER_PAIRS,
    *backfill.HANDLER_PAIRS,
    *limits.HANDLER_PAIRS,
    *access.HANDLER_PAIRS,
])
