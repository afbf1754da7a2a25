"""Shaping of the cost job's query results for the cost pages (pure pandas/Altair; no queries, no Streamlit
calls except column configs).

The numbers are the cost queries' own (``schema.queries.cost``); this module only reorders and labels them.
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from app import ui

# Waterfall order: from total spend down to useful work (the cost model's categories, mutually exclusive:
# schema/jobs/README.md).
WATERFALL = [
    ("idle", "Idle GPUs"),
    ("unattributed", "Unattributed"),
    ("failed_task_waste", "Failed-task waste"),
    ("retry_waste", "Retry waste"),
    ("pending", "Outcome pending"),
]
CATEGORY_LABELS = {"useful": "useful", "retry_waste": "retry waste", "failed_task_waste": "failed-task waste",
                   "pending": "outcome pending", "unattributed": "unattributed", "idle": "idle (shared)"}
CATEGORY_COLORS = {"useful": "#2ca02c", "retry waste": "#ff7f0e", "failed-task waste": "#d62728",
                   "outcome pending": "#bcbd22", "unattributed": "#9467bd", "idle (shared)": "#7f7f7f"}


def missing_table(exc: Exception) -> bool:
    text = str(exc)
    return "UNKNOWN_TABLE" in text or "doesn't exist" in text or "does not exist" in text


def stop_on_store_error(exc: Exception, hint: str = "Run `infercost migrate` and the cost job.") -> None:
    """End the page after a failed cost query: an empty state with ``hint`` when the cost tables do
    not exist yet, else the store error (text and error id) as every page shows it."""
    if missing_table(exc):
        ui.empty_state("The cost tables do not exist yet.", hint)
    else:
        ui.store_error(exc)
    st.stop()


def summary_row(df: pd.DataFrame | None) -> dict | None:
    """The single row of an ungrouped period summary as a dict (NaN -> None), or None when empty."""
    if df is None or not len(df):
        return None
    row = df.iloc[0].to_dict()
    return {k: (None if isinstance(v, float) and pd.isna(v) else v) for k, v in row.items()}


def ratio(a, b) -> float | None:
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return None
    if not b or pd.isna(a) or pd.isna(b):
        return None
    return a / b


def waterfall_steps(waste: pd.DataFrame, spend_usd) -> list[dict]:
    """Steps of the spend -> useful waterfall: spend (absolute), each waste category (negative), useful (total).

    Categories with zero USD are left out except the two ends. ``spend_usd`` is the period summary's
    spend; the waste rows are ``waste_breakdown``'s.
    """
    usd = {r["category"]: float(r["usd"]) for _, r in waste.iterrows()} if len(waste) else {}
    total = float(spend_usd) if spend_usd is not None else sum(v for k, v in usd.items() if k != "partial")
    steps = [{"label": "Total spend", "value": total, "measure": "absolute"}]
    for key, label in WATERFALL:
        value = usd.get(key, 0.0)
        if value:
            steps.append({"label": label, "value": -value, "measure": "relative"})
    steps.append({"label": "Useful work", "value": usd.get("useful", 0.0), "measure": "total"})
    return steps


WATERFALL_COLORS = {"total": "#1f77b4", "decrease": "#d62728", "increase": "#2ca02c"}


def waterfall_bars(steps: list[dict]) -> pd.DataFrame:
    """The bars of a waterfall from :func:`waterfall_steps` / :func:`summary_waterfall` steps, one row a step
    in order: ``label``, ``lo`` / ``hi`` (USD, the bar's bottom and top), ``kind`` ('total' for an
    absolute or total step, 'decrease' / 'increase' for a relative one), ``text`` (the step's USD,
    unsigned: :func:`app.fmt.usd`), ``level`` (USD, the running total after the step: where the
    connector to the next bar is drawn), ``next_label`` (the next step's label; the last step's own).

    Running total: an 'absolute' step sets it to its value, a 'relative' step adds its value (the bar
    spans the level before and after), a 'total' step is drawn from 0 to its own value (the steps' useful
    work, not a recomputed sum) and sets the level to it. What Plotly's waterfall trace drew, computed here
    so the chart is a Vega-Lite one (Plotly's 4.7 MB bundle was loaded by every cost page view for it).
    """
    from app import fmt

    rows, level = [], 0.0
    for step in steps:
        value = float(step["value"])
        if step["measure"] == "relative":
            lo, hi = sorted((level, level + value))
            kind = "decrease" if value < 0 else "increase"
            level += value
        else:  # absolute / total
            lo, hi = sorted((0.0, value))
            kind = "total"
            level = value
        rows.append({"label": step["label"], "lo": lo, "hi": hi, "kind": kind, "text": fmt.usd(abs(value)),
                     "level": level})
    df = pd.DataFrame(rows, columns=["label", "lo", "hi", "kind", "text", "level"])
    df["next_label"] = list(df["label"].iloc[1:]) + list(df["label"].iloc[-1:])
    return df


# Pixels kept free around the triangle's points (the largest circle is ~14 px in radius; the current
# operating point's diamond ~10 px): a point at the top of the y domain or at the right end of the x domain
# was cut in half, its label too.
TRIANGLE_PADDING_PX = 24
# A current point's label goes left of it in the right quarter of the x range (right of it, it ran off the chart).
TRIANGLE_LABEL_FLIP = 0.75
# Current points closer than these shares of the x and y ranges share one label (a label is ~60 px wide and
# ~12 px high on a ~700 x 520 px plot): the fresh demo's four replicas, idle in the current hour, drew four
# names on top of each other.
TRIANGLE_LABEL_NEAR = (0.1, 0.04)
# The ``point`` value of a replica's latest window (its current operating point).
CURRENT_POINT = "current (latest window)"


def triangle_labels(current: pd.DataFrame, x: str, y: str, x_span: float, y_span: float) -> list[str]:
    """One label per row of ``current`` (each replica's latest window), in its order: points closer than
    :data:`TRIANGLE_LABEL_NEAR` of the spans ``x_span`` / ``y_span`` to a labelled one (in the order of x,
    then y) add their replica to its label and get "" themselves; a label names at most two replicas, then
    "+N"."""
    near_x, near_y = TRIANGLE_LABEL_NEAR[0] * (x_span or 1.0), TRIANGLE_LABEL_NEAR[1] * (y_span or 1.0)
    anchors: list[tuple[float, float, list[str]]] = []
    owner: dict = {}
    for idx, row in current.sort_values([x, y]).iterrows():
        px, py = float(row[x]), float(row[y])
        for ax, ay, names in anchors:
            if abs(px - ax) <= near_x and abs(py - ay) <= near_y:
                names.append(str(row["replica"]))
                owner[idx] = None
                break
        else:
            anchors.append((px, py, [str(row["replica"])]))
            owner[idx] = anchors[-1][2]
    out = []
    for idx in current.index:
        names = owner.get(idx)
        if not names:
            out.append("")
        else:
            out.append(", ".join(names[:2]) + (f" +{len(names) - 2}" if len(names) > 2 else ""))
    return out


def triangle_chart(pts: pd.DataFrame, front: pd.DataFrame, x: str, y: str, x_label: str, y_label: str,
                   height: int = 520) -> alt.LayerChart:
    """The latency-cost-throughput triangle: one circle per replica and window (``x`` throughput, ``y``
    p99 latency, colour CPST, size mean running requests), the Pareto frontier ``front`` as a dashed
    step line, each replica's latest window as a black diamond labelled with the replica. ``pts``: the
    columns of ``schema.queries.cost.replica_windows`` plus ``running`` and ``point``
    (:data:`CURRENT_POINT` / "earlier window"). Both scales keep :data:`TRIANGLE_PADDING_PX` free at
    their top ends and start at 0; a label in the right quarter of the x range is drawn left of its
    point; current points close together share one label (:func:`triangle_labels`)."""
    tooltip = [alt.Tooltip("replica:N"), alt.Tooltip("window_start:T", title="window start", format="%Y-%m-%d %H:%M"),
               alt.Tooltip("requests:Q", title="requests"),
               alt.Tooltip("output_tokens_per_s:Q", title="output tokens/s", format=",.1f"),
               alt.Tooltip("throughput_tokens_per_s:Q", title="tokens/s (prompt+output)", format=",.1f"),
               alt.Tooltip("successful_tasks_per_hour:Q", title="successful tasks/h", format=",.1f"),
               alt.Tooltip("ttft_p99_s:Q", title="TTFT p99 (s)", format=".3f"),
               alt.Tooltip("e2e_p99_s:Q", title="e2e p99 (s)", format=".3f"),
               alt.Tooltip("cpst_usd:Q", title="CPST (USD)", format="$.4f"),
               alt.Tooltip("spend_usd:Q", title="spend (USD)", format="$.4f"),
               alt.Tooltip("running:Q", title="running requests (mean)", format=".1f")]
    # padding widens both ends; domainMin (applied after it) keeps the axes from going below 0
    x_enc = alt.X(f"{x}:Q", title=x_label, scale=alt.Scale(padding=TRIANGLE_PADDING_PX, domainMin=0))
    y_enc = alt.Y(f"{y}:Q", title=y_label, scale=alt.Scale(padding=TRIANGLE_PADDING_PX, domainMin=0))
    base = alt.Chart(pts).encode(x=x_enc, y=y_enc)
    points = base.mark_circle(opacity=0.75, stroke="white", strokeWidth=0.5).encode(
        color=alt.Color("cpst_usd:Q", title="CPST (USD)", scale=alt.Scale(scheme="redyellowgreen", reverse=True)),
        size=alt.Size("running:Q", title="running requests", scale=alt.Scale(range=[30, 600])),
        tooltip=tooltip)
    is_current = alt.datum.point == CURRENT_POINT
    current = base.transform_filter(is_current).mark_point(
        shape="diamond", size=320, filled=False, strokeWidth=2.5, color="black").encode(tooltip=tooltip)
    values, ys = pd.to_numeric(pts[x], errors="coerce"), pd.to_numeric(pts[y], errors="coerce")
    lo, hi = (float(values.min()), float(values.max())) if values.notna().any() else (0.0, 0.0)
    flip = lo + TRIANGLE_LABEL_FLIP * (hi - lo)
    y_span = float(ys.max() - ys.min()) if ys.notna().any() else 0.0
    cur = pts[(pts["point"] == CURRENT_POINT) & values.notna() & ys.notna()]
    labelled = cur.assign(label=triangle_labels(cur, x, y, hi - lo, y_span))
    labelled = labelled[labelled["label"] != ""]
    base_labels = alt.Chart(labelled).encode(x=x_enc, y=y_enc)
    right_side = alt.datum[x] > flip
    labels = [base_labels.transform_filter(~right_side).mark_text(dx=12, dy=-10, fontWeight="bold", align="left"),
              base_labels.transform_filter(right_side).mark_text(dx=-12, dy=-10, fontWeight="bold", align="right")]
    frontier_line = alt.Chart(front).mark_line(color="#1f77b4", strokeDash=[6, 3], strokeWidth=2,
                                               interpolate="step-after").encode(x=x_enc, y=y_enc)
    return alt.layer(points, frontier_line, current,
                     *[label.encode(text=alt.Text("label:N")) for label in labels]).properties(height=height).interactive()


def waterfall_chart(bars: pd.DataFrame, height: int = 330) -> alt.Chart:
    """A waterfall of :func:`waterfall_bars` rows: one bar a step (blue totals, red decreases, green
    increases) labelled with its USD (above a bar, below a decrease), a grey connector at each level."""
    order = list(bars["label"])
    x = alt.X("label:N", sort=order, title=None, axis=alt.Axis(labelAngle=0, labelLimit=160, labelFlush=False))
    top = float(bars["hi"].max()) if len(bars) else 0.0
    y_scale = alt.Scale(domainMax=top * 1.08) if top > 0 else alt.Scale()  # room for the top bar's label
    base = alt.Chart(bars)
    connector = base.transform_filter("datum.label != datum.next_label").mark_rule(color="#999").encode(
        x=x, x2=alt.X2("next_label"), y=alt.Y("level:Q"))
    bar = base.mark_bar().encode(
        x=x, y=alt.Y("lo:Q", title="USD", scale=y_scale), y2=alt.Y2("hi"),
        color=alt.Color("kind:N", legend=None, scale=alt.Scale(domain=list(WATERFALL_COLORS),
                                                                range=list(WATERFALL_COLORS.values()))),
        tooltip=[alt.Tooltip("label:N", title="step"), alt.Tooltip("text:N", title="USD")])
    up = base.transform_filter("datum.kind != 'decrease'").mark_text(dy=-7, color="#555").encode(
        x=x, y=alt.Y("hi:Q"), text=alt.Text("text:N"))
    down = base.transform_filter("datum.kind == 'decrease'").mark_text(dy=8, color="#555").encode(
        x=x, y=alt.Y("lo:Q"), text=alt.Text("text:N"))
    return alt.layer(connector, bar, up, down).properties(height=height)


SUMMARY_CATEGORIES = [("idle_usd", "idle", "Idle GPUs"), ("unattributed_usd", "unattributed", "Unattributed"),
                      ("failed_task_waste_usd", "failed_task_waste", "Failed-task waste"),
                      ("retry_waste_usd", "retry_waste", "Retry waste"), ("pending_usd", "pending", "Outcome pending")]


def summary_waterfall(summary: dict, filtered: bool) -> list[dict]:
    """Waterfall steps from ONE period-summary row, so every step is under the same filter (a
    filtered page must not subtract the fleet's idle and useful from the filtered spend).

    The row's categories add up to its spend (``spend = useful + retry + failed + pending +
    unattributed + idle``; with a filter the idle is the view's share of the fleet's idle, in
    proportion to its allocated cost), so no step can go below zero. ``filtered`` labels the idle
    step as a share.
    """
    spend = float(summary.get("spend_usd") or 0.0)
    steps = [{"label": "Spend" + (" (this view)" if filtered else ""), "value": spend, "measure": "absolute"}]
    for col, _key, label in SUMMARY_CATEGORIES:
        value = float(summary.get(col) or 0.0)
        if value:
            if col == "idle_usd" and filtered:
                label = "Idle share"
            steps.append({"label": label, "value": -value, "measure": "relative"})
    steps.append({"label": "Useful work", "value": float(summary.get("useful_usd") or 0.0), "measure": "total"})
    return steps


def summary_waste_table(summary: dict) -> pd.DataFrame:
    """The waste table of one period-summary row: category, USD, share of the row's spend."""
    spend = float(summary.get("spend_usd") or 0.0)
    rows = [("useful", float(summary.get("useful_usd") or 0.0))]
    rows += [(key, float(summary.get(col) or 0.0)) for col, key, _ in SUMMARY_CATEGORIES]
    rows.append(("partial", float(summary.get("partial_usd") or 0.0)))
    return pd.DataFrame({"category": [r[0] for r in rows], "is_subset": [r[0] == "partial" for r in rows],
                         "usd": [r[1] for r in rows],
                         "share_of_spend": [r[1] / spend if spend else None for r in rows]})


def category_long(df: pd.DataFrame) -> pd.DataFrame:
    """Grouped period summary -> long rows (grp, category, usd) for a stacked bar."""
    cols = {"useful_usd": "useful", "retry_waste_usd": "retry waste", "failed_task_waste_usd": "failed-task waste",
            "pending_usd": "outcome pending", "unattributed_usd": "unattributed", "idle_usd": "idle (shared)"}
    present = [c for c in cols if c in df.columns]
    long = df[["grp"] + present].melt(id_vars="grp", var_name="category", value_name="usd")
    long["category"] = long["category"].map(cols)
    long["grp"] = long["grp"].replace("", "(none)")
    return long[long["usd"].fillna(0) != 0]


def stacked_categories(long: pd.DataFrame, by: str) -> alt.Chart:
    """One horizontal bar a group (``long``: grp, category, usd from :func:`category_long`), stacked by
    category. Each bar gets a band of 36 px (``alt.Step``: a fixed height was squeezed with the legend
    and axes into the container, and Vega then hid the labels of bars too thin for them) and every
    group's label is drawn (no overlap culling)."""
    order = list(CATEGORY_COLORS)
    return (alt.Chart(long).mark_bar()
            .encode(y=alt.Y("grp:N", title=by.replace("_", " "), sort="-x",
                            axis=alt.Axis(labelOverlap=False, labelLimit=240)),
                    x=alt.X("sum(usd):Q", title="USD"),
                    color=alt.Color("category:N", sort=order,
                                    scale=alt.Scale(domain=order, range=[CATEGORY_COLORS[c] for c in order])),
                    order=alt.Order("category_rank:Q"),
                    tooltip=[alt.Tooltip("grp:N"), alt.Tooltip("category:N"), alt.Tooltip("sum(usd):Q", format="$,.4f", title="USD")])
            .transform_calculate(category_rank=f"indexof({order!r}, datum.category)")
            .properties(height=alt.Step(36)))


GROUP_FIELDS = ["grp", "cpst_usd", "attributed_cpst_usd", "cost_per_request_usd", "cost_per_1m_tokens_usd",
                "spend_usd", "useful_usd", "retry_waste_usd", "failed_task_waste_usd", "idle_usd", "partial_usd",
                "successful_tasks", "tasks", "attempts_per_success", "requests", "tokens", "goodput_per_hour"]
GROUP_COLUMNS = {
    "grp": st.column_config.TextColumn("group"),
    "cpst_usd": st.column_config.NumberColumn("CPST (USD)", format="$%,.4f"),
    "attributed_cpst_usd": st.column_config.NumberColumn("attributed CPST (USD)", format="$%,.4f"),
    "cost_per_request_usd": st.column_config.NumberColumn("cost/request (USD)", format="$%,.5f"),
    "cost_per_1m_tokens_usd": st.column_config.NumberColumn("cost/1M tokens (USD)", format="$%,.3f"),
    "spend_usd": st.column_config.NumberColumn("spend (USD)", format="$%,.4f"),
    "useful_usd": st.column_config.NumberColumn("useful (USD)", format="$%,.4f"),
    "retry_waste_usd": st.column_config.NumberColumn("retry waste (USD)", format="$%,.4f"),
    "failed_task_waste_usd": st.column_config.NumberColumn("failed-task waste (USD)", format="$%,.4f"),
    "idle_usd": st.column_config.NumberColumn("idle share (USD)", format="$%,.4f"),
    "partial_usd": st.column_config.NumberColumn("partial streams (USD)", format="$%,.4f"),
    "successful_tasks": st.column_config.NumberColumn("successful tasks", format="%,d"),
    "tasks": st.column_config.NumberColumn("tasks ended", format="%,d"),
    "attempts_per_success": st.column_config.NumberColumn("attempts / success", format="%.2f"),
    "requests": st.column_config.NumberColumn("requests", format="%,d"),
    "tokens": st.column_config.NumberColumn("tokens", format="%,d"),
    "goodput_per_hour": st.column_config.NumberColumn("goodput (tasks/h)", format="%.1f"),
}


def group_table(df: pd.DataFrame, by: str) -> pd.DataFrame:
    out = df[[c for c in GROUP_FIELDS if c in df.columns]].copy()
    out["grp"] = out["grp"].replace("", "(none)")
    return out.rename(columns={"grp": by})


def bucket_label(seconds: int) -> str:
    if seconds % 86400 == 0:
        return f"{seconds // 86400} d" if seconds > 86400 else "day"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h" if seconds > 3600 else "hour"
    return f"{seconds // 60} min"


# Where a task's context came from (tasks.context_source), as the Tasks page and the data-quality
# panel name it.
CONTEXT_LABELS = {
    "sdk": "task SDK", "genai_agent": "GenAI agent span", "openinference": "OpenInference",
    "traceloop": "Traceloop", "genai_call": "GenAI call (root)", "request_root": "request root",
    "trace_without_root": "trace (root never arrived)",
}


def quality_problems(dq: pd.DataFrame) -> list[str]:
    """Human sentences for the data-quality flags worth a warning (thresholds: 5 % token gap)."""
    out = []
    from app.fmt import md_escape

    for _, r in dq.iterrows():
        replica = md_escape(r.get("replica", "?")) or "Calls on no known replica"
        gap = r.get("token_gap_ratio")
        if gap is not None and not pd.isna(gap) and abs(float(gap)) > 0.05:
            out.append(f"{replica}: the engine counters saw {float(gap):.0%} more tokens than the spans "
                       "(aborted streams or lost spans: that work is cost without a call).")
        if int(r.get("default_priced_minutes", 0) or 0):
            out.append(f"{replica}: not in fleet.yaml, priced at the default GPU price for "
                       f"{int(r['default_priced_minutes'])} minutes.")
        if int(r.get("unpriced_minutes", 0) or 0):
            out.append(f"{replica}: no price for its GPU type for {int(r['unpriced_minutes'])} minutes.")
        missing = int(r.get("gateway_evidence_calls", 0) or 0) + int(r.get("client_evidence_calls", 0) or 0)
        if missing and not r.get("replica"):
            # a client span whose request reached no replica the spans name (refused, answered before
            # the engine, or cut with its engine span lost): no GPU time is charged to it
            out.append(f"{missing} calls have only a client span (no engine or gateway span names a replica): "
                       "refused, answered with an error before the engine, or cut with their engine span lost.")
        elif missing:
            out.append(f"{replica}: {missing} calls have no engine span (crashed replica?); costed from gateway/client "
                       "evidence.")
        if int(r.get("cached_estimated_tokens", 0) or 0):
            out.append(f"{replica}: {int(r['cached_estimated_tokens'])} cached prompt tokens are estimated from the "
                       "engine's prefix-cache hit rate (no span counted them; run vLLM with "
                       "--enable-prompt-tokens-details).")
    return out


TRIANGLE_WINDOWS_S = (60, 300, 900, 3600, 21600, 86400)


def auto_window(range_s: float, max_windows: int = 48) -> int:
    """The smallest triangle window (seconds) giving at most ``max_windows`` windows per replica over
    ``range_s`` (default 48: an hour of 5-min windows is 12), so the chart stays readable and the query small."""
    for w in TRIANGLE_WINDOWS_S:
        if range_s / w <= max_windows:
            return w
    return TRIANGLE_WINDOWS_S[-1]
