"""The one exception for bad user input found by the leader before it proposes anything."""

from __future__ import annotations


class ValidationError(ValueError):
    """Bad user input; the message is `"<field>: <rule>"` (a proto field path such as
    `spec.tasks[1].depends_on`), answered as INVALID_ARGUMENT verbatim."""

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule
