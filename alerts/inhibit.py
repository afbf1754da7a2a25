"""Inhibition and grouping: alerts another alert explains are recorded but not notified, as
Alertmanager's inhibit rules do (noise).

- A firing cascade inhibits the alerts it explains: the culprit's replica degradation, retry
  amplification, queue growth and every replica's saturation. Its notification lists them as
  ``members`` (one notification per incident).
- A firing replica-down alert inhibits that replica's degradation, saturation and telemetry alerts
  (a dead replica is slow, full and silent by consequence).
- An SLO burn-rate tier inhibits the tiers of the same SLO with a longer window (the 1 h page says
  what the 6 h page and the 3-day ticket would), and a task-success tier the goodput tiers of its
  window or longer (failed tasks are not good ones either); a firing cascade inhibits them all.

``GROUPED_RULES``: the rules whose notifications wait ``AlertConfig.group_wait_s`` so that a cascade
completing its chain meanwhile absorbs them.
"""

from __future__ import annotations

from typing import Any

from alerts.lifecycle import Lifecycle
from alerts.model import (RULE_CASCADE, RULE_DEGRADATION, RULE_DOWN, RULE_QUEUE, RULE_RETRY, RULE_SATURATION,
                          RULE_SLO, RULE_TELEMETRY, Alert, State)

GROUPED_RULES = (RULE_DEGRADATION, RULE_RETRY, RULE_QUEUE, RULE_SATURATION)


def explains(source: Alert, target: Alert) -> bool:
    """Does firing ``source`` explain ``target``?"""
    if source.rule == RULE_CASCADE:
        return (target.rule in (RULE_RETRY, RULE_QUEUE, RULE_SATURATION, RULE_SLO)
                or (target.rule == RULE_DEGRADATION and target.replica == source.replica))
    if source.rule == RULE_DOWN:
        return target.replica == source.replica and target.rule in (RULE_DEGRADATION, RULE_SATURATION, RULE_TELEMETRY)
    if source.rule == RULE_SLO and target.rule == RULE_SLO:
        s_slo, t_slo = source.labels.get("slo"), target.labels.get("slo")
        s_win, t_win = source.figures.get("long_s") or 0, target.figures.get("long_s") or 0
        if s_slo == t_slo:
            return t_win > s_win
        return s_slo == "task_success" and t_slo == "goodput" and t_win >= s_win
    return False


def apply(lifecycle: Lifecycle) -> list[Alert]:
    """Set ``inhibited_by`` on every active alert some firing alert explains (cascades first), and
    clear it on the others. Returns the firing alerts whose inhibition changed (to be recorded)."""
    sources = sorted((a for a in lifecycle.active.values() if a.state is State.FIRING
                      and a.rule in (RULE_CASCADE, RULE_DOWN, RULE_SLO)), key=lambda a: a.rule != RULE_CASCADE)
    changed = []
    for alert in lifecycle.active.values():
        before = alert.inhibited_by
        alert.inhibited_by = next((s.id for s in sources if s is not alert and explains(s, alert)), "")
        if alert.inhibited_by != before and alert.state is State.FIRING:
            changed.append(alert)
    return changed


def members(lifecycle: Lifecycle, source: Alert) -> list[dict[str, Any]]:
    """The active alerts ``source`` inhibits, for its notification: rule, replica, state, summary."""
    return [{"rule": a.rule, "replica": a.replica, "state": a.state.value, "summary": a.summary}
            for a in lifecycle.active.values() if a.inhibited_by == source.id]
