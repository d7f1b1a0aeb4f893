"""RedBeat variant of the Celery peer (a separate module: importing redbeat connects a beat_init
handler that only works with RedBeat's scheduler)."""

from __future__ import annotations

from redbeat import RedBeatScheduler, RedBeatSchedulerEntry

from gnomon.bench.celery_app import _due_ts, _phase, app


class BenchRedBeatScheduler(RedBeatScheduler):
    """RedBeat (schedule in Redis, a lock for one active beat), due instants in task args."""

    def setup_schedule(self) -> None:
        super().setup_schedule()
        for name, spec in app.conf.beat_schedule.items():
            e = RedBeatSchedulerEntry(name, spec["task"], spec["schedule"], args=(0.0,), app=app)
            e.reschedule(last_run_at=_phase(int(name[6:]), spec["schedule"]))

    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        entry.args = (_due_ts(entry),)
        return super().apply_async(entry, producer=producer, advance=advance, **kwargs)
