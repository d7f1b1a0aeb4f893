"""Storage faults on one node's files: corruption and truncation at a seeded offset, a small
tmpfs per data directory that can be filled, and a watch that fires when a file is created.

Everything here acts on the run directory only. The tmpfs mounts carry the source name
`gnomon-jepsen`, so the next run (under the run lock) unmounts whatever a crashed harness left.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import random
import re
import select
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MOUNT_SOURCE = "gnomon-jepsen"
SNAPSHOT = "snapshot.lmdb"
JOURNAL = "raft.journal"
META = "raft.journal.meta"
# The node's journal format (node/storage/DESIGN.md): 8-byte MAGIC, then u32 length | u32 crc | payload.
JOURNAL_MAGIC_LEN = 8
RECORD_HEAD = 8
# The snapshot trailer (node/storage/DESIGN.md): b"GNOMSNAP" | u32 format version | sha256.
TRAILER = struct.Struct("<8sI32s")
FILL_CHUNK = 1 << 20

# Corruption modes per file, and whether a node must refuse to start on the result.
# "either": the node may also recover (a truncated journal tail looks like a torn write).
MODES: dict[str, dict[str, str]] = {
    SNAPSHOT: {"flip": "refuse", "truncate": "refuse", "version": "refuse",
               "garbage": "refuse", "missing": "refuse"},
    JOURNAL: {"record-flip": "refuse", "version": "refuse", "garbage": "refuse",
              "truncate": "either"},
    META: {"truncate": "refuse", "garbage": "refuse", "flip": "refuse"},
}


class DiskError(RuntimeError):
    """A storage fault could not be applied (missing file, mount failure)."""


# -- corruption --------------------------------------------------------------------------------


def corrupt(path: Path, mode: str, rng: random.Random) -> dict[str, Any]:
    """Damage `path` as `mode` says; returns what was done (offset, length, sizes)."""
    if not path.exists():
        raise DiskError(f"{path} does not exist")
    size = path.stat().st_size
    done: dict[str, Any] = {"file": path.name, "mode": mode, "size_before": size}
    if mode == "missing":
        path.unlink()
    elif mode == "truncate":
        done.update(_truncate(path, size, rng))
    elif mode == "garbage":
        path.write_bytes(rng.randbytes(max(size, 64)))
    elif mode == "flip":
        done.update(_flip(path, size, rng))
    elif mode == "record-flip":
        done.update(_journal_record_flip(path, rng))
    elif mode == "version":
        done.update(_version(path, size))
    else:
        raise DiskError(f"unknown corruption mode {mode!r}")
    done["size_after"] = path.stat().st_size if path.exists() else None
    _fsync(path)
    return done


def _truncate(path: Path, size: int, rng: random.Random) -> dict[str, Any]:
    low = JOURNAL_MAGIC_LEN if path.name == JOURNAL else (1 if path.name == META else 0)
    if size <= low + 1:
        raise DiskError(f"{path.name} too small to truncate ({size} bytes)")
    # A meta file cut anywhere before its closing brace is invalid JSON.
    high = size - 1
    offset = rng.randrange(low, high)
    os.truncate(path, offset)
    return {"offset": offset}


def _flip(path: Path, size: int, rng: random.Random) -> dict[str, Any]:
    if size == 0:
        raise DiskError(f"{path.name} is empty")
    offset = rng.randrange(size)
    with open(path, "r+b") as f:
        f.seek(offset)
        old = f.read(1)[0]
        # 0xFF is never valid UTF-8: a flipped meta byte cannot stay valid JSON.
        new = 0xFF if path.name == META or old != 0xFF else 0x00
        f.seek(offset)
        f.write(bytes([new]))
    return {"offset": offset, "old": old, "new": new}


def journal_records(path: Path) -> list[tuple[int, int]]:
    """(offset, total length) of every well-formed record of a journal file."""
    data = path.read_bytes()
    out, pos = [], JOURNAL_MAGIC_LEN
    while pos + RECORD_HEAD <= len(data):
        (length,) = struct.unpack_from("<I", data, pos)
        if length == 0 or pos + RECORD_HEAD + length > len(data):
            break
        out.append((pos, RECORD_HEAD + length))
        pos += RECORD_HEAD + length
    return out


def _journal_record_flip(path: Path, rng: random.Random) -> dict[str, Any]:
    """Flip one payload byte of a record that is followed by at least one valid record: a
    checksum error in the middle of the log, which no torn write can produce."""
    records = journal_records(path)
    if len(records) < 2:
        raise DiskError(f"{path.name} has {len(records)} records; need 2")
    index = rng.randrange(len(records) - 1)
    start, length = records[index]
    offset = start + RECORD_HEAD + rng.randrange(length - RECORD_HEAD)
    with open(path, "r+b") as f:
        f.seek(offset)
        old = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([old ^ 0x01]))
    return {"offset": offset, "record": index, "records": len(records)}


def _version(path: Path, size: int) -> dict[str, Any]:
    """A newer format version than the node knows (snapshot trailer, journal MAGIC)."""
    with open(path, "r+b") as f:
        if path.name == SNAPSHOT:
            if size < TRAILER.size:
                raise DiskError(f"{path.name} too small for a trailer")
            f.seek(size - TRAILER.size)
            tag, version, digest = TRAILER.unpack(f.read(TRAILER.size))
            f.seek(size - TRAILER.size)
            f.write(TRAILER.pack(tag, version + 100, digest))
            return {"offset": size - TRAILER.size + 8, "version": version + 100}
        f.seek(JOURNAL_MAGIC_LEN - 1)
        old = f.read(1)[0]
        f.seek(JOURNAL_MAGIC_LEN - 1)
        f.write(bytes([old + 1]))
        return {"offset": JOURNAL_MAGIC_LEN - 1, "version": old + 1}


def _fsync(path: Path) -> None:
    if path.exists():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# -- tmpfs ------------------------------------------------------------------------------------


def mount_tmpfs(path: Path, size_mb: int) -> None:
    """A tmpfs of `size_mb` MiB at `path`, with our source name (see `our_mounts`)."""
    path.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755",
                          MOUNT_SOURCE, str(path)], capture_output=True, text=True, timeout=20)
    if res.returncode != 0:
        raise DiskError(f"mount tmpfs on {path}: {res.stderr.strip()}")


def unmount(path: Path) -> bool:
    """Unmount (lazily if busy); True if it was mounted."""
    if str(path) not in our_mounts():
        return False
    res = subprocess.run(["umount", str(path)], capture_output=True, timeout=20)
    if res.returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=20)
    return True


def our_mounts() -> list[str]:
    """Mount points of tmpfs filesystems this harness mounted (any run)."""
    out = []
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[0] == MOUNT_SOURCE and parts[2] == "tmpfs":
                out.append(parts[1].replace("\\040", " "))
    return out


def cleanup_mounts() -> list[str]:
    """Unmount every tmpfs a crashed run left behind (deepest first)."""
    removed = []
    for mount in sorted(our_mounts(), key=len, reverse=True):
        if unmount(Path(mount)):
            removed.append(f"tmpfs {mount}")
    return removed


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer could still put on the filesystem of `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path: Path) -> dict[str, Any]:
    """Write `path` (a file on the mount) until the filesystem is full."""
    written = 0
    chunk = b"\0" * FILL_CHUNK
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = FILL_CHUNK
        while size >= 512:
            try:
                written += os.write(fd, chunk[:size])
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                size //= 2
    finally:
        os.close(fd)
    return {"filled_bytes": written, "free_bytes": free_bytes(path.parent)}


# -- processes ---------------------------------------------------------------------------------


def group_members(pgid: int) -> list[int]:
    """Live pids in process group `pgid` (a node and any child it forked)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry))
    return out


def process_state(pid: int) -> str:
    """One-letter state of `pid` (T: stopped), '' if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return ""


# -- file creation watch (inotify) -------------------------------------------------------------

IN_CREATE = 0x100
IN_MOVED_TO = 0x80
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")


@dataclass
class Hit:
    """The file that set a watch off, and when (monotonic seconds)."""

    name: str
    mono: float


class CreateWatch:
    """Calls `action` (on its own thread, at once) the first time a file whose name matches
    `pattern` is created in `directory`; inotify, so the latency is a thread wake-up."""

    def __init__(self, directory: Path, pattern: str, action: Callable[[str], None]) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self._fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self._fd < 0:
            raise DiskError(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
        wd = libc.inotify_add_watch(self._fd, str(directory).encode(), IN_CREATE | IN_MOVED_TO)
        if wd < 0:
            os.close(self._fd)
            raise DiskError(f"inotify_add_watch {directory}: {os.strerror(ctypes.get_errno())}")
        self._pattern = re.compile(pattern)
        self._action = action
        self._stop = threading.Event()
        self.hit: Hit | None = None
        self._thread = threading.Thread(target=self._run, name="create-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set() and self.hit is None:
                ready, _, _ = select.select([self._fd], [], [], 0.1)
                if ready:
                    self._drain()
        finally:
            os.close(self._fd)

    def _drain(self) -> None:
        try:
            data = os.read(self._fd, 64 * 1024)
        except BlockingIOError:
            return
        pos = 0
        while pos + _EVENT.size <= len(data):
            _wd, _mask, _cookie, length = _EVENT.unpack_from(data, pos)
            name = data[pos + _EVENT.size: pos + _EVENT.size + length].rstrip(b"\0").decode()
            pos += _EVENT.size + length
            if self.hit is None and self._pattern.search(name):
                self.hit = Hit(name, time.monotonic())
                self._action(name)
                return

    def close(self) -> None:
        """Stop watching (the thread ends within its 0.1 s poll)."""
        self._stop.set()
        self._thread.join(timeout=2)
