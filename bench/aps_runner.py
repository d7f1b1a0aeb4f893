"""APScheduler 3 peer: one process with a BackgroundScheduler, a persistent SQLAlchemy job store
(SQLite file) and a thread pool, running the benchmark's job set for a fixed time.

    python -m gnomon.bench.aps_runner --db jobs.sqlite --kind interval --jobs 1000 \
        --interval-ms 1000 --anchor-ms T --run-s 30 --out aps.json

Jobs never coalesce or misfire (coalesce=False, misfire_grace_time=None, no instance cap), like
gnomon's RUN_ALL. Each run records (scheduled run time, start of the job function).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import time
from pathlib import Path

RECORDS: list[tuple[float, float]] = []


def noop() -> None:
    """The job function (referenced by the job store as gnomon.bench.aps_runner:noop)."""


def _patch_run_job() -> None:
    """Record the start of every scheduled run: APScheduler calls run_job(job, alias,
    run_times, logger) in an executor thread; the job function itself gets no run time."""
    from apscheduler.executors import base, pool

    original = base.run_job

    def run_job(job, jobstore_alias, run_times, logger_name):
        events = []
        for run_time in run_times:
            RECORDS.append((run_time.timestamp(), time.time()))
            events.extend(original(job, jobstore_alias, [run_time], logger_name))
        return events

    pool.run_job = run_job


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", required=True)
    p.add_argument("--kind", choices=("interval", "once"), default="interval")
    p.add_argument("--jobs", type=int, required=True)
    p.add_argument("--interval-ms", type=int, default=1000)
    p.add_argument("--anchor-ms", type=int, default=0)
    p.add_argument("--at-ms", type=int, default=0)
    p.add_argument("--threads", type=int, default=20)
    p.add_argument("--run-s", type=float, required=True, help="seconds after the jobs are in")
    p.add_argument("--until", type=int, default=0, help="stop once this many runs started")
    p.add_argument("--ready-file", default="")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler
    from apscheduler.triggers.date import DateTrigger
    from apscheduler.triggers.interval import IntervalTrigger

    _patch_run_job()
    sched = BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{args.db}")},
        executors={"default": ThreadPoolExecutor(args.threads)},
        job_defaults={"coalesce": False, "misfire_grace_time": None, "max_instances": 1_000_000},
        timezone=dt.UTC,
    )
    sched.start(paused=True)
    t0 = time.time()
    for i in range(args.jobs):
        if args.kind == "once":
            trigger = DateTrigger(run_date=dt.datetime.fromtimestamp(args.at_ms / 1000, dt.UTC))
        else:
            start = (args.anchor_ms + (i * args.interval_ms) // args.jobs) / 1000
            trigger = IntervalTrigger(seconds=args.interval_ms / 1000,
                                      start_date=dt.datetime.fromtimestamp(start, dt.UTC))
        sched.add_job(noop, trigger, id=f"bench-{i}", name=f"bench-{i}")
    add_s = time.time() - t0
    sched.resume()
    if args.ready_file:
        Path(args.ready_file).write_text(str(time.time()))
    t_end = time.time() + args.run_s
    while time.time() < t_end and not (args.until and len(RECORDS) >= args.until):
        time.sleep(0.1)
    sched.shutdown(wait=False)
    records = list(RECORDS)
    Path(args.out).write_text(json.dumps({"add_s": round(add_s, 2), "records": records}))


if __name__ == "__main__":
    main()
