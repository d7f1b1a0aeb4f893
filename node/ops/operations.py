"""Operator actions on a node: leadership transfer, online backup, restore into a fresh data
directory (`gnomon-node restore`).

Leadership transfer (Raft's TimeoutNow, through pysyncobj): the target must have every entry
the leader has, which a busy leader never lets it have; so the proposer is held (commands
wait in its queue, entries in flight commit first) for at most `HOLD_S` per attempt while
the request is sent. Commands that were waiting fail NOT_LEADER when this node steps down and
their callers retry on the new leader (request ids make that safe).

Backup: after a barrier (every write acknowledged before the call is in the state), the state
is written under the replica lock as a snapshot file (the same format as the node's own, with
its SHA-256 trailer); the tick thread waits meanwhile (milliseconds for small states, longer
for large ones: a known limit). Its Raft position is the last applied entry and the current
term; the two log entries the file names are no-ops at those indexes, so that every node
restored from the same file starts with the same log. The history store (runs evicted from
memory) is not included.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from gnomon.node.clock import mono_ms
from gnomon.node.config import Member
from gnomon.node.core import digest
from gnomon.node.core.commands import Barrier
from gnomon.node.raft.errors import LeadershipLost
from gnomon.node.raft.membership import ADD, REMOVE

if TYPE_CHECKING:
    from gnomon.node.storage.history_sink import HistorySink

log = logging.getLogger(__name__)

HOLD_S = 1.0
# How long a removed member is still sent entries, uncounted, so that it learns of its removal.
REMOVED_GRACE_S = 3.0
NO_OP = b"\x01"  # pysyncobj's _COMMAND_TYPE.NO_OP entry


class OperationError(Exception):
    """An operator action cannot be done as asked (FAILED_PRECONDITION); the message says why."""


class TransferTimeout(Exception):
    """No other leader was seen before the deadline."""


async def transfer_leadership(node, to_node_id: str = "", timeout_s: float = 5.0):
    """Hand leadership to `to_node_id` (empty: the most caught-up follower); returns the new
    leader's Member. The caller checked that this node leads."""
    cfg = node.config
    members = node.raft.membership.members()
    target = None
    if to_node_id:
        target = next((m for m in members if m.node_id == to_node_id), None)
        if target is None:
            raise OperationError(f"to_node_id: {to_node_id!r} is not a member "
                                 f"({', '.join(m.node_id for m in members)})")
        if target.node_id == cfg.node_id:
            raise OperationError(f"to_node_id: {to_node_id!r} is this node, the leader already")
    raft = node.raft
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    election_s = 2 * cfg.raft_max_timeout_s + 0.5
    while loop.time() < deadline:
        sent = False
        hold_s = max(0.01, min(deadline, loop.time() + HOLD_S) - loop.time())
        try:
            # Bounded as a whole: entries in flight may never commit (peers stopping too).
            async with asyncio.timeout(hold_s), node.proposer.paused():
                while not sent:
                    sent = raft.request_transfer(target.raft_addr if target else None)
                    if not sent:
                        await asyncio.sleep(0.01)
        except TimeoutError:
            pass
        if not sent:
            continue
        wait_until = min(deadline, loop.time() + election_s)
        while loop.time() < wait_until:
            leader = raft.leader()
            if leader is not None and leader.node_id != cfg.node_id:
                log.info("leadership transferred to %s", leader.node_id)
                return leader
            await asyncio.sleep(0.02)
    raise TransferTimeout(f"no other leader within {timeout_s:.1f}s"
                          + (f" (target {to_node_id})" if to_node_id else ""))


@dataclass
class MembershipChange:
    changed: bool
    match_index: int = 0
    catch_up_ms: int = 0


async def add_node(node, member: Member, catch_up_timeout_s: float) -> MembershipChange:
    """Make `member` a voter (node/raft/DESIGN.md, Membership): a learner until its match index is within
    `membership_catch_up_lag_entries` of the commit index, then one membership entry. The
    caller checked that this node leads."""
    raft = node.raft
    async with raft.change_lock:
        _check_addable(raft.membership.members(), member)
        if raft.membership.get(member.node_id) == member:
            return MembershipChange(changed=False)
        started = mono_ms()
        await raft.start_learner(member)
        added = False
        try:
            match = await _caught_up(node, member.node_id, catch_up_timeout_s)
            await raft.propose_change(ADD, member, timeout_s=node.config.commit_timeout_ms / 1000)
            added = True
        finally:
            if not added:
                await raft.stop_learner(member.node_id)
    log.info("member %s added after %d ms of catching up (match index %d)",
             member.node_id, mono_ms() - started, match)
    return MembershipChange(changed=True, match_index=match, catch_up_ms=mono_ms() - started)


def _check_addable(members: tuple[Member, ...], member: Member) -> None:
    for m in members:
        if m.node_id == member.node_id and m != member:
            raise OperationError(
                f"node_id: {m.node_id} is a member at {m.raft_addr} (Raft) and {m.grpc_addr} "
                f"(gRPC): remove it first to add it with other addresses")
        if m.node_id != member.node_id and member.raft_addr == m.raft_addr:
            raise OperationError(f"raft_address: {m.raft_addr} is {m.node_id}'s")
        if m.node_id != member.node_id and member.grpc_addr == m.grpc_addr:
            raise OperationError(f"grpc_address: {m.grpc_addr} is {m.node_id}'s")


async def _caught_up(node, node_id: str, timeout_s: float) -> int:
    raft = node.raft
    lag = node.config.membership_catch_up_lag_entries
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        match, commit = raft.learner_match(node_id), raft.commit_index()
        if match >= max(1, commit - lag):
            return match
        if not raft.is_leader():
            raise LeadershipLost("this node stopped leading while the new node caught up")
        if loop.time() > deadline:
            raise OperationError(
                f"catch_up_timeout_ms: {node_id} did not catch up within {timeout_s:.0f}s "
                f"(match index {max(match, 0)} of {commit}); is it running with --join, the "
                f"members list and a certificate of the cluster CA naming it?")
        await asyncio.sleep(0.05)


async def remove_node(node, node_id: str) -> MembershipChange:
    """Remove a member; the caller checked that this node leads and is not `node_id`."""
    raft = node.raft
    async with raft.change_lock:
        member = raft.membership.get(node_id)
        if member is None:
            return MembershipChange(changed=False)
        if len(raft.membership.members()) == 1:
            raise OperationError(f"node_id: {node_id} is the only member")
        await raft.propose_change(REMOVE, member, timeout_s=node.config.commit_timeout_ms / 1000)
        told = await raft.remove_learner_after(node_id, raft.commit_index(),
                                               timeout_s=REMOVED_GRACE_S)
    log.info("member %s removed (%s)", node_id,
             "it has the entry" if told else "it did not get the entry: stop it")
    return MembershipChange(changed=True)


@dataclass
class BackupInfo:
    path: str
    raft_index: int
    raft_term: int
    jobs: int
    runs: int
    size_bytes: int
    sha256: str
    state_digest: str


async def create_backup(node, path: str) -> BackupInfo:
    """Write a consistent backup of the replicated state to `path` (on this node's disk)."""
    await node.proposer.propose(Barrier())
    return await asyncio.to_thread(_write_backup, node, path)


def _write_backup(node, path: str) -> BackupInfo:
    started = mono_ms()
    with node.replica.lock:  # the tick thread cannot apply meanwhile: one consistent state
        index = node.raft.applied_index()
        term = node.raft.term()
        raft_data = ((NO_OP, index, term), (NO_OP, index - 1, term), ())
        figures = node.replica.write_snapshot(path, raft_data)
        state_digest = digest(node.replica.state)
    sha = file_sha256(path)
    log.info("backup at index %d term %d: %d jobs, %d runs, %d bytes in %d ms (sha256 %s)",
             index, term, figures["jobs"], figures["runs"], figures["bytes"],
             mono_ms() - started, sha)
    return BackupInfo(path, index, term, figures["jobs"], figures["runs"],
                      os.path.getsize(path), sha, state_digest)


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


# -- restore (gnomon-node restore FILE --data-dir DIR): runs with no node ---------------------


def restore(file: str, data_dir: str, *, sha256: str = "") -> dict:
    """Make `data_dir` (absent or empty) start from the backup `file`: the snapshot file and a
    journal that continues it (its two entries, the term, the commit index). Run it for every
    node of the new cluster, from the same file; then start the nodes. Returns figures."""
    from gnomon.node.raft import journal
    from gnomon.node.replica import Replica
    from gnomon.node.storage.snapshot_file import SnapshotError

    if sha256 and file_sha256(file) != sha256.lower():
        raise OperationError(f"{file}: SHA-256 is {file_sha256(file)}, not {sha256}")
    if os.path.isdir(data_dir) and os.listdir(data_dir):
        raise OperationError(f"{data_dir}: not empty; restore only into a new data directory")
    # Only reads (read_snapshot never touches the history store): no history store.
    replica = Replica(cast("HistorySink", None), crash=_refuse)
    try:
        loaded = replica.read_snapshot(file)  # verifies the trailer and decodes every table
    except SnapshotError as exc:
        raise OperationError(f"{file}: not a readable gnomon backup: {exc}") from exc
    last, before = loaded.raft_data[0], loaded.raft_data[1]
    os.makedirs(data_dir, exist_ok=True)
    target = os.path.join(data_dir, "snapshot.lmdb")
    tmp = target + ".restore.tmp"
    shutil.copyfile(file, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, target)
    j = journal.DurableJournal(os.path.join(data_dir, "raft.journal"))
    try:
        j.reset([tuple(before), tuple(last)])
        j.setCurrentTerm(int(last[2]), None)
        j.setRaftCommitIndex(int(last[1]))
    finally:
        j.close()
    journal.fsync_dir(data_dir)
    return {"raft_index": int(last[1]), "raft_term": int(last[2]),
            "jobs": len(loaded.state.jobs), "runs": len(loaded.state.runs),
            "state_digest": digest(loaded.state), "sha256": file_sha256(target)}


def _refuse(reason: str) -> None:
    raise OperationError(reason)


def restore_main(argv: list[str]) -> int:
    """`gnomon-node restore FILE --data-dir DIR [--sha256 HEX]`."""
    import argparse
    import json
    import sys

    p = argparse.ArgumentParser(
        prog="gnomon-node restore",
        description="Prepare a new, empty data directory from a backup made with "
        "`gnomon backup create FILE`. Run it for each node of the new cluster with the same "
        "FILE, then start the nodes with their usual flags.")
    p.add_argument("file", metavar="FILE", help="the backup file")
    p.add_argument("--data-dir", required=True, help="the node's data directory (new or empty)")
    p.add_argument("--sha256", default="", help="refuse unless the file has this SHA-256 "
                   "(as `gnomon backup create` printed it; default: not checked)")
    args = p.parse_args(argv)
    started = time.monotonic()
    try:
        out = restore(args.file, args.data_dir, sha256=args.sha256)
    except (OperationError, OSError) as exc:
        print(f"gnomon-node restore: {exc}", file=sys.stderr)
        return 1
    out["seconds"] = round(time.monotonic() - started, 3)
    print(json.dumps(out))
    return 0
