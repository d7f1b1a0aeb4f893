"""Which part files a backup download sweeps (client/_operations.py): only those nobody holds
locked and that are older than ABANDONED_AFTER_S; never the download's own, never another
path's."""

from __future__ import annotations

import fcntl
import os

from gnomon.client._operations import ABANDONED_AFTER_S, remove_abandoned_parts


def test_only_unlocked_parts_older_than_the_bound_of_this_path_are_removed(tmp_path):
    path = tmp_path / "state.backup"
    now_s = 1_000_000.0
    old, fresh, locked, own = (tmp_path / f"state.backup.{n}.part"
                               for n in ("old", "fresh", "locked", "own"))
    other = tmp_path / "other.backup.old.part"
    for part in (old, fresh, locked, own, other):
        part.write_bytes(b"x")
        os.utime(part, (now_s - 2 * ABANDONED_AFTER_S,) * 2)
    os.utime(fresh, (now_s - ABANDONED_AFTER_S / 2,) * 2)
    holder = os.open(locked, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        removed = remove_abandoned_parts(str(path), keep=str(own), now_s=now_s)
    finally:
        os.close(holder)
    assert removed == [str(old)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in (fresh, locked, own, other))
