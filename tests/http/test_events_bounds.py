"""The per-stream bound of the event hub (node/api/http/events.py): ids beyond it turn into one
`resync`, so a client that does not read holds bounded memory."""

from gnomon.node.api.http.events import Subscriber


def test_changes_coalesce_and_overflow_into_one_resync():
    sub = Subscriber(max_ids=10)
    sub.add(["r1", "r2"], ["j1"])
    sub.add(["r1"], [])
    assert sub.take() == [("changes", {"runIds": ["r1", "r2"], "jobIds": ["j1"]})]
    for i in range(1000):
        sub.add([f"r{i}"], [])
    assert len(sub.runs) + len(sub.jobs) <= 10
    assert sub.take() == [("resync", {})]
    assert sub.take() == []
