"""Page 1, Live operations: fleet tiles, replica health, windowed quantiles, finish reasons.

Refreshes itself every 5 s without reloading the page (``st.fragment(run_every=5)``) when the time
range follows the clock. Every figure comes from ``schema.queries.ops`` (see its docstring for the
definitions: windowed quantiles, ITL per request, error and retry ratios, goodput).
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import streamlit as st

from app import charts, engine_view, filters, fmt, ui
from schema.queries.ops import MIN_LATENCY_REQUESTS
from schema.store import StoreError

REFRESH_S = 5
WINDOWS = {"1 min": 60, "5 min": 300, "15 min": 900}
# The time charts' tabs (``?tab=`` in the URL); only the open one's charts are built and drawn.
SERIES_TABS = ["Latency", "ITL and end-to-end", "Load and errors"]
SERIES_TAB_KEY = "tab"

st.title("Live operations")
f = filters.current()

# the two queries the page waits for before its panels, at once (the panels' own run at once after)
REPLICAS_QUERY = ("schema.queries.ops_engine:replicas", (f.start, f.end), {})
ui.prefetch([("schema.queries.ops:ingest_status", (), {}), REPLICAS_QUERY], live=True)
try:
    status = ui.query("schema.queries.ops:ingest_status", live=True)
except StoreError as exc:
    ui.store_error(exc)
    st.stop()
if status.spans == 0 and status.gauge_points == 0:
    ui.empty_state("Nothing to show yet.", ui.no_spans_hint())
    st.stop()

VIEWS = {"overview": "Overview", "engine": "vLLM engine"}
top = st.columns([2, 2, 2])
with top[0]:
    view_key = st.segmented_control("View", list(VIEWS), format_func=VIEWS.get, key="live_view",
                                    default=st.query_params.get("view") if st.query_params.get("view") in VIEWS
                                    else "overview") or "overview"
with top[1]:
    window_label = st.segmented_control("Tile window (compared with the window before it)", list(WINDOWS),
                                        default="5 min", key="live_window") or "5 min"
window_s = WINDOWS[window_label]
try:
    replica_options = ui.ask(REPLICAS_QUERY, live=True)
except StoreError:
    replica_options = []
url_replica = st.query_params.get("replica", "")
with top[2]:
    choices = [""] + sorted(set(replica_options) | ({url_replica} - {""}))
    replica = st.selectbox("Replica", choices, index=choices.index(url_replica) if url_replica in choices else 0,
                           format_func=lambda r: r or "All replicas", key="live_replica",
                           help="Per-replica charts show only this replica (fleet figures stay fleet-wide).")
for key, value, default in (("view", view_key, "overview"), ("replica", replica, "")):
    if value != default and st.query_params.get(key) != value:
        st.query_params[key] = value
    elif value == default and key in st.query_params:
        del st.query_params[key]

# (label, attribute, formatter(value, signed), lower is better?, help). Rates carry their unit in the
# label so six tiles fit a row.
TILES = [
    ("Requests/s", "requests_per_s", lambda v, s=False: fmt.rate(v, "", s).strip(), False,
     "Engine requests (vLLM llm_request spans) that finished in the window / window seconds."),
    ("Output tok/s", "output_tokens_per_s", lambda v, s=False: fmt.rate(v, "", s).strip(), False,
     "Generated tokens of those requests / window seconds."),
    ("TTFT p50", "ttft_p50_s", fmt.seconds, True, "Time to first token (arrival -> first token), median."),
    ("TTFT p95", "ttft_p95_s", fmt.seconds, True, "Time to first token, 95th percentile over the window."),
    ("TTFT p99", "ttft_p99_s", fmt.seconds, True, "Time to first token, 99th percentile over the window."),
    ("ITL p95", "itl_p95_s", fmt.seconds, True,
     "Inter-token latency per request = decode time / (output tokens - 1); 95th percentile over requests."),
    ("Error rate", "error_rate", fmt.pct, True,
     "Failed upstream attempts / attempts, seen at the gateway (crashed replicas included), else at the engine."),
    ("Retry ratio", "retry_ratio", fmt.pct, True,
     "Retry attempts (client task.attempt >= 2, plus the gateway's hidden retries) / all attempts."),
    ("Queue (req)", "queue_depth", lambda v, s=False: fmt.count(v, "", s), True,
     "Sum over replicas of vllm:num_requests_waiting (each replica's newest minute in the window)."),
    ("Running (req)", "running", lambda v, s=False: fmt.count(v, "", s), False,
     "Sum over replicas of vllm:num_requests_running (batch occupancy; newest minute)."),
    ("KV-cache use", "kv_cache_usage", fmt.pct, True,
     "Mean over replicas of vllm:kv_cache_usage_perc (0-100 %; newest minute)."),
    ("Goodput/h", "goodput_per_h", lambda v, s=False: fmt.rate(v, "", s).strip(), False,
     "Goodput: successful tasks that met their end-to-end SLO (slo.e2e_ms), per hour (tasks/h)."),
]


def queries(view: filters.Filters, bucket_s: int) -> dict[str, tuple]:
    """This run's named queries, as ``(path, args, kwargs)``: independent of one another, so
    :func:`app.ui.prefetch` runs them at once before the panels read them (the replica table's health
    query needs the tiles' gauge rows and runs after them)."""
    start, qf = view.end - timedelta(seconds=window_s), view.query_filters()
    q = {"notes": ("schema.queries.ops_engine:alert_annotations", (view.start, view.end), {}),
         "tiles": ("schema.queries.ops:fleet_tiles", (start, view.end, qf), {})}
    if view_key == "engine":
        return q | engine_view.queries(view, bucket_s, replica)
    q |= {"series": ("schema.queries.ops:latency_series", (view.start, view.end, bucket_s, qf), {}),
          "finish": ("schema.queries.ops:finish_reasons", (start, view.end, qf), {})}
    if ui.open_tab(SERIES_TABS, SERIES_TAB_KEY) == SERIES_TABS[-1]:  # only the load tab draws the gauges
        q["gauges"] = gauges_query(view, bucket_s)
    return q


def gauges_query(view: filters.Filters, bucket_s: int) -> tuple:
    return ("schema.queries.ops:gauge_series", (view.start, view.end, bucket_s, view.query_filters()), {})


def tiles(view: filters.Filters, q: dict):
    """The fleet tiles; returns their :class:`schema.queries.ops.FleetTiles` (the replica table reuses
    its gauge rows)."""
    start = view.end - timedelta(seconds=window_s)
    t = ui.ask(q["tiles"], live=True)
    st.caption(f"Window {ui.local_time(start, '%H:%M:%S')} – {ui.local_time(view.end, '%H:%M:%S')} "
               f"({ui.tz_label()}) vs the {window_label} before it.")
    for row in (TILES[:6], TILES[6:]):
        cols = st.columns(len(row))
        for col, (label, attr, render, lower_better, help_) in zip(cols, row):
            col.metric(label, render(getattr(t.current, attr)), help=help_, border=True,
                       **ui.metric_delta(t.delta(attr), render, lower_better))
    if t.current.requests == 0:
        ui.empty_state(f"No engine request finished in the last {window_label}.", quiet_hint("the tile window or "))
    return t


def quiet_hint(what: str = "") -> str:
    """What to do about an empty window: the spans' setup when the store holds no engine call at all,
    else where the newest data is (a store with data is not told "No spans yet")."""
    if status.engine_calls == 0:
        return "Check that vLLM exports spans. " + ui.no_spans_hint()
    newest = max((x for x in (status.last_span, status.last_gauge) if x is not None), default=None)
    where = (f"the newest telemetry arrived at {ui.local_time(newest, '%Y-%m-%d %H:%M')} ({ui.tz_label()})"
             if newest is not None else "nothing arrived in the last 24 h")
    return f"Widen {what}the time range: {where}."


def replica_table(view: filters.Filters, q: dict, gauges: pd.DataFrame | None = None) -> None:
    st.subheader(f"Replica health · last {window_label}")
    st.caption(f"Figures over the tile window ({window_label} ending {ui.local_time(view.end, '%H:%M')}); "
               "the TTFT trend column spans the whole range.")
    start = view.end - timedelta(seconds=window_s)
    health = ui.query("schema.queries.ops:replica_health", start, view.end, view.query_filters(), gauges=gauges,
                      live=True)
    if not len(health):
        ui.empty_state("No replica reported in this window.", quiet_hint())
        return
    series = ui.ask(q["series"], live=True)
    per_replica = series[series["replica"] != ""]
    spark = {r: [None if pd.isna(v) else round(float(v) * 1000, 1) for v in g.sort_values("bucket")["ttft_p95_s"]]
             for r, g in per_replica.groupby("replica")}
    table = pd.DataFrame({
        "status": ["degraded" if d else "ok" for d in health["degraded"]],
        "replica": health["replica"],
        "GPU": health["gpu_type"],
        "TTFT p95 trend (ms)": [spark.get(r, []) for r in health["replica"]],
        "running": health["running"],
        "waiting": health["waiting"],
        "KV use": health["kv_cache_usage"],
        "requests": health["requests"],
        "TTFT p95 (ms)": pd.to_numeric(health["ttft_p95_s"], errors="coerce") * 1000,
        "TTFT vs fleet": health["ttft_vs_fleet"],
        "ITL p95 (ms)": pd.to_numeric(health["itl_p95_s"], errors="coerce") * 1000,
        "ITL vs fleet": health["itl_vs_fleet"],
        "error rate": health["error_rate"],
        "why flagged": health["reason"],
    })
    config = {
        "status": st.column_config.TextColumn("status", help=(
            f"degraded: TTFT/ITL p95 > 2x the fleet median over at least {MIN_LATENCY_REQUESTS} requests (fewer: "
            "the p95 is the single slowest request, not flagged), or error rate > 5 %")),
        "running": st.column_config.NumberColumn("running (req)", format="%,d"),
        "waiting": st.column_config.NumberColumn("waiting (req)", format="%,d"),
        "KV use": st.column_config.ProgressColumn("KV-cache use", min_value=0.0, max_value=1.0, format="percent"),
        "TTFT p95 (ms)": st.column_config.NumberColumn(format="%,.0f ms"),
        "ITL p95 (ms)": st.column_config.NumberColumn(format="%.1f ms"),
        "TTFT vs fleet": st.column_config.NumberColumn("TTFT p95 / fleet median", format="%.2fx"),
        "ITL vs fleet": st.column_config.NumberColumn("ITL p95 / fleet median", format="%.2fx"),
        "error rate": st.column_config.NumberColumn(format="percent"),
        "TTFT p95 trend (ms)": st.column_config.LineChartColumn("TTFT p95 over the range (ms)", width="medium"),
    }
    ui.table(table, key="live_replicas", filename="replica_health.csv", column_config=config)
    flagged = health[health["degraded"]]
    for _, r in flagged.iterrows():
        st.warning(f"**{fmt.md_escape(r['replica'])}** ({fmt.md_escape(r['gpu_type'] or 'unknown GPU')}) looks "
                   f"degraded: {fmt.md_escape(r['reason'])}.",
                   icon=":material/warning:")


def time_series(view: filters.Filters, bucket_s: int, q: dict, notes) -> None:
    st.subheader(f"Latency and load over time · whole range ({filters.PRESETS.get(view.preset, ('custom',))[0].lower()})")
    st.caption(f"Quantiles over the requests of each {fmt.seconds(bucket_s) if bucket_s < 60 else f'{bucket_s // 60} min'} "
               f"bucket (never lifetime averages); times in {ui.tz_label()}.")
    series = ui.ask(q["series"], live=True)
    fleet = ui.to_viewer(series[series["replica"] == ""], ["bucket"], naive=True)
    per_replica = ui.to_viewer(series[series["replica"] != ""], ["bucket"], naive=True)
    if replica:
        per_replica = per_replica[per_replica["replica"] == replica]
    for col in ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "itl_p95_s", "e2e_p95_s"):
        fleet[col.replace("_s", "_ms")] = pd.to_numeric(fleet[col], errors="coerce") * 1000
        per_replica[col.replace("_s", "_ms")] = pd.to_numeric(per_replica[col], errors="coerce") * 1000
    fleet["error_pct"] = pd.to_numeric(fleet["error_rate"], errors="coerce") * 100
    # Three tabs of two to four charts, not eight charts at once: each Vega chart costs the browser ~80-90 ms
    # of main-thread time to compile and draw on a 2-core machine whatever its data (measured in headless
    # Chromium: the page with its charts removed loads ~0.7 s sooner, with one chart as fast as with none),
    # and a hidden tab builds nothing (app.ui.lazy_tabs): opening it reruns this fragment.
    latency, itl_e2e, load = ui.lazy_tabs(SERIES_TABS, SERIES_TAB_KEY)
    for tab in (latency, itl_e2e):
        if tab.open and not len(series):
            tab.caption("No engine requests in this time range: widen the time range.")
    if latency.open and len(series):
        with latency:
            left, right = st.columns(2)
            with left:
                st.markdown("**TTFT quantiles (ms)** · drag across the chart to zoom into that time range")
                zoom_chart((fleet, "bucket", {"ttft_p50_ms": "p50", "ttft_p95_ms": "p95", "ttft_p99_ms": "p99"},
                            "ms", notes))
            with right:
                st.markdown("**TTFT p95 by replica (ms)**")
                ui.cached_chart("app.charts:by_group_annotated",
                                (per_replica, "bucket", "ttft_p95_ms", "replica", "ms", notes), width="stretch")
    if itl_e2e.open and len(series):
        with itl_e2e:
            left, right = st.columns(2)
            with left:
                st.markdown("**ITL p95 by replica (ms)**")
                ui.cached_chart("app.charts:by_group_annotated",
                                (per_replica, "bucket", "itl_p95_ms", "replica", "ms", notes), width="stretch")
            with right:
                st.markdown("**End-to-end latency p95 (s)**")
                ui.cached_chart("app.charts:lines_annotated",
                                (fleet, "bucket", {"e2e_p95_s": "e2e p95"}, "s", notes), width="stretch")
    if load.open:
        with load:
            load_charts(view, bucket_s, fleet, notes)


def load_charts(view: filters.Filters, bucket_s: int, fleet: pd.DataFrame, notes) -> None:
    """The load tab: throughput and errors of the engine requests, queue, batch and KV-cache use (the
    gauges' query runs only here)."""
    if len(fleet):
        left, right = st.columns(2)
        with left:
            st.markdown("**Throughput (requests/s)**")
            ui.cached_chart("app.charts:lines_annotated",
                            (fleet, "bucket", {"requests_per_s": "requests/s"}, "req/s", notes), width="stretch")
        with right:
            st.markdown("**Errors (% of engine requests: error or abort)**")
            ui.cached_chart("app.charts:lines_annotated", (fleet, "bucket", {"error_pct": "errors %"}, "%", notes),
                            width="stretch")
    else:
        st.caption("No engine requests in this time range (throughput, errors).")
    gauges = ui.ask(gauges_query(view, bucket_s), live=True)
    if not len(gauges):
        st.caption("No replica gauges (vllm:num_requests_waiting / running, KV-cache use) in this range.")
        return
    g = ui.to_viewer(gauges, ["bucket"], naive=True)
    left, right = st.columns(2)
    with left:
        st.markdown("**Queue and batch (requests, summed over replicas)**")
        ui.cached_chart("app.charts:lines_annotated",
                        (g, "bucket", {"waiting": "waiting", "running": "running"}, "requests", notes),
                        width="stretch")
    with right:
        st.markdown("**KV-cache use (mean over replicas)**")
        g["kv_pct"] = g["kv_usage"] * 100
        ui.cached_chart("app.charts:lines_annotated", (g, "bucket", {"kv_pct": "KV use %"}, "%", notes),
                        width="stretch")


def zoom_chart(args: tuple) -> None:
    """Draw the lines of ``args`` (:func:`app.charts.zoom_lines`'s) with an x-interval selection: selecting
    a time span switches the page (and the URL) to that custom range, as zooming a Grafana panel does."""
    event = ui.cached_chart("app.charts:zoom_lines", args, width="stretch", on_select="rerun", selection_mode="zoom",
                            key="live_zoom")
    span = (getattr(event, "selection", None) or {}).get("zoom") or {}
    values = next(iter(span.values()), None) if isinstance(span, dict) else None
    if values and len(values) == 2:
        start, end = (ui.from_viewer(v) for v in values)
        if end > start:
            filters.zoom_to(start, end)


def finish_reasons(q: dict) -> None:
    """Requests by finish reason over the tile window: one table, its share drawn as a bar in the row (a
    separate bar chart showed the same numbers and cost the browser a Vega view)."""
    st.subheader(f"Finish reasons · last {window_label}")
    df = ui.ask(q["finish"], live=True)
    if not len(df):
        ui.empty_state(f"No engine request finished in the last {window_label}.")
        return
    left, _ = st.columns([2, 1])
    with left:
        ui.table(df.sort_values("requests", ascending=False), key="live_finish", filename="finish_reasons.csv",
                 column_config={
                     "finish_reason": st.column_config.TextColumn(
                         "finish reason", help="vLLM's finish reason (gen_ai.response.finish_reasons): stop, "
                         "length (max_tokens reached), abort (the request was aborted), tool_calls"),
                     "requests": st.column_config.NumberColumn("requests", format="%,d"),
                     "share": st.column_config.ProgressColumn("share", min_value=0.0, max_value=1.0,
                                                              format="percent")})


@st.fragment(run_every=REFRESH_S if f.live else None)
def live_panel() -> None:
    view = f.refreshed()
    bucket_s = charts.series_bucket(view.seconds)
    q = queries(view, bucket_s)
    try:
        ui.prefetch(list(q.values()), live=True)
        notes = ui.to_viewer(ui.ask(q["notes"], live=True), ["start", "end"], naive=True)
        t = tiles(view, q)
        if view_key == "engine":
            engine_view.render(view, bucket_s, replica, notes)
        else:
            replica_table(view, q, t.raw.get("gauges"))
            time_series(view, bucket_s, q, notes)
            finish_reasons(q)
        if len(notes):
            st.caption(f"Red bands on the charts: {len(notes)} alert(s) firing in this range "
                       f"({', '.join(sorted(set(fmt.md_escape(x) for x in notes['label'])))[:300]}).")
    except StoreError as exc:
        ui.store_error(exc)
    if f.live:
        fresh = ui.query("schema.queries.ops:ingest_status", live=True)
        if fresh.last_span is None:
            newest = "no span in the last 24 h"
        else:
            age = max(0.0, (view.end - fresh.last_span).total_seconds())
            newest = f"newest span {ui.local_time(fresh.last_span, '%H:%M:%S')} ({fmt.duration(age)} ago)"
        st.caption(f"Refreshes every {REFRESH_S} s · last update {ui.local_time(view.end, '%H:%M:%S')} "
                   f"({ui.tz_label()}) · {newest}")


live_panel()
