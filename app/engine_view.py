"""The live page's "vLLM engine" view: what an operator used to vLLM's Grafana board looks for.

Per-replica running / waiting / KV-cache use, prompt vs generation tokens/s, preemptions, prefix-cache
hit rate, TTFT / ITL / e2e heatmaps from vLLM's histograms, queue / prefill / decode time
distributions and scrape health per target; every chart carries the alert annotations of its range.
Every figure comes from ``schema.queries.ops_engine`` (definitions there). Only the selected view's
queries run (the overview's stay unread while this one is open), and of its three tabs only the open one's.
"""

from __future__ import annotations

import math

import altair as alt
import pandas as pd
import streamlit as st

from app import charts, fmt, ui


def _replica_rows(df: pd.DataFrame, replica: str) -> pd.DataFrame:
    return df[df["replica"] == replica] if replica and "replica" in df.columns else df


def _per_replica(df, x, y, title, unit, annotations, height=200):
    data = df.dropna(subset=[y])
    if not len(data):
        st.caption(f"{title}: no data in this range.")
        return
    st.markdown(f"**{title}**")
    ui.cached_chart("app.charts:by_group_annotated", (data, x, y, "replica", unit, annotations, height),
                    width="stretch")


# What one sample of a vLLM histogram counts, where it is not a request: vLLM observes
# ``vllm:inter_token_latency_seconds`` once per gap between two output tokens (vLLM's metrics docs; it
# replaced ``time_per_output_token_seconds``), so its counts are token gaps, ~output tokens per request.
COUNTED = {"vllm:inter_token_latency_seconds": "token gaps"}
# Axis names that fit a third of the page (the caption above each heatmap says it in full).
AXIS_NAMES = {"end-to-end latency": "e2e"}


def heatmap(df: pd.DataFrame, title: str, counted: str = "requests") -> alt.Chart:
    """Samples per (time bucket, histogram bucket): x = time, y = upper bound (seconds), colour = the
    histogram's count in that cell, titled ``counted`` (what one sample is: requests, or token gaps for
    ITL, :data:`COUNTED`). ``df``: columns bucket, le (seconds), requests (the query's name for the count)."""
    d = df[df["requests"] > 0].copy()
    d["le_label"] = [("+Inf" if math.isinf(v) else f"≤ {fmt.seconds(v)}") for v in d["le"]]
    order = [("+Inf" if math.isinf(v) else f"≤ {fmt.seconds(v)}") for v in sorted(d["le"].unique())]
    return (alt.Chart(d[["bucket", "le_label", "requests"]]).mark_rect()
            .encode(x=charts.time_x(d, "bucket"),
                    y=alt.Y("le_label:O", sort=list(reversed(order)), title=f"{AXIS_NAMES.get(title, title)} bucket"),
                    color=alt.Color("requests:Q", scale=alt.Scale(scheme="blues"), title=counted,
                                    legend=charts.LEGEND_QUANT),
                    tooltip=[alt.Tooltip("bucket:T", format="%Y-%m-%d %H:%M"), alt.Tooltip("le_label:O"),
                             alt.Tooltip("requests:Q", title=counted)])
            .properties(height=260))


def distribution(df: pd.DataFrame) -> alt.Chart:
    d = df[df["requests"] > 0].copy()
    d["le_label"] = [("+Inf" if math.isinf(v) else f"≤ {fmt.seconds(v)}") for v in d["le"]]
    order = [("+Inf" if math.isinf(v) else f"≤ {fmt.seconds(v)}") for v in sorted(d["le"].unique())]
    return (alt.Chart(d[["le_label", "requests", "phase"]]).mark_bar()
            .encode(x=alt.X("le_label:O", sort=order, title="time (upper bound of vLLM's bucket)"),
                    y=alt.Y("requests:Q", title="requests"), color=alt.Color("phase:N", legend=charts.LEGEND),
                    xOffset=alt.XOffset("phase:N"),
                    tooltip=[alt.Tooltip("phase:N"), alt.Tooltip("le_label:O"), alt.Tooltip("requests:Q")])
            .properties(height=240))


# The view's tabs (``?engine_tab=`` in the URL); only the open one's queries run and its charts are drawn.
TABS = ["Batch and KV-cache", "Tokens, prefix cache and preemptions", "Latency histograms"]
TAB_KEY = "engine_tab"


def all_queries(view, bucket_s: int, replica: str) -> dict[str, tuple]:
    """Every named query of the view for ``view``, as ``(path, args, kwargs)`` (:func:`app.ui.ask`)."""
    filters = view.query_filters()
    return {"gauges": ("schema.queries.ops_engine:gauge_replica_series", (view.start, view.end, bucket_s, filters), {}),
            "counters": ("schema.queries.ops_engine:engine_counters", (view.start, view.end, bucket_s, filters), {}),
            "histograms": ("schema.queries.ops_engine:latency_histograms",
                           (view.start, view.end, bucket_s, replica, filters), {}),
            "scrapes": ("schema.queries.ops_engine:scrape_health", (view.start, view.end), {})}


def queries(view, bucket_s: int, replica: str) -> dict[str, tuple]:
    """The queries this run draws (:func:`app.ui.prefetch`): the scrape health and the open tab's only (the
    counters take ~250 ms and the histograms ~260 ms at 7 days on the demo store, the gauges ~30 ms)."""
    tab_query = dict(zip(TABS, ("gauges", "counters", "histograms")))
    shown = tab_query[ui.open_tab(TABS, TAB_KEY)]
    return {k: v for k, v in all_queries(view, bucket_s, replica).items() if k == shown or k not in tab_query.values()}


def counter_charts(counters: pd.DataFrame, replica: str, bucket_s: int, annotations: pd.DataFrame) -> None:
    """The tokens tab: prompt vs generation tokens/s, prefix-cache hit rate and preemptions, from vLLM's
    counters (``schema.queries.ops_engine.engine_counters``), summed over replicas (or ``replica`` only)."""
    counters = ui.to_viewer(_replica_rows(counters, replica), ["bucket"], naive=True)
    if not len(counters):
        st.caption("No vLLM counters scraped in this range (is the /metrics scraper running?).")
        return
    fleet = counters.groupby("bucket", as_index=False)[
        ["prompt_tokens_per_s", "generation_tokens_per_s", "preemptions", "prefix_cache_hits",
         "prefix_cache_queries"]].sum()
    fleet["hit_pct"] = fleet["prefix_cache_hits"] / fleet["prefix_cache_queries"].where(
        fleet["prefix_cache_queries"] > 0) * 100
    left, right = st.columns(2)
    with left:
        st.markdown("**Prompt vs generation tokens/s**")
        ui.cached_chart("app.charts:lines_annotated", (
            fleet, "bucket", {"prompt_tokens_per_s": "prompt (prefill)", "generation_tokens_per_s": "generation"},
            "tokens/s", annotations), width="stretch")
        st.markdown(f"**Preemptions per {charts.bucket_text(bucket_s)}**")
        ui.cached_chart("app.charts:lines_annotated",
                        (fleet, "bucket", {"preemptions": "preemptions"}, "preemptions", annotations),
                        width="stretch")
    with right:
        st.markdown("**Prefix-cache hit rate (% of queried prompt tokens)**")
        ui.cached_chart("app.charts:lines_annotated",
                        (fleet, "bucket", {"hit_pct": "hit rate %"}, "%", annotations), width="stretch")


def histogram_charts(hist: pd.DataFrame) -> None:
    """The latency tab: TTFT / ITL / e2e heatmaps and the queue / prefill / decode distribution, from
    vLLM's histograms (``schema.queries.ops_engine.latency_histograms``)."""
    from schema.queries.ops_engine import HEATMAPS, PHASES

    st.markdown("**Latency heatmaps** (vLLM's histograms: requests per bucket over time; ITL counts each gap "
                "between two output tokens)")
    cols = st.columns(len(HEATMAPS))
    for col, (metric, label) in zip(cols, HEATMAPS.items()):
        with col:
            df = hist[hist["metric"] == metric]
            if not len(df):
                st.caption(f"{label}: no histogram samples in this range.")
                continue
            st.caption(label)
            ui.cached_chart("app.engine_view:heatmap",
                            (ui.to_viewer(df, ["bucket"], naive=True), label, COUNTED.get(metric, "requests")),
                            width="stretch")
    st.markdown("**Queue, prefill and decode time** (distribution over the range)")
    phases = hist[hist["metric"].isin(list(PHASES))]
    if len(phases):
        dist = phases.groupby(["metric", "le"], as_index=False)["requests"].sum()
        ui.cached_chart("app.engine_view:distribution", (dist.assign(phase=dist["metric"].map(PHASES)),),
                        width="stretch")
    else:
        st.caption("No queue / prefill / decode histograms in this range.")


def render(view, bucket_s: int, replica: str, annotations: pd.DataFrame) -> None:
    """Draw the engine view for ``view`` (filters; live ranges refreshed by the caller)."""
    q = all_queries(view, bucket_s, replica)
    st.subheader(f"vLLM engine · whole range ({ui.range_label(view)})")
    st.caption(f"From the replicas' scraped /metrics (vLLM's own counters, gauges and histograms), "
               f"{charts.bucket_text(bucket_s)} buckets; times in {ui.tz_label()}."
               + (f" Replica {fmt.md_escape(replica)} only." if replica else ""))
    # Tabs, as on the overview (app/views/live_ops.py): a Vega chart costs the browser ~80-90 ms to draw
    # whatever its data, and a hidden tab runs neither its queries nor its charts (app.ui.lazy_tabs).
    batch, tokens, latency = ui.lazy_tabs(TABS, TAB_KEY)
    if batch.open:
        with batch:
            gauges = ui.to_viewer(_replica_rows(ui.ask(q["gauges"], live=True), replica), ["bucket"], naive=True)
            gauges["kv_pct"] = pd.to_numeric(gauges["kv_usage"], errors="coerce") * 100
            left, right = st.columns(2)
            with left:
                _per_replica(gauges, "bucket", "running", "Running requests by replica", "requests", annotations)
                _per_replica(gauges, "bucket", "waiting", "Waiting requests by replica", "requests", annotations)
            with right:
                _per_replica(gauges, "bucket", "kv_pct", "KV-cache use by replica (%)", "%", annotations)
    if tokens.open:
        with tokens:
            counter_charts(ui.ask(q["counters"], live=True), replica, bucket_s, annotations)
    if latency.open:
        with latency:
            histogram_charts(ui.ask(q["histograms"], live=True))

    st.markdown("**Scrape health per target**")
    health = ui.ask(q["scrapes"], live=True)
    if not len(health):
        st.caption("No scrape recorded in this range (the /metrics scraper writes an `up` gauge per scrape).")
    else:
        shown = ui.to_viewer(health, ["last_scrape", "last_ok"])
        ui.table(shown[["replica", "scrapes", "failed", "success_ratio", "last_scrape", "last_ok"]],
                 key="engine_scrapes", filename="scrape_health.csv", column_config={
                     "success_ratio": st.column_config.ProgressColumn("up", min_value=0.0, max_value=1.0,
                                                                      format="percent"),
                     "last_scrape": st.column_config.DatetimeColumn("last scrape", format="HH:mm:ss"),
                     "last_ok": st.column_config.DatetimeColumn("last successful", format="HH:mm:ss")})
