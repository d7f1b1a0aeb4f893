"""state_codec.py: State -> snapshot tables -> State, for a state built by a realistic log.

The decoded state must have the same digest (the facts) and the same derived indexes, which
the snapshot does not store (active_runs, jobs_per_tenant, job_order, tenant_job_order), and
must go on to behave the same as the original under the same further entries.
"""

from __future__ import annotations

import dataclasses

import pytest

from gnomon.node import codec
from gnomon.node.core import apply_batch, digest, new_state
from gnomon.node.core import commands as c
from gnomon.node.core.errors import Rejected
from gnomon.node.core.model import (
    TERMINAL_RUN_STATES,
    AttemptOutcome,
    Limits,
    RunState,
    State,
    TaskState,
)
from gnomon.node.core.results import Effects
from gnomon.node.storage import state_codec
from gnomon.v1 import snapshot_pb2

from .harness import HOUR, T0, make_spec

MINUTE = 60_000


class Log:
    """Applies entries as a replica does: through the codec, in order, at given times."""

    def __init__(self) -> None:
        self.state = new_state()
        self.now = T0
        self.evicted: list = []

    def apply(self, *cmds, dt: int = 1_000) -> list:
        self.now += dt
        data = codec.batch_to_bytes(c.Batch(now_ms=self.now, commands=cmds))
        replies, effects = apply_batch(self.state, codec.batch_from_bytes(data))
        assert isinstance(effects, Effects)
        self.evicted += effects.evicted_runs
        return replies

    def one(self, cmd, dt: int = 1_000):
        [reply] = self.apply(cmd, dt=dt)
        return reply

    def create(self, name: str, tenant: str = "acme", request_id: str = "", **kw) -> str:
        reply = self.one(c.CreateJob(request_id, make_spec(name, tenant=tenant, **kw),
                                     self.now + HOUR))
        assert not isinstance(reply, Rejected), reply
        return reply.job_id

    def fire(self, job_id: str, skip: bool = False) -> str:
        job = self.state.jobs[job_id]
        slot = job.next_fire_ms
        reply = self.one(c.Fire(job_id, slot, slot + MINUTE, skip), dt=max(1, slot - self.now))
        assert reply.run_id, reply
        return reply.run_id

    def grant(self, run_id: str, task: str = "a", worker: str = "w1") -> int:
        [token] = self.one(c.GrantLeases((c.LeaseGrant(run_id, task, worker, 30_000),))).tokens
        assert isinstance(token, int), token
        return token

    def complete(self, run_id: str, task: str = "a", exit_code: int | None = 0) -> None:
        token = self.grant(run_id, task)
        assert not isinstance(self.one(c.CompleteTask(
            run_id, task, token, b"result", "last lines\n", exit_code, 42)), Rejected)

    def fail(self, run_id: str, task: str = "a", retryable: bool = True) -> None:
        token = self.grant(run_id, task)
        assert not isinstance(self.one(c.FailTask(
            run_id, task, token, "boom", retryable, 0.25, "trace", 1, 7)), Rejected)


def realistic_state() -> State:
    log = Log()
    log.one(c.SetLimits("limits-1", Limits(dedupe_capacity=40, dedupe_max_age_ms=2 * HOUR,
                                           runs_retained_per_job=2, max_dead_letters=3,
                                           max_attempt_records=2)))
    etl = log.create("etl", request_id="create-etl",
                     tasks={"a": (), "b": ("a",), "c": ("b",)}, max_attempts=2)
    report = log.create("report", priority=5, queue="reports", request_id="create-report")
    sync = log.create("sync", tenant="beta", timeout_ms=5_000)
    gone = log.create("gone", tenant="gamma", tasks={"a": (), "b": ()})
    log.create("paused", tenant="beta", paused=True)
    # A rejected request is remembered too (ALREADY_EXISTS).
    assert isinstance(log.one(c.CreateJob("dup-etl", make_spec("etl"), T0)), Rejected)

    # etl: a run in progress (a succeeded, b waits to retry, c pending), a skipped slot, a
    # failed run (a dead, b and c upstream_failed).
    r1 = log.fire(etl)
    log.complete(r1, "a")
    log.fail(r1, "b")
    log.fire(etl, skip=True)
    r3 = log.fire(etl)
    log.fail(r3, "a", retryable=False)

    # report: manual runs: leased with a checkpoint, cancelled while leased, expired then
    # retried to success, and one still ready.
    m1 = log.one(c.TriggerJob("trigger-1", report)).run_id
    t1 = log.grant(m1)
    log.one(c.CheckpointLeases((c.LeaseCheckpoint(m1, "a", t1, 4_000),)))
    m2 = log.one(c.TriggerJob("", report)).run_id
    log.grant(m2, worker="w2")
    log.one(c.CancelRun("cancel-m2", m2, "operator"))
    m3 = log.one(c.TriggerJob("", report)).run_id
    t3 = log.grant(m3)
    log.one(c.ExpireLeases((c.ExpiredLease(m3, "a", t3, "lease expired", 0.75),)), dt=60_000)
    log.complete(m3, exit_code=None)
    log.one(c.TriggerJob("", report))

    # sync: runs beyond retention (evicted), dead letters beyond the bound (evicted from the
    # queue), one replayed.
    for _ in range(3):
        log.complete(log.fire(sync))
    dead = []
    for _ in range(3):
        run_id = log.fire(sync)
        log.fail(run_id, retryable=False)
        dead.append(run_id)
    replayed = log.one(c.ReplayDeadLetters("replay-1", (c.TaskKey(dead[-1], "a"),)))
    assert replayed.tasks == ((dead[-1], "a"),)

    # gone: deleted with a task still leased (it keeps running) and one cancelled.
    g = log.fire(gone)
    log.grant(g, "a")
    log.one(c.DeleteJob("delete-gone", gone))
    log.one(c.UpdateJob("update-sync", sync, make_spec("sync", tenant="beta", interval_ms=2 * HOUR),
                        0, log.now + 2 * HOUR))
    log.create("late", tenant="gamma", request_id="create-late")  # the tenant comes back

    # Overlap: a BUFFER_ALL job with a leased run, two queued and one skipped (buffer full);
    # a CANCEL_OTHER job whose leased run was asked to stop while the next one waits.
    buffered = log.create("buffered", overlap_policy="buffer_all", max_active_runs=1,
                          max_buffered_runs=2)
    log.grant(log.fire(buffered))
    for _ in range(3):
        log.fire(buffered)
    other = log.create("other", overlap_policy="cancel_other")
    log.grant(log.fire(other))
    log.fire(other)
    log.one(c.SetPaused("pause-report", report, True))
    assert isinstance(log.one(c.CancelRun("cancel-nothing", "j1@1", "")), Rejected)
    log.one(c.Barrier(), dt=HOUR + 30 * MINUTE)  # the oldest request ids age out
    assert log.evicted, "nothing left memory for the history store"
    st = log.state
    assert st.dead_letters_evicted > 0
    return st


@pytest.fixture(scope="module")
def original() -> State:
    return realistic_state()


def test_the_log_reaches_every_state(original):
    st = original
    tasks = {i.state for r in st.runs.values() for i in r.tasks.values()}
    assert tasks == {v for k, v in vars(TaskState).items() if k.isupper()}
    runs = {r.state for r in st.runs.values()}
    assert runs == {v for k, v in vars(RunState).items() if k.isupper()}
    outcomes = {a.outcome for r in st.runs.values() for i in r.tasks.values() for a in i.attempts}
    assert outcomes == {v for k, v in vars(AttemptOutcome).items() if k.isupper()}
    exit_codes = {a.exit_code for r in st.runs.values() for i in r.tasks.values()
                  for a in i.attempts}
    assert {None, 0, 1} <= exit_codes
    assert any(i.lease_checkpoint_ms for r in st.runs.values() for i in r.tasks.values())
    assert st.dead_letters and st.limits_version == 1 and st.limits != Limits()
    assert len({e.at_ms for e in st.dedupe.values()}) > 1
    assert any(isinstance(e.reply, Rejected) for e in st.dedupe.values())
    assert "create-etl" not in st.dedupe  # aged out
    assert any(run.job_id not in st.jobs for run in st.runs.values())  # a deleted job's run
    assert st.job_seq > len(st.jobs)
    assert any(r.cancel_requested for r in st.runs.values())
    assert {"overlap: buffer full (2 queued)", "misfire"} <= {r.reason for r in st.runs.values()}


def _round_trip(st: State) -> State:
    tables = state_codec.encode_tables(st)
    assert set(tables) == set(state_codec.TABLES)
    # As LMDB gives them back: every table sorted by key, values as bytes.
    stored = {name: sorted((bytes(k), bytes(v)) for k, v in rows)
              for name, rows in tables.items()}
    return state_codec.decode_tables({name: iter(rows) for name, rows in stored.items()})


def _indexes(st: State) -> dict:
    def alive(seq: int) -> bool:
        return f"j{seq}" in st.jobs

    return {
        "active_runs": st.active_runs,
        "active_counted": sum(r.state == RunState.RUNNING for r in st.runs.values()),
        "jobs_per_tenant": dict(st.jobs_per_tenant),
        "job_names": dict(st.job_names),
        "job_order": (st.job_order.page(0, 10**6, alive), len(st.job_order)),
        "tenant_job_order": {t: (o.page(0, 10**6, alive), len(o))
                             for t, o in st.tenant_job_order.items()},
        "pages": [st.job_order.page(after, 2, alive) for after in range(0, st.job_seq + 1)],
        "dedupe_order": list(st.dedupe),
        "dead_letter_order": list(st.dead_letters),
        "run_order": list(st.runs),
        "job_order_dict": list(st.jobs),
        "running_by_job": {j: set(ids) for j, ids in st.running_by_job.items()},
        "queued_by_job": {j: set(ids) for j, ids in st.queued_by_job.items()},
    }


def test_decoded_state_has_the_same_digest_and_indexes(original):
    decoded = _round_trip(original)
    assert digest(decoded) == digest(original)
    assert _indexes(decoded) == _indexes(original)
    assert decoded.runs == original.runs and decoded.jobs == original.jobs
    assert decoded.dedupe == original.dedupe and decoded.dead_letters == original.dead_letters
    assert decoded.runs_by_job == original.runs_by_job


def test_decoded_state_goes_on_to_behave_the_same():
    a = realistic_state()
    b = _round_trip(a)
    spec = make_spec("after", tenant="gamma")
    later = [
        c.Batch(a.clock_ms + 1_000, (c.CreateJob("after-1", spec, a.clock_ms + HOUR, 2),)),
        # A repeat of a remembered request, a quota check against the derived count, a fresh
        # token, a paging-relevant delete, and time that ages out more request ids.
        c.Batch(a.clock_ms + 2_000, (c.CreateJob("after-1", spec, 0),
                                     c.CreateJob("", make_spec("x", tenant="gamma"), 0, 2),
                                     c.DeleteJob("", "j1"))),
        c.Batch(a.clock_ms + 3 * HOUR, (c.Barrier(),)),
    ]
    for batch in later:
        replies_a, effects_a = apply_batch(a, batch)
        replies_b, effects_b = apply_batch(b, batch)
        assert replies_a == replies_b
        assert effects_a.jobs == effects_b.jobs
        assert digest(a) == digest(b)
        assert _indexes(a) == _indexes(b)


def test_an_empty_state_round_trips():
    st = new_state()
    assert digest(_round_trip(st)) == digest(st)
    assert _indexes(_round_trip(st)) == _indexes(st)


def test_run_records_round_trip_with_their_spec(original):
    for run in original.runs.values():
        back = state_codec.decode_run(state_codec.encode_run(run))
        assert back == run and back.spec == run.spec
    terminal = [r for r in original.runs.values() if r.state in TERMINAL_RUN_STATES]
    assert terminal


def test_run_records_are_the_bytes_of_the_full_conversion_whatever_the_spec_cache(original):
    """encode_run appends a cached spec field to the run's: byte for byte what converting
    the whole record gives, for runs sharing a spec, after the cache was cleared, and for an
    equal spec that is another object."""
    def full(run):
        rec = snapshot_pb2.RunRecord()
        codec.run_to_proto(run, rec.run)
        codec.spec_to_proto(run.spec, rec.spec)
        return rec.SerializeToString()

    runs = list(original.runs.values())
    for _ in range(2):
        assert [state_codec.encode_run(r) for r in runs] == [full(r) for r in runs]
        state_codec._spec_field.clear()
    other = dataclasses.replace(runs[0], spec=dataclasses.replace(runs[0].spec, name="other"))
    assert state_codec.encode_run(other) == full(other) != state_codec.encode_run(runs[0])


def test_seq_keys_keep_insertion_order_through_sorting():
    keys = [state_codec.seq_key(i, k) for i, k in enumerate(["z", "a", "m", "é", ""])]
    assert sorted(keys) == keys
    assert state_codec.seq_key(256, "a") > state_codec.seq_key(255, "zzz")


def test_limits_version_and_counters_survive(original):
    decoded = _round_trip(original)
    fields = ("clock_ms", "limits", "limits_version", "last_token", "job_seq", "manual_seq",
              "dead_letters_evicted")
    assert {f: getattr(decoded, f) for f in fields} == {f: getattr(original, f) for f in fields}
    assert dataclasses.asdict(decoded.limits) == dataclasses.asdict(original.limits)


def test_request_id_scopes_survive_and_old_records_are_the_legacy_scope():
    """A scoped entry keeps its scope and fingerprint through a snapshot; a legacy entry is
    written byte for byte as before scopes existed (no scope, no fingerprint), and such a
    record decodes into the legacy scope (its bare request id)."""
    log = Log()
    log.create("old", request_id="k")
    scope = "t2/JobService.CreateJob/globex"
    log.one(c.CreateJob("k", make_spec("new", tenant="globex"), log.now + HOUR,
                        request_scope=scope, request_fingerprint=b"\x02" * 32))
    st = log.state
    assert list(st.dedupe) == ["k", (scope, "k")]
    decoded = _round_trip(st)
    assert list(decoded.dedupe.items()) == list(st.dedupe.items())
    assert digest(decoded) == digest(st)
    [(_, legacy), (_, scoped)] = state_codec.encode_tables(st)["dedupe"]
    entry = st.dedupe["k"]
    assert legacy == snapshot_pb2.DedupeRecord(
        request_id="k", reply=codec.reply_to_bytes(entry.reply), at_ms=entry.at_ms,
    ).SerializeToString()
    rec = snapshot_pb2.DedupeRecord.FromString(scoped)
    assert (rec.scope, rec.request_id, rec.fingerprint) == (scope, "k", b"\x02" * 32)


def test_restored_jobs_share_what_they_have_in_common():
    """Equal values many jobs hold are one object after a restore (memory per job), and
    the restored jobs are still equal to the originals."""
    log = Log()
    for i in range(6):
        log.create(f"same-{i}", tenant="acme", schedule=None)
    original = log.state
    decoded = _round_trip(original)
    assert decoded.jobs == original.jobs and digest(decoded) == digest(original)
    a, b = decoded.jobs["j1"], decoded.jobs["j2"]
    assert a.spec.tenant is b.spec.tenant
    assert a.spec.tasks is b.spec.tasks and a.spec.schedule is b.spec.schedule
    assert a.updated_ms is a.created_ms


def test_specs_decoded_from_commands_share_schedules_task_lists_and_tenants():
    spec = make_spec("one", tenant="acme")
    first, second = (codec.spec_from_proto(codec.spec_to_proto(dataclasses.replace(spec, name=n)))
                     for n in ("one", "two"))
    assert first.schedule is second.schedule and first.tasks is second.tasks
    assert first.tenant is second.tenant and first.tasks[0].queue is second.tasks[0].queue
    assert first == dataclasses.replace(second, name="one") and first.tasks == spec.tasks
