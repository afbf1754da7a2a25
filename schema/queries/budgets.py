"""Budget named queries: budget status (spend so far per budget period) and spend-anomaly inputs.

Position: schema -> alerts / app. Budgets come from fleet.yaml (``schema.budgets``). Money in USD,
times UTC (naive values are UTC), durations in seconds.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from datetime import time as dt_time

import pandas as pd

from schema.queries import run

STATUS_COLUMNS = ["scope", "name", "period", "budget_usd", "period_start", "period_end", "spent_usd", "elapsed_s",
                  "period_s", "projected_usd", "burn_ratio", "used_ratio"]


def _naive(now: datetime) -> datetime:
    return now.astimezone(timezone.utc).replace(tzinfo=None) if now.tzinfo else now


def budget_status(store, now: datetime) -> pd.DataFrame:
    """One row per budget: ``scope``, ``name``, ``period`` (day | week), ``budget_usd``,
    ``period_start`` / ``period_end`` (UTC), ``spent_usd`` (allocated cost so far), ``elapsed_s``,
    ``period_s``, ``projected_usd`` (spent / elapsed x period: the linear end-of-period forecast),
    ``burn_ratio`` (projected / budget: > 1 = on course to overspend), ``used_ratio`` (spent / budget).

    The week's whole rolled-up hours are read from the hourly rollups (``cost.rollup_span``), the rest
    from the raw rows: a week of call pieces was read on every cost page and alert evaluation."""
    from schema.queries.cost import rollup_span

    now = _naive(now).replace(microsecond=0)
    week_start = datetime.combine(now.date() - timedelta(days=now.weekday()), dt_time())
    span = rollup_span(store, week_start, now) if now > week_start else {
        "rollup_start": now, "rollup_end": now, "rollup_versions": [], "watermark": datetime(1970, 1, 1)}
    df = run(store, "budgets_status", now=now, rollup_start=span["rollup_start"], rollup_end=span["rollup_end"],
             rollup_versions=span["rollup_versions"], watermark=span["watermark"])
    if not len(df.columns):
        return pd.DataFrame(columns=STATUS_COLUMNS)
    elapsed = df["elapsed_s"].clip(lower=1)
    df["projected_usd"] = df["spent_usd"] / elapsed * df["period_s"]
    df["burn_ratio"] = df["projected_usd"] / df["budget_usd"]
    df["used_ratio"] = df["spent_usd"] / df["budget_usd"]
    return df


def spend_anomaly(store, now: datetime) -> pd.DataFrame:
    """Per tenant: ``this_hour_usd`` (allocated cost of the last hour) and ``last_week_usd`` (the same
    hour a week before); tenant '' = calls without task context."""
    df = run(store, "budgets_spend_anomaly", now=_naive(now).replace(microsecond=0))
    if not len(df.columns):
        return pd.DataFrame(columns=["tenant", "this_hour_usd", "last_week_usd"])
    return df


def budgets(store) -> pd.DataFrame:
    """The budgets as synced: ``scope``, ``name``, ``period`` (day | week), ``usd``."""
    df = run(store, "budgets_list")
    return df if len(df.columns) else pd.DataFrame(columns=["scope", "name", "period", "usd"])
