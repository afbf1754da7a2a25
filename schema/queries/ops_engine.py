"""Live-operations named queries for the vLLM engine view (parity with vLLM's Grafana board): engine
counters (prompt vs generation tokens, preemptions, prefix-cache hits), latency histograms (heatmaps
of TTFT / ITL / e2e, distributions of queue / prefill / decode time), per-replica gauges and scrape
health. Sources: the scraped vLLM ``/metrics`` in ``otel_metrics_sum`` / ``_histogram`` / ``_gauge``
(names as vLLM exports them, counters without ``_total``; shared/reference/vllm-telemetry.md) and the
per-minute gauge rollup ``ops_gauge_minutes``. Times UTC (naive = UTC); seconds; counts.
"""

from __future__ import annotations

from datetime import datetime

import pandas as pd

from schema.queries import filter_params, naive_utc, run
from schema.queries.ops import _frame, _range

# vLLM's histogram families shown by the engine view (name -> label).
HEATMAPS = {"vllm:time_to_first_token_seconds": "TTFT", "vllm:inter_token_latency_seconds": "ITL",
            "vllm:e2e_request_latency_seconds": "end-to-end latency"}
ANNOTATED_RULES = ("cascading_degradation", "replica_degradation", "retry_amplification", "queue_growth",
                   "saturation")
PHASES = {"vllm:request_queue_time_seconds": "queue", "vllm:request_prefill_time_seconds": "prefill",
          "vllm:request_decode_time_seconds": "decode"}


def engine_counters(store, start: datetime, end: datetime, bucket_s: int, filters: dict | None = None) -> pd.DataFrame:
    """Per bucket and replica: ``prompt_tokens``, ``generation_tokens``, ``preemptions``,
    ``prefix_cache_queries``, ``prefix_cache_hits`` (counter increases), plus ``prompt_tokens_per_s``,
    ``generation_tokens_per_s`` and ``prefix_cache_hit_rate`` (hits / queries, 0..1; None without queries)."""
    start, end = _range(start, end)
    df = _frame(run(store, "ops_engine_counters", start=naive_utc(start), end=naive_utc(end),
                    bucket_s=int(bucket_s), model=filter_params(filters)["model"]),
                ["bucket", "replica", "prompt_tokens", "generation_tokens", "preemptions", "prefix_cache_queries",
                 "prefix_cache_hits"])
    df["prompt_tokens_per_s"] = df["prompt_tokens"] / float(bucket_s)
    df["generation_tokens_per_s"] = df["generation_tokens"] / float(bucket_s)
    queries = pd.to_numeric(df["prefix_cache_queries"], errors="coerce")
    df["prefix_cache_hit_rate"] = pd.to_numeric(df["prefix_cache_hits"], errors="coerce") / queries.where(queries > 0)
    return df


def latency_histograms(store, start: datetime, end: datetime, bucket_s: int, replica: str = "",
                       filters: dict | None = None) -> pd.DataFrame:
    """Requests per histogram bucket of every family in :data:`HEATMAPS` and :data:`PHASES`, over time, in
    one query: columns ``metric``, ``bucket`` (UTC), ``le`` (upper bound, seconds, inf last), ``requests``
    (rows with requests only). A distribution over the whole range is the sum over ``bucket``."""
    start, end = _range(start, end)
    return _frame(run(store, "ops_latency_histogram", metrics=list(HEATMAPS) + list(PHASES),
                      start=naive_utc(start), end=naive_utc(end), bucket_s=int(bucket_s), replica=replica or "",
                      model=filter_params(filters)["model"]),
                  ["metric", "bucket", "le", "requests"])


def gauge_replica_series(store, start: datetime, end: datetime, bucket_s: int,
                         filters: dict | None = None) -> pd.DataFrame:
    """Per bucket and replica: mean ``running``, ``waiting`` (requests) and ``kv_usage`` (0..1)."""
    start, end = _range(start, end)
    return _frame(run(store, "ops_gauge_replica_series", start=naive_utc(start), end=naive_utc(end),
                      bucket_s=int(bucket_s), model=filter_params(filters)["model"]),
                  ["bucket", "replica", "running", "waiting", "kv_usage"])


def scrape_health(store, start: datetime, end: datetime) -> pd.DataFrame:
    """Per scrape target (replica): ``scrapes``, ``failed``, ``success_ratio`` (0..1), ``last_scrape``,
    ``last_ok`` (UTC) from the scraper's ``up`` gauge."""
    start, end = _range(start, end)
    df = _frame(run(store, "ops_scrape_health", start=naive_utc(start), end=naive_utc(end)),
                ["replica", "scrapes", "failed", "last_scrape", "last_ok"])
    scrapes = pd.to_numeric(df["scrapes"], errors="coerce")
    df["success_ratio"] = 1 - pd.to_numeric(df["failed"], errors="coerce") / scrapes.where(scrapes > 0)
    return df


def replicas(store, start: datetime, end: datetime) -> list[str]:
    """The replicas with engine requests or gauges in ``[start, end)``, sorted (the replica filter's options)."""
    start, end = _range(start, end)
    df = run(store, "ops_replicas", start=naive_utc(start), end=naive_utc(end))
    return [str(r) for r in df["replica"]] if len(df) and "replica" in df.columns else []


def alert_annotations(store, start: datetime, end: datetime) -> pd.DataFrame:
    """Operational alerts (:data:`ANNOTATED_RULES`: the cascade and its links) that fired in ``[start, end)``
    as chart annotations, clipped to the range: ``start`` (fired), ``end`` (resolved, or ``end`` while
    firing), ``label`` (rule, and replica when there is one), ``severity``. Slow fleet-wide alerts (SLO
    burn, budgets) would shade whole charts and are left to the Alerts page."""
    from schema.queries.alerts import alerts_in_period

    lo, hi = (pd.Timestamp(t) for t in _range(start, end))
    df = alerts_in_period(store, start, end)
    if len(df):
        df = df[df["rule"].isin(ANNOTATED_RULES)]
    if not len(df):
        return pd.DataFrame(columns=["start", "end", "label", "severity"])
    fired = pd.to_datetime(df["fired_at"].fillna(df["started_at"]), utc=True).clip(lower=lo)
    resolved = pd.to_datetime(df["resolved_at"], utc=True).fillna(hi).clip(upper=hi)
    label = [f"{r} {p}".strip() for r, p in zip(df["rule"], df["replica"].fillna(""))]
    return pd.DataFrame({"start": fired, "end": resolved, "label": label, "severity": df["severity"]})
