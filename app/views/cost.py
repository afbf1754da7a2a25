"""Page 2, Cost per successful task: the headline beside the naive metrics, where the money went,
by task type / tenant / model, the trend, attempts per success and data quality.

Every figure comes from ``schema.queries.cost`` (the cost job's tables; definitions in its
docstring and schema/jobs/README.md).
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import charts, costviews, filters, fmt, ui
from schema.store import StoreError

st.title("Cost per successful task")
f = filters.current()

if ui.optional_function("schema.queries.cost:period_summaries") is None:
    ui.empty_state("The cost engine is not installed in this build.")
    st.stop()

BREAKDOWNS = ("task_type", "tenant", "model")
BREAKDOWN_TABS = ["Task type", "Tenant", "Model"]
BREAKDOWN_TAB_KEY = "by"  # in the link: ?by=Tenant
TREND_TABS = ["CPST", "Spend", "Successful tasks"]
TREND_TAB_KEY = "trend"  # in the link: ?trend=Spend
FILTERED = any(f.query_filters().values())
TREND_BUCKET_S = max(60, charts.bucket_for(f.seconds, points=60))


def queries() -> dict[str, tuple]:
    """This run's named queries, as ``(path, args, kwargs)``: independent of one another, so
    :func:`app.ui.prefetch` runs them at once before the panels read them (inside the page's
    ``shared_spans`` block, which the prefetch's threads share: one rollup-span read per range)."""
    # The headline, the three breakdowns and the period before (the deltas) in one query (each source
    # read once for all five). Unfiltered, the waste breakdown (the waterfall's) comes from the same read too.
    q = {"summaries": ("schema.queries.cost:period_summaries", (f.start, f.end, ("",) + BREAKDOWNS, f.query_filters()),
                       {"previous": True, "waste": not FILTERED}),
         "budgets": ("schema.queries.budgets:budget_status", (f.end,), {}),
         "trend": ("schema.queries.cost:cpst_trend", (f.start, f.end, TREND_BUCKET_S), {}),
         "quality": ("schema.queries.cost:data_quality", (f.start, f.end), {}),
         "context": ("schema.queries.cost:task_context", (f.start, f.end), {})}
    if FILTERED:  # the fleet's idle and spend beside a filtered view
        q["fleet"] = ("schema.queries.cost:period_summary", (f.start, f.end, None, {}), {})
    return q


Q = queries()
try:
    ui.prefetch(list(Q.values()))
    summaries = ui.ask(Q["summaries"])
    summary = costviews.summary_row(summaries[""])
    previous = costviews.summary_row(summaries["previous"])
except StoreError as exc:
    costviews.stop_on_store_error(exc, "Run `infercost migrate`, then `infercost cost` "
                                       "(or start `infercost up`, which runs the cost job every minute).")

if summary is None or not (summary.get("spend_usd") or 0):
    ui.empty_state("No spend in this time range yet.",
                   "The cost job turns spans into spend once a minute; check the time range, that `fleet.yaml` "
                   "lists your replicas' GPU prices, and that spans arrive. " + ui.no_spans_hint())
    st.stop()


def _comparable_coverage() -> bool:
    """Deltas only between periods with data for about the same time (hours in which a replica was up,
    within 10 %): a period with 2 hours of data against a full one compares nothing."""
    now = int(summary.get("hours_with_data") or 0) if summary else 0
    before = int(previous.get("hours_with_data") or 0) if previous else 0
    return max(now, before) > 0 and abs(now - before) <= 0.1 * max(now, before)


COMPARABLE = _comparable_coverage()


def _delta(key: str, render, lower_better: bool = True):
    a = summary.get(key)
    # No spend before this period means no data there (not a baseline of zero): no delta; nor when the
    # two periods have data for different lengths of time.
    if not previous or not (previous.get("spend_usd") or 0) or not COMPARABLE:
        return {}
    b = previous.get(key)
    if a is None or b is None or pd.isna(a) or pd.isna(b):
        return {}
    return ui.metric_delta(float(a) - float(b), render, lower_better)


st.caption(f"{ui.local_time(f.start, '%Y-%m-%d %H:%M')} – {ui.local_time(f.end, '%Y-%m-%d %H:%M')} "
           f"({ui.tz_label()}); tasks count in the period in which they ended. "
           + ("Deltas vs the period before." if COMPARABLE else
              "No deltas: the period before has data for a different length of time."))
cols = st.columns(4)
cols[0].metric("Cost per successful task", fmt.usd(summary.get("cpst_usd")), border=True,
               help="All spend in the period (busy and idle GPUs) / tasks that succeeded in the period.",
               **_delta("cpst_usd", fmt.usd))
cols[1].metric("Cost per request (naive)", fmt.usd(summary.get("cost_per_request_usd")), border=True,
               help="Spend / LLM calls started. Ignores retries, failures and idle: looks cheaper than it is.",
               **_delta("cost_per_request_usd", fmt.usd))
cols[2].metric("Cost per 1M tokens (naive)", fmt.usd(summary.get("cost_per_1m_tokens_usd")), border=True,
               help="Spend / (prompt + output tokens) x 1,000,000.", **_delta("cost_per_1m_tokens_usd", fmt.usd))
cols[3].metric("Attributed CPST (excl. idle)", fmt.usd(summary.get("attributed_cpst_usd")), border=True,
               help="Spend allocated to calls (idle GPU time excluded) / successful tasks.",
               **_delta("attributed_cpst_usd", fmt.usd))
cols = st.columns(4)
cols[0].metric("Spend", fmt.usd(summary.get("spend_usd")), border=True, help="GPU price x GPUs x time up (USD).",
               **_delta("spend_usd", fmt.usd))
cols[1].metric("Successful tasks", fmt.count(summary.get("successful_tasks")), border=True,
               help=f"of {fmt.count(summary.get('tasks'))} tasks ended "
                    f"({fmt.count(summary.get('failed_tasks'))} failed, {fmt.count(summary.get('abandoned_tasks'))} abandoned)",
               **_delta("successful_tasks", lambda v, s=False: fmt.count(v, signed=s), lower_better=False))
cols[2].metric("Attempts per successful task", fmt.count(summary.get("attempts_per_success")), border=True,
               help="Calls sent per successful task, client retries included (the gateway's hidden retries "
                    "are not the client's calls: see calls per task in the review).",
               **_delta("attempts_per_success", lambda v, s=False: fmt.count(v, signed=s)))
cols[3].metric("Goodput (tasks/h)", fmt.rate(summary.get("goodput_per_hour"), "").strip(), border=True,
               help="Successful tasks within their latency SLO, per hour.",
               **_delta("goodput_per_hour", lambda v, s=False: fmt.rate(v, "", s).strip(), lower_better=False))
ratio = costviews.ratio(summary.get("cpst_usd"), summary.get("cost_per_request_usd"))
if ratio:
    st.info(f"A successful task costs **{ratio:.1f}x** a request: retries, failed tasks, multi-call workflows and "
            "idle GPUs are what the naive per-request figure hides.", icon=":material/lightbulb:")

def budgets_panel() -> None:
    """Budgets (fleet.yaml) at the end of the range: spend so far in each budget's day / week, the linear
    forecast to the period's end, and the budget alerts' verdict (``schema.queries.budgets``)."""
    status = ui.ask(Q["budgets"])
    if not len(status):
        st.caption("No budgets configured (fleet.yaml `budgets:` per tenant / task type).")
        return
    st.subheader(f"Budgets · periods containing {ui.local_time(f.end, '%Y-%m-%d %H:%M')}")
    table = status.assign(
        verdict=["over budget" if u >= 1 else "on course to overspend" if b >= 1 else "within"
                 for u, b in zip(status["used_ratio"], status["burn_ratio"])])
    for r in table[table["verdict"] != "within"].to_dict("records"):
        st.warning(f"{fmt.md_escape(r['scope'].replace('_', ' '))} **{fmt.md_escape(r['name'])}**: {r['verdict']} "
                   f"({fmt.usd(r['spent_usd'])} spent of {fmt.usd(r['budget_usd'])} per {r['period']}, "
                   f"forecast {fmt.usd(r['projected_usd'])}).", icon=":material/savings:")
    ui.table(table[["scope", "name", "period", "budget_usd", "spent_usd", "used_ratio", "projected_usd",
                    "burn_ratio", "verdict"]], key="cost_budgets", filename="budgets.csv", column_config={
        "budget_usd": st.column_config.NumberColumn("budget (USD)", format="$%,.2f"),
        "spent_usd": st.column_config.NumberColumn("spent so far (USD)", format="$%,.2f"),
        "used_ratio": st.column_config.ProgressColumn("used", min_value=0.0, max_value=1.0, format="percent"),
        "projected_usd": st.column_config.NumberColumn("forecast at period end (USD)", format="$%,.2f"),
        "burn_ratio": st.column_config.NumberColumn("forecast / budget", format="%.2fx")})
    st.caption("Spend = cost allocated to the scope's calls (idle GPU time belongs to no tenant or task type). "
               "The budget_burn alert fires on the same forecast; spend_anomaly compares each tenant's last hour "
               "with the same hour a week before (Alerts page).")


def details() -> None:
    """Waterfall, breakdowns, trend and data quality (each a named query of schema.queries.cost)."""
    st.subheader("Where the money went")
    if FILTERED:
        waste = costviews.summary_waste_table(summary)
        steps = costviews.summary_waterfall(summary, filtered=True)
    else:
        waste = summaries["waste"]
        steps = costviews.waterfall_steps(waste, summary.get("spend_usd"))
    left, right = st.columns([3, 2])
    with left:
        ui.cached_chart("app.costviews:waterfall_chart", (costviews.waterfall_bars(steps),), width="stretch",
                        key="cost_waterfall")
    with right:
        shown = waste.rename(columns={"usd": "USD", "share_of_spend": "share of spend"})
        ui.table(shown, key="cost_waste", filename="waste_breakdown.csv", column_config={
            "USD": st.column_config.NumberColumn(format="$%,.4f"),
            "share of spend": st.column_config.NumberColumn(format="percent"),
            "is_subset": st.column_config.CheckboxColumn("subset", help="a subset of the others: partial streams "
                                                         "are part of the categories above, not added to them"),
            "tokens": st.column_config.NumberColumn("tokens", format="%,d")},
            # the share of spend beside the USD (in the query's order it was past the column's edge)
            column_order=("category", "USD", "share of spend", "is_subset", "calls", "tokens"))
        partial = waste[waste["category"] == "partial"]
        if len(partial) and partial.iloc[0]["usd"]:
            p = partial.iloc[0]
            st.caption(f"Partial streams (tokens streamed, then the call broke): {fmt.usd(p['usd'])}"
                       + (f", {fmt.count(p.get('tokens'), 'tokens')}" if "tokens" in p else "")
                       + " — already counted inside the waste categories.")
    if FILTERED:
        fleet = costviews.summary_row(ui.ask(Q["fleet"]))
        st.caption(
            f"Every figure above is computed under the sidebar's filters. Idle GPU time belongs to no task, "
            f"tenant or model: this view carries a share of it in proportion to its allocated cost "
            f"({fmt.usd(summary.get('idle_usd'))}). Fleet-wide, unfiltered: idle "
            f"{fmt.usd((fleet or {}).get('idle_usd'))} of {fmt.usd((fleet or {}).get('spend_usd'))} spend.")

    budgets_panel()

    st.subheader("By task type, tenant and model")
    # Only the open tab builds its chart and table (app.ui.lazy_tabs; opening another reruns the page, whose
    # queries are cached): a hidden tab's chart still cost its Vega-Lite conversion and its data sent.
    # The one summary query holds all three breakdowns, so the tabs change no query.
    for tab, by in zip(ui.lazy_tabs(BREAKDOWN_TABS, BREAKDOWN_TAB_KEY), BREAKDOWNS):
        if not tab.open:
            continue
        with tab:
            df = summaries[by]
            if not len(df):
                ui.empty_state("No spend for these filters.")
                continue
            long = costviews.category_long(df)
            ui.cached_chart("app.costviews:stacked_categories", (long, by), width="stretch")
            ui.table(costviews.group_table(df, by), key=f"cost_by_{by}", filename=f"cost_by_{by}.csv",
                     column_config=costviews.GROUP_COLUMNS)

    st.subheader("Trend" + (" (whole fleet: not filtered)" if FILTERED else ""))
    bucket_s = TREND_BUCKET_S
    trend = ui.ask(Q["trend"])
    if not len(trend):
        ui.empty_state("No trend yet in this range.")
    else:
        t = ui.to_viewer(trend, ["bucket_start"], naive=True)
        label = costviews.bucket_label(bucket_s)
        # One chart drawn, the open tab's (app.ui.lazy_tabs; the one trend query holds all three series):
        # each Vega chart costs the browser ~80-90 ms whatever its data, and three side by side were a
        # tenth of the page's load time (benchmarks/README.md, "Fewer charts drawn at once").
        for tab, (title, series, unit) in zip(ui.lazy_tabs(TREND_TABS, TREND_TAB_KEY), (
                (f"CPST per {label} (USD)", {"cpst_usd": "CPST", "attributed_cpst_usd": "attributed CPST"},
                 "USD per successful task"),
                (f"Spend per {label} (USD)", {"spend_usd": "spend", "allocated_usd": "allocated to calls"}, "USD"),
                (f"Successful tasks per {label}", {"successful_tasks": "successful", "slo_met_tasks": "within SLO"},
                 "tasks"))):
            if not tab.open:
                continue
            with tab:
                st.markdown(f"**{title}**")
                ui.cached_chart("app.charts:lines", (t, "bucket_start", series, unit), width="stretch")

    st.subheader("Data quality" + (" (whole fleet: not filtered)" if FILTERED else ""))
    dq = ui.ask(Q["quality"])
    if not len(dq):
        ui.empty_state("No replica was up in this range.")
    else:
        for problem in costviews.quality_problems(dq):
            st.warning(problem, icon=":material/warning:")
        ui.table(dq, key="cost_dq", filename="data_quality.csv", column_config={
            "token_gap_ratio": st.column_config.NumberColumn("token gap (share of counters)", format="percent"),
            "spend_usd": st.column_config.NumberColumn("spend (USD)", format="$%,.2f"),
            "span_tokens": st.column_config.NumberColumn("span tokens", format="%,d"),
            "counter_tokens": st.column_config.NumberColumn("engine-counter tokens", format="%,d"),
            "late_minutes_recomputed": st.column_config.NumberColumn("minutes recomputed for late data", format="%,d"),
            "cached_estimated_tokens": st.column_config.NumberColumn("cached tokens (estimated)", format="%,d"),
            "unspanned_usd": st.column_config.NumberColumn("unspanned engine work (USD)", format="$%,.4f"),
        })
        st.caption("Span tokens come from the calls' spans; counter tokens from vLLM's vllm:prompt_tokens + "
                   "vllm:generation_tokens counters, per scrape. A gap is work the spans missed (aborted streams, "
                   "lost spans): it is charged to that minute's calls without an engine span, else shown as "
                   "unspanned engine work. Cached tokens no span counted are estimated from the counters' "
                   "prefix-cache hit rate. Minutes whose data arrived after the live window are recomputed.")
    context = ui.ask(Q["context"])
    if len(context):
        st.markdown("**Where the tasks' context came from**")
        shown = context.assign(context_source=context["context_source"].map(costviews.CONTEXT_LABELS)
                               .fillna(context["context_source"]))
        ui.table(shown.rename(columns={"context_source": "task context", "context_kind": "kind"}),
                 key="cost_task_context", filename="task_context.csv")
        st.caption("explicit: the task SDK marked the calls (task.id); derived: the trace's root span is the "
                   "task (OpenTelemetry GenAI agent span, OpenInference, Traceloop, the call itself, another "
                   "root), or calls whose root never arrived. Calls without any task are `unattributed` above.")


try:
    details()
except StoreError as exc:
    ui.store_error(exc)
