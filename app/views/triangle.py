"""Page 3, the latency-cost-throughput triangle: one point per replica and window.

x = throughput (tokens/s or successful tasks/h), y = p99 latency (TTFT or end-to-end), colour =
cost per successful task, size = batch occupancy (mean running requests); the Pareto frontier and
the current operating point (each replica's latest window) are drawn. Data:
``schema.queries.cost.replica_windows``.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import costviews, filters, fmt, pareto, ui
from schema.store import StoreError

st.title("Latency-cost-throughput triangle")
f = filters.current()

WINDOWS = {"auto": 0, "1 min": 60, "5 min": 300, "15 min": 900, "1 h": 3600, "6 h": 21600}
X_AXES = {"output tokens/s": "output_tokens_per_s", "tokens/s (prompt + output)": "throughput_tokens_per_s",
          "successful tasks/h": "successful_tasks_per_hour"}
Y_AXES = {"TTFT p99 (s)": "ttft_p99_s", "end-to-end p99 (s)": "e2e_p99_s"}

c1, c2, c3 = st.columns(3)
window_label = c1.selectbox("Window", list(WINDOWS), key="tri_window",
                            help="auto: the smallest window giving at most 48 points per replica over the range")
x_label = c2.selectbox("Throughput", list(X_AXES), key="tri_x")
y_label = c3.selectbox("Tail latency", list(Y_AXES), key="tri_y")
window_s = WINDOWS[window_label] or costviews.auto_window(f.seconds)
x, y = X_AXES[x_label], Y_AXES[y_label]
if any(f.query_filters().values()):
    st.caption("Points are whole replicas: the model / tenant / task-type filters do not apply here.")
if window_label == "auto":
    st.caption(f"Window: {costviews.bucket_label(window_s)} per point.")

try:
    df = ui.query("schema.queries.cost:replica_windows", f.start, f.end, window_s)
except StoreError as exc:
    costviews.stop_on_store_error(exc)

if not len(df):
    ui.empty_state("No replica windows in this range.",
                   "Points appear once replicas have served requests and the cost job has run. " + ui.no_spans_hint())
    st.stop()

pts = ui.to_viewer(df, ["window_start"], naive=True)
pts["running"] = pd.to_numeric(pts.get("running_requests_avg"), errors="coerce").fillna(0.0)
latest = pts["window_start"] == pts.groupby("replica")["window_start"].transform("max")
pts["point"] = [costviews.CURRENT_POINT if v else "earlier window" for v in latest]
front = pareto.frontier(pts, x, y)
pts["on_frontier"] = pts.index.isin(front.index)

ui.cached_chart("app.costviews:triangle_chart", (pts, front, x, y, x_label, y_label), width="stretch")
st.markdown(
    "**Reading it.** Each dot is one replica over one window. Right is more throughput, down is a better tail; "
    "green is cheaper per successful task, a bigger dot is a fuller batch. The dashed line is the **Pareto "
    "frontier** (no other window had both more throughput and a lower p99); black diamonds are the **current "
    "operating point** of each replica. Larger batches buy throughput and lower cost per task at the price of "
    "tail latency: moving right along the frontier trades p99 for dollars.")

st.subheader("Windows")
table = pts.sort_values(["window_start", "replica"], ascending=[False, True])
cols = [c for c in ["replica", "window_start", "requests", "output_tokens_per_s", "throughput_tokens_per_s",
                    "successful_tasks", "successful_tasks_per_hour", "ttft_p99_s", "e2e_p99_s", "spend_usd",
                    "idle_usd", "cpst_usd", "running_requests_avg", "on_frontier"] if c in table.columns]
ui.table(table[cols], key="tri_table", filename="triangle_windows.csv", column_config={
    "window_start": st.column_config.DatetimeColumn(f"window start ({ui.tz_label()})", format="YYYY-MM-DD HH:mm"),
    "output_tokens_per_s": st.column_config.NumberColumn("output tok/s", format="%.1f"),
    "throughput_tokens_per_s": st.column_config.NumberColumn("tok/s", format="%.1f"),
    "successful_tasks": st.column_config.NumberColumn("successful tasks", format="%,d"),
    "successful_tasks_per_hour": st.column_config.NumberColumn("successes/h", format="%.1f"),
    "ttft_p99_s": st.column_config.NumberColumn("TTFT p99 (s)", format="%.3f"),
    "e2e_p99_s": st.column_config.NumberColumn("e2e p99 (s)", format="%.2f"),
    "spend_usd": st.column_config.NumberColumn("spend (USD)", format="$%,.4f"),
    "idle_usd": st.column_config.NumberColumn("idle (USD)", format="$%,.4f"),
    "cpst_usd": st.column_config.NumberColumn("CPST (USD)", format="$%,.4f"),
    "running_requests_avg": st.column_config.NumberColumn("running (mean req)", format="%.1f"),
    "on_frontier": st.column_config.CheckboxColumn("on frontier"),
}, height=320)
st.caption(f"{fmt.count(len(pts))} points, {fmt.count(len(front))} on the frontier.")
