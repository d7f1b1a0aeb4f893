"""CLI unit tests: gnomon job backfill (start, --watch, --cancel, --json) and gnomon queue
circuit|circuits, against a recording fake client."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import gnomon.client.cli.backfill_circuits as semantics
from gnomon.client import (
    Backfill,
    CircuitBreaker,
    CircuitState,
    IntervalSchedule,
    Job,
    JobSpec,
    QueueCircuit,
    TaskSpec,
)
from tests.support.fake_client import T0, FakeClient, run


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(semantics, "WATCH_INTERVAL_S", 0)
    f = FakeClient()
    spec = JobSpec(name="daily", schedule=IntervalSchedule(interval_ms=60_000),
                   tasks=[TaskSpec(name="main")])
    f.jobs["j1"] = Job("j1", spec, version=1, next_fire_ms=T0)
    return f


def _progress(created, skipped, status="running"):
    return Backfill(from_ms=T0 - 600_000, to_ms=T0, next_slot_ms=T0, total_slots=10,
                    created=created, skipped=skipped, status=status)


def test_backfill_starts_with_the_range_and_override(fake):
    fake._backfill_job = lambda job_id=None, **kw: replace(fake.jobs["j1"],
                                                           backfill=_progress(0, 0))
    code, out, _ = run(fake, "job", "backfill", "daily", "--from", "2026-11-30T00:00:00Z",
                       "--to", "2026-11-30T01:00:00Z", "--overlap", "buffer_all")
    assert code == 0 and "running, 0 of 10 slots" in out
    (args, kw), = fake.method_calls("backfill_job")
    assert kw["name"] == "daily" and kw["overlap_policy"] == "buffer_all"
    assert (kw["from_ms"], kw["to_ms"]) == (1_795_996_800_000, 1_796_000_400_000)


def test_watch_prints_progress_until_done(fake):
    states = iter([_progress(4, 1), _progress(4, 1), _progress(9, 1, "done")])
    fake._get_job = lambda job_id=None, **kw: replace(fake.jobs["j1"], backfill=next(states))
    code, out, _ = run(fake, "job", "backfill", "j1", "--watch")
    lines = out.strip().splitlines()
    assert code == 0 and len(lines) == 2, out  # one line per change, then the final one
    assert "5 of 10 slots (4 runs, 1 skipped)" in lines[0]
    assert "done, 10 of 10 slots (9 runs, 1 skipped)" in lines[1]


def test_cancel_and_json(fake):
    fake._cancel_backfill = lambda job_id=None, **kw: replace(
        fake.jobs["j1"], backfill=_progress(3, 0, "cancelled"))
    code, out, _ = run(fake, "job", "backfill", "j1", "--cancel", "--json")
    data = json.loads(out)
    assert code == 0 and data["backfill"]["status"] == "cancelled"
    assert data["backfill"]["created"] == 3


@pytest.mark.parametrize("argv, message", [
    (("--from", "2026-11-30T00:00:00Z"), "--from and --to go together"),
    (("--cancel", "--to", "2026-11-30T00:00:00Z"), "--cancel and --from/--to do not mix"),
])
def test_backfill_usage_errors(fake, argv, message):
    code, _, err = run(fake, "job", "backfill", "j1", *argv)
    assert code == 2 and message in err


QC = QueueCircuit("default", "etl", CircuitBreaker(5, 60, 30_000),
                  CircuitState(status="open", opens=2))


def test_queue_circuit_set_show_reset_remove(fake):
    fake._set_queue_circuit = lambda queue, **kw: QC if kw["breaker"] else None
    fake._reset_queue_circuit = lambda queue, **kw: replace(QC, circuit=CircuitState())
    fake._list_queue_circuits = lambda **kw: [QC]
    code, out, _ = run(fake, "queue", "circuit", "etl", "--window-runs", "5",
                       "--failure-percent", "60", "--cooldown-ms", "30s")
    assert code == 0 and "open" in out and "60% of 5" in out
    (_, kw), = fake.method_calls("set_queue_circuit")
    assert kw["breaker"] == CircuitBreaker(5, 60, 30_000)
    code, out, _ = run(fake, "queue", "circuit", "etl")
    assert code == 0 and "etl" in out
    code, out, _ = run(fake, "queue", "circuit", "etl", "--reset", "--json")
    assert json.loads(out)["circuit"]["status"] == "closed"
    code, out, _ = run(fake, "queue", "circuit", "etl", "--remove")
    assert code == 0 and "removed" in out
    code, out, _ = run(fake, "queue", "circuits", "--json")
    assert json.loads(out)[0]["queue"] == "etl"
    code, _, err = run(fake, "queue", "circuit", "etl", "--window-runs", "5")
    assert code == 2 and "go together" in err
