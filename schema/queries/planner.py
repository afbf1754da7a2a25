"""Named queries of the capacity and cost planner (``planner_*.sql``).

Position in the flow: serving -> collectors -> **schema** -> app/alerts (the planner itself,
``planner``, is wiring and calls these). Two groups:

* workload extraction over a period ``[start, end)``: the tasks that started in it and their steps
  (what the clients asked for), client and gateway behaviour, the fleet that served it;
* the planner's stored results (``planner_runs``, ``planner_candidates``,
  ``planner_candidate_types``, migration 1008) for the dashboard page and the weekly review.

Times are UTC ``datetime`` (naive = UTC); every function returns a pandas DataFrame with the
columns listed (empty, with those columns, when nothing matches) and raises the store's typed
errors.
"""

from __future__ import annotations

from datetime import datetime

import pandas as pd

from schema import queries

COLUMNS: dict[str, tuple[str, ...]] = {
    "planner_workload_tasks": ("task_id", "task_type", "tenant_id", "tenant_priority", "model", "start_time",
                               "outcome", "e2e_s", "slo_ttft_ms", "slo_e2e_ms"),
    "planner_workload_steps": ("task_id", "step", "step_start", "calls", "max_attempt", "ok"),
    "planner_workload_units": ("task_id", "units"),
    "planner_client_attempts": ("task_id", "step", "attempt", "start_time", "end_time", "duration_s", "status",
                                "error_type"),
    "planner_timeouts": ("timeouts", "timeout_median_s", "attempts", "max_attempt", "retries"),
    "planner_gateway": ("kind", "name", "n", "max_retries"),
    "planner_replicas": ("replica", "gpu_type", "gpu_count", "model", "engine_calls", "up_minutes", "spend_usd",
                         "running_max", "running_max_waiting", "waiting_scrapes", "kv_usage_max"),
    "planner_task_latency": ("task_type", "tasks", "successful_tasks", "slo_met_tasks", "slo_attainment",
                             "ttft_p50_s", "ttft_p95_s", "e2e_p50_s", "e2e_p95_s", "slo_ttft_ms", "slo_e2e_ms"),
    "planner_runs": ("run_id", "created_at", "period_start", "period_end", "status", "backtest_passed",
                     "measured_cpst_usd", "replayed_cpst_usd", "measured_ttft_p95_s", "replayed_ttft_p95_s",
                     "current_candidate", "recommended_candidate", "predicted_saving_ratio",
                     "predicted_saving_usd", "candidates", "wall_seconds", "message"),
    "planner_run": ("run_id", "created_at", "period_start", "period_end", "status", "backtest_passed",
                    "measured_cpst_usd", "replayed_cpst_usd", "measured_ttft_p95_s", "replayed_ttft_p95_s",
                    "tolerance", "current_candidate", "recommended_candidate", "predicted_saving_ratio",
                    "predicted_saving_usd", "candidates", "wall_seconds", "message", "assumptions", "workload",
                    "levers"),
    "planner_run_candidates": ("candidate", "origin", "spec", "is_current", "meets_slo", "on_frontier",
                               "recommended", "replicas", "gpus", "spend_usd", "cpst_usd", "attributed_cpst_usd",
                               "idle_ratio", "goodput_per_hour", "tasks", "successful_tasks", "ttft_p95_s",
                               "e2e_p95_s", "slo_attainment_min", "useful_usd", "retry_waste_usd",
                               "failed_task_waste_usd", "unattributed_usd", "pending_usd", "idle_usd",
                               "wall_seconds"),
    "planner_run_task_types": ("candidate", "task_type", "tasks", "successful_tasks", "slo_attainment",
                               "ttft_p95_s", "e2e_p95_s", "slo_ttft_ms", "slo_e2e_ms", "meets_slo"),
    "planner_run_for_period": ("run_id",),
    "planner_hourly_latency": ("hour", "tasks", "unsuccessful_tasks", "ttft_p95_s"),
    "planner_backtest_tasks": ("hour", "task_type", "tasks", "successful_tasks", "ttft_p95_s", "calls", "attempts",
                               "prompt_tokens", "output_tokens"),
    "planner_backtest_replicas": ("hour", "spend_usd", "hit_rate", "running_avg", "waiting_avg"),
    "planner_incident_alerts": ("alert_id", "rule", "replica", "began", "resolved", "last_summary"),
    "planner_replica_speed": ("minute", "replica", "up", "running_avg", "queue_waiting_avg", "generation_tokens",
                              "itl_p50_s"),
    "planner_telemetry_span": ("first_minute", "up_minutes"),
    "planner_gpu_prices": ("gpu_type", "valid_from", "usd_per_gpu_hour"),
    "planner_cost_settings": ("w_prefill", "w_decode", "abandon_timeout_s", "default_gpu_type", "default_gpu_count",
                              "job_window_s", "max_call_s", "task_lookback_s"),
}


def _run(store, name: str, **params) -> pd.DataFrame:
    df = queries.run(store, name, **params)
    if len(df.columns) == 0:  # chDB returns no columns for no rows: keep the documented ones
        df = pd.DataFrame(columns=list(COLUMNS[name]))
    return df


def _period(name: str, store, start: datetime, end: datetime) -> pd.DataFrame:
    start, end = queries.naive_utc(start), queries.naive_utc(end)
    if end <= start:
        raise ValueError(f"time range is empty: start {start.isoformat()} is not before end {end.isoformat()}")
    return _run(store, name, start=start, end=end)


def workload_tasks(store, start: datetime, end: datetime) -> pd.DataFrame:
    """Tasks that started in ``[start, end)`` and ended before ``end`` (cost job's ``tasks`` rows of the
    period's minutes: not a task still running at ``end``), in start order: ``task_id``,
    ``task_type``, ``tenant_id``, ``tenant_priority``, ``model``, ``start_time`` (UTC, ns),
    ``outcome``, ``e2e_s`` (seconds), ``slo_ttft_ms``, ``slo_e2e_ms`` (milliseconds or NaN)."""
    return _period("planner_workload_tasks", store, start, end)


def workload_steps(store, start: datetime, end: datetime) -> pd.DataFrame:
    """Steps of those tasks from their client attempt spans, one row per (task, step) in start
    order: ``step_start``, ``calls`` (first attempts), ``max_attempt``, ``ok`` (list of (input,
    output) token pairs of the attempts that succeeded, in call order: task.call, then start)."""
    return _period("planner_workload_steps", store, start, end)


def workload_units(store, start: datetime, end: datetime) -> pd.DataFrame:
    """Units of GPU work of those tasks (``call_costs``), one row per task: ``units`` = list of
    (start, prompt tokens, output tokens, ok 0/1) in start order."""
    return _period("planner_workload_units", store, start, end)


def client_attempts(store, start: datetime, end: datetime) -> pd.DataFrame:
    """Client attempt spans of the retried steps: ``task_id``, ``step``, ``attempt``, ``start_time``,
    ``end_time`` (UTC, ns), ``duration_s``, ``status``, ``error_type``."""
    return _period("planner_client_attempts", store, start, end)


def timeouts(store, start: datetime, end: datetime) -> pd.DataFrame:
    """One row: ``timeouts`` (client attempts ended by the client's timeout), ``timeout_median_s``,
    ``attempts``, ``max_attempt``, ``retries`` (attempts numbered > 1)."""
    return _period("planner_timeouts", store, start, end)


def gateway(store, start: datetime, end: datetime) -> pd.DataFrame:
    """Gateway behaviour: rows ``kind`` = 'policy' (``name`` policy, ``n`` upstream attempts) and
    'admission' (``name`` admitted | rejected, ``n`` requests, ``max_retries`` most hidden retries)."""
    return _period("planner_gateway", store, start, end)


def replicas(store, start: datetime, end: datetime) -> pd.DataFrame:
    """Replicas up in the period: ``replica``, ``gpu_type``, ``gpu_count``, ``model``,
    ``engine_calls``, ``up_minutes``, ``spend_usd``, ``running_max``, ``running_max_waiting``
    (largest running batch while requests waited), ``waiting_scrapes``, ``kv_usage_max`` (0..1)."""
    return _period("planner_replicas", store, start, end)


def task_latency(store, start: datetime, end: datetime) -> pd.DataFrame:
    """Per task type (and ``''`` = all) of the tasks that ended in the period: ``tasks``,
    ``successful_tasks``, ``slo_met_tasks``, ``client_failed_tasks`` (failed with every call answered),
    ``slo_attainment`` (0..1 of the tasks less the client-failed ones; other failures count as misses),
    ``ttft_p50_s``, ``ttft_p95_s``, ``e2e_p50_s``, ``e2e_p95_s`` (seconds, successful tasks),
    ``slo_ttft_ms``, ``slo_e2e_ms`` (the budget most tasks carried)."""
    return _period("planner_task_latency", store, start, end)


def hourly_latency(store, start: datetime, end: datetime) -> pd.DataFrame:
    """Per hour (``hour``, UTC) of the tasks that ended in it: ``tasks``, ``unsuccessful_tasks``,
    ``ttft_p95_s`` (seconds, successful tasks)."""
    return _period("planner_hourly_latency", store, start, end)


def _windows(excluded) -> dict:
    pairs = [(queries.naive_utc(a), queries.naive_utc(b)) for a, b in (excluded or ())]
    return {"ex_from": [a for a, _ in pairs], "ex_to": [b for _, b in pairs]}


def backtest_tasks(store, start: datetime, end: datetime, excluded=()) -> pd.DataFrame:
    """The tasks that ended in the period outside ``excluded`` (``(from, to)`` UTC pairs), per hour
    and type, per hour (``task_type`` ''), per type and overall (``hour`` 1970-01-01): ``tasks``,
    ``successful_tasks``, ``ttft_p95_s`` (seconds), ``calls``, ``attempts``, ``prompt_tokens``,
    ``output_tokens``."""
    start, end = queries.naive_utc(start), queries.naive_utc(end)
    return _run(store, "planner_backtest_tasks", start=start, end=end, **_windows(excluded))


def backtest_replicas(store, start: datetime, end: datetime, excluded=()) -> pd.DataFrame:
    """The fleet per hour and overall (``hour`` 1970-01-01) outside ``excluded``: ``spend_usd``,
    ``hit_rate`` (0..1, engine counters), ``running_avg`` and ``waiting_avg`` (requests, up minutes)."""
    start, end = queries.naive_utc(start), queries.naive_utc(end)
    return _run(store, "planner_backtest_replicas", start=start, end=end, **_windows(excluded))


def incident_alerts(store, start: datetime, end: datetime) -> pd.DataFrame:
    """Replica alerts that fired and overlap the period: ``alert_id``, ``rule``, ``replica``,
    ``began``, ``resolved`` (NaT: still firing), ``last_summary``."""
    return _period("planner_incident_alerts", store, start, end)


def replica_speed(store, start: datetime, end: datetime) -> pd.DataFrame:
    """Per fleet replica and minute: ``minute``, ``replica``, ``up`` (0/1), ``running_avg``,
    ``queue_waiting_avg`` (requests), ``generation_tokens``, ``itl_p50_s`` (seconds, NaN: no call ended)."""
    return _period("planner_replica_speed", store, start, end)


def telemetry_start(store, start: datetime, end: datetime) -> datetime | None:
    """The first minute of ``[start, end)`` a fleet replica was up (naive UTC); None when none was."""
    df = _period("planner_telemetry_span", store, start, end)
    if not len(df) or not int(df["up_minutes"].iloc[0] or 0):
        return None
    return queries.naive_utc(pd.Timestamp(df["first_minute"].iloc[0]).to_pydatetime())


# --- stored results (migration 1008) -------------------------------------------------------------

def runs(store, limit: int = 20) -> pd.DataFrame:
    """The latest planner runs, newest first (columns: ``COLUMNS['planner_runs']``)."""
    limit = int(limit)
    if not 1 <= limit <= 1000:
        raise ValueError(f"limit must be in 1..1000, got {limit}")
    return _run(store, "planner_runs", limit=limit)


def run(store, run_id: str) -> pd.DataFrame:
    """One run (one row, or none): the backtest, the recommendation, ``assumptions``, ``workload``
    and ``levers`` (JSON text)."""
    return _run(store, "planner_run", run_id=str(run_id))


def run_candidates(store, run_id: str) -> pd.DataFrame:
    """The candidates of one run, cheapest CPST first (columns: ``COLUMNS['planner_run_candidates']``;
    money USD over the run's period, ratios 0..1, latencies seconds)."""
    return _run(store, "planner_run_candidates", run_id=str(run_id))


def run_task_types(store, run_id: str) -> pd.DataFrame:
    """Per candidate and task type: latency quantiles vs the SLO and its attainment."""
    return _run(store, "planner_run_task_types", run_id=str(run_id))


def run_for_period(store, start: datetime, end: datetime, min_overlap: float = 0.9) -> str | None:
    """The newest run whose period covers at least ``min_overlap`` of ``[start, end)``; None if none."""
    start, end = queries.naive_utc(start), queries.naive_utc(end)
    df = _run(store, "planner_run_for_period", start=start, end=end, min_overlap=float(min_overlap))
    return str(df["run_id"].iloc[0]) if len(df) else None


def gpu_prices(store) -> pd.DataFrame:
    """Every configured price: ``gpu_type``, ``valid_from`` (UTC), ``usd_per_gpu_hour``."""
    return _run(store, "planner_gpu_prices")


def cost_settings(store) -> pd.DataFrame:
    """The newest cost settings (one row, or none before the first fleet sync)."""
    return _run(store, "planner_cost_settings")
