"""The other checkers on small hand-written histories (no cluster needed)."""

from __future__ import annotations

import os
import time

import pytest

from gnomon.jepsen.checkers import backfill, common, lease, overlap, schedule
from gnomon.jepsen.context import TestOptions
from gnomon.jepsen.history import History
from gnomon.node.core.model import MisfirePolicy, Schedule

LEASE = {"run_id": "j1@1000", "task": "hold", "idempotency_key": "j1@1000:hold",
         "job_id": "j1", "scheduled_for_ms": 1000}


def effect(token, worker, accepted, kind="lease-end"):
    return {**LEASE, "fencing_token": token, "worker_id": worker, "accepted": accepted,
            "kind": kind}


def ack(token, worker, accepted):
    return {"run_id": LEASE["run_id"], "task": "hold", "fencing_token": token,
            "worker_id": worker, "accepted": accepted, "detail": ""}


def witness(*items):
    h = History()
    for f, value in items:
        h.append("witness", "ok", f, value)
    return h.snapshot()


def final_run(token, worker):
    return {"j1": [["j1@1000", "succeeded", 1000, "schedule", 1000, 2000,
                    [["hold", "succeeded", token, worker]]]]}


def test_lease_checker_accepts_fenced_history():
    events = witness(("effect", effect(5, "z1", True, "lease-start")),
                     ("effect", effect(6, "w1", True, "lease-start")),
                     ("effect", effect(5, "z1", False)),
                     ("report-ack", ack(5, "z1", False)),
                     ("effect", effect(6, "w1", True)),
                     ("report-ack", ack(6, "w1", True)))
    result = lease.check(events, final_run(6, "w1"), {"j1"})
    assert result["valid"], result
    assert result["stats"]["stale_completion_attempts"] == 1
    assert result["stats"]["stale_completions_rejected"] == 1


def test_lease_checker_catches_a_stale_completion_accepted():
    events = witness(("effect", effect(5, "z1", True, "lease-start")),
                     ("effect", effect(6, "w1", True, "lease-start")),
                     ("effect", effect(5, "z1", False)),
                     ("report-ack", ack(5, "z1", True)))
    result = lease.check(events, final_run(6, "w1"), {"j1"})
    kinds = {a["type"] for a in result["anomalies"]}
    assert kinds == {"witness-rejected-accepted-token", "stale-completion-accepted"}


def test_token_reuse_is_caught():
    other = {**effect(7, "w2", True), "run_id": "j2@1000", "idempotency_key": "j2@1000:hold"}
    events = witness(("effect", effect(7, "w1", True)), ("effect", other))
    assert lease.check_tokens(events)["anomalies"][0]["type"] == "token-reuse"


def test_schedule_checker_counts_slots_and_policies():
    t0 = (int(time.time()) - 60) * 1000
    sched = Schedule("interval", interval_ms=1000)
    jobs = {"j1": {"name": "f", "tenant": "t", "schedule": sched,
                   "policy": MisfirePolicy.SKIP, "grace_ms": 2000, "first_ms": t0 + 1000,
                   "boundary_ms": t0 + 5000}}

    def run(slot, state, created, token):
        tasks = [["fire", "succeeded", token, "w"]] if token else []
        return [f"j1@{t0 + slot}", state, t0 + slot, "schedule", t0 + created, 0, tasks]

    runs = {"j1": [run(1000, "succeeded", 1000, 1), run(2000, "skipped", 9000, 0),
                   run(4000, "succeeded", 4000, 2)]}
    events = witness(*(("effect", {**effect(tok, "w", True, "fire"), "run_id": f"j1@{t0 + s}",
                                   "task": "fire"}) for tok, s in ((1, 1000), (2, 4000))))
    result = schedule.check(jobs, runs, events, heal_wall_ms=t0, bound_s=300, triggered={})
    kinds = sorted(a["type"] for a in result["anomalies"])
    assert kinds == ["missing-slot", "run-count"], result["anomalies"]
    assert result["anomalies"][0]["slots_ms"] == [t0 + 3000]


def test_request_id_answers_must_agree_unless_another_write_overlapped():
    h = History()
    dup = {"replies": [{"type": "ok", "error": None, "version": 2},
                       {"type": "ok", "error": None, "version": 3}], "request_id": "r"}
    h.append(0, "invoke", "update", {"key": "k", "value": 1, "chaos": True})
    h.append(0, "ok", "update", dup)
    assert common.check_request_ids(h.snapshot())["anomalies"]
    h2 = History()
    h2.append(0, "invoke", "update", {"key": "k", "value": 1, "chaos": True})
    h2.append(1, "invoke", "update", {"key": "k", "value": 2})
    h2.append(1, "ok", "update", {"version": 3})
    h2.append(0, "ok", "update", dup)
    result = common.check_request_ids(h2.snapshot())
    assert not result["anomalies"] and result["stats"]["skipped_concurrent"] == 1


def test_replica_digests():
    assert common.check_digests({"n1": {5: "a"}, "n2": {5: "a", 6: "b"}}, ["n1", "n2"])["valid"]
    diverged = common.check_digests({"n1": {5: "a"}, "n2": {5: "x"}}, ["n1", "n2"])
    assert diverged["anomalies"][0]["type"] == "replica-divergence"
    assert common.check_digests({"n1": {5: "a"}}, ["n1", "n2"])["valid"] == "unknown"


def test_terminal_states_never_change():
    h = History()
    run = ["j1@1", "succeeded", 1, "schedule", 1, 2, [["t", "succeeded", 3, "w"]]]
    later = ["j1@1", "failed", 1, "schedule", 1, 2, [["t", "dead", 3, "w"]]]
    for r in (run, later):
        h.append(0, "invoke", "read-runs", {"job_id": "j1"})
        h.append(0, "ok", "read-runs", {"runs": [r]})
    assert common.check_terminal_states(h.snapshot())["anomalies"]


def test_harness_says_clearly_when_not_root(monkeypatch):
    from gnomon.jepsen import runner

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(runner.HarnessError, match="needs root"):
        runner.preflight(TestOptions(nemeses=("partition",)))


def test_overlap_checker_knows_a_skip_needs_its_reason_and_an_active_run():
    def run(n, state, created, finished, reason="", trigger="schedule"):
        return [f"j1@{n}", state, n, trigger, created, finished, [], reason]

    job = {"overlap": "skip", "max_active_runs": None}
    legal = [run(1, "succeeded", 10, 50), run(2, "skipped", 20, 20, "overlap"),
             run(3, "succeeded", 60, 90)]
    assert overlap.check_job("j1", job, legal) == []
    # No run was active when the fire was decided: the skip was not the policy's.
    alone = [run(1, "succeeded", 10, 15), run(2, "skipped", 20, 20, "overlap")]
    assert [a["type"] for a in overlap.check_job("j1", job, alone)] == [
        "overlap-skip-without-active-run"]
    # A run that ended in the same ms as the fire may have ended after it (the order of two
    # entries within one ms is not in the listing): not an anomaly.
    same_ms = [run(1, "succeeded", 10, 20, trigger="manual"), run(2, "skipped", 20, 20, "overlap")]
    assert overlap.check_job("j1", job, same_ms) == []
    # ALLOW_ALL never skips for overlap.
    assert [a["type"] for a in overlap.check_job("j1", {"overlap": "allow_all"}, legal)] == [
        "overlap-skip-violates-policy"]
    # With SKIP, never two active runs of one job (a manual one counts as active).
    two = [run(1, "succeeded", 10, 50), run(2, "succeeded", 20, 40, trigger="manual")]
    assert [a["type"] for a in overlap.check_job("j1", job, two)] == ["overlap-bound-exceeded"]
    assert overlap.check_job("j1", {"overlap": "skip", "max_active_runs": 2}, two) == []
    # A misfire skip is the misfire checker's; an old summary without a reason still reads.
    assert overlap.check_job("j1", job, [run(1, "skipped", 10, 10, "misfire")]) == []
    assert not overlap.is_overlap_skip(["j1@1", "skipped", 1, "schedule", 1, 1, []])
    # A circuit skip is legal only for a job with a breaker.
    tripped = [run(1, "skipped", 10, 10, "circuit open")]
    assert [a["type"] for a in overlap.check_job("j1", job, tripped)] == [
        "circuit-skip-without-breaker"]
    assert overlap.check_job("j1", {**job, "circuit_breaker": True}, tripped) == []
    # A queue breaker's skip needs a breaker on the queue it names, not the job's.
    queued = [run(1, "skipped", 10, 10, "circuit open: queue etl")]
    assert [a["type"] for a in overlap.check_job("j1", {**job, "circuit_breaker": True},
                                                 queued)] == ["circuit-skip-without-breaker"]
    assert overlap.check_job("j1", {**job, "queue_circuits": ["etl"]}, queued) == []
    half = [run(1, "skipped", 10, 10, "circuit half-open: queue etl: probe j1@0 running")]
    assert overlap.check_job("j1", {**job, "queue_circuits": ["etl"]}, half) == []


def test_backfill_checker_allows_each_slot_to_run_once():
    sched = Schedule("interval", interval_ms=1000)
    job = {"name": "f", "tenant": "t", "schedule": sched}

    def run(slot, state="succeeded", trigger="backfill", reason=""):
        run_id = f"j1@backfill-1-{slot}" if trigger == "backfill" else f"j1@{slot}"
        return [run_id, state, slot, trigger, slot, slot + 1, [], reason]

    legal = [run(1000, trigger="schedule"), run(2000), run(3000, "skipped", reason="overlap"),
             run(3000, trigger="schedule"), run(4000, "skipped", trigger="schedule",
                                                reason="misfire"), run(4000)]
    assert backfill.check_job("j1", job, legal) == []
    # A slot the schedule ran, backfilled again; a slot backfilled twice (another id).
    twice = [run(1000, trigger="schedule"), run(1000),
             ["j1@backfill-1-2000", "succeeded", 2000, "backfill", 1, 2, [], ""],
             ["j1@backfill-2000x", "succeeded", 2000, "backfill", 1, 2, [], ""]]
    kinds = [a["type"] for a in backfill.check_job("j1", job, twice)]
    assert kinds == ["backfill-run-id", "slot-ran-twice", "slot-ran-twice"], kinds
    # Off the schedule; skipped without its reason.
    odd = [run(1500), run(5000, "skipped", reason="")]
    assert [a["type"] for a in backfill.check_job("j1", job, odd)] == [
        "backfill-slot-off-schedule", "backfill-skip-without-reason"]
    assert backfill.is_backfill(run(1000)) and not backfill.is_backfill(run(1, trigger="manual"))
