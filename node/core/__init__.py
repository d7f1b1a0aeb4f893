"""gnomon's replicated state machine: pure, deterministic, no I/O (see DESIGN.md)."""

from gnomon.node.core import commands, results
from gnomon.node.core.apply import HANDLERS, apply_batch, new_state
from gnomon.node.core.digest import digest
from gnomon.node.core.errors import Code, Rejected, UnknownCommand
from gnomon.node.core.model import Limits, State
from gnomon.node.core.results import Effects, Reply
from gnomon.node.core.retry import backoff_ms
from gnomon.node.core.validate import validate_spec

__all__ = [
    "HANDLERS",
    "Code",
    "Effects",
    "Limits",
    "Rejected",
    "Reply",
    "State",
    "UnknownCommand",
    "apply_batch",
    "backoff_ms",
    "commands",
    "digest",
    "new_state",
    "results",
    "validate_spec",
]
