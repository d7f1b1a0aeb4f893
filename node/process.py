"""How a node process ends when it must not go on: at once, with a reason in the log."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Callable

log = logging.getLogger(__name__)

Crash = Callable[[str], None]

# The cyclic GC's thresholds for a node process (CPython's default is (700, 10, 10)). With the
# default, a saturated follower ran a full collection every second or two, each 150-270 ms
# with the tick thread stopped (no heartbeat, no append read) and each collecting nothing:
# the replicated state, runs and protobuf messages are freed by reference counting, not by
# the cyclic GC. Young collections come 70x rarer, and a full one needs 1,400x the allocations
# (bench/RESULTS.md, "One group at the limit").
GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    """Set the node's GC thresholds (GC_THRESHOLDS); call once at start."""
    gc.set_threshold(*GC_THRESHOLDS)


def crash_process(reason: str) -> None:
    """Stop the node at once (exit code 70): used for an unreadable or unappliable log."""
    log.critical("FATAL: %s", reason)
    logging.shutdown()
    os._exit(70)

