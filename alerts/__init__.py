"""Alerts on the cascade this product exists to catch, and on SLOs and ingestion.

Position in the flow: serving -> collectors -> schema -> **alerts** (reads the store only through
named queries: ``schema.queries.alerts``, ``.budgets`` for the budget rules, ``.cost`` for an incident's
waste; imports nothing from serving/collectors/app/infercost).

- ``config``: thresholds/windows with documented defaults and sources (AlertConfig).
- ``rules``: 1 replica degradation, 2 retry amplification, 3 queue growth, 4 saturation.
- ``rules_health``: 6 SLO burn rates (multi-window, multi-burn-rate), 7 ingestion health.
- ``cascade``: 5 cascading degradation (one alert naming the culprit, chain, cost, actions).
- ``lifecycle``: pending -> firing -> resolved with hysteresis and dedup.
- ``evaluator``: ``Evaluator(store, config).step(now)``, ``evaluate(store, now)``.
- ``notifiers``: generic webhook, Slack, Alertmanager v2; retried delivery off the eval path.
- ``service``: ``AlertService`` (background thread) for ``infercost alerts`` / ``infercost up``.
- ``scenarios``: virtual-time cascade scenarios and the cascade rule's precision/recall.
"""
