"""Alert lifecycle: pending -> firing -> resolved, with hysteresis and deduplication.

One :class:`Alert` per (rule, key) is active at a time (dedup: repeated FIRE verdicts update its
evidence, they do not create alerts). A FIRE verdict starts a pending alert; it fires once the
trigger held for the rule's ``for_s`` (Prometheus' ``for``). A pending alert that sees HOLD or
CLEAR is cancelled. A firing alert stays firing on FIRE and HOLD (the band between the trigger and
clear thresholds) and resolves only after CLEAR verdicts for ``resolve_after_s`` in a row.
Missing data is not all-clear (issue 15): a firing alert whose rule says ``no_data`` about it, or
says nothing about it at all, stays firing in a "no data" state with its last evidence (a
``no_data`` transition records it; ``data_back`` when data returns) and resolves only after
``no_data_resolve_s`` without data; a pending alert without data is cancelled.
Every change is returned as a :class:`Transition` (the evaluator writes and notifies them).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from alerts.model import Alert, Level, Signal, State, Transition


class Lifecycle:
    """The state of every alert of one evaluator. Not thread-safe: one evaluator owns it."""

    def __init__(self, resolve_after_s: float, history_s: float = 3 * 3600, no_data_resolve_s: float = 1800):
        self.resolve_after = timedelta(seconds=resolve_after_s)
        self.no_data_resolve = timedelta(seconds=no_data_resolve_s)
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
        have no data (see the module doc). Returns the transitions in order.
        """
        transitions: list[Transition] = []
        seen = set()
        for signal in signals:
            seen.add((signal.rule, signal.key))
            transitions += self._advance(signal, now, for_s.get(signal.rule, 0))
        for (rule, key), alert in list(self.active.items()):
            if rule in evaluated_rules and (rule, key) not in seen:
                silent = Signal(rule, key, Level.HOLD, alert.severity, alert.summary, alert.figures,
                                replica=alert.replica, description=alert.description, labels=alert.labels, no_data=True)
                transitions += self._advance(silent, now, for_s.get(rule, 0))
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
        if signal.no_data:
            return self._no_data(key, alert, now)
        if alert.no_data_since is not None:  # data is back
            alert.no_data_since = None
            alert.figures.pop("data_state", None)
            out.append(Transition(now, _copy(alert), alert.state, "data_back"))
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

    def resolve(self, rule: str, key: str, now: datetime, figures: dict | None = None) -> list[Transition]:
        """Resolve the active alert of (``rule``, ``key``) now, whatever its clear countdown, its figures
        updated with ``figures`` (why: e.g. a cascade re-named to another culprit resolves the one that
        named the old culprit). Returns its transition ([] when none is active)."""
        alert = self.active.get((rule, key))
        if alert is None:
            return []
        alert.figures.update(figures or {})
        if alert.state is State.PENDING:
            alert.state = State.CANCELLED
        else:
            alert.state = State.RESOLVED
        alert.resolved_at = now
        self._close((rule, key), alert)
        return [_snapshot(now, alert)]

    def _no_data(self, key, alert: Alert, now: datetime) -> list[Transition]:
        if alert.state is State.PENDING:
            alert.state = State.CANCELLED
            alert.resolved_at = now
            self._close(key, alert)
            return [_snapshot(now, alert)]
        alert.clear_since = None
        if alert.no_data_since is None:
            alert.no_data_since = now
            alert.figures["data_state"] = "no_data"
            return [Transition(now, _copy(alert), alert.state, "no_data")]
        if now - alert.no_data_since >= self.no_data_resolve:
            alert.state = State.RESOLVED
            alert.resolved_at = now
            alert.figures["resolved_by"] = "no_data_timeout"
            self._close(key, alert)
            return [_snapshot(now, alert)]
        return []

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


def _copy(alert: Alert) -> Alert:
    return dataclasses.replace(alert, figures=dict(alert.figures), labels=dict(alert.labels), onset=dict(alert.onset))


def _snapshot(now: datetime, alert: Alert) -> Transition:
    return Transition(now, _copy(alert), alert.state)
