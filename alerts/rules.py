"""Rules 1-4 of issue 7 over the fleet's telemetry: replica degradation, retry amplification,
queue growth, saturation. Each rule is a pure function of query results (unit-testable with
hand-computed inputs) plus a thin ``*_signals(store, now, config)`` that runs its named queries.

Position: alerts/ reads the store only through ``schema.queries.alerts``. Units: seconds, requests,
ratios (0..1). Every threshold comes from :mod:`alerts.config`, where its source is documented.
"""

from __future__ import annotations

from datetime import datetime
from statistics import median
from typing import Any

from alerts.config import AlertConfig, DegradationConfig, QueueConfig, RetryConfig, SaturationConfig
from alerts.model import (RULE_DEGRADATION, RULE_QUEUE, RULE_RETRY, RULE_SATURATION, Level, Signal, replica_label)
from schema.queries import alerts as q


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


# --- 1. replica degradation ------------------------------------------------------------------------

def degradation_from_stats(stats: list[dict[str, Any]], cfg: DegradationConfig) -> list[Signal]:
    """Verdicts per replica from :func:`schema.queries.alerts.replica_latency` rows.

    ratio = max(ITL p50 / median of the peers' ITL p50s, same for TTFT p50), each taken only where
    both sides have >= ``min_requests`` samples; peers = the other replicas of the same GPU type when
    there is at least one (a mixed H100/A100 fleet is not degraded by design), else all other
    replicas (at least ``min_other_replicas``); error rate = errors / requests.
    FIRE: ratio >= ``cfg.ratio``, or error rate >= ``error_rate_min`` and >= ``error_ratio`` x
    max(others' median rate, ``error_floor``). CLEAR: ratio < ``clear_ratio`` and error rate <
    ``error_clear`` or below half that multiple of the others' (it no longer stands out), or too
    little data to compare. HOLD otherwise.
    """
    usable = {s["replica"]: s for s in stats if int(s["requests"]) >= cfg.min_requests}
    out = []
    for s in stats:
        replica = s["replica"]
        others = [o for name, o in usable.items() if name != replica]
        # Peers on the same GPU type when there are any: an A100 is slower than an H100 by design, and
        # a mixed fleet must not page for it; otherwise every other replica.
        gpu = s.get("gpu_type") or ""
        same = [o for o in others if gpu and (o.get("gpu_type") or "") == gpu]
        # Same-type replicas that exist but lack samples are no reason to compare with other GPU types.
        has_same_type = any(o["replica"] != replica and gpu and (o.get("gpu_type") or "") == gpu for o in stats)
        if same:
            others = same
        elif has_same_type:
            others = []
        figures: dict[str, Any] = {"window_s": cfg.window_s, "requests": int(s["requests"]),
                                   "other_replicas": len(others), "peers": "same_gpu_type" if same else "fleet",
                                   "gpu_type": gpu}
        if replica not in usable or len(others) < (1 if same else cfg.min_other_replicas):
            out.append(Signal(RULE_DEGRADATION, replica, Level.CLEAR, "warning",
                              f"{replica_label(replica)}: too few calls to compare", figures, replica=replica))
            continue
        ratios = {}
        for metric, samples in (("itl_p50_s", "itl_samples"), ("ttft_p50_s", "ttft_samples")):
            peers = [float(o[metric]) for o in others if int(o[samples]) >= cfg.min_requests]
            if int(s[samples]) >= cfg.min_requests and len(peers) >= (1 if same else cfg.min_other_replicas) \
                    and median(peers) > 0:
                base = median(peers)
                ratios[metric] = float(s[metric]) / base
                figures[metric] = _r(s[metric])
                figures[f"others_median_{metric}"] = _r(base)
                figures[f"{metric.split('_')[0]}_ratio"] = _r(ratios[metric], 3)
        error_rate = int(s["errors"]) / int(s["requests"])
        others_error = median(int(o["errors"]) / int(o["requests"]) for o in others)
        figures.update(error_rate=_r(error_rate), others_median_error_rate=_r(others_error),
                       queue_p95_s=_r(s.get("queue_p95_s")))
        ratio = max(ratios.values(), default=0.0)
        figures["ratio"] = _r(ratio, 3)
        error_jump = error_rate >= cfg.error_rate_min and error_rate >= cfg.error_ratio * max(others_error, cfg.error_floor)
        if ratio >= cfg.ratio or error_jump:
            level = Level.FIRE
        elif ratio < cfg.clear_ratio and (error_rate < cfg.error_clear
                                          or error_rate < cfg.error_ratio / 2 * max(others_error, cfg.error_floor)):
            # errors low, or no longer standing out (a fleet-wide overload fails every replica alike)
            level = Level.CLEAR
        else:
            level = Level.HOLD
        worst = max(ratios, key=ratios.get) if ratios else None
        if error_jump and (worst is None or ratios[worst] < cfg.ratio):
            summary = (f"{replica_label(replica)} error rate {error_rate:.1%} vs {others_error:.1%} on the other "
                       "replicas "
                       f"(last {cfg.window_s}s)")
        elif worst:
            label = "inter-token latency" if worst == "itl_p50_s" else "TTFT"
            summary = (f"{replica_label(replica)} {label} p50 {float(s[worst]) * 1000:.0f} ms = {ratios[worst]:.2f}x the "
                       f"other replicas' median (last {cfg.window_s}s)")
        else:
            summary = f"{replica_label(replica)}: no latency samples to compare"
        out.append(Signal(RULE_DEGRADATION, replica, level, "warning", summary, figures, replica=replica,
                          labels={"replica": replica}))
    return out


def degradation_signals(store, now: datetime, config: AlertConfig) -> list[Signal]:
    """Rule 1 at ``now``. Raises StoreError."""
    stats = q.replica_latency(store, now, config.degradation.window_s, config.lookback_s)
    return degradation_from_stats(stats, config.degradation)


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

def _rising(series: dict[int, float], windows: int, min_step: float, min_last: float) -> bool:
    if any(b not in series for b in range(windows + 1)):
        return False
    steps_up = all(series[b] - series[b + 1] >= min_step for b in range(windows))
    return steps_up and series[0] >= min_last


def queue_from_series(waiting: dict[int, dict[str, float]], queue_time: dict[int, dict[str, float]],
                      cfg: QueueConfig) -> Signal:
    """One fleet-wide verdict from :func:`queue_series` and :func:`queue_time_series` (bucket 0 newest).

    FIRE: fleet waiting rises by >= ``min_step`` in each of ``windows`` consecutive buckets and the
    newest is >= ``min_waiting``; or the same for queue-time p95 (``min_step_s``, ``min_queue_p95_s``).
    CLEAR: newest waiting <= ``clear_waiting`` and newest queue p95 <= ``clear_queue_p95_s`` (absent
    buckets count as 0). HOLD otherwise (a high plateau keeps a firing alert firing).
    """
    w = {b: v["waiting"] for b, v in waiting.items()}
    p = {b: v["queue_p95_s"] for b, v in queue_time.items()}
    rising_w = _rising(w, cfg.windows, cfg.min_step, cfg.min_waiting)
    rising_p = _rising(p, cfg.windows, cfg.min_step_s, cfg.min_queue_p95_s)
    newest_w, newest_p = w.get(0, 0.0), p.get(0, 0.0)
    figures = {
        "bucket_s": cfg.bucket_s, "windows": cfg.windows,
        "waiting_series": [_r(w.get(b), 2) for b in range(cfg.windows, -1, -1)],
        "queue_p95_series_s": [_r(p.get(b), 3) for b in range(cfg.windows, -1, -1)],
        "waiting": _r(newest_w, 2), "queue_p95_s": _r(newest_p, 3),
        "rising_waiting": rising_w, "rising_queue_time": rising_p,
    }
    if rising_w or rising_p:
        level = Level.FIRE
    elif newest_w <= cfg.clear_waiting and newest_p <= cfg.clear_queue_p95_s:
        level = Level.CLEAR
    else:
        level = Level.HOLD
    what = " and ".join(x for x, on in (("requests waiting", rising_w), ("queue-time p95", rising_p)) if on)
    series = " -> ".join("-" if v is None else f"{v:g}" for v in figures["waiting_series"])
    summary = (f"fleet queue {'growing' if what else 'at'}: {newest_w:.1f} requests waiting ({series} per "
               f"{cfg.bucket_s}s), queue-time p95 {newest_p:.2f} s" + (f"; rising: {what}" if what else ""))
    return Signal(RULE_QUEUE, "", level, "warning", summary, figures)


def queue_signals(store, now: datetime, config: AlertConfig) -> list[Signal]:
    """Rule 3 at ``now``. Raises StoreError."""
    c = config.queue
    waiting = q.queue_series(store, now, c.bucket_s, c.windows + 1)
    queue_time = q.queue_time_series(store, now, c.bucket_s, c.windows + 1, config.lookback_s)
    return [queue_from_series(waiting, queue_time, c)]


# --- 4. saturation ---------------------------------------------------------------------------------

def saturation_from_stats(stats: list[dict[str, Any]], cfg: SaturationConfig) -> list[Signal]:
    """Verdicts per replica from :func:`replica_saturation` rows.

    FIRE: mean KV-cache use >= ``kv_ratio`` or mean running requests >= the replica's max running
    (``max_running_by_replica`` or ``max_running``). CLEAR: KV use < ``kv_clear`` and running <
    ``running_clear`` x max. HOLD otherwise.
    """
    out = []
    for s in stats:
        replica = s["replica"]
        max_running = cfg.max_running_by_replica.get(replica, cfg.max_running)
        kv = float(s["kv_mean"] or 0.0)
        running = float(s["running_mean"] or 0.0)
        figures = {"window_s": cfg.window_s, "kv_mean": _r(kv), "kv_max": _r(s["kv_max"]),
                   "running_mean": _r(running, 2), "running_max": _r(s["running_max"], 2),
                   "waiting_mean": _r(s["waiting_mean"], 2), "max_running": max_running}
        at_kv, at_running = kv >= cfg.kv_ratio, running >= max_running
        if at_kv or at_running:
            level = Level.FIRE
        elif kv < cfg.kv_clear and running < cfg.running_clear * max_running:
            level = Level.CLEAR
        else:
            level = Level.HOLD
        why = []
        if at_kv:
            why.append(f"KV cache {kv:.0%} used")
        if at_running:
            why.append(f"{running:.0f} running = max {max_running}")
        summary = (f"{replica_label(replica)} saturated: " + ", ".join(why)) if why else (
            f"{replica_label(replica)}: KV cache {kv:.0%}, {running:.0f}/{max_running} running")
        out.append(Signal(RULE_SATURATION, replica, level, "warning", summary, figures, replica=replica,
                          labels={"replica": replica}))
    return out


def saturation_signals(store, now: datetime, config: AlertConfig) -> list[Signal]:
    """Rule 4 at ``now``. Raises StoreError."""
    stats = q.replica_saturation(store, now, config.saturation.window_s)
    return saturation_from_stats(stats, config.saturation)
