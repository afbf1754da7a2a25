"""Cost named queries: what the dashboard, the alerts and the weekly review read about money.

Position in the flow: serving -> collectors -> **schema** -> app/alerts. Each function runs one
``cost_*.sql`` / ``tasks_*.sql`` file beside this module with bound parameters and returns a pandas
DataFrame; callers contain no SQL. The tables are the cost jobs' outputs (``schema/jobs``):

* ``replica_minutes`` — one row per replica and minute it was up: spend, allocated, idle (USD).
* ``call_costs`` — one row per (unit of GPU work, minute it overlapped): allocated cost and its
  category (``useful``, ``retry_waste``, ``failed_task_waste``, ``pending``, ``unattributed``,
  ``unspanned``: engine work the counters saw and no span explains).
* ``tasks`` — one row per task, in the minute it ended: outcome, attempts, cost by category.

Definitions (schema/jobs/README.md): spend = price x GPUs while up
(every minute for a reserved replica); allocated = spend x min(1, work / capacity), idle = the rest,
so allocated + idle = spend for every replica-minute; cost per successful task (CPST) = all spend
in the period / tasks that succeeded in the period (tasks belong to the period in which they
ended); attributed CPST excludes idle; goodput = successful tasks within SLO per hour, judged on
the TTFT the user waited; attempts = calls sent, client retries included.

Money is Float64 USD, never rounded here (round only for display); tokens are counts; times are
UTC ``datetime`` (naive values are taken as UTC). ``None``/NaN means "no data" (e.g. CPST with
zero successes), never zero. Filters (``model``, ``tenant``, ``task_type``) are bound parameters;
``""`` or a missing key = no filter.
"""

from __future__ import annotations

import contextlib
import threading
from contextvars import ContextVar
from datetime import datetime, timedelta

import pandas as pd

from schema.queries import FILTER_KEYS, filter_params, naive_utc, rows, run

GROUPINGS = ("task_type", "tenant", "model", "replica")
# The triangle windows the cost jobs keep exact per-block results for (migration 1003): 6 h, 1 day.
TRIANGLE_BLOCKS_S = (21600, 86400)
CATEGORIES = ("useful", "retry_waste", "failed_task_waste", "pending", "unattributed", "unspanned", "idle")

# The columns each named query returns, in order (see each function's docstring for units).
COLUMNS: dict[str, tuple[str, ...]] = {
    "cost_period_summary": (
        "grp", "spend_usd", "allocated_usd", "idle_usd", "unattributed_usd", "unspanned_usd", "useful_usd",
        "retry_waste_usd", "failed_task_waste_usd", "pending_usd", "partial_usd", "partial_tokens", "requests",
        "prompt_tokens", "cached_tokens", "cached_estimated_tokens", "output_tokens", "tokens", "tasks",
        "successful_tasks", "failed_tasks", "abandoned_tasks", "slo_met_tasks", "cpst_usd", "attributed_cpst_usd",
        "cost_per_request_usd", "cost_per_1m_tokens_usd", "goodput_per_hour", "attempts_per_success",
        "steps_per_success", "retries_per_call", "hours", "hours_with_data"),
    "cost_cpst_trend": (
        "bucket_start", "grp", "spend_usd", "allocated_usd", "successful_tasks", "slo_met_tasks", "cpst_usd",
        "attributed_cpst_usd"),
    "cost_waste_breakdown": ("category", "is_subset", "usd", "share_of_spend", "calls", "tokens"),
    "tasks_table": (
        "task_id", "task_type", "tenant_id", "model", "outcome", "has_root", "start_time", "end_time", "e2e_s",
        "ttft_s", "steps", "attempts", "calls", "prompt_tokens", "cached_tokens", "output_tokens", "cost_usd",
        "useful_usd", "retry_waste_usd", "failed_task_waste_usd", "pending_usd", "partial_calls", "partial_tokens",
        "partial_usd", "slo_ttft_ms", "slo_e2e_ms", "slo_met", "context_source"),
    "tasks_calls": (
        "call_id", "trace_id", "call_source", "replica", "gpu_type", "model", "task_step", "task_attempt",
        "start_time", "end_time", "status", "error_type", "finish_reason", "partial", "prompt_tokens",
        "cached_tokens", "output_tokens", "ttft_s", "e2e_s", "work", "cost_usd", "category", "minutes", "task_call",
        "error_class"),
    "cost_replica_windows": (
        "replica", "window_start", "requests", "throughput_tokens_per_s", "output_tokens_per_s", "successful_tasks",
        "successful_tasks_per_hour", "ttft_p99_s", "e2e_p99_s", "spend_usd", "idle_usd", "cpst_usd",
        "running_requests_avg"),
    "cost_task_context": ("context_source", "context_kind", "tasks", "calls"),
    "cost_data_quality": (
        "replica", "up_minutes", "span_tokens", "counter_tokens", "token_gap", "token_gap_ratio",
        "default_priced_minutes", "unpriced_minutes", "gateway_evidence_calls", "client_evidence_calls",
        "down_minutes", "unspanned_usd", "cached_estimated_tokens", "late_minutes_recomputed", "spend_usd"),
}


# Cost per successful task, defined here once for every reader (the dashboard, the API, the weekly
# review, the Prometheus export): USD / successful tasks of the same rows, NaN where they hold none.
# CPST divides all spend (idle included: the fleet was bought to run these tasks); attributed CPST
# divides only what the cost model allocated to calls.
PER_SUCCESS = {"cpst_usd": "spend_usd", "attributed_cpst_usd": "allocated_usd"}


def per_success(df: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """``df`` with the :data:`PER_SUCCESS` figures of ``columns`` computed from its ``successful_tasks``
    and USD columns, in the order of ``columns``."""
    successes = pd.to_numeric(df["successful_tasks"], errors="coerce").astype(float) if len(df) else None
    for figure, usd in PER_SUCCESS.items():
        if figure in columns:
            df[figure] = (pd.to_numeric(df[usd]).astype(float) / successes).where(successes > 0) if len(df) else []
    return df[list(columns)]


def _run(store, name: str, *, omit: frozenset[str] = frozenset(), **params) -> pd.DataFrame:
    # The chDB backend returns an empty DataFrame without columns for zero rows; readers rely on
    # the documented columns being present, so rebuild them from the result's column names.
    # COLUMNS is also the stability contract: a test checks every query returns exactly these.
    df = run(store, name, omit=omit, **params)
    if len(df.columns) == 0:
        return pd.DataFrame(columns=list(COLUMNS[name]))
    return per_success(df, COLUMNS[name]) if "cpst_usd" in COLUMNS[name] else df


def _without_rollup(span: dict) -> frozenset[str]:
    """The sections to omit for a rollup span: ``rollup`` (a query's reads of the hourly rollups) when
    the span is empty: a range with no whole rolled-up hour or a bucket not of whole hours, e.g. every
    1 h view ending now. ClickHouse plans those reads even when their range is empty (the cost
    trend at 10M calls, 1 h: 56-75 -> 48-57 ms)."""
    return frozenset({"rollup"}) if span["rollup_end"] <= span["rollup_start"] else frozenset()


def _range(start: datetime, end: datetime) -> dict:
    start, end = naive_utc(start), naive_utc(end)
    if end <= start:
        raise ValueError(f"time range is empty: start {start.isoformat()} is not before end {end.isoformat()}")
    return {"start": start, "end": end}


# rollup_span's answers inside a shared_spans() block: {(store, start, end, unit key): span}
_SPANS: ContextVar[dict | None] = ContextVar("infercost_rollup_spans", default=None)


@contextlib.contextmanager
def shared_spans():
    """Within this block (one thread's, e.g. one run of a dashboard page's script), :func:`rollup_span`
    queries each ``(store, start, end, unit)`` once and the page's other cost queries over the same
    range reuse its answer (the cost page asked the same question five times, 9-20 ms each at 10M).

    Safe because the rollups are insert-only: the versions a span names stay readable (old versions go
    with the TTL only), and every query reads each minute from exactly one source whichever span it
    was given; a span read a moment earlier only misses an hour the jobs completed since (read raw).
    Its watermark may be a refresh behind: those minutes are still in ``*_live`` (copied to history 10
    minutes before they leave the live window, schema/jobs/README.md).

    The answers are keyed by the store's URL and database, not by client, so clients of one store
    running the page's queries at once (``app.ui.prefetch`` runs them in a copy of this context)
    share them too.
    """
    token = _SPANS.set({})
    try:
        yield
    finally:
        _SPANS.reset(token)


def _store_identity(store) -> tuple:
    # clients of the same store (Store.clone) answer alike
    return (store.url, store.database)


def rollup_span(store, start: datetime, end: datetime, unit_seconds: int = 3600, *, blocks: bool = True) -> dict:
    """The part of ``[start, end)`` the cost queries read from the hourly rollups (migration 1003).

    The rollups hold whole hours, each rewritten by the cost jobs as a new version; an hour is
    readable when its newest mark in ``cost_rollup_hours`` says complete (wholly below the
    watermark when written). This is the longest run of consecutive such hours inside the range (the
    earliest of equal ones): ``[rollup_start, rollup_end)``, with the version of each hour in order
    (``rollup_versions``); ``rollup_start`` is the range's first whole hour when that hour starts the
    run, else a later hour (the hours before it were never rolled up: e.g. before the data began). The queries read the rest of the range (the partial edge
    hours, the live window, hours no run rolled up) from the raw tables, so every minute comes from
    exactly one of them. Empty (``rollup_end = rollup_start``) when ``unit_seconds`` (a query's
    bucket or window) is not a whole number of hours: its buckets would split an hour.

    Also the watermark, bound once: the queries read ``*_history`` below it and ``*_live`` from it
    on, the rows the views ``call_costs`` / ``replica_minutes`` / ``tasks`` give, without the two
    scalar subqueries every reference to those views plans.

    With ``unit_seconds`` in :data:`TRIANGLE_BLOCKS_S` (6 h, 1 day) and ``blocks`` also the triangle's
    blocks of that size (migration 1003) to read whole: those inside ``[rollup_start, rollup_end)``
    whose mark names exactly the current versions of their hours (a stale mark, an hour rewritten
    since, is skipped). ``blocks=False``: a query that reads no block (the cost trend's 6 h buckets)
    gets the empty lists and, inside :func:`shared_spans`, shares the page's other span.

    Returns the bound parameters: ``{"rollup_start", "rollup_end", "rollup_versions", "watermark",
    "block_starts", "block_versions"}`` (UTC naive datetimes, list of int; watermark 1970-01-01
    before any run; the block lists empty for other units).
    """
    start, end = naive_utc(start), naive_utc(end)
    block_seconds = int(unit_seconds) if blocks and int(unit_seconds) in TRIANGLE_BLOCKS_S else 0
    shared = _SPANS.get()
    if shared is None:
        return _rollup_span(store, start, end, unit_seconds, block_seconds)
    # one query per range and block size; a unit of whole hours and one that is not share it (the
    # latter reads no rollup: the same watermark, no hours)
    key = (_store_identity(store), start, end, block_seconds)
    # one reader at a time: queries run at once (app.ui.prefetch) would each read the span they all need
    with shared.setdefault(("lock",), threading.Lock()):
        if key not in shared:
            shared[key] = (_rollup_span(store, start, end, 3600 if not block_seconds else unit_seconds, block_seconds)
                           if block_seconds else _span_from_window(store, shared, start, end))
        span = shared[key]
    whole = int(unit_seconds) % 3600 == 0
    return span | {"rollup_versions": list(span["rollup_versions"]) if whole else [],
                   "rollup_end": span["rollup_end"] if whole else span["rollup_start"],
                   "block_starts": list(span["block_starts"]), "block_versions": list(span["block_versions"])}


# Inside shared_spans(), the first span without blocks reads the complete hours of a window this much
# wider than its range, back from its end: the period before it (the cost page's deltas) and the
# budgets' week (starting at most 7 days before the range's end) are then answered without a query.
_WINDOW_BACK = timedelta(days=8)


def _span_from_window(store, shared: dict, start: datetime, end: datetime) -> dict:
    """:func:`_rollup_span` for whole-hour units and no blocks, answered from the hour list of a window
    already read in this :func:`shared_spans` block when it covers ``[start, end)``; else reads the
    window ``[min(start - (end - start), end - 8 days), end)`` once. The same answer as alone: the
    hours ``cost_rollup_span`` lists for a range are those of any wider window that fall inside it
    (each hour's newest mark does not depend on the range), and the watermark is the same query's."""
    windows = shared.setdefault(("windows", _store_identity(store)), [])
    for lo, hi, found in windows:
        if lo <= start and end <= hi:
            break
    else:
        lo, hi = min(start - (end - start), end - _WINDOW_BACK), end
        _, rows_ = rows(store, "cost_rollup_span", start=lo, end=hi, block_seconds=0)
        found = rows_[0]
        windows.append((lo, hi, found))
    mark, hours, versions, _ = found
    first = _first_hour(start)
    last = end.replace(minute=0, second=0, microsecond=0)
    inside = [(h, v) for h, v in zip(hours, versions) if first <= h.replace(tzinfo=None) < last]
    return _span(start, mark, [h for h, _ in inside], [v for _, v in inside], (), 3600, 0)


def _first_hour(start: datetime) -> datetime:
    first = start.replace(minute=0, second=0, microsecond=0)
    return first + timedelta(hours=1) if first < start else first


def _rollup_span(store, start: datetime, end: datetime, unit_seconds: int, block_seconds: int) -> dict:
    _, found = rows(store, "cost_rollup_span", start=start, end=end, block_seconds=block_seconds)
    mark, hours, found_versions, marks = found[0]
    return _span(start, mark, hours, found_versions, marks, unit_seconds, block_seconds)


def _span(start: datetime, mark, hours, found_versions, marks, unit_seconds: int, block_seconds: int) -> dict:
    # the longest run of consecutive complete hours (the earliest of equal ones); not necessarily from
    # the range's first whole hour: a range starting before the first hour the jobs rolled up (a 7-day
    # range over a store with less, or 18:39 back to hours before the data began) read every hour raw
    first = _first_hour(start)
    versions: list[int] = []
    if int(unit_seconds) % 3600 == 0:
        run_start, run = first, []
        for hour, version in zip(hours, found_versions):
            hour = hour.replace(tzinfo=None)
            if not run or hour != run_start + timedelta(hours=len(run)):
                run_start, run = hour, []
            run.append(int(version))
            if len(run) > len(versions):
                first, versions = run_start, list(run)
    # a block is read when it lies in the rolled-up hours and its mark names their versions
    blocks: dict[datetime, int] = {}
    per_block = block_seconds // 3600
    for block_start, version, hour_versions in marks or ():
        block_start = block_start.replace(tzinfo=None)
        i = int((block_start - first).total_seconds()) // 3600
        if 0 <= i and i + per_block <= len(versions) and [int(v) for v in hour_versions] == versions[i:i + per_block]:
            blocks[block_start] = max(int(version), blocks.get(block_start, 0))
    ordered = sorted(blocks)
    return {"rollup_start": first, "rollup_end": first + timedelta(hours=len(versions)), "rollup_versions": versions,
            "watermark": mark.replace(tzinfo=None), "block_starts": ordered,
            "block_versions": [blocks[b] for b in ordered]}


def _by(by: str | None, allowed=GROUPINGS) -> str:
    if by in (None, ""):
        return ""
    if by not in allowed:
        raise ValueError(f"cannot group by {by!r}; accepted: {list(allowed)}")
    return by


def period_summary(store, start: datetime, end: datetime, by: str | None = None,
                   filters: dict | None = None) -> pd.DataFrame:
    """The period summary over minutes ``[start, end)``: one row, or one per group.

    Args:
        by: ``None`` (one row, ``grp`` = ``""``), ``"task_type"``, ``"tenant"``, ``"model"`` or
            ``"replica"``.
        filters: ``{"model"|"tenant"|"task_type": value}``.

    Returns columns (one row per group, most expensive first):
        ``grp`` (group value), ``spend_usd``, ``allocated_usd``, ``idle_usd``, ``unattributed_usd``,
        ``unspanned_usd`` (engine work no span explains), ``useful_usd``, ``retry_waste_usd``,
        ``failed_task_waste_usd``, ``pending_usd`` (task outcome not known yet), ``partial_usd``
        (inside the categories), ``partial_tokens``, ``requests`` (calls started), ``prompt_tokens``
        (incl. cached), ``cached_tokens``, ``cached_estimated_tokens`` (the part of cached_tokens
        estimated from the counters' hit rate), ``output_tokens``, ``tokens`` (prompt + output),
        ``tasks`` (ended), ``successful_tasks``, ``failed_tasks``, ``abandoned_tasks``,
        ``slo_met_tasks``, ``cpst_usd`` (spend / successes), ``attributed_cpst_usd`` (allocated /
        successes), ``cost_per_request_usd``, ``cost_per_1m_tokens_usd``, ``goodput_per_hour``
        (successful tasks within SLO per hour), ``attempts_per_success`` (calls sent, client
        retries included, per successful task), ``steps_per_success``, ``retries_per_call``
        (client retries per call a step made, over successful tasks), ``hours`` (period length),
        ``hours_with_data`` (hours of the period holding a replica-minute, fleet-wide whatever ``by`` and
        ``filters``: ``review.coverage``'s ``hours_with_data``).

    Without filters and with ``by`` None or ``"replica"``, spend and idle are the replica-minutes'
    own (exact); otherwise the period's idle is shared among groups in proportion to their
    allocated cost, so the groups add up to the fleet's spend. With ``by="replica"`` a task counts
    for every replica that ran one of its calls.

    Raises:
        ValueError: empty range, unknown grouping or filter. StoreError from the store.
    """
    return period_summaries(store, start, end, (by,), filters)[_by(by)]


def period_summaries(store, start: datetime, end: datetime, bys=("",), filters: dict | None = None,
                     previous: bool = False, waste: bool = False) -> dict:
    """:func:`period_summary` for several groupings in ONE query: ``{by: DataFrame}``.

    ``bys`` holds ``""`` (ungrouped) and/or groupings of :data:`GROUPINGS`; each frame is exactly
    what ``period_summary(store, start, end, by, filters)`` returns (same columns, rows and order).
    The query reads call_costs, replica_minutes and tasks once for all groupings (the cost page's
    headline and its three breakdowns were four queries, each reading its sources twice).

    With ``previous=True`` also ``out["previous"]``: exactly ``period_summary(store, start - (end -
    start), start, None, filters)``, the period of the same length just before (the cost page's
    deltas), read in the same query (each period with its own rollup span) instead of a second one.

    With ``waste=True`` (no filters: the waste breakdown is the fleet's) also ``out["waste"]``: exactly
    :func:`waste_breakdown` of ``[start, end)`` (same columns, rows, order and types; sums in another
    order, so equal to ~1e-15 relative), from the same read of the pieces and replica-minutes (the cost
    page's waterfall was a query of its own, ~a fifth of the page's SQL at 10M calls).

    Raises:
        ValueError: empty range, unknown grouping or filter, ``waste`` with a filter. StoreError from
        the store.
    """
    keys = list(dict.fromkeys(_by(b) for b in bys))
    if not keys:
        raise ValueError("bys is empty: give at least one grouping ('' = ungrouped)")
    params = _range(start, end) | filter_params(filters)
    if waste and any(params[k] for k in FILTER_KEYS):
        raise ValueError("waste=True reads the fleet's waste breakdown: give no filters")
    if waste and "" not in keys:
        keys.insert(0, "")  # the waste's spend, idle and down are the ungrouped row's
    span = rollup_span(store, start, end)
    read_start, prev = params["start"], {"rollup_start": span["rollup_start"], "rollup_end": span["rollup_start"],
                                         "rollup_versions": []}
    if previous:
        read_start = params["start"] - (params["end"] - params["start"])
        prev = rollup_span(store, read_start, params["start"])
    extra = (["previous"] if previous else []) + (["waste"] if waste else [])
    # the per-replica task join only for grouping 'replica', the rollup reads only for a span holding an
    # hour (ClickHouse would plan them regardless)
    omit = (frozenset() if "replica" in keys else frozenset({"replica_tasks"})) | (
        _without_rollup(span) & _without_rollup(prev))
    df = run(store, "cost_period_summary", omit=omit, **params, bys=keys + extra,
             read_start=read_start, prev_rollup_start=prev["rollup_start"], prev_rollup_end=prev["rollup_end"],
             prev_rollup_versions=prev["rollup_versions"], **span)
    columns = COLUMNS["cost_period_summary"]
    out = {}
    for key in keys + (["previous"] if previous else []):
        part = df[df["by_dim"] == key].copy() if len(df.columns) else df
        out[key] = (per_success(part, columns).reset_index(drop=True) if len(part.columns)
                    else pd.DataFrame(columns=list(columns)))
    if waste:
        out["waste"] = _waste_frame(df)
    return out


# waste_breakdown's rows, in its order: the seven categories that add up to the spend, then the two inside them
WASTE_ROWS = ("useful", "retry_waste", "failed_task_waste", "pending", "unattributed", "unspanned", "idle", "partial",
              "down")


def _waste_frame(df: pd.DataFrame) -> pd.DataFrame:
    """:func:`waste_breakdown`'s frame from a ``cost_period_summary`` result read with by 'waste'."""
    if not len(df.columns):
        df = pd.DataFrame(columns=["by_dim", "grp", "spend_usd", "idle_usd", "down_usd", "allocated_usd", "requests",
                                   "tokens", "partial_usd", "partial_requests", "partial_tokens"])
    fleet = df[df["by_dim"] == ""]
    spend = float(fleet["spend_usd"].iloc[0]) if len(fleet) else 0.0
    cats = {r["grp"]: (float(r["allocated_usd"]), int(r["requests"]), int(r["tokens"]))
            for r in df[df["by_dim"] == "waste"].to_dict("records")}
    part = df[df["by_dim"] == "waste.partial"]
    if len(part):
        cats["partial"] = (float(part["partial_usd"].iloc[0]), int(part["partial_requests"].iloc[0]),
                           int(part["partial_tokens"].iloc[0]))
    cats["idle"] = (float(fleet["idle_usd"].iloc[0]) if len(fleet) else 0.0, 0, 0)
    cats["down"] = (float(fleet["down_usd"].iloc[0]) if len(fleet) else 0.0, 0, 0)
    usd = [cats.get(c, (0.0, 0, 0))[0] for c in WASTE_ROWS]
    return pd.DataFrame({
        "category": pd.Series(list(WASTE_ROWS), dtype=pd.StringDtype(na_value=pd.NA)),  # as the driver's strings
        "is_subset": pd.Series([int(c in ("partial", "down")) for c in WASTE_ROWS], dtype="uint8"),
        "usd": pd.Series(usd, dtype="float64"),
        "share_of_spend": pd.Series([u / spend if spend > 0 else None for u in usd], dtype="float64"),
        "calls": pd.Series([cats.get(c, (0.0, 0, 0))[1] for c in WASTE_ROWS], dtype="uint64"),
        "tokens": pd.Series([cats.get(c, (0.0, 0, 0))[2] for c in WASTE_ROWS], dtype="uint64")})


def cpst_trend(store, start: datetime, end: datetime, bucket_seconds: int, by: str | None = None) -> pd.DataFrame:
    """Cost per successful task per time bucket (and group).

    Returns columns: ``bucket_start`` (UTC), ``grp``, ``spend_usd``, ``allocated_usd``,
    ``successful_tasks``, ``slo_met_tasks``, ``cpst_usd``, ``attributed_cpst_usd`` (NaN when a
    bucket has no success). ``by`` in task_type | tenant | model | replica (replica: successes are
    not split by replica, use :func:`replica_windows`).

    Raises:
        ValueError: empty range, bucket_seconds < 60 or not a whole number of minutes, bad ``by``.
    """
    bucket_seconds = int(bucket_seconds)
    if bucket_seconds < 60 or bucket_seconds % 60:
        raise ValueError(f"bucket_seconds must be a positive multiple of 60, got {bucket_seconds}")
    params = _range(start, end) | {"bucket_seconds": bucket_seconds, "by": _by(by)}
    span = rollup_span(store, start, end, bucket_seconds, blocks=False)
    return _run(store, "cost_cpst_trend", omit=_without_rollup(span), **params, **span)


def waste_breakdown(store, start: datetime, end: datetime) -> pd.DataFrame:
    """Where the money of ``[start, end)`` went.

    Returns one row per category in this order: ``useful``, ``retry_waste``,
    ``failed_task_waste``, ``pending``, ``unattributed``, ``unspanned``, ``idle`` (these seven are
    mutually exclusive and add up to the spend), then ``partial`` and ``down`` (measures inside
    them, ``is_subset`` = 1: calls that streamed then broke; idle spend of reserved replicas while
    down). Columns: ``category``, ``is_subset``, ``usd``, ``share_of_spend`` (0..1), ``calls``
    (calls started), ``tokens`` (prompt + output; partial: streamed output tokens).
    """
    return _run(store, "cost_waste_breakdown", **_range(start, end), **rollup_span(store, start, end))


def tasks_table(store, start: datetime, end: datetime, search: str | None = None, limit: int = 200) -> pd.DataFrame:
    """Tasks that ended in ``[start, end)``, newest first, at most ``limit``.

    ``search`` matches task id, type or tenant (case-insensitive substring). Columns: ``task_id``,
    ``task_type``, ``tenant_id``, ``model``, ``outcome`` (success | failure | abandoned |
    unknown), ``has_root``, ``start_time``, ``end_time`` (UTC), ``e2e_s``, ``ttft_s`` (seconds),
    ``steps``, ``attempts``, ``calls``, ``prompt_tokens``, ``cached_tokens``, ``output_tokens``,
    ``cost_usd``, ``useful_usd``, ``retry_waste_usd``, ``failed_task_waste_usd``,
    ``pending_usd``, ``partial_calls``, ``partial_tokens``, ``partial_usd``, ``slo_ttft_ms``,
    ``slo_e2e_ms`` (milliseconds), ``slo_met`` (0/1).
    """
    limit = int(limit)
    if not 1 <= limit <= 100_000:
        raise ValueError(f"limit must be in 1..100000, got {limit}")
    params = _range(start, end) | {"search": search or "", "limit": limit}
    return _run(store, "tasks_table", **params)


def task_calls(store, task_id: str) -> pd.DataFrame:
    """Every unit of GPU work of one task, in start order.

    Columns: ``call_id`` (evidence span id), ``trace_id``, ``call_source`` (engine | gateway |
    client: which span was the evidence), ``replica``, ``gpu_type``, ``model``, ``task_step``,
    ``task_attempt``, ``start_time``, ``end_time`` (UTC), ``status``, ``error_type``,
    ``finish_reason``, ``partial`` (0/1), ``prompt_tokens``, ``cached_tokens``, ``output_tokens``,
    ``ttft_s``, ``e2e_s`` (seconds), ``work`` (work units), ``cost_usd``, ``category``,
    ``minutes`` (minute buckets the call overlapped), ``task_call`` (call within its step, 0 when
    not sent), ``error_class`` (docs/telemetry.md "Error classes").
    """
    if not task_id:
        raise ValueError("task_id is required")
    return _run(store, "tasks_calls", task_id=str(task_id))


def replica_windows(store, start: datetime, end: datetime, window_seconds: int) -> pd.DataFrame:
    """The latency-cost-throughput triangle per replica and window.

    Returns columns: ``replica``, ``window_start`` (UTC), ``requests`` (engine calls ended),
    ``throughput_tokens_per_s`` (prompt + output tokens / s), ``output_tokens_per_s``,
    ``successful_tasks`` (distinct successful tasks ended in the window with a call on the
    replica), ``successful_tasks_per_hour``, ``ttft_p99_s``, ``e2e_p99_s`` (seconds, nearest
    rank over engine calls ended in the window), ``spend_usd``, ``idle_usd``, ``cpst_usd``
    (replica spend / its successful tasks), ``running_requests_avg`` (mean of
    ``vllm:num_requests_running``).

    Raises:
        ValueError: empty range or window_seconds not a positive multiple of 60.
    """
    window_seconds = int(window_seconds)
    if window_seconds < 60 or window_seconds % 60:
        raise ValueError(f"window_seconds must be a positive multiple of 60, got {window_seconds}")
    return _run(store, "cost_replica_windows", **_range(start, end), window_seconds=window_seconds,
                **rollup_span(store, start, end, window_seconds))


def task_context(store, start: datetime, end: datetime) -> pd.DataFrame:
    """Tasks that ended in ``[start, end)`` and their calls, by where their context came from.

    Columns: ``context_source`` (``sdk`` | ``genai_agent`` | ``openinference`` | ``traceloop`` |
    ``genai_call`` | ``request_root`` | ``trace_without_root``), ``context_kind`` (``explicit`` for
    the task SDK, else ``derived``), ``tasks``, ``calls``.
    """
    return _run(store, "cost_task_context", **_range(start, end))


def data_quality(store, start: datetime, end: datetime) -> pd.DataFrame:
    """Span tokens vs engine-counter tokens per replica, and other flags, over ``[start, end)``.

    Returns columns: ``replica``, ``up_minutes``, ``span_tokens`` (prompt + output of calls
    started, tokens), ``counter_tokens`` (increase of ``vllm:prompt_tokens`` +
    ``vllm:generation_tokens`` per scrape; NaN without counters), ``token_gap`` (counters - the
    span tokens those scrapes observed: work the spans missed, e.g. aborted requests),
    ``token_gap_ratio`` (gap / counters), ``default_priced_minutes`` (replica not in fleet.yaml),
    ``unpriced_minutes`` (no price for its GPU type), ``gateway_evidence_calls`` /
    ``client_evidence_calls`` (calls whose engine span never arrived), ``down_minutes``
    (reserved, billed, not up), ``unspanned_usd`` (what the gap's work cost, with no call to
    charge), ``cached_estimated_tokens`` (cached tokens estimated from the counters' hit rate),
    ``late_minutes_recomputed`` (minutes whose data arrived after the live window and were
    recomputed; replica ``''`` when not tied to one), ``spend_usd``.
    """
    span = rollup_span(store, start, end)
    return _run(store, "cost_data_quality", omit=_without_rollup(span), **_range(start, end), **span)
