"""Two simulated weeks for the weekly-review tests: virtual-time emulator -> OTLP -> ingest -> cost jobs.

Week 2026-W47: a quiet 20-minute slice on Tuesday 10:00 UTC, H100 at $2.00/GPU-hour.
Week 2026-W48: the same slice a week later, H100 at $2.50/GPU-hour from Monday 2026-11-23 00:00
(a price change), more traffic, replica r1 crashing mid-stream and a burst of HTTP 429s (the
incident), and the alert the evaluator would record for it. Small on purpose: the whole scenario
(simulation, ingestion, jobs) takes seconds.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collectors.ingest import ingest_metrics, ingest_traces
from schema.fleet import parse_fleet, sync_fleet
from schema.jobs import run_jobs
from schema.queries.alerts import AlertChange, insert_alert_changes
from serving.emulator.faults import FaultEvent
from serving.emulator.fleet_sim import ReplicaSpec, simulate
from serving.emulator.otlp import MemorySink
from serving.plans import RetryPolicy
from serving.workloads.builder import build_plans

UTC = timezone.utc
WEEK1_START = datetime(2026, 11, 17, 10, 0, tzinfo=UTC)  # Tuesday of 2026-W47
WEEK2_START = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)  # Tuesday of 2026-W48
SLICE_S = 1200.0
PRICE_W47 = 2.0
PRICE_W48 = 2.5
NOW = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)  # the Monday-morning run

FLEET_YAML = """
gpu_types:
  H100:
    prices:
      - {usd_per_gpu_hour: 2.0, valid_from: 2026-01-01}
      - {usd_per_gpu_hour: 2.5, valid_from: 2026-11-23}
replicas:
  r0: {gpu_type: H100, gpu_count: 1}
  r1: {gpu_type: H100, gpu_count: 1}
  r2: {gpu_type: H100, gpu_count: 1}
"""

INCIDENT = dict(rule="cascading_degradation", severity="critical", replica="r1",
                started=WEEK2_START + timedelta(seconds=300), resolved=WEEK2_START + timedelta(seconds=720),
                cost_usd=0.42, summary="r1 crashed mid-stream; client retries and 429s followed")


def _ingest(store, sink: MemorySink) -> None:
    traces = ExportTraceServiceRequest()
    for req in sink.traces:
        traces.resource_spans.extend(req.resource_spans)
    metrics = ExportMetricsServiceRequest()
    for req in sink.metrics:
        metrics.resource_metrics.extend(req.resource_metrics)
    for result in (ingest_traces(store, traces), ingest_metrics(store, metrics)):
        assert result.rejected == 0, result.message


def _week(store, start: datetime, *, seed: int, rate_scale: float, faults) -> dict:
    plans = build_plans("mooncake", duration_s=SLICE_S, rate_scale=rate_scale, seed=seed,
                        tenants=["acme", "globex"], max_tokens_cap=300)
    sink = MemorySink()
    summary = simulate(plans, [ReplicaSpec(f"r{i}") for i in range(3)], start_time_ns=int(start.timestamp()) * 10**9,
                       policy="least_loaded", retry_policy=RetryPolicy(timeout_s=30, max_attempts=3),
                       faults=faults, sink=sink, seed=seed, metrics_interval_s=15)
    _ingest(store, sink)
    # The jobs' "now" a few minutes past the slice: every task has its root span by then.
    run_jobs(store, start=start - timedelta(minutes=1), end=start + timedelta(seconds=summary.sim_seconds + 240))
    return {"plans": len(plans), "summary": summary}


def build(store) -> dict:
    """Fill ``store`` with both weeks and run the cost jobs; returns what was simulated."""
    sync_fleet(store, parse_fleet(FLEET_YAML))
    week1 = _week(store, WEEK1_START, seed=1, rate_scale=0.06, faults=[])
    week2 = _week(store, WEEK2_START, seed=2, rate_scale=0.08, faults=[
        FaultEvent(300, "r1", "crash", until_s=480),
        FaultEvent(600, "*", "error_rate", {429: 0.3}, until_s=900),
    ])
    i = INCIDENT
    base = dict(alert_id="a-cascade-1", rule=i["rule"], alert_key="r1", severity=i["severity"], replica=i["replica"],
                started_at=i["started"], summary=i["summary"], description="test incident", evidence={"chain": []},
                est_cost_usd=i["cost_usd"], cost_source="cost_engine")
    insert_alert_changes(store, [
        AlertChange(event_time=i["started"], state="firing", fired_at=i["started"], resolved_at=None, **base),
        AlertChange(event_time=i["resolved"], state="resolved", fired_at=i["started"], resolved_at=i["resolved"], **base),
    ])
    return {"week1": week1, "week2": week2}
