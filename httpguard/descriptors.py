"""Open-file descriptors of a process (a node, a gateway): the limit raised at start, the ones
still free.

Every connection the node accepts is a descriptor, and so is every file the journal and the
snapshot writer open (the journal's meta file is rewritten through a temporary file on every
term and commit-index change). At the limit (RLIMIT_NOFILE) the next `open` fails with EMFILE
and the journal stops the node. So the node (and the gateway) raises its soft limit to the
hard one at start (`raise_open_file_limit`), and the HTTP port refuses connections while fewer
than `reserved_descriptors` are free (`DescriptorBudget`; node/api/http/DESIGN.md,
"Connections").
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass

# Where the open descriptors of this process are listed, Linux first.
_FD_DIRS = ("/proc/self/fd", "/dev/fd")


@dataclass(frozen=True)
class OpenFileLimit:
    before: int  # the soft limit the process was started with
    soft: int  # the soft limit now
    hard: int


def raise_open_file_limit() -> OpenFileLimit:
    """Raise the soft RLIMIT_NOFILE to the hard limit (or as far as the kernel allows: Linux
    caps it at fs.nr_open; macOS at OPEN_MAX). Never lowers it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if target == resource.RLIM_INFINITY:
        target = _nr_open() or max(soft, 1 << 20)
    for value in (target, 1 << 20, 1 << 16):
        if value <= soft:
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (value, hard))
            break
        except (ValueError, OSError):
            continue
    return OpenFileLimit(soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0], hard)


def _nr_open() -> int:
    try:
        with open("/proc/sys/fs/nr_open") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return 0


def soft_limit() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if soft != resource.RLIM_INFINITY else 1 << 30


def count_open() -> int | None:
    """Descriptors this process has open (None where the system does not list them)."""
    for path in _FD_DIRS:
        try:
            # listdir itself holds one descriptor on the directory while it reads it.
            return max(0, len(os.listdir(path)) - 1)
        except OSError:
            continue
    return None


class DescriptorBudget:
    """Whether a new connection would leave fewer than `reserve` descriptors free.

    Cheap enough to ask on every accept: the open descriptors are counted at most every
    `recount_s` (a listing of /proc/self/fd), and in between each connection admitted is
    counted as one more (closes are not: an estimate that errs towards refusing). Descriptor
    numbers are allocated lowest first, so an accepted descriptor numbered `fd` also proves
    that at least fd + 1 are open, whatever the last count said."""

    def __init__(self, reserve: int, *, recount_s: float = 0.1,
                 clock: Callable[[], float] = time.monotonic,
                 counter: Callable[[], int | None] = count_open,
                 limit: Callable[[], int] = soft_limit) -> None:
        self.reserve = reserve
        self._recount_s = recount_s
        self._clock = clock
        self._counter = counter
        self._limit = limit
        self._soft = limit()
        self._open: int | None = None
        self._admitted = 0
        self._next_count = 0.0

    def free(self, fd: int = -1) -> int:
        """Descriptors free now (an estimate, never above the truth by more than the closes
        since the last count); `fd`: a descriptor just accepted."""
        now = self._clock()
        if now >= self._next_count:
            self._soft = self._limit()
            self._open, self._admitted = self._counter(), 0
            self._next_count = now + self._recount_s
        used = fd + 1
        if self._open is not None:
            used = max(used, self._open + self._admitted)
        return self._soft - used

    def short(self, fd: int) -> bool:
        """True when admitting the connection on `fd` would leave fewer than `reserve` free;
        False counts it as admitted."""
        if self.free(fd) < self.reserve:
            return True
        self._admitted += 1
        return False
