"""Cluster membership: who the members are, as this node knows it (node/raft/DESIGN.md, Membership).

Raft's rule (single-server changes): a node uses the latest configuration in its log,
committed or not, and a change takes effect on every node when the node appends it. pysyncobj
keeps that rule but pickles its Node objects into the entry and forgets the configuration of
journal entries on restart. gnomon writes its own membership entries instead: a pickle of
plain strings, ``[kind, node_id, raft_addr, grpc_addr, http_addr]`` (no globals: node/raft/entries.py
refuses them), and keeps the member list here, written to ``members.json`` in the data
directory on every change, so that a restarted node starts with the configuration it had.

Thread rule: changes happen on pysyncobj's tick thread; readers on any thread get a copy
under the lock.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import threading
from collections.abc import Iterable

from gnomon.node.config import Config, ConfigError, Member
from gnomon.node.raft.journal import fsync_dir

log = logging.getLogger(__name__)

FILE_NAME = "members.json"
MEMBERSHIP_COMMAND = 2  # pysyncobj's _COMMAND_TYPE.MEMBERSHIP
ADD, REMOVE = "add", "rem"


def encode_change(kind: str, member: Member) -> bytes:
    """A membership entry's body (pysyncobj puts its command type byte in front)."""
    body = [kind, member.node_id, member.raft_addr, member.grpc_addr, member.http_addr]
    return pickle.dumps(body, protocol=2)


def decode_change(request: object) -> tuple[str, Member] | None:
    """(kind, member) of a decoded membership entry; None for pysyncobj's own shape."""
    if (type(request) is list and len(request) == 5 and request[0] in (ADD, REMOVE)
            and all(type(x) is str for x in request)):
        return request[0], Member(*request[1:])
    return None


def to_records(members: Iterable[Member]) -> tuple[tuple[str, str, str, str], ...]:
    """Plain tuples (snapshot and file form), sorted by node id."""
    return tuple(sorted((m.node_id, m.raft_addr, m.grpc_addr, m.http_addr) for m in members))


def from_records(records: object) -> tuple[Member, ...] | None:
    """Members from `to_records` output; None for anything else (an old snapshot's node set)."""
    if type(records) is not tuple or not records:
        return None
    if not all(type(r) is tuple and len(r) == 4 and all(type(x) is str for x in r)
               for r in records):
        return None
    return tuple(Member(*r) for r in records)


class Membership:
    """The current member list, persisted in `data_dir/members.json` on every change."""

    def __init__(self, data_dir: str, self_id: str, members: Iterable[Member]):
        self.path = os.path.join(data_dir, FILE_NAME)
        self.self_id = self_id
        self._lock = threading.Lock()
        self._members = {m.node_id: m for m in members}
        # raft_addr -> member, replaced whole on each change: read without the lock (every
        # NotLeader answer looks the leader up; with 10,000 reconnecting streams the lock
        # was 18% of the leader).
        self._by_raft = {m.raft_addr: m for m in self._members.values()}
        # A joining node writes no file until it is a member: a restart meanwhile joins again.
        self.joining = False

    def members(self) -> tuple[Member, ...]:
        with self._lock:
            return tuple(sorted(self._members.values(), key=lambda m: m.node_id))

    def get(self, node_id: str) -> Member | None:
        with self._lock:
            return self._members.get(node_id)

    def by_raft(self, raft_addr: str) -> Member | None:
        return self._by_raft.get(raft_addr)

    def add(self, member: Member) -> None:
        with self._lock:
            self._members[member.node_id] = member
            self._reindex()
        self.save()

    def remove(self, node_id: str) -> None:
        with self._lock:
            self._members.pop(node_id, None)
            self._reindex()
        self.save()

    def replace(self, members: Iterable[Member]) -> None:
        with self._lock:
            self._members = {m.node_id: m for m in members}
            self._reindex()
        self.save()

    def _reindex(self) -> None:
        self._by_raft = {m.raft_addr: m for m in self._members.values()}

    def save(self) -> None:
        """Write the list (atomically, fsynced); not while joining."""
        if self.joining:
            return
        body = json.dumps({"members": [list(r) for r in to_records(self.members())]}, indent=1)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(body + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        fsync_dir(os.path.dirname(os.path.abspath(self.path)))


def load_members(config: Config) -> tuple[Member, ...]:
    """The members this node starts with: `members.json` when the data directory has one (the
    configuration of its log), else the configured list. A node that the file says was
    removed refuses to start: it must join again with an empty data directory."""
    path = os.path.join(config.data_dir, FILE_NAME)
    try:
        with open(path) as fh:
            raw = json.load(fh)
    except FileNotFoundError:
        return config.members
    except (OSError, ValueError) as exc:
        raise ConfigError(f"members: {path} cannot be read ({exc}); restore it or wipe the "
                          f"data directory and join again") from None
    members = from_records(tuple(tuple(r) for r in raw.get("members", ())))
    if members is None:
        raise ConfigError(f"members: {path} does not hold a member list")
    if config.node_id not in {m.node_id for m in members}:
        raise ConfigError(
            f"node_id: {config.node_id!r} was removed from the cluster ({path} lists "
            f"{', '.join(m.node_id for m in members)}); to join again, start with an empty "
            f"--data-dir and --join, then run `gnomon cluster add-node`")
    if to_records(members) != to_records(config.members):
        log.info("members from %s (the configuration of this node's log), not the configured "
                 "list: %s", path, ", ".join(m.node_id for m in members))
    return members
