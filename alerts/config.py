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
class SeriesConfig:
    """The per-replica and fleet series every replica rule and the cascade read (alerts/series.py):
    ``buckets`` buckets of ``bucket_s`` (24 x 1 min: the cascade's 10-min look-back plus a baseline
    before it). ``min_samples``: calls a per-bucket median needs (fewer: no figure for that bucket).
    ``min_same_type_peers``: a replica is compared with its GPU type when it has at least this many
    same-type peers (with fewer, a lone A100 among H100s or a pair of A100s, it is compared
    with the fleet and judged against its own recent baseline)."""

    bucket_s: int = 60
    buckets: int = 24
    min_samples: int = 5
    min_same_type_peers: int = 2


@dataclass
class DegradationConfig:
    """Rule 1, replica degradation: a replica slower than its peers on its own work, or failing.

    Speed: the speed ratio (alerts/series.py: per-token decode and per-prompt-token prefill latency
    against the median of its group, the smaller of the two) averaged over ``window_s`` (2 min),
    weighted by calls. With >= ``SeriesConfig.min_same_type_peers`` same-type peers it FIREs at
    ``ratio`` (1.5x); otherwise the ratio is divided by the replica's own baseline (median of
    its older buckets, at least ``baseline_buckets`` of them, frozen while the alert is active) and that
    quotient must reach ``ratio``. ``clear_ratio`` 1.2: the hysteresis band.
    Few calls: a bucket's figure needs ``SeriesConfig.min_samples`` calls, so a replica given 2-4 calls
    a minute (light load, or a slow replica a least-loaded gateway sends less) often has none in the
    window. Absence of evidence is no evidence of health: the window is then widened back, a bucket at
    a time up to ``widen_s`` (6 min: three windows, so evidence is at most that stale), until it holds
    ``min_calls`` (5, as one bucket's figure) calls, judged on their call-weighted median
    (alerts/rules_replica.py ``speed_evidence``). Judged on the window alone, a slow replica given few
    calls goes pending and is cancelled a minute later for "too few calls to compare its speed" (the
    demo's own incident does). Holding on an unknown speed, with the pending clock running, would fire
    on a minute-old reading with nothing newer to back it; widening judges every verdict on real calls. Still too few over ``widen_s``: an active alert holds in the no-data state (its last
    evidence kept), as without engine spans; no alert starts.
    Errors: failed attempts (error_class upstream_error or timeout of gateway attempts on it, engine
    finish 'error') / attempts >= ``error_rate_min`` (5%) and >= ``error_ratio`` (3x) the others'
    median (floored at ``error_floor``, 1%), with at least ``min_errors``; clears below ``error_clear``.
    Unanswered work, when its speed cannot be judged (too few engine spans: vLLM 0.32 exports no
    ``llm_request`` span for a request the client aborted, so a replica slowed until clients time out
    leaves almost none): clients gave up on (client_cancel) or the gateway timed out >= ``abandon_rate_min``
    (50%) of the attempts on it in every busy bucket, its peers' median answered share is >=
    ``answered_ratio`` (3x) its own (floored at ``error_floor``), and its attempts are at most
    ``abandon_load_ratio`` (1.3x) their median (a replica given more work than the rest is
    overloaded, not degraded); at least ``min_attempts`` attempts. Its peers: its GPU type's other
    replicas when it has any with ``min_attempts``, else every other replica (behind blind
    routing an overloaded fleet's A100s time out while its H100s answer, by design, not degradation).
    A firing alert whose replica stops reporting stays firing in a no-data state, and
    resolves after ``no_data_resolve_s`` without data (30 min: a replica retired while degraded).
    """

    window_s: int = 120
    ratio: float = 1.5
    clear_ratio: float = 1.2
    baseline_buckets: int = 4
    error_rate_min: float = 0.05
    error_ratio: float = 3.0
    error_floor: float = 0.01
    error_clear: float = 0.02
    min_errors: int = 3
    min_attempts: int = 10
    widen_s: int = 360
    min_calls: int = 5
    abandon_rate_min: float = 0.5
    answered_ratio: float = 3.0
    abandon_load_ratio: float = 1.3
    for_s: int = 60
    no_data_resolve_s: int = 1800


@dataclass
class ReplicaDownConfig:
    """Rule 8, replica down: nothing from the replica's engine (no engine spans, no
    successful gateway attempt) over ``window_s`` while its scrape fails (``up`` = 0) or the gateway
    still sends it attempts that fail (connection refused, 5xx: it routes to it or keeps re-probing
    it after an ejection). A planned scale-down (out of the gateway's pool and of the scrape targets)
    shows neither and raises nothing. ``for_s`` 60: a crash that restarts within a minute is a blip.
    ``share_window_s``: the period before the outage whose share of the fleet's calls is reported as
    capacity lost."""

    window_s: int = 60
    for_s: int = 60
    share_window_s: int = 600


@dataclass
class TelemetryConfig:
    """Rule 9, per-replica telemetry health, per source: ``spans`` (vLLM's llm_request) and
    ``metrics`` (scraped gauges). A source is lost when the replica demonstrably serves (at least
    ``min_served`` successful gateway attempts, or engine spans / running requests from the other
    source, over ``window_s``) while that source sent nothing, having sent in the older buckets (a
    call the gateway saw succeed has its engine span end within the same second; scrapes come every
    10-15 s, so one minute without any is no jitter). When
    every replica lost the same source at once it is one fleet-wide alert (key "") instead of one per
    replica. ``for_s`` 60."""

    window_s: int = 60
    min_served: int = 3
    for_s: int = 60


@dataclass
class RetryConfig:
    """Rule 2, retry amplification: retries per first attempt over ``window_s`` (5 min)
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
    """Rule 3, queue growth: fleet ``vllm:num_requests_waiting`` (sum of the replicas' means
    per series bucket) or the worst replica's engine queue-time p95 rising over ``windows`` consecutive
    buckets, to well above its own recent level.

    Rising = each bucket above the one before by at least ``min_step`` requests (``min_step_s`` for
    queue time), the newest at least ``min_waiting`` requests (``min_queue_p95_s``) and at least
    ``growth_ratio`` x the median of the older buckets (a busy fleet whose queue is never quite
    empty is not growing: noise).
    ``min_waiting`` (4 requests waiting, summed over the fleet) is also the absolute floor of the rule:
    it never fires with fewer requests waiting, whichever signal rose, when the fleet reports
    ``vllm:num_requests_waiting`` (a healthy 3-replica fleet fired on its queue-time p95
    rising to 2.5-5.5 s while 0-0.5 requests waited, a few long prompts queued behind each other:
    nothing an operator acts on). Set it to the smallest queue you would act on; a fleet that
    exports no waiting gauge is judged on queue time alone (``min_queue_p95_s``).
    Clears when the newest bucket is back to ``max(clear_waiting, clear_ratio x that median)``
    requests and likewise for queue time.
    ``windows`` 2 (not more): a slow replica's queue fills within ~2 min and then plateaus, since
    clients time out and abort what waited too long (the queue is bounded by arrival rate x client
    timeout), so a third rising minute often never comes. ``for_s`` 60.
    """

    windows: int = 2
    min_step: float = 0.5
    min_waiting: float = 4.0
    min_step_s: float = 0.25
    min_queue_p95_s: float = 2.0
    growth_ratio: float = 2.0
    clear_waiting: float = 2.0
    clear_queue_p95_s: float = 1.0
    clear_ratio: float = 1.5
    for_s: int = 60


@dataclass
class SaturationConfig:
    """Rule 4, saturation: over ``window_s`` a replica's mean KV-cache use >= ``kv_ratio``
    (default 90%), or requests waiting in its engine queue at every scrape (``vllm:num_requests_waiting``
    never 0, mean >= ``min_waiting``): it admits no more, whatever limit stopped it (``--max-num-seqs``,
    KV blocks, the token budget), so no launch value has to be configured; or, when given, its running
    requests at ``max_running`` / ``max_running_by_replica`` (your ``--max-num-seqs``). Clears below
    ``kv_clear`` (80%) with the queue emptied at some scrape (and running below ``running_clear`` x max).
    """

    window_s: int = 120
    kv_ratio: float = 0.90
    kv_clear: float = 0.80
    min_waiting: float = 1.0
    max_running: int | None = None
    max_running_by_replica: dict[str, int] = field(default_factory=dict)
    running_clear: float = 0.90
    for_s: int = 60


@dataclass
class CascadeConfig:
    """Rule 5, cascading degradation, chained from step changes in the signals, not from
    when other alerts started (a retry alert held up by bursts never restarts, and would never chain).

    Over the series' buckets (SeriesConfig):
    - retries: the fleet's retries per first attempt per bucket (client ``task.attempt`` >= 2, and the
      gateway's hidden retries: the larger) step up: the median of ``min_after`` buckets from the onset
      reaches ``retry_ratio`` x the median before (floored at ``retry_floor``) and the before level plus
      ``retry_delta``; the newest ``min_after`` buckets still above ``retry_floor``.
    - culprit: a replica whose speed ratio (its own baseline's multiple when it has too few same-type
      peers) steps up to ``speed_ratio``, or whose failed and abandoned attempts per attempt step up
      (``failure_floor``, ``failure_ratio``, ``failure_delta``) while its own attempts did not rise more
      than ``load_rise`` x (failures that its own load does not explain), with the onset no later than
      ``tolerance_s`` after the retries' and no earlier than ``within_s`` before. Failed and abandoned
      attempts count only when they stand out against the replica's peers (its GPU type's other
      replicas, else the fleet) in a bucket of the step: ``failure_ratio`` x their share and
      ``failure_delta`` above it, or their answered share ``failure_ratio`` x its own; abandoned ones
      only when its speed on its own work is not known to be normal then (an overloaded fleet
      times out everywhere, its blind-routed A100s first, and none of them is slower than its peers:
      that is queue growth and saturation, not a cascade). The earliest onset is the
      culprit; ties go to the larger share of the fleet's failed attempts ("where the retries come from").
    - pressure: the other replicas' summed ``vllm:num_requests_waiting`` steps up (``pressure_floor``,
      ``pressure_ratio``, ``pressure_delta``) no earlier than ``tolerance_s`` before the culprit's onset,
      or a saturation alert fires on another replica.
    Stays firing while retry amplification or queue growth persists (the sustaining effect of a
    metastable failure, OSDI'22) even after the culprit recovered. While it is open the culprit is
    judged again at every evaluation: when the named replica's evidence no longer holds (no longer a
    candidate, not degraded) and another replica's does (its trigger and the pressure after it; the
    open cascade's retries count as sustaining it), the cascade is resolved and fires again naming
    that replica. Cost fallback when the cost
    engine's tables are absent: fleet GPU-hours x ``gpu_hour_usd`` x the retry share of attempts
    (``gpu_hour_usd`` 2.50: an on-demand H100-class GPU-hour, order of magnitude of 2025 cloud list
    prices; configure yours).
    """

    within_s: int = 600
    tolerance_s: int = 60
    min_after: int = 2
    retry_floor: float = 0.05
    retry_ratio: float = 2.0
    retry_delta: float = 0.03
    min_first_attempts: int = 20
    speed_ratio: float = 1.5
    failure_floor: float = 0.1
    failure_ratio: float = 3.0
    failure_delta: float = 0.05
    load_rise: float = 1.3
    pressure_floor: float = 2.0
    pressure_ratio: float = 2.0
    pressure_delta: float = 1.5
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
    """Rule 6, SLO burn rate on task success and goodput over a ``period_s`` (30 d) SLO.

    ``success_target`` 0.99 and ``goodput_target`` 0.90 are our defaults (set yours). A tier whose
    factor >= 1 / (1 - target) could never fire (the error ratio would need to exceed 100%); it is
    re-derived to ``rederive_fraction`` (0.5) of that maximum, i.e. it fires when half the tasks in
    both windows are bad, and the alert's description says so. ``min_tasks`` 10 per short window;
    ``min_bad`` 3 bad tasks in the long window (a single failed task right after a start, with little
    history, is a burn rate of many x the budget and no incident).
    """

    period_s: int = 30 * 86400
    success_target: float = 0.99
    goodput_target: float = 0.90
    tiers: list[BurnTier] = field(default_factory=default_tiers)
    rederive_fraction: float = 0.5
    min_tasks: int = 10
    min_bad: int = 3
    lookback_s: int = 3600
    for_s: int = 0


@dataclass
class IngestionConfig:
    """Rule 7, ingestion health: newest-row lag (span ends or gauge points) >= ``max_lag_s``
    (2 min: 8 scrapes at the scraper's 15 s interval missed; an idle fleet is still scraped), receiver
    rejections since the last
    evaluation, a spool backlog >= ``spool_backlog_bytes`` (every accepted request passes through the
    receiver's spool, so a small backlog is normal; 64 MiB is the OTLP body cap, i.e. more than one
    full request waiting: store writes are falling behind or failing), store unavailable."""

    max_lag_s: int = 120
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
    ``group_wait_s``: alerts a cascade may explain (replica degradation, retry amplification, queue
    growth, saturation) are notified this long after they fire, if still firing and not inhibited by
    then (Alertmanager's group_wait, 30 s by default; 120 s here because a cascade's chain completes
    about two minutes after its first member fires), so one incident makes one notification.
    """

    interval_s: float = 15.0
    resolve_after_s: int = 180
    lookback_s: int = 900
    resend_s: int = 60
    external_url: str = "http://127.0.0.1:8501/alerts"
    evaluator_id: str = "infercost"
    group_wait_s: int = 120
    series: SeriesConfig = field(default_factory=SeriesConfig)
    degradation: DegradationConfig = field(default_factory=DegradationConfig)
    down: ReplicaDownConfig = field(default_factory=ReplicaDownConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
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
                            ("queue.windows", q.windows),
                            ("saturation.window_s", s.window_s), ("series.bucket_s", self.series.bucket_s),
                            ("series.buckets", self.series.buckets), ("down.window_s", self.down.window_s),
                            ("telemetry.window_s", self.telemetry.window_s),
                            ("cascade.within_s", self.cascade.within_s), ("slo.period_s", slo.period_s),
                            ("ingestion.max_lag_s", self.ingestion.max_lag_s),
                            ("budget.burn_ratio", self.budget.burn_ratio),
                            ("spend_anomaly.ratio", self.spend_anomaly.ratio)]:
            positive(path, value)
        if s.max_running is not None:
            positive("saturation.max_running", s.max_running)
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
        elif default is None:  # optional numbers (saturation.max_running)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                problems.append(f"{path} must be a whole number or null, got {value!r}")
            else:
                values[key] = value
        elif isinstance(default, bool) or (isinstance(default, (int, float)) and not isinstance(value, (int, float))):
            problems.append(f"{path} must be a number, got {value!r}")
        elif isinstance(default, int) and isinstance(value, float) and not value.is_integer():
            problems.append(f"{path} must be a whole number, got {value!r}")
        else:
            values[key] = type(default)(value) if isinstance(default, (int, float)) and not isinstance(default, bool) else value
    return kind(**values)
