"""Page 4, Tasks: a searchable table of tasks and a drill-down (Gantt of steps, attempts and calls).

Data: ``schema.queries.cost.tasks_table`` and ``task_calls`` (the cost job's per-task and per-call
rows). Select a row (or open ``?task=<id>``) to see the task's timeline.
"""

from __future__ import annotations

import hashlib

import altair as alt
import pandas as pd
import streamlit as st

from app import charts, costviews, filters, fmt, ui
from schema.store import StoreError

LIMIT = 1000

st.title("Tasks")
f = filters.current()
if ui.optional_function("schema.queries.cost:tasks_table") is None:
    ui.empty_state("The cost engine is not installed in this build.")
    st.stop()

search = st.text_input("Search (task id, type or tenant)", key="tasks_search",
                       value=st.query_params.get("q", ""), placeholder="e.g. research_agent, acme, 3f2a…")
if search:
    st.query_params["q"] = search
elif "q" in st.query_params:
    del st.query_params["q"]

try:
    tasks = ui.query("schema.queries.cost:tasks_table", f.start, f.end, search or None, LIMIT)
except StoreError as exc:
    costviews.stop_on_store_error(exc)

CONTEXT_LABELS = costviews.CONTEXT_LABELS

# tasks_table takes no model / tenant / task-type filter: apply the sidebar's to the rows returned.
for key, col in (("model", "model"), ("tenant", "tenant_id"), ("task_type", "task_type")):
    value = getattr(f, key)
    if value and col in tasks.columns:
        tasks = tasks[tasks[col] == value]

if not len(tasks):
    ui.empty_state("No task ended in this range" + (f" matching “{fmt.md_escape(search)}”." if search else "."),
                   "Tasks appear once the cost job has run over calls whose trace has a root span (an agent "
                   "run, a workflow, a request handler: OpenTelemetry GenAI, OpenInference, OpenLLMetry) or "
                   "that the task SDK marks (task.id / task.outcome).")
    st.stop()

tasks = tasks.reset_index(drop=True)
waste = tasks[[c for c in ("retry_waste_usd", "failed_task_waste_usd") if c in tasks.columns]].sum(axis=1)
view = pd.DataFrame({
    "task_id": tasks["task_id"], "type": tasks["task_type"], "tenant": tasks["tenant_id"],
    "outcome": tasks["outcome"], "context": tasks["context_source"].map(CONTEXT_LABELS).fillna(tasks["context_source"]),
    "attempts": tasks["attempts"], "calls": tasks["calls"],
    "cost (USD)": tasks["cost_usd"], "waste (USD)": waste,
    "partial calls": tasks.get("partial_calls"), "e2e (s)": tasks.get("e2e_s"),
    "SLO met": tasks.get("slo_met").astype(bool) if "slo_met" in tasks else None,
    "ended": ui.to_viewer(tasks, ["end_time"])["end_time"],
})
st.caption(f"{fmt.count(len(view))} tasks (newest first, at most {LIMIT:,}); times in {ui.tz_label()}. "
           "Select a row for its timeline.")
# The table's widget key follows the search, so a new search starts without a stale row selection
# (a selection is a row POSITION: kept across a new search it would point at another task).
table_key = "tasks_table_" + hashlib.sha1(search.encode()).hexdigest()[:8]
event = ui.table(view, key=table_key, filename="tasks.csv", on_select="rerun", selection_mode="single-row",
                 height=360, column_config={
                     "cost (USD)": st.column_config.NumberColumn(format="$%,.5f"),
                     "waste (USD)": st.column_config.NumberColumn(format="$%,.5f"),
                     "e2e (s)": st.column_config.NumberColumn(format="%.2f s"),
                     "ended": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss"),
                 })

# The drill-down follows the task id (in the URL), never a row position.
rows = getattr(getattr(event, "selection", None), "rows", None) or []
if rows and rows[0] < len(view):
    picked = str(view.iloc[rows[0]]["task_id"])
    if st.query_params.get("task") != picked:
        st.query_params["task"] = picked
selected = st.query_params.get("task")
if not selected:
    st.stop()

st.subheader(f"Task {fmt.md_escape(selected)}")
calls = ui.query("schema.queries.cost:task_calls", selected)
row = tasks[tasks["task_id"] == selected]
if len(row):
    r = row.iloc[0].to_dict()
else:  # selected from a link or an earlier search: read its row by id
    r = ui.query("schema.queries.tasks:task_detail", selected)[0]
if r:
    cols = st.columns(5)
    cols[0].metric("Outcome", fmt.md_escape(r["outcome"]), border=True)
    cols[1].metric("Cost", fmt.usd(r["cost_usd"]), border=True)
    cols[2].metric("Waste", fmt.usd(float(r.get("retry_waste_usd", 0) or 0) + float(r.get("failed_task_waste_usd", 0) or 0)),
                   border=True, help="retry waste + failed-task waste (USD)")
    cols[3].metric("Attempts", fmt.count(r["attempts"]), border=True)
    cols[4].metric("End to end", fmt.seconds(r.get("e2e_s")), border=True)
    source = str(r.get("context_source") or "")
    st.caption("Task context: " + fmt.md_escape(CONTEXT_LABELS.get(source, source or "unknown")))
if not len(calls):
    ui.empty_state("No calls recorded for this task (yet).")
    st.stop()

g = ui.to_viewer(calls, ["start_time", "end_time"], naive=True)
g["lane"] = [f"{s or '(no step)'} #{int(a) if pd.notna(a) else '?'}" for s, a in zip(g["task_step"], g["task_attempt"])]
g["what"] = [("partial stream" if p else (c or "")) for p, c in zip(g["partial"], g["category"])]
lanes = list(dict.fromkeys(g.sort_values("start_time")["lane"]))
gantt = (alt.Chart(g).mark_bar(height=16, cornerRadius=2)
         .encode(x=charts.time_x(g, "start_time", f"time ({ui.tz_label()})"), x2="end_time:T",
                 y=alt.Y("lane:N", sort=lanes, title="step #attempt", axis=alt.Axis(labelLimit=0)),
                 color=alt.Color("what:N", title="category",
                                 scale=alt.Scale(domain=["useful", "retry_waste", "failed_task_waste", "pending",
                                                         "unattributed", "partial stream"],
                                                 range=["#2ca02c", "#ff7f0e", "#d62728", "#bcbd22", "#9467bd",
                                                        "#8c564b"])),
                 tooltip=["task_step:N", "task_attempt:Q", "replica:N", "call_source:N", "status:N", "error_type:N",
                          "finish_reason:N", "prompt_tokens:Q", "output_tokens:Q",
                          alt.Tooltip("ttft_s:Q", title="TTFT (s)", format=".3f"),
                          alt.Tooltip("e2e_s:Q", title="e2e (s)", format=".3f"),
                          alt.Tooltip("cost_usd:Q", title="cost (USD)", format="$.6f"), "category:N"])
         .properties(height=max(120, 28 * len(lanes))))
text = alt.Chart(g).mark_text(align="left", dx=4, fontSize=11).encode(
    x="end_time:T", y=alt.Y("lane:N", sort=lanes), text="replica:N")
# Failed attempts that never reached an engine last milliseconds: mark them so they stay visible.
failed = alt.Chart(g[g["status"] == "error"]).mark_point(shape="cross", size=90, color="#d62728", strokeWidth=2).encode(
    x="start_time:T", y=alt.Y("lane:N", sort=lanes),
    tooltip=["task_step:N", "task_attempt:Q", "replica:N", "call_source:N", "error_type:N",
             alt.Tooltip("cost_usd:Q", title="cost (USD)", format="$.6f")])
ui.chart(gantt + failed + text, width="stretch")
st.caption("Bars: calls (colour = cost category); red crosses: attempts that failed; labels: replica.")
cols = [c for c in ["task_step", "task_attempt", "replica", "gpu_type", "call_source", "start_time", "e2e_s", "ttft_s",
                    "status", "error_type", "finish_reason", "partial", "prompt_tokens", "output_tokens", "cost_usd",
                    "category"] if c in calls.columns]
ui.table(ui.to_viewer(calls, ["start_time"])[cols], key="task_calls", filename=f"task_{selected}_calls.csv",
         column_config={"cost_usd": st.column_config.NumberColumn("cost (USD)", format="$%,.6f"),
                        "e2e_s": st.column_config.NumberColumn("e2e (s)", format="%.3f"),
                        "ttft_s": st.column_config.NumberColumn("TTFT (s)", format="%.3f"),
                        "partial": st.column_config.CheckboxColumn("partial stream"),
                        "start_time": st.column_config.DatetimeColumn(f"start ({ui.tz_label()})",
                                                                       format="HH:mm:ss.SSS")})
