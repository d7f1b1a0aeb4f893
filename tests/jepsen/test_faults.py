"""The second fault tier without a cluster: file damage, the creation watch, expected exits,
and the checkers of misfire policies, fault evidence and replicated limits."""

from __future__ import annotations

import dataclasses
import json
import random
import struct
import subprocess
import sys
import threading
import zlib
from collections import Counter
from pathlib import Path

import pytest

from gnomon.jepsen import disk, drift
from gnomon.jepsen.checkers import faults, misfire
from gnomon.jepsen.db import DB
from gnomon.jepsen.fault import names_file
from gnomon.jepsen.history import History
from gnomon.jepsen.net import Host, Net
from gnomon.node.core.model import MisfirePolicy, Schedule

SEC = 1000
T0 = 1_700_000_000_000


def journal_file(tmp_path, records: int):
    body = b"GNJRNL\0\1"
    for i in range(records):
        payload = b"E" + struct.pack("<QQ", i + 1, 1) + b"cmd%d" % i
        body += struct.pack("<II", len(payload), zlib.crc32(payload)) + payload
    path = tmp_path / disk.JOURNAL
    path.write_bytes(body)
    return path


# -- file damage -------------------------------------------------------------------------------


def test_record_flip_hits_a_record_that_valid_records_follow(tmp_path):
    path = journal_file(tmp_path, 5)
    before = path.read_bytes()
    done = disk.corrupt(path, "record-flip", random.Random(3))
    records = disk.journal_records(path)
    assert done["record"] < len(records) - 1
    start, length = records[done["record"]]
    assert start + 8 <= done["offset"] < start + length
    after = path.read_bytes()
    assert [i for i in range(len(before)) if before[i] != after[i]] == [done["offset"]]


def test_record_flip_needs_two_records(tmp_path):
    with pytest.raises(disk.DiskError):
        disk.corrupt(journal_file(tmp_path, 1), "record-flip", random.Random(1))


def test_truncate_keeps_the_journal_header_and_cuts_somewhere(tmp_path):
    path = journal_file(tmp_path, 5)
    size = path.stat().st_size
    done = disk.corrupt(path, "truncate", random.Random(7))
    assert 8 <= done["offset"] < size - 1 == done["size_before"] - 1
    assert path.stat().st_size == done["offset"]


def test_snapshot_version_rewrites_the_trailer(tmp_path):
    path = tmp_path / disk.SNAPSHOT
    path.write_bytes(b"x" * 100 + disk.TRAILER.pack(b"GNOMSNAP", 1, b"d" * 32))
    done = disk.corrupt(path, "version", random.Random(1))
    tag, version, digest = disk.TRAILER.unpack(path.read_bytes()[-disk.TRAILER.size:])
    assert (tag, version, digest) == (b"GNOMSNAP", 101, b"d" * 32) and done["version"] == 101


def test_meta_damage_is_never_valid_json(tmp_path):
    for mode in disk.MODES[disk.META]:
        for seed in range(20):
            path = tmp_path / disk.META
            path.write_text(json.dumps({"term": 12, "voted_for": None, "commit_index": 345}))
            disk.corrupt(path, mode, random.Random(seed))
            with pytest.raises(ValueError):
                json.loads(path.read_bytes())


def test_missing_file_is_a_disk_error(tmp_path):
    with pytest.raises(disk.DiskError):
        disk.corrupt(tmp_path / disk.SNAPSHOT, "flip", random.Random(1))


def test_names_file_is_exact():
    log = "x FATAL: cannot read /d/raft.journal.meta: bad json\n"
    assert names_file(log, disk.JOURNAL) is None
    assert names_file(log, disk.META) is not None


# -- the creation watch ------------------------------------------------------------------------


def test_create_watch_acts_on_the_first_matching_file(tmp_path):
    seen = threading.Event()
    names: list[str] = []
    watch = disk.CreateWatch(tmp_path, r"^snapshot.*tmp", lambda n: (names.append(n),
                                                                     seen.set()))
    try:
        (tmp_path / "raft.journal.meta.tmp").write_text("x")
        (tmp_path / "snapshot.lmdb.tmp").write_text("x")
        assert seen.wait(5)
    finally:
        watch.close()
    assert names == ["snapshot.lmdb.tmp"] and watch.hit is not None


# -- expected exits ----------------------------------------------------------------------------


def test_an_expected_exit_is_not_a_crash(tmp_path):
    db = DB(tmp_path, Net([Host("n1", "10.77.0.11"), Host("n2", "10.77.0.12")]), ["n1", "n2"])
    for node_id, code in (("n1", 70), ("n2", 3)):
        node = db.nodes[node_id]
        node.dir.mkdir(parents=True)
        node.proc = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])
        node.proc.wait()
    db.nodes["n1"].expect_exit = {"fault": "corrupt-snapshot"}
    db.note_exit("n1")
    db.nodes["n1"].expect_exit = None
    assert db.crashed() == ["n2 (exit 3, start 0)"]
    assert [e["expected"] for e in db.exits] == [{"fault": "corrupt-snapshot"}, None]


# -- misfire policies slot by slot ---------------------------------------------------------------


def job(policy: str, grace: int = 2 * SEC) -> dict:
    return {"name": "f", "tenant": "t", "schedule": Schedule("interval", interval_ms=SEC),
            "policy": policy, "grace_ms": grace}


def run(slot: int, state: str, created: int) -> list:
    return [f"j@{slot}", state, slot, "schedule", created, 0, []]


WINDOW = [misfire.Window("outage-stop", T0, T0 + 10 * SEC)]


def slot_check(policy: str, runs: list[list]) -> list[str]:
    stats: Counter = Counter()
    return [a["type"] for a in misfire.check_job("j", job(policy), runs, WINDOW, stats)]


def test_skip_must_skip_a_slot_the_outage_made_late():
    up = T0 + 10 * SEC
    assert slot_check(MisfirePolicy.SKIP, [run(T0 + 2 * SEC, "succeeded", up + 50)]) == [
        "late-slot-ran"]
    assert slot_check(MisfirePolicy.SKIP, [run(T0 + 2 * SEC, "skipped", up + 50)]) == []
    # Within the grace of the resume: may run.
    assert slot_check(MisfirePolicy.SKIP, [run(T0 + 9 * SEC, "succeeded", up + 50)]) == []


def test_run_latest_runs_only_the_latest_missed_slot():
    up = T0 + 10 * SEC
    ran_early = run(T0 + 3 * SEC, "succeeded", up + 50)
    assert slot_check(MisfirePolicy.RUN_LATEST, [ran_early]) == ["superseded-slot-ran"]
    # The slot right before the resume, late past its grace? 7 s: next slot is 8 s, due.
    assert slot_check(MisfirePolicy.RUN_LATEST, [run(T0 + 3 * SEC, "skipped", up + 50)]) == []
    # A skipped slot whose next slot was not due when the fire was decided.
    latest = run(up + 5 * SEC, "skipped", up + 5 * SEC + 10 * SEC)
    late_latest = run(up + 5 * SEC, "skipped", up + 5 * SEC + 500)
    assert slot_check(MisfirePolicy.RUN_LATEST, [latest]) == []
    assert slot_check(MisfirePolicy.RUN_LATEST, [late_latest]) == ["latest-slot-skipped"]


def test_windows_and_clock_timeline_from_the_history():
    h = History()
    h.append("nemesis", "ok", "start", {"kind": "outage-clock", "nodes": ["n1", "n2", "n3"],
                                        "down_wall_ms": T0, "offset_ms": 0})
    h.append("nemesis", "ok", "stop", {"kind": "outage-clock", "up_wall_ms": T0 + 5 * SEC,
                                       "offset_ms": 90 * SEC})
    h.append("nemesis", "ok", "start", {"kind": "kill-one", "nodes": ["n1"],
                                        "down_wall_ms": T0 + 9 * SEC, "offset_ms": 90 * SEC})
    h.append("nemesis", "ok", "stop", {"kind": "kill-one", "up_wall_ms": T0 + 12 * SEC,
                                       "offset_ms": 90 * SEC})
    events = h.snapshot()
    assert misfire.outage_windows(events, 3) == [
        misfire.Window("outage-clock", T0, T0 + 95 * SEC)]
    timeline = misfire.clock_timeline(events)
    assert timeline == [(0, 0), (T0 + 5 * SEC, 90 * SEC)]
    assert misfire.due_real_ms(T0 + 2 * SEC, timeline) == T0 + 2 * SEC
    # Jumped over: due when the clocks jumped.
    assert misfire.due_real_ms(T0 + 60 * SEC, timeline) == T0 + 5 * SEC
    assert misfire.due_real_ms(T0 + 100 * SEC, timeline) == T0 + 10 * SEC


# -- fault evidence ------------------------------------------------------------------------------


def nemesis_history(*pairs) -> list:
    h = History()
    for start, stop in pairs:
        h.append("nemesis", "ok", "start", start)
        if stop is not None:
            h.append("nemesis", "ok", "stop", {**start, **stop})
    return h.snapshot()


def corrupt_start(**kw) -> dict:
    return {"kind": "corrupt-snapshot", "node": "n2", "file": disk.SNAPSHOT, "mode": "flip",
            "offset": 10, "expect": "refuse", **kw}


def fault_types(events, kinds, **kw) -> list[str]:
    result = faults.check(events, kinds, nodes=3, limits=kw.get("limits", {}))
    return [a["type"] for a in result["anomalies"]]


def test_a_node_that_refused_naming_the_file_is_fine():
    events = nemesis_history((corrupt_start(rc=70, refused=True, named_line="..."),
                              {"rejoined": True}))
    assert fault_types(events, ["corrupt-snapshot"]) == []


def test_a_node_that_kept_running_on_a_corrupt_file_is_an_anomaly():
    events = nemesis_history((corrupt_start(rc=None, refused=False, accepted_jobs=0),
                              {"rejoined": True}))
    assert fault_types(events, ["corrupt-snapshot"]) == ["corrupt-file-accepted"]
    unnamed = nemesis_history((corrupt_start(rc=1, refused=False), None))
    assert fault_types(unnamed, ["corrupt-snapshot"]) == ["refused-without-naming-file"]


def test_a_recovered_truncated_journal_is_allowed_but_proves_nothing_alone():
    start = corrupt_start(kind="corrupt-journal", file=disk.JOURNAL, mode="truncate",
                          expect="either", rc=None, refused=False)
    assert fault_types(nemesis_history((start, {"rejoined": True})),
                       ["corrupt-journal"]) == ["corrupt-never-refused"]


def test_snapshot_kills_must_hit_a_write_at_least_once():
    miss = {"kind": "snapshot-kill", "node": "n1", "trigger": "timeout", "mode": "group",
            "hit": False}
    hit = {**miss, "trigger": "inotify", "hit": True}
    assert fault_types(nemesis_history((miss, {"rejoined": True})),
                       ["snapshot-kill"]) == ["snapshot-kill-never-hit"]
    assert fault_types(nemesis_history((miss, {"rejoined": True}), (hit, {"rejoined": True})),
                       ["snapshot-kill"]) == []
    assert fault_types(nemesis_history((hit, {"rejoined": False})),
                       ["snapshot-kill"]) == ["rejoin-timeout"]


def test_disk_full_must_fill_and_stop_the_node():
    ok = {"kind": "disk-full", "node": "n3", "free_bytes": 0, "rc": 70}
    assert fault_types(nemesis_history((ok, {"rejoined": True})), ["disk-full"]) == []
    kept = {**ok, "rc": None, "free_bytes": 10 << 20}
    assert fault_types(nemesis_history((kept, None)), ["disk-full"]) == [
        "disk-not-full", "disk-full-node-kept-running"]


def test_outage_must_stop_every_node():
    start = {"kind": "outage-stop", "nodes": ["n1", "n2", "n3"], "down_wall_ms": T0,
             "offset_ms": 0, "stopped": ["n1", "n3"]}
    assert fault_types(nemesis_history((start, {"up_wall_ms": T0 + SEC})),
                       ["outage-stop"]) == ["outage-incomplete"]


# -- replicated limits under config drift --------------------------------------------------------


def drift_history() -> list:
    h = History()
    first = {"n1": {k: str(v[0]) for k, v in drift.REPLICATED.items()},
             "n2": {k: str(v[1]) for k, v in drift.REPLICATED.items()}}
    h.append("nemesis", "info", "node-config", {"nodes": first, "generation": 0})
    return h.snapshot()


def test_limits_must_be_equal_and_one_nodes_first_values():
    events = drift_history()
    n2 = {k: v[1] for k, v in drift.REPLICATED.items()}
    assert drift.limits_check(events, {"n1": n2, "n2": n2}) == []
    other = {**n2, "dedupe_capacity": 12345}
    assert [a["type"] for a in drift.limits_check(events, {"n1": other, "n2": other})] == [
        "limits-not-bootstrapped"]
    assert [a["type"] for a in drift.limits_check(events, {"n1": n2, "n2": other})] == [
        "limits-differ"]


# -- command line --------------------------------------------------------------------------------


def test_node_flags_for_every_node_and_for_one():
    from gnomon.jepsen.cli import _node_flags

    common, per_node = _node_flags(["snapshot-min-time-s=2", "n2:dedupe_capacity=500"])
    assert common == {"snapshot_min_time_s": "2"}
    assert per_node == {"n2": {"dedupe_capacity": "500"}}


def test_tier_names_expand_to_groups_and_the_table_sums_seeds():
    from gnomon.jepsen.cli import _tiers, grouped
    from gnomon.jepsen.nemesis import SECOND_TIER

    assert _tiers(("kill", "tier2")) == ("kill", *SECOND_TIER)
    rows = [{"nodes": 3, "nemesis": "outage", "operations": 10, "faults": 2, "anomalies": a,
             "valid": a == 0} for a in (0, 1)]
    assert grouped(rows) == [{"nodes": 3, "nemesis": "outage", "runs": 2, "operations": 20,
                              "faults": 4, "anomalies": 1, "valid": "no"}]


def test_gateway_nemeses_refuse_without_gateways_and_stay_out_of_the_default_matrix():
    from gnomon.jepsen.cli import MATRIX_GROUPS, main
    from gnomon.jepsen.nemesis import expand

    for names in (("gateway-kill",), ("gateway",), ("kill", "gateway-partition")):
        with pytest.raises(ValueError, match="--gateways"):
            expand(names, 3)
    assert expand(("gateway",), 3, 2) == ["gateway-kill", "gateway-partition"]
    assert "gateway" not in MATRIX_GROUPS
    with pytest.raises(SystemExit, match="--gateways"):
        main(["run", "--gateway-relay"])


def test_gateways_sit_in_their_own_namespaces_in_front_of_every_node(tmp_path):
    from gnomon.jepsen.gateways import Gateways, gateway_hosts

    hosts = [Host(g, ip) for g, ip in gateway_hosts(2)]
    assert [h.ip for h in hosts] == ["10.77.0.51", "10.77.0.52"]
    gws = Gateways(tmp_path, Net(hosts), ["g1", "g2"], ["10.77.0.11:7701", "10.77.0.12:7701"],
                   relay=True)
    argv = gws.argv(gws.gateways["g2"])
    assert argv[:4] == ["ip", "netns", "exec", "gj-g2"]
    assert argv[argv.index("--listen") + 1] == "10.77.0.52:7700" == gws.addrs[1]
    assert argv[argv.index("--servers") + 1] == "10.77.0.11:7701,10.77.0.12:7701"
    token = Path(argv[argv.index("--relay-token-file") + 1])
    assert token.read_text().strip() and token.stat().st_mode & 0o077 == 0


def test_the_others_must_carry_on_while_one_node_is_down():
    from gnomon.jepsen.history import Event

    start = {"kind": "disk-full", "node": "n3", "free_bytes": 0, "rc": 70}

    def events(*middle):
        evs = [("nemesis", "ok", "start", start, 0), *middle,
               ("nemesis", "ok", "stop", {**start, "rejoined": True}, 5 * 10**9)]
        return [Event(i, t, 0, p, ty, f, v) for i, (p, ty, f, v, t) in enumerate(evs)]

    assert fault_types(events(), ["disk-full"]) == ["no-progress-while-one-node-down"]
    served = events((1, "ok", "read", {}, 10**9), ("witness", "ok", "effect", {}, 2 * 10**9))
    assert fault_types(served, ["disk-full"]) == []
    # A window shorter than MIN_PROGRESS_WINDOW_S (an election and a back-off) is not judged.
    short = [e if e.f != "stop" else dataclasses.replace(
             e, time=int(faults.MIN_PROGRESS_WINDOW_S * 1e9) - 1)
             for e in events()]
    assert fault_types(short, ["disk-full"]) == []


def test_two_replicas_at_one_index_must_agree_even_without_a_common_index():
    from gnomon.jepsen.checkers import common

    samples = {"n1": {5: "a", 7: "c"}, "n2": {5: "x"}, "n3": {7: "c"}}
    result = common.check_digests(samples, ["n1", "n2", "n3"])
    assert result["valid"] is False and result["anomalies"][0]["applied_index"] == 5
    assert common.check_digests({"n1": {5: "a"}, "n2": {6: "b"}}, ["n1", "n2"])["valid"] == \
        "unknown"


def test_drift_leaves_flags_other_faults_need_alone(tmp_path):
    db = DB(tmp_path, Net([Host("n1", "10.77.0.11"), Host("n2", "10.77.0.12")]), ["n1", "n2"],
            reserved=frozenset({"snapshot_min_time_s", "dedupe_capacity"}))
    drift.prepare(db, random.Random(1), History())
    for flags in db.node_flags.values():
        assert "snapshot_min_time_s" not in flags and "dedupe_capacity" not in flags
        assert "trigger_tick_ms" in flags
    # The same draws whatever is kept.
    assert drift.flags(random.Random(5))["trigger_tick_ms"] == \
        drift.flags(random.Random(5), frozenset({"dedupe_capacity"}))["trigger_tick_ms"]


def test_a_stalled_catch_up_is_an_anomaly():
    from gnomon.jepsen.checkers import schedule

    h = History()
    h.append("final", "invoke", "caught-up", {"heal_ms": T0}, workload="fire")
    h.append("final", "fail", "caught-up", {"heal_ms": T0, "behind": 3,
                                            "max_behind_ms": 25 * SEC}, workload="fire")
    h.append("final", "ok", "caught-up", {"heal_ms": T0, "behind": 0}, workload="lease")
    assert [a["type"] for a in schedule.check_catch_up(h.snapshot(), "fire")] == [
        "catch-up-incomplete"]
    assert schedule.check_catch_up(h.snapshot(), "lease") == []
