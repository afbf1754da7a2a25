"""Shared by the planner tests: a measured store made by the real producers (the virtual-time fleet
simulator's spans and metric points through the collectors' ingest path, then the cost jobs)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from collectors.ingest import BufferedIngest
from schema import jobs
from schema.fleet import parse_fleet, sync_fleet
from serving.emulator.fleet_sim import simulate

T0 = datetime(2026, 11, 2, 10, 0)  # naive UTC, a whole minute
FLEET_YAML = """
gpu_types:
  H100: {prices: [{usd_per_gpu_hour: 3.0}]}
  A100: {prices: [{usd_per_gpu_hour: 1.8}]}
slos:
  chat: {ttft_ms: 2000, e2e_ms: 60000}
"""


def ns(t: datetime) -> int:
    return int(t.replace(tzinfo=timezone.utc).timestamp()) * 1_000_000_000


def measured_store(store, plans, fleet, *, policy="least_loaded", retry_policy=None, seed=0, faults=(),
                   metrics_interval_s=60.0, hours=1.0, fleet_yaml=FLEET_YAML, **kw):
    """Sync prices, simulate ``plans`` on ``fleet`` from T0 into ``store`` and run the cost jobs over
    [T0, T0 + hours). Returns the SimSummary."""
    config = parse_fleet(fleet_yaml)
    config = config.model_validate({**config.model_dump(), "replicas": {
        r.id: {"gpu_type": r.gpu_type or ("A100" if "a100" in r.profile else "H100"), "gpu_count": 1} for r in fleet}})
    sync_fleet(store, config)
    ingest = BufferedIngest(store)
    summary = simulate(plans, fleet, start_time_ns=ns(T0), policy=policy, retry_policy=retry_policy, faults=faults,
                       sink=ingest, seed=seed, metrics_interval_s=metrics_interval_s, **kw)
    ingest.flush()
    assert ingest.rejected == 0, ingest.messages[:1]
    jobs.run_jobs(store, start=T0, end=T0 + timedelta(hours=hours))
    return summary
