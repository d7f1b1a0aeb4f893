"""The replicated state <-> snapshot tables (key, value) and run records; the only place.

A snapshot holds facts only: derived indexes (job counts per tenant, paging order) are
rebuilt here on restore. Keys carry a sequence prefix so that LMDB's sorted keys give back
insertion order, which is replicated meaning (dedupe eviction order, DLQ order).
"""

from __future__ import annotations

import dataclasses
import operator
import struct
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

from gnomon.node import codec
from gnomon.node.core import new_state
from gnomon.node.core.access import payload_bytes
from gnomon.node.core.apply import index_job
from gnomon.node.core.index import RunFifo
from gnomon.node.core.model import (
    DedupeEntry,
    DedupeKey,
    Job,
    JobSpec,
    Run,
    RunState,
    Schedule,
    State,
    TaskSpec,
    dedupe_key,
    queue_key,
    split_dedupe_key,
)
from gnomon.node.core.transitions import track_open
from gnomon.node.memo import ByIdentity
from gnomon.v1 import snapshot_pb2, types_pb2

Table = Iterable[tuple[bytes, bytes]]


def seq_key(i: int, key: str) -> bytes:
    """A sequence prefix keeps insertion order through LMDB's sorted keys."""
    return struct.pack(">Q", i) + key.encode()


def _key_text(key: bytes) -> str:
    return key[8:].decode()


def _encode_spec_field(spec: JobSpec) -> bytes:
    return snapshot_pb2.RunRecord(spec=codec.spec_to_proto(spec)).SerializeToString()


# RunRecord's spec field (2, length-delimited) as bytes, per spec object: every run of a job
# shares its spec, and converting it was 40% of encoding a finished run (the tick thread
# encodes each evicted run). A protobuf message is the concatenation of its fields, so the
# record is the run's field followed by these bytes.
_spec_field = ByIdentity(_encode_spec_field)


def encode_run(run: Run) -> bytes:
    rec = snapshot_pb2.RunRecord()
    codec.run_to_proto(run, rec.run)
    return rec.SerializeToString() + _spec_field(run.spec)


def decode_run(data: bytes) -> Run:
    rec = snapshot_pb2.RunRecord.FromString(data)
    return codec.run_from_proto(rec.run, codec.spec_from_proto(rec.spec))


def _encode_jobs(st: State) -> tuple[list, list, list]:
    """The jobs table, with each distinct schedule and task list stored once and referred
    to by number: a restore of a million jobs decodes a few of each, not a million."""
    schedules: dict[Schedule, int] = {}
    task_sets: dict[tuple[TaskSpec, ...], int] = {}
    jobs = []
    for i, job in enumerate(st.jobs.values()):
        spec = job.spec
        rec = snapshot_pb2.JobRecord(
            schedule_ref=schedules.setdefault(spec.schedule, len(schedules)),
            task_set_ref=task_sets.setdefault(spec.tasks, len(task_sets)),
        )
        codec.job_to_proto(job, rec.job, with_spec=False)
        codec.spec_scalars_to_proto(spec, rec.job.spec)
        jobs.append((seq_key(i, job.job_id), rec.SerializeToString()))
    return (
        jobs,
        [(struct.pack(">I", ref), codec.schedule_message(s).SerializeToString())
         for s, ref in schedules.items()],
        [(struct.pack(">I", ref), codec.tasks_message(t, snapshot_pb2.TaskSet()).SerializeToString())
         for t, ref in task_sets.items()],
    )


_JOB_SCALARS = operator.attrgetter(
    "job_id", "version", "next_fire_ms", "paused", "created_ms", "updated_ms",
    "last_fired_ms", "runs_started")
# The spec scalars that are plain proto3 values: many jobs have the same ones, so their
# conversion (enums to names) is done once per distinct tuple (_JobDecoder.tails).
_SPEC_SCALARS = operator.attrgetter(
    "priority", "misfire_policy", "misfire_grace_ms", "paused", "overlap_policy",
    "max_buffered_runs", "jitter_ms", "start_at_ms", "end_at_ms", "max_runs",
    "delete_after_success")


def _fast_constructor(cls: type) -> Callable[..., Any]:
    """cls(*values) for a frozen slotted dataclass without its __init__: the generated
    __init__ goes through object.__setattr__ per field (2.2 us for a JobSpec, a tenth of a
    job's restore); the slots' own descriptors set the same fields in less than half."""
    names = [f.name for f in dataclasses.fields(cls)]
    env: dict[str, Any] = {"new": object.__new__, "cls": cls}
    env.update({f"set{i}": getattr(cls, n).__set__ for i, n in enumerate(names)})
    args = ", ".join(f"v{i}" for i in range(len(names)))
    body = "\n".join(f"    set{i}(o, v{i})" for i in range(len(names)))
    exec(f"def make({args}):\n    o = new(cls)\n{body}\n    return o\n", env)  # noqa: S102
    return cast("Callable[..., Any]", env["make"])


_new_spec = _fast_constructor(JobSpec)


class _JobDecoder:
    """Decodes the jobs table. Values that many jobs share are shared objects: the tenant
    string, the converted spec scalars, and the time a job was created or updated when it
    equals the previous job's (jobs created by one entry are neighbours and share it):
    equal values, fewer objects (a digest or an encoding cannot tell the difference)."""

    def __init__(self, schedules: list[Schedule], task_sets: list[tuple]) -> None:
        self.schedules, self.task_sets = schedules, task_sets
        self.tails: dict[tuple, tuple] = {}
        self.last_ms = 0

    def job(self, data: bytes) -> Job:
        rec = snapshot_pb2.JobRecord.FromString(data)
        m, s = rec.job, rec.job.spec
        spec = _new_spec(sys.intern(s.tenant), s.name, self.schedules[rec.schedule_ref],
                         self.task_sets[rec.task_set_ref], *self._tail(s))
        job_id, version, next_fire, paused, created, updated, last_fired, started = (
            _JOB_SCALARS(m))
        if created == self.last_ms:
            created = self.last_ms
        else:
            self.last_ms = created
        if updated == created:
            updated = created
        if m.HasField("circuit") or m.HasField("backfill") or m.ran_spans or m.span_open:
            return Job(job_id, spec, version, next_fire, paused, created, updated, last_fired,
                       started, codec.circuit_from_proto(m.circuit),
                       **codec.job_extras_from_proto(m))
        return Job(job_id, spec, version, next_fire, paused, created, updated, last_fired,
                   started)

    def _tail(self, s: types_pb2.JobSpec) -> tuple:
        """JobSpec's fields after `tasks`, positionally; shared while only scalars set them."""
        if s.HasField("max_active_runs") or s.HasField("circuit_breaker"):
            return _spec_tail(s)
        raw = _SPEC_SCALARS(s)
        tail = self.tails.get(raw)
        if tail is None:
            tail = self.tails[raw] = _spec_tail(s)
        return tail


def _spec_tail(s: types_pb2.JobSpec) -> tuple:
    extra = codec.overlap_fields_from_proto(s)
    return (s.priority, codec.misfire_from_proto(s.misfire_policy), s.misfire_grace_ms,
            s.paused, *(extra[f] for f in _SPEC_TAIL_FIELDS))


# JobSpec's fields after `paused`, in order (codec.overlap_fields_from_proto's keys).
_SPEC_TAIL_FIELDS = tuple(f.name for f in dataclasses.fields(JobSpec))[8:]


def _decode_jobs(st: State, rows: Iterable[tuple[bytes, bytes]], decoder: _JobDecoder) -> None:
    """The jobs and the indexes derived from them (names, counts, payload bytes, order)."""
    jobs, names, per_tenant = st.jobs, st.job_names, st.jobs_per_tenant
    payloads: dict[int, int] = {}  # id of a task set -> its payload bytes
    decode = decoder.job
    for _, v in rows:
        job = decode(v)
        spec = job.spec
        tenant = spec.tenant
        jobs[job.job_id] = job
        names[(tenant, spec.name)] = job.job_id
        per_tenant[tenant] = per_tenant.get(tenant, 0) + 1
        payload = payloads.get(id(spec.tasks))
        if payload is None:
            payload = payloads[id(spec.tasks)] = payload_bytes(spec)
        if payload:
            st.access.add_payload(tenant, payload)
        index_job(st, int(job.job_id[1:]), tenant)


def _dedupe_record(i: int, key: DedupeKey, e: DedupeEntry) -> tuple[bytes, bytes]:
    scope, rid = split_dedupe_key(key)
    return seq_key(i, rid), snapshot_pb2.DedupeRecord(
        request_id=rid, reply=codec.reply_to_bytes(e.reply), at_ms=e.at_ms, scope=scope,
        fingerprint=e.fingerprint,
    ).SerializeToString()


def encode_tables(st: State) -> dict[str, Table]:
    """Every replicated fact of `st` as named tables (lazy where the table is large)."""
    meta = snapshot_pb2.StateMeta(
        clock_ms=st.clock_ms, last_token=st.last_token, job_seq=st.job_seq,
        manual_seq=st.manual_seq, limits_version=st.limits_version,
        dead_letters_evicted=st.dead_letters_evicted, token_seq=st.access.token_seq,
    )
    codec.limits_to_proto(st.limits, meta.limits)
    for qc in st.queue_circuits.values():
        codec.queue_circuit_to_proto(qc, meta.queue_circuits.add())
    jobs, schedules, task_sets = _encode_jobs(st)
    return {
        "state": [(b"meta", meta.SerializeToString())],
        "schedules": schedules,
        "task_sets": task_sets,
        "jobs": jobs,
        "runs": [(seq_key(i, r.run_id), encode_run(r)) for i, r in enumerate(st.runs.values())],
        "runs_by_job": [
            (seq_key(i, job_id), _join(ids))
            for i, (job_id, ids) in enumerate(st.runs_by_job.items())
        ],
        "retention": [
            (seq_key(i, job_id), _join(fifo.items()) + b"\0" + _join(st.pinned.get(job_id, ())))
            for i, (job_id, fifo) in enumerate(st.retained.items())
        ],
        "dead_letters": [
            (seq_key(i, f"{d.run_id}:{d.task_name}"),
             codec.dead_letter_to_proto(d).SerializeToString())
            for i, d in enumerate(st.dead_letters.values())
        ],
        "dedupe": [_dedupe_record(i, key, e) for i, (key, e) in enumerate(st.dedupe.items())],
        "access": [
            (seq_key(i, t.token_id), snapshot_pb2.TokenRecord(
                token=codec.token_to_proto(t), secret_sha256=t.secret_sha256,
            ).SerializeToString())
            for i, t in enumerate(st.access.tokens.values())
        ],
        "tenants": [
            (seq_key(i, t.name), codec.tenant_to_proto(t).SerializeToString())
            for i, t in enumerate(st.access.tenants.values())
        ],
    }


def decode_tables(tables: dict[str, Iterator[tuple[bytes, bytes]]]) -> State:
    """The state whose facts `tables` hold (as written by encode_tables), indexes rebuilt."""
    st = new_state()
    for _, v in tables["state"]:
        m = snapshot_pb2.StateMeta.FromString(v)
        st.clock_ms, st.last_token = m.clock_ms, m.last_token
        st.job_seq, st.manual_seq = m.job_seq, m.manual_seq
        st.limits = codec.limits_from_proto(m.limits)
        st.limits_version, st.dead_letters_evicted = m.limits_version, m.dead_letters_evicted
        st.access.token_seq = m.token_seq
        for item in m.queue_circuits:
            qc = codec.queue_circuit_from_proto(item)
            st.queue_circuits[queue_key(qc.tenant, qc.queue)] = qc
    schedules = [codec.schedule_from_bytes(v) for _, v in tables["schedules"]]
    task_sets = [codec.tasks_from_proto(snapshot_pb2.TaskSet.FromString(v).tasks)
                 for _, v in tables["task_sets"]]
    _decode_jobs(st, tables["jobs"], _JobDecoder(schedules, task_sets))
    for _, v in tables["runs"]:
        run = decode_run(v)
        st.runs[run.run_id] = run
        st.active_runs += run.state == RunState.RUNNING
        track_open(st, run)
    for k, v in tables["runs_by_job"]:
        st.runs_by_job[_key_text(k)] = dict.fromkeys(_ids(v))
    for k, v in tables["retention"]:
        ended, _, pinned = v.partition(b"\0")
        job_id = _key_text(k)
        st.retained[job_id] = RunFifo(_ids(ended))
        if pinned:
            st.pinned[job_id] = dict.fromkeys(_ids(pinned))
    for _, v in tables["dead_letters"]:
        d = codec.dead_letter_from_proto(types_pb2.DeadLetter.FromString(v))
        st.dead_letters[(d.run_id, d.task_name)] = d
    for _, v in tables["dedupe"]:
        rec = snapshot_pb2.DedupeRecord.FromString(v)
        # A record without a scope (written before scopes existed) is in the legacy scope.
        st.dedupe[dedupe_key(rec.scope, rec.request_id)] = DedupeEntry(
            rec.at_ms, codec.reply_from_bytes(rec.reply), bytes(rec.fingerprint))
    for _, v in tables.get("access", ()):
        token_rec = snapshot_pb2.TokenRecord.FromString(v)
        st.access.add(codec.token_from_proto(token_rec.token, token_rec.secret_sha256))
    for _, v in tables.get("tenants", ()):
        tenant_rec = codec.tenant_from_proto(types_pb2.Tenant.FromString(v))
        st.access.tenants[tenant_rec.name] = tenant_rec
    return st


TABLES = ("state", "schedules", "task_sets", "jobs", "runs", "runs_by_job", "retention", "dead_letters", "dedupe", "access", "tenants")
# Tables added after FORMAT_VERSION 4 was fixed: a snapshot written before them lacks them.
LATER_TABLES = ("access", "tenants")


def _join(ids) -> bytes:
    return "\n".join(ids).encode()


def _ids(data: bytes) -> list[str]:
    return data.decode().split("\n") if data else []
