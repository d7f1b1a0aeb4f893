"""Business-rule violations as values: apply() returns Rejected, it never raises for them."""

from __future__ import annotations

from dataclasses import dataclass


class Code:
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"


@dataclass(frozen=True, slots=True)
class Rejected:
    """A command that changed nothing, with a message naming the field and the rule."""

    code: str
    detail: str


class UnknownCommand(Exception):
    """A log entry this build cannot interpret: the node must stop."""
