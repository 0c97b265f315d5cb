"""Per-principal back-pressure: a token bucket on calls per second, and a cap on calls in flight.

A call over either limit is refused at once with RATE_LIMIT (retryable, `details.retry_after_s`), before
it is authorized or touches the log: nothing is written, and one busy agent cannot starve the others
sharing a gateway. Refusing (not queueing) keeps every wait bounded; the client backs off and retries.
The counters feed the gateway's heartbeat (`mneme status`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from mneme.errors import RateLimited


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float
    in_flight: int = 0


@dataclass
class Limits:
    rate: float = 0.0  # calls per second per principal (0: no rate limit)
    burst: int = 0  # the bucket's size (calls a principal may make at once after being idle)
    max_in_flight: int = 0  # calls per principal running at the same time (0: no cap)
    _buckets: dict[str, _Bucket] = field(default_factory=dict)
    refused: int = 0
    in_flight: int = 0
    calls: int = 0

    def acquire(self, principal: str) -> None:
        """Take a slot for one call of `principal`, or raise RateLimited; `release` gives the slot back."""
        now = time.monotonic()
        b = self._buckets.get(principal)
        if b is None:
            b = self._buckets[principal] = _Bucket(tokens=float(self.burst or 1), at=now)
        if self.max_in_flight and b.in_flight >= self.max_in_flight:
            self.refused += 1
            raise RateLimited(
                f"{principal} has {b.in_flight} calls in flight, the most this gateway runs at once for one "
                "principal: wait for one to finish",
                retry_after=0.05,
                limit={"max_in_flight": self.max_in_flight},
            )
        if self.rate > 0:
            b.tokens = min(float(self.burst or 1), b.tokens + (now - b.at) * self.rate)
            b.at = now
            if b.tokens < 1.0:
                self.refused += 1
                raise RateLimited(
                    f"{principal} is over its rate limit of {self.rate:g} calls per second (burst {self.burst})",
                    retry_after=round((1.0 - b.tokens) / self.rate, 3),
                    limit={"calls_per_second": self.rate, "burst": self.burst},
                )
            b.tokens -= 1.0
        b.in_flight += 1
        self.in_flight += 1
        self.calls += 1

    def release(self, principal: str) -> None:
        b = self._buckets.get(principal)
        if b is not None and b.in_flight > 0:
            b.in_flight -= 1
            self.in_flight -= 1
            if b.in_flight == 0 and self.rate > 0 and b.tokens >= (self.burst or 1):
                del self._buckets[principal]  # idle and full: forget it (a bounded table, whatever the principals)
