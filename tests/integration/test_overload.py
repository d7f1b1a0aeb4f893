"""Overload delays, never drops (issue 14), on real nodes; not timed.

Fires are offered far beyond what one worker stream completes (40 jobs every 100 ms) while
API clients create jobs as fast as they can against a small proposer queue. Afterwards:
every slot between a job's first and last fire ran exactly once and succeeded (none lost,
none doubled), and every API call was answered (created, or RESOURCE_EXHAUSTED /
UNAVAILABLE) within its deadline, none hung.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from gnomon.node.local.cluster import LocalCluster, wait_for
from gnomon.v1 import api_pb2, types_pb2
from tests.support.cluster import RawWorker

pytestmark = pytest.mark.integration

JOBS, INTERVAL_MS, LOAD_S = 40, 100, 5
API_THREADS, API_DEADLINE_S = 8, 3.0


def _spec(name: str, anchor_ms: int) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        name=name, tenant="load",
        schedule=types_pb2.Schedule(interval=types_pb2.IntervalSchedule(
            interval_ms=INTERVAL_MS, anchor_ms=anchor_ms)),
        tasks=[types_pb2.TaskSpec(name="main", queue="load")])


def _idle_spec(name: str) -> types_pb2.JobSpec:
    """A job that is only created (a one-shot years ahead): API load, no fires."""
    return types_pb2.JobSpec(
        name=name, tenant="api",
        schedule=types_pb2.Schedule(once=types_pb2.OnceSchedule(at_ms=4_102_444_800_000)),
        tasks=[types_pb2.TaskSpec(name="main", queue="never")])


# The default fire admission bound, and one the load passes at once: fires then wait in
# the trigger while the queue's backlog is full, and must still all run, once each.
@pytest.mark.parametrize("admission", ["10000", "30"])
def test_overload_delays_and_never_drops_or_doubles(tmp_path, admission):
    cluster = LocalCluster(tmp_path, overrides={
        # A small proposer queue: fires and API calls overflow it, which is the point.
        "max_pending_commands": "300", "max_loop_pending_commands": "200",
        "runs_retained_per_job": "1000", "fire_admission_max_ready": admission}).start()
    try:
        _run(cluster)
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()


def _run(cluster: LocalCluster) -> None:
    leader = cluster.leader()
    jobs = leader.jobs()
    anchor = (int(time.time() * 1000) // 1000 + 2) * 1000
    job_ids = [jobs.CreateJob(api_pb2.CreateJobRequest(
        request_id=f"load-{i}", spec=_spec(f"load-{i}", anchor)), timeout=30).job.job_id
        for i in range(JOBS)]

    stop = threading.Event()
    worker = RawWorker(leader, "drain-1", ("load",))
    worker.credits(200)
    completed = [0]

    def drain() -> None:
        while not stop.is_set():
            try:
                assign = worker.next("assign", timeout_s=1)
            except AssertionError:
                continue
            worker.complete(assign.lease)
            worker.credits(1)
            completed[0] += 1

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()

    outcomes: list[tuple[str, float]] = []
    lock = threading.Lock()

    def hammer(k: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            t0 = time.monotonic()
            try:
                jobs.CreateJob(api_pb2.CreateJobRequest(
                    request_id=f"api-{k}-{i}", spec=_idle_spec(f"api-{k}-{i}")),
                    timeout=API_DEADLINE_S)
                code = "OK"
            except grpc.RpcError as exc:
                code = exc.code().name
            with lock:
                outcomes.append((code, time.monotonic() - t0))

    with ThreadPoolExecutor(API_THREADS) as pool:
        for k in range(API_THREADS):
            pool.submit(hammer, k)
        time.sleep(LOAD_S)  # the load window itself (what is measured is checked after)
        for job_id in job_ids:
            _call_with_retry(lambda j=job_id: jobs.PauseJob(api_pb2.PauseJobRequest(
                request_id=f"pause-{j}", job=api_pb2.JobRef(job_id=j)), timeout=10))
        stop.set()
    stop.clear()
    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()

    def drained():
        st = cluster.status(cluster.leader(), include_digest=False)
        return st.active_runs == 0

    wait_for(drained, timeout_s=240, what="every accepted run to finish")
    stop.set()
    worker.close()

    codes = {code for code, _ in outcomes}
    assert codes <= {"OK", "RESOURCE_EXHAUSTED", "UNAVAILABLE", "DEADLINE_EXCEEDED"}, codes
    slowest = max(elapsed for _, elapsed in outcomes)
    assert slowest <= API_DEADLINE_S + 1.0, f"an API call hung for {slowest:.1f}s"
    assert "RESOURCE_EXHAUSTED" in codes or "OK" in codes

    total = 0
    for job_id in job_ids:
        runs = _call_with_retry(lambda j=job_id: jobs.ListRuns(api_pb2.ListRunsRequest(
            job=api_pb2.JobRef(job_id=j), limit=1000), timeout=30).runs)
        scheduled = sorted(r.scheduled_for_ms for r in runs
                           if r.trigger == types_pb2.RUN_TRIGGER_SCHEDULE)
        assert scheduled, f"{job_id} never fired"
        assert len(scheduled) == len(set(scheduled)), f"{job_id}: a slot ran twice"
        expected = list(range(scheduled[0], scheduled[-1] + 1, INTERVAL_MS))
        assert scheduled == expected, f"{job_id}: slots missing between first and last"
        bad = [r.run_id for r in runs if r.state != types_pb2.RUN_STATE_SUCCEEDED]
        assert not bad, f"runs that did not succeed: {bad[:5]}"
        total += len(scheduled)
    assert total >= JOBS * 5, f"only {total} fires: the load did not run"


def _call_with_retry(fn, attempts: int = 20):
    for i in range(attempts):
        try:
            return fn()
        except grpc.RpcError as exc:
            if exc.code() not in (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                  grpc.StatusCode.UNAVAILABLE,
                                  grpc.StatusCode.DEADLINE_EXCEEDED) or i == attempts - 1:
                raise
            time.sleep(0.2 * (i + 1))  # backoff before retrying a refused call
    raise AssertionError("unreachable")
