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


# --- over the cost job's tables (call_costs, replica_minutes, tasks) ------------------------------

_EMPTY_COLUMNS = {
    "review_gpu_hours": ("grp", "priced_allocated_usd", "gpu_hours"),
    "review_prefill_cost": ("replica", "allocated_usd", "prefill_usd", "prompt_tok", "cached_tok"),
    "review_waste_errors": ("error_type", "usd", "calls"),
}


def _run_cols(store, name: str, **params):
    # chDB returns a column-less DataFrame for zero rows; give readers the documented columns.
    import pandas as pd

    df = queries.run(store, name, **params)
    if len(df.columns) == 0 and name in _EMPTY_COLUMNS:
        df = pd.DataFrame(columns=list(_EMPTY_COLUMNS[name]))
    return df


def gpu_hours(store, start: datetime, end: datetime, by: str | None = None):
    """GPU-hours behind each group's allocated cost: ``grp``, ``priced_allocated_usd`` (USD),
    ``gpu_hours`` (sum of cost / USD-per-GPU-hour of the replica-minute). ``by``: None (fleet,
    ``grp`` = ''), ``task_type``, ``tenant`` or ``model``. Raises ValueError for another ``by``."""
    by = by or ""
    if by not in ("", "task_type", "tenant", "model"):
        raise ValueError(f"cannot group GPU-hours by {by!r}; accepted: task_type, tenant, model")
    return _run_cols(store, "review_gpu_hours", start=_utc(start), end=_utc(end), by=by)


def top_tasks(store, start: datetime, end: datetime, limit: int = 10, failed_only: bool = False):
    """The most expensive tasks that ended in the period, with ``schema.queries.cost.tasks_table``'s
    columns (``task_id``, ``cost_usd`` USD, ``outcome``, ...); ``failed_only`` keeps failure and
    abandoned. Raises ValueError when ``limit`` is outside 1..1000."""
    from schema.queries.cost import COLUMNS

    limit = int(limit)
    if not 1 <= limit <= 1000:
        raise ValueError(f"limit must be in 1..1000, got {limit}")
    df = queries.run(store, "review_top_tasks", start=_utc(start), end=_utc(end), limit=limit,
                     failed_only=1 if failed_only else 0)
    if len(df.columns) == 0:
        import pandas as pd

        df = pd.DataFrame(columns=list(COLUMNS["tasks_table"]))
    return df


def prefill_cost(store, start: datetime, end: datetime):
    """Per replica: ``replica``, ``allocated_usd``, ``prefill_usd`` (USD of the uncached-prompt share
    of each call's work, weights from ``cost_settings``), ``prompt_tok``, ``cached_tok`` (tokens)."""
    return _run_cols(store, "review_prefill_cost", start=_utc(start), end=_utc(end))


def waste_by_error(store, start: datetime, end: datetime):
    """Retry + failed-task waste by the paid call's ``error_type``: ``usd`` (USD), ``calls``."""
    return _run_cols(store, "review_waste_errors", start=_utc(start), end=_utc(end))


def data_extent(store, start: datetime, end: datetime) -> tuple[datetime | None, datetime | None]:
    """The first and last telemetry time (span start/end, gauge point) in ``[start, end)`` as naive
    UTC datetimes, or ``(None, None)`` when the period holds no telemetry."""
    import pandas as pd

    _, found = queries.rows(store, "review_data_extent", start=_utc(start), end=_utc(end))
    if not found or found[0][0] is None or pd.isna(found[0][0]):
        return None, None
    first, last = (pd.Timestamp(v).to_pydatetime(warn=False) for v in found[0])
    return _utc(first), _utc(last)


def coverage(store, start: datetime, end: datetime) -> dict:
    """How much of ``[start, end)`` has data: ``hours_with_data`` (hours in which some replica was up),
    ``minutes_with_data``, ``first_minute`` / ``last_minute`` (naive UTC datetimes, None when empty)."""
    import pandas as pd

    cols, found = queries.rows(store, "review_coverage", start=_utc(start), end=_utc(end))
    row = dict(zip(cols, found[0])) if found else {}
    out = {"hours_with_data": int(row.get("hours_with_data") or 0),
           "minutes_with_data": int(row.get("minutes_with_data") or 0)}
    for key in ("first_minute", "last_minute"):
        value = row.get(key)
        out[key] = None if value is None or pd.isna(value) else _utc(pd.Timestamp(value).to_pydatetime(warn=False))
    return out
