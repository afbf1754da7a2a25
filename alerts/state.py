"""The evaluator's lifecycle state as plain JSON, so evaluation resumes exactly where it stopped.

Saved in the ``alerts_state`` table (migration 1007) after every recorded evaluation, loaded by a
(re)starting service and by ``infercost alerts --once``: every active alert with its clear countdown
(``clear_since``), no-data time, onset figures (frozen baselines), notification status; the frozen
retry baseline; the receiver's last rejection count; and the time evaluated up to. A replay through
``--once`` therefore gives the same lifecycle as the service stepping through the same times.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from alerts.model import Alert, State

VERSION = 1
_TIMES = ("started_at", "fired_at", "resolved_at", "clear_since", "last_sent", "no_data_since", "notify_after")


def alert_to_dict(alert: Alert) -> dict[str, Any]:
    """An :class:`Alert` as JSON-ready data (datetimes as ISO 8601)."""
    d = dataclasses.asdict(alert)
    d["state"] = alert.state.value
    for k in _TIMES:
        if isinstance(d.get(k), datetime):
            d[k] = d[k].isoformat()
    return d


def alert_from_dict(d: dict[str, Any]) -> Alert:
    """The inverse of :func:`alert_to_dict`; unknown keys are ignored (a newer writer), missing ones
    take their defaults (an older writer)."""
    names = {f.name for f in dataclasses.fields(Alert)}
    values = {k: v for k, v in d.items() if k in names}
    values["state"] = State(values["state"])
    for k in _TIMES:
        if isinstance(values.get(k), str):
            values[k] = datetime.fromisoformat(values[k])
    return Alert(**values)


def dump(evaluated_at: datetime, active: list[Alert], retry_baseline: dict | None,
         rejected_before: int | None) -> dict[str, Any]:
    """The state document saved after an evaluation at ``evaluated_at``."""
    return {"version": VERSION, "evaluated_at": evaluated_at.isoformat(), "retry_baseline": retry_baseline,
            "rejected_before": rejected_before, "active": [alert_to_dict(a) for a in active]}


def load(doc: dict[str, Any]) -> tuple[list[Alert], dict | None, int | None]:
    """(active alerts, retry baseline, rejected_before) from a saved document. Raises ValueError on an
    unreadable document."""
    try:
        alerts = [alert_from_dict(a) for a in doc.get("active") or []]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"unreadable alert state: {exc}") from exc
    return alerts, doc.get("retry_baseline"), doc.get("rejected_before")
