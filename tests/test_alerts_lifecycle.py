"""Alert lifecycle (pending -> firing -> resolved, hysteresis, dedup), the cascade rule end to end on a
hand-made timeline, and the alerts table with its named queries."""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import timedelta

import pytest

from alerts.config import AlertConfig
from alerts.evaluator import Evaluator
from alerts.lifecycle import Lifecycle
from alerts.model import RULE_CASCADE, Alert, Level, Signal, State, alert_id
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


def test_pending_cancelled_dedup_and_no_data():
    lc = Lifecycle(resolve_after_s=180)
    assert _run(lc, [Level.FIRE, Level.HOLD]) == [(0, State.PENDING), (1, State.CANCELLED)]
    # repeated FIRE verdicts never create a second alert; a key the rule no longer reports has no data:
    # the firing alert stays firing (a "no data" change is recorded) and resolves only after
    # no_data_resolve_s (120 s here) without data
    lc = Lifecycle(resolve_after_s=60, no_data_resolve_s=120)
    changes = []
    for minute, level in enumerate([Level.FIRE] * 4 + [None, None, None]):
        signals = [] if level is None else [_sig(level)]
        for t in lc.apply(signals, T0 + minute * M, {"replica_degradation": 60}, {"replica_degradation"}):
            changes.append((minute, t.state, t.note))
    assert changes == [(0, State.PENDING, ""), (1, State.FIRING, ""), (4, State.FIRING, "no_data"),
                       (6, State.RESOLVED, "")]
    assert lc.history[-1].figures["resolved_by"] == "no_data_timeout"
    # data coming back ends the no-data state (recorded), the alert goes on
    lc = Lifecycle(resolve_after_s=60)
    notes = []
    for minute, level in enumerate([Level.FIRE, Level.FIRE, None, Level.FIRE]):
        signals = [] if level is None else [_sig(level)]
        notes += [t.note for t in lc.apply(signals, T0 + minute * M, {"replica_degradation": 60},
                                           {"replica_degradation"})]
    assert notes == ["", "", "no_data", "data_back"] and lc.get("replica_degradation", "r1").no_data_since is None
    # for_s = 0: straight to firing, one change
    lc = Lifecycle(resolve_after_s=60)
    assert _run(lc, [Level.FIRE], for_s=0) == [(0, State.FIRING)]


@contextmanager
def _notifying_evaluator(store):
    """An evaluator whose notifications go to a webhook receiver (``/hook``); yields both, stops both at the end."""
    receiver = Receiver()
    dispatcher = Dispatcher([Notifier("webhook", receiver.url + "/hook")])
    try:
        yield Evaluator(store, AlertConfig(), dispatcher), receiver
    finally:
        dispatcher.stop()
        receiver.close()


def _replay(evaluator, minutes):
    log = []
    for minute in minutes:
        for t in evaluator.step(T0 + minute * M):
            log.append((minute, t.alert.rule, t.alert.key, t.state.value, t.note))
    return log


def test_cascade_end_to_end_recorded_and_notified(store):
    seed_cascade_timeline(store, T0)
    with _notifying_evaluator(store) as (evaluator, receiver):
        log = _replay(evaluator, range(1, 23))
        assert evaluator.dispatcher.flush(10)

    cascades = [(m, state) for m, rule, _, state, _ in log if rule == RULE_CASCADE]
    # ONE cascade: r2's speed steps up in the bucket ending at 12:07 (calls of minute 6), retries (5 of
    # 25 first attempts) in the buckets ending at 12:08 and 12:09, the other replicas' waiting 0 -> 6 ->
    # 12 in the same buckets: the chain is complete at 12:09. Retries last until minute 11: the 5-min
    # retry window is clear from 12:17, + 180 s of hysteresis -> resolved at 12:20.
    assert cascades == [(9, "firing"), (20, "resolved")]
    assert (8, "replica_degradation", "r2", "firing", "") in log
    assert (10, "retry_amplification", "", "firing", "") in log

    changes = q.recent_alerts(store, T0, T0 + 30 * M)
    cascade_rows = changes[changes["rule"] == RULE_CASCADE].sort_values("event_time")
    assert list(cascade_rows["state"]) == ["firing", "resolved"]
    firing = cascade_rows.iloc[0]
    evidence = json.loads(firing["evidence"])
    figures = evidence["figures"]
    chain = figures["chain"]
    assert [(link["step"], link["started_at"][11:16]) for link in chain] == [
        ("trigger", "12:06"), ("sustaining", "12:07"), ("pressure", "12:07")]
    trigger = chain[0]["figures"]
    assert chain[0]["replica"] == "r2" and trigger["evidence"] == "speed"
    assert (trigger["speed_before"], trigger["speed_after"]) == (1.0, 3.0)
    assert figures["culprit"] == "r2" and [c["replica"] for c in figures["candidates"]] == ["r2"]
    assert any("Drain replica r2" in a for a in figures["actions"])
    # fallback cost: 4 replicas x $2.50/GPU-h x (12:06 -> 12:09 = 3 min) x retry share of the client
    # attempts ending in (12:06, 12:09]: 10 retries of 75 + 10 attempts
    assert firing["cost_source"] == "fallback_gpu_minutes"
    assert firing["est_cost_usd"] == pytest.approx(4 * 2.5 * 3 / 60 * 10 / 85, abs=1e-4)

    incidents = q.alerts_in_period(store, T0, T0 + 60 * M)
    row = incidents[incidents["rule"] == RULE_CASCADE].iloc[0]
    assert row["replica"] == "r2" and row["state"] == "resolved"
    assert row["duration_s"] == pytest.approx(11 * 60)

    # one incident, one notification: the members the cascade explains (r2's degradation, retries,
    # queue growth, saturation) wait the 120 s group wait, are inhibited by then, never sent alone
    hook = receiver.bodies("/hook")
    sent = [(a["rule"], a["state"]) for body in hook for a in body["alerts"]]
    assert sent == [(RULE_CASCADE, "firing"), (RULE_CASCADE, "resolved")]
    members = {(m["rule"], m["replica"]) for m in hook[0]["alerts"][0]["evidence"]["members"]}
    assert ("replica_degradation", "r2") in members and ("retry_amplification", "") in members
    inhibited = changes[(changes["rule"] == "retry_amplification") & (changes["state"] == "firing")].iloc[0]
    assert json.loads(inhibited["evidence"])["inhibited_by"] == alert_id(RULE_CASCADE, "")


def test_open_cascade_naming_a_replica_without_evidence_is_resolved_and_refired_on_the_culprit(store):
    """An open cascade whose evidence now points at another replica re-names it. The state an
    older rule left (a cascade opened at 12:06 on r1, a healthy replica, restored after an upgrade), then
    the hand-made timeline: r2 slows from minute 6. The wrong cascade is kept while nothing else is
    known (its clear countdown runs: retries and queues are still clear at minutes 7-8); at minute 9 the
    retries and queues are up and the evidence points at r2 (speed 1.0 -> 3.0 from 12:06, the other
    replicas' queues after it): r1's cascade resolves and r2's fires, in the table and the notifications."""
    seed_cascade_timeline(store, T0)
    opened = T0 + 6 * M
    chain = [{"step": "trigger", "rule": "", "replica": "r1", "started_at": opened.isoformat(),
              "summary": "replica r1 timed out or lost 60% of its attempts (was 0%)", "figures": {}}]
    with _notifying_evaluator(store) as (evaluator, receiver):
        evaluator.lifecycle.active[(RULE_CASCADE, "")] = Alert(
            RULE_CASCADE, "", "critical", "r1", State.FIRING, started_at=opened, fired_at=opened,
            figures={"culprit": "r1", "chain": chain, "candidates": [], "actions": []}, notified=True)
        log = _replay(evaluator, range(7, 23))
        assert evaluator.dispatcher.flush(10)
    cascades = [(m, state, note) for m, rule, _, state, note in log if rule == RULE_CASCADE]
    assert cascades == [(9, "resolved", ""), (9, "firing", ""), (20, "resolved", "")]
    rows = q.recent_alerts(store, T0, T0 + 30 * M)
    rows = rows[rows["rule"] == RULE_CASCADE]
    by_change = {(str(r["event_time"])[11:16], r["state"], r["replica"]): r for _, r in rows.iterrows()}
    assert sorted(by_change) == [("12:09", "firing", "r2"), ("12:09", "resolved", "r1"), ("12:20", "resolved", "r2")]
    resolved = json.loads(by_change[("12:09", "resolved", "r1")]["evidence"])["figures"]
    fired = by_change[("12:09", "firing", "r2")]
    figures = json.loads(fired["evidence"])["figures"]
    assert (resolved["resolved_by"], resolved["renamed_to"]) == ("renamed", "r2")
    assert (figures["culprit"], figures["renamed_from"]) == ("r2", "r1")
    assert [(link["step"], link["started_at"][11:16]) for link in figures["chain"]] == [
        ("trigger", "12:06"), ("sustaining", "12:07"), ("pressure", "12:07")]
    assert fired["description"].startswith("Re-named from replica r1, whose evidence no longer holds")
    # the operator is told at once: r1's cascade resolved, r2's firing (one batch), later r2's resolved
    sent = [[(a["rule"], a["replica"], a["state"]) for a in body["alerts"]] for body in receiver.bodies("/hook")]
    assert sent == [[(RULE_CASCADE, "r1", "resolved"), (RULE_CASCADE, "r2", "firing")],
                    [(RULE_CASCADE, "r2", "resolved")]]


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


def test_once_per_minute_gives_the_services_lifecycle_and_restarts_keep_countdowns(store):
    """Cron-style evaluation (a new evaluator per minute, as ``infercost alerts --once`` runs: restore
    the saved state, step, save) writes the same history as one service stepping through the same
    minutes; a restart in the middle of a clear countdown resolves on time, not 3 minutes late."""
    seed_cascade_timeline(store, T0)
    service = _replay(Evaluator(store, AlertConfig(evaluator_id="service")), range(1, 23))
    once = []
    for minute in range(1, 23):
        evaluator = Evaluator(store, AlertConfig(evaluator_id="cron"))
        evaluator.restore()
        once += _replay(evaluator, [minute])
    assert once == service and (20, RULE_CASCADE, "", "resolved", "") in once
    saved = q.load_state(store, "cron")
    assert saved[0] == T0 + 22 * M and saved[1]["active"] == []
    # the alerts table holds both histories apart, one row per change
    rows = q.recent_alerts(store, T0, T0 + 30 * M)
    assert len(rows) == 2 * len([c for c in service])


def test_restart_without_saved_state_restores_open_alerts_from_the_table(store):
    seed_cascade_timeline(store, T0)
    first = Evaluator(store, AlertConfig())
    _replay(first, range(1, 11))
    store.command("TRUNCATE TABLE alerts_state", tag="test.truncate")  # an older version saved no state
    open_before = q.active_alerts(store)
    assert RULE_CASCADE in set(open_before["rule"])
    second = Evaluator(store, AlertConfig())
    assert second.restore() == len(open_before)
    changes = [(rule, state) for _, rule, _, state, _ in _replay(second, range(11, 25))]
    assert (RULE_CASCADE, "firing") not in changes and (RULE_CASCADE, "resolved") in changes
