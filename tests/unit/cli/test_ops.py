"""The operator's CLI helpers on their own: server address checks, idle-queue warnings, spec
documents from export and from `job get --json`, the new commands in the parser."""

from __future__ import annotations

import json

import pytest

from gnomon.client.cli.ops import (
    QueueInfoLike,
    check_servers,
    idle_queue_warnings,
    job_document_spec,
    read_spec_documents,
)
from gnomon.client.cli.parser import build_parser
from gnomon.client.cli.values import UsageError


@pytest.mark.parametrize("good", ["127.0.0.1:7701", "a:1,b:2", "node-1.example:65535", "[::1]:7701"])
def test_server_addresses_that_are_fine(good):
    assert check_servers(good) == good


@pytest.mark.parametrize("bad", ["localhost", "http://127.0.0.1:7701", "grpc://h:1", "h:0",
                                 "h:99999", "h:port", ":7701", "a:1,"])
def test_server_addresses_that_are_usage_errors(bad):
    with pytest.raises(UsageError, match="host:port"):
        check_servers(bad)


def test_idle_queue_warning_names_only_queues_with_ready_tasks_and_no_worker():
    queues = [QueueInfoLike("a", ready=2, workers=()), QueueInfoLike("b", ready=0, workers=()),
              QueueInfoLike("c", ready=5, workers=("w1",))]
    lines = idle_queue_warnings(queues)
    assert len(lines) == 1 and "'a'" in lines[0] and "2 ready" in lines[0]


def test_spec_documents_take_a_job_get_json_document_by_its_spec(tmp_path):
    doc = {"job_id": "j1", "version": 3, "spec": {"name": "x", "schedule": {"interval_ms": 1000},
                                                  "task": {"queue": "q"}}}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(doc))
    assert read_spec_documents(str(path)) == [doc["spec"]]
    spec = job_document_spec(str(path), None)
    assert spec.name == "x" and spec.tasks[0].queue == "q"
    plain = tmp_path / "spec.yaml"
    plain.write_text("name: y\nschedule: {interval_ms: 1000}\n")
    assert job_document_spec(str(plain), None) is None


@pytest.mark.parametrize("argv", [
    ["cluster", "transfer-leader", "--to", "n2"], ["cluster", "transfer-leader"],
    ["backup", "create", "f.backup"], ["job", "export", "--tenant", "t", "-o", "x.yaml"],
    ["job", "import", "x.yaml", "--dry-run"], ["run", "active", "--limit", "5"],
    ["queue", "list"], ["worker", "list"],
])
def test_operator_commands_parse(argv):
    args = build_parser().parse_args(argv)
    assert args.group == argv[0]


class _Recorder:
    def __init__(self) -> None:
        self.seen: list[float | None] = []

    def list_jobs(self, *, timeout_s: float | None = None) -> str:
        self.seen.append(timeout_s)
        return "jobs"

    def wait_run(self, run_id: str, *, timeout_s: float = 300.0) -> float:
        return timeout_s

    def close(self) -> None:
        self.seen.append(-1)


def test_the_whole_command_is_bounded_by_timeout():
    from gnomon.client import DeadlineExceeded
    from gnomon.client.cli.ops import DeadlineClient

    rec = _Recorder()
    client = DeadlineClient(rec, 30.0)
    assert client.list_jobs() == "jobs" and 0 < rec.seen[0] <= 30.0
    assert client.list_jobs(timeout_s=1.0) == "jobs" and rec.seen[1] == 1.0
    assert client.wait_run("r") == 300.0  # --wait-timeout bounds waits, not --timeout
    client.close()
    assert rec.seen[-1] == -1
    spent = DeadlineClient(_Recorder(), 0.0)
    with pytest.raises(DeadlineExceeded, match="--timeout"):
        spent.list_jobs()


def test_a_wait_longer_than_timeout_leaves_the_call_after_it_a_fresh_timeout(monkeypatch):
    """`job trigger X --wait` exited 3 ("--timeout 10s passed before the command's next
    call") whenever the wait outlived --timeout: the run read after the wait had no time."""
    import time

    from gnomon.client import DeadlineExceeded
    from gnomon.client.cli.ops import DeadlineClient

    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])

    class Slow(_Recorder):
        def wait_run(self, run_id: str, *, timeout_s: float = 300.0) -> float:
            now[0] += timeout_s  # the whole --wait-timeout passes
            raise DeadlineExceeded("run still running")

    rec = Slow()
    client = DeadlineClient(rec, 10.0)
    with pytest.raises(DeadlineExceeded):
        client.wait_run("r", timeout_s=300.0)
    assert client.list_jobs() == "jobs" and rec.seen == [10.0]
