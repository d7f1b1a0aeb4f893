"""The example specs in examples/ and the jobs `gnomon dev` creates are valid and served."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gnomon.client import CronDialect, CronSchedule
from gnomon.client.cli.dev import DEMO_QUEUE, EXAMPLE_JOBS, demo_tasks
from gnomon.client.cli.spec import load_spec_file, spec_from_data
from gnomon.client.cli.workers import load_task_modules

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SPEC_FILES = sorted(p for p in EXAMPLES.iterdir() if p.suffix in (".yaml", ".json"))


def test_there_are_examples():
    assert len(SPEC_FILES) >= 5


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.name)
def test_example_spec_parses(path):
    spec = load_spec_file(str(path))
    assert spec.name == path.stem
    names = {t.name for t in spec.tasks}
    assert all(set(t.depends_on) <= names for t in spec.tasks)


def test_python_examples_serve_their_specs():
    served = {(t.queue, t.name) for t in load_task_modules(["examples.tasks"])}
    for path in SPEC_FILES:
        spec = load_spec_file(str(path))
        if spec.tasks[0].queue == "examples":
            assert {(t.queue, t.name) for t in spec.tasks} <= served, path.name


def test_dev_examples_are_served_by_the_demo_worker():
    served = {(t.queue, t.name) for t in demo_tasks(io.StringIO())}
    specs = [spec_from_data(data) for data in EXAMPLE_JOBS]
    assert {t.queue for s in specs for t in s.tasks} == {DEMO_QUEUE}
    assert {(t.queue, t.name) for s in specs for t in s.tasks} == served
    dag = next(s for s in specs if len(s.tasks) > 1)
    # Fan-out and fan-in.
    assert sum(1 for t in dag.tasks if len(t.depends_on) > 1) == 1
    assert any(s.schedule == CronSchedule("* * * * * */5", dialect=CronDialect.SECONDS_LAST)
               for s in specs)
    flaky = next(s for s in specs if s.name == "flaky-export")
    assert flaky.tasks[0].retry.max_attempts == 3 and flaky.tasks[0].retry.initial_backoff_ms <= 500
