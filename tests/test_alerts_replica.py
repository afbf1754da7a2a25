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
