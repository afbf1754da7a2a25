"""Per-replica rules over :class:`alerts.series.FleetSeries`: 1 replica degradation (speed on its own
work against its peers or its own baseline, gateway-visible failures, work clients gave up on when
its speed cannot be judged), 8 replica down, 9 telemetry
health per replica and source. Pure functions of the series (unit-testable with hand-made rows).

Position: alerts/ (reads the store only through alerts.series -> schema.queries.alerts). Units:
seconds, ratios. Thresholds from alerts/config.py, where their sources are documented.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from alerts.config import DegradationConfig, ReplicaDownConfig, TelemetryConfig
from alerts.model import RULE_DEGRADATION, RULE_DOWN, RULE_TELEMETRY, Level, Signal, replica_label
from alerts.series import FleetSeries, ReplicaSeries, weighted, weighted_median


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(float(value), digits)


def relative_speed(fs: FleetSeries, replica: str, window: range) -> float | None:
    """The replica's speed ratio over ``window`` (alerts.series: against its GPU type, or against its
    own baseline net of the fleet's change), weighted by calls; None without figures."""
    return weighted(fs.ratios[replica], fs.replicas[replica].values["requests"], window)


def speed_evidence(fs: FleetSeries, replica: str, cfg: DegradationConfig) -> tuple[float | None, range, str, int]:
    """The replica's speed figure, the buckets it was judged on, how, and on how many calls.

    ``"window"`` when the rule's window holds a bucket with a figure (:func:`relative_speed`: mean
    weighted by calls). Else ``"widened"``: the window widened back, a bucket at a time up to
    ``widen_s``, until it holds ``min_calls`` calls with a figure (``FleetSeries.thin_ratios``: buckets
    of fewer than ``SeriesConfig.min_samples`` calls count; a bucket beyond the window counts only the
    calls still missing, so the newest calls are judged, not an older busier minute), judged on the
    call-weighted median of the buckets' figures (robust to one odd call among a few). ``"unknown"``
    (None) when even that is too few. Absence of evidence is no evidence of health: a replica with 3
    calls a minute is judged on its last 2 minutes' 6 calls, not cleared for want of 5 in each minute
    (DegradationConfig).
    """
    window = fs.window(cfg.window_s)
    speed = relative_speed(fs, replica, window)
    if speed is not None:
        return speed, window, "window", int(fs.replicas[replica].total("requests", window))
    thin, calls = fs.thin_ratios[replica], fs.replicas[replica].values["requests"]
    weights: list[float | None] = [0.0] * fs.n
    counted = 0.0
    for b in range(min(fs.n, max(window.stop, fs.window(cfg.widen_s).stop))):
        if thin[b] is not None:  # the newest calls only: an older, busier bucket counts for what is missing
            weights[b] = min(calls[b] or 0.0, cfg.min_calls - counted) if b >= window.stop else (calls[b] or 0.0)
            counted += weights[b]
        if b + 1 >= window.stop and counted >= cfg.min_calls:
            return weighted_median(thin, weights, range(b + 1)), range(b + 1), "widened", int(counted)
    return None, window, "unknown", int(counted)


def failure_rate(rep: ReplicaSeries, window: range) -> tuple[float, int, int]:
    """(failed / attempts, failed, attempts) over ``window``: gateway attempts failing on the replica
    (error_class upstream_error or timeout) plus engine requests finished 'error', except refused
    connections (nothing listening: the replica-down rule's evidence, not a degraded replica's);
    attempts are the gateway's when it saw any, else the engine's requests."""
    failed = int(rep.total("gw_failed", window) - rep.total("gw_conn_errors", window)
                 + rep.total("engine_errors", window))
    attempts = int(rep.total("attempts", window) - rep.total("gw_conn_errors", window)) or int(rep.total("requests", window))
    return (failed / attempts if attempts > 0 else 0.0), failed, max(attempts, 0)


def unanswered(rep: ReplicaSeries, window: range) -> tuple[float, float, int]:
    """(abandoned / attempts, answered / attempts, attempts) over ``window``, from the gateway's attempts
    on the replica: abandoned = the client gave up (client_cancel) or the gateway timed out (timeout);
    answered = no error class. Refused connections are left out (the replica-down rule's evidence)."""
    attempts = int(rep.total("attempts", window) - rep.total("gw_conn_errors", window))
    if attempts <= 0:
        return 0.0, 0.0, 0
    abandoned = (rep.total("gw_abandoned", window) + rep.total("gw_failed", window)
                 - rep.total("gw_errors", window))
    return abandoned / attempts, rep.total("gw_ok", window) / attempts, attempts


def _abandon_jump(fs: FleetSeries, name: str, window: range, cfg: DegradationConfig) -> dict[str, Any] | None:
    """Figures when clients give up on ``name`` far more than on its peers at no more load
    (DegradationConfig: unanswered work), else None. Its peers: the replicas of its GPU type when it has
    any with ``min_attempts`` (a blind-routed A100 times out before the H100s in an overloaded fleet, by
    design), else every other replica."""
    rep = fs.replicas[name]
    rate, answered, attempts = unanswered(rep, window)
    every = {o: unanswered(r, window) for o, r in fs.replicas.items() if o != name}
    every = {o: (ok, a) for o, (_, ok, a) in every.items() if a >= cfg.min_attempts}
    same = [v for o, v in every.items() if rep.gpu_type and fs.replicas[o].gpu_type == rep.gpu_type]
    others = same or list(every.values())
    if attempts < cfg.min_attempts or rate < cfg.abandon_rate_min or not others:
        return None
    others_answered = median(ok for ok, _ in others)
    load = attempts / median(a for _, a in others)
    busy = [unanswered(rep, range(b, b + 1)) for b in window]
    sustained = all(r >= cfg.abandon_rate_min for r, _, a in busy if a >= 5)
    if (others_answered < cfg.answered_ratio * max(answered, cfg.error_floor) or load > cfg.abandon_load_ratio
            or not sustained):
        return None
    return {"abandoned_rate": _r(rate, 4), "answered_rate": _r(answered, 4),
            "others_median_answered_rate": _r(others_answered, 4), "load_ratio": _r(load),
            "abandon_peers": "same_gpu_type" if same else "fleet"}


def _sustained(rep: ReplicaSeries, window: range, min_rate: float) -> bool:
    """Every bucket of ``window`` with at least 5 attempts fails at ``min_rate`` or more (a crash's one
    burst of broken streams is no degraded replica)."""
    rates = [failure_rate(rep, range(b, b + 1)) for b in window]
    busy = [r for r, _, a in rates if a >= 5]
    return bool(busy) and all(r >= min_rate for r in busy)


def degradation_from_series(fs: FleetSeries, cfg: DegradationConfig,
                            active: dict[str, dict[str, Any]] | None = None) -> list[Signal]:
    """Verdicts per replica. ``active``: replicas with an active degradation alert (one without data
    gets a no-data signal; the evaluator froze their baselines into ``fs``).

    FIRE: speed figure (:func:`speed_evidence`: over the window, else widened back to enough calls) >=
    ``ratio``, or failure rate >= ``error_rate_min`` and >= ``error_ratio`` x max(others' median,
    ``error_floor``) with >= ``min_errors`` failures, or (no speed figure in the window) clients giving up
    on its attempts far more than on the others' (:func:`_abandon_jump`). CLEAR: speed figure <
    ``clear_ratio`` and failures below ``error_clear`` or no longer standing out; an unknown speed clears
    only a replica without an active alert (with one: HOLD, no-data state, last evidence kept). HOLD
    otherwise.
    """
    active = active or {}
    window = fs.window(cfg.window_s)
    rates = {name: failure_rate(rep, window) for name, rep in fs.replicas.items()}
    out = []
    for name in sorted(fs.replicas):
        rep = fs.replicas[name]
        speed, judged_on, how, judged_calls = speed_evidence(fs, name, cfg)
        base = fs.baselines.get(name) or {}
        rate, failed, attempts = rates[name]
        others = [r for o, (r, _, a) in rates.items() if o != name and a >= cfg.min_attempts]
        others_rate = median(others) if others else 0.0
        figures: dict[str, Any] = {
            "window_s": cfg.window_s, "peers": fs.peers.get(name, "fleet"), "gpu_type": rep.gpu_type,
            "requests": int(rep.total("requests", window)), "attempts": attempts,
            "ratio": _r(speed), "speed_window_s": len(judged_on) * fs.bucket_s,
            "speed_calls": judged_calls, "speed_judged": how, "baseline_itl_s": _r(base.get("itl_p50_s"), 6),
            "baseline_prefill_s_per_token": _r(base.get("prefill_tok_p50_s"), 8),
            "itl_p50_s": _r(weighted(rep.values["itl_p50_s"], rep.values["itl_samples"], judged_on), 5),
            "prefill_s_per_token": _r(weighted(rep.values["prefill_tok_p50_s"], rep.values["prefill_samples"],
                                               judged_on), 7),
            "error_rate": _r(rate, 4), "errors": failed, "others_median_error_rate": _r(others_rate, 4),
        }
        error_jump = (attempts >= cfg.min_attempts and failed >= cfg.min_errors and rate >= cfg.error_rate_min
                      and rate >= cfg.error_ratio * max(others_rate, cfg.error_floor)
                      and _sustained(rep, window, cfg.error_rate_min))
        # speed unknown (too few engine spans: aborted requests export none): judge by the work clients
        # gave up on there against the other replicas
        abandon = _abandon_jump(fs, name, window, cfg) if how != "window" else None
        if abandon:
            figures.update(abandon)
        if not rep.total("requests", window) and not error_jump and not abandon:
            # no engine span: its speed cannot be judged (its telemetry may be lost while it serves)
            if name in active:
                out.append(Signal(RULE_DEGRADATION, name, Level.HOLD, "warning",
                                  f"{replica_label(name)}: no engine spans for {cfg.window_s}s (last evidence kept)",
                                  figures, replica=name, labels={"replica": name}, no_data=True))
            elif attempts == 0:
                continue
            else:
                out.append(Signal(RULE_DEGRADATION, name, Level.CLEAR, "warning",
                                  f"{replica_label(name)}: no engine spans to judge its speed", figures, replica=name,
                                  labels={"replica": name}))
            continue
        slow = speed is not None and speed >= cfg.ratio
        failures_low = rate < cfg.error_clear or rate < cfg.error_ratio / 2 * max(others_rate, cfg.error_floor)
        if speed is None and failures_low and not error_jump and not abandon and name in active:
            # it serves, but too few calls even over widen_s to judge its speed: no evidence either
            # way, so an active alert keeps its last evidence (no-data state, issue 15) instead of clearing
            out.append(Signal(RULE_DEGRADATION, name, Level.HOLD, "warning",
                              f"{replica_label(name)}: {judged_calls} call(s) with a speed figure in the last "
                              f"{cfg.widen_s}s, too few ({cfg.min_calls}) to judge its speed (last evidence kept)",
                              figures, replica=name, labels={"replica": name}, no_data=True))
            continue
        if slow or error_jump or abandon:
            level = Level.FIRE
        elif (speed is None or speed < cfg.clear_ratio) and failures_low:
            level = Level.CLEAR
        else:
            level = Level.HOLD
        summary = (_abandon_summary(name, figures, cfg) if abandon and not (slow or error_jump)
                   else _degradation_summary(name, figures, slow, error_jump, cfg))
        out.append(Signal(RULE_DEGRADATION, name, level, "warning", summary, figures, replica=name,
                          labels={"replica": name}))
    return out


def _abandon_summary(name: str, f: dict, cfg: DegradationConfig) -> str:
    peers = "its GPU type's other replicas" if f.get("abandon_peers") == "same_gpu_type" else "the other replicas"
    return (f"{replica_label(name)} answers {f['answered_rate']:.1%} of its attempts vs "
            f"{f['others_median_answered_rate']:.1%} on {peers} at {f['load_ratio']:.2f}x their load: "
            f"clients gave up on {f['abandoned_rate']:.1%} (last {cfg.window_s}s; too few engine spans to "
            f"judge its speed, as aborted requests export none)")


def _degradation_summary(name: str, f: dict, slow: bool, error_jump: bool, cfg: DegradationConfig) -> str:
    if error_jump and not slow:
        return (f"{replica_label(name)} fails {f['error_rate']:.1%} of attempts (upstream errors, timeouts) vs "
                f"{f['others_median_error_rate']:.1%} on the other replicas (last {cfg.window_s}s)")
    if f["ratio"] is None:
        return f"{replica_label(name)}: too few calls to compare its speed"
    against = "its GPU type's median" if f["peers"] == "same_gpu_type" else "its own recent baseline, net of the fleet's change"
    over = (f"last {cfg.window_s}s" if f.get("speed_judged") != "widened" else
            f"its last {f['speed_calls']} calls over {f['speed_window_s']}s, pooled: too few a minute to judge each")
    return (f"{replica_label(name)} runs its own work {f['ratio']:.2f}x slower than {against}: decode "
            f"{(f['itl_p50_s'] or 0) * 1000:.1f} ms/token, prefill {(f['prefill_s_per_token'] or 0) * 1e6:.1f} "
            f"us/prompt token ({over})")


def down_from_series(fs: FleetSeries, cfg: ReplicaDownConfig) -> list[Signal]:
    """Replica-down verdicts. FIRE: over ``window_s`` no engine span and no successful gateway attempt,
    and (the gateway's attempts on it failed, or its scrape failed at every try while the rest of the
    fleet served: a live replica would have had work). CLEAR: it served or its scrape succeeded. HOLD
    otherwise (silence is no evidence either way: a drained replica, an idle fleet)."""
    window = fs.window(cfg.window_s)
    history = range(window.stop, fs.n)
    share_buckets = range(window.stop, min(fs.n, window.stop + max(1, cfg.share_window_s // fs.bucket_s)))
    served_by = {n: r.total("requests", share_buckets) or r.total("gw_ok", share_buckets) for n, r in fs.replicas.items()}
    fleet_served = sum(served_by.values())
    busy = {n: r.total("requests", window) + r.total("gw_ok", window) for n, r in fs.replicas.items()}
    out = []
    for name in sorted(fs.replicas):
        rep = fs.replicas[name]
        served = rep.total("requests", window) + rep.total("gw_ok", window)
        up_ok, up_failed = rep.total("up_ok", window), rep.total("up_failed", window)
        refused = rep.total("gw_failed", window)
        conn = rep.total("gw_conn_errors", window)
        scrape_failing = up_failed > 0 and up_ok == 0
        share = served_by[name] / fleet_served if fleet_served else 0.0
        last_served = next((b for b in history if (rep.get("requests", b) or 0) + (rep.get("gw_ok", b) or 0) > 0), None)
        figures = {"window_s": cfg.window_s, "served": int(served), "scrape_up_ok": int(up_ok),
                   "scrape_up_failed": int(up_failed), "gateway_failed_attempts": int(refused),
                   "connection_errors": int(conn), "gpu_type": rep.gpu_type, "capacity_share": _r(share, 3),
                   "last_served_bucket": last_served}
        others_busy = sum(v for n, v in busy.items() if n != name) > 0
        if served > 0 or up_ok > 0:
            level = Level.CLEAR
        elif (scrape_failing and others_busy) or refused > 0:
            level = Level.FIRE
        else:
            level = Level.HOLD
        why = [w for w, on in (("its scrape fails", scrape_failing),
                               (f"the gateway's {int(refused)} attempt(s) on it failed ({int(conn)} refused connections)",
                                refused > 0)) if on]
        summary = (f"{replica_label(name)} ({rep.gpu_type or 'GPU type unknown'}) is down: no engine work for "
                   f"{cfg.window_s}s, {' and '.join(why) or 'no evidence it serves'}; ~{share:.0%} of the fleet's "
                   f"calls ran on it before (capacity lost)")
        out.append(Signal(RULE_DOWN, name, level, "critical", summary, figures, replica=name,
                          labels={"replica": name, "gpu_type": rep.gpu_type}))
    return out


def telemetry_from_series(fs: FleetSeries, cfg: TelemetryConfig) -> list[Signal]:
    """Per-replica, per-source telemetry verdicts (key = replica; one fleet-wide key "" when every
    replica lost the same source). A source (``spans``, ``metrics``) is lost when the replica served over
    ``window_s`` (>= ``min_served`` successful gateway attempts, or the other source shows work) while
    that source sent nothing, having sent before the window. Running requests count as evidence for
    spans only on a replica the gateway sends nothing (behind no gateway of ours): vLLM 0.32 exports no
    span for a request the client aborted, so a replica whose attempts clients all gave up on runs
    requests and rightly sends no span."""
    window = fs.window(cfg.window_s)
    history = range(window.stop, fs.n)
    verdicts: dict[str, dict[str, Any]] = {}
    for name, rep in fs.replicas.items():
        gw_ok = rep.total("gw_ok", window)
        spans = rep.total("requests", window)
        points = rep.total("gauge_points", window)
        running = max((rep.get("running_mean", b) or 0.0 for b in window), default=0.0)
        had_spans = rep.total("requests", history) > 0
        had_points = rep.total("gauge_points", history) > 0
        serving = gw_ok >= cfg.min_served
        lost = []
        unseen_by_gateway = rep.total("attempts", window) == 0
        if had_spans and spans == 0 and (serving or (running > 0 and unseen_by_gateway)):
            lost.append("spans")
        if had_points and points == 0 and (serving or spans >= cfg.min_served):
            lost.append("metrics")
        verdicts[name] = {"lost": lost, "gateway_ok": int(gw_ok), "engine_spans": int(spans), "gauge_points": int(points),
                          "scrape_up_failed": int(rep.total("up_failed", window)), "window_s": cfg.window_s,
                          "known": had_spans or had_points}
    out = []
    known = [n for n, v in verdicts.items() if v["known"]]
    common = set.intersection(*(set(verdicts[n]["lost"]) for n in known)) if len(known) >= 2 else set()
    for name in sorted(verdicts):
        v = dict(verdicts[name])
        lost = [s for s in v["lost"] if s not in common]
        v["lost"] = lost
        summary = (f"{replica_label(name)} serves ({v['gateway_ok']} successful gateway attempts in {cfg.window_s}s) but "
                   f"its {' and '.join(lost)} stopped arriving" if lost else f"{replica_label(name)}: telemetry arriving")
        out.append(Signal(RULE_TELEMETRY, name, Level.FIRE if lost else Level.CLEAR, "warning", summary, v,
                          replica=name, labels={"replica": name, "sources": ",".join(lost)}))
    figures = {"lost": sorted(common), "replicas": len(known), "window_s": cfg.window_s}
    summary = (f"telemetry from all {len(known)} replicas stopped ({' and '.join(sorted(common))}) while the "
               f"gateway keeps serving: collector or exporter down" if common else "replica telemetry arriving")
    out.append(Signal(RULE_TELEMETRY, "", Level.FIRE if common else Level.CLEAR, "warning", summary, figures,
                      labels={"sources": ",".join(sorted(common))}))
    return out
