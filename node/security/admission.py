"""Admission control: per-tenant API rate limits (node/security/DESIGN.md).

A token bucket per tenant with `api_rate_per_s` set (tenant records, replicated): a call that
finds the bucket empty is answered RESOURCE_EXHAUSTED with a `retry-after-ms` trailer saying
when a token will be there; the SDK waits that long and retries within its deadline. Each
node keeps its own buckets (calls are answered where they arrive; writes all arrive at the
leader). Only the loop thread touches them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["RETRY_AFTER_KEY", "RateLimiter"]

RETRY_AFTER_KEY = "retry-after-ms"


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at_s: float


class RateLimiter:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._buckets: dict[str, _Bucket] = {}
        self._clock = clock

    def take(self, tenant: str, rate_per_s: int, burst: int) -> int:
        """0 if a call of `tenant` may go now (one token taken), else the ms until it may."""
        if rate_per_s <= 0:
            return 0
        capacity = float(burst or rate_per_s)
        now = self._clock()
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = _Bucket(capacity, now)
        bucket.tokens = min(capacity, bucket.tokens + (now - bucket.at_s) * rate_per_s)
        bucket.at_s = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0
        return max(1, int((1.0 - bucket.tokens) / rate_per_s * 1000) + 1)
