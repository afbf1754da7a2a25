"""Fault injection: what can go wrong with a replica, set at start-up, by timeline, or at run time.

Kinds (``FaultEvent.kind``):
- ``slowdown``: step-time factor (a degraded GPU: thermal throttling, a bad NVLink); 1 = healthy.
- ``crash``: the engine dies; every in-flight request is lost (streams break mid-way with vLLM's
  mid-stream error, and, as in vLLM, their ``llm_request`` spans are never exported). With
  ``until_s`` the replica restarts then (empty cache, counters reset); else it stays down.
- ``error_rate``: probability that a request is answered with an HTTP error before reaching the
  engine; ``value`` is a float (status 500) or a mapping ``{status: probability}``.
  Realistic default: 1.8%-7.3% failed requests (BurstGPT, KDD 2025; serving/workloads/data/README.md).
- ``kv_cut``: fraction of KV-cache blocks taken away (0..1): preemption pressure.

Virtual-time only (the fleet simulator; a live replica refuses them):
- ``telemetry_loss``: the replica keeps serving but its telemetry stops arriving (its collector or
  exporter died): ``value`` ``"spans"`` (no ``llm_request`` spans), ``"metrics"`` (no metric points,
  as when its scrape target vanished) or ``"all"`` (both, the default). Gateway and client spans
  still arrive: they come from other processes.
- ``drain``: a planned scale-down: the gateway stops routing to the replica, which finishes what it
  runs and is then shut down (no more metric points, no connection errors). With ``until_s`` it
  rejoins the pool then (scale-up).

A timeline is a JSON or YAML list of events: ``{at_s, replica, kind, value, until_s}``; ``at_s`` /
``until_s`` are seconds from the start of the run; ``replica`` is a replica id or ``"*"`` for all.
``until_s`` ends the fault (the value returns to healthy).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

FAULT_KINDS = ("slowdown", "crash", "error_rate", "kv_cut")
SIM_FAULT_KINDS = ("telemetry_loss", "drain")  # virtual-time simulator only
TELEMETRY_SOURCES = ("spans", "metrics", "all")


@dataclass(frozen=True)
class FaultEvent:
    """One fault on the timeline. Times in seconds from the run's start."""

    at_s: float
    replica: str
    kind: str
    value: object = None
    until_s: float | None = None

    def __post_init__(self):
        problems = validate_fault(self.kind, self.value, FAULT_KINDS + SIM_FAULT_KINDS)
        if self.at_s < 0:
            problems.append(f"at_s must be >= 0, got {self.at_s}")
        if self.until_s is not None and self.until_s < self.at_s:
            problems.append(f"until_s ({self.until_s}) must be >= at_s ({self.at_s})")
        if problems:
            raise ValueError(f"bad fault event {self}: " + "; ".join(problems))


def validate_fault(kind: str, value, kinds: tuple[str, ...] = FAULT_KINDS) -> list[str]:
    """Every problem with a (kind, value) pair, as messages (empty = valid). ``kinds``: the kinds the
    caller can apply (a live replica: ``FAULT_KINDS``; the simulator adds ``SIM_FAULT_KINDS``)."""
    if kind not in kinds:
        return [f"unknown fault kind {kind!r}; known: {', '.join(kinds)}"]
    if kind == "telemetry_loss" and value is not None and value not in TELEMETRY_SOURCES:
        return [f"telemetry_loss needs one of {', '.join(TELEMETRY_SOURCES)}, got {value!r}"]
    if kind == "slowdown":
        if not isinstance(value, (int, float)) or value <= 0:
            return [f"slowdown needs a factor > 0, got {value!r}"]
    elif kind == "kv_cut":
        if not isinstance(value, (int, float)) or not 0 <= value < 1:
            return [f"kv_cut needs a fraction in [0, 1), got {value!r}"]
    elif kind == "error_rate":
        try:
            rates = error_rates(value)
        except (TypeError, ValueError) as exc:
            return [f"error_rate: {exc}"]
        if sum(rates.values()) > 1:
            return [f"error_rate probabilities sum to more than 1: {rates}"]
    return []


def error_rates(value) -> dict[int, float]:
    """Normalise an ``error_rate`` value to ``{http_status: probability}``."""
    if value is None:
        return {}
    if isinstance(value, (int, float)):
        if not 0 <= value <= 1:
            raise ValueError(f"probability must be in [0, 1], got {value}")
        return {500: float(value)} if value else {}
    if isinstance(value, dict):
        out = {}
        for status, p in value.items():
            s = int(status)
            if not 400 <= s <= 599:
                raise ValueError(f"status must be 4xx/5xx, got {status}")
            if not 0 <= float(p) <= 1:
                raise ValueError(f"probability for {status} must be in [0, 1], got {p}")
            out[s] = float(p)
        return out
    raise TypeError(f"expected a probability or a mapping status -> probability, got {value!r}")


@dataclass
class FaultState:
    """The faults currently active on one replica."""

    slowdown: float = 1.0
    kv_cut: float = 0.0
    error_rates: dict = field(default_factory=dict)
    down: bool = False

    def as_dict(self) -> dict:
        return {"slowdown": self.slowdown, "kv_cut": self.kv_cut,
                "error_rate": {str(k): v for k, v in self.error_rates.items()}, "down": self.down}


def load_timeline(path: str | Path) -> list[FaultEvent]:
    """Read a fault timeline (JSON or YAML list of events). Raises ValueError naming each bad entry."""
    text = Path(path).read_text()
    if str(path).endswith((".yaml", ".yml")):
        import yaml

        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    return parse_timeline(data)


def parse_timeline(data) -> list[FaultEvent]:
    """Fault events from plain data (a list of mappings). Reports every bad entry at once."""
    if isinstance(data, dict) and "faults" in data:
        data = data["faults"]
    if not isinstance(data, list):
        raise ValueError("a fault timeline is a list of {at_s, replica, kind, value, until_s}")
    events, problems = [], []
    for i, item in enumerate(data):
        try:
            events.append(FaultEvent(at_s=float(item.get("at_s", 0.0)), replica=str(item.get("replica", "*")),
                                     kind=item["kind"], value=item.get("value"),
                                     until_s=None if item.get("until_s") is None else float(item["until_s"])))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            problems.append(f"entry {i}: {exc}")
    if problems:
        raise ValueError("bad fault timeline: " + "; ".join(problems))
    return sorted(events, key=lambda e: e.at_s)
