"""The cascade rule on the emulator's virtual-time fleet: healthy, a 3x-slowed replica with retrying
clients, and a pure load spike (issue 7). Simulated telemetry goes through the collectors' in-process
ingest into a fresh store; the evaluator replays it minute by minute. The ≥10-scenario precision /
recall run is ``benchmarks/bench_alerts.py`` (not run here: it takes minutes)."""

from __future__ import annotations

import json

import pytest

from alerts.model import RULE_CASCADE, RULE_QUEUE, RULE_RETRY, RULE_SATURATION
from alerts.evaluator import Evaluator
from benchmarks.bench_alerts import START, Scenario, load, replay, scenario_config
from schema.queries import alerts as q

pytestmark = pytest.mark.slow


def _firing(changes):
    return [c for c in changes if c[2] == "firing"]


def test_healthy_fleet_for_30_minutes_raises_no_alert(store):
    s = Scenario("healthy", seed=3, rate=3.0, duration_s=1800)
    summary = load(store, s)
    assert summary.tasks["success"] > 4000 and summary.client_retries == 0
    changes = replay(store, s, until_s=1800)
    assert _firing(changes) == []
    assert q.active_alerts(store).empty


def test_slowed_replica_raises_one_cascade_naming_it_and_resolves(store):
    s = Scenario("cascade", seed=11, rate=3.0, duration_s=1920, slow_replica="r2", slowdown=3.0,
                 fault_at_s=600, fault_until_s=1200)
    summary = load(store, s)
    assert summary.client_retries > 100  # the slowed replica made clients time out and retry
    changes = replay(store, s, until_s=1920)

    cascades = [c for c in changes if c[1] == RULE_CASCADE]
    assert [(c[2], c[3]) for c in cascades] == [("firing", "r2"), ("resolved", "r2")]
    fired, resolved = cascades[0][0], cascades[1][0]
    retry_onset = min(c[0] for c in changes if c[1] == RULE_RETRY)
    assert 10 <= fired and fired - retry_onset <= 2  # within 2 min of the retry amplification onset
    # resolves only after the fault ended (minute 20) and once retries and queues are back
    retry_resolved = max(c[0] for c in changes if c[1] == RULE_RETRY and c[2] == "resolved")
    queue_resolved = [c[0] for c in changes if c[1] == RULE_QUEUE and c[2] == "resolved"]
    assert resolved >= 20 and resolved >= retry_resolved and all(resolved >= m for m in queue_resolved)

    rows = q.recent_alerts(store, START, START.replace(hour=13))
    firing = rows[(rows["rule"] == RULE_CASCADE) & (rows["state"] == "firing")].iloc[0]
    figures = json.loads(firing["evidence"])["figures"]
    assert figures["culprit"] == "r2" and figures["chain"][0]["replica"] == "r2"
    onset = figures["chain"][0]["figures"]  # latency 1.5x the others' median, or an error-rate jump
    assert onset["ratio"] >= 1.5 or onset["error_rate"] >= 0.05
    assert {link["rule"] for link in figures["chain"]} >= {"replica_degradation", "retry_amplification"}
    assert len(figures["actions"]) == 3 and firing["est_cost_usd"] > 0
    incidents = q.alerts_in_period(store, START, START.replace(hour=13))
    cascade = incidents[incidents["rule"] == RULE_CASCADE].iloc[0]
    assert cascade["duration_s"] == pytest.approx((resolved - fired) * 60)


def test_pure_load_spike_raises_saturation_and_queue_but_no_cascade(store):
    s = Scenario("spike", seed=23, rate=3.0, duration_s=1500, spike=2.0, spike_at_s=600, spike_until_s=900)
    load(store, s)
    changes = replay(store, s, until_s=1500)
    rules = {c[1] for c in _firing(changes)}
    assert RULE_SATURATION in rules and RULE_QUEUE in rules
    assert RULE_CASCADE not in {c[1] for c in changes}


def test_metastable_cascade_stays_firing_after_the_culprit_recovers(store):
    # Near capacity, with 6 s client timeouts and 5 attempts: r2 slowed 3x in minutes 5-10 tips the
    # fleet into a state the retries sustain after r2 is healthy again (a metastable failure).
    s = Scenario("metastable", seed=5, rate=4.6, duration_s=1200, slow_replica="r2", slowdown=3.0,
                 fault_at_s=300, fault_until_s=600, timeout_s=6.0, max_attempts=5)
    summary = load(store, s)
    assert summary.tasks["failure"] > summary.tasks["success"]  # the fleet stayed failed
    evaluator = Evaluator(store, scenario_config())
    changes = replay(store, s, until_s=1200, evaluator=evaluator)
    cascades = [c for c in changes if c[1] == RULE_CASCADE]
    assert [(c[2], c[3]) for c in cascades] == [("firing", "r2")]  # never resolved
    culprit_resolved = [c[0] for c in changes if c[1] == "replica_degradation" and c[3] == "r2" and c[2] == "resolved"]
    assert culprit_resolved and 10 < culprit_resolved[0] < 20  # r2 recovered ...
    alert = evaluator.lifecycle.get(RULE_CASCADE, "")
    assert alert.state.value == "firing" and alert.figures["culprit_status"] == "recovered"  # ... the cascade did not
    assert alert.figures["retry_level"] != "clear"
