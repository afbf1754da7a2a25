"""Rule 5 of issue 7, cascading degradation: the chain degradation -> retries -> queues/saturation as
ONE alert naming the culprit replica, with the chain's timestamps and figures, the incident's
estimated cost and suggested actions.

A metastable failure (Bronson et al., HotOS'21; Huang et al., OSDI'22) has a trigger (here: a slow
replica) and a sustaining effect (retries keeping queues full). So the alert fires on the chain and
stays firing while retries or queues stay elevated, even after the culprit recovered; it clears
only when retry amplification and queue growth are both back to CLEAR (then the lifecycle's
hysteresis applies).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from alerts.config import AlertConfig
from alerts.lifecycle import Lifecycle
from alerts.model import (RULE_CASCADE, RULE_DEGRADATION, RULE_QUEUE, RULE_RETRY, RULE_SATURATION, Alert, Level,
                          Signal, replica_label)
from schema.queries import alerts as q


def actions(replica: str) -> list[str]:
    """The three moves that break a retry-sustained cascade (DESIGN.md: avoid, share, move, delay work)."""
    return [
        f"Drain {replica_label(replica)}: take it out of the gateway's pool (or restart it) until its latency is back "
        f"in line with the fleet.",
        "Enforce the retry budget: cap client and gateway retries (e.g. retries <= 10% of requests, token "
        "bucket) with full-jitter exponential backoff, so retries stop sustaining the overload.",
        "Shed load via admission control: reject or defer batch-priority tasks at the gateway (429 with "
        "Retry-After) until queues drain.",
    ]


def _link(alert: Alert, step: str) -> dict[str, Any]:
    return {"step": step, "rule": alert.rule, "replica": alert.replica, "started_at": alert.started_at.isoformat(),
            "fired_at": alert.fired_at.isoformat() if alert.fired_at else None, "summary": alert.summary,
            "figures": alert.onset or alert.figures}


def find_chain(lifecycle: Lifecycle, now: datetime, config: AlertConfig) -> dict[str, Any] | None:
    """The newest complete chain at ``now``, or None.

    Complete: a firing retry-amplification alert, a degradation episode of some replica R (firing
    now or fired within the look-back) with the retry alert starting in [R's start - tolerance,
    R's start + within_s], and a firing queue-growth alert or saturation of a replica other than R
    starting in the same interval. Among candidates the earliest degradation wins (then the largest
    ratio): the trigger precedes its consequences.
    """
    c = config.cascade
    within, tol = timedelta(seconds=c.within_s), timedelta(seconds=c.tolerance_s)
    retries = lifecycle.firing(RULE_RETRY)
    if not retries:
        return None
    retry = retries[0]
    pressure = lifecycle.firing(RULE_QUEUE) + lifecycle.firing(RULE_SATURATION)
    best = None
    for deg in lifecycle.episodes(RULE_DEGRADATION, now - within - tol):
        lo, hi = deg.started_at - tol, deg.started_at + within
        if not lo <= retry.started_at <= hi:
            continue
        linked = [p for p in pressure if lo <= p.started_at <= hi
                  and not (p.rule == RULE_SATURATION and p.replica == deg.replica)]
        if not linked:
            continue
        # The trigger comes first: later degradations of other replicas are usually the cascade's
        # consequences (their TTFT rises with the retried load), so the earliest onset is the culprit.
        rank = (deg.started_at, -float((deg.onset or deg.figures).get("ratio") or 0.0))
        if best is None or rank < best[0]:
            best = (rank, deg, linked)
    if best is None:
        return None
    _, deg, linked = best
    links = [_link(deg, "trigger")] + [_link(retry, "sustaining")] + [_link(p, "pressure") for p in
                                                                     sorted(linked, key=lambda a: a.started_at)]
    return {"replica": deg.replica, "chain": links, "degradation": deg, "started_at": deg.started_at}


def cascade_signal(lifecycle: Lifecycle, now: datetime, config: AlertConfig, levels: dict[str, Level]) -> Signal:
    """The cascade verdict at ``now`` (key "" : one cascade alert per fleet).

    ``levels``: this evaluation's fleet verdicts of RULE_RETRY and RULE_QUEUE. A new cascade FIREs on
    a complete chain (:func:`find_chain`). An active one stays (HOLD) while retry amplification or
    queue growth is not CLEAR; then CLEAR. The culprit named at onset is kept.
    """
    current = lifecycle.get(RULE_CASCADE, "")
    sustained = levels.get(RULE_RETRY, Level.CLEAR) is not Level.CLEAR or levels.get(RULE_QUEUE, Level.CLEAR) is not Level.CLEAR
    if current is not None:
        replica = current.replica
        deg = lifecycle.get(RULE_DEGRADATION, replica)
        culprit = "still degraded" if deg is not None else "recovered"
        figures = dict(current.figures)
        figures.update(culprit_status=culprit, retry_level=levels.get(RULE_RETRY, Level.CLEAR).value,
                       queue_level=levels.get(RULE_QUEUE, Level.CLEAR).value)
        level = Level.HOLD if sustained else Level.CLEAR
        summary = _summary(replica, figures["chain"], culprit)
        return Signal(RULE_CASCADE, "", level, "critical", summary, figures, replica=replica,
                      description=current.description, labels={"replica": replica})
    chain = find_chain(lifecycle, now, config)
    if chain is None:
        return Signal(RULE_CASCADE, "", Level.CLEAR, "critical", "no cascade", {})
    replica = chain["replica"]
    figures = {"culprit": replica, "chain": chain["chain"], "actions": actions(replica), "culprit_status": "degraded"}
    description = ("One degraded replica raised latency, clients retried, queues grew and the healthy replicas "
                   "saturated: a cascading (possibly metastable) failure. The alert stays firing while retries and "
                   "queues stay elevated, even after the culprit recovers. Suggested actions: "
                   + " ".join(f"({i}) {a}" for i, a in enumerate(actions(replica), 1)))
    return Signal(RULE_CASCADE, "", Level.FIRE, "critical", _summary(replica, chain["chain"], "degraded"), figures,
                  replica=replica, description=description, labels={"replica": replica})


def _summary(replica: str, chain: list[dict[str, Any]], culprit: str) -> str:
    parts = []
    for link in chain:
        t = link["started_at"][11:16]
        parts.append(f"{t} {link['summary']}")
    return f"Cascading degradation from {replica_label(replica)} ({culprit}): " + " -> ".join(parts)


def estimate_cost(store, start: datetime, end: datetime, config: AlertConfig) -> tuple[float | None, str, dict]:
    """Estimated waste of an incident over ``[start, end]`` in USD, the estimate's source, and details.

    Preferred: the cost engine's ``schema.queries.cost.waste_breakdown(store, start, end)`` (waste =
    everything but useful work: retry, failed-task, idle), source ``cost_engine``. Fallback (its
    tables absent or failing): fleet spend = replicas seen x ``gpus_per_replica`` x ``gpu_hour_usd``
    x hours, times the retry share of attempts (retries / attempts), source ``fallback_gpu_minutes``.
    Returns (None, "unavailable", {...}) when neither works. Never raises.
    """
    try:
        from schema.queries import cost as cost_queries  # built by the cost engine; optional here

        breakdown = cost_queries.waste_breakdown(store, start, end)
        waste = _waste_from_breakdown(breakdown)
        if waste is not None:
            return round(waste, 4), "cost_engine", {"waste_usd": round(waste, 4)}
    except Exception:  # absent module/tables, or another shape: fall back below
        pass
    try:
        usage = q.fleet_usage(store, start, end)
    except Exception as exc:  # the store may be the problem; the alert still goes out
        return None, "unavailable", {"error": str(exc)[:200]}
    c = config.cascade
    hours = max((end - start).total_seconds(), 0.0) / 3600.0
    replicas = max(usage.get("engine_replicas", 0), usage.get("gauge_replicas", 0))
    spend = replicas * c.gpus_per_replica * c.gpu_hour_usd * hours
    if usage.get("client_attempts"):
        share = usage["client_retries"] / usage["client_attempts"]
    elif usage.get("gateway_attempts"):
        share = usage["gateway_retries"] / usage["gateway_attempts"]
    else:
        share = 0.0
    details = {"replicas": replicas, "hours": round(hours, 4), "gpu_hour_usd": c.gpu_hour_usd,
               "fleet_spend_usd": round(spend, 4), "retry_share": round(share, 4)}
    return round(spend * share, 4), "fallback_gpu_minutes", details


def _waste_from_breakdown(breakdown) -> float | None:
    """Total waste USD from the cost engine's breakdown (a DataFrame or mapping of category -> USD)."""
    waste_categories = ("retry_waste", "failed_task_waste", "idle")
    try:
        if hasattr(breakdown, "to_dict"):  # DataFrame: either category/usd rows or one row of columns
            cols = list(breakdown.columns)
            if "category" in cols:
                usd_col = next(c for c in cols if c.endswith("usd") or c in ("cost", "spend"))
                parts = breakdown[breakdown["is_subset"] == 0] if "is_subset" in cols else breakdown
                if float(parts[usd_col].fillna(0).sum()) <= 0:
                    return None  # the cost jobs have not covered this period yet: use the fallback
                total = parts[parts["category"].isin(waste_categories)][usd_col].fillna(0).sum()
                return float(total)
            row = breakdown.iloc[0].to_dict() if len(breakdown) else {}
            return float(sum(float(v) for k, v in row.items() if any(k.startswith(w) for w in waste_categories)))
        if isinstance(breakdown, dict):
            return float(sum(float(v) for k, v in breakdown.items() if any(k.startswith(w) for w in waste_categories)))
    except Exception:
        return None
    return None
