"""The Alerts page's logic as plain functions of DataFrames (no queries, no Streamlit): triage order,
filters, the cascade's chain, cost at stake, and the latency chart with the chain as a timeline.

Rows come from ``schema.queries.alerts`` (``active_alerts``, ``alerts_in_period``); ``evidence`` is
the JSON the evaluator wrote (figures, onset, inhibited_by; a cascade's chain and candidates).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import altair as alt
import pandas as pd

from app.charts import time_x

CASCADE = "cascading_degradation"
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
STATE_RANK = {"firing": 0, "pending": 1, "resolved": 2, "cancelled": 3}


def evidence(value) -> dict[str, Any]:
    """The evidence JSON of a row as a dict ({} when empty or unreadable)."""
    if isinstance(value, dict):
        return value
    try:
        data = json.loads(value) if isinstance(value, str) and value else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def triage(df: pd.DataFrame) -> pd.DataFrame:
    """Rows in triage order: open before closed, cascades first, then severity, firing before pending,
    newest first; adds ``inhibited_by`` and ``no_data`` from the evidence."""
    if df.empty:
        return df.assign(inhibited_by=pd.Series(dtype=str), no_data=pd.Series(dtype=bool))
    out = df.copy()
    ev = out["evidence"].map(evidence) if "evidence" in out else pd.Series([{}] * len(out), index=out.index)
    out["inhibited_by"] = ev.map(lambda e: str(e.get("inhibited_by") or "")).astype(object)
    out["no_data"] = ev.map(lambda e: (e.get("figures") or {}).get("data_state") == "no_data").astype(bool)
    out["_open"] = out["state"].isin(["firing", "pending"]).map({True: 0, False: 1})
    out["_cascade"] = (out["rule"] != CASCADE).astype(int)
    out["_sev"] = out["severity"].map(SEVERITY_RANK).fillna(9)
    out["_state"] = out["state"].map(STATE_RANK).fillna(9)
    started = pd.to_datetime(out["started_at"], errors="coerce")
    out["_t"] = -started.astype("int64")
    out = out.sort_values(["_open", "_cascade", "_sev", "_state", "_t"], kind="stable")
    return out.drop(columns=["_open", "_cascade", "_sev", "_state", "_t"])


def apply_filters(df: pd.DataFrame, severities=(), rules=(), replicas=()) -> pd.DataFrame:
    """Rows matching every non-empty filter (a cascade matches a replica filter on its culprit)."""
    out = df
    if severities:
        out = out[out["severity"].isin(severities)]
    if rules:
        out = out[out["rule"].isin(rules)]
    if replicas:
        out = out[out["replica"].isin(replicas)]
    return out


def chain(row) -> list[dict[str, Any]]:
    """A cascade row's chain links (step, rule, replica, started_at as datetime, summary), oldest first."""
    links = (evidence(row.get("evidence")).get("figures") or {}).get("chain") or []
    out = []
    for link in links:
        try:
            at = datetime.fromisoformat(link["started_at"])
        except (KeyError, TypeError, ValueError):
            continue
        out.append({"step": link.get("step", ""), "rule": link.get("rule", ""), "replica": link.get("replica", ""),
                    "started_at": at, "summary": link.get("summary", "")})
    return sorted(out, key=lambda x: x["started_at"])


CANDIDATE_NUMBERS = ["speed_before", "speed_after", "error_rate_before", "error_rate_after", "abandoned_rate_before",
                     "abandoned_rate_after", "failure_share", "load_ratio", "explains"]


def candidates(row) -> pd.DataFrame:
    """A cascade row's culprit candidates with their evidence (alerts.cascade.candidate): replica,
    ``onset_at`` (UTC datetime; NaT if the evidence has none), ``evidence`` (speed | errors |
    abandoned) and :data:`CANDIDATE_NUMBERS` as floats (NaN where a step was not found): speed ratios,
    rates and shares as fractions 0..1, the load ratio and ``explains`` as multiples."""
    found = (evidence(row.get("evidence")).get("figures") or {}).get("candidates") or []
    cols = ["replica", "onset_at", "evidence", *CANDIDATE_NUMBERS]
    df = pd.DataFrame([{c: x.get(c) for c in cols} for x in found], columns=cols)
    df["onset_at"] = pd.to_datetime(df["onset_at"], utc=True, errors="coerce")
    for c in CANDIDATE_NUMBERS:
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    return df


def affected_replicas(row, all_replicas: list[str]) -> list[str]:
    """The replicas an alert is about: its replica, a cascade's whole fleet, every replica for a
    fleet-wide alert."""
    if row.get("rule") == CASCADE or not row.get("replica"):
        return list(all_replicas)
    return [row["replica"]]


def cost_at_stake(open_rows: pd.DataFrame, spend_since: dict[str, dict[str, float]], now: datetime) -> pd.Series:
    """Per open alert: the GPU spend of the replicas it affects since it started (USD), from
    ``spend_since[alert_id] = {replica: usd}``; an alert's own estimate (a cascade's waste) when it has
    one and no spend is known. Index: the rows' index."""
    values = []
    for idx, row in open_rows.iterrows():
        spend = spend_since.get(row["alert_id"]) or {}
        usd = sum(spend.values()) if spend else None
        own = row.get("est_cost_usd")
        if usd is None and own is not None and not pd.isna(own):
            usd = float(own)
        values.append(usd)
    return pd.Series(values, index=open_rows.index, dtype="float64")


def timeline_chart(latency: pd.DataFrame, links: list[dict[str, Any]], culprit: str, metric: str = "ttft_p50_s",
                   title: str = "TTFT p50 per replica (s)") -> alt.Chart:
    """Per-replica ``metric`` over time (the culprit drawn thick) with one rule and label per chain link
    at its onset: the cascade as a timeline on the latency chart. ``latency``: ops.latency_series rows
    (``bucket``, ``replica``, ``metric``), times naive in the viewer's zone; ``links`` times likewise."""
    data = latency[latency["replica"] != ""].dropna(subset=[metric]).copy()
    data["culprit"] = data["replica"] == culprit
    lines = (alt.Chart(data).mark_line()
             .encode(x=time_x(data, "bucket"), y=alt.Y(f"{metric}:Q", title=title),
                     color=alt.Color("replica:N", title="replica"),
                     strokeWidth=alt.condition("datum.culprit", alt.value(3.5), alt.value(1.2)),
                     tooltip=[alt.Tooltip("bucket:T", format="%H:%M:%S"), "replica:N",
                              alt.Tooltip(f"{metric}:Q", format=",.3f")]))
    # labels stacked one line apart: links often start within the same minute
    marks = pd.DataFrame([{"at": link["started_at"], "label": f"{link['step']}: {link['replica'] or link['rule']}",
                           "y": 10 + 13 * i} for i, link in enumerate(links)])
    if marks.empty:
        return lines.properties(height=260)
    rules = alt.Chart(marks).mark_rule(strokeDash=[4, 3], color="#d62728").encode(
        x="at:T", tooltip=[alt.Tooltip("at:T", format="%H:%M:%S"), "label:N"])
    labels = alt.Chart(marks).mark_text(align="left", dx=3, color="#d62728", fontSize=11).encode(
        x="at:T", y=alt.Y("y:Q", scale=None), text="label:N")
    return alt.layer(lines, rules, labels).properties(height=260)


def aware(value) -> datetime | None:
    """A store time (naive UTC, pandas Timestamp or None) as an aware UTC datetime."""
    if value is None or (isinstance(value, float) and pd.isna(value)) or value is pd.NaT:
        return None
    ts = pd.Timestamp(value)
    if pd.isna(ts):
        return None
    ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
    return ts.to_pydatetime().astimezone(timezone.utc)
