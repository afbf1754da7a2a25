"""Migrations 0180 and 0240 re-plan the cost-job views (issue 18, item 4): their rows must be the old ones.

The views 0180 replaces (``job_resolved_calls``, ``job_reconciliation``, ``job_replica_spend``,
``job_tasks``) are
created again from 0064's text under ``<name>_0064`` in the test's database, and both versions
read the same scenario: counters with prefix-cache hits (cached tokens estimated from them),
minutes with counters and no span, minutes with spans and no counters, a crashed stream
(gap work), a reserved replica that is never up (one failed scrape), rooted tasks (success with a retry, failure), a rootless task abandoned inside the
window, an unattributed call. Each view's rows must match value by value; floats to 1e-12
relative (a sum whose terms are read in another order may differ in its last bit).
Migration 0520 replaced ``job_resolved_calls`` again, with new rules (tests/test_cost_evidence.py): its
0180 text is created under ``job_resolved_calls_0180`` and compared with 0064's.
"""

from __future__ import annotations

import math

import pytest

from schema import jobs
from schema.jobs import sql_statements
from schema.migrate import MIGRATIONS_DIR
from tests.producers import scrape, vllm_metrics_page
from tests.test_cost_support import _module_store, cstore, Spans, at, fleet_yaml, metrics_up, sync  # noqa: F401

REPLACED = ("job_resolved_calls", "job_reconciliation", "job_replica_spend", "job_tasks")
RUN_ID = 9_180_001


def ns(seconds: float) -> int:
    return int(at(seconds).timestamp() * 1e9)


def unix(seconds: float) -> float:
    return at(seconds).timestamp()


def scenario(store) -> None:
    # r3: reserved, billed every minute; its one scrape failed
    sync(store, fleet_yaml(w_prefill=0.25, replicas=("r1", "r2")).replace(
        "replicas:\n", "replicas:\n  r3: {gpu_type: A100, gpu_count: 2, billing: reserved}\n"))
    scrape(store, None, replica="r3", at_ns=ns(90))
    # r1: counters with prefix-cache hits every minute at +45 s, minute 3 with counters but no call
    totals = [(0, 0, 0), (1000, 20, 450), (1500, 70, 650), (1500, 300, 650), (1600, 310, 700)]
    for minute, (prompt, generation, cached) in enumerate(totals):
        scrape(store, vllm_metrics_page([{"running": 2, "waiting": 1, "prompt": prompt, "generation": generation,
                                          "cached": cached, "created": unix(0)}]),
               replica="r1", at_ns=ns(60 * minute + 45))
    # r2: gauges only until minute 2 (its calls there have no counters), counters from minute 3
    metrics_up(store, "r2", [0, 1, 2, 3, 4], counters={3: (50, 5), 4: (120, 40)})
    sp = Spans()
    # A (rooted, success): a crashed stream on r1 (no engine span: takes gap work), then its retry
    sp.task("trA", "A", 50, 140)
    sp.call(task_id="A", step="s", attempt=1, start=61, end=70, prompt=300, output=0, streamed=6, ok=False,
            partial=True, engine=False, trace="trA")
    sp.call(task_id="A", step="s", attempt=2, start=72, end=130, prompt=500, output=50, trace="trA")
    # F (rooted, failure) on r2, minutes 1-2, no counters there
    sp.task("trF", "F", 60, 170, outcome="failure")
    sp.call(task_id="F", step="x", start=65, end=150, prompt=200, output=40, replica="r2", trace="trF")
    # B (no root span): last call ends at 200 s, abandoned at 800 s, inside the window
    sp.call(task_id="B", step="y", start=185, end=200, prompt=100, output=10, replica="r2", trace="trB")
    # an unattributed engine request on r1 with no cached count anywhere: estimated from the hit rate
    sp.call(task_id=None, start=62, end=66, prompt=1000, output=20, client=False, gateway=False)
    sp.flush(store)


def fill_scratch(store, params: dict) -> None:
    """The run's counters, gauges and resolved calls into their scratch tables (run_inputs.sql,
    run_resolve.sql)."""
    for name in ("run_inputs", "run_resolve"):
        for statement in sql_statements(jobs.JOBS_DIR / f"{name}.sql"):
            store.command(statement, params, tag="test.views")


def drop_scratch(store, params: dict) -> None:
    for statement in sql_statements(jobs.JOBS_DIR / "drop_scratch.sql"):
        store.command(statement, params, tag="test.views")


def rows(store, sql: str, params: dict, key: list[str]):
    df = store.query_df(sql, params, tag="test.views")
    return df.sort_values(key, kind="stable").reset_index(drop=True)


def assert_same_rows(new, old, what: str) -> None:
    assert list(new.columns) == list(old.columns), what
    assert len(new) == len(old) and len(new) > 0, (what, len(new), len(old))
    for column in new.columns:
        for i, (a, b) in enumerate(zip(new[column].tolist(), old[column].tolist())):
            if isinstance(a, float) or isinstance(b, float):
                same = (a is None and b is None) or (a is not None and b is not None and (
                    (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12, abs=1e-15)))
            else:
                same = (a == b) or (a != a and b != b)  # NaT / NaN
            assert same, f"{what}: row {i} column {column}: 0180 {a!r} != 0064 {b!r}"


@pytest.mark.parametrize("lo, hi", [(0, 1200), (60, 180), (120, 1200)])
def test_replanned_views_give_0064s_rows(cstore, lo, hi):
    scenario(cstore)
    create_views(cstore, "0064_create_cost_jobs_v2.sql", REPLACED, "_0064", {})
    create_views(cstore, "0180_plan_cost_job_views_once.sql", ("job_resolved_calls",), "_0180", {})
    jobs.run_jobs(cstore, start=at(0), end=at(1200))  # call_costs, which job_tasks reads
    p = {"ws": at(lo), "we": at(hi), "run_id": RUN_ID}
    window = "ws = {ws:DateTime}, we = {we:DateTime}"
    resolved = rows(cstore, f"SELECT * FROM job_resolved_calls_0180({window})", p, ["trace_id", "call_id"])
    assert_same_rows(resolved, rows(cstore, f"SELECT * FROM job_resolved_calls_0064({window})", p,
                                    ["trace_id", "call_id"]), "job_resolved_calls")
    # the reconciliation reads the run's counters, gauges and resolved calls (0240), and so does the
    # spend (0240: by run_id)
    run = window + ", run_id = {run_id:UInt64}"
    fill_scratch(cstore, p)
    try:
        rec = rows(cstore, f"SELECT * FROM job_reconciliation({run})", p, ["replica", "minute"])
        assert_same_rows(rec, rows(cstore, f"SELECT * FROM job_reconciliation_0064({run})", p,
                                   ["replica", "minute"]), "job_reconciliation")
        spend = rows(cstore, f"SELECT * FROM job_replica_spend({run})", p, ["replica", "minute"])
        assert_same_rows(spend, rows(cstore, f"SELECT * FROM job_replica_spend_0064({window})", p,
                                     ["replica", "minute"]), "job_replica_spend")
    finally:
        drop_scratch(cstore, p)
    tasks = rows(cstore, f"SELECT * EXCEPT computed_at FROM job_tasks({window})", p, ["task_id"])
    assert_same_rows(tasks, rows(cstore, f"SELECT * EXCEPT computed_at FROM job_tasks_0064({window})", p,
                                 ["task_id"]), "job_tasks")
    if (lo, hi) == (0, 1200):
        # the scenario reaches the rewritten paths: an estimated cached count; minutes with counters
        # and no span work and the reverse; rooted and rootless tasks
        assert "estimate" in set(resolved["cached_source"])
        assert ((rec["span_work"] == 0) & rec["counter_prompt_tokens"].notna()).any()
        assert ((rec["span_work"] > 0) & rec["counter_prompt_tokens"].isna()).any()
        assert (rec["gap_work"] > 0).any()
        assert set(spend.loc[spend["replica"] == "r3", "up"]) == {0} and (spend["replica"] == "r3").sum() == 20
        assert ((spend["up_metrics"] == 1) & (spend["up_spans"] == 0)).any()
        assert set(tasks["outcome"]) == {"success", "failure", "abandoned"}
        assert set(tasks.loc[tasks["outcome"] == "abandoned", "has_root"]) == {0}


def create_views(store, migration: str, views: tuple[str, ...], suffix: str, renames: dict[str, str]) -> None:
    """``views`` as defined in ``migration``, created as ``<name><suffix>``, with the views they
    reference renamed by ``renames`` (so an old definition reads the other old definitions)."""
    for statement in sql_statements(MIGRATIONS_DIR / migration):
        for view in views:
            if statement.startswith(f"CREATE OR REPLACE VIEW {view} AS"):
                text = statement.replace(f"VIEW {view} AS", f"VIEW {view}{suffix} AS", 1)
                for old, new in renames.items():
                    text = text.replace(f"{old}(", f"{new}(")
                store.command(text, tag="test.views")


@pytest.mark.parametrize("lo, hi", [(0, 1200), (60, 180), (120, 1200)])
def test_materialized_counters_and_gauges_give_0180s_rows(cstore, lo, hi):
    """0240: the counters and gauges read from the run's scratch tables, and the gauges' one FULL
    OUTER JOIN, give the rows of the views they replace (0064's gauges and replica_minutes, 0180's
    reconciliation and spend, which expand the counters and gauges views per reference)."""
    scenario(cstore)
    # r2, minute 10: a counter point and no gauge (up by its metrics; the gauges' other-points side)
    cstore.insert("otel_metrics_sum", [[{"service.instance.id": "r2"}, "vllm:num_preemptions", at(610), at(0), 0.0]],
                  ("ResourceAttributes", "MetricName", "TimeUnix", "StartTimeUnix", "Value"), tag="test.views")
    create_views(cstore, "0064_create_cost_jobs_v2.sql", ("job_replica_gauges", "job_replica_minutes"), "_old",
                 {"job_replica_spend": "job_replica_spend_old", "job_replica_gauges": "job_replica_gauges_old"})
    create_views(cstore, "0180_plan_cost_job_views_once.sql", ("job_reconciliation", "job_replica_spend"), "_old",
                 {"job_replica_gauges": "job_replica_gauges_old"})
    jobs.run_jobs(cstore, start=at(0), end=at(1200))  # call_costs, which the spend and replica_minutes read
    p = {"ws": at(lo), "we": at(hi), "run_id": RUN_ID}
    window = "ws = {ws:DateTime}, we = {we:DateTime}"
    run = window + ", run_id = {run_id:UInt64}"
    key = ["replica", "minute"]
    gauges = rows(cstore, f"SELECT * FROM job_replica_gauges({window})", p, key)
    assert_same_rows(gauges, rows(cstore, f"SELECT * FROM job_replica_gauges_old({window})", p, key),
                     "job_replica_gauges")
    fill_scratch(cstore, p)
    try:
        # the scratch rows are the views' rows
        assert_same_rows(rows(cstore, "SELECT * EXCEPT (run_id, written_at) FROM replica_gauges_runs "
                                      "WHERE run_id = {run_id:UInt64}", p, key), gauges, "replica_gauges_runs")
        counters = rows(cstore, f"SELECT * FROM job_engine_counters({window})", p, key)
        assert_same_rows(rows(cstore, "SELECT * EXCEPT (run_id, written_at) FROM engine_counters_runs "
                                      "WHERE run_id = {run_id:UInt64}", p, key), counters, "engine_counters_runs")
        rec = rows(cstore, f"SELECT * FROM job_reconciliation({run})", p, key)
        assert_same_rows(rec, rows(cstore, f"SELECT * FROM job_reconciliation_old({run})", p, key),
                         "job_reconciliation")
        spend = rows(cstore, f"SELECT * FROM job_replica_spend({run})", p, key)
        assert_same_rows(spend, rows(cstore, f"SELECT * FROM job_replica_spend_old({window})", p, key),
                         "job_replica_spend")
        # replica_minutes reads the run's reconciliation too
        cstore.command(sql_statements(jobs.JOBS_DIR / "run_reconcile.sql")[0], p, tag="test.views")
        minutes = rows(cstore, f"SELECT * EXCEPT computed_at FROM job_replica_minutes({run})", p, key)
        assert_same_rows(minutes, rows(cstore, f"SELECT * EXCEPT computed_at FROM job_replica_minutes_old({run})",
                                       p, key), "job_replica_minutes")
    finally:
        drop_scratch(cstore, p)
    if (lo, hi) == (0, 1200):
        # every path: gauge minutes with and without other points, a failed scrape (up_metrics 0),
        # counters with hit rates, minutes with counters and no span and the reverse, gap work,
        # a reserved replica never up, minutes up by metrics only
        assert (gauges["up_metrics"] == 0).any() and (gauges["up_metrics"] == 1).any()
        other_only = gauges[(gauges["replica"] == "r2") & (gauges["minute"] == at(600))]
        assert len(other_only) == 1 and other_only["queue_waiting_avg"].isna().all()
        assert set(other_only["up_metrics"]) == {1}
        assert gauges["queue_waiting_avg"].isna().any() and gauges["queue_waiting_avg"].notna().any()
        assert counters["hit_rate"].notna().any()
        assert ((rec["span_work"] == 0) & rec["counter_prompt_tokens"].notna()).any()
        assert ((rec["span_work"] > 0) & rec["counter_prompt_tokens"].isna()).any()
        assert (rec["gap_work"] > 0).any()
        assert set(spend.loc[spend["replica"] == "r3", "up"]) == {0} and (spend["replica"] == "r3").sum() == 20
        assert ((spend["up_metrics"] == 1) & (spend["up_spans"] == 0)).any()
        assert (minutes["allocated_usd"] > 0).any() and minutes["counted_tokens"].notna().any()
