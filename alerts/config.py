"""Alert rule settings: thresholds, windows and lifecycle timings, each default with its source.

Plain dataclasses (no environment reading: ``infercost/`` builds an :class:`AlertConfig` from its
settings or the ``alerts:`` section of ``fleet.yaml`` and passes it down). :meth:`AlertConfig.from_dict`
accepts a nested mapping with the same field names and reports every problem at once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DegradationConfig:
    """Rule 1, replica degradation (issue 7): a replica's ITL or TTFT p50 over ``window_s`` is at
    least ``ratio`` x the median of the other replicas' p50s, or its error rate jumps.

    Defaults: 2 min window and 1.5x from the issue. ``min_requests`` 5 calls per replica (a p50 of
    fewer is noise; at the issue's modest rates a replica serves ~10/min). ``clear_ratio`` 1.2:
    hysteresis band below the trigger. Error jump: rate >= ``error_rate_min`` (5%) and >=
    ``error_ratio`` (3x) the others' median rate (floored at ``error_floor``, 1%); clears below
    ``error_clear`` (2%). Our defaults, tuned on the emulator scenarios (alerts/scenarios.py).
    """

    window_s: int = 120
    ratio: float = 1.5
    clear_ratio: float = 1.2
    min_requests: int = 5
    min_other_replicas: int = 2
    error_rate_min: float = 0.05
    error_ratio: float = 3.0
    error_floor: float = 0.01
    error_clear: float = 0.02
    for_s: int = 60


@dataclass
class RetryConfig:
    """Rule 2, retry amplification (issue 7): retries per first attempt over ``window_s`` (5 min)
    >= ``ratio`` (1.3x) its baseline over the previous ``baseline_s`` (1 h) and >= ``min_rate`` (5%).

    Read from the client's ``task.attempt`` (retries of a step's call) and the gateway's attempts per
    request (hidden retries); the worse source counts. The baseline is frozen when the alert starts so
    an incident never becomes its own baseline. ``min_first_attempts`` 20: fewer calls give no rate.
    Clears when the rate is below ``clear_rate`` (2.5%) or below ``clear_ratio`` (1.1x) the baseline.
    """

    window_s: int = 300
    baseline_s: int = 3600
    ratio: float = 1.3
    min_rate: float = 0.05
    clear_rate: float = 0.025
    clear_ratio: float = 1.1
    min_first_attempts: int = 20
    min_baseline_first_attempts: int = 50
    for_s: int = 60


@dataclass
class QueueConfig:
    """Rule 3, queue growth (issue 7): fleet ``vllm:num_requests_waiting`` (sum of replica means per
    bucket) or engine queue-time p95 rising over ``windows`` consecutive buckets of ``bucket_s``.

    Rising = each bucket above the one before by at least ``min_step`` requests (``min_step_s`` for
    queue time) and the newest at least ``min_waiting`` requests (``min_queue_p95_s``), so jitter
    around an empty queue never fires. Clears when the newest bucket is back to ``clear_waiting``
    requests and ``clear_queue_p95_s`` (queues back to an idle fleet's level). Our defaults;
    ``windows`` 2 (not more): in the emulator scenarios a slow replica's queue fills within ~2 min
    and then plateaus, since clients time out and abort what waited too long (the queue is bounded
    by arrival rate x client timeout), so a third rising minute often never comes.
    """

    bucket_s: int = 60
    windows: int = 2
    min_step: float = 0.5
    min_waiting: float = 4.0
    min_step_s: float = 0.25
    min_queue_p95_s: float = 2.0
    clear_waiting: float = 2.0
    clear_queue_p95_s: float = 1.0
    for_s: int = 0


@dataclass
class SaturationConfig:
    """Rule 4, saturation (issue 7): a replica's mean KV-cache use over ``window_s`` >= ``kv_ratio``
    (90%, issue) or its running requests at ``max_running`` (vLLM ``--max-num-seqs``, EngineArgs
    default 256; set ``max_running_by_replica`` to your launch values). Clears below ``kv_clear``
    (80%) and ``running_clear`` (90%) of max running.
    """

    window_s: int = 60
    kv_ratio: float = 0.90
    kv_clear: float = 0.80
    max_running: int = 256
    max_running_by_replica: dict[str, int] = field(default_factory=dict)
    running_clear: float = 0.90
    for_s: int = 60


@dataclass
class CascadeConfig:
    """Rule 5, cascading degradation (issue 7): degradation of a replica followed within
    ``within_s`` (10 min) by retry amplification and (queue growth or saturation of another replica).

    ``tolerance_s`` (2 min): a later rule may start this much before the degradation (its window is
    shorter/longer, so onsets are compared with that slack). Stays firing while retry amplification
    or queue growth persists (the sustaining effect of a metastable failure, OSDI'22) even after the
    culprit recovered. Cost fallback when the cost engine's tables are absent: fleet GPU-hours x
    ``gpu_hour_usd`` x the retry share of attempts (``gpu_hour_usd`` 2.50: an on-demand H100-class
    GPU-hour, order of magnitude of 2025 cloud list prices; configure yours).
    """

    within_s: int = 600
    tolerance_s: int = 120
    gpus_per_replica: int = 1
    gpu_hour_usd: float = 2.50
    for_s: int = 0


@dataclass
class BurnTier:
    """One multi-window burn-rate tier (SRE Workbook ch. 5, "Alerting on SLOs", table 5-8)."""

    name: str
    long_s: int
    short_s: int
    factor: float
    severity: str


def default_tiers() -> list[BurnTier]:
    # SRE Workbook: 2% of a 30-day budget in 1 h (14.4x) and 5% in 6 h (6x) page; 10% in 3 d (1x) ticket.
    return [
        BurnTier("page_1h", 3600, 300, 14.4, "critical"),
        BurnTier("page_6h", 21600, 1800, 6.0, "critical"),
        BurnTier("ticket_3d", 259200, 21600, 1.0, "warning"),
    ]


@dataclass
class SloConfig:
    """Rule 6, SLO burn rate (issue 7) on task success and goodput over a ``period_s`` (30 d) SLO.

    ``success_target`` 0.99 and ``goodput_target`` 0.90 are our defaults (set yours). A tier whose
    factor >= 1 / (1 - target) could never fire (the error ratio would need to exceed 100%); it is
    re-derived to ``rederive_fraction`` (0.5) of that maximum, i.e. it fires when half the tasks in
    both windows are bad, and the alert's description says so. ``min_tasks`` 10 per short window.
    """

    period_s: int = 30 * 86400
    success_target: float = 0.99
    goodput_target: float = 0.90
    tiers: list[BurnTier] = field(default_factory=default_tiers)
    rederive_fraction: float = 0.5
    min_tasks: int = 10
    lookback_s: int = 3600
    for_s: int = 0


@dataclass
class IngestionConfig:
    """Rule 7, ingestion health (issue 7): newest-row lag (span ends or gauge points) >= ``max_lag_s``
    (5 min: 20 scrapes at the scraper's 15 s interval missed), receiver rejections since the last
    evaluation, a spool backlog >= ``spool_backlog_bytes`` (every accepted request passes through the
    receiver's spool, so a small backlog is normal; 64 MiB is the OTLP body cap, i.e. more than one
    full request waiting: store writes are falling behind or failing), store unavailable."""

    max_lag_s: int = 300
    lookback_s: int = 86400
    for_s: int = 60
    spool_backlog_bytes: int = 64 * 1024 * 1024


@dataclass
class BudgetConfig:
    """budget_burn (alerts/rules_budget.py): fire when spend projected to the period's end reaches
    ``burn_ratio`` x the budget, once ``min_elapsed_ratio`` of the period has passed (the budgets
    themselves are fleet.yaml's ``budgets:``)."""

    burn_ratio: float = 1.0
    min_elapsed_ratio: float = 0.1


@dataclass
class SpendAnomalyConfig:
    """spend_anomaly (alerts/rules_budget.py): last hour >= ``ratio`` x the same hour last week and
    >= ``min_usd_per_hour``."""

    ratio: float = 2.0
    min_usd_per_hour: float = 1.0


@dataclass
class AlertConfig:
    """All alert settings. ``interval_s``: live evaluation period (15 s, Prometheus'
    ``evaluation_interval`` order). ``resolve_after_s``: hysteresis, a firing alert resolves only after
    its clear condition held this long (3 min). ``lookback_s``: longest call expected, bounds scans.
    ``resend_s``: Alertmanager re-send period for firing alerts (Prometheus re-sends every 1 min;
    endsAt = now + 4 x resend, as Prometheus does). ``external_url``: base of generatorURL links.
    """

    interval_s: float = 15.0
    resolve_after_s: int = 180
    lookback_s: int = 900
    resend_s: int = 60
    external_url: str = "http://127.0.0.1:8501/alerts"
    evaluator_id: str = "infercost"
    degradation: DegradationConfig = field(default_factory=DegradationConfig)
    retry: RetryConfig = field(default_factory=RetryConfig)
    queue: QueueConfig = field(default_factory=QueueConfig)
    saturation: SaturationConfig = field(default_factory=SaturationConfig)
    cascade: CascadeConfig = field(default_factory=CascadeConfig)
    slo: SloConfig = field(default_factory=SloConfig)
    ingestion: IngestionConfig = field(default_factory=IngestionConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    spend_anomaly: SpendAnomalyConfig = field(default_factory=SpendAnomalyConfig)

    def validate(self) -> "AlertConfig":
        """Check every value; raise ValueError listing all problems at once. Returns self."""
        problems: list[str] = []

        def positive(path: str, value) -> None:
            if not isinstance(value, (int, float)) or value <= 0:
                problems.append(f"{path} must be > 0, got {value!r}")

        positive("interval_s", self.interval_s)
        positive("resolve_after_s", self.resolve_after_s)
        positive("resend_s", self.resend_s)
        d, r, q, s, slo = self.degradation, self.retry, self.queue, self.saturation, self.slo
        for path, value in [("degradation.window_s", d.window_s), ("degradation.ratio", d.ratio),
                            ("retry.window_s", r.window_s), ("retry.baseline_s", r.baseline_s),
                            ("queue.bucket_s", q.bucket_s), ("queue.windows", q.windows),
                            ("saturation.window_s", s.window_s), ("saturation.max_running", s.max_running),
                            ("cascade.within_s", self.cascade.within_s), ("slo.period_s", slo.period_s),
                            ("ingestion.max_lag_s", self.ingestion.max_lag_s),
                            ("budget.burn_ratio", self.budget.burn_ratio),
                            ("spend_anomaly.ratio", self.spend_anomaly.ratio)]:
            positive(path, value)
        if d.clear_ratio > d.ratio:
            problems.append(f"degradation.clear_ratio ({d.clear_ratio}) must be <= degradation.ratio ({d.ratio})")
        if r.clear_rate > r.min_rate:
            problems.append(f"retry.clear_rate ({r.clear_rate}) must be <= retry.min_rate ({r.min_rate})")
        if not 0 < s.kv_clear <= s.kv_ratio <= 1:
            problems.append(f"saturation needs 0 < kv_clear <= kv_ratio <= 1, got {s.kv_clear}, {s.kv_ratio}")
        for name in ("success_target", "goodput_target"):
            value = getattr(slo, name)
            if not 0 < value < 1:
                problems.append(f"slo.{name} must be in (0, 1), got {value!r}")
        for tier in slo.tiers:
            if tier.short_s >= tier.long_s:
                problems.append(f"slo tier {tier.name}: short window {tier.short_s}s must be < long window {tier.long_s}s")
        if not 0 < slo.rederive_fraction < 1:
            problems.append(f"slo.rederive_fraction must be in (0, 1), got {slo.rederive_fraction!r}")
        if problems:
            raise ValueError("invalid alert configuration: " + "; ".join(problems))
        return self

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "AlertConfig":
        """Build from a nested mapping (e.g. ``fleet.yaml``'s ``alerts:``); unknown keys and bad
        values are all reported in one ValueError."""
        problems: list[str] = []
        config = _build(cls, data or {}, "", problems)
        try:
            config.validate()
        except ValueError as exc:
            problems.append(str(exc).removeprefix("invalid alert configuration: "))
        if problems:
            raise ValueError("invalid alert configuration: " + "; ".join(problems))
        return config


def _build(kind, data: dict[str, Any], prefix: str, problems: list[str]):
    if not isinstance(data, dict):
        problems.append(f"{prefix or 'alerts'} must be a mapping, got {type(data).__name__}")
        return kind()
    fields = {f.name: f for f in dataclasses.fields(kind)}
    values = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in fields:
            problems.append(f"unknown setting {path!r}")
            continue
        default = getattr(kind(), key) if key != "tiers" else None
        if key == "tiers":
            try:
                values[key] = [BurnTier(**t) for t in value]
            except TypeError as exc:
                problems.append(f"{path}: {exc}")
        elif dataclasses.is_dataclass(default):
            values[key] = _build(type(default), value, f"{path}.", problems)
        elif isinstance(default, bool) or (isinstance(default, (int, float)) and not isinstance(value, (int, float))):
            problems.append(f"{path} must be a number, got {value!r}")
        elif isinstance(default, int) and isinstance(value, float) and not value.is_integer():
            problems.append(f"{path} must be a whole number, got {value!r}")
        else:
            values[key] = type(default)(value) if isinstance(default, (int, float)) and not isinstance(default, bool) else value
    return kind(**values)
