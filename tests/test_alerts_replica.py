"""Replica down and per-replica telemetry health (alerts/rules_replica.py) on hand-made series rows,
figures computed by hand; end to end on emulator telemetry in test_alerts_scenarios.py."""

from __future__ import annotations

import pytest

from alerts import rules_replica, series
from alerts.config import AlertConfig
from alerts.model import Level
from tests.alerts_helpers import T0


def _history(replica, buckets=range(1, 11), **values):
    base = {"requests": 20, "gw_ok": 20, "attempts": 20, "gauge_points": 12, "up_ok": 6, "running_mean": 3.0}
    base.update(values)
    return [{"replica": replica, "bucket": b, "gpu_type": "H100", **base} for b in buckets]


def test_replica_down_needs_evidence_not_silence():
    cfg = AlertConfig().down
    rows = []
    rows += _history("r1", range(0, 11))
    # r2 crashed: in the newest minute no engine span, no success, its scrape fails, the gateway's
    # re-probes are refused
    rows += _history("r2") + [{"replica": "r2", "bucket": 0, "attempts": 4, "gw_failed": 4, "gw_errors": 4,
                               "gw_conn_errors": 4, "up_failed": 6}]
    # r3 drained for a planned scale-down: out of the pool and of the scrape targets, so nothing at all
    rows += _history("r3")
    # r4's scrape fails (its metrics collection broke) but the gateway gets answers from it: it serves
    rows += _history("r4") + [{"replica": "r4", "bucket": 0, "attempts": 20, "gw_ok": 20, "up_failed": 6}]
    fs = series.build(T0, 60, 11, rows, [])
    out = {s.key: s for s in rules_replica.down_from_series(fs, cfg)}
    assert out["r1"].level is Level.CLEAR and out["r4"].level is Level.CLEAR
    assert out["r3"].level is Level.HOLD  # silence is no evidence: nothing starts
    r2 = out["r2"]
    assert r2.level is Level.FIRE and r2.severity == "critical"
    # capacity lost: r2 ran 20 of the fleet's 80 calls a minute over the 10 min before the window
    assert r2.figures["capacity_share"] == 0.25 and r2.figures["connection_errors"] == 4
    assert "its scrape fails" in r2.summary and "~25% of the fleet's calls" in r2.summary


def test_telemetry_loss_per_replica_and_source():
    cfg = AlertConfig().telemetry
    rows = _history("r1", range(0, 11))
    # r2 serves (12 successful gateway attempts) but neither its spans nor its scrapes arrive
    rows += _history("r2") + [{"replica": "r2", "bucket": 0, "attempts": 12, "gw_ok": 12}]
    # r3: spans arrive, metric points stopped
    rows += _history("r3") + [{"replica": "r3", "bucket": 0, "requests": 15, "attempts": 15, "gw_ok": 15}]
    # r4 behind no gateway of ours: its gauges show running requests, its spans stopped
    rows += _history("r4", attempts=0, gw_ok=0) + [{"replica": "r4", "bucket": 0, "gauge_points": 12,
                                                      "up_ok": 6, "running_mean": 2.0}]
    # r5 is down (no successes, nothing): not a telemetry problem
    rows += _history("r5")
    # r6 runs requests but clients gave up on all 40 attempts on it: vLLM 0.32 exports no span for an
    # aborted request, so no span is expected
    rows += _history("r6") + [{"replica": "r6", "bucket": 0, "attempts": 40, "gw_abandoned": 40,
                               "gauge_points": 12, "up_ok": 6, "running_mean": 4.0}]
    fs = series.build(T0, 60, 11, rows, [])
    out = {s.key: s for s in rules_replica.telemetry_from_series(fs, cfg)}
    assert out["r1"].level is Level.CLEAR and out["r5"].level is Level.CLEAR and out["r6"].level is Level.CLEAR
    assert out["r2"].level is Level.FIRE and out["r2"].figures["lost"] == ["spans", "metrics"]
    assert "serves (12 successful gateway attempts in 60s) but its spans and metrics stopped" in out["r2"].summary
    assert out["r3"].figures["lost"] == ["metrics"] and out["r4"].figures["lost"] == ["spans"]
    assert out[""].level is Level.CLEAR


def test_telemetry_loss_of_every_replica_is_one_fleet_alert():
    cfg = AlertConfig().telemetry
    rows = []
    for name in ("r1", "r2", "r3"):
        rows += _history(name) + [{"replica": name, "bucket": 0, "attempts": 20, "gw_ok": 20}]
    out = {s.key: s for s in rules_replica.telemetry_from_series(series.build(T0, 60, 11, rows, []), cfg)}
    assert out[""].level is Level.FIRE and out[""].figures["lost"] == ["metrics", "spans"]
    assert "telemetry from all 3 replicas stopped" in out[""].summary
    assert all(out[n].level is Level.CLEAR for n in ("r1", "r2", "r3"))


@pytest.mark.parametrize("rule", ["down", "telemetry"])
def test_no_history_no_verdict(rule):
    # a replica first seen in the newest bucket, with nothing older: no baseline to say it stopped
    rows = [{"replica": "r1", "bucket": 0, "attempts": 3, "gw_failed": 3, "gw_conn_errors": 3, "up_failed": 2}]
    fs = series.build(T0, 60, 11, rows, [])
    if rule == "down":  # the scrape fails and connections are refused: down even without history
        assert rules_replica.down_from_series(fs, AlertConfig().down)[0].level is Level.FIRE
    else:
        assert all(s.level is Level.CLEAR for s in rules_replica.telemetry_from_series(fs, AlertConfig().telemetry))


def _sparse_fleet(store):
    """The demo's live incident, by hand (engine spans as the ingest lands them, no GPU type: every
    replica judged against its own baseline, as the demo's replica-2, an A100 with one A100 peer).
    r1, r3, r4: 6 calls a minute (ending at :05, :15 .. :55) at 10 ms/token and 40 us/prompt token, so
    every 60-s bucket holds 6 of them. r2 and r5: the same until 08:00, then 2 calls a minute (:20, :50).
    r2 is 3x slower from 08:00 (30 ms/token, 120 us/prompt token) and gets a burst of 5 calls in minute
    10 (10:10 .. 10:50) instead of its 2; r5 stays healthy but for one odd 3x-slow call at 10:50."""
    from datetime import timedelta

    from tests.alerts_helpers import engine_call, insert_calls

    def call(name, at_s, slow=False):
        return engine_call(name, T0 + timedelta(seconds=at_s), decode_s=3.0 if slow else 1.0,
                           prefill_s=0.12 if slow else 0.04)

    rows = []
    for m in range(16):
        for name in ("r1", "r2", "r3", "r4", "r5"):
            if m < 8 or name in ("r1", "r3", "r4"):
                rows += [call(name, 60 * m + 5 + 10 * k) for k in range(6)]
            elif name == "r2":
                rows += [call(name, 60 * m + s, slow=True) for s in ((10, 20, 30, 40, 50) if m == 10 else (20, 50))]
            else:
                rows += [call(name, 60 * m + s, slow=(m, s) == (10, 50)) for s in (20, 50)]
    insert_calls(store, rows)


def test_slow_replica_with_few_calls_fires_and_healthy_sparse_one_does_not(store):
    """Absence of evidence is no evidence of health. r2, 3x slow at 2-5 calls a minute: at 10:00 its
    window holds 2 + 2 slow calls, widened by 1 call of the healthy bucket (07:00, 08:00]: the median of
    3.0 x 4, 1.0 x 1 is 3.0 -> pending; 10:30 (4 + 2 slow calls) and 11:00 (its 5-call burst) -> firing.
    Judged on its 2-min window alone (a figure only from a bucket of >= 5 calls) it went pending at
    11:00 on the burst and was cancelled at 11:30 ("too few calls to compare its speed": the burst split
    over buckets of 3 and 4 calls), pending again at 12:00, cancelled at 12:30, as the demo's replica-2."""
    from datetime import timedelta

    from alerts.evaluator import Evaluator, evaluate

    _sparse_fleet(store)
    evaluator = Evaluator(store, AlertConfig())
    log = []
    for half in range(18, 31):  # 09:00 .. 15:00 every 30 s
        now = T0 + timedelta(seconds=30 * half)
        log += [(f"{now:%M:%S}", t.alert.key, t.state.value) for t in evaluator.step(now)
                if t.alert.rule == "replica_degradation"]
    assert log == [("10:00", "r2", "pending"), ("11:00", "r2", "firing")]

    # the verdicts at 11:30: its own baseline 10 ms/token, 40 us/prompt token (buckets 3 on with >= 5
    # calls: the busy minutes before 08:00); the fleet's change 1.0 (r1, r3, r4: 6 calls a bucket, as
    # before); r2 in (10:30, 11:30]: 10:40, 10:50, 11:20 (3 calls), in (09:30, 10:30]: 09:50 .. 10:30 (4)
    # -> no bucket of 5; widened: 3 + 4 = 7 calls >= 5 within the window, each bucket 30/10 = 120/40 = 3x
    out = {s.key: s for s in evaluate(store, T0 + timedelta(seconds=690))["replica_degradation"]}
    r2 = out["r2"]
    assert r2.level is Level.FIRE and r2.figures["ratio"] == pytest.approx(3.0)
    assert (r2.figures["speed_judged"], r2.figures["speed_calls"], r2.figures["speed_window_s"]) == ("widened", 7, 120)
    assert "3.00x slower than its own recent baseline" in r2.summary and "(its last 7 calls over 120s, pooled: " in r2.summary
    # r5 in (10:30, 11:30]: 10:50 (3x) and 11:20 -> median of two = the upper (ClickHouse quantileExact),
    # 3.0, weight 2; (09:30, 10:30]: 09:50, 10:20 -> 1.0, weight 2; (08:30, 09:30]: 08:50, 09:20 -> 1.0,
    # 1 of its 2 calls still needed. Call-weighted median of 3.0 x 2, 1.0 x 3 = 1.0 (the mean, 1.8,
    # would fire on one odd call)
    r5 = out["r5"]
    assert r5.level is Level.CLEAR and r5.figures["ratio"] == pytest.approx(1.0)
    assert (r5.figures["speed_judged"], r5.figures["speed_calls"], r5.figures["speed_window_s"]) == ("widened", 5, 180)
    assert all(out[n].figures["speed_judged"] == "window" and out[n].level is Level.CLEAR for n in ("r1", "r3", "r4"))
