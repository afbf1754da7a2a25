"""Alert rules 1-4, 6, 7 on hand-seeded llm_calls / gauges / task spans, figures computed by hand."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest

from alerts import rules, rules_health
from alerts.config import AlertConfig, BurnTier, SloConfig
from alerts.model import Level
from schema.queries import alerts as q
from tests.alerts_helpers import (T0, client_call, engine_call, gateway_call, insert_calls, insert_gauges,
                                  insert_task_spans)

S = timedelta(seconds=1)


def test_replica_degradation_names_the_slow_replica(store):
    decodes = {"r1": [0.9, 1.0, 1.1, 1.0, 1.0], "r2": [3.0, 3.3, 2.7, 3.0, 3.0],
               "r3": [1.1] * 5, "r4": [0.8] * 5}
    calls = []
    for replica, values in decodes.items():
        for i, decode in enumerate(values):
            calls.append(engine_call(replica, T0 - (10 + 20 * i) * S, ttft_s=0.3 if replica == "r2" else 0.1,
                                     decode_s=decode, output_tokens=101))
    # outside the 2-minute window (too old, and after now): must not count
    calls.append(engine_call("r2", T0 - 150 * S, decode_s=100.0))
    calls.append(engine_call("r1", T0 + 10 * S, decode_s=100.0))
    insert_calls(store, calls)

    stats = {s["replica"]: s for s in q.replica_latency(store, T0, 120)}
    assert stats["r2"]["requests"] == 5 and stats["r1"]["requests"] == 5
    assert stats["r2"]["itl_p50_s"] == pytest.approx(0.030)  # median of 3.0/100 ...
    assert stats["r1"]["itl_p50_s"] == pytest.approx(0.010)
    assert stats["r2"]["ttft_p50_s"] == pytest.approx(0.3)

    verdicts = {s.key: s for s in rules.degradation_signals(store, T0, AlertConfig())}
    r2 = verdicts["r2"]
    assert r2.level is Level.FIRE and r2.replica == "r2"
    # others' ITL medians: median(0.010, 0.011, 0.008) = 0.010 -> 3.0x
    assert r2.figures["itl_ratio"] == pytest.approx(3.0)
    assert r2.figures["ttft_ratio"] == pytest.approx(3.0)
    assert "3.00x" in r2.summary
    # r3: 0.011 / median(0.010, 0.030, 0.008) = 1.1 < 1.2 -> CLEAR
    assert verdicts["r3"].figures["itl_ratio"] == pytest.approx(1.1)
    assert verdicts["r3"].level is Level.CLEAR
    assert verdicts["r1"].level is Level.CLEAR
    # the stateless entry point gives the same verdicts, for every rule but the cascade (needs history)
    from alerts.evaluator import evaluate

    snapshot = evaluate(store, T0)
    assert set(snapshot) == {"replica_degradation", "retry_amplification", "queue_growth", "saturation",
                             "slo_burn_rate", "ingestion_health", "budget_burn", "spend_anomaly"}
    assert {s.key: s.level for s in snapshot["replica_degradation"]}["r2"] is Level.FIRE


def test_degradation_error_jump_and_hysteresis_band():
    cfg = AlertConfig().degradation

    def row(replica, errors, itl=0.01, requests=20):
        return {"replica": replica, "requests": requests, "ttft_samples": requests, "ttft_p50_s": 0.1,
                "itl_samples": requests, "itl_p50_s": itl, "errors": errors, "queue_p95_s": 0.0}

    out = {s.key: s for s in rules.degradation_from_stats(
        [row("a", 4), row("b", 0), row("c", 0), row("d", 0, itl=0.013)], cfg)}
    # a: 4/20 = 20% >= 5% and >= 3 x max(0%, 1%) -> error jump
    assert out["a"].level is Level.FIRE and "error rate 20.0%" in out["a"].summary
    # d: 0.013 / median(0.01, 0.01, 0.01) = 1.3: between clear (1.2) and trigger (1.5) -> HOLD
    assert out["d"].figures["itl_ratio"] == pytest.approx(1.3) and out["d"].level is Level.HOLD
    # too few calls: nothing to compare -> CLEAR
    few = rules.degradation_from_stats([row("a", 0, itl=1.0, requests=4), row("b", 0), row("c", 0)], cfg)
    assert {s.key: s.level for s in few}["a"] is Level.CLEAR


def test_retry_amplification_against_baseline(store):
    calls = []
    # current 5-min window: 40 first attempts + 4 retries -> 10%
    for i in range(40):
        calls.append(client_call(T0 - (5 + i) * S, f"task{i}", attempt=1))
    for i in range(4):
        calls.append(client_call(T0 - (50 + i) * S, f"task{i}", attempt=2))
    # baseline hour: 100 first attempts + 5 retries -> 5%
    for i in range(100):
        calls.append(client_call(T0 - (400 + 30 * i) * S, f"old{i}", attempt=1))
    for i in range(5):
        calls.append(client_call(T0 - (600 + i) * S, f"old{i}", attempt=2))
    # outside both windows
    calls.append(client_call(T0 + 5 * S, "future", attempt=3))
    calls.append(client_call(T0 - 4000 * S, "ancient", attempt=3))
    # gateway: 30 requests, 3 of them retried once -> 33 attempts, 10%
    for i in range(30):
        calls.append(gateway_call(T0 - (10 + i) * S, parent=f"gw{i}"))
    for i in range(3):
        calls.append(gateway_call(T0 - (45 + i) * S, parent=f"gw{i}"))
    insert_calls(store, calls)

    stats = q.retry_windows(store, T0, 300, 3600)
    assert stats["client"] == {"attempts": 44, "first_attempts": 40, "baseline_attempts": 105,
                               "baseline_first_attempts": 100}
    assert stats["gateway"] == {"attempts": 33, "first_attempts": 30, "baseline_attempts": 0,
                                "baseline_first_attempts": 0}

    signal = rules.retry_signals(store, T0, AlertConfig())[0]
    assert signal.level is Level.FIRE
    client = signal.figures["sources"]["client"]
    assert client["rate"] == pytest.approx(0.1) and client["baseline_rate"] == pytest.approx(0.05)
    assert client["amplification"] == pytest.approx(2.0)
    assert signal.figures["baselines"] == {"client": 0.05, "gateway": None}

    # a baseline frozen at 9% (incident onset): 10% < 1.3 x 9%, and not < 1.1 x 9% -> HOLD
    held = rules.retry_signals(store, T0, AlertConfig(), frozen_baseline={"client": 0.09, "gateway": 0.09})[0]
    assert held.level is Level.HOLD


def _queue_points(per_bucket):
    points = []
    for replica in ("r1", "r2"):
        for bucket, value in per_bucket.items():
            for k in range(4):
                points.append((replica, "vllm:num_requests_waiting", T0 - (bucket * 60 + 5 + 15 * k) * S, value))
    return points


def test_queue_growth_rising_then_plateau(store):
    insert_gauges(store, _queue_points({3: 0, 2: 1, 1: 2, 0: 3}))
    series = q.queue_series(store, T0, 60, 4)
    assert {b: v["waiting"] for b, v in series.items()} == {3: 0.0, 2: 2.0, 1: 4.0, 0: 6.0}
    assert series[0]["replicas"] == 2
    signal = rules.queue_signals(store, T0, AlertConfig())[0]
    # default: rising over 2 consecutive 1-min windows (3 buckets: 2 -> 4 -> 6)
    assert signal.level is Level.FIRE and signal.figures["waiting_series"] == [2.0, 4.0, 6.0]

    cfg = AlertConfig().queue
    plateau = rules.queue_from_series({b: {"waiting": 6.0, "replicas": 2} for b in range(4)}, {}, cfg)
    assert plateau.level is Level.HOLD  # high but not rising: keeps a firing alert, starts none
    drained = rules.queue_from_series({0: {"waiting": 1.0, "replicas": 2}}, {0: {"queue_p95_s": 0.2, "requests": 9}}, cfg)
    assert drained.level is Level.CLEAR


def test_queue_time_p95_series(store):
    calls = []
    for bucket, queue in ((3, 0.5), (2, 1.0), (1, 2.0), (0, 4.0)):
        for k in range(3):
            calls.append(engine_call("r1", T0 - (bucket * 60 + 10 + 10 * k) * S, queue_s=queue))
    insert_calls(store, calls)
    series = q.queue_time_series(store, T0, 60, 4)
    assert {b: v["queue_p95_s"] for b, v in series.items()} == {3: 0.5, 2: 1.0, 1: 2.0, 0: 4.0}
    signal = rules.queue_signals(store, T0, AlertConfig())[0]
    assert signal.level is Level.FIRE and signal.figures["rising_queue_time"] is True


def test_saturation_per_replica(store):
    points = []
    for k, kv in enumerate((0.94, 0.96)):
        t = T0 - (10 + 20 * k) * S
        points += [("r1", "vllm:kv_cache_usage_perc", t, kv), ("r2", "vllm:kv_cache_usage_perc", t, 0.85),
                   ("r3", "vllm:kv_cache_usage_perc", t, 0.5), ("r3", "vllm:num_requests_running", t, 10),
                   ("r4", "vllm:gpu_cache_usage_perc", t, 0.3), ("r4", "vllm:num_requests_running", t, 64)]
    points.append(("r1", "vllm:kv_cache_usage_perc", T0 - 90 * S, 0.0))  # outside the 60 s window
    insert_gauges(store, points)
    config = AlertConfig()
    config.saturation.max_running_by_replica = {"r4": 64}
    out = {s.key: s for s in rules.saturation_signals(store, T0, config)}
    assert out["r1"].figures["kv_mean"] == pytest.approx(0.95) and out["r1"].level is Level.FIRE
    assert out["r2"].level is Level.HOLD
    assert out["r3"].level is Level.CLEAR
    assert out["r4"].level is Level.FIRE and "64 running = max 64" in out["r4"].summary


def test_slo_burn_rates_and_rederived_tiers(store):
    tasks = []
    # last 5 min: 20 tasks, 4 failed, 2 successes over their 1000 ms SLO
    for i in range(20):
        outcome = "failure" if i < 4 else "success"
        tasks.append((T0 - (10 + 10 * i) * S, 2.0 if i in (4, 5) else 0.5, outcome, 1000))
    # 40 min ago: 20 good tasks
    for i in range(20):
        tasks.append((T0 - (2400 + i) * S, 0.5, "success", 1000))
    tasks.append((T0 + 30 * S, 0.5, "failure", 1000))  # ends after now: not yet known
    insert_task_spans(store, tasks)

    windows = q.slo_windows(store, T0, [300, 1800, 3600])
    assert windows[300] == {"tasks": 20, "failed": 4, "not_good": 6}
    assert windows[1800] == {"tasks": 20, "failed": 4, "not_good": 6}
    assert windows[3600] == {"tasks": 40, "failed": 4, "not_good": 6}

    out = {s.key: s for s in rules_health.slo_signals(store, T0, AlertConfig())}
    # success SLO 99%: 1 h burn = (4/40)/0.01 = 10 < 14.4 -> no page on the fast tier
    assert out["task_success:page_1h"].figures["long"]["burn_rate"] == pytest.approx(10.0)
    assert out["task_success:page_1h"].level is Level.CLEAR
    # 6 h / 30 min: 10x and 20x >= 6 -> page; 3 d / 6 h at 1x -> ticket
    assert out["task_success:page_6h"].level is Level.FIRE and out["task_success:page_6h"].severity == "critical"
    assert out["task_success:ticket_3d"].level is Level.FIRE and out["task_success:ticket_3d"].severity == "warning"
    # goodput SLO 90%: max burn 10 < 14.4 -> the 1 h tier is re-derived to 5x and says so
    fast = out["goodput:page_1h"]
    assert fast.figures["rederived"] is True and fast.figures["factor"] == pytest.approx(5.0)
    assert "could never fire" in fast.description and "5.0x" in fast.description
    # goodput 1 h: (6/40)/0.1 = 1.5x; 5 min: (6/20)/0.1 = 3x -> below 5x
    assert fast.figures["long"]["burn_rate"] == pytest.approx(1.5) and fast.level is Level.CLEAR
    assert out["goodput:page_6h"].figures["rederived"] is False


def test_burn_tier_needs_minimum_tasks():
    cfg = SloConfig(tiers=[BurnTier("t", 3600, 300, 14.4, "critical")])
    few = {3600: {"tasks": 9, "failed": 9, "not_good": 9}, 300: {"tasks": 9, "failed": 9, "not_good": 9}}
    assert all(s.level is Level.CLEAR for s in rules_health.slo_from_windows(few, cfg))


def test_ingestion_lag_and_receiver_stats(store):
    insert_gauges(store, [("r1", "vllm:num_requests_running", T0 - 400 * S, 1)])
    newest = q.newest_rows(store, T0)
    assert newest["newest_metric"] == T0 - 400 * S and newest["newest_span"] is None
    cfg = AlertConfig()
    signals, rejected = rules_health.ingestion_signals(store, T0, cfg, None, None)
    assert signals[0].key == "lag" and signals[0].level is Level.FIRE and signals[0].figures["lag_s"] == 400
    assert rejected is None

    stats = SimpleNamespace(received=10, stored=7, rejected=3, spooled_bytes=64 * 1024 * 1024, queue_rows=0,
                            newest_row_time_ns=0, store_available=False, store_reason="out_of_space",
                            quarantine_rows=12)
    out = {s.key: s for s in rules_health.ingestion_from_inputs(T0, newest, stats, 1, cfg.ingestion)}
    assert out["rejected"].level is Level.FIRE and out["rejected"].figures["rejected_new"] == 2
    assert out["spooled"].level is Level.FIRE
    assert out["quarantined"].level is Level.FIRE and out["quarantined"].figures == {"quarantine_rows": 12}
    assert out["store_unavailable"].level is Level.FIRE and out["store_unavailable"].severity == "critical"
    assert "(out_of_space)" in out["store_unavailable"].summary
    # Every accepted request passes through the spool: a small backlog is normal, not an alert.
    calm = SimpleNamespace(rejected=3, spooled_bytes=64 * 1024 * 1024 - 1, store_available=True)
    out = {s.key: s for s in rules_health.ingestion_from_inputs(T0, {"newest_span": None, "newest_metric": None},
                                                                 calm, 3, cfg.ingestion)}
    assert all(s.level is Level.CLEAR for s in out.values())


def test_config_from_dict_reports_every_problem():
    config = AlertConfig.from_dict({"degradation": {"ratio": 2.0}, "slo": {"success_target": 0.995}})
    assert config.degradation.ratio == 2.0 and config.slo.success_target == 0.995
    with pytest.raises(ValueError) as err:
        AlertConfig.from_dict({"nope": 1, "retry": {"min_rate": "x", "window_s": 2.5}, "slo": {"goodput_target": 1.5}})
    message = str(err.value)
    assert "retry.window_s must be a whole number" in message and "slo.goodput_target must be in (0, 1)" in message
    assert "unknown setting 'nope'" in message and "retry.min_rate must be a number" in message


def test_degradation_compares_replicas_with_peers_of_their_gpu_type():
    cfg = AlertConfig().degradation

    def row(replica, gpu, itl):
        return {"replica": replica, "gpu_type": gpu, "requests": 20, "ttft_samples": 20, "ttft_p50_s": 0.1,
                "itl_samples": 20, "itl_p50_s": itl, "errors": 0, "queue_p95_s": 0.0}

    # two H100 at 7 ms, two A100 at 11 ms: healthy (an A100 is just slower), though 11/7 = 1.57x the fleet
    healthy = {s.key: s for s in rules.degradation_from_stats(
        [row("h1", "H100", 0.007), row("h2", "H100", 0.007), row("a1", "A100", 0.011), row("a2", "A100", 0.011)], cfg)}
    assert all(s.level is Level.CLEAR for s in healthy.values())
    assert healthy["a1"].figures["peers"] == "same_gpu_type" and healthy["a1"].figures["itl_ratio"] == pytest.approx(1.0)
    # a2 slowed 3x: 33 ms vs its A100 peer's 11 ms
    slowed = {s.key: s for s in rules.degradation_from_stats(
        [row("h1", "H100", 0.007), row("h2", "H100", 0.007), row("a1", "A100", 0.011), row("a2", "A100", 0.033)], cfg)}
    assert slowed["a2"].level is Level.FIRE and slowed["a2"].figures["itl_ratio"] == pytest.approx(3.0)
    assert slowed["a1"].level is Level.CLEAR


def test_queue_buckets_with_one_scrape_a_minute_on_minute_marks(store):
    # scrapes at exactly now, now-60, now-120, now-180: one per bucket (now-180 is outside 3 buckets)
    insert_gauges(store, [("r1", "vllm:num_requests_waiting", T0 - 60 * b * S, v) for b, v in
                          ((0, 9.0), (1, 5.0), (2, 1.0), (3, 100.0))])
    series = q.queue_series(store, T0, 60, 3)
    assert {b: v["waiting"] for b, v in series.items()} == {0: 9.0, 1: 5.0, 2: 1.0}
    assert rules.queue_signals(store, T0, AlertConfig())[0].level is Level.FIRE


def test_degradation_never_compares_across_gpu_types_when_same_type_peers_are_quiet():
    """a1's only A100 peer has too few calls: a1 (11 ms) must not be judged against the H100s (7 ms,
    1.57x), which is what paged on the demo's light live load before."""
    cfg = AlertConfig().degradation

    def row(replica, gpu, itl, requests=20):
        return {"replica": replica, "gpu_type": gpu, "requests": requests, "ttft_samples": requests,
                "ttft_p50_s": 0.1, "itl_samples": requests, "itl_p50_s": itl, "errors": 0, "queue_p95_s": 0.0}

    out = {s.key: s for s in rules.degradation_from_stats(
        [row("h1", "H100", 0.007), row("h2", "H100", 0.007), row("a1", "A100", 0.011),
         row("a2", "A100", 0.011, requests=1)], cfg)}
    assert out["a1"].level is Level.CLEAR and "too few calls" in out["a1"].summary
    assert out["a1"].figures["other_replicas"] == 0


def test_alert_text_names_a_replica_once():
    """Issue 17 fault 10: "replica replica-2" in alert text."""
    from alerts.cascade import actions
    from alerts.model import replica_label

    assert replica_label("replica-2") == "replica-2" and replica_label("r2") == "replica r2"
    assert replica_label("Replica_7") == "Replica_7"
    assert actions("replica-2")[0].startswith("Drain replica-2:")
