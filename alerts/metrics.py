"""The alert service's own Prometheus metrics: one place mapping its plain stats dataclasses
(``EvaluatorStats``, ``DeliveryStats``) and the open alerts to metrics, in an instance-owned
``CollectorRegistry`` (values are read at scrape time, so evaluation never touches Prometheus).

Metrics: ``infercost_alert_evaluations_total``, ``infercost_alert_rule_errors_total``,
``infercost_alert_record_errors_total``, ``infercost_alert_transitions_total``,
``infercost_alert_notifications_total{result}`` (sent | failed | dropped),
``infercost_alert_notification_retries_total``, ``infercost_alerts_active{rule,state}``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from alerts.model import RULES, State


class _AlertCollector:
    def __init__(self, service):
        self.service = service

    def collect(self):
        ev = self.service.evaluator
        stats = ev.stats
        for name, help_, value in (
            ("infercost_alert_evaluations", "Alert evaluations run.", stats.steps),
            ("infercost_alert_rule_errors", "Rule evaluations skipped after a store query error.", stats.rule_errors),
            ("infercost_alert_record_errors", "Alert state changes that could not be written to the store.",
             stats.write_errors),
            ("infercost_alert_transitions", "Alert state changes (pending, firing, resolved, cancelled).",
             stats.transitions),
        ):
            family = CounterMetricFamily(name, help_)
            family.add_metric([], value)
            yield family
        dispatcher = self.service.dispatcher
        sent = CounterMetricFamily("infercost_alert_notifications", "Notification batches by delivery result.",
                                   labels=["result"])
        retries = CounterMetricFamily("infercost_alert_notification_retries", "Notification delivery retries.")
        d = dispatcher.stats if dispatcher is not None else None
        for result in ("sent", "failed", "dropped"):
            sent.add_metric([result], getattr(d, result, 0) if d else 0)
        retries.add_metric([], d.retries if d else 0)
        yield sent
        yield retries
        active = GaugeMetricFamily("infercost_alerts_active", "Open alerts by rule and state.", labels=["rule", "state"])
        counts = {(rule, state.value): 0 for rule in RULES for state in (State.PENDING, State.FIRING)}
        for alert in list(ev.lifecycle.active.values()):
            counts[(alert.rule, alert.state.value)] = counts.get((alert.rule, alert.state.value), 0) + 1
        for (rule, state), value in sorted(counts.items()):
            active.add_metric([rule, state], value)
        yield active


def register(service, registry: CollectorRegistry | None = None) -> CollectorRegistry:
    """Register the metrics of ``service`` (an AlertService) in ``registry`` (a new one if None); returns it."""
    registry = registry or CollectorRegistry()
    registry.register(_AlertCollector(service))
    return registry
