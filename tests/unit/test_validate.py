"""Leader-side validation of job specs, request ids and worker ids: one case per rule."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import pytest

from gnomon.node.core.model import (
    JobSpec,
    MisfirePolicy,
    RetryPolicy,
    Schedule,
    ScheduleKind,
    TaskSpec,
)
from gnomon.node.spec.validate import (
    InputLimits,
    ValidationError,
    validate_request_id,
    validate_spec,
    validate_worker_id,
)

LIMITS = InputLimits()
EVERY_MINUTE = Schedule(kind=ScheduleKind.CRON, expression="* * * * *")


def make_spec(**changes: object) -> JobSpec:
    spec = JobSpec(
        tenant="acme",
        name="nightly",
        schedule=EVERY_MINUTE,
        tasks=(
            TaskSpec(name="a"),
            TaskSpec(name="b", depends_on=("a",)),
            TaskSpec(name="c", depends_on=("a", "b")),
        ),
    )
    return dataclasses.replace(spec, **changes)


def with_task(index: int, **changes: object) -> JobSpec:
    tasks = list(make_spec().tasks)
    tasks[index] = dataclasses.replace(tasks[index], **changes)
    return make_spec(tasks=tuple(tasks))


def with_retry(**changes: object) -> JobSpec:
    return with_task(1, retry=RetryPolicy(**changes))


def with_deps(*deps: tuple[str, ...]) -> JobSpec:
    names = "abc"
    return make_spec(tasks=tuple(TaskSpec(name=names[i], depends_on=d) for i, d in enumerate(deps)))


def schedule(**fields: object) -> JobSpec:
    return make_spec(schedule=Schedule(**fields))


CASES: list[tuple[str, Callable[[], JobSpec], str]] = [
    ("tenant uppercase", lambda: make_spec(tenant="Acme"), "spec.tenant: must match"),
    ("tenant dot", lambda: make_spec(tenant="a.b"), "spec.tenant"),
    ("tenant too long", lambda: make_spec(tenant="a" * 65), "spec.tenant"),
    ("name empty", lambda: make_spec(name=""), "spec.name: must match"),
    ("name space", lambda: make_spec(name="my job"), "spec.name"),
    ("name too long", lambda: make_spec(name="n" * 129), "spec.name"),
    ("name newline", lambda: make_spec(name="job\n"), "spec.name"),
    ("no tasks", lambda: make_spec(tasks=()), "spec.tasks: at least one task"),
    (
        "too many tasks",
        lambda: make_spec(tasks=tuple(TaskSpec(name=f"t{i}") for i in range(101))),
        "spec.tasks: 101 tasks exceeds max_tasks_per_job 100",
    ),
    ("task name", lambda: with_task(1, name="b/c"), "spec.tasks[1].name: must match"),
    ("task name too long", lambda: with_task(0, name="t" * 65), "spec.tasks[0].name"),
    (
        "task name duplicate",
        lambda: with_task(2, name="a", depends_on=()),
        "spec.tasks[2].name: duplicate task name 'a' (also spec.tasks[0])",
    ),
    (
        "depends on missing",
        lambda: with_task(1, depends_on=("zzz",)),
        "spec.tasks[1].depends_on: unknown task 'zzz'",
    ),
    (
        "depends on itself",
        lambda: with_task(1, depends_on=("b",)),
        "spec.tasks[1].depends_on: task 'b' depends on itself",
    ),
    (
        "depends twice",
        lambda: with_task(2, depends_on=("a", "a")),
        "spec.tasks[2].depends_on: 'a' is listed twice",
    ),
    (
        "two-task cycle",
        lambda: with_deps(("b",), ("a",)),
        "spec.tasks: dependency cycle a -> b -> a",
    ),
    (
        "three-task cycle",
        lambda: with_deps((), ("c",), ("b",)),
        "spec.tasks: dependency cycle b -> c -> b",
    ),
    (
        "payload",
        lambda: with_task(2, payload=b"x" * 70_000),
        "spec.tasks[2].payload: 70000 bytes exceeds max_payload_bytes 65536",
    ),
    ("queue", lambda: with_task(0, queue="q q"), "spec.tasks[0].queue: must match"),
    ("queue too long", lambda: with_task(0, queue="q" * 65), "spec.tasks[0].queue"),
    ("timeout negative", lambda: with_task(0, timeout_ms=-1), "spec.tasks[0].timeout_ms: must be"),
    (
        "timeout too long",
        lambda: with_task(0, timeout_ms=7 * 86_400_000 + 1),
        "spec.tasks[0].timeout_ms: 604800001 exceeds max_timeout_ms 604800000",
    ),
    ("attempts negative", lambda: with_retry(max_attempts=-1), "spec.tasks[1].retry.max_attempts"),
    (
        "attempts above limit",
        lambda: with_retry(max_attempts=101),
        "spec.tasks[1].retry.max_attempts: 101 exceeds max_attempts 100",
    ),
    (
        "initial backoff negative",
        lambda: with_retry(initial_backoff_ms=-1),
        "spec.tasks[1].retry.initial_backoff_ms",
    ),
    (
        "max backoff negative",
        lambda: with_retry(max_backoff_ms=-1),
        "spec.tasks[1].retry.max_backoff_ms",
    ),
    ("multiplier < 1", lambda: with_retry(multiplier=0.5), "spec.tasks[1].retry.multiplier"),
    ("multiplier negative", lambda: with_retry(multiplier=-2.0), "spec.tasks[1].retry.multiplier"),
    (
        "multiplier nan",
        lambda: with_retry(multiplier=float("nan")),
        "spec.tasks[1].retry.multiplier",
    ),
    (
        "multiplier inf",
        lambda: with_retry(multiplier=float("inf")),
        "spec.tasks[1].retry.multiplier",
    ),
    ("jitter > 1", lambda: with_retry(jitter=1.5), "spec.tasks[1].retry.jitter"),
    ("jitter nan", lambda: with_retry(jitter=float("nan")), "spec.tasks[1].retry.jitter"),
    ("priority high", lambda: make_spec(priority=101), "spec.priority: must be in -100..100"),
    ("priority low", lambda: make_spec(priority=-101), "spec.priority"),
    ("misfire policy", lambda: make_spec(misfire_policy="later"), "spec.misfire_policy"),
    ("misfire grace", lambda: make_spec(misfire_grace_ms=-1), "spec.misfire_grace_ms"),
    ("schedule kind unset", lambda: schedule(kind=""), "spec.schedule: exactly one of"),
    (
        "interval too short",
        lambda: schedule(kind=ScheduleKind.INTERVAL, interval_ms=99),
        "spec.schedule.interval.interval_ms: 99 is below min_interval_ms 100",
    ),
    (
        "interval zero",
        lambda: schedule(kind=ScheduleKind.INTERVAL, interval_ms=0),
        "spec.schedule.interval.interval_ms",
    ),
    ("once at zero", lambda: schedule(kind=ScheduleKind.ONCE), "spec.schedule.once.at_ms"),
    (
        "cron malformed",
        lambda: schedule(kind=ScheduleKind.CRON, expression="* * *"),
        "spec.schedule.cron.expression",
    ),
    (
        "cron impossible",
        lambda: schedule(kind=ScheduleKind.CRON, expression="0 0 30 2 *"),
        "spec.schedule.cron.expression: '0 0 30 2 *' never fires",
    ),
    (
        "cron timezone",
        lambda: schedule(kind=ScheduleKind.CRON, expression="* * * * *", timezone="Mars/Base"),
        "spec.schedule.cron.timezone: unknown IANA timezone 'Mars/Base'",
    ),
    (
        # The job's own hash id (tenant/name) decides H: day 31 for default/job11.
        "cron H impossible for this job",
        lambda: make_spec(
            tenant="",
            name="job11",
            schedule=Schedule(kind=ScheduleKind.CRON, expression="0 0 H 2 *"),
        ),
        "spec.schedule.cron.expression",
    ),
]


@pytest.mark.parametrize(("build", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rejects(build: Callable[[], JobSpec], message: str) -> None:
    with pytest.raises(ValidationError) as err:
        validate_spec(build(), LIMITS)
    assert message in str(err.value)
    field = str(err.value).split(": ", 1)[0]
    assert err.value.field == field
    assert message.startswith(field)


@pytest.mark.parametrize(
    "spec",
    [
        make_spec(),
        make_spec(name="N" * 128, tenant="t" * 64, priority=100),
        make_spec(priority=-100, misfire_grace_ms=0, misfire_policy=MisfirePolicy.SKIP),
        make_spec(schedule=Schedule(kind=ScheduleKind.INTERVAL, interval_ms=100, anchor_ms=-5)),
        make_spec(schedule=Schedule(kind=ScheduleKind.ONCE, at_ms=1)),
        make_spec(
            schedule=Schedule(kind=ScheduleKind.CRON, expression="H H * * *", timezone="Asia/Tokyo")
        ),
        make_spec(
            tenant="",
            name="job1",
            schedule=Schedule(kind=ScheduleKind.CRON, expression="0 0 H 2 *"),
        ),
        make_spec(tasks=tuple(TaskSpec(name=f"t{i}") for i in range(100))),
        with_task(0, payload=b"x" * 65_536, timeout_ms=7 * 86_400_000),
        with_retry(max_attempts=100, multiplier=1.0, jitter=1.0),
        with_retry(multiplier=0.0, jitter=0.0),  # the defaults
        with_retry(jitter=-1.0),  # negative means no jitter
        with_task(2, name="A-z_0.9", queue="gpu.large-1"),
    ],
)
def test_accepts(spec: JobSpec) -> None:
    validate_spec(spec, LIMITS)


def test_normalises_empty_tenant_queue_and_policy() -> None:
    spec = make_spec(
        tenant="", misfire_policy="", tasks=(TaskSpec(name="a"), TaskSpec(name="b", queue="gpu"))
    )
    out = validate_spec(spec, LIMITS)
    assert out.tenant == "default"
    assert [t.queue for t in out.tasks] == ["default", "gpu"]
    assert out.misfire_policy == MisfirePolicy.RUN_ALL
    assert dataclasses.replace(out, tenant="", misfire_policy="", tasks=spec.tasks) == spec
    assert spec.tenant == "" and spec.tasks[0].queue == ""  # input untouched


def test_limits_come_from_config() -> None:
    tight = InputLimits(max_payload_bytes=10, max_tasks_per_job=2, max_name_len=5)
    with pytest.raises(
        ValidationError, match=r"spec.tasks\[0\].payload: 11 bytes exceeds max_payload_bytes 10"
    ):
        validate_spec(make_spec(name="n", tasks=(TaskSpec(name="a", payload=b"x" * 11),)), tight)
    with pytest.raises(ValidationError, match="max_tasks_per_job 2"):
        validate_spec(make_spec(name="n"), tight)
    with pytest.raises(ValidationError, match="spec.name"):
        validate_spec(make_spec(name="toolong", tasks=(TaskSpec(name="a"),)), tight)


def test_long_values_are_truncated_in_messages() -> None:
    with pytest.raises(ValidationError) as err:
        validate_spec(make_spec(name="!" * 10_000), LIMITS)
    assert len(str(err.value)) < 300
    assert "10000 characters" in str(err.value)


def test_validation_error_is_a_value_error() -> None:
    err = ValidationError("spec.name", "must match")
    assert isinstance(err, ValueError)
    assert (err.field, err.rule, str(err)) == ("spec.name", "must match", "spec.name: must match")


@pytest.mark.parametrize("request_id", ["", "abc", "r" * 128, "€" * 42, "with space-1:2/3"])
def test_request_id_ok(request_id: str) -> None:
    validate_request_id(request_id)


@pytest.mark.parametrize(
    ("request_id", "rule"),
    [
        ("r" * 129, "129 bytes exceeds"),
        ("€" * 43, "129 bytes exceeds"),
        ("a\nb", "printable"),
        ("a\x00b", "printable"),
        ("\ud800", "printable"),
    ],
)
def test_request_id_rejected(request_id: str, rule: str) -> None:
    with pytest.raises(ValidationError, match=rule) as err:
        validate_request_id(request_id)
    assert err.value.field == "request_id"
    assert str(err.value).startswith("request_id: ")


@pytest.mark.parametrize("worker_id", ["w", "host-1.example.com:4242", "A_b.c:d-e", "w" * 128])
def test_worker_id_ok(worker_id: str) -> None:
    validate_worker_id(worker_id)


@pytest.mark.parametrize("worker_id", ["", "a b", "w" * 129, "é", "w\n", "a/b"])
def test_worker_id_rejected(worker_id: str) -> None:
    with pytest.raises(ValidationError, match="must match") as err:
        validate_worker_id(worker_id)
    assert err.value.field == "worker_id"


DAG_CASES = [
    lambda: with_task(2, name="a", depends_on=()),
    lambda: with_task(1, depends_on=("zzz",)),
    lambda: with_task(1, depends_on=("b",)),
    lambda: with_task(2, depends_on=("a", "a")),
    lambda: with_deps(("b",), ("a",)),
    lambda: with_deps((), ("c",), ("b",)),
    lambda: make_spec(tasks=()),
]


@pytest.mark.parametrize("make", DAG_CASES)
def test_the_leader_and_apply_state_one_dag_rule_in_one_message(make):
    """One rule, one place: what the leader answers is what apply would answer."""
    from gnomon.node.core.validate import validate_spec as core_validate

    spec = make()
    with pytest.raises(ValidationError) as err:
        validate_spec(spec, LIMITS)
    assert str(err.value) == core_validate(spec).detail


# --- jitter and bounds (issue 9) ---------------------------------------------------------------

HOURLY_INTERVAL = Schedule(kind=ScheduleKind.INTERVAL, interval_ms=3_600_000)


@pytest.mark.parametrize(("changes", "message"), [
    ({"jitter_ms": 60_000}, "spec.jitter_ms: 60000 is not less than the schedule's shortest gap "
                            "between slots (60000 ms)"),
    ({"schedule": HOURLY_INTERVAL, "jitter_ms": 3_600_000}, "spec.jitter_ms: 3600000 is not less"),
    ({"schedule": HOURLY_INTERVAL, "jitter_ms": 3_600_001},
     "spec.jitter_ms: 3600001 exceeds the node's max_jitter_ms 3600000"),
    ({"jitter_ms": -1}, "spec.jitter_ms: must be >= 0"),
    ({"start_at_ms": 2_000, "end_at_ms": 1_000}, "spec.end_at_ms: 1000 is before start_at_ms 2000"),
    ({"max_runs": -3}, "spec.max_runs: must be >= 0"),
    ({"delete_after_success": True}, "spec.delete_after_success: applies to a one-shot"),
])
def test_timing_rules(changes: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        validate_spec(make_spec(**changes), LIMITS)


def test_timing_accepted() -> None:
    validate_spec(make_spec(jitter_ms=59_999, start_at_ms=1, end_at_ms=2, max_runs=3), LIMITS)
    once = Schedule(kind=ScheduleKind.ONCE, at_ms=1_800_000_000_000)
    validate_spec(make_spec(schedule=once, delete_after_success=True, jitter_ms=10), LIMITS)


def test_run_parameters_are_merged_into_json_payloads() -> None:
    from gnomon.node.spec.validate import merge_params

    spec = make_spec(tasks=(TaskSpec(name="a", payload=b'{"table":"users","day":"sun"}'),
                            TaskSpec(name="b")))
    params, payloads = merge_params(spec, '{"day": "mon"}', LIMITS)
    assert params == b'{"day":"mon"}'
    assert [(p.task_name, p.payload) for p in payloads] == [
        ("a", b'{"day":"mon","table":"users"}'), ("b", b'{"day":"mon"}')]
    assert merge_params(spec, "", LIMITS) == (b"", ())
    for bad, rule in (("[1]", "must be a JSON object"), ("{", "not valid JSON"),
                      ('{"x": "' + "y" * 70_000 + '"}', "exceeds max_payload_bytes")):
        with pytest.raises(ValidationError, match=re.escape(rule)):
            merge_params(spec, bad, LIMITS)
    raw = make_spec(tasks=(TaskSpec(name="a", payload=b"echo hi"),))
    with pytest.raises(ValidationError, match=r"params_json: task 'a' \(spec.tasks\[0\]\) has a "
                                              "payload that is not a JSON object"):
        merge_params(raw, '{"d": 1}', LIMITS)


def test_backfill_range_rules_name_the_field() -> None:
    from gnomon.node.spec.validate import BACKFILL_CLOCK_SLACK_MS, validate_backfill_range

    now = 1_800_000_000_000
    assert validate_backfill_range(now - 600_000, now - 60_000, now) == now - 60_000
    # A client's "now" a little ahead of the node's is the node's now.
    assert validate_backfill_range(now - 600_000, now + 5_000, now) == now
    for args, message in (((-1, now, now), "from_ms: must be >= 0"),
                          ((now, now, now), "to_ms: must be after from_ms"),
                          ((0, now + BACKFILL_CLOCK_SLACK_MS + 1, now), "to_ms: must not be "
                                                                        "after now"),
                          ((now, now + 1_000, now), "to_ms: from_ms")):
        with pytest.raises(ValidationError, match=message):
            validate_backfill_range(*args)


def test_queue_refs_and_breakers() -> None:
    from gnomon.node.core.model import CircuitBreaker
    from gnomon.node.spec.validate import validate_breaker, validate_queue_ref

    assert validate_queue_ref("", "etl") == ("default", "etl")
    with pytest.raises(ValidationError, match="tenant: must match"):
        validate_queue_ref("Acme", "etl")
    with pytest.raises(ValidationError, match="queue: must match"):
        validate_queue_ref("acme", "")
    limits = InputLimits(max_circuit_window_runs=5)
    validate_breaker(CircuitBreaker(5, 50, 1_000), "breaker", limits)
    with pytest.raises(ValidationError, match="breaker.window_runs: 6 exceeds"):
        validate_breaker(CircuitBreaker(6, 50, 1_000), "breaker", limits)
    with pytest.raises(ValidationError, match="breaker.cooldown_ms: must be >= 1000"):
        validate_breaker(CircuitBreaker(5, 50, 10), "breaker", limits)
