"""Retry budget: retries may not exceed a fraction of requests over a sliding window.

Position: serving (gateway). Why: with per-request retries alone, one degraded replica turns every
failure into 2-3 requests and the fleet into a retry storm (the sustaining effect of metastable
failures, OSDI'22 "Metastable Failures in the Wild"). A budget caps the amplification at
``1 + ratio``. Same design as Finagle's ``RetryBudget`` (deposit per request, withdraw per retry)
and Envoy's ``retry_budget``; the window is exact (timestamps in deques), not a token bucket.
"""

from __future__ import annotations

import time
from collections import deque


class RetryBudget:
    """Allow a retry iff ``retries_in_window + 1 <= min_retries + ratio * requests_in_window``.

    ratio: fraction of requests that may be retried (0.1 = 10%). window_s: sliding window,
    seconds. min_retries: retries always allowed per window. clock: monotonic seconds (tests).
    """

    def __init__(self, ratio: float = 0.1, window_s: float = 10.0, min_retries: int = 3, clock=time.monotonic):
        self.ratio = ratio
        self.window_s = window_s
        self.min_retries = min_retries
        self._clock = clock
        self._requests: deque[float] = deque()
        self._retries: deque[float] = deque()
        self.denied = 0

    def _trim(self, now: float) -> None:
        cutoff = now - self.window_s
        for q in (self._requests, self._retries):
            while q and q[0] < cutoff:
                q.popleft()

    def record_request(self) -> None:
        """A new client request arrived (a deposit)."""
        now = self._clock()
        self._requests.append(now)
        self._trim(now)

    def try_retry(self) -> bool:
        """Withdraw one retry if the budget allows it; False (and ``denied`` += 1) otherwise."""
        now = self._clock()
        self._trim(now)
        if len(self._retries) + 1 <= self.min_retries + self.ratio * len(self._requests):
            self._retries.append(now)
            return True
        self.denied += 1
        return False

    @property
    def window_counts(self) -> tuple[int, int]:
        """(requests, retries) currently in the window."""
        self._trim(self._clock())
        return len(self._requests), len(self._retries)
