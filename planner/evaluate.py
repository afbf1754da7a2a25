"""One candidate, end to end: replay the workload in virtual time, run the cost jobs, read the results.

Position: planner (wiring: serving simulator -> collectors' ingest -> schema's cost jobs
and named queries). Each replay writes into a **scratch store**, a migrated database of its own
(one chDB directory per worker process), so the numbers come from the same SQL as the measured
ones: ``schema.jobs.run_jobs`` then ``schema.queries.cost.period_summary`` and
``schema.queries.planner.task_latency``. What the scratch store leaves out, and why it cannot
change a cost figure:

* the materialized views that feed only the dashboard, the alerts and late-data recomputation
  (``sql/scratch_prune.sql``: the ops rollups, the gateway-attempt rollups, the trace-id lookup,
  ``late_minutes``), which ``run_jobs`` never reads, and the raw span rows (``otel_traces`` is a
  Null table there, ``sql/scratch_null_traces.sql``: the views the jobs read -- ``llm_calls``,
  ``task_spans``, ``gateway_requests`` -- still fill on every insert, and ``replica_models``, which
  ``llm_calls`` reads, fills from the gauges);
* the replicas' histogram metric points (TTFT/ITL/e2e/queue-time histograms) and the per-finish-
  reason ``vllm:request_success``: the jobs read histograms only to call a replica-minute *up*
  (``job_replica_gauges``), and every scrape that writes them also writes the gauges, which are kept;
  nothing reads ``vllm:request_success``. Kept: the gauges (queue, running, KV usage; the model_name
  label for ``replica_models``) and the token, prefix-cache and preemption counters
  (``job_engine_counters``), 8 of a scrape's 16 points.

A candidate **meets its SLOs** when, for every task type with a latency budget, at least
``slo_target`` (default 95 %) of its tasks succeeded within every budget (``tasks.slo_met``): the
same as "p95 latency within budget" with failed and abandoned tasks counted as misses, except tasks
their client failed with every call answered (``client_failed_tasks``), which fail on any fleet.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from schema.queries import num as _num

SQL_DIR = Path(__file__).with_name("sql")
SCRATCH_DATABASE = "planner_scratch"
PROGRESS_EVERY = 256  # tasks between progress reports
JOBS_SHARE = 0.25  # the cost jobs' share of a candidate's work, for the progress bar (measured ~0.2-0.3)
WASTE = ("useful", "retry_waste", "failed_task_waste", "unattributed", "pending", "idle")


def _statements(name: str) -> list[str]:
    from schema.jobs import sql_statements

    return sql_statements(SQL_DIR / f"{name}.sql")


class Scratch:
    """A migrated scratch database for replays; :meth:`reset` empties it between candidates."""

    def __init__(self, store):
        self.store = store

    @classmethod
    def open(cls, url: str, database: str = SCRATCH_DATABASE) -> "Scratch":
        """Open (create, migrate, prune) the scratch database at ``url`` (``chdb://<dir>`` or a server)."""
        from schema import jobs
        from schema.migrate import migrate
        from schema.store import connect

        store = connect(url, database)
        scratch = cls(store)
        scratch.drop()  # always fresh: a scratch database left by a killed run starts over
        store = scratch.store = connect(url, database)
        migrate(store, retention_days=3650)  # replayed periods may lie in the past: no TTL surprise
        # the explicit runner computes the window; the periodic chain must not. Stopping waits for the
        # refresh migrate started (it computes now minus a day and would append its rows to the first
        # replay's); then the tables are emptied.
        jobs.stop(store)
        for statement in _statements("scratch_prune") + _statements("scratch_null_traces"):
            store.command(statement, tag="planner.scratch.prune")
        scratch.reset()
        return scratch

    def reset(self) -> None:
        from schema.store import validate_identifier

        rows = self.store.query(_statements("scratch_tables")[0], {"database": self.store.database},
                                tag="planner.scratch.tables").result_rows
        for (name,) in rows:
            self.store.command(f"TRUNCATE TABLE `{validate_identifier(name)}`", tag="planner.scratch.truncate")

    def drop(self) -> None:
        from schema.store import validate_identifier

        self.store.command(f"DROP DATABASE IF EXISTS `{validate_identifier(self.store.database)}` SYNC",
                           tag="planner.scratch.drop")


DROPPED_METRICS = ("vllm:request_success",)  # and every histogram (module docstring)


class CostMetricsSink:
    """An ingest sink that keeps spans and the metric points the cost jobs read (module docstring)."""

    def __init__(self, ingest):
        self.ingest = ingest

    def __call__(self, request):
        if isinstance(request, ExportMetricsServiceRequest):
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    keep = [m for m in sm.metrics
                            if m.WhichOneof("data") != "histogram" and m.name not in DROPPED_METRICS]
                    if len(keep) != len(sm.metrics):
                        del sm.metrics[:]
                        sm.metrics.extend(keep)
        return self.ingest(request)


def counted(plans, report, every: int = PROGRESS_EVERY):
    """Yield ``plans``, calling ``report(n)`` every ``every`` plans and with the remainder at the end."""
    n = 0
    for p in plans:
        yield p
        n += 1
        if n == every:
            report(n)
            n = 0
    if n:
        report(n)


@dataclass
class CandidateResult:
    """What a replay of one candidate produced. Money in USD over the period, latencies seconds,
    ratios 0..1; ``per_type``: task type -> dict of the ``planner_task_latency`` columns +
    ``meets_slo``; ``error``: set when the candidate could not be evaluated."""

    name: str
    spec: dict
    origin: str
    spend_usd: float = 0.0
    cpst_usd: float | None = None
    attributed_cpst_usd: float | None = None
    idle_ratio: float | None = None
    goodput_per_hour: float | None = None
    tasks: int = 0
    successful_tasks: int = 0
    ttft_p95_s: float | None = None
    e2e_p95_s: float | None = None
    waste: dict = field(default_factory=dict)
    per_type: dict = field(default_factory=dict)
    meets_slo: bool = False
    slo_attainment_min: float | None = None
    prefix_hit_rate: float | None = None
    hourly: list = field(default_factory=list)  # (hour ISO, tasks, unsuccessful, ttft p95 s)
    compare: dict = field(default_factory=dict)  # planner.backtest.figures, when replayed for the backtest
    incidents: bool = False  # replayed under the measured incidents (else fault-free)
    sim: dict = field(default_factory=dict)
    wall_seconds: float = 0.0
    error: str = ""

    @property
    def gpus(self) -> int:
        return sum(p["count"] * p["gpu_count"] for p in self.spec["pools"])

    @property
    def replicas(self) -> int:
        return sum(p["count"] for p in self.spec["pools"])


def fleet_config(base: dict, candidate):
    """``schema.fleet.Fleet`` for a scratch store: ``base`` (prices, allocation, SLOs, windows) with
    the candidate's replicas."""
    from schema.fleet import Fleet

    replicas = {r.id: {"gpu_type": r.gpu_type, "gpu_count": r.gpu_count} for r in candidate.replicas()}
    return Fleet.model_validate({**base, "replicas": replicas})


def read_results(store, start: datetime, end: datetime, slo_target: float) -> dict:
    """The candidate's figures from a store whose cost jobs ran over ``[start, end)``."""
    from schema.queries import cost, review
    from schema.queries import planner as pq

    row = cost.period_summary(store, start, end).iloc[0]
    spend = float(row["spend_usd"] or 0.0)
    latency = pq.task_latency(store, start, end)
    per_type, attain = {}, []
    overall = {}
    for r in latency.to_dict("records"):
        rec = {k: (_num(v) if k != "task_type" else v) for k, v in r.items()}
        if r["task_type"] == "":
            overall = rec
            continue
        has_budget = rec["slo_ttft_ms"] is not None or rec["slo_e2e_ms"] is not None
        rec["meets_slo"] = (not has_budget) or (rec["slo_attainment"] or 0.0) >= slo_target
        if has_budget:
            attain.append(rec["slo_attainment"] or 0.0)
        per_type[r["task_type"]] = rec
    prefix = review.prefix_cache(store, start, end)
    queries = float(prefix["query_tokens"].sum()) if len(prefix) else 0.0
    hourly = [(pd.Timestamp(h).isoformat(), int(n), int(bad), _num(p95))
              for h, n, bad, p95 in pq.hourly_latency(store, start, end).itertuples(index=False)]
    return {
        "spend_usd": spend, "cpst_usd": _num(row["cpst_usd"]), "attributed_cpst_usd": _num(row["attributed_cpst_usd"]),
        "idle_ratio": float(row["idle_usd"]) / spend if spend > 0 else None,
        "goodput_per_hour": _num(row["goodput_per_hour"]), "tasks": int(row["tasks"]),
        "successful_tasks": int(row["successful_tasks"]),
        "ttft_p95_s": overall.get("ttft_p95_s"), "e2e_p95_s": overall.get("e2e_p95_s"),
        "waste": {k: float(row[f"{k}_usd"] or 0.0) for k in WASTE},
        "per_type": per_type, "meets_slo": all(t["meets_slo"] for t in per_type.values()) and bool(per_type),
        "slo_attainment_min": min(attain) if attain else None,
        "prefix_hit_rate": float(prefix["hit_tokens"].sum()) / queries if queries > 0 else None,
        "hourly": hourly,
    }


def evaluate(scratch: Scratch, workload, candidate, fleet_base: dict, *, plans=None, seed: int = 0,
             slo_target: float = 0.95, report=None, faults=None, compare=None) -> CandidateResult:
    """Replay ``workload`` (or ``plans``, e.g. a resampled week) on ``candidate`` in ``scratch``.

    ``report(units)``: progress callback (simulated tasks, then the jobs' share). ``faults``:
    ``FaultEvent`` list naming the candidate's replicas (None: fault-free). ``compare``: excluded
    windows ((from, to) UTC) for the backtest's figures (``planner.backtest.figures``; None: not
    read). Returns a :class:`CandidateResult`; raises the simulator's ValueError or the store's errors.
    """
    from collectors.ingest import BufferedIngest
    from schema import jobs
    from schema.fleet import sync_fleet
    from serving.emulator.fleet_sim import simulate

    began = time.perf_counter()
    plans = workload.plans if plans is None else plans
    report = report or (lambda n: None)
    scratch.reset()
    sync_fleet(scratch.store, fleet_config(fleet_base, candidate))
    ingest = BufferedIngest(scratch.store)
    start = workload.start.replace(tzinfo=timezone.utc)
    summary = simulate(counted(plans, report), candidate.replicas(), start_time_ns=int(start.timestamp()) * 10**9,
                       retry_policy=workload.client, sink=CostMetricsSink(ingest), seed=seed, metrics_interval_s=60.0,
                       total=len(plans), faults=list(faults or ()), **candidate.sim_kwargs())
    ingest.flush()
    if ingest.rejected:
        raise RuntimeError(f"the ingest path rejected {ingest.rejected} replayed spans or points: {ingest.messages[:1]}")
    sim_end = max(workload.end, workload.start + timedelta(seconds=summary.sim_seconds)) + timedelta(minutes=1)
    # One pass over the whole replay: chunking by day re-reads each day's look-back windows (a demo
    # week: 7.1-8.7 CPU-s in one chunk vs 20 CPU-s in daily chunks, measured).
    jobs.run_jobs(scratch.store, start=workload.start, end=sim_end, chunk=sim_end - workload.start)
    figures = read_results(scratch.store, workload.start, workload.end, slo_target)
    if compare is not None:
        from planner.backtest import figures as backtest_figures

        figures["compare"] = backtest_figures(scratch.store, workload.start, workload.end, compare)
    figures["incidents"] = bool(faults)
    report(max(1, int(len(plans) * JOBS_SHARE)))
    return CandidateResult(
        name=candidate.name, spec=candidate.spec(), origin=candidate.origin, **figures,
        sim={"tasks": summary.tasks, "calls": summary.calls, "attempts": summary.attempts,
             "engine_requests": summary.engine_requests, "timeouts": summary.timeouts,
             "client_retries": summary.client_retries, "rejections": summary.rejections,
             "scale_events": summary.scale_events, "preemptions": summary.preemptions,
             "spans": summary.spans, "metric_points": summary.metric_points},
        wall_seconds=time.perf_counter() - began)
