"""Live-operations named queries: what the dashboard's on-call page reads.

Position in the flow: serving -> collectors -> **schema** -> app. Each function runs one
``ops_*.sql`` file beside this module with bound parameters and returns a pandas DataFrame or a
small dataclass; the app contains no SQL. Sources:

* ``llm_calls`` (one row per call span; ``call_source`` engine | gateway | client). Latencies in
  seconds from vLLM's ``llm_request`` span (shared/reference/vllm-telemetry.md): TTFT = arrival ->
  first token, e2e = arrival -> finish. **ITL** per request = ``decode_s / (output_tokens - 1)``
  (first -> last token over the gaps between tokens): a per-request mean; its p95 is over requests,
  which differs from vLLM's ``vllm:inter_token_latency_seconds`` histogram (one sample per gap).
* ``otel_metrics_gauge``: vLLM's ``vllm:num_requests_running`` / ``_waiting`` /
  ``vllm:kv_cache_usage_perc`` per replica (resource attribute ``service.instance.id``), read
  through its per-minute pre-aggregation ``ops_gauge_minutes`` (migration 1006): a tile is the mean
  of the replica's newest minute with points in the window (windows are minute-aligned).
* ``otel_traces`` task root spans for goodput (successful tasks per hour that met their
  latency SLO; here the end-to-end SLO ``slo.e2e_ms``).

Quantiles are windowed (over the requests that ended in the window), never lifetime averages; the
fleet tiles use ``quantileExact`` (nearest rank, no interpolation), the series ``quantile``
(ClickHouse's reservoir sample, exact below 8192 values per bucket).

Filters: ``model`` matches ``llm_calls.model`` (or the gauge label ``model_name``); ``tenant`` and
``task_type`` match task context, which engine rows reach through their parent span. Empty string =
no filter. Times are UTC ``datetime`` (naive values are taken as UTC).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

import pandas as pd

from schema.queries import filter_params, naive_utc, num as _num, run

# Ranges at least this long read the per-minute pre-aggregations of migration 1006 (when the
# bucket is whole minutes and no tenant / task-type filter needs the raw rows' parents). Measured
# by benchmarks/bench_dashboard.py: a 7-day series over 10M calls took seconds from the raw rows.
ROLLUP_MIN_RANGE_S = 6 * 3600
HOUR_ROLLUP_MIN_RANGE_S = 12 * 3600  # ranges of 12 h+ with whole-hour buckets read hours (migration 1006)
# A replica's TTFT / ITL p95 flags it only over at least this many requests: ClickHouse's
# quantileExact(0.95) is the value at index floor(0.95 n) of the sorted n, the slowest request for
# n <= 20, so below 21 one slow call would flag a replica (seen: "degraded" on 9 requests).
MIN_LATENCY_REQUESTS = 21


def _utc(value: datetime) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"expected a datetime, got {type(value).__name__}")
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def _range(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    start, end = _utc(start), _utc(end)
    if end <= start:
        raise ValueError(f"time range is empty: start {start.isoformat()} is not before end {end.isoformat()}")
    return start, end


@dataclass
class WindowStats:
    """Fleet figures of one window. Rates per second, latencies in seconds, ratios 0..1.

    ``None`` means "no data in the window" (shown as a dash), never zero.
    """

    seconds: float
    requests: int = 0  # engine requests that ended in the window
    requests_per_s: float | None = None
    output_tokens_per_s: float | None = None  # generated tokens / s (engine rows)
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    ttft_p99_s: float | None = None
    itl_p95_s: float | None = None
    e2e_p95_s: float | None = None
    error_rate: float | None = None
    error_source: str = ""  # which rows the error rate is measured on: gateway | engine | client
    retry_ratio: float | None = None
    # Gauges: per replica, the mean of its newest minute with points in the window.
    queue_depth: float | None = None  # sum over replicas of vllm:num_requests_waiting
    running: float | None = None  # sum over replicas of vllm:num_requests_running
    kv_cache_usage: float | None = None  # mean over replicas of vllm:kv_cache_usage_perc, 0..1
    tasks_ended: int = 0
    tasks_succeeded: int = 0
    tasks_within_slo: int = 0
    goodput_per_h: float | None = None  # successful tasks within their e2e SLO per hour


@dataclass
class FleetTiles:
    """The live page's tiles: the current window and the one before it (same length)."""

    start: datetime
    end: datetime
    current: WindowStats
    previous: WindowStats
    raw: dict = field(default_factory=dict)  # the query rows, for the "how computed" expander

    def delta(self, name: str) -> float | None:
        """current - previous of attribute ``name``; None when either side has no data."""
        a, b = getattr(self.current, name), getattr(self.previous, name)
        if a is None or b is None:
            return None
        return a - b


def _window_stats(seconds: float, calls: dict | None, tasks: dict | None, gauges: pd.DataFrame) -> WindowStats:
    s = WindowStats(seconds=seconds)
    if calls:
        engine = int(calls["engine_requests"])
        s.requests = engine
        if engine:
            s.requests_per_s = engine / seconds
            s.output_tokens_per_s = float(calls["engine_output_tokens"]) / seconds
            q = list(calls["ttft_q"] or [])
            if len(q) == 3 and not pd.isna(q[0]):
                s.ttft_p50_s, s.ttft_p95_s, s.ttft_p99_s = (float(v) for v in q)
            s.itl_p95_s = _num(calls["itl_p95_s"])
            s.e2e_p95_s = _num(calls["e2e_p95_s"])
        gw, gw_req = int(calls["gateway_attempts"]), int(calls["gateway_requests"])
        cl = int(calls["client_attempts"])
        # Error rate where the user's attempts are best seen: gateway attempts include replicas that
        # crashed or refused (no engine span), engine rows otherwise, client attempts last.
        if gw:
            s.error_rate, s.error_source = int(calls["gateway_errors"]) / gw, "gateway"
        elif engine:
            s.error_rate, s.error_source = int(calls["engine_errors"]) / engine, "engine"
        elif cl:
            s.error_rate, s.error_source = int(calls["client_errors"]) / cl, "client"
        # Retry ratio = retry attempts / all attempts. Retries = client attempts with task.attempt >= 2
        # plus the gateway's hidden retries (gateway attempts beyond the first of each gateway request).
        hidden = gw - gw_req
        if cl:
            s.retry_ratio = (int(calls["client_retries"]) + hidden) / (cl + hidden)
        elif gw:
            s.retry_ratio = hidden / gw
    if tasks:
        s.tasks_ended = int(tasks["tasks_ended"])
        s.tasks_succeeded = int(tasks["tasks_succeeded"])
        s.tasks_within_slo = int(tasks["tasks_within_slo"])
        s.goodput_per_h = s.tasks_within_slo * 3600.0 / seconds
    if len(gauges):
        if gauges["waiting_points"].sum():
            s.queue_depth = float(gauges.loc[gauges["waiting_points"] > 0, "waiting"].sum())
        if gauges["running_points"].sum():
            s.running = float(gauges.loc[gauges["running_points"] > 0, "running"].sum())
        if gauges["kv_points"].sum():
            s.kv_cache_usage = float(gauges.loc[gauges["kv_points"] > 0, "kv_usage"].mean())
    return s


def _frame(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    # clickhouse-connect may return an empty result without columns; give callers a stable shape.
    if len(df.columns):
        return df
    return pd.DataFrame(columns=columns)


def _by_window(df: pd.DataFrame) -> dict:
    # An empty result may come back without columns: treat it as "no row for either window".
    out = {"current": None, "previous": None}
    if len(df) and "window" in df.columns:
        for _, row in df.iterrows():
            out[row["window"]] = row.to_dict()
    return out


def _window_rows(df: pd.DataFrame, window: str) -> pd.DataFrame:
    if not len(df) or "window" not in df.columns:
        return pd.DataFrame()
    return df[df["window"] == window]


def fleet_tiles(store, start: datetime, end: datetime, filters: dict | None = None) -> FleetTiles:
    """Fleet tiles for [start, end) and the previous window of the same length.

    Args:
        store: a :class:`schema.store.Store`.
        start, end: the current window, UTC.
        filters: optional ``{"model", "tenant", "task_type"}`` (exact match; '' = all).

    Returns:
        :class:`FleetTiles`. Rates = counts / window seconds; goodput in tasks per hour; queue depth
        and KV use from each replica's newest gauge minute in the window.

    Raises:
        ValueError: empty range or unknown filter. StoreError subclasses from the store.
    """
    start, end = _range(start, end)
    prev_start = start - (end - start)
    seconds = (end - start).total_seconds()
    f = filter_params(filters)
    params = {"start": naive_utc(start), "end": naive_utc(end), "prev_start": naive_utc(prev_start)}
    calls = run(store, "ops_fleet_window", **params, **f)
    tasks = run(store, "ops_goodput", **params, tenant=f["tenant"], task_type=f["task_type"])
    gauges = run(store, "ops_replica_gauges", **params, model=f["model"])
    by_window, tasks_by = _by_window(calls), _by_window(tasks)
    current = _window_stats(seconds, by_window["current"], tasks_by["current"], _window_rows(gauges, "current"))
    previous = _window_stats(seconds, by_window["previous"], tasks_by["previous"], _window_rows(gauges, "previous"))
    return FleetTiles(start, end, current, previous, raw={"calls": calls, "tasks": tasks, "gauges": gauges})


def replica_health(store, start: datetime, end: datetime, filters: dict | None = None,
                   degradation_factor: float = 2.0, error_rate_limit: float = 0.05,
                   gauges: pd.DataFrame | None = None, min_requests: int = MIN_LATENCY_REQUESTS) -> pd.DataFrame:
    """Per-replica health over [start, end), one row per replica, sorted by replica.

    Columns: replica, gpu_type, requests, output_tokens, ttft_p95_s, itl_p95_s, e2e_p95_s (seconds),
    error_rate (0..1: failed gateway attempts / gateway attempts where the gateway saw the replica,
    else failed or aborted engine requests / engine requests), running, waiting and kv_cache_usage
    (0..1) (means of the replica's newest gauge minute in the window), ttft_vs_fleet and itl_vs_fleet (the replica's p95 / the median of
    the replicas' p95s), degraded (bool) and reason (text).

    A replica is flagged degraded when its TTFT or ITL p95 exceeds ``degradation_factor`` x the fleet
    median (default 2x: the usual "one slow GPU" signature of a cascading degradation) over
    at least ``min_requests`` engine requests in the window (``MIN_LATENCY_REQUESTS``, 21: with fewer
    the p95 is its single slowest request; its ratios are still given), or its error rate exceeds
    ``error_rate_limit`` (default 5 %).

    ``gauges``: the ``ops_replica_gauges`` rows of a read whose current window is this [start, end)
    with the same model filter (``fleet_tiles(store, start, end, filters).raw["gauges"]``: its
    'current' rows do not depend on the previous window), so the live page reads the gauges once; read
    here when None.
    """
    start, end = _range(start, end)
    f = filter_params(filters)
    stats = run(store, "ops_replica_health", start=naive_utc(start), end=naive_utc(end), **f)
    if gauges is None:
        gauges = run(store, "ops_replica_gauges", start=naive_utc(start), end=naive_utc(end),
                     prev_start=naive_utc(start), model=f["model"])
    gauges = _window_rows(gauges, "current")
    g = gauges.set_index("replica") if len(gauges) else pd.DataFrame(
        columns=["gpu_type", "running", "waiting", "kv_usage", "running_points", "waiting_points", "kv_points"])
    replicas = sorted(set(stats["replica"] if len(stats) else []) | set(g.index))
    rows = []
    for replica in replicas:
        row = {"replica": replica}
        st = stats[stats["replica"] == replica] if len(stats) else stats
        st = st.iloc[0].to_dict() if len(st) else {}
        gr = g.loc[replica].to_dict() if replica in g.index else {}
        row["gpu_type"] = st.get("gpu_type") or gr.get("gpu_type") or ""
        row["requests"] = int(st.get("requests", 0))
        row["output_tokens"] = int(st.get("output_tokens_sum", 0))
        for col in ("ttft_p95_s", "itl_p95_s", "e2e_p95_s"):
            row[col] = _num(st.get(col)) if row["requests"] else None
        gw = int(st.get("gateway_attempts", 0))
        if gw:
            row["error_rate"] = int(st["gateway_errors"]) / gw
        elif row["requests"]:
            row["error_rate"] = int(st["engine_errors"]) / row["requests"]
        else:
            row["error_rate"] = None
        row["running"] = _num(gr["running"]) if gr.get("running_points") else None
        row["waiting"] = _num(gr["waiting"]) if gr.get("waiting_points") else None
        row["kv_cache_usage"] = _num(gr["kv_usage"]) if gr.get("kv_points") else None
        rows.append(row)
    out = pd.DataFrame(rows, columns=["replica", "gpu_type", "requests", "output_tokens", "ttft_p95_s", "itl_p95_s",
                                      "e2e_p95_s", "error_rate", "running", "waiting", "kv_cache_usage"])
    for col, rel in (("ttft_p95_s", "ttft_vs_fleet"), ("itl_p95_s", "itl_vs_fleet")):
        values = pd.to_numeric(out[col], errors="coerce")
        median = values.median() if values.notna().any() else None
        out[rel] = values / median if median else None
    reasons = []
    for _, r in out.iterrows():
        why = []
        sampled = r["requests"] >= min_requests
        if sampled and r["ttft_vs_fleet"] is not None and not pd.isna(r["ttft_vs_fleet"]) \
                and r["ttft_vs_fleet"] > degradation_factor:
            why.append(f"TTFT p95 {r['ttft_vs_fleet']:.1f}x fleet median")
        if sampled and r["itl_vs_fleet"] is not None and not pd.isna(r["itl_vs_fleet"]) \
                and r["itl_vs_fleet"] > degradation_factor:
            why.append(f"ITL p95 {r['itl_vs_fleet']:.1f}x fleet median")
        if r["error_rate"] is not None and not pd.isna(r["error_rate"]) and r["error_rate"] > error_rate_limit:
            why.append(f"error rate {r['error_rate']:.0%}")
        reasons.append("; ".join(why))
    out["degraded"] = [bool(r) for r in reasons]
    out["reason"] = reasons
    return out


def use_rollup(start: datetime, end: datetime, bucket_s: int, filters: dict | None = None) -> bool:
    """True when a series over [start, end) reads the per-minute pre-aggregations (wide range,
    whole-minute buckets, no tenant / task-type filter)."""
    f = filter_params(filters)
    return ((_utc(end) - _utc(start)).total_seconds() >= ROLLUP_MIN_RANGE_S and int(bucket_s) % 60 == 0
            and not f["tenant"] and not f["task_type"])


def latency_series(store, start: datetime, end: datetime, bucket_s: int, filters: dict | None = None) -> pd.DataFrame:
    """Windowed quantiles per time bucket (by request end), fleet rows (replica '') and per replica.

    Columns: bucket (UTC), replica, requests, output_tokens_sum, errors, ttft_p50_s, ttft_p95_s,
    ttft_p99_s, itl_p95_s, e2e_p95_s (seconds), attempts, requests_per_s, output_tokens_per_s,
    error_rate. errors / attempts count what is the replica's fault (error_class upstream_error or
    timeout, docs/telemetry.md): failed gateway attempts / gateway attempts where the gateway routed
    in that bucket, else the engine rows' own; error_rate = errors / attempts.

    Ranges of 6 h or more (see :func:`use_rollup`) read ``ops_engine_minutes`` (migration 1006):
    same counts, t-digest quantiles (~1 % rank error) instead of reservoir samples, minute-aligned;
    ranges of 12 h or more with whole-hour buckets read ``ops_engine_hours`` (migration 1006).
    """
    start, end = _range(start, end)
    if int(bucket_s) <= 0:
        raise ValueError(f"bucket_s must be a positive number of seconds, got {bucket_s}")
    name = "ops_latency_series"
    if use_rollup(start, end, bucket_s, filters):
        hours = (end - start).total_seconds() >= HOUR_ROLLUP_MIN_RANGE_S and int(bucket_s) % 3600 == 0
        name = "ops_latency_series_hours" if hours else "ops_latency_series_rollup"
    params = filter_params(filters)
    if name != "ops_latency_series":
        params = {"model": params["model"]}
    df = _frame(run(store, name, start=naive_utc(start), end=naive_utc(end), bucket_s=int(bucket_s), **params),
                ["bucket", "replica", "requests", "output_tokens_sum", "errors", "ttft_q", "itl_p95_s", "e2e_p95_s",
                 "attempts"])
    q = df.pop("ttft_q") if len(df) else pd.Series(dtype=object)
    for i, name in enumerate(("ttft_p50_s", "ttft_p95_s", "ttft_p99_s")):
        df[name] = [(v[i] if v is not None and len(v) == 3 else None) for v in q]
    df["requests_per_s"] = df["requests"] / float(bucket_s)
    df["output_tokens_per_s"] = df["output_tokens_sum"] / float(bucket_s)
    df["error_rate"] = df["errors"] / df["attempts"].where(df["attempts"] > 0)
    return df


def gauge_series(store, start: datetime, end: datetime, bucket_s: int, filters: dict | None = None) -> pd.DataFrame:
    """Engine gauges per bucket: waiting and running (sums over replicas of bucket means), kv_usage (0..1).

    Ranges of 6 h or more with whole-minute buckets read ``ops_gauge_minutes`` (migration 1006); of
    12 h or more with whole-hour buckets, the whole hours from ``ops_gauge_hours`` (migration 1006) and
    the cut hours' minutes from ``ops_gauge_minutes``: the same sums, the same figures.
    """
    start, end = _range(start, end)
    if int(bucket_s) <= 0:
        raise ValueError(f"bucket_s must be a positive number of seconds, got {bucket_s}")
    rollup = use_rollup(start, end, bucket_s)
    hours = rollup and (end - start).total_seconds() >= HOUR_ROLLUP_MIN_RANGE_S and int(bucket_s) % 3600 == 0
    return _frame(run(store, "ops_gauge_series", omit=frozenset({"raw"} if rollup else {"rollup"}),
                      start=naive_utc(start), end=naive_utc(end), bucket_s=int(bucket_s), hours=int(hours),
                      model=filter_params(filters)["model"]), ["bucket", "waiting", "running", "kv_usage"])


def finish_reasons(store, start: datetime, end: datetime, filters: dict | None = None) -> pd.DataFrame:
    """Engine requests that ended in [start, end) by finish reason: columns finish_reason, requests, share (0..1)."""
    start, end = _range(start, end)
    df = _frame(run(store, "ops_finish_reasons", start=naive_utc(start), end=naive_utc(end), **filter_params(filters)),
                ["finish_reason", "requests"])
    total = df["requests"].sum() if len(df) else 0
    df["share"] = df["requests"] / total if total else 0.0
    return df


@dataclass
class IngestStatus:
    """Whether telemetry is arriving: row counts, and the newest span / gauge point of the last 24 h
    (UTC; None when nothing arrived in that day)."""

    spans: int
    last_span: datetime | None
    engine_calls: int  # 1 if any engine (vLLM) call is stored, else 0
    calls: int
    gauge_points: int
    last_gauge: datetime | None


def ingest_status(store) -> IngestStatus:
    """Row counts of spans, calls and gauge points, for the dashboard's empty states."""
    row = run(store, "ops_ingest_status").iloc[0].to_dict()

    def ts(value):
        if value is None or pd.isna(value):
            return None
        t = pd.Timestamp(value)
        if t.value == 0:
            return None
        return (t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")).to_pydatetime(warn=False)

    return IngestStatus(int(row["spans"]), ts(row["last_span"]), int(row["engine_calls"]), int(row["calls"]),
                        int(row["gauge_points"]), ts(row["last_gauge"]))


def filter_values(store, start: datetime, end: datetime) -> dict[str, list[str]]:
    """Distinct ``models``, ``tenants`` and ``task_types`` in calls that started in the hours
    overlapping [start, end) (≤ 200 each; from the hourly pre-aggregation ``ops_dims_hours``)."""
    start, end = _range(start, end)
    df = run(store, "ops_filter_values", start=naive_utc(start), end=naive_utc(end))
    if not len(df):
        return {"models": [], "tenants": [], "task_types": []}
    row = df.iloc[0]
    return {key: [str(v) for v in row[key]] for key in ("models", "tenants", "task_types")}


def previous_window(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """The window of the same length just before [start, end)."""
    start, end = _range(start, end)
    return start - (end - start), start


__all__ = ["FleetTiles", "WindowStats", "IngestStatus", "fleet_tiles", "replica_health", "latency_series",
           "gauge_series", "finish_reasons", "ingest_status", "filter_values", "previous_window"]
