"""Named queries of the alerts: the rule inputs (read at an explicit ``now``) and the ``alerts`` table.

Position in the flow: serving -> collectors -> **schema** -> alerts/app. The alert evaluator
(``alerts/``) reads its rule inputs only through the functions here, each bound to an explicit
evaluation time ``now`` (a UTC datetime) so the same rules run live (``now`` = wall clock) and in
virtual-time replays (``now`` = a simulated minute, with later telemetry already in the store:
every query bounds its window on ``<= now``). The dashboard's Alerts page and the weekly review
read the alert history with :func:`active_alerts`, :func:`recent_alerts` and
:func:`alerts_in_period`. SQL lives in ``alerts_*.sql`` beside this file.

Times are UTC datetimes (naive values are taken as UTC); durations are seconds; costs USD.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

from schema.queries import rows, run

ALERTS_TABLE = "alerts"
ALERT_COLUMNS = (
    "event_time", "alert_id", "rule", "alert_key", "severity", "replica", "state", "started_at",
    "fired_at", "resolved_at", "summary", "description", "evidence", "est_cost_usd", "cost_source",
    "labels", "evaluator",
)
ALERT_STATES = ("pending", "firing", "resolved", "cancelled")


def utc(value: datetime | None) -> datetime | None:
    """``value`` as a naive UTC datetime (the form bound to ``DateTime64(3, 'UTC')`` parameters).

    Aware datetimes are converted to UTC; naive ones are taken as UTC already.
    """
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def aware(value: datetime | None) -> datetime | None:
    """A datetime read from the store (naive UTC) as an aware UTC datetime."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def _dicts(store, name: str, **params) -> list[dict[str, Any]]:
    columns, result = rows(store, name, **params)
    return [dict(zip(columns, row)) for row in result]


# --- rule inputs ---------------------------------------------------------------------------------

def replica_series(store, now: datetime, bucket_s: int, buckets: int, lookback_s: int = 900) -> list[dict[str, Any]]:
    """Per replica and bucket (0 = newest, ``(now - (b+1) x bucket_s, now - b x bucket_s]``) over the last
    ``buckets``: engine ``requests``, ``itl_p50_s`` / ``itl_samples`` (seconds per output token),
    ``prefill_tok_p50_s`` / ``prefill_samples`` (prefill seconds per prompt token), ``queue_p95_s``,
    ``engine_errors``; gateway ``attempts``, ``gw_ok``, ``gw_failed`` (error_class upstream_error or
    timeout), ``gw_conn_errors``, ``gw_abandoned`` (client_cancel); gauges ``waiting_mean``,
    ``running_mean`` (summed over a replica's engines), ``kv_mean`` (0..1), ``gauge_points``,
    ``up_ok`` / ``up_failed``; and ``gpu_type``. Absent figures are None (or NaN). Raises StoreError.
    """
    return _dicts(store, "alerts_replica_series", now=utc(now), bucket_s=int(bucket_s), buckets=int(buckets),
                  lookback_s=int(lookback_s))


def retry_series(store, now: datetime, bucket_s: int, buckets: int, lookback_s: int = 900) -> list[dict[str, Any]]:
    """Fleet attempts per bucket (0 = newest): ``client_attempts``, ``client_retries`` (task.attempt >= 2),
    ``client_timeouts``, ``gateway_attempts``, ``gateway_requests`` (hidden retries = attempts -
    requests). Buckets without attempts are absent. Raises StoreError."""
    return _dicts(store, "alerts_retry_series", now=utc(now), bucket_s=int(bucket_s), buckets=int(buckets),
                  lookback_s=int(lookback_s))


def retry_windows(store, now: datetime, window_s: int, baseline_s: int, lookback_s: int = 900) -> dict[str, dict[str, int]]:
    """Attempts and first attempts per call source (``client``, ``gateway``) in the current window
    ``(now - window_s, now]`` and the baseline window before it (``baseline_s`` long).

    Returns ``{source: {attempts, first_attempts, baseline_attempts, baseline_first_attempts}}``;
    retries = attempts - first_attempts. Raises StoreError.
    """
    found = _dicts(store, "alerts_retry_windows", now=utc(now), window_s=int(window_s),
                   baseline_s=int(baseline_s), lookback_s=int(lookback_s))
    return {r.pop("call_source"): {k: int(v) for k, v in r.items()} for r in found}


def slo_windows(store, now: datetime, windows_s: Sequence[int], lookback_s: int = 3600) -> dict[int, dict[str, int]]:
    """Task outcomes per look-back window: task root spans that ended in minutes ``[now - w, now)``
    (the per-minute rollup ``alerts_task_minutes``; exact for ``now`` on a minute boundary).

    Returns ``{window_s: {tasks, failed, not_good}}`` for every window asked (zeros when empty);
    ``failed`` = outcome failure/abandoned, ``not_good`` = not (success within ``slo.e2e_ms``).
    ``lookback_s`` is unused (kept for callers). Raises StoreError.
    """
    windows = sorted({int(w) for w in windows_s})
    found = _dicts(store, "alerts_slo_windows", now=utc(now), windows_s=windows, max_window_s=max(windows))
    out = {w: {"tasks": 0, "failed": 0, "not_good": 0} for w in windows}
    for r in found:
        out[int(r["window_s"])] = {"tasks": int(r["tasks"]), "failed": int(r["failed"]), "not_good": int(r["not_good"])}
    return out


def newest_rows(store, now: datetime, lookback_s: int = 86400) -> dict[str, datetime | None]:
    """The newest span end and gauge point at or before ``now`` (aware UTC, None if none within
    ``lookback_s``): ``{newest_span, newest_metric}``. Raises StoreError."""
    found = _dicts(store, "alerts_newest_rows", now=utc(now), lookback_s=int(lookback_s))
    row = found[0] if found else {}
    return {"newest_span": aware(row.get("newest_span")), "newest_metric": aware(row.get("newest_metric"))}


def fleet_usage(store, start: datetime, end: datetime) -> dict[str, int]:
    """Fallback cost-estimate inputs over ``(start, end]``: ``engine_replicas``, ``gauge_replicas``,
    ``client_attempts``, ``client_retries``, ``gateway_attempts``, ``gateway_retries``. Raises StoreError."""
    found = _dicts(store, "alerts_fleet_usage", start=utc(start), end=utc(end))
    return {k: int(v or 0) for k, v in (found[0] if found else {}).items()}


# --- the alerts table ----------------------------------------------------------------------------

@dataclass(frozen=True)
class AlertChange:
    """One row of the ``alerts`` table: a state change of one alert, with its evidence.

    ``state`` is one of pending | firing | resolved | cancelled; times are UTC datetimes;
    ``evidence`` is any JSON-serialisable mapping (figures, chain, thresholds).
    """

    event_time: datetime
    alert_id: str
    rule: str
    alert_key: str
    severity: str
    replica: str
    state: str
    started_at: datetime
    fired_at: datetime | None
    resolved_at: datetime | None
    summary: str
    description: str
    evidence: dict
    est_cost_usd: float | None = None
    cost_source: str = ""
    labels: dict | None = None
    evaluator: str = ""

    def row(self) -> list[Any]:
        if self.state not in ALERT_STATES:
            raise ValueError(f"alert state must be one of {ALERT_STATES}, got {self.state!r}")
        return [
            utc(self.event_time), self.alert_id, self.rule, self.alert_key, self.severity, self.replica, self.state,
            utc(self.started_at), utc(self.fired_at), utc(self.resolved_at), self.summary, self.description,
            json.dumps(self.evidence, sort_keys=True, default=str), self.est_cost_usd, self.cost_source,
            {str(k): str(v) for k, v in (self.labels or {}).items()}, self.evaluator,
        ]


def insert_alert_changes(store, changes: Iterable[AlertChange]) -> int:
    """Append state changes to the ``alerts`` table; returns the number written. Raises StoreError."""
    data = [c.row() for c in changes]
    if data:
        store.insert(ALERTS_TABLE, data, ALERT_COLUMNS, tag="alerts.record")
    return len(data)


STATE_TABLE = "alerts_state"


def load_state(store, evaluator: str) -> tuple[datetime, dict] | None:
    """The newest saved lifecycle state of ``evaluator``: (evaluated_at as aware UTC, state dict), or
    None when it never saved. Raises StoreError; ValueError when the stored JSON is unreadable."""
    found = _dicts(store, "alerts_state_latest", evaluator=evaluator)
    if not found:
        return None
    return aware(found[0]["evaluated_at"]), json.loads(found[0]["state"])


def save_state(store, evaluator: str, evaluated_at: datetime, state: dict, saved_at: datetime | None = None) -> None:
    """Save ``state`` (JSON-serialisable) as ``evaluator``'s lifecycle state at ``evaluated_at``.
    Raises StoreError."""
    saved = saved_at or datetime.now(timezone.utc)
    store.insert(STATE_TABLE, [[evaluator, utc(saved), utc(evaluated_at), json.dumps(state, sort_keys=True, default=str)]],
                 ("evaluator", "saved_at", "evaluated_at", "state"), tag="alerts.state")


def last_event_time(store, evaluator: str) -> datetime | None:
    """The newest ``event_time`` ``evaluator`` wrote to the alerts table (aware UTC), or None. Raises StoreError."""
    found = _dicts(store, "alerts_last_event", evaluator=evaluator)
    return aware(found[0]["last_event"]) if found else None


def active_alerts(store):
    """Alerts whose latest state is pending or firing, newest first (pandas DataFrame).

    Columns: alert_id, rule, alert_key, severity, replica, state, started_at, fired_at, summary,
    description, evidence (JSON text), est_cost_usd, cost_source, labels, updated_at.
    """
    return run(store, "alerts_active")


def recent_alerts(store, start: datetime, end: datetime):
    """Every state change written in ``[start, end)``, newest first (DataFrame with the table's columns
    except ``evaluator``)."""
    return run(store, "alerts_changes", start=utc(start), end=utc(end))


def alerts_in_period(store, start: datetime, end: datetime, now: datetime | None = None):
    """Alert incidents that fired and overlapped ``[start, end)`` (DataFrame), oldest first.

    Columns: alert_id, started_at, rule, severity, replica, state (latest), fired_at, resolved_at
    (NULL while firing), duration_s (firing time up to resolved_at, or to ``now`` — default ``end`` —
    for an incident still firing), est_cost_usd, cost_source, summary, alert_key, evidence (JSON
    text), labels.
    """
    return run(store, "alerts_incidents", start=utc(start), end=utc(end), now=utc(now or end))


def alert_history(store, alert_id: str):
    """Every state change of ``alert_id`` (all its incidents), newest first (DataFrame with the table's
    columns except ``evaluator``). Raises ValueError for an id that is not 16 hex characters."""
    if not (isinstance(alert_id, str) and len(alert_id) == 16 and all(c in "0123456789abcdef" for c in alert_id)):
        raise ValueError(f"an alert id is 16 hex characters, got {alert_id!r}")
    return run(store, "alerts_by_id", alert_id=alert_id)


def replica_spend(store, start: datetime, end: datetime) -> dict[str, float]:
    """GPU spend per replica over ``[start, end)`` in USD (the cost engine's replica_minutes; empty when
    its jobs have not run). Raises StoreError."""
    found = _dicts(store, "alerts_replica_spend", start=utc(start), end=utc(end))
    return {r["replica"]: float(r["spend_usd"] or 0.0) for r in found}
