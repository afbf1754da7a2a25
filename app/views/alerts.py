"""Page 5, Alerts: a triage view. Open incidents first, a firing cascade pinned with its chain as a
timeline on the latency chart and its culprit's evidence, filters (severity, rule, replica) and deep
links (``?alert_id=`` — the generatorURL of every notification) mirrored in the URL, cost at stake
per open alert. Data: ``schema.queries.alerts`` (and ``ops.latency_series`` for the chart); logic in
``app/alert_views.py``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from urllib.parse import quote

import pandas as pd
import streamlit as st

from app import alert_views as av
from app import filters, ui
from app.fmt import md_code, md_escape
from schema.store import StoreError

st.title("Alerts")
f = filters.current()

TIME_COLS = ["started_at", "fired_at", "resolved_at", "updated_at", "event_time"]
params = st.query_params
linked_id = params.get("alert_id", "")
now = datetime.now(timezone.utc).replace(microsecond=0)

try:
    active = av.triage(ui.query("schema.queries.alerts:active_alerts", live=True))
    incidents = av.triage(ui.query("schema.queries.alerts:alerts_in_period", f.start, f.end, live=True))
    linked = ui.query("schema.queries.alerts:alert_history", linked_id, live=True) if linked_id else None
except ValueError as exc:  # a malformed alert_id in the URL
    st.warning(f"Ignored the link's alert id: {md_escape(exc)}", icon=":material/link_off:")
    active, incidents, linked = av.triage(pd.DataFrame()), av.triage(pd.DataFrame()), None
except StoreError as exc:
    if "alerts" in str(exc) and ("UNKNOWN_TABLE" in str(exc) or "does not exist" in str(exc)):
        ui.empty_state("No alerts table yet.", "Run `infercost migrate`, then start the alert evaluator.")
        st.stop()
    ui.store_error(exc)
    st.stop()

def linked_table(shown: pd.DataFrame, keep: list[str], key: str, filename: str, **config) -> None:
    """A table of alerts whose ``link`` column opens each one (``?alert_id=``, the deep link)."""
    shown = shown.assign(link="?alert_id=" + shown["alert_id"])
    ui.table(shown[keep], key=key, filename=filename, column_config={
        "summary": st.column_config.TextColumn("summary", width="large"),
        "link": st.column_config.LinkColumn("link", display_text="open"), **config})


def cascade_card(row) -> None:
    """A cascade's card: its chain over the latency around it, culprit candidates and actions."""
    links = av.chain(row)
    culprit = row["replica"]
    is_open = row["state"] in ("firing", "pending")
    with st.container(border=True):
        icon = ":material/error:" if is_open else ":material/check_circle:"
        head = f"{icon} **Cascading degradation — culprit {md_code(culprit)}** ({row['state']})"
        st.markdown(head)
        st.markdown(md_escape(row["summary"]))
        if links:
            t0 = min(x["started_at"] for x in links) - timedelta(minutes=10)
            t1 = av.aware(row.get("resolved_at")) or now
            try:
                lat = ui.query("schema.queries.ops:latency_series", t0, t1 + timedelta(minutes=5), 60)
            except StoreError:
                lat = pd.DataFrame()
            if len(lat):
                tz = ui.viewer_tz()
                lat = ui.to_viewer(lat, ["bucket"], naive=True)
                local = [{**x, "started_at": x["started_at"].astimezone(tz).replace(tzinfo=None)} for x in links]
                ui.chart(av.timeline_chart(lat, local, culprit), width="stretch")
            steps = pd.DataFrame([{"step": x["step"], "at": ui.local_time(x["started_at"]), "what": x["summary"]}
                                  for x in links])
            st.dataframe(steps, hide_index=True, width="stretch")
        cand = av.candidates(row)
        if len(cand):
            st.caption("Culprit candidates: whose own speed or failures stepped up first, share of the fleet's failed "
                       "attempts, load ratio at the onset, and how much of the others' load rise its failures explain.")
            pct = lambda label: st.column_config.NumberColumn(label, format="percent")  # noqa: E731
            times = lambda label: st.column_config.NumberColumn(label, format="%.2fx")  # noqa: E731
            st.dataframe(ui.to_viewer(cand, ["onset_at"]), hide_index=True, width="stretch", column_config={
                "onset_at": st.column_config.DatetimeColumn("onset", format="YYYY-MM-DD HH:mm:ss"),
                "speed_before": times("speed before"), "speed_after": times("speed after"),
                "error_rate_before": pct("error rate before"), "error_rate_after": pct("error rate after"),
                "abandoned_rate_before": pct("abandoned before"), "abandoned_rate_after": pct("abandoned after"),
                "failure_share": pct("share of failed attempts"), "load_ratio": times("load ratio"),
                "explains": pct("explains others' load rise")})
        for action in (av.evidence(row["evidence"]).get("figures") or {}).get("actions") or []:
            st.markdown(f"- {md_escape(action)}")
        st.markdown(f"[Link to this alert](?alert_id={quote(str(row['alert_id']), safe='')})")


# --- filters, mirrored in the URL --------------------------------------------------------------
known = pd.concat([active, incidents], ignore_index=True) if len(active) or len(incidents) else active
options = {col: sorted(set(known[col].dropna())) if len(known) else [] for col in ("severity", "rule", "replica")}
cols = st.columns(3)
chosen = {}
for col, (key, label) in zip(cols, (("severity", "Severity"), ("rule", "Rule"), ("replica", "Replica"))):
    wanted = [v for v in params.get_all(key) if v in options[key] or not options[key]]
    chosen[key] = col.multiselect(label, options[key] or wanted, default=[v for v in wanted if v in options[key]],
                                  key=f"alerts_{key}", placeholder="All")
for key, values in chosen.items():
    if values:
        params[key] = values
    elif key in params:
        del params[key]
active_f = av.apply_filters(active, chosen["severity"], chosen["rule"], [r for r in chosen["replica"] if r])
incidents_f = av.apply_filters(incidents, chosen["severity"], chosen["rule"], [r for r in chosen["replica"] if r])

# --- a deep link -------------------------------------------------------------------------------
if linked is not None:
    if linked.empty:
        st.warning(f"No alert {md_code(linked_id)} in the history (it may belong to another store).",
                   icon=":material/link_off:")
    else:
        top = linked.iloc[0]
        with st.container(border=True):
            # rule and state are the evaluator's own names; ids and text may quote telemetry
            st.markdown(f"**Linked alert** {md_code(linked_id)} · {top['rule']}"
                        + (f" · replica {md_code(top['replica'])}" if top["replica"] else "") + f" · now **{top['state']}**")
            st.markdown(md_escape(top["summary"]))
            shown = ui.to_viewer(linked, TIME_COLS)[["event_time", "state", "summary"]]
            ui.table(shown, key="alerts_linked", filename=f"alert_{linked_id}.csv")
            with st.expander("Evidence (latest)"):
                st.json(av.evidence(top["evidence"]))
        if st.button("Clear the link", icon=":material/close:"):
            del params["alert_id"]
            st.rerun()

# --- open incidents ----------------------------------------------------------------------------
st.subheader(f"Open ({len(active_f)})")
spend = {}
for _, row in active_f.iterrows():
    start = av.aware(row["started_at"]) or now
    try:
        by_replica = ui.query("schema.queries.alerts:replica_spend", start, now, live=True)
    except StoreError:
        by_replica = {}
    replicas = av.affected_replicas(row, sorted(by_replica))
    spend[row["alert_id"]] = {r: v for r, v in by_replica.items() if r in replicas}
stake = av.cost_at_stake(active_f, spend, now) if len(active_f) else pd.Series(dtype="float64")
firing = int((active_f["state"] == "firing").sum()) if len(active_f) else 0
tiles = st.columns(4)
tiles[0].metric("Firing", firing, border=True)
tiles[1].metric("Pending", len(active_f) - firing, border=True)
tiles[2].metric("Grouped under a cascade", int((active_f["inhibited_by"] != "").sum()) if len(active_f) else 0,
                border=True, help="Alerts a firing cascade explains: recorded, not notified separately.")
tiles[3].metric("Cost at stake", f"${stake.fillna(0).sum():,.2f}", border=True,
                help="GPU spend of the replicas each open alert affects since it started (the cost engine's "
                     "replica_minutes; a cascade affects the whole fleet), else the alert's own estimate.")

# Pinned: open cascades whatever the time range (resolved ones are shown with the range's incidents).
parts = [df[df["rule"] == av.CASCADE] for df in (active_f, incidents_f) if len(df)]
cascades = pd.concat(parts, ignore_index=True).drop_duplicates("alert_id") if parts else pd.DataFrame()
cascade_open = cascades["state"].isin(["firing", "pending"]) if len(cascades) else pd.Series(dtype=bool)
for _, row in (cascades[cascade_open].head(3).iterrows() if len(cascades) else []):
    cascade_card(row)

if not len(active_f):
    st.success("No alert is pending or firing" + (" for these filters." if any(chosen.values()) else "."),
               icon=":material/check_circle:")
else:
    shown = ui.to_viewer(active_f.assign(cost_at_stake_usd=stake), TIME_COLS)
    shown["state"] = shown["state"].astype(str) + [" (no data)" if v is True else "" for v in shown["no_data"]]
    shown["grouped"] = ["under cascade" if isinstance(v, str) and v else "" for v in shown["inhibited_by"]]
    keep = ["severity", "state", "rule", "replica", "summary", "started_at", "fired_at", "cost_at_stake_usd",
            "grouped", "link"]
    linked_table(shown, keep, "alerts_active", "alerts_open.csv",
                 cost_at_stake_usd=st.column_config.NumberColumn("cost at stake (USD)", format="$%,.2f"))
    for _, row in active_f.iterrows():
        with st.expander(f"{row['rule']} {md_escape(row['replica'] or '')} — evidence"):
            st.json(av.evidence(row["evidence"]))

# --- incidents in the range --------------------------------------------------------------------
st.subheader("Incidents in the selected range")
for _, row in (cascades[~cascade_open].head(3).iterrows() if len(cascades) else []):
    cascade_card(row)
if not len(incidents_f):
    ui.empty_state("No alert fired in this time range.", "Widen the time range in the sidebar.")
else:
    keep = ["severity", "state", "rule", "replica", "summary", "fired_at", "resolved_at", "duration_s",
            "est_cost_usd", "link"]
    linked_table(ui.to_viewer(incidents_f, TIME_COLS), keep, "alerts_incidents", "alerts_incidents.csv",
                 est_cost_usd=st.column_config.NumberColumn("est. cost (USD)", format="$%,.2f"),
                 duration_s=st.column_config.NumberColumn("firing (s)", format="%.0f"))
st.caption(f"Times in {ui.tz_label()}.")
