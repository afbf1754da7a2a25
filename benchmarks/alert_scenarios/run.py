"""Run a labelled scenario: simulate it in virtual time, put its telemetry into a store, replay the
alert evaluator over it and keep every state change and notification.

``load(store, scenario)`` simulates the fleet (serving.emulator.fleet_sim) and ingests its OTLP output
(collectors.ingest.BufferedIngest), plus the scraper's ``up`` gauge (collectors.scraper.up_row: 1
for a scrape that answered, 0 for a replica that is down; none for a replica that left the scrape
targets or whose metric collection is lost). ``replay(store, scenario, config)`` steps an
:class:`alerts.evaluator.Evaluator` every ``step_s`` of virtual time (live evaluation runs every
15 s; 30 s keeps a run short) and returns an :class:`Outcome`.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from benchmarks.alert_scenarios.catalog import Scenario
from benchmarks.alert_scenarios.workload import make_plans

START = datetime(2026, 11, 2, 12, 0, tzinfo=timezone.utc)
START_NS = int(START.timestamp()) * 1_000_000_000
METRICS_INTERVAL_S = 10.0
TAIL_S = 180.0  # evaluation goes on this long after the workload ends


@dataclass
class Loaded:
    """What went into the store: the simulator's summary, when each replica reported metrics."""

    summary: object
    metric_times: dict = field(default_factory=dict)  # replica -> set of tick times (s)
    seconds: float = 0.0


class _Sink:
    """Forwards simulator output to the ingest, dropping what a receiver outage loses and noting
    which replica reported metrics when."""

    def __init__(self, ingest, outage: tuple[float, float] | None):
        self.ingest = ingest
        self.outage = None if outage is None else (START_NS + int(outage[0] * 1e9), START_NS + int(outage[1] * 1e9))
        self.metric_times: dict[str, set] = {}

    def __call__(self, request) -> None:
        if isinstance(request, ExportMetricsServiceRequest):
            t_ns = _metric_time(request)
            for rm in request.resource_metrics:
                replica = next((kv.value.string_value for kv in rm.resource.attributes
                                if kv.key == "service.instance.id"), "")
                self.metric_times.setdefault(replica, set()).add(round((t_ns - START_NS) / 1e9, 3))
            if self.outage and self.outage[0] <= t_ns < self.outage[1]:
                return
        elif self.outage is not None:
            request = self._drop_spans(request)
        self.ingest(request)

    def _drop_spans(self, request: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
        lo, hi = self.outage
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                keep = [s for s in ss.spans if not lo <= s.end_time_unix_nano < hi]
                if len(keep) != len(ss.spans):
                    del ss.spans[:]
                    ss.spans.extend(keep)
        return request


def _metric_time(request: ExportMetricsServiceRequest) -> int:
    return request.resource_metrics[0].scope_metrics[0].metrics[0].gauge.data_points[0].time_unix_nano


def up_rows(s: Scenario, metric_times: dict[str, set]):
    """The scraper's ``up`` points (collectors.scraper.up_row) at every metrics tick, per replica.

    1 when the replica reported at that tick; 0 when it did not (down: the scrape failed), except
    where no scrape happens: a replica drained for a planned scale-down left the targets, a replica
    whose metric collection is lost (``telemetry_loss`` metrics/all) has no scraper unless the
    scenario says the scrape fails (``scrape_fails_on_loss``: up = 0 while it serves), and a receiver
    outage loses the points. Scrapes go on after the workload ended (the simulator then stops
    ticking: an idle replica is still scraped) until the evaluation ends.
    """
    from collectors.otlp_metrics import MetricRows
    from collectors.scraper import ScrapeTarget, up_row

    rows = MetricRows()
    last = max((max(v) for v in metric_times.values() if v), default=0.0)
    ticks = [k * METRICS_INTERVAL_S for k in range(1, int((s.duration_s + TAIL_S) / METRICS_INTERVAL_S) + 1)]
    for plan in s.fleet:
        target = ScrapeTarget(url="", replica=plan.id, gpu_type=plan.gpu, gpu_count=1)
        seen = metric_times.get(plan.id, set())
        for t in ticks:
            if s.outage and s.outage[0] <= t < s.outage[1]:
                continue
            if t in seen:
                rows.gauge.append(up_row(target, START_NS + int(t * 1e9), True))
                continue
            active = [f for f in s.faults if f.replica in (plan.id, "*") and f.at_s <= t
                      and (f.until_s is None or t < f.until_s)]
            if any(f.kind == "drain" for f in active):
                continue
            lost = any(f.kind == "telemetry_loss" and (f.value or "all") in ("metrics", "all") for f in active)
            if lost and not s.scrape_fails_on_loss:
                continue
            idle_and_up = t > last and not lost and not _down_at_end(s, plan.id)
            rows.gauge.append(up_row(target, START_NS + int(t * 1e9), idle_and_up))
    return rows


def _down_at_end(s: Scenario, replica: str) -> bool:
    """Is ``replica`` crashed for good (a crash without restart) by the end of the workload?"""
    return any(f.kind == "crash" and f.until_s is None and f.replica in (replica, "*") for f in s.faults)


def load(store, s: Scenario) -> Loaded:
    """Simulate ``s`` and ingest everything into ``store``. Returns what was loaded."""
    from collectors.ingest import BufferedIngest, insert_metric_rows
    from serving.emulator.fleet_sim import simulate

    t0 = time.perf_counter()
    plans = make_plans(s.trace, s.arrivals, s.rate, s.duration_s, s.seed, s.offset_s, dict(s.mix), s.shape,
                       dict(s.shape_params))
    ingest = BufferedIngest(store, max_rows=200_000)
    sink = _Sink(ingest, s.outage)
    summary = simulate(plans, [r.spec() for r in s.fleet], start_time_ns=START_NS, policy=s.policy,
                       retry_policy=s.retry, faults=list(s.faults), sink=sink, seed=s.seed,
                       metrics_interval_s=METRICS_INTERVAL_S, gateway_retries=s.gateway_retries,
                       noise_sigma=s.noise_sigma, until_s=s.duration_s + 120)
    ingest.flush()
    insert_metric_rows(store, up_rows(s, sink.metric_times), tag="scenario.up")
    return Loaded(summary, sink.metric_times, time.perf_counter() - t0)


class CapturingDispatcher:
    """Stands in for alerts.notifiers.Dispatcher: keeps every batch submitted (no delivery)."""

    def __init__(self):
        self.batches: list[tuple[datetime, list, bool]] = []

    def submit(self, batch, resend_only: bool = False) -> None:
        self.batches.append((batch[0].at if batch else None, list(batch), resend_only))

    def start(self):
        return self

    def stop(self, timeout_s: float = 0.0) -> None:
        pass

    def notifications(self) -> list:
        """Firing notifications a person would get (re-sends to Alertmanager excluded)."""
        return [n for _, batch, resend in self.batches if not resend for n in batch if n.state == "firing"]


@dataclass
class Outcome:
    """A replayed scenario: transitions as dicts (t_s, rule, key, state, replica, note, culprit) and
    notifications as (t_s, rule, key, replica)."""

    scenario: Scenario
    changes: list = field(default_factory=list)
    notifications: list = field(default_factory=list)
    load_seconds: float = 0.0
    eval_seconds: float = 0.0
    steps: int = 0
    summary: object = None
    baseline: list = field(default_factory=list)  # baseline.Baseline episodes
    label: dict = field(default_factory=dict)  # label_check figures


def replay(store, s: Scenario, config=None, step_s: float = 30.0, until_s: float | None = None,
           evaluator=None) -> Outcome:
    """Evaluate every ``step_s`` from ``step_s`` to ``until_s`` (default: the run plus TAIL_S)."""
    from alerts.evaluator import Evaluator
    from benchmarks.alert_scenarios.baseline import Baseline

    dispatcher = CapturingDispatcher()
    base = Baseline()
    evaluator = evaluator or Evaluator(store, config, dispatcher=dispatcher)
    if evaluator.dispatcher is None:
        evaluator.dispatcher = dispatcher
    out = Outcome(s)
    end = until_s if until_s is not None else s.duration_s + TAIL_S
    t0 = time.perf_counter()
    t = step_s
    while t <= end + 1e-9:
        for tr in evaluator.step(START + timedelta(seconds=t)):
            a = tr.alert
            out.changes.append({"t": t, "rule": a.rule, "key": a.key, "state": tr.state.value, "replica": a.replica,
                                "note": tr.note, "culprit": a.figures.get("culprit", ""),
                                "chain": a.figures.get("chain") if a.rule == "cascading_degradation" else None})
        base.observe(t, evaluator)
        out.steps += 1
        t += step_s
    out.eval_seconds = time.perf_counter() - t0
    out.baseline = base.episodes
    out.notifications = [((n.at - START).total_seconds(), n.rule, n.key, n.replica)
                         for n in getattr(evaluator.dispatcher, "notifications", lambda: [])()]
    return out


def label_check(store, s: Scenario) -> dict:
    """What the simulation did around the first fault (ground truth from the telemetry, not from any
    rule): the fleet's retries per first attempt and the mean requests waiting per replica other than
    the faulty ones, in the 5 min before the fault and from 2 to 10 min after it. A true cascade needs
    the retries (>= 5%) and the other replicas' queues (>= 1 waiting on average and 2x before)."""
    from alerts import series

    if not s.faults:
        return {}
    at = min(f.at_s for f in s.faults)
    fs = series.load(store, START + timedelta(seconds=at + 600), 60, 15, 900, 5, 2)
    during, before = range(0, 8), range(10, 15)  # buckets: [at+2, at+10) and [at-5, at)
    f = fs.fleet

    def retry_rate(buckets):
        first = sum(f["client_attempts"][b] - f["client_retries"][b] for b in buckets)
        return sum(f["client_retries"][b] for b in buckets) / first if first else 0.0

    others = [r for n, r in fs.replicas.items() if n not in s.faulty]

    def waiting(buckets):
        vals = [r.get("waiting_mean", b) or 0.0 for r in others for b in buckets]
        return sum(vals) / len(vals) if vals else 0.0

    out = {"retry_before": round(retry_rate(before), 4), "retry_during": round(retry_rate(during), 4),
           "others_waiting_before": round(waiting(before), 2), "others_waiting_during": round(waiting(during), 2)}
    out["cascade"] = (out["retry_during"] >= 0.05 and out["others_waiting_during"] >= 1.0
                      and out["others_waiting_during"] >= 2 * out["others_waiting_before"])
    return out


def _migrate(store, attempts: int = 3) -> None:
    """Migrate a fresh database, retrying: on a loaded machine migration 1003's ``MODIFY QUERY`` of a
    refreshable view sometimes meets a refresh in flight and fails; migrations are idempotent."""
    from schema.migrate import MigrationError, migrate

    for attempt in range(attempts):
        try:
            migrate(store, retention_days=3650)
            return
        except MigrationError:
            if attempt == attempts - 1:
                raise
            time.sleep(1.0)


def run(s: Scenario, config=None, step_s: float = 30.0) -> Outcome:
    """Load ``s`` into a fresh in-memory database, replay it, drop the database. Returns the outcome."""
    from schema.store import connect

    store = connect("chdb://memory", f"scn_{uuid.uuid4().hex[:10]}")
    try:
        _migrate(store)
        loaded = load(store, s)
        out = replay(store, s, config, step_s)
        out.load_seconds, out.summary = loaded.seconds, loaded.summary
        out.label = label_check(store, s)
        return out
    finally:
        try:
            store.command(f"DROP DATABASE IF EXISTS `{store.database}` SYNC", tag="scenario.drop")
        finally:
            store.close()
