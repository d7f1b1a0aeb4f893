"""Catch-up after an outage: every missed slot is proposed in bounded chunks, whatever the
backlog, while the API keeps answering (issue 8 item 2)."""

from __future__ import annotations

import concurrent.futures
import signal
import time

import pytest

from gnomon.v1 import api_pb2, types_pb2
from tests.support.cluster import wait_for

pytestmark = pytest.mark.integration


def _interval_job(name: str, interval_ms: int, policy: int = 0,
                  grace_ms: int = 0) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        name=name,
        schedule=types_pb2.Schedule(interval=types_pb2.IntervalSchedule(interval_ms=interval_ms)),
        tasks=[types_pb2.TaskSpec(name="main", queue="nobody")],
        misfire_policy=policy, misfire_grace_ms=grace_ms,
    )


def _create_jobs(node, specs: list[types_pb2.JobSpec]) -> list[str]:
    stub = node.jobs()

    def create(i_spec):
        i, spec = i_spec
        req = api_pb2.CreateJobRequest(request_id=f"c{i}", spec=spec)
        return stub.CreateJob(req, timeout=30).job.job_id

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        return list(pool.map(create, enumerate(specs)))


def _high_water_marks(node) -> dict[str, int]:
    return {j.job_id: j.last_fired_ms for j in _jobs(node)}


PERIOD_MS = 2000


def test_a_backlog_larger_than_the_proposer_queue_is_caught_up(make_cluster):
    """Seen: 1,000 one-second jobs on a node frozen for 25 s never caught up (the due fires
    went into one proposal above max_pending_commands, refused as Overloaded, forever).
    Here the queue bound is 2,000 and the freeze 5 s: about 2,500 fires of 1,000 two-second
    jobs are due at once. (One-second jobs, 1,000 fires/s steady, could not catch up while
    the suite's three workers shared two cores.)"""
    cluster = make_cluster(1, max_pending_commands="2000")
    node = cluster.leader()
    job_ids = _create_jobs(node, [_interval_job(f"tick{i}", PERIOD_MS) for i in range(1000)])
    wait_for(lambda: all(_high_water_marks(node).values()), timeout_s=60,
             what="every job to fire once")

    node.proc.send_signal(signal.SIGSTOP)
    time.sleep(5)  # the outage itself, not a synchronisation
    node.proc.send_signal(signal.SIGCONT)
    resumed_ms = int(time.time() * 1000)

    def caught_up():
        marks = _high_water_marks(node)
        return all(marks[j] >= resumed_ms for j in job_ids)

    wait_for(caught_up, timeout_s=90, what="every job's high-water mark past the outage")
    # The API answered while catching up and every slot fired once (run ids are per slot).
    runs = node.jobs().ListRuns(api_pb2.ListRunsRequest(
        job=api_pb2.JobRef(job_id=job_ids[0]), limit=1000), timeout=30).runs
    slots = sorted(r.scheduled_for_ms for r in runs)
    assert slots == sorted(set(slots))
    assert slots == list(range(slots[0], slots[-1] + PERIOD_MS, PERIOD_MS)), "a slot was dropped"


def test_misfire_policies_hold_slot_by_slot_after_an_outage(make_cluster):
    """RUN_ALL runs every missed slot, RUN_LATEST only the latest (the rest SKIPPED), SKIP
    records each missed slot as SKIPPED; slots within the grace run."""
    cluster = make_cluster(1, max_pending_commands="2000")
    node = cluster.leader()
    policies = {
        "all": types_pb2.MISFIRE_POLICY_RUN_ALL,
        "latest": types_pb2.MISFIRE_POLICY_RUN_LATEST,
        "skip": types_pb2.MISFIRE_POLICY_SKIP,
    }
    specs = [_interval_job(f"{name}{i}", 1000, policy, grace_ms=1500)
             for name, policy in policies.items() for i in range(300)]
    job_ids = dict(zip((s.name for s in specs), _create_jobs(node, specs), strict=True))
    wait_for(lambda: all(_high_water_marks(node).values()), timeout_s=60,
             what="every job to fire once")

    node.proc.send_signal(signal.SIGSTOP)
    stopped_ms = int(time.time() * 1000)
    time.sleep(6)  # the outage itself
    node.proc.send_signal(signal.SIGCONT)
    resumed_ms = int(time.time() * 1000)
    wait_for(lambda: all(m >= resumed_ms for m in _high_water_marks(node).values()),
             timeout_s=90, what="catch-up of every job")

    for name in ("all0", "latest0", "skip0", "all299", "latest299", "skip299"):
        runs = node.jobs().ListRuns(api_pb2.ListRunsRequest(
            job=api_pb2.JobRef(job_id=job_ids[name]), limit=1000), timeout=30).runs
        # Slots that fell well inside the outage were missed by more than the grace.
        missed = [r for r in runs if stopped_ms + 1000 <= r.scheduled_for_ms <= resumed_ms - 3000]
        assert len(missed) >= 2, (name, [r.scheduled_for_ms for r in runs])
        skipped = [r for r in missed if r.state == types_pb2.RUN_STATE_SKIPPED]
        if name.startswith("all"):
            assert not skipped, name
        elif name.startswith("skip"):
            assert len(skipped) == len(missed), name
        else:
            # At most the latest due slot at each catch-up decision runs.
            assert len(missed) - len(skipped) <= 1, name


def test_ten_thousand_jobs_catch_up_a_ten_minute_outage_through_a_clock_jump(tmp_path):
    """The scale of the issue and beyond: 10,000 every-minute jobs, the node's clock jumps
    ten minutes ahead (libfaketime), about 100,000 slots fall due at once; every one is
    fired or skipped by its job's policy, and the API answers meanwhile."""
    from gnomon.jepsen.db import SITECUSTOMIZE
    from gnomon.jepsen.net import libfaketime
    from gnomon.node.local.cluster import LocalCluster

    preload = libfaketime()
    if preload is None:
        pytest.skip("libfaketime is not installed (Debian package libfaketime)")
    clock = tmp_path / "clock"
    clock.write_text("+0\n")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    # No fire admission bound: no worker takes these ~36,000 RUN_ALL runs, and this test is
    # about the trigger firing every due slot (the bound, which would rightly hold back the
    # runs past 10,000 per queue, is tested in test_trigger.py and test_overload.py).
    cluster = LocalCluster(tmp_path / "c", 1, {"fire_admission_max_ready": "0"}, env={
        "LD_PRELOAD": preload, "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_FORCE_MONOTONIC_FIX": "0", "FAKETIME_TIMESTAMP_FILE": str(clock),
        "FAKETIME_NO_CACHE": "1", "PYTHONPATH": str(site),
    }).start()
    try:
        _ten_thousand_jobs(cluster, clock)
    finally:
        cluster.stop()


def _ten_thousand_jobs(cluster, clock) -> None:
    node = cluster.leader(timeout_s=60)
    policies = [types_pb2.MISFIRE_POLICY_RUN_ALL, types_pb2.MISFIRE_POLICY_RUN_LATEST,
                types_pb2.MISFIRE_POLICY_SKIP]
    specs = [types_pb2.JobSpec(
        name=f"m{i}", misfire_policy=policies[i % 3],
        schedule=types_pb2.Schedule(cron=types_pb2.CronSchedule(expression="* * * * *")),
        tasks=[types_pb2.TaskSpec(name="main", queue="nobody")]) for i in range(10_000)]
    job_ids = _create_jobs(node, specs)
    created = {j.job_id: j.next_fire_ms for j in _jobs(node)}
    clock.write_text("+600\n")  # ten minutes pass in an instant
    jumped_ms = int(time.time() * 1000) + 600_000

    def caught_up():
        node.cluster().GetStatus(api_pb2.GetStatusRequest(), timeout=10)  # the API answers
        return all(m >= jumped_ms - 60_000 for m in _high_water_marks(node).values())

    wait_for(caught_up, timeout_s=300, interval_s=1, what="catch-up of 10,000 jobs")
    for i in (0, 1, 2, 9_997, 9_998, 9_999):
        runs = node.jobs().ListRuns(api_pb2.ListRunsRequest(
            job=api_pb2.JobRef(job_id=job_ids[i]), limit=100), timeout=30).runs
        slots = sorted(r.scheduled_for_ms for r in runs)
        assert slots[0] <= created[job_ids[i]]
        assert slots == list(range(slots[0], slots[-1] + 60_000, 60_000)), "a slot was lost"
        assert len(slots) >= 10
        # Decided more than the grace (60 s) after its slot, and not the latest due slot.
        # Only slots after the jump instant: a fire decided on time just before the jump
        # commits after it, so its created_ms looks late (seen once in CI: 8 of 9).
        late = [r for r in runs if r.created_ms - r.scheduled_for_ms > 60_000
                and jumped_ms - 600_000 < r.scheduled_for_ms < jumped_ms - 120_000]
        skipped = [r for r in late if r.state == types_pb2.RUN_STATE_SKIPPED]
        if specs[i].misfire_policy == types_pb2.MISFIRE_POLICY_RUN_ALL:
            assert not skipped
        else:
            assert len(skipped) == len(late), (i, [r.state for r in late])


def _jobs(node) -> list[types_pb2.Job]:
    out, after = [], ""
    while True:
        page = node.jobs().ListJobs(api_pb2.ListJobsRequest(limit=1000, after_job_id=after),
                                    timeout=30)
        out += page.jobs
        if not page.next_after_job_id:
            return out
        after = page.next_after_job_id
