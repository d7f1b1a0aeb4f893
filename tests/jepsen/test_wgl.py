"""Known-answer tests of the linearizability checker (WGL + P-compositionality) and of the
register model it runs with: histories that are and are not linearizable."""

from __future__ import annotations

from gnomon.jepsen.checkers import register, wgl
from gnomon.jepsen.checkers.register import RegisterModel
from gnomon.jepsen.history import History

U = wgl.UNKNOWN


def ops(*rows):
    """rows: (call, ret or None, input, output)."""
    return [wgl.Operation(i, c, r, inp, out) for i, (c, r, inp, out) in enumerate(rows)]


def check(*rows):
    return wgl.check(RegisterModel(), ops(*rows)).valid


# -- good histories ---------------------------------------------------------------------------


def test_sequential_history_is_linearizable():
    assert check(
        (0, 1, ("create", 1), ("ok", 1)),
        (2, 3, ("read",), ("ok", (1, 1))),
        (4, 5, ("update", 2, 1), ("ok", 2)),
        (6, 7, ("read",), ("ok", (2, 2))),
        (8, 9, ("delete", 0), ("ok",)),
        (10, 11, ("read",), ("fail", "not-found")),
    )


def test_concurrent_reads_may_see_either_side_of_a_write():
    # The update overlaps both reads: one sees the old value, one the new, in an order
    # that real time allows.
    assert check(
        (0, 1, ("create", 1), ("ok", 1)),
        (2, 9, ("update", 2, 0), ("ok", 2)),
        (3, 4, ("read",), ("ok", (1, 1))),
        (5, 6, ("read",), ("ok", (2, 2))),
    )


def test_unknown_outcome_may_have_happened():
    assert check(
        (0, 1, ("create", 1), ("ok", 1)),
        (2, None, ("update", 5, 0), U),
        (10, 11, ("read",), ("ok", (5, 2))),
    )


def test_unknown_outcome_may_never_happen():
    assert check(
        (0, 1, ("create", 1), ("ok", 1)),
        (2, None, ("update", 5, 0), U),
        (10, 11, ("read",), ("ok", (1, 1))),
        (12, 13, ("read",), ("ok", (1, 1))),
    )


def test_unknown_outcome_takes_effect_late():
    # Invoked before the first read, visible only after it: still linearizable.
    assert check(
        (0, 1, ("create", 1), ("ok", 1)),
        (2, None, ("update", 5, 0), U),
        (3, 4, ("read",), ("ok", (1, 1))),
        (5, 6, ("read",), ("ok", (5, 2))),
    )


def test_business_rejections_are_results_the_model_explains():
    assert check(
        (0, 1, ("update", 3, 0), ("fail", "not-found")),
        (2, 3, ("create", 1), ("ok", 1)),
        (4, 5, ("create", 2), ("fail", "already-exists")),
        (6, 7, ("update", 3, 7), ("fail", "conflict")),
        (8, 9, ("read",), ("ok", (1, 1))),
    )


def test_concurrent_creates_one_wins():
    assert check(
        (0, 5, ("create", 1), ("ok", 1)),
        (1, 6, ("create", 2), ("fail", "already-exists")),
        (7, 8, ("read",), ("ok", (1, 1))),
    )


# -- bad histories ----------------------------------------------------------------------------


def test_stale_read_after_acknowledged_write_is_caught():
    res = wgl.check(RegisterModel(), ops(
        (0, 1, ("create", 1), ("ok", 1)),
        (2, 3, ("update", 2, 0), ("ok", 2)),
        (4, 5, ("read",), ("ok", (1, 1))),
    ))
    assert res.valid is False
    assert res.stuck and res.stuck[0].input == ("read",)


def test_lost_update_is_caught():
    assert check(
        (0, 1, ("create", 1), ("ok", 1)),
        (2, 3, ("update", 2, 1), ("ok", 2)),
        (4, 5, ("update", 3, 1), ("ok", 2)),  # both CAS on version 1 succeeded
    ) is False


def test_request_applied_twice_is_caught():
    # One acknowledged update, but the version moved by two.
    assert check(
        (0, 1, ("create", 1), ("ok", 1)),
        (2, 3, ("update", 2, 0), ("ok", 2)),
        (4, 5, ("read",), ("ok", (2, 3))),
    ) is False


def test_write_reported_with_another_writers_version_is_caught():
    # Seen on gnomon: two concurrent updates both answered with the later one's version.
    assert check(
        (0, 1, ("create", 31), ("ok", 1)),
        (2, 3, ("update", 45, 0), ("ok", 2)),
        (4, 8, ("update", 46, 0), ("ok", 4)),
        (5, 9, ("update", 47, 0), ("ok", 4)),
        (10, 11, ("read",), ("ok", (46, 4))),
    ) is False


def test_not_found_for_a_job_that_exists_is_caught():
    # Seen on gnomon: a stale node resolved the name and answered NOT_FOUND.
    assert check(
        (0, 1, ("create", 200), ("ok", 1)),
        (2, 3, ("update", 204, 0), ("ok", 2)),
        (4, 5, ("update", 209, 0), ("fail", "not-found")),
    ) is False


def test_real_time_order_is_respected():
    # The read started after the delete finished: it cannot see the value.
    assert check(
        (0, 1, ("create", 1), ("ok", 1)),
        (2, 3, ("delete", 0), ("ok",)),
        (4, 5, ("read",), ("ok", (1, 1))),
    ) is False


# -- P-compositionality and the history adapter -----------------------------------------------


def test_keys_are_checked_independently():
    good = ops((0, 1, ("create", 1), ("ok", 1)), (2, 3, ("read",), ("ok", (1, 1))))
    bad = ops((0, 1, ("create", 1), ("ok", 1)), (2, 3, ("read",), ("fail", "not-found")))
    results = wgl.check_keys(lambda _k: RegisterModel(), {"a": good, "b": bad})
    assert results["a"].valid is True
    assert results["b"].valid is False


def test_search_budget_gives_unknown_not_a_verdict():
    many = [(i, None, ("update", i, 0), U) for i in range(1, 40)]
    rows = [(0, 100, ("create", 0), ("ok", 1)), *many, (200, 201, ("read",), ("ok", (7, 9)))]
    assert wgl.check(RegisterModel(), ops(*rows), max_explored=500).valid is None


def _history(events):
    h = History()
    for process, typ, f, value, error in events:
        h.append(process, typ, f, value, error=error, workload="register")
    return h.snapshot()


def test_register_checker_reads_a_history():
    events = _history([
        (0, "invoke", "create", {"key": "k", "value": 1}, None),
        (0, "ok", "create", {"job_id": "j1", "version": 1}, None),
        (1, "invoke", "update", {"key": "k", "value": 2, "expected_version": 0}, None),
        (1, "info", "update", None, "deadline-exceeded"),
        (0, "invoke", "read", {"key": "k"}, None),
        (0, "ok", "read", {"job_id": "j1", "version": 2, "value": 2}, None),
        (2, "invoke", "read", {"key": "k"}, None),
        (2, "fail", "read", None, "unavailable"),
    ])
    result = register.check(events)
    assert result["valid"] is True
    assert result["stats"]["unknown_outcomes"] == 1


def test_register_checker_reports_evidence():
    events = _history([
        (0, "invoke", "create", {"key": "k", "value": 1}, None),
        (0, "ok", "create", {"job_id": "j1", "version": 1}, None),
        (0, "invoke", "update", {"key": "k", "value": 2, "expected_version": 0}, None),
        (0, "ok", "update", {"job_id": "j1", "version": 2, "value": 2}, None),
        (1, "invoke", "read", {"key": "k"}, None),
        (1, "ok", "read", {"job_id": "j1", "version": 1, "value": 1}, None),
    ])
    result = register.check(events)
    assert result["valid"] is False
    (anomaly,) = result["anomalies"]
    assert anomaly["key"] == "k"
    assert anomaly["stuck"]["f"] == "read"
