"""Page 5, Alerts: active alerts and recent state changes, from ``schema.queries.alerts``.

Shows an empty state until the alerts module (``alerts`` table + named queries) exists or has fired.
"""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from app import filters, ui
from schema.store import StoreError

st.title("Alerts")
f = filters.current()
active_fn = ui.optional_function("schema.queries.alerts:active_alerts")
recent_fn = ui.optional_function("schema.queries.alerts:recent_alerts")
if active_fn is None or recent_fn is None:
    ui.empty_state("Alerting is not installed in this build.",
                   "When the alert evaluator runs (`infercost alerts` or inside `infercost up`), firing and "
                   "resolved alerts appear here.")
    st.stop()

try:
    active = ui.query("schema.queries.alerts:active_alerts", live=True)
    recent = ui.query("schema.queries.alerts:recent_alerts", f.start, f.end, live=True)
except StoreError as exc:
    if "alerts" in str(exc) and ("UNKNOWN_TABLE" in str(exc) or "does not exist" in str(exc)):
        ui.empty_state("No alerts table yet.", "Run `infercost migrate`, then start the alert evaluator.")
        st.stop()
    ui.store_error(exc)
    st.stop()

TIME_COLS = ["started_at", "fired_at", "resolved_at", "updated_at", "event_time"]


def _evidence_text(value) -> str:
    try:
        data = json.loads(value) if isinstance(value, str) and value else {}
    except ValueError:
        return str(value)[:200]
    if isinstance(data, dict):
        return ", ".join(f"{k}={v}" for k, v in list(data.items())[:6])
    return str(data)[:200]


st.subheader(f"Active ({len(active)})")
if not len(active):
    st.success("No alert is pending or firing.", icon=":material/check_circle:")
else:
    firing = int((active["state"] == "firing").sum()) if "state" in active else 0
    cols = st.columns(3)
    cols[0].metric("Firing", firing, border=True)
    cols[1].metric("Pending", len(active) - firing, border=True)
    if "est_cost_usd" in active:
        cols[2].metric("Estimated cost at stake", f"${pd.to_numeric(active['est_cost_usd'], errors='coerce').sum():,.2f}",
                       border=True, help="Sum of the alerts' own cost estimates (USD), as the evaluator wrote them.")
    shown = ui.to_viewer(active, TIME_COLS)
    if "evidence" in shown:
        shown["evidence"] = shown["evidence"].map(_evidence_text)
    keep = [c for c in ["severity", "state", "rule", "replica", "summary", "started_at", "fired_at", "est_cost_usd",
                        "evidence"] if c in shown.columns]
    ui.table(shown[keep], key="alerts_active", filename="alerts_active.csv",
             column_config={"est_cost_usd": st.column_config.NumberColumn("est. cost (USD)", format="$%.2f")})

st.subheader("Recent changes in the selected range")
if not len(recent):
    ui.empty_state("No alert changed state in this time range.", "Widen the time range in the sidebar.")
else:
    shown = ui.to_viewer(recent, TIME_COLS)
    if "evidence" in shown:
        shown["evidence"] = shown["evidence"].map(_evidence_text)
    keep = [c for c in ["event_time", "state", "severity", "rule", "replica", "summary", "est_cost_usd", "evidence"]
            if c in shown.columns]
    ui.table(shown[keep], key="alerts_recent", filename="alerts_recent.csv",
             column_config={"est_cost_usd": st.column_config.NumberColumn("est. cost (USD)", format="$%.2f")})
st.caption(f"Times in {ui.tz_label()}.")
