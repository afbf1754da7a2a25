"""Spend budgets per tenant and per task type: fleet.yaml's ``budgets:`` section -> the ``budgets`` table.

Position: schema. The alert rules (``alerts/rules_budget.py``), the cost page and the weekly review
read budgets back through ``schema.queries.budgets``. Format::

    budgets:
      tenant:
        acme: {usd_per_day: 40}
      task_type:
        research_agent: {usd_per_week: 250, usd_per_day: 50}

A scope is ``tenant`` or ``task_type``; each entry has ``usd_per_day`` and/or ``usd_per_week`` (> 0).
Days are UTC days, weeks ISO weeks (Monday 00:00 UTC).
"""

from __future__ import annotations

from dataclasses import dataclass

SCOPES = ("tenant", "task_type")
PERIODS = {"usd_per_day": "day", "usd_per_week": "week"}


@dataclass(frozen=True)
class Budget:
    scope: str  # tenant | task_type
    name: str
    period: str  # day | week
    usd: float


def parse_budgets(data) -> list[Budget]:
    """Budgets from the ``budgets:`` mapping; raises ValueError listing every problem at once."""
    if not data:
        return []
    problems, out = [], []
    if not isinstance(data, dict):
        raise ValueError(f"budgets must be a mapping of {' / '.join(SCOPES)}, got {type(data).__name__}")
    for scope, entries in data.items():
        if scope not in SCOPES:
            problems.append(f"budgets.{scope}: unknown scope (use {', '.join(SCOPES)})")
            continue
        if not isinstance(entries, dict):
            problems.append(f"budgets.{scope} must map names to {{usd_per_day, usd_per_week}}")
            continue
        for name, limits in entries.items():
            if not isinstance(limits, dict) or not limits:
                problems.append(f"budgets.{scope}.{name} needs usd_per_day and/or usd_per_week")
                continue
            for key, value in limits.items():
                if key not in PERIODS:
                    problems.append(f"budgets.{scope}.{name}.{key}: unknown (use usd_per_day, usd_per_week)")
                elif not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                    problems.append(f"budgets.{scope}.{name}.{key} must be a number > 0, got {value!r}")
                else:
                    out.append(Budget(scope, str(name), PERIODS[key], float(value)))
    if problems:
        raise ValueError("invalid budgets: " + "; ".join(problems))
    return out


def sync_budgets(store, budgets: list[Budget]) -> int:
    """Replace the store's budgets with ``budgets`` (rows of one sync share ``synced_at``); returns rows."""
    from datetime import datetime, timezone

    now = datetime.now(timezone.utc).replace(tzinfo=None)
    store.command("TRUNCATE TABLE IF EXISTS budgets", tag="budgets.clear")
    if budgets:
        store.insert("budgets", [(b.scope, b.name, b.period, b.usd, now) for b in budgets],
                     ["scope", "name", "period", "usd", "synced_at"], tag="budgets.sync")
    return len(budgets)
