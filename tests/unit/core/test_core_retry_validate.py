"""retry.backoff_ms arithmetic and validate.validate_spec rules."""

from __future__ import annotations

import dataclasses
import math

import pytest

from gnomon.node.core.dag import graph
from gnomon.node.core.errors import Code
from gnomon.node.core.model import RetryPolicy
from gnomon.node.core.retry import (
    backoff_ms,
    effective_jitter,
    effective_max_attempts,
    effective_multiplier,
)
from gnomon.node.core.validate import find_cycle, validate_spec

NONE = -1.0


@pytest.mark.parametrize(
    "attempt, policy, draw, expected",
    [
        # Defaults: 1000 ms, x2, cap 60 s, jitter 0.2.
        (1, RetryPolicy(), 0.5, 1_000),
        (1, RetryPolicy(), 0.0, 800),
        (1, RetryPolicy(), 1.0, 1_200),
        (3, RetryPolicy(), 0.5, 4_000),
        (7, RetryPolicy(), 0.5, 60_000),
        (50, RetryPolicy(), 0.5, 60_000),
        (1, RetryPolicy(jitter=NONE), 0.0, 1_000),
        (2, RetryPolicy(initial_backoff_ms=100, multiplier=3.0, jitter=NONE), 0.9, 300),
        (4, RetryPolicy(initial_backoff_ms=100, max_backoff_ms=500, jitter=NONE), 0.9, 500),
        (2, RetryPolicy(jitter=1.0), 0.0, 0),
        (2, RetryPolicy(jitter=5.0), 1.0, 4_000),  # clamped to 1
        (2, RetryPolicy(multiplier=0.5, jitter=NONE), 0.5, 1_000),  # below 1 -> 1
        (0, RetryPolicy(jitter=NONE), 0.5, 1_000),  # attempt < 1 treated as 1
        (1, RetryPolicy(jitter=0.5), 7.0, 1_500),  # draw clamped to [0, 1]
        (1, RetryPolicy(jitter=0.5), math.nan, 500),
    ],
)
def test_backoff(attempt, policy, draw, expected):
    assert backoff_ms(attempt, policy, draw) == expected


@pytest.mark.parametrize(
    "policy, attempts, multiplier, jitter",
    [
        (RetryPolicy(), 3, 2.0, 0.2),
        (RetryPolicy(max_attempts=-4, multiplier=-1.0, jitter=-0.3), 3, 2.0, 0.0),
        (RetryPolicy(max_attempts=1, multiplier=1.5, jitter=0.7), 1, 1.5, 0.7),
        (RetryPolicy(multiplier=math.nan, jitter=math.nan), 3, 2.0, 0.0),
    ],
)
def test_effective_values(policy, attempts, multiplier, jitter):
    assert effective_max_attempts(policy) == attempts
    assert effective_multiplier(policy) == multiplier
    assert effective_jitter(policy) == jitter


@pytest.mark.parametrize(
    "dag, fragment",
    [
        ({"a": ["b"], "b": ["c"], "c": ["a"]}, "dependency cycle a -> b -> c -> a"),
        ({"x": [], "a": ["b"], "b": ["a"]}, "dependency cycle a -> b -> a"),
        ({"a": ["a"]}, "spec.tasks[0].depends_on: task 'a' depends on itself"),
        ({"a": [], "b": ["q"]}, "spec.tasks[1].depends_on: unknown task 'q'"),
        ({"a": [], "b": ["a", "a"]}, "spec.tasks[1].depends_on: 'a' is listed twice"),
    ],
)
def test_invalid_dags(h, dag, fragment):
    rejected = validate_spec(h.spec(dag))
    assert rejected is not None and rejected.code == Code.INVALID_ARGUMENT
    assert fragment in rejected.detail


def test_duplicate_names_and_empty(h):
    spec = h.spec({"a": []})
    dup = dataclasses.replace(spec, tasks=spec.tasks * 2)
    assert "spec.tasks[1].name: duplicate task name 'a' (also spec.tasks[0])" in (
        validate_spec(dup).detail
    )
    assert "at least one task" in validate_spec(dataclasses.replace(spec, tasks=())).detail


@pytest.mark.parametrize(
    "dag",
    [{"a": []}, {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}, {"z": ["y"], "y": []}],
)
def test_valid_dags(h, dag):
    assert validate_spec(h.spec(dag)) is None


def test_deep_chain_needs_no_recursion(h):
    dag = {f"t{i}": [f"t{i - 1}"] if i else [] for i in range(5_000)}
    assert validate_spec(h.spec(dag)) is None
    assert find_cycle({**{k: tuple(v) for k, v in dag.items()}, "t0": ("t4999",)})


def test_graph_views(h):
    g = graph(h.spec({"d": ["b", "c"], "b": ["a"], "c": ["a"], "a": [], "e": []}))
    assert g.order == ("a", "b", "c", "d", "e")
    assert g.dependents["a"] == ("b", "c")
    assert g.descendants("a") == ("b", "c", "d")
    assert g.descendants("e") == ()
    assert graph(h.spec({"d": ["b", "c"], "b": ["a"], "c": ["a"], "a": [], "e": []})) is g
