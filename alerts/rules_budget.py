"""Budget burn and spend anomaly: money alerts beside the health rules.

* ``budget_burn`` — per budget (fleet.yaml ``budgets:``, a tenant or task type, per UTC day or ISO
  week): FIRE when the spend so far, projected linearly to the end of the period, exceeds the budget
  (``burn_ratio`` >= ``burn_ratio``, default 1.0) once ``min_elapsed_ratio`` (10 %) of the period has
  passed, or as soon as the spend itself reaches the budget (severity ``critical``). The projection
  is the burn-rate idea of the SRE Workbook ("Alerting on SLOs") applied to a money budget.
* ``spend_anomaly`` — per tenant: FIRE when the last hour's allocated spend is >= ``ratio`` (2x) the
  same hour one week earlier and at least ``min_usd_per_hour`` (weekly seasonality: the same hour a
  week before is the baseline of traffic with a daily and weekly cycle). No baseline, no alert.

Both read named queries (``schema.queries.budgets``); spend = cost allocated to the scope's calls
(idle GPU time belongs to no tenant or task type).
"""

from __future__ import annotations

from datetime import datetime

from alerts.config import AlertConfig
from alerts.model import RULE_BUDGET, RULE_SPEND_ANOMALY, Level, Signal
from schema.queries import budgets as q


def budget_signals(store, now: datetime, config: AlertConfig) -> list[Signal]:
    cfg = config.budget
    out = []
    for r in q.budget_status(store, now).to_dict("records"):
        spent, budget = float(r["spent_usd"]), float(r["budget_usd"])
        elapsed_ratio = float(r["elapsed_s"]) / float(r["period_s"]) if r["period_s"] else 0.0
        exceeded = spent >= budget
        projected = float(r["projected_usd"])
        burning = elapsed_ratio >= cfg.min_elapsed_ratio and projected >= cfg.burn_ratio * budget
        scope = "tenant" if r["scope"] == "tenant" else "task type"
        per = {"day": "daily", "week": "weekly"}.get(r["period"], r["period"])
        key = f"{r['scope']}:{r['name']}:{r['period']}"
        figures = {"scope": r["scope"], "name": r["name"], "period": r["period"], "budget_usd": round(budget, 4),
                   "spent_usd": round(spent, 4), "projected_usd": round(projected, 4),
                   "burn_ratio": round(float(r["burn_ratio"]), 3), "elapsed_ratio": round(elapsed_ratio, 3)}
        if exceeded:
            summary = (f"{scope} {r['name']}: spent ${spent:,.2f} of its ${budget:,.2f} {per} budget "
                       f"({spent / budget:.0%})")
        else:
            summary = (f"{scope} {r['name']}: on course for ${projected:,.2f} against its ${budget:,.2f} "
                       f"{per} budget ({projected / budget:.0%}; ${spent:,.2f} spent so far)")
        out.append(Signal(RULE_BUDGET, key, Level.FIRE if (exceeded or burning) else Level.CLEAR,
                          "critical" if exceeded else "warning", summary, figures,
                          description="Spend allocated to this scope's calls, projected linearly to the end of "
                                      "the budget period (fleet.yaml budgets:).",
                          labels={"scope": r["scope"], "name": str(r["name"]), "period": r["period"]}))
    return out


def spend_anomaly_signals(store, now: datetime, config: AlertConfig) -> list[Signal]:
    cfg = config.spend_anomaly
    out = []
    for r in q.spend_anomaly(store, now).to_dict("records"):
        this, last = float(r["this_hour_usd"]), float(r["last_week_usd"])
        if last <= 0:
            continue  # no baseline a week ago: nothing to compare with
        ratio = this / last
        firing = this >= cfg.min_usd_per_hour and ratio >= cfg.ratio
        tenant = r["tenant"] or "(no tenant)"
        out.append(Signal(RULE_SPEND_ANOMALY, f"tenant:{r['tenant']}", Level.FIRE if firing else Level.CLEAR,
                          "warning", f"tenant {tenant}: ${this:,.2f} in the last hour, {ratio:.1f}x the same hour "
                                     f"last week (${last:,.2f})",
                          {"tenant": r["tenant"], "this_hour_usd": round(this, 4), "last_week_usd": round(last, 4),
                           "ratio": round(ratio, 3)},
                          description="Allocated spend of the last hour against the same hour one week earlier.",
                          labels={"tenant": str(r["tenant"])}))
    return out
