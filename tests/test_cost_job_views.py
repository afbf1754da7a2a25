"""The cost-job views' rows on one small scenario, every figure worked out by hand from the cost model
(schema/jobs/README.md).

The scenario reaches each path of the views: counters with prefix-cache hits (cached tokens
estimated from their hit rate), a minute with counters and no span (unspanned work), minutes with
spans and no counters, a crashed stream (takes the gap work), a reserved replica that is never up
(one failed scrape), a minute up only by a counter point (no gauge), rooted tasks (a success with a
retry, a failure), a rootless task abandoned inside the window and an unattributed call. The
explicit runner's scratch tables are compared with the views they are filled from (two read paths
of the same current tables); ``tests/test_jobs_inline.py`` reuses the scenario.
"""

from __future__ import annotations

import math

import pytest

from schema import jobs
from schema.jobs import sql_statements
from schema.queries import cost
from tests.producers import scrape, vllm_metrics_page
from tests.test_cost_support import _module_store, cstore, Spans, at, fleet_yaml, metrics_up, one, sync  # noqa: F401

RUN_ID = 9_180_001
EXACT = dict(rel=1e-12, abs=1e-12)
WINDOW = "ws = {ws:DateTime}, we = {we:DateTime}"
RUN = WINDOW + ", run_id = {run_id:UInt64}"


def ns(seconds: float) -> int:
    return int(at(seconds).timestamp() * 1e9)


def unix(seconds: float) -> float:
    return at(seconds).timestamp()


def scenario(store) -> None:
    """w_prefill 0.25, w_decode 1.0. r1, r2: one H100 at $3.60/GPU-hour = $0.06 a minute, capacity
    1e-9 (a minute with work allocates all its spend); r3: two A100 at $1.80 = $0.06 a minute,
    ``reserved`` (billed every minute), its one scrape failed."""
    sync(store, fleet_yaml(w_prefill=0.25, replicas=("r1", "r2")).replace(
        "replicas:\n", "replicas:\n  r3: {gpu_type: A100, gpu_count: 2, billing: reserved}\n"))
    scrape(store, None, replica="r3", at_ns=ns(90))
    # r1: vLLM pages at +45 s of minutes 0-3 (series started at T0). Increases: minute 1 +1200 prompt
    # (600 of them cache hits: rate 0.5), +90 generated; minute 2 nothing; minute 3 +400 (200 hits), +20
    totals = [(0, 0, 0), (1200, 90, 600), (1200, 90, 600), (1600, 110, 800)]
    for minute, (prompt, generation, cached) in enumerate(totals):
        scrape(store, vllm_metrics_page([{"running": 2, "waiting": 1, "prompt": prompt, "generation": generation,
                                          "cached": cached, "created": unix(0)}]),
               replica="r1", at_ns=ns(60 * minute + 45))
    # r2: gauges in minutes 1-3 and no counters; in minute 10 only a counter point (up by its metrics)
    metrics_up(store, "r2", [1, 2, 3])
    store.insert("otel_metrics_sum", [[{"service.instance.id": "r2"}, "vllm:num_preemptions", at(610), at(0), 0.0]],
                 ("ResourceAttributes", "MetricName", "TimeUnix", "StartTimeUnix", "Value"), tag="test.views")
    sp = Spans()
    # A (rooted, success) on r1: a stream that broke after 8 tokens (no engine span), then its retry
    sp.task("trA", "A", 50, 140)
    sp.call(task_id="A", step="s", attempt=1, start=61, end=70, prompt=400, output=0, streamed=8, ok=False,
            partial=True, engine=False, trace="trA")
    sp.call(task_id="A", step="s", attempt=2, start=72, end=100, prompt=400, output=40, trace="trA")
    # F (rooted, failure) on r2, 90-150 s: half in minute 1, half in minute 2
    sp.task("trF", "F", 60, 170, outcome="failure")
    sp.call(task_id="F", step="x", start=90, end=150, prompt=200, output=40, replica="r2", trace="trF")
    # B (no root span) on r2: last call ends at 200 s, abandoned at 200 + 600 = 800 s, inside the window
    sp.call(task_id="B", step="y", start=185, end=200, prompt=100, output=10, replica="r2", trace="trB")
    # an engine request with no task context and no cached count anywhere on r1
    sp.call(task_id=None, start=62, end=66, prompt=200, output=12, client=False, gateway=False)
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
    """Two read paths of the same current tables give the same rows: floats to 1e-12 relative (a sum
    whose terms are read in another order may differ in its last bit)."""
    assert list(new.columns) == list(old.columns), what
    assert len(new) == len(old) and len(new) > 0, (what, len(new), len(old))
    for column in new.columns:
        for i, (a, b) in enumerate(zip(new[column].tolist(), old[column].tolist())):
            if isinstance(a, float) or isinstance(b, float):
                same = (a is None and b is None) or (a is not None and b is not None and (
                    (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12, abs=1e-15)))
            else:
                same = (a == b) or (a != a and b != b)  # NaT / NaN
            assert same, f"{what}: row {i} column {column}: {a!r} != {b!r}"


def _by(df, key: list[str]) -> dict:
    return {tuple(k) if len(key) > 1 else k[0]: row for k, row in
            zip(df[key].itertuples(index=False, name=None), df.to_dict("records"))}


def _m(minute: int):
    return at(60 * minute)


# Hand-worked rows. Cached: no span reports a count, so each r1 call's is prompt x minute 1's counter
# hit rate 600 / 1200 = 0.5; r2 has no counters, so no estimate. Work = 0.25 x (prompt - cached) + output.
#   A1 (gateway evidence): 0.25 x (400 - 200) + 8 streamed = 58
#   A2 (engine):           0.25 x (400 - 200) + 40        = 90
#   U  (engine, no task):  0.25 x (200 - 100) + 12        = 37
#   F  (engine, r2):       0.25 x 200 + 40 = 90, 30 s of its 60 s in each of minutes 1 and 2: 45 + 45
#   B  (engine, r2):       0.25 x 100 + 10 = 35
# r1 minute 1: the counters cover (45 s, 105 s], every call inside; the calls explain 400 + 400 + 200 =
# 1000 prompt and 8 + 40 + 12 = 60 output tokens: residual 200 prompt, 30 output; gap work =
# 0.25 x 200 x (1 - 0.5) + 30 = 55, all A1's (the one call without an engine span that reached one):
# A1 = 58 + 55 = 113; minute work 113 + 90 + 37 = 240.
# r1 minute 3: +400 prompt (hit rate 0.5) and +20 generated, no span: 0.25 x 400 x 0.5 + 20 = 70 unspanned.
RESOLVED = {  # task, attempt, source, prompt, cached, output, call work, status, partial
    ("r1", "A", 1): ("gateway", 400, 200, 8, 58.0, "error", 1),
    ("r1", "A", 2): ("engine", 400, 200, 40, 90.0, "ok", 0),
    ("r1", "", 0): ("engine", 200, 100, 12, 37.0, "ok", 0),
    ("r2", "F", 1): ("engine", 200, 0, 40, 90.0, "ok", 0),
    ("r2", "B", 1): ("engine", 100, 0, 10, 35.0, "ok", 0),
}
RECONCILIATION = {  # (replica, minute): counter prompt, residual prompt, residual output, gap, span work, total
    ("r1", 1): (1200.0, 200.0, 30.0, 55.0, 185.0, 240.0),  # span 58 + 90 + 37
    ("r1", 3): (400.0, 400.0, 20.0, 70.0, 0.0, 70.0),
    ("r2", 1): (None, 0.0, 0.0, 0.0, 45.0, 45.0),
    ("r2", 2): (None, 0.0, 0.0, 0.0, 45.0, 45.0),
    ("r2", 3): (None, 0.0, 0.0, 0.0, 35.0, 35.0),
}
# Every minute a replica was up costs $0.06 (r1: its four scrapes; r2: gauges in 1-3, a counter point
# in 10; r3: reserved, all 20 minutes, never up). A minute with work allocates all of it (capacity 1e-9).
MINUTES = {  # (replica, minute): up, allocated, idle, unspanned, unattributed
    ("r1", 0): (1, 0.0, 0.06, 0.0, 0.0),
    ("r1", 1): (1, 0.06, 0.0, 0.0, 0.06 * 37 / 240),  # U's share: $0.00925
    ("r1", 2): (1, 0.0, 0.06, 0.0, 0.0),
    ("r1", 3): (1, 0.06, 0.0, 0.06, 0.0),
    ("r2", 1): (1, 0.06, 0.0, 0.0, 0.0),
    ("r2", 2): (1, 0.06, 0.0, 0.0, 0.0),
    ("r2", 3): (1, 0.06, 0.0, 0.0, 0.0),
    ("r2", 10): (1, 0.0, 0.06, 0.0, 0.0),
    **{("r3", m): (0, 0.0, 0.06, 0.0, 0.0) for m in range(20)},
}
PIECES = {  # (replica, minute, task, attempt): category, cost
    ("r1", 1, "A", 1): ("retry_waste", 0.06 * 113 / 240),  # $0.02825: failed, superseded by attempt 2
    ("r1", 1, "A", 2): ("useful", 0.06 * 90 / 240),  # $0.0225
    ("r1", 1, "", 0): ("unattributed", 0.06 * 37 / 240),  # $0.00925
    ("r1", 3, "", 0): ("unspanned", 0.06),
    ("r2", 1, "F", 1): ("failed_task_waste", 0.06),  # alone in its minutes: 45 / 45 of $0.06 each
    ("r2", 2, "F", 1): ("failed_task_waste", 0.06),
    ("r2", 3, "B", 1): ("failed_task_waste", 0.06),
}
TASKS = {  # outcome, has_root, attempts, calls, cost, useful, retry waste, failed-task waste, partial, end (s)
    "A": ("success", 1, 2, 2, 0.05075, 0.0225, 0.02825, 0.0, 0.02825, 140),
    "F": ("failure", 1, 1, 1, 0.12, 0.0, 0.0, 0.12, 0.0, 170),
    "B": ("abandoned", 0, 1, 1, 0.06, 0.0, 0.0, 0.06, 0.0, 800),
}


def _approx(value):
    return None if value is None else pytest.approx(value, **EXACT)


def test_job_views_rows_by_hand(cstore):
    scenario(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(1200))  # call_costs, which replica_minutes and job_tasks read
    p = {"ws": at(0), "we": at(1200), "run_id": RUN_ID}
    resolved = rows(cstore, f"SELECT * FROM job_resolved_calls({WINDOW})", p, ["trace_id", "call_id"])
    got = {(r["replica"], r["task_id"], r["task_attempt"]): (
        r["call_source"], r["prompt_tokens"], r["cached_tokens"], r["output_tokens"], r["call_work"], r["status"],
        r["partial"]) for r in resolved.to_dict("records")}
    assert got == {k: v[:4] + (pytest.approx(v[4], **EXACT),) + v[5:] for k, v in RESOLVED.items()}
    assert set(resolved.loc[resolved["replica"] == "r1", "cached_source"]) == {"estimate"}
    fill_scratch(cstore, p)
    try:
        rec = _by(rows(cstore, f"SELECT * FROM job_reconciliation({RUN})", p, ["replica", "minute"]),
                  ["replica", "minute"])
        for (replica, minute), (counter, res_prompt, res_output, gap, span, total) in RECONCILIATION.items():
            r = rec[(replica, _m(minute))]
            assert (None if math.isnan(r["counter_prompt_tokens"]) else r["counter_prompt_tokens"]) == counter
            assert (r["residual_prompt"], r["residual_output"]) == (res_prompt, res_output), (replica, minute)
            assert (r["gap_work"], r["span_work"], r["total_work"]) == (_approx(gap), _approx(span), _approx(total))
        # no other minute has work: 240 + 70 + 45 + 45 + 35
        assert sum(r["total_work"] for r in rec.values()) == pytest.approx(435, **EXACT)
        assert rec[("r1", _m(1))]["hit_rate"] == pytest.approx(0.5, **EXACT)
        spend = rows(cstore, f"SELECT * FROM job_replica_spend({RUN})", p, ["replica", "minute"])
        assert {(r["replica"], r["minute"]): (r["up"], r["spend_usd"]) for r in spend.to_dict("records")} == {
            (replica, _m(minute)): (v[0], pytest.approx(0.06, **EXACT)) for (replica, minute), v in MINUTES.items()}
        # r1's minutes are up by their scrapes; r2's minute 10 by its counter point alone
        assert one(spend[(spend["replica"] == "r2") & (spend["minute"] == _m(10))])["up_metrics"] == 1
        cstore.command(sql_statements(jobs.JOBS_DIR / "run_reconcile.sql")[0], p, tag="test.views")
        minutes = rows(cstore, f"SELECT * FROM job_replica_minutes({RUN})", p, ["replica", "minute"])
    finally:
        drop_scratch(cstore, p)
    assert {(r["replica"], r["minute"]): (r["up"], r["allocated_usd"], r["idle_usd"], r["unspanned_usd"],
                                          r["unattributed_usd"]) for r in minutes.to_dict("records")} == {
        (replica, _m(minute)): (v[0], *(pytest.approx(x, **EXACT) for x in v[1:]))
        for (replica, minute), v in MINUTES.items()}
    m1 = one(minutes[(minutes["replica"] == "r1") & (minutes["minute"] == _m(1))])
    # 500 estimated cached tokens (200 + 200 + 100); counted 1000 prompt + 60 output; token gap
    # (1200 + 90) - 1060 = 230
    assert (m1["cached_estimated_tokens"], m1["counted_tokens"], m1["token_gap"]) == (500, 1060, 230)
    assert m1["work"] == pytest.approx(240, **EXACT) and m1["gap_work"] == pytest.approx(55, **EXACT)
    assert one(minutes[(minutes["replica"] == "r1") & (minutes["minute"] == _m(3))])["token_gap"] == 420  # 400 + 20
    pieces = cstore.query_df("SELECT replica, minute, task_id, task_attempt, category, cost_usd FROM call_costs",
                             tag="test.views")
    assert {(r["replica"], r["minute"], r["task_id"], r["task_attempt"]): (r["category"], r["cost_usd"])
            for r in pieces.to_dict("records")} == {
        (replica, _m(minute), task, attempt): (category, pytest.approx(usd, **EXACT))
        for (replica, minute, task, attempt), (category, usd) in PIECES.items()}
    tasks = _by(rows(cstore, f"SELECT * FROM job_tasks({WINDOW})", p, ["task_id"]), ["task_id"])
    assert set(tasks) == set(TASKS)
    for task_id, (outcome, has_root, attempts, calls, usd, useful, retry, failed, partial, end) in TASKS.items():
        t = tasks[task_id]
        assert (t["outcome"], t["has_root"], t["attempts"], t["calls"]) == (outcome, has_root, attempts, calls)
        assert (t["cost_usd"], t["useful_usd"], t["retry_waste_usd"], t["failed_task_waste_usd"], t["partial_usd"]) == (
            _approx(usd), _approx(useful), _approx(retry), _approx(failed), _approx(partial))
        assert t["end_time"] == at(end) and t["context_source"] == "sdk"
    # spend: r1 4 x $0.06 + r2 4 x $0.06 + r3 20 x $0.06 = $1.68, idle 23 x $0.06 = $1.38, allocated
    # $0.30 = useful 0.0225 + retry waste 0.02825 + failed-task waste (F 0.12 + B 0.06) 0.18
    # + unspanned 0.06 + unattributed 0.00925. One success (A): CPST $1.68, attributed CPST $0.30.
    s = one(cost.period_summary(cstore, at(0), at(1200)))
    assert (s["spend_usd"], s["idle_usd"], s["allocated_usd"]) == (_approx(1.68), _approx(1.38), _approx(0.30))
    assert (s["useful_usd"], s["retry_waste_usd"], s["failed_task_waste_usd"], s["unspanned_usd"],
            s["unattributed_usd"]) == (_approx(0.0225), _approx(0.02825), _approx(0.18), _approx(0.06),
                                       _approx(0.00925))
    assert (s["successful_tasks"], s["failed_tasks"], s["abandoned_tasks"]) == (1, 1, 1)
    assert (s["cpst_usd"], s["attributed_cpst_usd"]) == (_approx(1.68), _approx(0.30))


@pytest.mark.parametrize("lo, hi, ended", [(0, 1200, "AFB"), (60, 180, "AF"), (120, 1200, "AFB"), (180, 900, "B"),
                                           (0, 140, "")])
def test_job_tasks_in_windows_that_cut_the_scenario(cstore, lo, hi, ended):
    """A window holds the tasks that ended in it (A at 140 s, F at 170 s, B abandoned at 800 s), each
    with every piece of every call it made, wherever the window starts."""
    scenario(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(1200))
    p = {"ws": at(lo), "we": at(hi)}
    tasks = _by(rows(cstore, f"SELECT * FROM job_tasks({WINDOW})", p, ["task_id"]), ["task_id"]) if ended else {}
    if not ended:
        assert len(cstore.query_df(f"SELECT * FROM job_tasks({WINDOW})", p, tag="test.views")) == 0
    assert set(tasks) == set(ended)
    for task_id, t in tasks.items():
        outcome, has_root, attempts, calls, usd, useful, retry, failed, _, _ = TASKS[task_id]
        assert (t["outcome"], t["has_root"], t["attempts"], t["calls"]) == (outcome, has_root, attempts, calls)
        assert (t["cost_usd"], t["useful_usd"], t["retry_waste_usd"], t["failed_task_waste_usd"]) == (
            _approx(usd), _approx(useful), _approx(retry), _approx(failed))


@pytest.mark.parametrize("lo, hi", [(0, 1200), (60, 180)])
def test_scratch_tables_hold_the_views_rows(cstore, lo, hi):
    """The explicit run fills its scratch tables from the counters and gauges views: the same rows."""
    scenario(cstore)
    p = {"ws": at(lo), "we": at(hi), "run_id": RUN_ID}
    key = ["replica", "minute"]
    gauges = rows(cstore, f"SELECT * FROM job_replica_gauges({WINDOW})", p, key)
    counters = rows(cstore, f"SELECT * FROM job_engine_counters({WINDOW})", p, key)
    fill_scratch(cstore, p)
    try:
        assert_same_rows(rows(cstore, "SELECT * EXCEPT (run_id, written_at) FROM replica_gauges_runs "
                                      "WHERE run_id = {run_id:UInt64}", p, key), gauges, "replica_gauges_runs")
        assert_same_rows(rows(cstore, "SELECT * EXCEPT (run_id, written_at) FROM engine_counters_runs "
                                      "WHERE run_id = {run_id:UInt64}", p, key), counters, "engine_counters_runs")
    finally:
        drop_scratch(cstore, p)
    # r1 minute 1: +1200 prompt, 600 cached (hit rate 0.5), +90 generated, over (45 s, 105 s]
    c1 = one(counters[(counters["replica"] == "r1") & (counters["minute"] == _m(1))])
    assert (c1["prompt_increase"], c1["cached_increase"], c1["generation_increase"]) == (1200, 600, 90)
    assert (c1["covers_from"], c1["covers_to"]) == (at(45), at(105))
    # the pages said 1 waiting, 2 running; r2's gauges 0 waiting
    g1 = one(gauges[(gauges["replica"] == "r1") & (gauges["minute"] == _m(1))])
    assert (g1["up_metrics"], g1["queue_waiting_avg"], g1["running_avg"]) == (1, 1.0, 2.0)
    if (lo, hi) == (0, 1200):
        # r3's failed scrape: a gauge row, not up; r2's minute 10: up by a counter point, no gauge values
        r3 = one(gauges[gauges["replica"] == "r3"])
        assert (r3["minute"], r3["up_metrics"]) == (_m(1), 0)
        r2 = one(gauges[(gauges["replica"] == "r2") & (gauges["minute"] == _m(10))])
        assert r2["up_metrics"] == 1 and math.isnan(r2["queue_waiting_avg"])


@pytest.mark.parametrize("lo, hi", [(60, 180), (120, 1200)])
def test_a_window_that_cuts_the_scenario_gives_its_minutes_rows(cstore, lo, hi):
    """The reconciliation and the spend of a window are the hand-worked rows of its minutes: the
    counters of its first minute read the scrape before it (minute 1's +1200 prompt tokens are the
    increase since 45 s), and a reserved replica is billed every minute of it."""
    scenario(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(1200))
    p = {"ws": at(lo), "we": at(hi), "run_id": RUN_ID}
    inside = range(lo // 60, hi // 60)
    fill_scratch(cstore, p)
    try:
        rec = _by(rows(cstore, f"SELECT * FROM job_reconciliation({RUN})", p, ["replica", "minute"]),
                  ["replica", "minute"])
        spend = rows(cstore, f"SELECT * FROM job_replica_spend({RUN})", p, ["replica", "minute"])
    finally:
        drop_scratch(cstore, p)
    for (replica, minute), (counter, res_prompt, res_output, gap, span, total) in RECONCILIATION.items():
        if minute in inside:
            r = rec[(replica, _m(minute))]
            assert (r["gap_work"], r["span_work"], r["total_work"]) == (_approx(gap), _approx(span), _approx(total))
            assert (r["residual_prompt"], r["residual_output"]) == (res_prompt, res_output)
    assert sum(r["total_work"] for r in rec.values()) == pytest.approx(
        sum(v[5] for (_, minute), v in RECONCILIATION.items() if minute in inside), **EXACT)
    assert {(r["replica"], r["minute"]): (r["up"], r["spend_usd"]) for r in spend.to_dict("records")} == {
        (replica, _m(minute)): (v[0], pytest.approx(0.06, **EXACT))
        for (replica, minute), v in MINUTES.items() if minute in inside}
