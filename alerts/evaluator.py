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

import dataclasses
import json
import logging
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from alerts import cascade as cascade_rule
from alerts import inhibit, rules, rules_budget, rules_health, rules_replica, series
from alerts import state as alert_state
from alerts.config import AlertConfig
from alerts.lifecycle import Lifecycle
from alerts.model import (RULE_BUDGET, RULE_CASCADE, RULE_DEGRADATION, RULE_DOWN, RULE_INGESTION, RULE_QUEUE, RULE_RETRY,
                          RULE_SATURATION, RULE_SLO, RULE_SPEND_ANOMALY, RULE_TELEMETRY,
                          Alert, Level, Signal, State, Transition)
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


def _rule_signals(store, now: datetime, config: AlertConfig, fs, active_degradation=None) -> dict[str, Callable]:
    """The rules' verdict functions at ``now`` (each raises StoreError); the series-based ones use ``fs``."""
    c = config
    return {
        RULE_DEGRADATION: lambda: rules_replica.degradation_from_series(fs(), c.degradation, active_degradation),
        RULE_DOWN: lambda: rules_replica.down_from_series(fs(), c.down),
        RULE_TELEMETRY: lambda: rules_replica.telemetry_from_series(fs(), c.telemetry),
        RULE_QUEUE: lambda: [rules.queue_from_series(fs(), c.queue)],
        RULE_SATURATION: lambda: rules.saturation_from_series(fs(), c.saturation),
        RULE_SLO: lambda: rules_health.slo_signals(store, now, c),
        RULE_BUDGET: lambda: rules_budget.budget_signals(store, now, c),
        RULE_SPEND_ANOMALY: lambda: rules_budget.spend_anomaly_signals(store, now, c),
    }


def _series_loader(store, now: datetime, config: AlertConfig, frozen: dict | None = None):
    cache = []

    def get():
        if not cache:
            s = config.series
            cache.append(series.load(store, now, s.bucket_s, s.buckets, config.lookback_s, s.min_samples,
                                     s.min_same_type_peers, frozen))
        return cache[0]
    return get


def evaluate(store, now: datetime, config: AlertConfig | None = None) -> dict[str, list[Signal]]:
    """Every rule's verdicts at ``now`` (all but the cascade, which needs history: use Evaluator).

    Returns ``{rule: [Signal, ...]}``. Raises StoreError.
    """
    config = config or AlertConfig()
    now = _aware(now)
    fns = _rule_signals(store, now, config, _series_loader(store, now, config))
    out = {rule: fn() for rule, fn in fns.items()}
    out[RULE_RETRY] = rules.retry_signals(store, now, config)
    out[RULE_INGESTION] = rules_health.ingestion_signals(store, now, config, None, None)[0]
    return out


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
    """Stateful evaluation: lifecycle of every alert, frozen baselines, cascade correlation,
    inhibition and notification grouping, and the saved state that lets evaluation resume.

    Args:
        store: the store (schema.store.Store).
        config: thresholds and timings (AlertConfig).
        dispatcher: optional notifiers' Dispatcher; firing/resolved changes are submitted to it.
        receiver_stats: optional callable returning the receiver's stats (duck-typed: rejected,
            spooled_bytes, store_available), for the ingestion-health rule.
        record: write every change into the ``alerts`` table and the state into ``alerts_state``
            (True); False evaluates without writing anything (a dry run).
    """

    def __init__(self, store, config: AlertConfig | None = None, dispatcher: Dispatcher | None = None,
                 receiver_stats: Callable[[], Any] | None = None, record: bool = True):
        self.store = store
        self.config = (config or AlertConfig()).validate()
        self.dispatcher = dispatcher
        self.receiver_stats = receiver_stats
        self.record = record
        self.lifecycle = Lifecycle(self.config.resolve_after_s, no_data_resolve_s=self.config.degradation.no_data_resolve_s)
        self.stats = EvaluatorStats()
        self.retry_baseline: dict[str, float | None] | None = None
        self.evaluated_at: datetime | None = None
        self.series = None  # the FleetSeries of the last evaluation (None if it failed)
        self._rejected_before: int | None = None
        c = self.config
        self.for_s = {RULE_DEGRADATION: c.degradation.for_s, RULE_RETRY: c.retry.for_s, RULE_QUEUE: c.queue.for_s,
                      RULE_SATURATION: c.saturation.for_s, RULE_CASCADE: c.cascade.for_s, RULE_SLO: c.slo.for_s,
                      RULE_INGESTION: c.ingestion.for_s, RULE_DOWN: c.down.for_s, RULE_TELEMETRY: c.telemetry.for_s}

    def restore(self) -> int:
        """Resume from the saved lifecycle state (``alerts_state``): every active alert with its clear
        countdown, the frozen retry baseline and the time evaluated up to. Without a saved state,
        resume the alerts left pending/firing in the ``alerts`` table (their countdowns restart).
        Returns how many alerts were restored; a store error restores nothing (logged)."""
        try:
            saved = q.load_state(self.store, self.config.evaluator_id)
        except (StoreError, ValueError) as exc:
            log.warning("could not read the saved alert state: %s", exc)
            saved = None
        if saved is not None:
            try:
                alerts, self.retry_baseline, self._rejected_before = alert_state.load(saved[1])
            except ValueError as exc:
                log.warning("%s; resuming from the alerts table", exc)
            else:
                self.evaluated_at = saved[0]
                self.lifecycle.active = {(a.rule, a.key): a for a in alerts}
                return len(alerts)
        return self._restore_from_table()

    def _restore_from_table(self) -> int:
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
                          cost_source=row["cost_source"] or "", notified=True)
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
        # an active degradation alert keeps the baselines of its onset (an incident is never its own baseline)
        active_deg = {a.replica: a.onset for (r, _), a in self.lifecycle.active.items() if r == RULE_DEGRADATION}
        frozen = {rep: {m: f[k] for m, k in (("itl_p50_s", "baseline_itl_s"),
                                               ("prefill_tok_p50_s", "baseline_prefill_s_per_token")) if f.get(k)}
                  for rep, f in active_deg.items()}
        get_series = _series_loader(self.store, now, c, {k: v for k, v in frozen.items() if v})
        self.series = None
        try:
            self.series = get_series()
        except StoreUnavailable as exc:
            store_error = str(exc)
        except StoreError as exc:
            self.stats.rule_errors += 1
            self.stats.errors_by_rule["series"] = self.stats.errors_by_rule.get("series", 0) + 1
            log.warning("alert series failed at %s: %s", now.isoformat(), exc)
        for rule, fn in _rule_signals(self.store, now, c, get_series, active_deg).items():
            if rule in (RULE_DEGRADATION, RULE_DOWN, RULE_TELEMETRY, RULE_QUEUE, RULE_SATURATION) and self.series is None:
                continue
            run(rule, fn)
        run(RULE_RETRY, lambda: rules.retry_signals(self.store, now, c, self.retry_baseline))

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
            cascade = cascade_rule.cascade_signal(self.series, self.lifecycle, now, c, levels)
            cascade_transitions = []
            if cascade.level is Level.FIRE and cascade.figures.get("renamed_from") and \
                    self.lifecycle.get(RULE_CASCADE, "") is not None:  # evidence points elsewhere: resolve, re-fire
                cascade_transitions += self.lifecycle.resolve(RULE_CASCADE, "", now, {
                    "resolved_by": "renamed", "renamed_to": cascade.replica})
            cascade_transitions += self.lifecycle.apply([cascade], now, self.for_s, {RULE_CASCADE})
            for t in cascade_transitions:
                if t.state in (State.FIRING, State.RESOLVED) and not t.note:
                    self._cost(t, now)
            transitions += cascade_transitions
        fired_now = {(t.alert.rule, t.alert.key): t for t in transitions if t.state is State.FIRING}
        for alert in inhibit.apply(self.lifecycle):  # recorded so the table says what is grouped
            same_step = fired_now.get((alert.rule, alert.key))
            if same_step is not None:
                same_step.alert.inhibited_by = alert.inhibited_by  # its firing row says it already
            else:
                transitions.append(Transition(now, dataclasses.replace(alert, figures=dict(alert.figures)), alert.state,
                                              "inhibited" if alert.inhibited_by else "uninhibited"))
        self.stats.transitions += len(transitions)
        write = store_error is None
        self._record(transitions, write=write)
        self._notify(transitions, now)
        self.evaluated_at = now
        if write:
            self._save(now)
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
        # The incident began with its trigger (the culprit's first step), before the chain completed.
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
        if a.inhibited_by:
            evidence["inhibited_by"] = a.inhibited_by
        if t.note:
            evidence["note"] = t.note
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

    def _save(self, now: datetime) -> None:
        if not self.record:
            return
        doc = alert_state.dump(now, list(self.lifecycle.active.values()), self.retry_baseline, self._rejected_before)
        try:
            q.save_state(self.store, self.config.evaluator_id, now, doc)
        except StoreError as exc:
            self.stats.write_errors += 1
            log.warning("could not save the alert state: %s", exc)

    def notification(self, alert: Alert, state: State, at: datetime) -> Notification:
        """The notifier view of ``alert`` in ``state`` at ``at``."""
        evidence = dict(alert.figures)
        evidence.setdefault("onset", alert.onset)
        members = inhibit.members(self.lifecycle, alert)
        if members:
            evidence["members"] = members
        base = self.config.external_url
        return Notification(
            alert_id=alert.id, rule=alert.rule, key=alert.key, severity=alert.severity, replica=alert.replica,
            state=state.value, at=at, started_at=alert.started_at, fired_at=alert.fired_at,
            resolved_at=alert.resolved_at, summary=alert.summary, description=alert.description, evidence=evidence,
            labels=dict(alert.labels), est_cost_usd=alert.est_cost_usd, cost_source=alert.cost_source,
            generator_url=f"{base}{'&' if '?' in base else '?'}alert_id={alert.id}")

    def _notify(self, transitions: list[Transition], now: datetime) -> None:
        """Firing alerts are notified once (after the group wait for the rules a cascade may explain, and
        never while inhibited); their resolution is notified when their firing was; firing ones that
        were notified are re-sent to Alertmanager every ``resend_s``."""
        wait = timedelta(seconds=self.config.group_wait_s)
        batch: list[Notification] = []
        for t in transitions:
            a = t.alert
            live = self.lifecycle.get(a.rule, a.key)
            if t.note:
                continue
            if t.state is State.FIRING and live is not None:
                live.notify_after = now + wait if a.rule in inhibit.GROUPED_RULES else now
            elif t.state is State.RESOLVED and self._was_notified(a):
                batch.append(self.notification(a, State.RESOLVED, t.at))
        for alert in self.lifecycle.active.values():
            if (alert.state is State.FIRING and not alert.notified and not alert.inhibited_by
                    and alert.notify_after is not None and alert.notify_after <= now):
                batch.append(self.notification(alert, State.FIRING, now))
                alert.notified, alert.last_sent = True, now
        sent = {n.alert_id for n in batch}
        if batch and self.dispatcher is not None:
            self.dispatcher.submit(batch)
        # Alertmanager forgets alerts that are not re-sent: re-send notified firing ones every resend_s.
        resend = []
        for alert in self.lifecycle.active.values():
            if alert.state is State.FIRING and alert.notified and alert.id not in sent:
                if alert.last_sent is None or now - alert.last_sent >= timedelta(seconds=self.config.resend_s):
                    resend.append(self.notification(alert, State.FIRING, now))
                    alert.last_sent = now
        if resend and self.dispatcher is not None:
            self.dispatcher.submit(resend, resend_only=True)

    def _was_notified(self, alert: Alert) -> bool:
        return alert.notified
