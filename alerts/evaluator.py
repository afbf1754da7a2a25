"""The alert evaluator: run every rule at an explicit time ``now``, advance the lifecycle, record
every change in the ``alerts`` table and hand firing/resolved alerts to the notifiers.

``Evaluator.step(now)`` is the one entry point, for live loops (``now`` = wall clock, see
alerts/service.py) and for virtual-time replays (``for t in minutes: evaluator.step(t)`` over a
store already holding the simulated telemetry). :func:`evaluate` is the stateless variant: the
rules' verdicts at ``now`` without lifecycle, table or notifiers.

Errors: a rule whose query fails with a StoreQueryError is skipped for that step (logged, counted);
a StoreUnavailable raises the critical ``ingestion_health/store_unavailable`` alert. Writing the
table or notifying never raises out of ``step``.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from alerts import cascade as cascade_rule
from alerts import rules, rules_budget, rules_health
from alerts.config import AlertConfig
from alerts.lifecycle import Lifecycle
from alerts.model import (RULE_BUDGET, RULE_CASCADE, RULE_DEGRADATION, RULE_INGESTION, RULE_QUEUE, RULE_RETRY,
                          RULE_SATURATION, RULE_SLO, RULE_SPEND_ANOMALY, Alert, Level, Signal, State, Transition)
from alerts.notifiers import Dispatcher, Notification
from schema.queries import alerts as q
from schema.store import StoreError, StoreUnavailable

log = logging.getLogger(__name__)


def _aware(now: datetime) -> datetime:
    if now.tzinfo is None:
        return now.replace(tzinfo=timezone.utc)
    return now.astimezone(timezone.utc)


def _py(value):
    """A pandas cell as a plain Python value (NaT/NaN -> None, Timestamp -> datetime)."""
    if value is None:
        return None
    if hasattr(value, "to_pydatetime"):
        return None if str(value) == "NaT" else value.to_pydatetime()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def evaluate(store, now: datetime, config: AlertConfig | None = None) -> dict[str, list[Signal]]:
    """Every rule's verdicts at ``now`` (rules 1-4, 6, 7; the cascade needs history: use Evaluator).

    Returns ``{rule: [Signal, ...]}``. Raises StoreError.
    """
    config = config or AlertConfig()
    now = _aware(now)
    return {
        RULE_DEGRADATION: rules.degradation_signals(store, now, config),
        RULE_RETRY: rules.retry_signals(store, now, config),
        RULE_QUEUE: rules.queue_signals(store, now, config),
        RULE_SATURATION: rules.saturation_signals(store, now, config),
        RULE_SLO: rules_health.slo_signals(store, now, config),
        RULE_INGESTION: rules_health.ingestion_signals(store, now, config, None, None)[0],
        RULE_BUDGET: rules_budget.budget_signals(store, now, config),
        RULE_SPEND_ANOMALY: rules_budget.spend_anomaly_signals(store, now, config),
    }


@dataclass
class EvaluatorStats:
    """Counters of the evaluator (mapped to Prometheus by the service)."""

    steps: int = 0
    rule_errors: int = 0
    write_errors: int = 0
    transitions: int = 0
    last_step_at: datetime | None = None
    errors_by_rule: dict[str, int] = field(default_factory=dict)


class Evaluator:
    """Stateful evaluation: lifecycle of every alert, frozen retry baseline, cascade correlation.

    Args:
        store: the store (schema.store.Store).
        config: thresholds and timings (AlertConfig).
        dispatcher: optional notifiers' Dispatcher; firing/resolved changes are submitted to it.
        receiver_stats: optional callable returning the receiver's stats (duck-typed: rejected,
            spooled_bytes, store_available), for the ingestion-health rule.
        record: write every change into the ``alerts`` table (True).
    """

    def __init__(self, store, config: AlertConfig | None = None, dispatcher: Dispatcher | None = None,
                 receiver_stats: Callable[[], Any] | None = None, record: bool = True):
        self.store = store
        self.config = (config or AlertConfig()).validate()
        self.dispatcher = dispatcher
        self.receiver_stats = receiver_stats
        self.record = record
        self.lifecycle = Lifecycle(self.config.resolve_after_s)
        self.stats = EvaluatorStats()
        self.retry_baseline: dict[str, float | None] | None = None
        self._rejected_before: int | None = None
        c = self.config
        self.for_s = {RULE_DEGRADATION: c.degradation.for_s, RULE_RETRY: c.retry.for_s, RULE_QUEUE: c.queue.for_s,
                      RULE_SATURATION: c.saturation.for_s, RULE_CASCADE: c.cascade.for_s, RULE_SLO: c.slo.for_s,
                      RULE_INGESTION: c.ingestion.for_s}

    def restore(self) -> int:
        """Resume the alerts left pending/firing in the ``alerts`` table (e.g. before a restart), so they
        resolve normally instead of staying open forever or firing twice. Returns how many were
        restored; a store error restores nothing (logged)."""
        try:
            active = q.active_alerts(self.store)
        except StoreError as exc:
            log.warning("could not restore active alerts: %s", exc)
            return 0
        for row in active.to_dict("records"):
            try:
                evidence = json.loads(row["evidence"] or "{}")
            except ValueError:
                evidence = {}
            alert = Alert(rule=row["rule"], key=row["alert_key"], severity=row["severity"], replica=row["replica"],
                          state=State(row["state"]), started_at=_aware(_py(row["started_at"])),
                          fired_at=_aware(_py(row["fired_at"])) if _py(row["fired_at"]) else None,
                          summary=row["summary"], description=row["description"],
                          figures=evidence.get("figures") or {}, onset=evidence.get("onset") or {},
                          labels=dict(row["labels"] or {}),
                          est_cost_usd=None if _py(row["est_cost_usd"]) is None else float(row["est_cost_usd"]),
                          cost_source=row["cost_source"] or "")
            self.lifecycle.active[(alert.rule, alert.key)] = alert
            if alert.rule == RULE_RETRY and alert.figures.get("baselines") is not None:
                self.retry_baseline = dict(alert.figures["baselines"])
        return len(active)

    # -- one evaluation -------------------------------------------------------------------------

    def step(self, now: datetime | None = None) -> list[Transition]:
        """Evaluate every rule at ``now`` (default: wall clock, UTC) and apply the lifecycle.

        Returns the state changes of this step (also written to the table and notified).
        """
        now = _aware(now or datetime.now(timezone.utc))
        self.stats.steps += 1
        self.stats.last_step_at = now
        signals: list[Signal] = []
        evaluated: set[str] = set()
        levels: dict[str, Level] = {}
        store_error: str | None = None

        def run(rule: str, fn):
            nonlocal store_error
            if store_error is not None:
                return
            try:
                found = fn()
            except StoreUnavailable as exc:
                store_error = str(exc)
                return
            except StoreError as exc:
                self.stats.rule_errors += 1
                self.stats.errors_by_rule[rule] = self.stats.errors_by_rule.get(rule, 0) + 1
                log.warning("alert rule %s failed at %s: %s", rule, now.isoformat(), exc)
                return
            signals.extend(found)
            evaluated.add(rule)
            if rule in (RULE_RETRY, RULE_QUEUE) and found:
                levels[rule] = found[0].level

        c = self.config
        run(RULE_DEGRADATION, lambda: rules.degradation_signals(self.store, now, c))
        run(RULE_RETRY, lambda: rules.retry_signals(self.store, now, c, self.retry_baseline))
        run(RULE_QUEUE, lambda: rules.queue_signals(self.store, now, c))
        run(RULE_SATURATION, lambda: rules.saturation_signals(self.store, now, c))
        run(RULE_SLO, lambda: rules_health.slo_signals(self.store, now, c))
        run(RULE_BUDGET, lambda: rules_budget.budget_signals(self.store, now, c))
        run(RULE_SPEND_ANOMALY, lambda: rules_budget.spend_anomaly_signals(self.store, now, c))

        def ingestion():
            found, self._rejected_before = rules_health.ingestion_signals(
                self.store, now, c, self.receiver_stats, self._rejected_before)
            return found

        run(RULE_INGESTION, ingestion)
        if store_error is not None:
            signals = [s for s in signals if s.rule == RULE_INGESTION]
            signals.append(rules_health.store_signal(False, store_error))
            evaluated = {RULE_INGESTION}
        transitions = self.lifecycle.apply(signals, now, self.for_s, evaluated)
        self._freeze_retry_baseline(signals)
        if store_error is None and {RULE_RETRY, RULE_QUEUE} <= evaluated:
            cascade = cascade_rule.cascade_signal(self.lifecycle, now, c, levels)
            cascade_transitions = self.lifecycle.apply([cascade], now, self.for_s, {RULE_CASCADE})
            for t in cascade_transitions:
                if t.state in (State.FIRING, State.RESOLVED):
                    self._cost(t, now)
            transitions += cascade_transitions
        self.stats.transitions += len(transitions)
        self._record(transitions, write=store_error is None)
        self._notify(transitions, now)
        return transitions

    # -- helpers --------------------------------------------------------------------------------

    def _freeze_retry_baseline(self, signals: list[Signal]) -> None:
        # The baseline is frozen while a retry alert is active so the incident is not its own baseline.
        active = self.lifecycle.get(RULE_RETRY, "")
        if active is None:
            self.retry_baseline = None
        elif self.retry_baseline is None:
            for s in signals:
                if s.rule == RULE_RETRY:
                    self.retry_baseline = dict(s.figures.get("baselines", {}))

    def _cost(self, transition: Transition, now: datetime) -> None:
        alert = transition.alert
        # The incident began with its trigger (the culprit's degradation), before the chain completed.
        chain = alert.figures.get("chain") or [{}]
        start = datetime.fromisoformat(chain[0]["started_at"]) if chain[0].get("started_at") else alert.started_at
        usd, source, details = cascade_rule.estimate_cost(self.store, min(start, alert.started_at), now, self.config)
        details["incident_start"] = min(start, alert.started_at).isoformat()
        if source == "fallback_gpu_minutes":
            note = (f" Estimated waste ${usd:,.2f} (fallback estimate: {details['replicas']} replicas x "
                    f"${details['gpu_hour_usd']}/GPU-hour x {details['hours'] * 60:.0f} min x retry share "
                    f"{details['retry_share']:.1%}; the cost engine's waste breakdown was not available).")
        elif usd is not None:
            note = f" Estimated waste ${usd:,.2f} (the cost engine's waste breakdown over the incident)."
        else:
            note = " Cost estimate unavailable."
        live = self.lifecycle.get(RULE_CASCADE, "")
        for target in (alert, live):
            if target is None:
                continue
            target.est_cost_usd, target.cost_source = usd, source
            target.figures["cost"] = details
            target.description = target.description.split(" Estimated waste")[0].split(" Cost estimate")[0] + note

    def _change(self, t: Transition) -> q.AlertChange:
        a = t.alert
        evidence = {"figures": a.figures, "onset": a.onset}
        return q.AlertChange(
            event_time=t.at, alert_id=a.id, rule=a.rule, alert_key=a.key, severity=a.severity, replica=a.replica,
            state=t.state.value, started_at=a.started_at, fired_at=a.fired_at, resolved_at=a.resolved_at,
            summary=a.summary, description=a.description, evidence=evidence, est_cost_usd=a.est_cost_usd,
            cost_source=a.cost_source, labels=a.labels, evaluator=self.config.evaluator_id)

    def _record(self, transitions: list[Transition], write: bool) -> None:
        if not (self.record and write and transitions):
            return
        try:
            q.insert_alert_changes(self.store, [self._change(t) for t in transitions])
        except (StoreError, ValueError) as exc:
            self.stats.write_errors += 1
            log.warning("could not record %d alert change(s): %s", len(transitions), exc)

    def notification(self, alert: Alert, state: State, at: datetime) -> Notification:
        """The notifier view of ``alert`` in ``state`` at ``at``."""
        evidence = dict(alert.figures)
        evidence.setdefault("onset", alert.onset)
        base = self.config.external_url
        return Notification(
            alert_id=alert.id, rule=alert.rule, key=alert.key, severity=alert.severity, replica=alert.replica,
            state=state.value, at=at, started_at=alert.started_at, fired_at=alert.fired_at,
            resolved_at=alert.resolved_at, summary=alert.summary, description=alert.description, evidence=evidence,
            labels=dict(alert.labels), est_cost_usd=alert.est_cost_usd, cost_source=alert.cost_source,
            generator_url=f"{base}{'&' if '?' in base else '?'}alert_id={alert.id}")

    def _notify(self, transitions: list[Transition], now: datetime) -> None:
        if self.dispatcher is None:
            return
        batch = [self.notification(t.alert, t.state, t.at) for t in transitions
                 if t.state in (State.FIRING, State.RESOLVED)]
        notified = {n.alert_id for n in batch}
        if batch:
            self.dispatcher.submit(batch)
            for n in batch:
                live = next((a for a in self.lifecycle.active.values() if a.id == n.alert_id), None)
                if live is not None:
                    live.last_sent = now
        # Alertmanager forgets alerts that are not re-sent: re-send firing ones every resend_s.
        resend = []
        for alert in self.lifecycle.active.values():
            if alert.state is State.FIRING and alert.id not in notified:
                if alert.last_sent is None or now - alert.last_sent >= timedelta(seconds=self.config.resend_s):
                    resend.append(self.notification(alert, State.FIRING, now))
                    alert.last_sent = now
        if resend:
            self.dispatcher.submit(resend, resend_only=True)
