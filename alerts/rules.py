"""Fleet rules 2-4: retry amplification, queue growth, saturation (rule 1, replica
degradation, and the other per-replica rules are in alerts/rules_replica.py). Each rule is a pure function of query results (unit-testable with
hand-computed inputs) plus a thin ``*_signals(store, now, config)`` that runs its named queries.

Position: these rules read the store only through ``schema.queries.alerts``. Units: seconds, requests,
ratios (0..1). Every threshold comes from :mod:`alerts.config`, where its source is documented.
"""

from __future__ import annotations

from datetime import datetime
from statistics import median
from typing import Any

from alerts.config import AlertConfig, QueueConfig, RetryConfig, SaturationConfig
from alerts.model import RULE_QUEUE, RULE_RETRY, RULE_SATURATION, Level, Signal, replica_label
from alerts.series import FleetSeries
from schema.queries import alerts as q


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


# --- 2. retry amplification ------------------------------------------------------------------------

def retry_from_stats(by_source: dict[str, dict[str, int]], cfg: RetryConfig,
                     frozen_baseline: dict[str, float | None] | None = None) -> Signal:
    """One fleet-wide verdict from :func:`schema.queries.alerts.retry_windows`.

    Per source (client task.attempt, gateway attempts): rate = retries / first attempts in the
    window; baseline = the same over the previous ``baseline_s`` (or ``frozen_baseline[source]``,
    frozen when the alert started). FIRE when some source has >= ``min_first_attempts`` and
    rate >= ``min_rate`` and (no baseline, or rate >= ``ratio`` x baseline). CLEAR when every
    source is below ``clear_rate`` or below ``clear_ratio`` x its baseline (or has no data).
    ``figures['baselines']`` holds the baselines used (the evaluator freezes them).
    """
    figures: dict[str, Any] = {"window_s": cfg.window_s, "baseline_s": cfg.baseline_s, "sources": {}, "baselines": {}}
    levels = []
    best: tuple[float, str] | None = None
    for source in sorted(by_source):
        s = by_source[source]
        first = s["first_attempts"]
        if frozen_baseline is not None and source in frozen_baseline:
            baseline = frozen_baseline[source]
        elif s["baseline_first_attempts"] >= cfg.min_baseline_first_attempts:
            baseline = max(s["baseline_attempts"] - s["baseline_first_attempts"], 0) / s["baseline_first_attempts"]
        else:
            baseline = None
        figures["baselines"][source] = _r(baseline)
        if first < cfg.min_first_attempts:
            figures["sources"][source] = {"attempts": s["attempts"], "first_attempts": first, "rate": None}
            levels.append(Level.CLEAR)
            continue
        rate = max(s["attempts"] - first, 0) / first
        amplification = rate / baseline if baseline else None
        figures["sources"][source] = {"attempts": s["attempts"], "first_attempts": first, "retries": s["attempts"] - first,
                                      "rate": _r(rate), "baseline_rate": _r(baseline),
                                      "amplification": _r(amplification, 3)}
        if rate >= cfg.min_rate and (baseline is None or rate >= cfg.ratio * baseline):
            levels.append(Level.FIRE)
        elif rate < cfg.clear_rate or (baseline is not None and rate < cfg.clear_ratio * baseline):
            levels.append(Level.CLEAR)
        else:
            levels.append(Level.HOLD)
        if best is None or rate > best[0]:
            best = (rate, source)
    if Level.FIRE in levels:
        level = Level.FIRE
    elif levels and all(lv is Level.CLEAR for lv in levels) or not levels:
        level = Level.CLEAR
    else:
        level = Level.HOLD
    if best is not None:
        rate, source = best
        src = figures["sources"][source]
        figures.update(rate=src["rate"], source=source, baseline_rate=src["baseline_rate"],
                       amplification=src["amplification"])
        base = "no baseline" if src["baseline_rate"] is None else f"baseline {src['baseline_rate']:.1%}"
        summary = (f"retries at {rate:.1%} of {source} requests over {cfg.window_s // 60} min ({base}; "
                   f"{src['retries']} retries / {src['first_attempts']} first attempts)")
    else:
        summary = "too few calls to measure retries"
    return Signal(RULE_RETRY, "", level, "warning", summary, figures)


def retry_signals(store, now: datetime, config: AlertConfig, frozen_baseline=None) -> list[Signal]:
    """Rule 2 at ``now``. Raises StoreError."""
    r = config.retry
    stats = q.retry_windows(store, now, r.window_s, r.baseline_s, config.lookback_s)
    return [retry_from_stats(stats, r, frozen_baseline)]


# --- 3. queue growth -------------------------------------------------------------------------------

def _rising(series: list[float | None], windows: int, min_step: float, min_last: float, growth: float) -> tuple[bool, float]:
    """(rising, baseline): each of the newest ``windows`` steps up by ``min_step``, the newest at least
    ``min_last`` and ``growth`` x the baseline (median of the older buckets, 0 without any)."""
    older = [v for v in series[windows + 1:] if v is not None]
    baseline = median(older) if older else 0.0
    head = series[:windows + 1]
    if any(v is None for v in head):
        return False, baseline
    steps_up = all(head[b] - head[b + 1] >= min_step for b in range(windows))
    return steps_up and head[0] >= max(min_last, growth * baseline), baseline


def queue_from_series(fs: FleetSeries, cfg: QueueConfig) -> Signal:
    """One fleet-wide verdict from the series (bucket 0 newest): fleet waiting = sum over replicas of
    their bucket means; queue time = the worst replica's engine queue-time p95.

    FIRE: either rises (:func:`_rising`) over ``windows`` buckets, with at least ``min_waiting`` requests
    waiting in the fleet (the absolute floor, for queue time too, when the waiting gauge is reported). CLEAR:
    the newest bucket back to
    ``max(clear_waiting, clear_ratio x baseline)`` and likewise for queue time (absent = 0). HOLD
    otherwise (a high plateau keeps a firing alert firing).
    """
    reps = list(fs.replicas.values())
    w = [sum(r.get("waiting_mean", b) or 0.0 for r in reps) if any(r.get("waiting_mean", b) is not None for r in reps)
         else None for b in range(fs.n)]
    p = [max((r.get("queue_p95_s", b) for r in reps if r.get("queue_p95_s", b) is not None), default=None)
         for b in range(fs.n)]
    rising_w, base_w = _rising(w, cfg.windows, cfg.min_step, cfg.min_waiting, cfg.growth_ratio)
    rising_p, base_p = _rising(p, cfg.windows, cfg.min_step_s, cfg.min_queue_p95_s, cfg.growth_ratio)
    newest_w, newest_p = w[0] or 0.0, p[0] or 0.0
    # the operator's absolute floor: no queue growth with fewer than ``min_waiting`` requests waiting in
    # the fleet, whichever signal rose (a queue-time p95 rising over 0.5 requests waiting is a few long
    # prompts queued behind each other); without the waiting gauge queue time is judged alone
    below_floor = w[0] is not None and newest_w < cfg.min_waiting
    rising_p = rising_p and not below_floor
    figures = {
        "bucket_s": fs.bucket_s, "windows": cfg.windows,
        "waiting_series": [_r(w[b], 2) for b in range(cfg.windows, -1, -1)],
        "queue_p95_series_s": [_r(p[b], 3) for b in range(cfg.windows, -1, -1)],
        "waiting": _r(newest_w, 2), "queue_p95_s": _r(newest_p, 3), "waiting_baseline": _r(base_w, 2),
        "queue_p95_baseline_s": _r(base_p, 3), "rising_waiting": rising_w, "rising_queue_time": rising_p,
        "min_waiting": cfg.min_waiting,
    }
    if rising_w or rising_p:
        level = Level.FIRE
    elif newest_w <= max(cfg.clear_waiting, cfg.clear_ratio * base_w) and \
            newest_p <= max(cfg.clear_queue_p95_s, cfg.clear_ratio * base_p):
        level = Level.CLEAR
    else:
        level = Level.HOLD
    what = " and ".join(x for x, on in (("requests waiting", rising_w), ("queue-time p95", rising_p)) if on)
    series = " -> ".join("-" if v is None else f"{v:g}" for v in figures["waiting_series"])
    summary = (f"fleet queue {'growing' if what else 'at'}: {newest_w:.1f} requests waiting ({series} per "
               f"{fs.bucket_s}s; usual {base_w:.1f}), worst queue-time p95 {newest_p:.2f} s"
               + (f"; rising: {what}" if what else ""))
    return Signal(RULE_QUEUE, "", level, "warning", summary, figures)


# --- 4. saturation ---------------------------------------------------------------------------------

def saturation_from_stats(stats: list[dict[str, Any]], cfg: SaturationConfig) -> list[Signal]:
    """Verdicts per replica from :func:`replica_saturation` rows.

    FIRE: mean KV-cache use >= ``kv_ratio``; or requests waiting at every scrape of the window (min
    waiting > 0) with mean >= ``min_waiting``; or, when a max is configured, mean running >= it.
    CLEAR: KV use < ``kv_clear``, the queue empty at some scrape, running < ``running_clear`` x max.
    HOLD otherwise.
    """
    out = []
    for s in stats:
        replica = s["replica"]
        max_running = cfg.max_running_by_replica.get(replica, cfg.max_running)
        kv = float(s["kv_mean"] or 0.0)
        running = float(s["running_mean"] or 0.0)
        waiting = float(_finite(s.get("waiting_mean")) or 0.0)
        waiting_min = float(_finite(s.get("waiting_min")) or 0.0)
        figures = {"window_s": cfg.window_s, "kv_mean": _r(kv), "kv_max": _r(s["kv_max"]),
                   "running_mean": _r(running, 2), "running_max": _r(s["running_max"], 2),
                   "waiting_mean": _r(waiting, 2), "waiting_min": _r(waiting_min, 2), "max_running": max_running}
        at_kv = kv >= cfg.kv_ratio
        queued = waiting_min > 0 and waiting >= cfg.min_waiting
        at_running = max_running is not None and running >= max_running
        if at_kv or queued or at_running:
            level = Level.FIRE
        elif kv < cfg.kv_clear and waiting_min == 0 and (max_running is None or running < cfg.running_clear * max_running):
            level = Level.CLEAR
        else:
            level = Level.HOLD
        why = []
        if at_kv:
            why.append(f"KV cache {kv:.0%} used")
        if queued:
            why.append(f"{waiting:.1f} requests waiting on average, the queue never empty ({running:.0f} running)")
        if at_running:
            why.append(f"{running:.0f} running = max {max_running}")
        summary = (f"{replica_label(replica)} saturated: " + ", ".join(why)) if why else (
            f"{replica_label(replica)}: KV cache {kv:.0%}, {running:.0f} running, {waiting:.1f} waiting")
        out.append(Signal(RULE_SATURATION, replica, level, "warning", summary, figures, replica=replica,
                          labels={"replica": replica}))
    return out


def _finite(value):
    return None if value is None or value != value else value


def saturation_from_series(fs: FleetSeries, cfg: SaturationConfig) -> list[Signal]:
    """Rule 4 from the series: per replica over ``window_s``, the bucket means of KV use, running and
    waiting, and the smallest waiting seen at a scrape (see :func:`saturation_from_stats`)."""
    window = fs.window(cfg.window_s)
    stats = []
    for name, rep in fs.replicas.items():
        kv = [rep.get("kv_mean", b) for b in window if rep.get("kv_mean", b) is not None]
        if not kv:
            continue
        running = [rep.get("running_mean", b) or 0.0 for b in window if rep.get("running_mean", b) is not None]
        waiting = [rep.get("waiting_mean", b) or 0.0 for b in window if rep.get("waiting_mean", b) is not None]
        lows = [rep.get("waiting_min", b) for b in window if rep.get("waiting_min", b) is not None]
        stats.append({"replica": name, "kv_mean": sum(kv) / len(kv), "kv_max": max(kv),
                      "running_mean": sum(running) / len(running) if running else 0.0,
                      "running_max": max(running, default=0.0),
                      "waiting_mean": sum(waiting) / len(waiting) if waiting else 0.0,
                      "waiting_min": min(lows) if lows else 0.0})
    return saturation_from_stats(sorted(stats, key=lambda s: s["replica"]), cfg)
