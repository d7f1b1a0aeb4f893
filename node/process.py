"""How a node process ends when it must not go on: at once, with a reason in the log."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

log = logging.getLogger(__name__)

Crash = Callable[[str], None]


def crash_process(reason: str) -> None:
    """Stop the node at once (exit code 70): used for an unreadable or unappliable log."""
    log.critical("FATAL: %s", reason)
    logging.shutdown()
    os._exit(70)

