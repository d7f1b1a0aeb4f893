"""pysyncobj adapter: one replicated method, proposal batching, leadership events.

Thread rules: pysyncobj's tick thread runs `_apply` (on every node, also on journal replay)
and every callback; the asyncio loop thread proposes. Results cross over with
`loop.call_soon_threadsafe`; nothing on the tick thread blocks on the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.config import SERIALIZER_STATE  # noqa: F401 - re-exported for tests
from pysyncobj.node import TCPNode

from gnomon.node.config import Config, Member
from gnomon.node.core.errors import Code
from gnomon.node.process import crash_process
from gnomon.node.raft import entries, journal, prevote
from gnomon.node.raft import startup as storage
from gnomon.node.raft.errors import LeadershipLost, NotCommitted
from gnomon.node.raft.membership import (
    ADD,
    MEMBERSHIP_COMMAND,
    REMOVE,
    Membership,
    decode_change,
    encode_change,
    from_records,
    to_records,
)
from gnomon.node.raft.prevote import PreVote
from gnomon.node.raft.snapshotter import ForkSnapshotter
from gnomon.node.raft.startup import StorageError
from gnomon.node.raft.transport import TlsTransport, TransportLimits, TransportSettings
from gnomon.node.replica import LoadedSnapshot
from gnomon.node.security.reload import PeerCertificate
from gnomon.node.storage.history import HistoryError
from gnomon.node.storage.snapshot_file import SnapshotError

log = logging.getLogger(__name__)

# Tick gaps counted (seconds): above the tick period (0.05 s) with work, up to an election
# timeout and beyond.
TICK_GAP_BOUNDS_S = (0.1, 0.25, 0.5, 1.0)
SLOW_TICK_LOG_EVERY_S = 5.0

# pysyncobj's _RAFT_STATE values, as passed to onStateChanged.
ROLE_NAMES = {0: "follower", 1: "candidate", 2: "leader"}
LEADER = 2


class ApplyHost(Protocol):
    """What the Raft adapter needs from the replica (rqlite style: the consumer's interface)."""

    def apply_entry(self, data: bytes, index: int = 0) -> list: ...  # pragma: no cover
    def write_snapshot(self, tmp_path: str, raft_data: tuple) -> dict: ...  # pragma: no cover
    def read_snapshot(self, path: str) -> LoadedSnapshot: ...  # pragma: no cover
    def install(self, loaded: LoadedSnapshot) -> None: ...  # pragma: no cover
    def restored(self, loaded: LoadedSnapshot | None) -> None: ...  # pragma: no cover
    def history_mark(self) -> int: ...  # pragma: no cover
    def history_written(self, mark: int) -> bool: ...  # pragma: no cover
    def history_incomplete(self, needs_index: int) -> None: ...  # pragma: no cover


class _StateMachine(SyncObj):
    _SyncObj__raftCommitIndex: int  # pysyncobj's (SyncObj.__init__ sets it); assigned below
    _SyncObj__raftElectionDeadline: float  # pysyncobj's; the pre-vote and load paths move it

    def __init__(self, self_addr: str, others: list[str], conf: SyncObjConf, host: ApplyHost,
                 snapshots: ForkSnapshotter, loaded: LoadedSnapshot | None,
                 crash: Callable[[str], None], transport_class: Callable,
                 membership: Membership, joining: bool, pre_vote: bool = True,
                 apply_budget_ms: int = 50):
        # Set before super().__init__(): excluded from pysyncobj's own bookkeeping.
        self._host = host
        self._snapshots = snapshots
        self._loaded_at_start = loaded
        self._crash = crash
        self._storage_started = False
        self._membership = membership
        # A new node waits to be added (it must not stand for election before: its term
        # would depose the leader once it is a member); a removed one stays out.
        membership.joining = joining
        self._removed = False
        self._learners: dict[str, TCPNode] = {}  # leader only: node id -> node catching up
        self._tick_calls: deque[Callable[[], None]] = deque()  # run on the tick thread
        # Answers pre-votes always; asks for them before standing only when `pre_vote` is on.
        self._pre_vote = PreVote(conf.raftMinTimeout)
        self._pre_vote_asks = pre_vote
        # Gaps between tick starts longer than each bound (TICK_GAP_BOUNDS_S): a leader whose
        # tick stops for an election timeout loses its term (its heartbeats stop too).
        self.tick_gaps = [0] * len(TICK_GAP_BOUNDS_S)
        self.longest_tick_gap_s = 0.0
        self._last_tick_start = 0.0
        self._tick_apply_s = 0.0  # this tick's time in _apply, and its entries
        self._tick_applied = 0
        self._slow_ticks_logged_at = 0.0
        self._apply_budget_s = apply_budget_ms / 1000
        self._apply_backlog = False
        entries.restrict_pysyncobj_unpickling()
        super().__init__(self_addr, others, conf, transportClass=transport_class)
        raft_log = self._SyncObj__raftLog
        if isinstance(raft_log, journal.DurableJournal):
            self._SyncObj__transport.durable = raft_log

    # The only replicated method: pysyncobj numbers them by sorted name, so a second one would
    # misroute old log entries. Its argument is a serialized gnomon.v1.CommandBatch.
    @replicated
    def _apply(self, batch: bytes) -> list:
        # pysyncobj counts an entry applied only after this returns: the index of the entry
        # being applied is one past it.
        started = time.perf_counter()
        try:
            return self._host.apply_entry(batch, self._SyncObj__raftLastApplied + 1)
        finally:
            self._tick_apply_s += time.perf_counter() - started
            self._tick_applied += 1

    def _checkCommandsToApply(self):  # noqa: N802 - pysyncobj's name
        # pysyncobj forwards a follower's proposals to the leader. A deposed leader's proposals
        # must never commit (ARCHITECTURE section 4), so a non-leader fails them instead. This
        # runs on the tick thread, the only writer of the raft state: the check cannot race.
        if self._SyncObj__raftState != LEADER:
            queue = self._SyncObj__commandsQueue
            while True:
                try:
                    _command, callback = queue.get_nowait()
                except Exception:  # noqa: BLE001 - pysyncobj's Queue.Empty
                    break
                if callback is not None and not isinstance(callback, tuple):
                    callback(None, FAIL_REASON.NOT_LEADER)
            return
        # Group commit: the entries appended here share one fsync, and the appends that
        # carry them leave only after it (node/raft/DESIGN.md).
        transport = self._SyncObj__transport
        transport.hold()
        try:
            super()._checkCommandsToApply()
        finally:
            transport.release()

    def _SyncObj__onMessageReceived(self, node, message):  # noqa: N802 - overrides pysyncobj's
        # pysyncobj sets a follower's nextIndex from every successful append reply. With
        # several appends in flight, the reply to an older one moves nextIndex back, and the
        # leader sends again what the follower holds already: the follower truncates and
        # rewrites (one fsync per entry) the same suffix over and over ("truncating
        # already-applied log entries"), falls behind, and a failover waits for it to catch
        # up. On success nextIndex only moves forward here; a real gap still moves it back,
        # since the follower answers that with reset=True (Raft's consistency check is what
        # keeps the logs equal, nextIndex is only where the leader starts sending).
        kind = message.get("type")
        if kind in (prevote.REQUEST, prevote.RESPONSE):
            self._on_pre_vote_message(node, message)
            return
        if kind == "append_entries" and message["term"] >= self._getTerm():
            self._pre_vote.heard_leader(time.monotonic())
        if (self._SyncObj__raftState == LEADER and kind == "next_node_idx"
                and message.get("success") and not message.get("reset")):
            next_index = self._SyncObj__raftNextIndex
            sent_up_to = next_index.get(node)
            super()._SyncObj__onMessageReceived(node, message)
            if sent_up_to is not None and next_index.get(node, 0) < sent_up_to:
                next_index[node] = sent_up_to
            return
        super()._SyncObj__onMessageReceived(node, message)
        if kind == "timeout_now" and self._SyncObj__raftElectionDeadline == 0:
            # The leader hands over (TimeoutNow): stand at once, no pre-vote (the others
            # still hear the leader and would refuse it).
            self._pre_vote.skip(self._getTerm())

    def _log_slow_tick(self, took_s: float) -> None:
        if took_s < TICK_GAP_BOUNDS_S[1]:
            return
        now = time.monotonic()
        if now - self._slow_ticks_logged_at < SLOW_TICK_LOG_EVERY_S:
            return
        self._slow_ticks_logged_at = now
        log.warning("a Raft tick took %.3f s (applying %d entries: %.3f s); no heartbeat is "
                    "sent meanwhile (gnomon_raft_tick_gaps_total)", took_s, self._tick_applied,
                    self._tick_apply_s)

    def _count_tick_gap(self, start: float) -> None:
        gap = start - self._last_tick_start if self._last_tick_start else 0.0
        self._last_tick_start = start
        if gap >= self._pre_vote.min_timeout_s:
            self._pre_vote.stalled(start)
        if gap > TICK_GAP_BOUNDS_S[0]:
            self.longest_tick_gap_s = max(self.longest_tick_gap_s, gap)
            for i, bound in enumerate(TICK_GAP_BOUNDS_S):
                if gap > bound:
                    self.tick_gaps[i] += 1

    def _SyncObj__applyLogEntries(self):  # noqa: N802 - overrides pysyncobj's
        # pysyncobj applies every committed entry in one tick. An entry holds up to
        # max_batch_commands commands (tens of ms to apply), and a node behind by a few spent
        # 0.3-0.4 s in one tick under load, sending no heartbeat and reading nothing: long
        # enough for an election timeout. Here one entry at a time, until raft_apply_budget_ms
        # is spent; the rest is applied by the next tick, which then does not wait in poll.
        commit = self._SyncObj__raftCommitIndex
        deadline = time.monotonic() + self._apply_budget_s
        need_send = False
        try:
            while self._SyncObj__raftLastApplied < commit:
                before = self._SyncObj__raftLastApplied
                self._SyncObj__raftCommitIndex = before + 1
                need_send = SyncObj._SyncObj__applyLogEntries(self) or need_send
                if self._SyncObj__raftLastApplied == before or time.monotonic() >= deadline:
                    break
        finally:
            self._SyncObj__raftCommitIndex = commit
        self._apply_backlog = self._SyncObj__raftLastApplied < commit
        return need_send

    # -- PreVote (node/raft/prevote.py, node/raft/DESIGN.md) -------------------------------

    def _pre_vote_step(self) -> None:
        """Before pysyncobj's election check: an expired election timer starts a pre-vote
        round instead of an election; a round that won lets pysyncobj stand."""
        if not self._pre_vote_asks or self._SyncObj__raftState == LEADER:
            return
        now = time.monotonic()
        if self._SyncObj__raftElectionDeadline >= now or not self.otherNodes:
            return
        if self._pre_vote.take_win(self._getTerm()):
            return  # the deadline has passed: pysyncobj stands for election in this tick
        if not self._SyncObj__connectedNodes:
            return  # pysyncobj does not stand while it reaches nobody either
        message = self._pre_vote.start(self.selfNode.id, self._getTerm(),
                                       self._SyncObj__getCurrentLogIndex(),
                                       self._SyncObj__raftLog[-1][2])
        self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()
        transport = self._SyncObj__transport
        for other in sorted(self.otherNodes, key=lambda n: n.id):
            transport.send(other, message)

    def _on_pre_vote_message(self, node, message: dict) -> None:
        if message["type"] == prevote.REQUEST:
            now = time.monotonic()
            if now - self._last_tick_start >= self._pre_vote.min_timeout_s:
                self._pre_vote.stalled(now)  # this very tick has run that long
            self._SyncObj__transport.send(node, self._pre_vote.answer(
                message, now=now, leading=self._SyncObj__raftState == LEADER,
                current_term=self._getTerm(),
                last_log_index=self._SyncObj__getCurrentLogIndex(),
                last_log_term=self._SyncObj__raftLog[-1][2]))
        elif self._pre_vote.on_response(node.id, message, len(self.otherNodes) + 1,
                                        self._getTerm()):
            self._SyncObj__raftElectionDeadline = 0.0  # stand on the next tick

    # -- storage: pysyncobj internals replaced (node/storage/DESIGN.md) ---------------------------

    def _onTick(self, timeToWait=0.0):  # noqa: N802, N803 - pysyncobj's names
        started = time.monotonic()
        self._count_tick_gap(started)
        if not self._storage_started:
            # First tick, on the tick thread, before pysyncobj touches the serializer or
            # applies anything: swap in the forking snapshotter (it is built in
            # SyncObj.__init__, after which the tick thread may already run) and take over
            # the snapshot load, which was done (verified, decoded) before the constructor.
            self._storage_started = True
            self._guarded("starting from the snapshot", self._start_storage)
        while self._tick_calls:
            self._tick_calls.popleft()()
        if self._membership.joining or self._removed:
            self._SyncObj__raftElectionDeadline = (
                time.monotonic() + self._SyncObj__generateRaftTimeout())
        self._pre_vote_step()
        if self._apply_backlog:
            timeToWait = 0.0  # noqa: N806 - committed entries wait: poll without blocking
        self._tick_apply_s, self._tick_applied = 0.0, 0
        super()._onTick(timeToWait)
        self._log_slow_tick(time.monotonic() - started)

    # -- membership (node/raft/DESIGN.md, Membership) ------------------------------------

    def _SyncObj__doChangeCluster(self, request, reverse=False):  # noqa: N802 - pysyncobj's
        # Called on append (leader and followers), on rollback (reverse) and on apply.
        change = decode_change(request)
        if change is None:
            log.error("ignoring a membership entry of pysyncobj's own shape: %r", request)
            return False
        kind, member = change
        adding = (kind == ADD) != reverse
        if member.node_id == self._membership.self_id:
            self._change_self(adding, member, rollback=reverse)
            return False
        transport = self._SyncObj__transport
        if adding:
            self._drop_learner(member.node_id, keep_link=True)
            transport.set_member(member.node_id, member.raft_addr)
            changed = SyncObj._SyncObj__doChangeCluster(self, [kind, member.raft_addr], reverse)
            if self._membership.get(member.node_id) != member:
                self._membership.add(member)
                log.info("member %s added (%s)", member.node_id, member.raft_addr)
            return changed
        changed = SyncObj._SyncObj__doChangeCluster(self, [kind, member.raft_addr], reverse)
        if changed and self._isLeader() and not reverse:
            # Keep sending to it, uncounted, so that it appends its own removal and stops
            # standing for election; RaftNode.remove_learner_after drops it afterwards.
            self._start_learner(member)
        elif member.node_id not in self._learners:  # (apply calls this again after append)
            transport.drop_member(member.node_id)
        if self._membership.get(member.node_id) is not None:
            self._membership.remove(member.node_id)
            log.info("member %s removed (%s)", member.node_id, member.raft_addr)
        return changed

    def _change_self(self, adding: bool, member: Member, *, rollback: bool) -> None:
        # pysyncobj rolls back and re-applies the changes of entries a follower receives
        # again (an overlapping append): only a removal that is no rollback is news.
        if adding:
            if self._membership.joining:
                log.info("this node is a member now: it may stand for election")
            self._membership.joining = False
            self._removed = False
            if self._membership.get(member.node_id) != member:
                self._membership.add(member)
            else:
                self._membership.save()
        elif not self._isLeader():
            if not self._removed and not rollback:
                log.warning("this node was removed from the cluster: it no longer stands for "
                            "election; stop it (it refuses to start again with this data "
                            "directory)")
            self._removed = True
            self._membership.remove(member.node_id)

    def _install_members(self, loaded: LoadedSnapshot) -> None:
        # A received snapshot carries the configuration at its index (node/raft/membership.py).
        members = from_records(loaded.raft_data[2]) if len(loaded.raft_data) > 2 else None
        if members is None or to_records(members) == to_records(self._membership.members()):
            return
        transport = self._SyncObj__transport
        for m in self._membership.members():
            if m.node_id not in {x.node_id for x in members}:
                transport.drop_member(m.node_id)
        for m in members:
            transport.set_member(m.node_id, m.raft_addr)
        others = [m.raft_addr for m in members if m.node_id != self._membership.self_id]
        self._SyncObj__updateClusterConfiguration(others)
        if any(m.node_id == self._membership.self_id for m in members):
            self._membership.joining = False
        self._membership.replace(members)
        log.info("members from the leader's snapshot: %s",
                 ", ".join(m.node_id for m in members))

    def _start_learner(self, member: Member) -> None:
        """Leader: replicate to `member` without counting it (pysyncobj's read-only nodes)."""
        if not self._isLeader():
            raise LeadershipLost("this node no longer leads: ask the leader")
        node = TCPNode(member.raft_addr)
        transport = self._SyncObj__transport
        transport.set_member(member.node_id, member.raft_addr)
        transport.addNode(node)
        self._SyncObj__readonlyNodes.add(node)
        self._SyncObj__raftNextIndex[node] = self._SyncObj__getCurrentLogIndex() + 1
        self._SyncObj__raftMatchIndex[node] = 0
        self._learners[member.node_id] = node

    def _drop_learner(self, node_id: str, *, keep_link: bool = False) -> None:
        node = self._learners.pop(node_id, None)
        if node is None:
            return
        self._SyncObj__readonlyNodes.discard(node)
        if not keep_link:
            self._SyncObj__raftNextIndex.pop(node, None)
            self._SyncObj__raftMatchIndex.pop(node, None)
            self._SyncObj__transport.dropNode(node)
            self._SyncObj__transport.drop_member(node_id)

    def _learner_connected(self, node_id: str) -> bool:
        node = self._learners.get(node_id)
        return node is not None and node in self._SyncObj__connectedNodes

    def _learner_match(self, node_id: str) -> int:
        node = self._learners.get(node_id)
        return -1 if node is None else int(self._SyncObj__raftMatchIndex.get(node, 0))

    def _propose_change(self, kind: str, member: Member, callback) -> None:
        self._applyCommand(encode_change(kind, member), callback, MEMBERSHIP_COMMAND)

    def _start_storage(self) -> None:
        self._SyncObj__serializer = self._snapshots
        self._SyncObj__needLoadDumpFile = False
        loaded, self._loaded_at_start = self._loaded_at_start, None
        if loaded is not None:
            self._after_load(loaded)  # the journal was aligned when it was opened

    def _SyncObj__loadDumpFile(self, clearJournal):  # noqa: N802, N803 - overrides pysyncobj's
        # pysyncobj's version swallows every error (bare except) and serves an empty state,
        # and clears the journal whenever its first entries differ from the snapshot's. Only a
        # snapshot received from the leader arrives here; it was verified and decoded already.
        self._guarded("installing the snapshot sent by the leader",
                      lambda: self._install_received(clearJournal))

    def _install_received(self, clear_journal: bool) -> None:
        loaded = self._snapshots.take_received()
        if loaded is None:
            raise RuntimeError("pysyncobj asked to load a snapshot that was not received")
        self._host.install(loaded)
        self._install_members(loaded)
        if clear_journal:
            # Raft's rule for an installed snapshot: the follower's log is replaced (the
            # leader then counts this node's match index from the snapshot's last entry).
            self._SyncObj__raftLog.reset([loaded.raft_data[1], loaded.raft_data[0]])
        self._after_load(loaded)

    def _after_load(self, loaded: LoadedSnapshot) -> None:
        self._SyncObj__raftLastApplied = loaded.index
        last: int = self._SyncObj__raftLog[-1][1]
        if self._SyncObj__raftCommitIndex > last:
            self._SyncObj__raftCommitIndex = last
            self._SyncObj__raftLog.setRaftCommitIndex(last)
        self._SyncObj__onSetCodeVersion(0)
        # A long load kept this tick thread off the network. pysyncobj checks the election
        # deadline before it reads the leader's queued heartbeats and has no PreVote: an expired
        # deadline would start an election at once and depose a healthy leader.
        self._SyncObj__raftElectionDeadline = (
            time.monotonic() + self._SyncObj__generateRaftTimeout())

    def _guarded(self, what: str, action: Callable[[], None]) -> None:
        try:
            action()
        except BaseException as exc:
            # pysyncobj would log and retry on the next tick, with half a state: stop instead.
            self._crash(f"{what} failed: {exc!r}")
            raise


def build_conf(config: Config, on_role: Callable[[int, int], None]) -> SyncObjConf:
    """pysyncobj's configuration for this node (snapshots: see `_StateMachine._onTick`)."""
    data = config.data_dir
    os.makedirs(data, exist_ok=True)
    host_part = config.self_member.raft_addr.rsplit(":", 1)[0]
    return SyncObjConf(
        bindAddress=config.self_member.raft_addr if host_part else None,
        appendEntriesUseBatch=False,
        # Larger than any entry: pysyncobj never splits one (node/raft/DESIGN.md).
        appendEntriesBatchSizeBytes=config.raft_append_batch_bytes,
        appendEntriesPeriod=config.append_entries_period_s,
        raftMinTimeout=config.raft_min_timeout_s,
        raftMaxTimeout=config.raft_max_timeout_s,
        leaderFallbackTimeout=config.leader_fallback_timeout_s,
        # Re-dial fast: halves failover (DEPENDENCY-NOTES); the transport pings idle links.
        connectionRetryTime=config.raft_connect_retry_ms / 1000,
        journalFile=journal_path(config),
        fullDumpFile=snapshot_path(config),
        # Never called: the forking snapshotter replaces pysyncobj's serializer on the first
        # tick. Set so that pysyncobj does not pickle its own state as the snapshot data.
        serializer=_unused_hook,
        deserializer=_unused_hook,
        logCompactionMinEntries=config.snapshot_min_entries,
        logCompactionMinTime=config.snapshot_min_time_s,
        logCompactionBatchSize=config.snapshot_send_chunk_bytes,
        onStateChanged=on_role,
        # Membership entries are gnomon's own (node/raft/membership.py, node/raft/DESIGN.md, Membership).
        dynamicMembershipChange=True,
        commandsWaitLeader=False,
        useFork=False,
    )


def build_transport(config: Config, tls: PeerCertificate):
    """pysyncobj's `transportClass`: the mutual-TLS transport with this node's settings and
    certificate (reloaded when its files change)."""
    host_part = config.self_member.raft_addr.rsplit(":", 1)[0]
    limits = TransportLimits(
        max_frame_bytes=config.raft_max_frame_bytes,
        handshake_timeout_s=config.raft_handshake_timeout_ms / 1000,
        unauthenticated_idle_s=config.raft_unauthenticated_idle_ms / 1000,
        listen_backlog=config.raft_listen_backlog,
        max_unauthenticated=config.raft_max_unauthenticated,
        peer_timeout_s=config.raft_peer_timeout_ms / 1000,
        max_send_buffer_bytes=config.raft_max_send_buffer_bytes,
        send_backlog_bytes=config.raft_send_backlog_bytes,
        connect_retry_s=config.raft_connect_retry_ms / 1000)
    settings = TransportSettings(
        tls=tls, node_id=config.node_id,
        members={m.node_id: m.raft_addr for m in config.members},
        bind_host=host_part, limits=limits)
    return functools.partial(TlsTransport, settings=settings)


def journal_path(config: Config) -> str:
    return os.path.join(config.data_dir, "raft.journal")


def snapshot_path(config: Config) -> str:
    return os.path.join(config.data_dir, "snapshot.lmdb")


def _unused_hook(*_args):  # pragma: no cover - see build_conf
    raise RuntimeError("pysyncobj's own serializer must not run (snapshotter not installed)")


class RaftNode:
    """The Raft side of a node: start it on the main thread (pysyncobj's tick thread dies with
    the thread that constructed it).

    Opens the storage first: the snapshot is verified and decoded, the journal aligned to it;
    a file that cannot be read, or a snapshot and journal that do not fit together, stop the
    process with EXIT_STORAGE and a message naming the file (node/raft/startup.py).
    """

    def __init__(self, config: Config, host: ApplyHost, on_role: Callable[[int, int], None],
                 *, crash: Callable[[str], None] = crash_process):
        self.config = config
        self._host = host
        self._crash = crash
        self.snapshots = ForkSnapshotter(
            snapshot_path(config), host, crash=crash,
            chunk_bytes=config.snapshot_send_chunk_bytes,
            child_timeout_s=config.snapshot_child_timeout_s,
            retry_s=config.snapshot_retry_s)
        # config.members is the configuration of this node's log (cli.py read members.json).
        self.membership = Membership(config.data_dir, config.node_id, config.members)
        self.snapshots.member_records = lambda: to_records(self.membership.members())
        joining = config.join and not os.path.exists(self.membership.path)
        if joining:
            log.info("joining: waiting to be added as a member (gnomon cluster add-node %s)",
                     config.node_id)
        try:
            self._sync = self._open(config, host, on_role, joining)
        except (StorageError, SnapshotError, journal.JournalError, HistoryError) as exc:
            storage.refuse_to_start(config.data_dir, exc)
        if not joining:
            self.membership.save()
        # One membership change at a time (loop thread; pysyncobj refuses overlaps too).
        self.change_lock = asyncio.Lock()
        # Test-only jepsen canary "fire-on-isleader": act on pysyncobj's belief.
        self.canary_apply_before_commit = False

    def _open(self, config: Config, host: ApplyHost,
              on_role: Callable[[int, int], None], joining: bool) -> _StateMachine:
        snap_path = snapshot_path(config)
        conf = build_conf(config, on_role)
        # cli.py checked the files before the start; one that does not fit stops it here.
        self.peer_tls = PeerCertificate(config.raft_tls_cert, config.raft_tls_key,
                                        config.raft_tls_ca, config.node_id)
        transport = build_transport(config, self.peer_tls)
        storage.check_files(snap_path, journal_path(config))
        loaded = host.read_snapshot(snap_path) if os.path.exists(snap_path) else None
        # The file in place: a later one (a child's, the leader's) is installed only if newer.
        self.snapshots.installed_index = loaded.index if loaded is not None else 0
        host.restored(loaded)
        last, before = (loaded.raft_data[0], loaded.raft_data[1]) if loaded else (None, None)
        journal.patch_pysyncobj(prepare=functools.partial(
            storage.align_journal, last=last, before=before, snapshot_path=snap_path))
        return _StateMachine(config.self_member.raft_addr, [m.raft_addr for m in config.peers],
                             conf, host, self.snapshots, loaded, self._crash, transport,
                             self.membership, joining, pre_vote=config.raft_pre_vote,
                             apply_budget_ms=config.raft_apply_budget_ms)

    # -- proposing ------------------------------------------------------------------------

    def submit(self, data: bytes, callback: Callable[[object, int], None]) -> None:
        """Append one entry (thread-safe); callback(result, fail_reason) runs on the tick thread."""
        if self.canary_apply_before_commit and self._sync._isLeader():
            # The canary breaks ARCHITECTURE section 1.1 on purpose: apply before commit.
            callback(self._host.apply_entry(data), FAIL_REASON.SUCCESS)
        self._sync._apply(data, callback=self._guard_callback(callback))

    def _guard_callback(self, callback: Callable[[object, int], None]):
        crash = self._crash

        def guarded(result: object, reason: int) -> None:
            # pysyncobj runs commit callbacks inside its apply loop: one that raises makes it
            # apply the entry again on the next tick.
            try:
                callback(result, reason)
            except BaseException as exc:
                crash(f"a commit callback failed after apply: {exc!r}")
                raise

        return guarded

    # -- leadership and status (racy reads of pysyncobj fields: advisory only) -------------

    def is_leader(self) -> bool:
        return self._sync._isLeader()

    def leader(self):
        node = self._sync._getLeader()
        return self.membership.by_raft(node.id) if node is not None else None

    def term(self) -> int:
        return self._sync._getTerm()

    def status(self) -> dict:
        try:
            return self._sync.getStatus()
        except RuntimeError:  # a dict changed size under us on the tick thread: retry once
            return self._sync.getStatus()

    def journal_counts(self) -> tuple[int, int]:
        """(entries appended to the journal, fsyncs of the journal file) since the start;
        (0, 0) without a durable journal."""
        raft_log = self._sync._SyncObj__raftLog
        if not isinstance(raft_log, journal.DurableJournal):
            return 0, 0
        return raft_log.entries_added, raft_log.fsyncs

    def pre_vote_rounds(self) -> int:
        """Pre-vote rounds this node started (racy read of a counter)."""
        return self._sync._pre_vote.rounds

    def tick_gaps(self) -> tuple[dict[float, int], float]:
        """(gaps between tick starts longer than each of TICK_GAP_BOUNDS_S: count, the
        longest gap in seconds) since the start (racy reads of counters)."""
        sm = self._sync
        return dict(zip(TICK_GAP_BOUNDS_S, sm.tick_gaps, strict=True)), sm.longest_tick_gap_s

    def applied_index(self) -> int:
        """The last entry applied here (racy read of a monotonic counter)."""
        return int(self._sync._SyncObj__raftLastApplied)

    def transfer_leadership(self) -> None:
        try:
            self._sync.transferLeadership()
        except Exception:  # noqa: BLE001 - best effort on shutdown
            log.exception("leadership transfer failed")

    def request_transfer(self, raft_addr: str | None) -> bool:
        """Send pysyncobj's TimeoutNow to `raft_addr` (None: the most caught-up connected
        follower). True when it was sent; refused (False) when this node does not lead or the
        target's log does not end at this leader's last entry. Sent is not done: the caller
        waits for another leader (node/ops/operations.py)."""
        reasons: list[int] = []
        self._sync.transferLeadership(raft_addr, callback=lambda _r, err: reasons.append(err))
        return reasons == [FAIL_REASON.SUCCESS]

    # -- membership (loop thread; pysyncobj's fields are touched on the tick thread) --------

    def commit_index(self) -> int:
        return int(self._sync._SyncObj__raftCommitIndex)

    def learner_match(self, node_id: str) -> int:
        """The learner's match index as the leader knows it (-1: not a learner here)."""
        return self._sync._learner_match(node_id)

    async def start_learner(self, member: Member) -> None:
        await self._on_tick_thread(lambda: self._sync._start_learner(member))

    async def stop_learner(self, node_id: str) -> None:
        await self._on_tick_thread(lambda: self._sync._drop_learner(node_id))

    async def remove_learner_after(self, node_id: str, index: int, timeout_s: float) -> bool:
        """Drop a removed member once it has the entries up to `index` (its removal), or
        after `timeout_s`; True when it had them."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        # Its link was re-dialled when it left the configuration; a node that is down does
        # not come back within a second and is not waited for.
        dial_until = loop.time() + min(timeout_s, 1.0)
        while 0 <= self.learner_match(node_id) < index and loop.time() < deadline:
            if not self._sync._learner_connected(node_id) and loop.time() > dial_until:
                break
            await asyncio.sleep(0.05)
        seen = self.learner_match(node_id) >= index
        await self.stop_learner(node_id)
        return seen

    async def propose_change(self, kind: str, member: Member, timeout_s: float) -> None:
        """Append one membership entry and wait for its commit (NotCommitted otherwise)."""
        if kind not in (ADD, REMOVE):
            raise ValueError(kind)
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()

        def callback(_result, reason):  # tick thread
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result(reason))

        self._sync._tick_calls.append(lambda: self._sync._propose_change(kind, member, callback))
        try:
            async with asyncio.timeout(timeout_s):
                reason = await done
        except TimeoutError:
            raise NotCommitted(f"the membership entry did not commit within {timeout_s:.0f}s "
                               f"(the outcome is unknown: see gnomon cluster status)") from None
        if reason == FAIL_REASON.REQUEST_DENIED:
            raise NotCommitted("refused by Raft: another membership change has not committed "
                               "yet, or this leader's first entry has not; retry")
        if reason != FAIL_REASON.SUCCESS:
            raise NotCommitted(f"the membership entry did not commit (reason {reason})")

    async def _on_tick_thread(self, fn: Callable[[], object]) -> object:
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                fut.set_exception(exc)

        self._sync._tick_calls.append(run)
        return await asyncio.wrap_future(fut)

    def destroy(self) -> None:
        # A snapshot child dies with the tick thread (PR_SET_PDEATHSIG); its file is removed
        # at the next start.
        self._sync.destroy()


__all__ = ["Code", "LEADER", "RaftNode", "ROLE_NAMES"]
