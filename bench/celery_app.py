"""The Celery application the peer benchmark runs (worker and beat import it).

Configured from the environment the benchmark sets:
GNOMON_BENCH_BROKER (redis URL), GNOMON_BENCH_JOBS, GNOMON_BENCH_KIND ("interval" | "once"),
GNOMON_BENCH_INTERVAL_MS, GNOMON_BENCH_ANCHOR_MS, GNOMON_BENCH_AT_MS.

The task records (scheduled_for, start) in the Redis list `bench:lat`; the beat schedulers
below put each entry's due instant (what beat itself intended) into the task's argument, so
lateness = task start at the worker - the instant beat meant to send it.
"""

from __future__ import annotations

import datetime as dt
import os
import time

import redis
from celery import Celery
from celery.beat import PersistentScheduler
from celery.schedules import BaseSchedule, schedstate, schedule

BROKER = os.environ.get("GNOMON_BENCH_BROKER", "redis://127.0.0.1:6379/0")
QUEUE = "bench"

app = Celery("gnomon_bench", broker=BROKER)
app.conf.update(
    task_ignore_result=True,
    task_default_queue=QUEUE,
    worker_prefetch_multiplier=64,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    enable_utc=True,
    timezone="UTC",
    beat_max_loop_interval=1,
    redbeat_redis_url=BROKER,
    redbeat_lock_timeout=30,
)

_redis: redis.Redis | None = None


def _client() -> redis.Redis:
    global _redis
    if _redis is None:
        _redis = redis.Redis.from_url(BROKER)
    return _redis


@app.task(name="bench.noop")
def noop(scheduled_for: float) -> None:
    start = time.time()
    _client().rpush("bench:lat", f"{scheduled_for:.4f},{start:.4f}")


class OnceAt(BaseSchedule):
    """Due once at a fixed instant (a one-shot job)."""

    def __init__(self, at: float, **kw):
        self.at = at
        super().__init__(**kw)

    def remaining_estimate(self, last_run_at: dt.datetime) -> dt.timedelta:
        return dt.timedelta(seconds=self.at - time.time())

    def is_due(self, last_run_at: dt.datetime) -> schedstate:
        if last_run_at is not None and last_run_at.timestamp() >= self.at:
            return schedstate(False, 3600.0)
        rem = self.at - time.time()
        return schedstate(True, 3600.0) if rem <= 0 else schedstate(False, rem)

    def __reduce__(self):
        return self.__class__, (self.at,)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OnceAt) and other.at == self.at

    __hash__ = None  # type: ignore[assignment]


def _env_int(name: str, default: int = 0) -> int:
    return int(os.environ.get(name, default))


def bench_schedule() -> dict:
    n = _env_int("GNOMON_BENCH_JOBS")
    kind = os.environ.get("GNOMON_BENCH_KIND", "interval")
    out = {}
    for i in range(n):
        if kind == "once":
            sched: BaseSchedule = OnceAt(_env_int("GNOMON_BENCH_AT_MS") / 1000)
        else:
            sched = schedule(run_every=dt.timedelta(
                milliseconds=_env_int("GNOMON_BENCH_INTERVAL_MS")))
        out[f"bench-{i}"] = {"task": "bench.noop", "schedule": sched, "args": (0.0,)}
    return out


app.conf.beat_schedule = bench_schedule()


def first_due(i: int) -> float:
    """Interval entries are phased like gnomon's jobs: entry i first due at anchor + i*T/n."""
    n = _env_int("GNOMON_BENCH_JOBS")
    t = _env_int("GNOMON_BENCH_INTERVAL_MS")
    anchor = _env_int("GNOMON_BENCH_ANCHOR_MS")
    return (anchor + (i * t) // max(1, n)) / 1000


def _due_ts(entry) -> float:
    sched = entry.schedule
    if isinstance(sched, OnceAt):
        return sched.at
    last = entry.last_run_at
    return (last + sched.run_every).timestamp() if last is not None else time.time()


def _phase(i: int, sched) -> dt.datetime:
    return dt.datetime.fromtimestamp(first_due(i), dt.UTC) - sched.run_every


class BenchScheduler(PersistentScheduler):
    """celery beat's default scheduler (shelve file), with due instants in the task args."""

    def setup_schedule(self) -> None:
        super().setup_schedule()
        if os.environ.get("GNOMON_BENCH_KIND", "interval") == "interval":
            for name, entry in self.schedule.items():
                if name.startswith("bench-"):
                    entry.last_run_at = _phase(int(name[6:]), entry.schedule)
        self.sync()

    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        entry.args = (_due_ts(entry),)
        return super().apply_async(entry, producer=producer, advance=advance, **kwargs)
