"""Batching on the worker stream (issue 14): what the node's writer merges into ServerBatch
and what the SDK merges into Reports; order kept, bounds by count and bytes, nothing else
merged."""

from __future__ import annotations

import asyncio

from gnomon.client.worker.stream import _MAX_REPORTS_PER_MESSAGE, _as_reports
from gnomon.node.api.grpc import worker as ws
from gnomon.v1 import worker_pb2 as W


def _assign(token: int, payload: bytes = b"") -> W.ServerMessage:
    return W.ServerMessage(assign=W.Assign(lease=W.LeaseRef(fencing_token=token),
                                           payload=payload))


def _ack(token: int) -> W.ServerMessage:
    return W.ServerMessage(report_ack=W.ReportAck(lease=W.LeaseRef(fencing_token=token)))


def _queue(*msgs) -> asyncio.Queue:
    q: asyncio.Queue = asyncio.Queue()
    for m in msgs:
        q.put_nowait(m)
    return q


def _tokens(msg: W.ServerMessage) -> list[int]:
    if msg.HasField("batch"):
        return ([a.lease.fencing_token for a in msg.batch.assigns]
                + [a.lease.fencing_token for a in msg.batch.report_acks])
    return [getattr(msg, msg.WhichOneof("msg")).lease.fencing_token]


def test_queued_assigns_and_acks_merge_and_a_cancel_keeps_its_place():
    cancel = W.ServerMessage(cancel=W.Cancel(lease=W.LeaseRef(fencing_token=9)))
    out = ws._drain(_assign(1), _queue(_ack(2), _assign(3), cancel, _assign(4)))
    assert [m.WhichOneof("msg") for m in out] == ["batch", "cancel", "assign"]
    assert _tokens(out[0]) == [1, 3, 2]  # the assigns, then the acks
    assert _tokens(out[2]) == [4]


def test_a_lone_message_is_sent_as_it_is_and_none_ends_the_list():
    assert ws._drain(_assign(1), _queue()) == [_assign(1)]
    out = ws._drain(_assign(1), _queue(_assign(2), None, _assign(3)))
    assert out[-1] is None and [m.WhichOneof("msg") for m in out[:-1]] == ["batch"]


def test_batches_are_bounded_by_count_and_by_bytes():
    n = ws.MAX_BATCH_MESSAGES + 3
    out = ws._drain(_assign(0), _queue(*(_assign(i) for i in range(1, n))))
    assert [len(_tokens(m)) for m in out] == [ws.MAX_BATCH_MESSAGES, 3]
    big = ws.MAX_BATCH_BYTES // 3
    out = ws._drain(_assign(0, b"x" * big), _queue(*(_assign(i, b"x" * big) for i in (1, 2, 3))))
    assert all(m.ByteSize() <= ws.MAX_BATCH_BYTES + 100 for m in out)
    assert sum(len(_tokens(m)) for m in out) == 4 and len(out) == 2


def _complete(token: int, result: bytes = b"") -> W.WorkerMessage:
    return W.WorkerMessage(complete=W.Complete(lease=W.LeaseRef(fencing_token=token),
                                               result=result))


def test_sdk_reports_merge_completes_and_fails_within_bounds():
    fail = W.WorkerMessage(fail=W.Fail(lease=W.LeaseRef(fencing_token=7), error="e"))
    assert _as_reports([_complete(1)]) == [_complete(1)]
    (merged,) = _as_reports([_complete(1), fail, _complete(2)])
    assert [c.lease.fencing_token for c in merged.reports.completes] == [1, 2]
    assert [f.lease.fencing_token for f in merged.reports.fails] == [7]
    many = _as_reports([_complete(i) for i in range(_MAX_REPORTS_PER_MESSAGE + 1)])
    assert [len(m.reports.completes) or 1 for m in many] == [_MAX_REPORTS_PER_MESSAGE, 1]
    big = _as_reports([_complete(i, b"r" * 400_000) for i in range(5)])
    assert len(big) == 3 and all(m.ByteSize() < (1 << 20) + 1000 for m in big)
