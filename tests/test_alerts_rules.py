"""Alert rules 2, 6, 7 on hand-seeded llm_calls / task spans, figures computed by hand; rules 1, 3, 4
(replica degradation, queue growth, saturation) on hand-made series rows (see also test_alerts_replica.py)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from types import SimpleNamespace

import pytest

from alerts import rules, rules_health, rules_replica, series
from alerts.config import AlertConfig, BurnTier, SloConfig
from alerts.model import Level
from schema.queries import alerts as q
from tests.alerts_helpers import T0, client_call, gateway_call, insert_calls, insert_gauges, insert_task_spans

S = timedelta(seconds=1)


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


def test_burn_tier_needs_minimum_tasks_and_bad_tasks():
    cfg = SloConfig(tiers=[BurnTier("t", 3600, 300, 14.4, "critical")])
    few = {3600: {"tasks": 9, "failed": 9, "not_good": 9}, 300: {"tasks": 9, "failed": 9, "not_good": 9}}
    assert all(s.level is Level.CLEAR for s in rules_health.slo_from_windows(few, cfg))
    # two failed tasks of 20 right after a start burn at 10%/1% = 10x, but 2 < 3 bad tasks: no incident yet
    one = {3600: {"tasks": 20, "failed": 2, "not_good": 2}, 300: {"tasks": 20, "failed": 2, "not_good": 2}}
    cfg = SloConfig(tiers=[BurnTier("t", 3600, 300, 1.0, "warning")])
    assert all(s.level is Level.CLEAR for s in rules_health.slo_from_windows(one, cfg))
    three = {w: {"tasks": 20, "failed": 3, "not_good": 3} for w in (3600, 300)}
    assert {s.key: s.level for s in rules_health.slo_from_windows(three, cfg)}["task_success:t"] is Level.FIRE


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




def _rows(replicas: dict[str, tuple], buckets: int = 8):
    """Series rows: replica -> (gpu, [itl per bucket, newest first] or a constant, prefill per token)."""
    rows = []
    for name, (gpu, itl, prefill) in replicas.items():
        for b in range(buckets):
            value = itl[b] if isinstance(itl, list) else itl
            pre = prefill[b] if isinstance(prefill, list) else prefill
            rows.append({"replica": name, "bucket": b, "gpu_type": gpu, "requests": 20, "itl_p50_s": value,
                         "itl_samples": 20, "prefill_tok_p50_s": pre, "prefill_samples": 20, "attempts": 20,
                         "gw_ok": 20})
    return rows


def test_degradation_speed_against_the_gpu_type_and_its_hysteresis():
    cfg = AlertConfig().degradation
    slow = [0.03, 0.03] + [0.01] * 6  # 3x slower in the newest 2 buckets (the 2-min window)
    fs = series.build(T0, 60, 8, _rows({"h1": ("H100", 0.01, 4e-5), "h2": ("H100", 0.01, 4e-5),
                                        "h3": ("H100", slow, [1.2e-4, 1.2e-4] + [4e-5] * 6),
                                        "h4": ("H100", 0.013, 5.2e-5)}), [])
    out = {s.key: s for s in rules_replica.degradation_from_series(fs, cfg)}
    # h3: group median ITL per window bucket = median(0.01, 0.01, 0.03, 0.013) = 0.0115 -> 0.03/0.0115
    # = 2.61; prefill: median(4e-5, 4e-5, 1.2e-4, 5.2e-5) = 4.6e-5 -> 2.61; min = 2.61 >= 1.5 -> FIRE
    assert out["h3"].level is Level.FIRE and out["h3"].figures["ratio"] == pytest.approx(0.03 / 0.0115, abs=1e-3)
    assert out["h3"].figures["peers"] == "same_gpu_type" and "slower than its GPU type's median" in out["h3"].summary
    # h4: 0.013 / 0.0115 = 1.13 and 5.2e-5 / 4.6e-5 = 1.13 < 1.2 -> CLEAR
    assert out["h4"].level is Level.CLEAR and out["h4"].figures["ratio"] == pytest.approx(1.130, abs=1e-3)
    # the band between 1.2 and 1.5 holds a firing alert without starting one
    band = series.build(T0, 60, 8, _rows({"h1": ("H100", 0.01, 4e-5), "h2": ("H100", 0.01, 4e-5),
                                          "h3": ("H100", 0.013, 5.2e-5), "h4": ("H100", 0.014, 5.6e-5)}), [])
    h4 = {s.key: s for s in rules_replica.degradation_from_series(band, cfg)}["h4"]
    assert h4.figures["ratio"] == pytest.approx(0.014 / 0.0115, abs=1e-3) and h4.level is Level.HOLD


def test_lone_gpu_type_is_judged_against_its_own_baseline():
    cfg = AlertConfig().degradation
    h100 = {"h1": ("H100", 0.01, 4e-5), "h2": ("H100", 0.01, 4e-5), "h3": ("H100", 0.01, 4e-5)}
    # one A100 among H100s: 1.65x slower than them by design, every bucket -> never degraded
    steady = series.build(T0, 60, 8, _rows({**h100, "a1": ("A100", 0.0165, 6.6e-5)}), [])
    a1 = {s.key: s for s in rules_replica.degradation_from_series(steady, cfg)}["a1"]
    # its own baseline (buckets 3-7): 16.5 ms and 66 us; now the same, the fleet unchanged -> 1.0
    assert a1.figures["peers"] == "own_baseline" and a1.figures["baseline_itl_s"] == pytest.approx(0.0165)
    assert a1.figures["ratio"] == pytest.approx(1.0) and a1.level is Level.CLEAR
    # the same A100 3x slower in the newest two buckets -> 3.0 its own baseline -> FIRE
    slow_a1 = ("A100", [0.0495] * 2 + [0.0165] * 6, [1.98e-4] * 2 + [6.6e-5] * 6)
    slowed = series.build(T0, 60, 8, _rows({**h100, "a1": slow_a1}), [])
    a1 = {s.key: s for s in rules_replica.degradation_from_series(slowed, cfg)}["a1"]
    assert a1.level is Level.FIRE and a1.figures["ratio"] == pytest.approx(3.0)
    assert "its own recent baseline, net of the fleet's change" in a1.summary
    # a surge slowing every replica 2x is no degradation: 2x its baseline / the fleet's 2x change = 1.0
    surge = {n: (g, [v * 2] * 2 + [v] * 6, [p * 2] * 2 + [p] * 6) for n, (g, v, p) in h100.items()}
    a1 = {s.key: s for s in rules_replica.degradation_from_series(series.build(T0, 60, 8, _rows(
        {**surge, "a1": ("A100", [0.033] * 2 + [0.0165] * 6, [1.32e-4] * 2 + [6.6e-5] * 6)}), []), cfg)}["a1"]
    assert a1.figures["ratio"] == pytest.approx(1.0) and a1.level is Level.CLEAR
    # with its alert active, the baselines frozen at onset are used, not the (degraded) recent history
    frozen = {"a1": {"itl_p50_s": 0.033, "prefill_tok_p50_s": 1.32e-4}}
    held = series.build(T0, 60, 8, _rows({**h100, "a1": slow_a1}), [], frozen=frozen)
    assert {s.key: s for s in rules_replica.degradation_from_series(held, cfg)}["a1"].figures["ratio"] == \
        pytest.approx(1.5)


def test_alert_text_names_a_replica_once():
    """Issue 17 fault 10: "replica replica-2" in alert text."""
    from alerts.cascade import actions
    from alerts.model import replica_label

    assert replica_label("replica-2") == "replica-2" and replica_label("r2") == "replica r2"
    assert replica_label("Replica_7") == "Replica_7"
    assert actions("replica-2")[0].startswith("Drain replica-2:")


def test_degradation_from_gateway_visible_errors_and_no_data():
    cfg = AlertConfig().degradation
    rows = _rows({"r1": ("H100", 0.01, 4e-5), "r2": ("H100", 0.01, 4e-5), "r3": ("H100", 0.01, 4e-5)}, buckets=4)
    for row in rows:
        if row["replica"] == "r3" and row["bucket"] < 2:  # 12 of 20 attempts answered 503 before the engine
            row.update(gw_failed=12, gw_errors=12, gw_ok=8, requests=8, itl_samples=8, prefill_samples=8)
    fs = series.build(T0, 60, 4, rows, [])
    r3 = {s.key: s for s in rules_replica.degradation_from_series(fs, cfg)}["r3"]
    # 24 failed / 40 attempts = 60% >= 5% and >= 3 x max(0%, 1%)
    assert r3.level is Level.FIRE and r3.figures["error_rate"] == pytest.approx(0.6) and r3.figures["errors"] == 24
    assert "fails 60.0% of attempts" in r3.summary
    # r3 stops reporting: with its alert active it holds in a no-data state; without, nothing
    quiet = series.build(T0, 60, 4, [r for r in rows if not (r["replica"] == "r3" and r["bucket"] < 2)], [])
    active = {s.key: s for s in rules_replica.degradation_from_series(quiet, cfg, {"r3": {}})}
    assert active["r3"].no_data and active["r3"].level is Level.HOLD
    assert "r3" not in {s.key for s in rules_replica.degradation_from_series(quiet, cfg)}


def test_degradation_on_too_few_calls_keeps_an_active_alert_without_clearing_it():
    """Speed unknown even widened to widen_s (6 buckets): no evidence either way. An active alert holds
    in the no-data state (not CLEAR, which would count towards resolving it); no alert starts."""
    cfg = AlertConfig().degradation
    r3 = ("H100", [0.03] * 4 + [0.01] * 6, [1.2e-4] * 4 + [4e-5] * 6)  # 3x slow in buckets 0-3
    rows = [r for r in _rows({"r1": ("H100", 0.01, 4e-5), "r2": ("H100", 0.01, 4e-5), "r3": r3}, buckets=10)
            if not (r["replica"] == "r3" and 4 <= r["bucket"] <= 5)]
    for row in rows:
        if row["replica"] == "r3" and row["bucket"] < 4:  # 1 call a bucket, 3x slow: 4 calls in 6 buckets
            row.update(requests=1, itl_samples=1, prefill_samples=1, attempts=1, gw_ok=1)
    fs = series.build(T0, 60, 10, rows, [])
    assert fs.thin_ratios["r3"][:6] == [pytest.approx(3.0)] * 4 + [None, None] and fs.ratios["r3"][:6] == [None] * 6
    r3 = {s.key: s for s in rules_replica.degradation_from_series(fs, cfg, {"r3": {}})}["r3"]
    assert r3.level is Level.HOLD and r3.no_data and r3.figures["ratio"] is None
    assert (r3.figures["speed_judged"], r3.figures["speed_calls"]) == ("unknown", 4)
    assert "4 call(s) with a speed figure in the last 360s, too few (5) to judge its speed" in r3.summary
    idle = {s.key: s for s in rules_replica.degradation_from_series(fs, cfg)}["r3"]
    assert idle.level is Level.CLEAR and not idle.no_data
    # a 5th call, in bucket 6 (a busy healthy bucket, 1.0 as the others) is beyond widen_s: still unknown;
    # widen_s 420 takes 1 of its 20 calls -> 3.0 x 4, 1.0 x 1: median 3.0 -> FIRE
    wider = {s.key: s for s in rules_replica.degradation_from_series(
        fs, dataclasses.replace(cfg, widen_s=420))}["r3"]
    assert wider.level is Level.FIRE and wider.figures["ratio"] == pytest.approx(3.0)
    assert (wider.figures["speed_judged"], wider.figures["speed_calls"], wider.figures["speed_window_s"]) == \
        ("widened", 5, 420)


def test_degradation_from_work_clients_gave_up_on_when_its_speed_cannot_be_judged():
    """A replica slowed until clients time out leaves almost no engine span (vLLM 0.32 exports none for
    an aborted request): judged by the gateway's attempts on it against the other replicas'."""
    cfg = AlertConfig().degradation
    rows = _rows({"r1": ("H100", 0.01, 4e-5), "r2": ("H100", 0.01, 4e-5), "r3": ("H100", 0.01, 4e-5)}, buckets=4)
    for row in rows:
        if row["bucket"] < 2:  # the whole fleet overloaded: 100 attempts a bucket on each, 70 given up on
            row.update(attempts=100, gw_ok=30, gw_abandoned=70)
            if row["replica"] == "r3":  # r3: 2 answered (2 engine spans: too few for a speed figure)
                row.update(gw_ok=2, gw_abandoned=97, gw_failed=1, requests=2, itl_samples=2, prefill_samples=2)
    out = {s.key: s for s in rules_replica.degradation_from_series(series.build(T0, 60, 4, rows, []), cfg)}
    r3 = out["r3"]
    # abandoned (97 + 1 timeout) x 2 / 200 = 98% >= 50%; answered 4 / 200 = 2%, the others' 30% >= 3 x 2%;
    # load 200 / 200 = 1.0 <= 1.3
    assert r3.level is Level.FIRE
    # no speed figure in the 2-min window (2 calls a bucket < 5): widened to its newest 5 calls, the 2 + 2
    # of the window and 1 of bucket 2, each as fast as its GPU type's median (0.01 / 0.01) -> 1.0
    assert (r3.figures["ratio"], r3.figures["speed_judged"], r3.figures["speed_calls"]) == (1.0, "widened", 5)
    assert r3.figures["abandoned_rate"] == pytest.approx(0.98) and r3.figures["answered_rate"] == pytest.approx(0.02)
    assert r3.figures["others_median_answered_rate"] == pytest.approx(0.3) and r3.figures["load_ratio"] == 1.0
    assert "answers 2.0% of its attempts vs 30.0% on its GPU type's other replicas" in r3.summary
    # the others, as overloaded as each other (70% given up on everywhere): no degradation
    assert out["r1"].level is Level.CLEAR and out["r2"].level is Level.CLEAR
    # the same on a replica given 1.5x the others' attempts: overloaded, not degraded
    for row in rows:
        if row["replica"] == "r3" and row["bucket"] < 2:
            row.update(attempts=150, gw_abandoned=147)
    hot = {s.key: s for s in rules_replica.degradation_from_series(series.build(T0, 60, 4, rows, []), cfg)}["r3"]
    assert hot.level is not Level.FIRE and "abandoned_rate" not in hot.figures
    assert r3.figures["abandon_peers"] == "same_gpu_type"


def test_degradation_from_abandoned_work_compares_a_replica_with_its_gpu_type():
    """Issue 41: behind blind routing an overloaded fleet's two A100s time out (80% given up on, 2 engine
    spans each a minute: no speed figure) while the H100s answer everything. Each A100 answers as its
    type's other replica: not degraded (against the H100s' median, 100% >= 3 x 20%, it was). One A100
    timing out alone while the other answers everything is."""
    cfg = AlertConfig().degradation
    gpus = {"h1": ("H100", 0.01, 4e-5), "h2": ("H100", 0.01, 4e-5), "h3": ("H100", 0.01, 4e-5),
            "a1": ("A100", 0.02, 8e-5), "a2": ("A100", 0.02, 8e-5)}

    def verdicts(timing_out):
        rows = _rows(gpus, buckets=4)
        for row in rows:
            if row["bucket"] < 2:
                row.update(attempts=100, gw_ok=100)
                if row["replica"] in timing_out:
                    row.update(gw_ok=20, gw_abandoned=80, requests=2, itl_samples=2, prefill_samples=2)
        return {s.key: s for s in rules_replica.degradation_from_series(series.build(T0, 60, 4, rows, []), cfg)}

    both = verdicts({"a1", "a2"})
    assert (both["a1"].level, both["a2"].level) == (Level.CLEAR, Level.CLEAR)
    assert "abandoned_rate" not in both["a1"].figures
    alone = verdicts({"a1"})["a1"]
    # a1: 160 of 200 given up on (80% >= 50%), answered 20% vs a2's 100% (>= 3 x 20%), same load
    assert alone.level is Level.FIRE and alone.figures["abandon_peers"] == "same_gpu_type"
    assert (alone.figures["abandoned_rate"], alone.figures["others_median_answered_rate"]) == (0.8, 1.0)
    assert "vs 100.0% on its GPU type's other replicas" in alone.summary


def test_queue_growth_against_its_own_level():
    cfg = AlertConfig().queue

    def fleet(waiting_newest_first, n=6):
        rows = []
        for b in range(n):
            for name in ("r1", "r2"):
                rows.append({"replica": name, "bucket": b, "waiting_mean": waiting_newest_first[b] / 2})
        return series.build(T0, 60, n, rows, [])

    # fleet waiting 2 (usual) -> 3 -> 5 -> 9: rising over 2 buckets by >= 0.5, 9 >= 4 and >= 2 x 2
    signal = rules.queue_from_series(fleet([9, 5, 3, 2, 2, 2]), cfg)
    assert signal.level is Level.FIRE and signal.figures["waiting_series"] == [3.0, 5.0, 9.0]
    assert signal.figures["waiting_baseline"] == 2.0
    # a busy fleet whose queue wobbles around 5: 5 -> 6 -> 7 is below 2 x 5 -> no growth, HOLD (> 1.5 x 5)
    assert rules.queue_from_series(fleet([8, 6, 5, 5, 5, 5]), cfg).level is Level.HOLD
    # back to 1.5 x its usual level: CLEAR
    assert rules.queue_from_series(fleet([7, 6, 5, 5, 5, 5]), cfg).level is Level.CLEAR


def test_queue_growth_has_an_absolute_floor_of_requests_waiting():
    """Issue 41: a healthy fleet's worst queue-time p95 rose 0.4 -> 0.8 -> 2.6 -> 5.5 s (a few long
    prompts queued behind each other) while 0.17 -> 0.67 -> 0.5 requests waited: queue growth fired.
    Below ``min_waiting`` (4) requests waiting in the fleet it never fires, whichever signal rose."""
    cfg = AlertConfig().queue

    def fleet(waiting, p95, n=6):
        rows = []
        for b in range(n):
            for name in ("r1", "r2", "r3"):
                rows.append({"replica": name, "bucket": b,
                             "waiting_mean": None if waiting is None else waiting[b] / 3,
                             "queue_p95_s": p95[b] if name == "r1" else 0.1})
        return series.build(T0, 60, n, rows, [])

    p95 = [5.5, 2.6, 0.8, 0.4, 0.4, 0.4]  # rising by >= 0.25 s a bucket to >= 2 s and >= 2 x 0.4
    wobble = rules.queue_from_series(fleet([0.5, 0.67, 0.17, 0.0, 0.0, 0.0], p95), cfg)
    assert wobble.level is Level.HOLD and not wobble.figures["rising_queue_time"]  # 5.5 s > 1 s: not clear
    assert wobble.figures["waiting_series"] == [0.17, 0.67, 0.5] and wobble.figures["min_waiting"] == 4.0
    # the same queue time over 5 requests waiting (not growing: 5 -> 5 -> 5) fires
    busy = rules.queue_from_series(fleet([5.0] * 6, p95), cfg)
    assert busy.level is Level.FIRE and busy.figures["rising_queue_time"] and not busy.figures["rising_waiting"]
    assert "rising: queue-time p95" in busy.summary
    # a fleet that exports no waiting gauge is judged on queue time alone
    assert rules.queue_from_series(fleet(None, p95), cfg).level is Level.FIRE
    # the floor is the operator's: fleet.yaml alerts.queue.min_waiting
    own = AlertConfig.from_dict({"queue": {"min_waiting": 0.5}}).queue
    assert rules.queue_from_series(fleet([0.5, 0.67, 0.17, 0.0, 0.0, 0.0], p95), own).level is Level.FIRE


def test_saturation_without_configuring_max_num_seqs():
    cfg = AlertConfig().saturation
    rows = []
    for b in (0, 1):
        rows += [{"replica": "r1", "bucket": b, "kv_mean": 0.95, "waiting_mean": 0.0, "waiting_min": 0.0,
                  "running_mean": 4},
                 {"replica": "r2", "bucket": b, "kv_mean": 0.4, "waiting_mean": 3.0, "waiting_min": 1.0,
                  "running_mean": 4},
                 {"replica": "r3", "bucket": b, "kv_mean": 0.4, "waiting_mean": 3.0, "waiting_min": 0.0,
                  "running_mean": 4},
                 {"replica": "r4", "bucket": b, "kv_mean": 0.85, "waiting_mean": 0.0, "waiting_min": 0.0,
                  "running_mean": 64}]
    out = {s.key: s for s in rules.saturation_from_series(series.build(T0, 60, 2, rows, []), cfg)}
    assert out["r1"].level is Level.FIRE and "KV cache 95% used" in out["r1"].summary
    # r2: requests waiting at every scrape (min 1) -> admits no more, whatever limit stopped it
    assert out["r2"].level is Level.FIRE and "the queue never empty" in out["r2"].summary
    assert out["r3"].level is Level.CLEAR  # its queue emptied at some scrape
    assert out["r4"].level is Level.HOLD  # KV between 80% and 90%
    cfg.max_running_by_replica = {"r4": 64}  # a configured --max-num-seqs still counts
    out = {s.key: s for s in rules.saturation_from_series(series.build(T0, 60, 2, rows, []), cfg)}
    assert out["r4"].level is Level.FIRE and "64 running = max 64" in out["r4"].summary
