"""Node observability pieces on their own: the pending-proposals gauge, the per-entry counters,
one log record per line."""

from __future__ import annotations

import dataclasses
import json
import logging

from gnomon.node.config import Config
from gnomon.node.core import commands as c
from gnomon.node.core.apply import new_state
from gnomon.node.core.errors import Rejected
from gnomon.node.core.results import Effects
from gnomon.node.local.cluster import wait_for_async
from gnomon.node.ops import logs, metrics
from gnomon.node.ops.observe import EntryCounter
from gnomon.node.raft.proposer import Proposer


class _SilentRaft:
    """Accepts entries and never commits them."""

    def __init__(self) -> None:
        self.sent = 0

    def submit(self, data, callback) -> None:
        self.sent += 1


async def test_pending_proposals_gauge_reads_the_proposer_queue():
    raft = _SilentRaft()
    proposer = Proposer(raft, dataclasses.replace(Config(), max_inflight_batches=1,
                                                  commit_timeout_ms=60_000),
                        lambda _mono: None)
    metrics.PENDING_PROPOSALS.set_function(proposer.pending)
    proposer.start()
    try:
        import asyncio

        first = asyncio.ensure_future(proposer.propose(c.Barrier()))
        await wait_for_async(lambda: raft.sent == 1, timeout_s=5, what="first entry sent")
        rest = [asyncio.ensure_future(proposer.propose(c.Barrier())) for _ in range(3)]
        await wait_for_async(lambda: proposer.pending() == 3, timeout_s=5, what="3 waiting")
        assert metrics.REGISTRY.get_sample_value("gnomon_pending_proposals") == 3
        for fut in [first, *rest]:
            fut.cancel()
    finally:
        await proposer.stop()
    assert metrics.REGISTRY.get_sample_value("gnomon_pending_proposals") == 0


def test_entry_counter_counts_commands_rejections_and_batch_size():
    def value(name, **labels):
        return metrics.REGISTRY.get_sample_value(name, labels) or 0

    before = (value("gnomon_commands_total", command="Barrier"),
              value("gnomon_rejected_total", code="NOT_FOUND"),
              value("gnomon_batch_commands_count"), value("gnomon_batch_commands_sum"))
    batch = c.Batch(now_ms=1, commands=(c.Barrier(), c.Barrier()))
    EntryCounter().applied(new_state(), batch, [None, Rejected("NOT_FOUND", "x")], Effects())
    assert value("gnomon_commands_total", command="Barrier") == before[0] + 2
    assert value("gnomon_rejected_total", code="NOT_FOUND") == before[1] + 1
    assert value("gnomon_batch_commands_count") == before[2] + 1
    assert value("gnomon_batch_commands_sum") == before[3] + 2


def _record(msg: str, *, exc: bool = False, **extra) -> logging.LogRecord:
    try:
        raise ValueError("line one\nline two")
    except ValueError:
        import sys

        info = sys.exc_info() if exc else None
    record = logging.LogRecord("gnomon.node.test", logging.WARNING, __file__, 1, msg, (), info)
    record.__dict__.update(extra)
    record.node = "n1"
    return record


def test_text_and_json_records_are_one_line_with_their_fields():
    record = _record("first\nsecond", exc=True, term=3, **logs.fields(job="j1", run="j1@5",
                                                                       token=7))
    text = logs.TextFormatter().format(record)
    assert "\n" not in text
    assert " n1 WARNING gnomon.node.test: first | second term=3 job=j1 run=j1@5 token=7" in text
    assert "line two" in text
    line = logs.JsonFormatter().format(record)
    assert "\n" not in line
    event = json.loads(line)
    assert event["node"] == "n1" and event["term"] == 3 and event["job"] == "j1"
    assert event["run"] == "j1@5" and event["token"] == 7 and "line two" in event["exc"]
    assert event["level"] == "warning" and event["msg"] == "first\nsecond"


def test_dev_screen_lines_from_many_threads_never_share_a_line():
    import io
    import threading

    from gnomon.client.cli.dev import write_line

    out = io.StringIO()

    def writer(i: int) -> None:
        for j in range(300):
            write_line(out, f"record {i}-{j} " + "x" * 50)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = out.getvalue().splitlines()
    assert len(lines) == 8 * 300
    assert all(line.startswith("record ") and line.count("record") == 1 for line in lines)


def test_native_stderr_writes_become_records_one_json_event_per_line():
    import subprocess
    import sys

    code = ("from gnomon.node.ops import logs; logs.configure('n1', 'json')\n"
            "import logging, os, sys\n"
            "os.write(2, b'core: a line from C\\n')\n"
            "print('Traceback (most recent call last):\\n  File x', file=sys.stderr)\n"
            "sys.stderr.flush()\n"
            "logging.getLogger('gnomon.test').info('after')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30)
    events = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    native = [e["msg"] for e in events if e["logger"] == "native"]
    assert "core: a line from C" in native and "  File x" in native
    assert all(e["node"] == "n1" for e in events)


def test_the_per_job_gauges_scan_every_scrape_only_below_the_bound(monkeypatch):
    """A scrape counts breakers and backfills by walking every job: exact on each scrape
    for small states, at most once per jobs / JOB_SCAN_EXACT seconds for large ones."""
    from gnomon.node.ops import observe

    now = [1_000_000]
    monkeypatch.setattr(observe, "mono_ms", lambda: now[0])
    collector = observe.StateCollector(node=None)
    small, large = observe.JOB_SCAN_EXACT - 1, 10 * observe.JOB_SCAN_EXACT
    assert collector._job_counts_due(large)  # never counted yet
    collector._job_counts_ms = now[0]
    assert collector._job_counts_due(small)
    assert not collector._job_counts_due(large)
    now[0] += 9_999
    assert not collector._job_counts_due(large)
    now[0] += 1
    assert collector._job_counts_due(large)
