"""Named queries of the weekly review (``review_*.sql``): the measurements behind its levers.

The review's cost figures come from ``schema.queries.cost`` (the cost job's own queries); this
module adds what only the review asks: prefix-cache hit rates (lever "avoid"), batch occupancy
and queue depth (levers "share", "delay"), per-replica engine load (lever "move") and the
gateway's routing / admission mix. Periods are [start, end) in UTC; datetimes may be naive (UTC)
or aware. Every function returns a pandas DataFrame (columns documented below), empty when the
period has no data; raises the store's typed errors (StoreQueryError, StoreUnavailable).
"""

from __future__ import annotations

from datetime import datetime, timezone

from schema import queries


def _utc(t: datetime) -> datetime:
    """Naive UTC for the driver (clickhouse-connect binds naive datetimes as given)."""
    if t.tzinfo is not None:
        t = t.astimezone(timezone.utc).replace(tzinfo=None)
    return t


def prefix_cache(store, start: datetime, end: datetime):
    """Per replica: ``replica``, ``hit_tokens``, ``query_tokens`` (tokens, increase of vLLM's
    ``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries`` counters in the period)."""
    return queries.run(store, "review_prefix_cache", start=_utc(start), end=_utc(end))


def batch_occupancy(store, start: datetime, end: datetime):
    """Per replica: ``replica``, ``gpu_type``, ``running_mean|p95|max`` (requests in the running
    batch, ``vllm:num_requests_running``), ``waiting_mean|p95|max`` (queued requests,
    ``vllm:num_requests_waiting``), ``running_points``, ``waiting_points`` (gauge points)."""
    return queries.run(store, "review_batch_occupancy", start=_utc(start), end=_utc(end))


def engine_load(store, start: datetime, end: datetime, queue_threshold_s: float = 1.0):
    """Per replica: ``replica``, ``model_name``, ``gpu``, ``requests``, ``prompt_tok``,
    ``uncached_prompt_tok``, ``output_tok`` (tokens), ``busy_s`` (sum of e2e seconds),
    ``queue_mean_s``, ``queue_p95_s`` (seconds in the engine queue), ``queued_over_threshold``
    (requests queued longer than ``queue_threshold_s`` seconds)."""
    return queries.run(store, "review_engine_load", start=_utc(start), end=_utc(end),
                       queue_threshold_s=float(queue_threshold_s))


def routing(store, start: datetime, end: datetime):
    """Rows of ``kind`` 'policy' (``name`` = gateway.policy, ``n`` attempts, ``replicas`` used,
    ``failed`` attempts) and 'admission' (``name`` = admitted|rejected, ``n`` gateway requests)."""
    return queries.run(store, "review_routing", start=_utc(start), end=_utc(end))
