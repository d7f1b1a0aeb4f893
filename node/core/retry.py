"""Retry policy arithmetic: effective values and the backoff of a failed attempt. Pure."""

from __future__ import annotations

from gnomon.node.core.model import (
    DEFAULT_INITIAL_BACKOFF_MS,
    DEFAULT_JITTER,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_BACKOFF_MS,
    DEFAULT_MULTIPLIER,
    RetryPolicy,
)


def effective_max_attempts(policy: RetryPolicy) -> int:
    """Attempts in total, including the first (0 or less means the default)."""
    return policy.max_attempts if policy.max_attempts > 0 else DEFAULT_MAX_ATTEMPTS


def effective_initial_backoff_ms(policy: RetryPolicy) -> int:
    return policy.initial_backoff_ms if policy.initial_backoff_ms > 0 else DEFAULT_INITIAL_BACKOFF_MS


def effective_max_backoff_ms(policy: RetryPolicy) -> int:
    return policy.max_backoff_ms if policy.max_backoff_ms > 0 else DEFAULT_MAX_BACKOFF_MS


def effective_multiplier(policy: RetryPolicy) -> float:
    """0 (or nonsense) means the default; below 1 is clamped to 1 so backoff never shrinks."""
    value = policy.multiplier
    if not value > 0.0:  # also catches NaN
        return DEFAULT_MULTIPLIER
    return max(value, 1.0)


def effective_jitter(policy: RetryPolicy) -> float:
    """0 means the default, negative means none; clamped to [0, 1]."""
    value = policy.jitter
    if value == 0.0:
        return DEFAULT_JITTER
    return _clamp01(value)


def backoff_ms(attempt: int, policy: RetryPolicy, jitter_draw: float) -> int:
    """Delay before the retry that follows failed attempt `attempt` (1-based).

    min(initial * multiplier**(attempt-1), max) scaled by 1 - j + 2*j*draw.
    """
    cap = float(effective_max_backoff_ms(policy))
    base = _capped_power(float(effective_initial_backoff_ms(policy)), effective_multiplier(policy),
                         max(attempt, 1) - 1, cap)
    jitter = effective_jitter(policy)
    factor = 1.0 - jitter + 2.0 * jitter * _clamp01(jitter_draw)
    return max(int(base * factor), 0)


def _capped_power(initial: float, multiplier: float, exponent: int, cap: float) -> float:
    # Repeated IEEE multiplication instead of `**`: libm's pow may differ in the last bit
    # between builds, and int() truncation would turn that into diverging replicas.
    value = initial
    for _ in range(exponent):
        if value >= cap:
            break
        value *= multiplier
    return min(value, cap)


def _clamp01(value: float) -> float:
    if not value >= 0.0:  # negative or NaN
        return 0.0
    return min(value, 1.0)
