"""Alert lifecycle (pending -> firing -> resolved, hysteresis, dedup), the cascade rule end to end on a
hand-made timeline, and the alerts table with its named queries."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from alerts.config import AlertConfig
from alerts.evaluator import Evaluator
from alerts.lifecycle import Lifecycle
from alerts.model import RULE_CASCADE, Level, Signal, State, alert_id
from alerts.notifiers import Dispatcher, Notifier
from schema.queries import alerts as q
from tests.alerts_helpers import T0, Receiver, seed_cascade_timeline

M = timedelta(minutes=1)


def _sig(level, key="r1"):
    return Signal("replica_degradation", key, level, "warning", f"{level.value}", {"ratio": 2.0}, replica=key)


def _run(lc, levels, for_s=60):
    out = []
    for minute, level in enumerate(levels):
        signals = [] if level is None else [_sig(level)]
        for t in lc.apply(signals, T0 + minute * M, {"replica_degradation": for_s}, {"replica_degradation"}):
            out.append((minute, t.state))
    return out


def test_pending_firing_resolved_with_hysteresis():
    F, H, C = Level.FIRE, Level.HOLD, Level.CLEAR
    lc = Lifecycle(resolve_after_s=180)
    # FIRE at 0 (pending), 1 (for 60 s: firing), FIRE/HOLD keep it; CLEAR runs of 2 then HOLD reset;
    # then CLEAR at 7, 8, 9, 10: resolved at 10 (180 s after 7).
    changes = _run(lc, [F, F, F, H, C, C, H, C, C, C, C])
    assert changes == [(0, State.PENDING), (1, State.FIRING), (10, State.RESOLVED)]
    assert lc.active == {} and lc.history[0].fired_at == T0 + M


def test_pending_cancelled_and_dedup():
    lc = Lifecycle(resolve_after_s=180)
    assert _run(lc, [Level.FIRE, Level.HOLD]) == [(0, State.PENDING), (1, State.CANCELLED)]
    lc = Lifecycle(resolve_after_s=60)
    # repeated FIRE verdicts never create a second alert; a silent key (no signal) counts as CLEAR
    changes = _run(lc, [Level.FIRE] * 4 + [None, None])
    assert changes == [(0, State.PENDING), (1, State.FIRING), (5, State.RESOLVED)]
    # for_s = 0: straight to firing, one change
    lc = Lifecycle(resolve_after_s=60)
    assert _run(lc, [Level.FIRE], for_s=0) == [(0, State.FIRING)]


def test_cascade_end_to_end_recorded_and_notified(store):
    seed_cascade_timeline(store, T0)
    receiver = Receiver()
    dispatcher = Dispatcher([Notifier("webhook", receiver.url + "/hook")])
    evaluator = Evaluator(store, AlertConfig(), dispatcher)
    try:
        log = []
        for minute in range(1, 17):
            for t in evaluator.step(T0 + minute * M):
                log.append((minute, t.alert.rule, t.state.value, t.alert.replica))
        assert dispatcher.flush(10)
    finally:
        dispatcher.stop()
        receiver.close()

    cascades = [entry for entry in log if entry[1] == RULE_CASCADE]
    # ONE cascade: fires at minute 3 (degradation r2 from 1, retries from 2, fleet queue rising
    # 0 -> 4 -> 8 over the 2 minutes before 3). Queues drain at 9; retries (minutes 1-7) are at 2/50 = 4% at
    # 12 (HOLD: between 2.5% and 5%) and 0 at 13 (CLEAR); + 180 s of hysteresis -> resolved at 16.
    assert cascades == [(3, RULE_CASCADE, "firing", "r2"), (16, RULE_CASCADE, "resolved", "r2")]
    assert (2, "replica_degradation", "firing", "r2") in log
    assert (3, "retry_amplification", "firing", "") in log

    changes = q.recent_alerts(store, T0, T0 + 30 * M)
    cascade_rows = changes[changes["rule"] == RULE_CASCADE].sort_values("event_time")
    assert list(cascade_rows["state"]) == ["firing", "resolved"]
    firing = cascade_rows.iloc[0]
    evidence = json.loads(firing["evidence"])
    chain = evidence["figures"]["chain"]
    assert [link["rule"] for link in chain] == ["replica_degradation", "retry_amplification", "queue_growth"]
    assert chain[0]["replica"] == "r2" and chain[0]["started_at"].startswith("2026-11-02T12:01")
    assert chain[0]["figures"]["itl_ratio"] == pytest.approx(3.0)
    assert any("Drain replica r2" in a for a in evidence["figures"]["actions"])
    # fallback cost: 4 replicas x $2.50/GPU-h x (12:03 - 12:01 = 2 min) x retry share over 12:01..12:03
    # (retries 4 of 24 client attempts ending in (12:01, 12:03])
    assert firing["cost_source"] == "fallback_gpu_minutes"
    assert firing["est_cost_usd"] == pytest.approx(4 * 2.5 * 2 / 60 * 4 / 24, abs=1e-4)
    assert "fallback" in firing["description"]

    incidents = q.alerts_in_period(store, T0, T0 + 60 * M)
    row = incidents[incidents["rule"] == RULE_CASCADE].iloc[0]
    assert row["replica"] == "r2" and row["state"] == "resolved"
    assert row["duration_s"] == pytest.approx(13 * 60)
    assert q.active_alerts(store).empty or RULE_CASCADE not in set(q.active_alerts(store)["rule"])

    hook = receiver.bodies("/hook")
    sent = [(a["rule"], a["state"]) for body in hook for a in body["alerts"]]
    assert sent.count((RULE_CASCADE, "firing")) == 1 and sent.count((RULE_CASCADE, "resolved")) == 1
    assert not any(state == "pending" for _, state in sent)


def test_active_alerts_reads_latest_state(store):
    config = AlertConfig()
    evaluator = Evaluator(store, config)
    signal = Signal("queue_growth", "", Level.FIRE, "warning", "queue growing", {"waiting": 9.0})
    lc = evaluator.lifecycle
    transitions = lc.apply([signal], T0, {"queue_growth": 60}, {"queue_growth"})
    transitions += lc.apply([signal], T0 + M, {"queue_growth": 60}, {"queue_growth"})
    evaluator._record(transitions, write=True)
    active = q.active_alerts(store)
    assert list(active["alert_id"]) == [alert_id("queue_growth", "")]
    assert active.iloc[0]["state"] == "firing" and active.iloc[0]["summary"] == "queue growing"
    assert json.loads(active.iloc[0]["evidence"])["figures"] == {"waiting": 9.0}


def test_restart_restores_open_alerts_and_resolves_them(store):
    seed_cascade_timeline(store, T0)
    first = Evaluator(store, AlertConfig())
    for minute in range(1, 7):
        first.step(T0 + minute * M)
    open_before = set(q.active_alerts(store)["rule"])
    assert RULE_CASCADE in open_before
    # a new process: restores the open alerts, never re-fires them, resolves them when clear
    second = Evaluator(store, AlertConfig())
    assert second.restore() == len(open_before)
    changes = []
    for minute in range(7, 20):
        changes += [(t.alert.rule, t.state.value) for t in second.step(T0 + minute * M)]
    assert (RULE_CASCADE, "firing") not in changes and (RULE_CASCADE, "resolved") in changes
    assert q.active_alerts(store).empty or set(q.active_alerts(store)["rule"]) <= {"ingestion_health"}
