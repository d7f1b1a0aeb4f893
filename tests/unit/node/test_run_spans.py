"""The spans of a run from replicated records (node/ops/run_spans.py): fire -> run -> task
attempt, ids derived from the run so that every leader emits the same ones, and the
traceparent a worker is given naming the attempt's span."""

from __future__ import annotations

from gnomon.node.core.commands import Batch, CompleteTask, FailTask, GrantLeases, LeaseGrant
from gnomon.node.core.results import Granted
from gnomon.node.ops.run_spans import (
    RunSpanCollector,
    SpanRecord,
    attempt_span_id,
    attempt_traceparent,
    span_id,
    trace_id,
)
from tests.unit.core.conftest import Harness


class Replica:
    """A harness whose every entry goes through a collector, as on a leader."""

    def __init__(self) -> None:
        self.h = Harness()
        self.collector = RunSpanCollector()
        self.spans: list[SpanRecord] = []
        self.traceparents: list[str] = []

    def apply(self, *commands: object) -> list:
        batch = Batch(now_ms=self.h.now, commands=tuple(commands))
        from gnomon.node.core import apply_batch

        replies, effects = apply_batch(self.h.state, batch)
        self.spans += self.collector.collect(self.h.state, batch, replies, effects)
        return replies

    def attempt(self, run_id: str, ok: bool) -> None:
        (granted,) = self.apply(GrantLeases((LeaseGrant(run_id, "a", "w1", 30_000),)))
        assert isinstance(granted, Granted)
        token = granted.tokens[0]
        inst = self.h.inst(run_id, "a")
        self.traceparents.append(attempt_traceparent(run_id, "a", inst.attempt))
        self.h.now += 1_000
        if ok:
            self.apply(CompleteTask(run_id, "a", token, b"ok"))
        else:
            self.apply(FailTask(run_id, "a", token, "boom", True, 0.5))
            self.h.now = self.h.inst(run_id, "a").retry_at_ms

    def fire_fail_complete(self) -> str:
        job = self.h.create(self.h.spec(retry=Harness.NO_JITTER))
        slot = self.h.state.jobs[job].next_fire_ms
        self.h.now = slot + 250  # fired 250 ms late
        from gnomon.node.core.commands import Fire

        (reply,) = self.apply(Fire(job, slot, slot + Harness.INTERVAL))
        self.attempt(reply.run_id, ok=False)
        self.attempt(reply.run_id, ok=True)
        return reply.run_id


def test_a_run_is_one_trace_fire_run_attempts():
    replica = Replica()
    run_id = replica.fire_fail_complete()
    by_name: dict[str, list[SpanRecord]] = {}
    for s in replica.spans:
        by_name.setdefault(s.name, []).append(s)
    (fire,) = by_name["gnomon.fire"]
    (run,) = by_name["gnomon.run"]
    first, second = by_name["gnomon.task_attempt"]
    assert {s.trace_id for s in replica.spans} == {trace_id(run_id)}
    assert (fire.span_id, fire.parent_span_id) == (span_id(run_id, "fire"), 0)
    assert fire.end_ms - fire.start_ms == 250  # the fire's lateness
    assert (run.span_id, run.parent_span_id) == (span_id(run_id, "run"), fire.span_id)
    assert run.attributes["gnomon.run.state"] == "succeeded" and not run.error
    assert [a.span_id for a in (first, second)] == [attempt_span_id(run_id, "a", n)
                                                   for n in (1, 2)]
    assert {a.parent_span_id for a in (first, second)} == {run.span_id}
    assert first.error == "boom" and not second.error
    assert first.end_ms - first.start_ms == 1_000
    # What each attempt's worker was told to continue is that attempt's span.
    assert replica.traceparents == [f"00-{trace_id(run_id):032x}-{a.span_id:016x}-01"
                                    for a in (first, second)]


def test_every_replica_derives_the_same_spans():
    """A leader after failover emits what the first would have: same ids, same times."""
    one, other = Replica(), Replica()
    assert one.fire_fail_complete() == other.fire_fail_complete()
    assert one.spans == other.spans and len(one.spans) == 4


def test_a_run_span_is_emitted_once():
    replica = Replica()
    run_id = replica.fire_fail_complete()
    # The run is touched again (a stale report) after it ended: no second run span.
    replica.apply(CompleteTask(run_id, "a", 1, b"late"))
    assert [s.name for s in replica.spans].count("gnomon.run") == 1


def test_ids_are_never_zero_and_differ_per_attempt():
    ids = {attempt_span_id("j@1", "a", n) for n in range(1, 200)}
    assert len(ids) == 199 and 0 not in ids
    assert trace_id("j@1") != trace_id("j@2") and trace_id("j@1") > 0
