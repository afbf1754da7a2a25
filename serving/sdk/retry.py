"""The client retry policy's arithmetic: backoff with full jitter, ``Retry-After``, what is retryable.

Position: serving (task SDK; the load runner uses it through the client). The policy itself is
``serving.plans.RetryPolicy`` (shared with the virtual-time simulator so both drivers behave alike).

Formula: attempt ``n`` (1 = first retry) sleeps ``uniform(0, min(backoff_max_s, backoff_base_s * 2**(n-1)))``
— "full jitter" from the AWS Architecture Blog, "Exponential Backoff And Jitter" (2015), which
spreads synchronized retries best. A server's ``Retry-After`` (RFC 9110 §10.2.3: delay-seconds or
an HTTP-date) is a floor on that sleep.
"""

from __future__ import annotations

import email.utils
import random
import time

from serving.plans import RetryPolicy

__all__ = ["RetryPolicy", "backoff_s", "parse_retry_after", "is_retryable_status"]


def backoff_s(policy: RetryPolicy, retry_number: int, rng: random.Random | None = None, retry_after_s: float | None = None) -> float:
    """Seconds to sleep before retry number ``retry_number`` (1 = the first retry).

    Full jitter: ``uniform(0, min(backoff_max_s, backoff_base_s * 2**(retry_number-1)))``, then at
    least ``retry_after_s`` when the server sent ``Retry-After``. Raises ValueError if retry_number < 1.
    """
    if retry_number < 1:
        raise ValueError(f"retry_number must be >= 1, got {retry_number}")
    cap = min(policy.backoff_max_s, policy.backoff_base_s * (2 ** (retry_number - 1)))
    sleep = (rng or random).uniform(0.0, cap) if cap > 0 else 0.0
    if retry_after_s is not None:
        sleep = max(sleep, retry_after_s)
    return sleep


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` header value -> seconds to wait (>= 0), or None if absent or unparseable.

    Accepts delay-seconds (``"2"``, also a float ``"0.5"``) or an HTTP-date (RFC 9110 §10.2.3).
    """
    if not value:
        return None
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)


def is_retryable_status(policy: RetryPolicy, status: int) -> bool:
    """True for the statuses the policy retries (default 429 and 5xx gateway/server errors)."""
    return status in policy.retry_on_status
