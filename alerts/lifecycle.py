"""Alert lifecycle: pending -> firing -> resolved, with hysteresis and deduplication.

One :class:`Alert` per (rule, key) is active at a time (dedup: repeated FIRE verdicts update its
evidence, they do not create alerts). A FIRE verdict starts a pending alert; it fires once the
trigger held for the rule's ``for_s`` (Prometheus' ``for``). A pending alert that sees HOLD or
CLEAR is cancelled. A firing alert stays firing on FIRE and HOLD (the band between the trigger and
clear thresholds) and resolves only after CLEAR verdicts for ``resolve_after_s`` in a row.
Every change is returned as a :class:`Transition` (the evaluator writes and notifies them).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from alerts.model import Alert, Level, Signal, State, Transition


class Lifecycle:
    """The state of every alert of one evaluator. Not thread-safe: one evaluator owns it."""

    def __init__(self, resolve_after_s: float, history_s: float = 3 * 3600):
        self.resolve_after = timedelta(seconds=resolve_after_s)
        self.history_window = timedelta(seconds=history_s)
        self.active: dict[tuple[str, str], Alert] = {}
        self.history: list[Alert] = []  # closed alerts (resolved or cancelled), newest last

    def get(self, rule: str, key: str = "") -> Alert | None:
        return self.active.get((rule, key))

    def firing(self, rule: str) -> list[Alert]:
        return [a for (r, _), a in self.active.items() if r == rule and a.state is State.FIRING]

    def episodes(self, rule: str, since: datetime) -> list[Alert]:
        """Alerts of ``rule`` that fired and were active at or after ``since`` (active ones included)."""
        found = [a for a in self.history if a.rule == rule and a.fired_at is not None
                 and (a.resolved_at is None or a.resolved_at >= since)]
        found += [a for (r, _), a in self.active.items() if r == rule and a.state is State.FIRING]
        return found

    def apply(self, signals: list[Signal], now: datetime, for_s: dict[str, float],
              evaluated_rules: set[str]) -> list[Transition]:
        """Advance every alert of ``evaluated_rules`` with this evaluation's ``signals``.

        ``for_s``: per rule, how long FIRE must hold before firing (0 = fire at once). Active alerts
        of an evaluated rule that got no signal this time (e.g. a replica that stopped reporting)
        are treated as CLEAR. Returns the transitions in order.
        """
        transitions: list[Transition] = []
        seen = set()
        for signal in signals:
            seen.add((signal.rule, signal.key))
            transitions += self._advance(signal, now, for_s.get(signal.rule, 0))
        for (rule, key), alert in list(self.active.items()):
            if rule in evaluated_rules and (rule, key) not in seen:
                silent = Signal(rule, key, Level.CLEAR, alert.severity, alert.summary, alert.figures,
                                replica=alert.replica, description=alert.description, labels=alert.labels)
                transitions += self._advance(silent, now, for_s.get(rule, 0), update=False)
        cutoff = now - self.history_window
        self.history = [a for a in self.history if (a.resolved_at or a.started_at) >= cutoff]
        return transitions

    def _advance(self, signal: Signal, now: datetime, for_s: float, update: bool = True) -> list[Transition]:
        key = (signal.rule, signal.key)
        alert = self.active.get(key)
        out: list[Transition] = []
        if alert is None:
            if signal.level is not Level.FIRE:
                return out
            alert = Alert(signal.rule, signal.key, signal.severity, signal.replica, State.PENDING, started_at=now)
            _update(alert, signal)
            alert.onset = dict(signal.figures)
            self.active[key] = alert
            if for_s <= 0:  # straight to firing: one change, so the table never holds two states at one instant
                out.append(self._fire(alert, now))
            else:
                out.append(_snapshot(now, alert))
            return out
        if update and not (signal.level is Level.CLEAR and alert.state is State.FIRING):
            _update(alert, signal)
        elif update:
            # Clearing: keep the summary that justified firing; the latest figures go beside it.
            alert.figures["latest"] = dict(signal.figures)
        if alert.state is State.PENDING:
            if signal.level is Level.FIRE:
                if (now - alert.started_at).total_seconds() >= for_s:
                    out.append(self._fire(alert, now))
            else:
                alert.state = State.CANCELLED
                alert.resolved_at = now
                self._close(key, alert)
                out.append(_snapshot(now, alert))
            return out
        # firing
        if signal.level is Level.CLEAR:
            if alert.clear_since is None:
                alert.clear_since = now
            if now - alert.clear_since >= self.resolve_after:
                alert.state = State.RESOLVED
                alert.resolved_at = now
                self._close(key, alert)
                out.append(_snapshot(now, alert))
        else:
            alert.clear_since = None
        return out

    def _fire(self, alert: Alert, now: datetime) -> Transition:
        alert.state = State.FIRING
        alert.fired_at = now
        return _snapshot(now, alert)

    def _close(self, key, alert: Alert) -> None:
        del self.active[key]
        self.history.append(alert)


def _update(alert: Alert, signal: Signal) -> None:
    alert.summary = signal.summary
    alert.description = signal.description
    alert.figures = dict(signal.figures)
    alert.severity = signal.severity
    if signal.replica:
        alert.replica = signal.replica
    alert.labels = dict(signal.labels)


def _snapshot(now: datetime, alert: Alert) -> Transition:
    copy = dataclasses.replace(alert, figures=dict(alert.figures), labels=dict(alert.labels), onset=dict(alert.onset))
    return Transition(now, copy, alert.state)
