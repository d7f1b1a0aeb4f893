"""Opening a node's storage: the snapshot, the journal that continues it, and refusing to start
when they cannot be read or do not fit together (node/storage/DESIGN.md "Opening").

Runs on the main thread before pysyncobj's tick thread exists: the snapshot is verified and
decoded here (so no port serves an empty state meanwhile), and `align_journal` runs inside
pysyncobj's `createJournal`, before pysyncobj reads the journal.
"""

from __future__ import annotations

import logging
import os
from typing import NoReturn

from gnomon.node.raft.journal import DurableJournal

log = logging.getLogger(__name__)

#: Exit status of a node that refuses to start because of its data directory (EX_DATAERR).
EXIT_STORAGE = 65


class StorageError(Exception):
    """The snapshot and the journal do not fit together; the message names the files."""


def advice(data_dir: str) -> str:
    """What an operator can do about a data directory the node cannot use."""
    return (
        f"This node cannot start from its data directory {data_dir}. If a majority of the "
        "other nodes is healthy: stop this node, move the data directory aside (keep it to "
        "investigate), and start the node again with an empty one; it rejoins and the leader "
        "sends it a snapshot. If this is the last good copy (a single node, or a majority is "
        "damaged), restore the data directory from a backup instead."
    )


def refuse_to_start(data_dir: str, exc: BaseException) -> NoReturn:
    """Log why and stop the process with EXIT_STORAGE (nothing is served, nothing changed)."""
    log.critical("FATAL: %s\n%s", exc, advice(data_dir))
    logging.shutdown()
    raise SystemExit(EXIT_STORAGE)


def check_files(snapshot_path: str, journal_path: str) -> None:
    """A snapshot without the journal beside it lost the term and vote this node promised."""
    if os.path.exists(snapshot_path) and not os.path.exists(journal_path):
        raise StorageError(
            f"{journal_path}: missing, but the snapshot {snapshot_path} exists: the journal "
            "(with the term and vote this node promised) was removed")


def align_journal(journal: DurableJournal, *, last: tuple | None, before: tuple | None,
                  snapshot_path: str) -> None:
    """Make the journal continue the snapshot whose last two entries are `before`, `last`.

    pysyncobj expects the journal to start with those two entries. After a crash between a
    snapshot's rename and the prefix deletion, the journal starts earlier: the prefix goes and
    every entry after the snapshot stays (pysyncobj would clear them all). Without a snapshot,
    a journal must start at index 1.
    """
    if last is None or before is None:
        if len(journal) and journal[0][1] > 1:
            raise StorageError(
                f"{snapshot_path}: missing, but the journal {journal.path} starts at index "
                f"{journal[0][1]}: the entries before it exist only in that snapshot")
        return
    index = last[1]
    if not len(journal):
        _rebuild(journal, before, last, [])
        return
    first, end = journal[0][1], journal[-1][1]
    if first > index:
        raise StorageError(
            f"the journal {journal.path} starts at index {first}, after the last entry of the "
            f"snapshot {snapshot_path} ({index}): entries {index + 1}..{first - 1} are missing")
    pos = index - first
    if end < index or _key(journal[pos]) != _key(last):
        # The snapshot holds committed entries; a journal without them (or with another entry
        # at that index) is older, uncommitted history: pysyncobj's own rule applies.
        log.warning("journal %s does not contain entry %d of the snapshot: it restarts from "
                    "the snapshot", journal.path, index)
        _rebuild(journal, before, last, [])
    elif pos >= 1 and _key(journal[pos - 1]) == _key(before):
        if pos > 1:
            log.info("journal %s: dropping %d entries the snapshot %s includes", journal.path,
                     pos - 1, snapshot_path)
            journal.deleteEntriesTo(pos - 1)
    else:
        _rebuild(journal, before, last, journal[pos + 1 :])


def _key(entry: tuple) -> tuple[int, int]:
    # Raft's log matching: the same index and term mean the same entry.
    return int(entry[1]), int(entry[2])


def _rebuild(journal: DurableJournal, before: tuple, last: tuple, tail: list) -> None:
    journal.reset([before, last, *tail])
