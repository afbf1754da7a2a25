"""Rules 6 and 7: SLO burn rates (task success, goodput) and ingestion health.

Burn rate (SRE Workbook, "Alerting on SLOs"): error ratio / (1 - SLO target); a tier pages when
both its long and short windows burn at >= its factor. A factor >= 1 / (1 - target) could never
fire (it needs more than 100% bad tasks); such a tier is re-derived (see :func:`effective_factor`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from alerts.config import AlertConfig, BurnTier, IngestionConfig, SloConfig
from alerts.model import RULE_INGESTION, RULE_SLO, Level, Signal
from schema.queries import alerts as q

SLOS = {
    # name -> (config attribute of the target, count of bad tasks, what "good" means)
    "task_success": ("success_target", "failed", "tasks that succeeded"),
    "goodput": ("goodput_target", "not_good", "tasks that succeeded within their slo.e2e_ms"),
}


def effective_factor(tier: BurnTier, target: float, cfg: SloConfig) -> tuple[float, str]:
    """The burn factor a tier uses for an SLO ``target``, and a note when it was re-derived.

    The maximum burn rate is 1 / (1 - target) (every task bad). When ``tier.factor`` reaches it the
    tier could never fire, so it becomes ``rederive_fraction`` x the maximum, i.e. a smaller budget
    fraction over the same windows: budget share = factor x long window / SLO period.
    """
    max_burn = 1.0 / (1.0 - target)
    if tier.factor < max_burn:
        return tier.factor, ""
    factor = cfg.rederive_fraction * max_burn
    old_share = tier.factor * tier.long_s / cfg.period_s
    new_share = factor * tier.long_s / cfg.period_s
    note = (f"Tier re-derived: at a {target:.1%} SLO the maximum burn rate is {max_burn:.1f}x, so the "
            f"standard {tier.factor:g}x ({old_share:.1%} of the budget in {tier.long_s // 3600} h) could never "
            f"fire; this tier uses {factor:.1f}x ({new_share:.2%} of the budget), i.e. fires when "
            f"{factor * (1 - target):.0%} of tasks are bad in both windows.")
    return factor, note


def slo_from_windows(windows: dict[int, dict[str, int]], cfg: SloConfig) -> list[Signal]:
    """Verdicts per (SLO, tier) from :func:`schema.queries.alerts.slo_windows`.

    FIRE when the short window has >= ``min_tasks`` tasks, the long one >= ``min_bad`` bad tasks, and
    both windows burn at >= the tier's
    (effective) factor; CLEAR otherwise (multi-window alerts reset as soon as the short window
    recovers: SRE Workbook). Key ``<slo>:<tier>``.
    """
    out = []
    for slo, (target_attr, bad_col, good_text) in SLOS.items():
        target = getattr(cfg, target_attr)
        budget = 1.0 - target
        for tier in cfg.tiers:
            factor, note = effective_factor(tier, target, cfg)
            long_w, short_w = windows.get(tier.long_s, {}), windows.get(tier.short_s, {})
            burns = {}
            for label, w in (("long", long_w), ("short", short_w)):
                tasks = int(w.get("tasks", 0))
                bad = int(w.get(bad_col, 0))
                ratio = bad / tasks if tasks else 0.0
                burns[label] = {"tasks": tasks, "bad": bad, "error_ratio": round(ratio, 5),
                                "burn_rate": round(ratio / budget, 3)}
            enough = burns["short"]["tasks"] >= cfg.min_tasks and burns["long"]["bad"] >= cfg.min_bad
            firing = enough and burns["long"]["burn_rate"] >= factor and burns["short"]["burn_rate"] >= factor
            figures: dict[str, Any] = {"slo": slo, "target": target, "tier": tier.name, "factor": round(factor, 3),
                                       "standard_factor": tier.factor, "long_s": tier.long_s, "short_s": tier.short_s,
                                       "long": burns["long"], "short": burns["short"], "rederived": bool(note)}
            summary = (f"{slo} SLO {target:.1%}: burn rate {burns['long']['burn_rate']:g}x over "
                       f"{_span(tier.long_s)} and {burns['short']['burn_rate']:g}x over {_span(tier.short_s)} "
                       f"(threshold {factor:.3g}x, {tier.severity})")
            description = (f"Share of {good_text} is below the {target:.1%} objective fast enough to spend "
                           f"{factor * tier.long_s / cfg.period_s:.2%} of the {cfg.period_s // 86400}-day error budget "
                           f"in {_span(tier.long_s)}." + (f" {note}" if note else ""))
            out.append(Signal(RULE_SLO, f"{slo}:{tier.name}", Level.FIRE if firing else Level.CLEAR, tier.severity,
                              summary, figures, description=description,
                              labels={"slo": slo, "tier": tier.name}))
    return out


def _span(seconds: int) -> str:
    if seconds % 86400 == 0:
        return f"{seconds // 86400} d"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    return f"{seconds // 60} min"


def slo_signals(store, now: datetime, config: AlertConfig) -> list[Signal]:
    """Rule 6 at ``now``. Raises StoreError."""
    cfg = config.slo
    windows = sorted({t.long_s for t in cfg.tiers} | {t.short_s for t in cfg.tiers})
    return slo_from_windows(q.slo_windows(store, now, windows, cfg.lookback_s), cfg)


def ingestion_from_inputs(now: datetime, newest: dict[str, datetime | None], stats: Any | None,
                          rejected_before: int | None, cfg: IngestionConfig) -> list[Signal]:
    """Verdicts on ingestion health.

    ``newest``: {newest_span, newest_metric} (aware UTC or None); lag = now - the newer of the two;
    FIRE at >= ``max_lag_s``, CLEAR below half of it or when there is no telemetry at all (a new
    install). ``stats``: the receiver's stats object (duck-typed: ``rejected``, ``spooled_bytes``,
    ``store_available``, optionally ``store_reason``, ``quarantine_rows``) or None; ``rejected_before``: its ``rejected`` at the previous evaluation.
    """
    times = [t for t in newest.values() if t is not None]
    out = []
    if times:
        lag = (now - max(times)).total_seconds()
        level = Level.FIRE if lag >= cfg.max_lag_s else (Level.CLEAR if lag < cfg.max_lag_s / 2 else Level.HOLD)
        figures = {"lag_s": round(lag, 1), "max_lag_s": cfg.max_lag_s,
                   "newest_span": _iso(newest.get("newest_span")), "newest_metric": _iso(newest.get("newest_metric"))}
        out.append(Signal(RULE_INGESTION, "lag", level, "warning",
                          f"newest telemetry is {lag:.0f} s old (threshold {cfg.max_lag_s} s)", figures))
    else:
        out.append(Signal(RULE_INGESTION, "lag", Level.CLEAR, "warning", "no telemetry yet", {"lag_s": None}))
    if stats is not None:
        rejected = int(getattr(stats, "rejected", 0) or 0)
        new_rejections = rejected - rejected_before if rejected_before is not None else 0
        out.append(Signal(RULE_INGESTION, "rejected", Level.FIRE if new_rejections > 0 else Level.CLEAR, "warning",
                          f"receiver rejected {new_rejections} item(s) since the last evaluation ({rejected} in total)",
                          {"rejected_total": rejected, "rejected_new": new_rejections}))
        spooled = int(getattr(stats, "spooled_bytes", 0) or 0)
        backlog = spooled >= cfg.spool_backlog_bytes
        out.append(Signal(RULE_INGESTION, "spooled", Level.FIRE if backlog else Level.CLEAR, "warning",
                          f"receiver spool backlog {spooled} bytes (threshold {cfg.spool_backlog_bytes}): "
                          f"store writes falling behind or failing",
                          {"spooled_bytes": spooled, "spool_backlog_bytes": cfg.spool_backlog_bytes}))
        quarantined = int(getattr(stats, "quarantine_rows", 0) or 0)
        out.append(Signal(RULE_INGESTION, "quarantined", Level.FIRE if quarantined > 0 else Level.CLEAR, "warning",
                          f"{quarantined} rows in the receiver's quarantine (the store refused them as "
                          f"unparseable): fix the cause, then `infercost spool replay`",
                          {"quarantine_rows": quarantined}))
        available = bool(getattr(stats, "store_available", True))
        reason = str(getattr(stats, "store_reason", "") or "")
        out.append(store_signal(available, "receiver reports the store unavailable"
                                + (f" ({reason})" if reason else "")))
    return out


def store_signal(available: bool, detail: str) -> Signal:
    """The ``store_unavailable`` verdict (critical): FIRE when the store cannot be used."""
    return Signal(RULE_INGESTION, "store_unavailable", Level.CLEAR if available else Level.FIRE, "critical",
                  "store available" if available else f"store unavailable: {detail}", {"detail": detail})


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def ingestion_signals(store, now: datetime, config: AlertConfig, receiver_stats: Callable[[], Any] | None,
                      rejected_before: int | None) -> tuple[list[Signal], int | None]:
    """Rule 7 at ``now``; returns the signals and the receiver's current ``rejected`` count (for the
    next call). A failing ``receiver_stats`` callable is reported as no stats. Raises StoreError."""
    newest = q.newest_rows(store, now, config.ingestion.lookback_s)
    stats = None
    if receiver_stats is not None:
        try:
            stats = receiver_stats()
        except Exception:  # a broken stats source must not stop evaluation
            stats = None
    rejected = int(getattr(stats, "rejected", 0) or 0) if stats is not None else rejected_before
    return ingestion_from_inputs(now, newest, stats, rejected_before, config.ingestion), rejected
