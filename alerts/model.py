"""What a rule says at one evaluation (:class:`Signal`) and what an alert is (:class:`Alert`).

A rule returns, per key (a replica, a tier, or "" for the fleet), a three-valued :class:`Level`:
``FIRE`` (trigger condition holds), ``HOLD`` (between trigger and clear thresholds: a firing alert
stays firing, a new one does not start) or ``CLEAR`` (clear condition holds). A signal marked
``no_data`` says the rule's data about the key disappeared: a firing alert stays firing in a
"no data" state (its last evidence kept), a pending one is cancelled.
Two thresholds plus a minimum clear time are the hysteresis of the lifecycle (alerts/lifecycle.py).
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

RULE_DEGRADATION = "replica_degradation"
RULE_RETRY = "retry_amplification"
RULE_QUEUE = "queue_growth"
RULE_SATURATION = "saturation"
RULE_CASCADE = "cascading_degradation"
RULE_SLO = "slo_burn_rate"
RULE_INGESTION = "ingestion_health"
RULE_DOWN = "replica_down"
RULE_TELEMETRY = "telemetry_health"
RULE_BUDGET = "budget_burn"  # alerts/rules_budget.py
RULE_SPEND_ANOMALY = "spend_anomaly"  # alerts/rules_budget.py
RULES = (RULE_DEGRADATION, RULE_RETRY, RULE_QUEUE, RULE_SATURATION, RULE_CASCADE, RULE_SLO, RULE_INGESTION,
         RULE_DOWN, RULE_TELEMETRY, RULE_BUDGET, RULE_SPEND_ANOMALY)


class Level(enum.Enum):
    FIRE = "fire"
    HOLD = "hold"
    CLEAR = "clear"


class State(str, enum.Enum):
    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"
    CANCELLED = "cancelled"  # pending whose condition cleared before ``for_s`` elapsed


@dataclass
class Signal:
    """One rule's verdict for one key at one evaluation time.

    ``figures``: the numbers behind the verdict (units in the key names: ``_s`` seconds, ``_ratio``).
    ``summary``: one line for people. ``replica``: the replica the alert is about ("" for fleet-wide).
    """

    rule: str
    key: str
    level: Level
    severity: str
    summary: str
    figures: dict[str, Any] = field(default_factory=dict)
    replica: str = ""
    description: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    no_data: bool = False


def replica_label(replica: str) -> str:
    """How alert text names a replica: ``replica r2``, but ``replica-2`` alone (not "replica replica-2")
    when the id already says it is one."""
    return replica if str(replica).lower().startswith("replica") else f"replica {replica}"


def alert_id(rule: str, key: str) -> str:
    """Stable id of the alert of ``rule`` for ``key`` (dedup/grouping key): 16 hex chars of sha256."""
    return hashlib.sha256(f"{rule}\x1f{key}".encode()).hexdigest()[:16]


@dataclass
class Alert:
    """The lifecycle state of one alert (rule + key) and its current evidence."""

    rule: str
    key: str
    severity: str
    replica: str
    state: State
    started_at: datetime  # when the trigger condition first held (pending start)
    fired_at: datetime | None = None
    resolved_at: datetime | None = None
    clear_since: datetime | None = None  # first evaluation of the current run of CLEAR verdicts
    summary: str = ""
    description: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    onset: dict[str, Any] = field(default_factory=dict)  # figures when the trigger first held
    labels: dict[str, str] = field(default_factory=dict)
    est_cost_usd: float | None = None
    cost_source: str = ""
    last_sent: datetime | None = None
    no_data_since: datetime | None = None  # firing, but the rule's data about it disappeared then
    inhibited_by: str = ""  # id of the alert that explains it (a cascade): recorded, not notified
    notified: bool = False  # a firing notification went out (so its resolution is notified too)
    notify_after: datetime | None = None  # group wait: notify then if still firing and not inhibited

    @property
    def id(self) -> str:
        return alert_id(self.rule, self.key)

    @property
    def active(self) -> bool:
        return self.state in (State.PENDING, State.FIRING)


@dataclass(frozen=True)
class Transition:
    """A state change of an alert at ``at`` (what is written to the table and notified).

    ``note``: "" for a change of ``state``; "no_data" / "data_back" when a firing alert lost or regained
    its data, "inhibited" / "uninhibited" when another alert started or stopped explaining it
    (recorded, not notified)."""

    at: datetime
    alert: Alert
    state: State
    note: str = ""
