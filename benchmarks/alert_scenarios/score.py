"""Scoring replayed scenarios against their truth: per-rule precision and recall, culprit accuracy,
time-to-detect, notifications per healthy replica-hour.

An episode is one firing of one alert (rule, key) until it resolves. Against a scenario's truth
(catalog.Expect / Scenario.allow), each episode is:
- a true positive: the first episode of an expected alert (same rule; the expected replica, or a
  fleet-wide alert when none is expected) that fired at or after the expectation's onset; a cascade
  must also name the expected culprit (a cascade re-named to it: its first episode naming it, those
  before it false positives, "wrong culprit");
- neutral: an alert the scenario allows (a true symptom of the situation, after it began);
- a false positive: anything else, including a second episode of an alert already detected (the
  same rule and key firing again: a flapping alert) and a cascade naming the wrong culprit; another
  key of a detected fleet-wide alert (an SLO's other tier or SLI escalating) is neutral.
Recall counts expectations met; an expectation with ``hold_until_s`` is met only if its episode
is still firing then. Time-to-detect = firing time - onset. Notifications are the firing
notifications a person would get (after grouping and inhibition); those of false-positive episodes
count as noise, per hour of replicas without an injected fault.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median

from benchmarks.alert_scenarios.catalog import CASCADE, Scenario
from benchmarks.alert_scenarios.run import TAIL_S, Outcome

BASELINE_RULES = (CASCADE, "replica_degradation")  # re-implemented as they were in baseline.py
NEW_RULES = ("replica_down", "telemetry_health")  # the baseline had none


@dataclass
class Episode:
    rule: str
    key: str
    replica: str
    fired: float
    resolved: float | None
    culprit: str = ""
    verdict: str = ""  # tp | fp | allowed
    why: str = ""


def episodes(o: Outcome, baseline: bool = False) -> list[Episode]:
    """Firing episodes of an outcome, in firing order (``baseline``: the baseline's)."""
    if baseline:
        return [Episode(rule, replica if rule != CASCADE else "", replica, fired, resolved, culprit)
                for rule, replica, fired, resolved, culprit in o.baseline]
    open_: dict[tuple, Episode] = {}
    out: list[Episode] = []
    for c in o.changes:
        k = (c["rule"], c["key"])
        if c["state"] == "firing" and not c["note"] and k not in open_:
            ep = Episode(c["rule"], c["key"], c["replica"], c["t"], None, c.get("culprit") or "")
            open_[k] = ep
            out.append(ep)
        elif c["state"] == "resolved" and k in open_:
            open_.pop(k).resolved = c["t"]
    return out


def _matches(e, ep: Episode) -> bool:
    if ep.rule != e.rule or ep.fired < e.at_s:
        return False
    if e.rule == CASCADE:
        return True
    return ep.replica == e.replica  # "" = a fleet-wide alert, whatever its key (an SLO tier, lag)


@dataclass
class Judged:
    """One scenario's verdicts."""

    scenario: Scenario
    episodes: list[Episode]
    expected: list[dict] = field(default_factory=list)  # per Expect: rule, detected, ttd_s, culprit_ok, held
    notifications: int = 0
    fp_notifications: int = 0
    healthy_replica_hours: float = 0.0


def judge(o: Outcome, baseline: bool = False) -> Judged:
    """Verdicts on ``o``'s episodes (``baseline``: on the baseline's, for the rules it has)."""
    s = o.scenario
    eps = episodes(o, baseline)
    j = Judged(s, eps)
    used: set[int] = set()
    for e in s.expect:
        if baseline and e.rule not in BASELINE_RULES:
            continue
        cands = [i for i, ep in enumerate(eps) if _matches(e, ep)]
        if e.rule == CASCADE:  # a cascade re-named to the culprit: the episodes naming others were wrong
            right = [i for i in cands if eps[i].culprit == e.culprit]
            if right and right[0] != cands[0]:
                for i in cands[:cands.index(right[0])]:
                    eps[i].verdict, eps[i].why = "fp", "wrong culprit (re-named later)"
                    used.add(i)
                cands = cands[cands.index(right[0]):]
        first = cands[0] if cands else None
        row = {"rule": e.rule, "replica": e.replica or e.culprit, "detected": False, "ttd_s": None,
               "culprit_ok": None, "held": None, "named": None}
        if first is not None:
            ep = eps[first]
            row["named"] = ep.culprit or ep.replica
            row["culprit_ok"] = (ep.culprit == e.culprit) if e.rule == CASCADE else None
            row["held"] = None if e.hold_until_s is None else (ep.resolved is None or ep.resolved >= e.hold_until_s)
            ok = row["culprit_ok"] is not False and row["held"] is not False
            row["detected"], row["ttd_s"] = ok, ep.fired - e.at_s
            ep.verdict, ep.why = ("tp", "expected") if ok else ("fp", "wrong culprit" if row["culprit_ok"] is False
                                                                   else "resolved while the fault lasted")
            used.add(first)
            for i in cands[1:]:
                if eps[i].verdict == "":
                    # the same alert again is flapping; another key of a fleet-wide alert (an SLO's
                    # other tier or SLI escalating in the same incident) is a true symptom
                    again = eps[i].key == ep.key
                    eps[i].verdict, eps[i].why = (("fp", "fired again (flapping)") if again
                                                  else ("allowed", "another tier of the same incident"))
                used.add(i)
        j.expected.append(row)
    for i, ep in enumerate(eps):
        if ep.verdict:
            continue
        if s.allows(ep.rule, ep.replica, ep.fired):
            ep.verdict, ep.why = "allowed", "a true symptom"
        else:
            ep.verdict, ep.why = "fp", "not expected"
    by_key: dict[tuple, list[Episode]] = {}
    for ep in eps:
        by_key.setdefault((ep.rule, ep.key), []).append(ep)
    for t, rule, key, _ in o.notifications:
        j.notifications += 1
        owner = [ep for ep in by_key.get((rule, key), []) if ep.fired <= t]
        if owner and owner[-1].verdict == "fp":
            j.fp_notifications += 1
    faulty = s.faulty
    healthy = 0 if "*" in faulty else len([r for r in s.fleet if r.id not in faulty])
    j.healthy_replica_hours = healthy * (s.duration_s + TAIL_S) / 3600.0
    return j


def summarize(judged: list[Judged]) -> dict:
    """Per-rule precision/recall, culprit accuracy, time-to-detect and noise over ``judged``."""
    rules: dict[str, dict] = {}
    for j in judged:
        for ep in j.episodes:
            r = rules.setdefault(ep.rule, {"tp": 0, "fp": 0, "allowed": 0, "expected": 0, "detected": 0, "ttd": []})
            r[ep.verdict] += 1
        for row in j.expected:
            r = rules.setdefault(row["rule"], {"tp": 0, "fp": 0, "allowed": 0, "expected": 0, "detected": 0, "ttd": []})
            r["expected"] += 1
            if row["detected"]:
                r["detected"] += 1
                r["ttd"].append(row["ttd_s"])
    for r in rules.values():
        r["precision"] = r["tp"] / (r["tp"] + r["fp"]) if r["tp"] + r["fp"] else None
        r["recall"] = r["detected"] / r["expected"] if r["expected"] else None
        r["ttd_median_s"] = median(r["ttd"]) if r["ttd"] else None
    cascades = [row for j in judged for row in j.expected if row["rule"] == CASCADE and row["named"] is not None]
    ttd = [row["ttd_s"] for j in judged for row in j.expected if row["detected"]]
    hours = sum(j.healthy_replica_hours for j in judged)
    fp_notes = sum(j.fp_notifications for j in judged)
    healthy = [j for j in judged if not j.scenario.faults and not j.scenario.outage and j.scenario.shape == "flat"
               and j.scenario.policy != "session_affinity"]
    healthy_hours = sum(len(j.scenario.fleet) * (j.scenario.duration_s + TAIL_S) / 3600.0 for j in healthy)
    return {
        "rules": rules,
        "culprit_accuracy": (sum(1 for r in cascades if r["culprit_ok"]) / len(cascades)) if cascades else None,
        "ttd_median_s": median(ttd) if ttd else None,
        "notifications": sum(j.notifications for j in judged),
        "fp_notifications": fp_notes,
        "healthy_replica_hours": hours,
        "noise_per_healthy_replica_hour": fp_notes / hours if hours else None,
        "no_fault_notifications": sum(j.notifications for j in healthy),
        "no_fault_replica_hours": healthy_hours,
    }
