"""Cost engine on the embedded store: the worked example of schema/jobs/README.md and the named scenarios.

Spans are written in the shapes of docs/telemetry.md (tests/test_cost_support.py); the jobs run
through ``schema.jobs.run_jobs`` over explicit windows; figures are read through the named
queries of ``schema.queries.cost``. Every expected number is computed by hand in the comments.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest

from schema import jobs
from schema.queries import QUERIES_DIR, UnknownQuery, cost, sql, sql_without
from tests.test_cost_support import (  # noqa: F401
    _module_store, cstore, Spans, at, fleet_yaml, metrics_up, one, record_statements, sync, waste_both)

EXACT = dict(rel=1e-12, abs=1e-12)


def _worked_example(store):
    # One replica, 1 GPU at $3.60/GPU-hour = $0.06/min, up in minutes 0, 1, 2; w_prefill 0.1, w_decode 1.0;
    # capacity 400 work units per minute: a minute allocates $0.06 x min(1, work / 400), the rest is idle.
    sync(store, fleet_yaml(price=3.60, w_prefill=0.1, w_decode=1.0, capacity=400))
    metrics_up(store, "r1", [0, 1, 2])
    sp = Spans()
    sp.task("trT1", "T1", 1, 50)
    a = sp.call(task_id="T1", start=5, end=20, prompt=1000, output=200, trace="trT1")
    sp.task("trT2", "T2", 2, 110)
    # B: 500 prompt tokens, 50 streamed, then the replica crashed: no engine span.
    b = sp.call(task_id="T2", start=10, end=30, prompt=500, output=0, streamed=50, engine=False, ok=False,
                partial=True, trace="trT2")
    c = sp.call(task_id="T2", attempt=2, start=65, end=100, prompt=500, cached=100, output=150, trace="trT2")
    sp.flush(store)
    jobs.run_jobs(store, start=at(0), end=at(180))
    return a, b, c


def test_worked_example_exact(cstore):
    a, b, c = _worked_example(cstore)
    calls = cost.task_calls(cstore, "T2").set_index("call_id")
    # Work A = 0.1 x 1000 + 200 = 300, B = 0.1 x 500 + 50 = 100 -> A $0.045, B $0.015 of minute 0's $0.06.
    assert calls.loc[b.attempt, "cost_usd"] == pytest.approx(0.015, **EXACT)
    assert calls.loc[b.attempt, "call_source"] == "gateway"
    assert calls.loc[b.attempt, "category"] == "retry_waste"
    assert calls.loc[b.attempt, "partial"] == 1
    # Minute 0's work 300 + 100 = 400 = capacity: all of its spend is allocated.
    # C: work 0.1 x (500 - 100) + 150 = 190, alone in minute 1 -> $0.06 x 190 / 400 = $0.0285.
    assert calls.loc[c.engine, "work"] == pytest.approx(190, **EXACT)
    assert calls.loc[c.engine, "cost_usd"] == pytest.approx(0.0285, **EXACT)
    assert calls.loc[c.engine, "category"] == "useful"
    t1 = cost.task_calls(cstore, "T1")
    assert one(t1)["cost_usd"] == pytest.approx(0.045, **EXACT)

    s = one(cost.period_summary(cstore, at(0), at(180)))
    assert s["spend_usd"] == pytest.approx(0.18, **EXACT)
    assert s["allocated_usd"] == pytest.approx(0.0885, **EXACT)  # minute 0's 0.06 + C's 0.0285
    assert s["useful_usd"] == pytest.approx(0.0735, **EXACT)  # A 0.045 + C 0.0285
    assert s["retry_waste_usd"] == pytest.approx(0.015, **EXACT)
    assert s["failed_task_waste_usd"] == 0
    assert s["partial_usd"] == pytest.approx(0.015, **EXACT)
    assert s["partial_tokens"] == 50
    assert s["idle_usd"] == pytest.approx(0.0915, **EXACT)  # minute 1's 0.0315 + minute 2's 0.06
    assert s["successful_tasks"] == 2
    assert s["cpst_usd"] == pytest.approx(0.09, **EXACT)  # all spend / successes: utilisation does not move it
    assert s["attributed_cpst_usd"] == pytest.approx(0.04425, **EXACT)
    assert s["requests"] == 3
    assert s["cost_per_request_usd"] == pytest.approx(0.06, **EXACT)
    # tokens: A 1000 + 200, B 500 + 50, C 500 + 150 = 2,400 -> $0.18 / 2400 x 1e6 = $75
    assert s["tokens"] == 2400
    assert s["cost_per_1m_tokens_usd"] == pytest.approx(75.0, **EXACT)
    assert s["attempts_per_success"] == pytest.approx(1.5, **EXACT)  # T1: 1 attempt, T2: 2
    # goodput: 2 successful tasks without SLOs in 3 minutes = 40 per hour
    assert s["goodput_per_hour"] == pytest.approx(40.0, **EXACT)

    waste = waste_both(cstore, at(0), at(180)).set_index("category")
    assert list(waste.index) == ["useful", "retry_waste", "failed_task_waste", "pending", "unattributed",
                                 "unspanned", "idle", "partial", "down"]
    assert waste.loc["idle", "usd"] == pytest.approx(0.0915, **EXACT)
    assert waste.loc[["useful", "retry_waste", "failed_task_waste", "pending", "unattributed", "unspanned", "idle"],
                     "usd"].sum() == pytest.approx(0.18, **EXACT)
    # (waste_both: the cost page's folded read gives the same frame) by hand: B is the partial attempt,
    # retry waste $0.015, 1 call, its 50 streamed output tokens; useful = A + C, 2 calls, 1200 + 650 tokens
    assert (waste.loc["partial", "usd"], waste.loc["partial", "calls"], waste.loc["partial", "tokens"]) == (
        pytest.approx(0.015, **EXACT), 1, 50)
    assert (waste.loc["useful", "calls"], waste.loc["useful", "tokens"]) == (2, 1200 + 650)
    assert (waste.loc["retry_waste", "calls"], waste.loc["retry_waste", "tokens"]) == (1, 550)
    assert waste.loc["useful", "share_of_spend"] == pytest.approx(0.0735 / 0.18, **EXACT)

    tasks = cost.tasks_table(cstore, at(0), at(180)).set_index("task_id")
    assert tasks.loc["T2", "cost_usd"] == pytest.approx(0.0435, **EXACT)
    assert tasks.loc["T2", "useful_usd"] == pytest.approx(0.0285, **EXACT)
    assert tasks.loc["T2", "retry_waste_usd"] == pytest.approx(0.015, **EXACT)
    assert tasks.loc["T2", "partial_usd"] == pytest.approx(0.015, **EXACT)
    assert (tasks.loc["T2", "attempts"], tasks.loc["T2", "calls"], tasks.loc["T2", "partial_tokens"]) == (2, 2, 50)
    assert tasks.loc["T1", "outcome"] == "success"

    minutes = cstore.query_df("SELECT minute, spend_usd, allocated_usd, idle_usd FROM replica_minutes ORDER BY minute",
                              tag="test").to_dict("records")
    assert [round(m["idle_usd"], 12) for m in minutes] == [0.0, 0.0315, 0.06]


def test_failed_task_all_waste_and_abandoned_task(cstore):
    sync(cstore, fleet_yaml(price=6.0))  # $0.10 per minute
    metrics_up(cstore, "r1", range(0, 20))
    sp = Spans()
    # 5-step workflow failing at step 3 after 3 attempts: steps 1, 2 ok, step 3 fails three times.
    sp.task("trF", "F", 0, 290, outcome="failure", task_type="research_agent")
    for i, (step, attempt, ok) in enumerate([("1", 1, True), ("2", 1, True), ("3", 1, False), ("3", 2, False),
                                             ("3", 3, False)]):
        sp.call(task_id="F", task_type="research_agent", step=step, attempt=attempt, start=60 * i + 5,
                end=60 * i + 20, ok=ok, output=10 if ok else 0, streamed=None if ok else 0, trace="trF")
    # Abandoned: no root span ever; last call ends at 330 s; abandon timeout 600 s -> abandoned at 930 s.
    sp.call(task_id="AB", task_type="chat", start=310, end=330, trace="trAB")
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(1200))

    tasks = cost.tasks_table(cstore, at(0), at(1200)).set_index("task_id")
    f = tasks.loc["F"]
    assert f["outcome"] == "failure"
    assert (f["steps"], f["attempts"], f["calls"]) == (3, 5, 5)
    assert f["cost_usd"] > 0
    assert f["failed_task_waste_usd"] == pytest.approx(f["cost_usd"], **EXACT)
    assert f["useful_usd"] == 0 and f["retry_waste_usd"] == 0
    # each call is alone in its minute: 5 x $0.10
    assert f["cost_usd"] == pytest.approx(0.5, **EXACT)

    ab = tasks.loc["AB"]
    assert ab["outcome"] == "abandoned" and ab["has_root"] == 0
    assert ab["end_time"].to_pydatetime().replace(tzinfo=None) == at(930)
    assert ab["failed_task_waste_usd"] == pytest.approx(0.1, **EXACT)
    s = one(cost.period_summary(cstore, at(0), at(1200)))
    assert (s["failed_tasks"], s["abandoned_tasks"], s["successful_tasks"]) == (1, 1, 0)
    assert s["failed_task_waste_usd"] == pytest.approx(0.6, **EXACT)
    assert s["idle_usd"] == pytest.approx(20 * 0.1 - 0.6, **EXACT)
    assert pd_isna(s["cpst_usd"])  # no success: CPST undefined, never 0


def pd_isna(value) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


def test_in_progress_task_is_pending_until_abandoned(cstore):
    sync(cstore, fleet_yaml(price=6.0))
    metrics_up(cstore, "r1", [0])
    sp = Spans()
    sp.call(task_id="P", start=5, end=20, trace="trP")
    sp.flush(cstore)
    # At 5 minutes the task has neither a root span nor 600 s of silence: in progress.
    jobs.run_jobs(cstore, start=at(0), end=at(300))
    assert cost.tasks_table(cstore, at(0), at(3600)).empty
    waste = waste_both(cstore, at(0), at(300)).set_index("category")
    assert waste.loc["pending", "usd"] == pytest.approx(0.1, **EXACT)
    # A later run of the next window only (past the timeout) calls it abandoned: the task row and
    # the call drill-down say failed-task waste although minute 0's piece was computed as pending.
    jobs.run_jobs(cstore, start=at(300), end=at(1200))
    task = one(cost.tasks_table(cstore, at(0), at(3600)))
    assert task["outcome"] == "abandoned"
    assert task["failed_task_waste_usd"] == pytest.approx(0.1, **EXACT) and task["pending_usd"] == 0
    assert one(cost.task_calls(cstore, "P"))["category"] == "failed_task_waste"
    # Re-running the whole period relabels minute 0 too.
    jobs.run_jobs(cstore, start=at(0), end=at(1200))
    tasks = cost.tasks_table(cstore, at(0), at(3600))
    assert one(tasks)["outcome"] == "abandoned"
    waste = waste_both(cstore, at(0), at(300)).set_index("category")
    assert waste.loc["failed_task_waste", "usd"] == pytest.approx(0.1, **EXACT)
    assert waste.loc["pending", "usd"] == 0


def test_calls_without_task_context_are_unattributed(cstore):
    sync(cstore, fleet_yaml(price=3.6, w_prefill=0.1))
    metrics_up(cstore, "r1", [0])
    sp = Spans()
    sp.call(task_id=None, start=1, end=10, prompt=1000, output=100, client=False, gateway=False)  # work 200
    sp.task("trT", "T", 0, 40)
    sp.call(task_id="T", start=1, end=10, prompt=0, output=200, trace="trT")  # work 200
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(60))
    s = one(cost.period_summary(cstore, at(0), at(60)))
    assert s["unattributed_usd"] == pytest.approx(0.03, **EXACT)
    assert s["useful_usd"] == pytest.approx(0.03, **EXACT)
    assert s["idle_usd"] == pytest.approx(0.0, **EXACT)
    by_task = cost.period_summary(cstore, at(0), at(60), by="task_type").set_index("grp")
    assert by_task.loc["", "unattributed_usd"] == pytest.approx(0.03, **EXACT)
    assert by_task.loc["chat", "allocated_usd"] == pytest.approx(0.03, **EXACT)
    assert by_task["spend_usd"].sum() == pytest.approx(0.06, **EXACT)


def test_same_call_seen_three_times_is_counted_once(cstore):
    sync(cstore, fleet_yaml(price=3.6))
    metrics_up(cstore, "r1", [0])
    sp = Spans()
    sp.task("trT", "T", 0, 30, tenant="globex")
    ids = sp.call(task_id="T", tenant="globex", start=1, end=10, prompt=100, output=10, trace="trT")
    sp.flush(cstore)
    assert cstore.scalar("SELECT count() FROM llm_calls", tag="test") == 3  # client, gateway, engine
    jobs.run_jobs(cstore, start=at(0), end=at(60))
    calls = cost.task_calls(cstore, "T")
    row = one(calls)
    assert row["call_id"] == ids.engine and row["call_source"] == "engine" and row["replica"] == "r1"
    assert (row["prompt_tokens"], row["output_tokens"]) == (100, 10)
    assert row["cost_usd"] == pytest.approx(0.06, **EXACT)
    s = one(cost.period_summary(cstore, at(0), at(60), filters={"tenant": "globex"}))
    assert (s["requests"], s["tokens"]) == (1, 110)


def test_crashed_replica_priced_from_gateway_evidence(cstore):
    sync(cstore, fleet_yaml(price=3.6, w_prefill=0.0, w_decode=1.0))
    sp = Spans()
    sp.task("trT", "T", 0, 59, outcome="failure")
    ids = sp.call(task_id="T", start=2, end=12, prompt=400, output=0, streamed=80, engine=False, ok=False,
                  partial=True, trace="trT")
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(60))
    row = one(cost.task_calls(cstore, "T"))
    assert row["call_id"] == ids.attempt and row["call_source"] == "gateway"
    assert row["output_tokens"] == 80 and row["partial"] == 1 and row["status"] == "error"
    # No metrics: the replica is up because the gateway saw it stream; the call has all the work.
    assert row["cost_usd"] == pytest.approx(0.06, **EXACT)
    dq = one(cost.data_quality(cstore, at(0), at(60)))
    assert dq["gateway_evidence_calls"] == 1 and dq["client_evidence_calls"] == 0


def test_client_only_evidence_without_gateway_or_engine(cstore):
    sync(cstore, fleet_yaml())
    sp = Spans()
    sp.task("trT", "T", 0, 30)
    ids = sp.call(task_id="T", start=1, end=5, gateway=False, engine=False, ok=False, output=0, streamed=7,
                  partial=True, trace="trT")
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(60))
    row = one(cost.task_calls(cstore, "T"))
    assert row["call_id"] == ids.client and row["call_source"] == "client" and row["output_tokens"] == 7
    assert row["cost_usd"] == 0  # no replica known: no spend to allocate, counted as a request
    assert one(cost.period_summary(cstore, at(0), at(60)))["requests"] == 1


def test_call_spanning_minutes_is_split_by_time_overlap(cstore):
    sync(cstore, fleet_yaml(price=6.0, w_prefill=0.0, w_decode=1.0))
    metrics_up(cstore, "r1", [0, 1])
    sp = Spans()
    sp.task("trT", "T", 0, 119)
    # X runs 50 s -> 80 s: 10 s in minute 0, 20 s in minute 1; 300 output tokens -> work 100 + 200.
    sp.call(task_id="T", step="x", start=50, end=80, prompt=0, output=300, trace="trT")
    # Y runs alone in minute 1 with work 200.
    sp.call(task_id="T", step="y", start=90, end=100, prompt=0, output=200, trace="trT")
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(120))
    calls = cost.task_calls(cstore, "T").set_index("task_step")
    # minute 0: X alone -> $0.10; minute 1: X 200 of 400 -> $0.05, Y $0.05.
    assert calls.loc["x", "cost_usd"] == pytest.approx(0.15, **EXACT)
    assert calls.loc["x", "minutes"] == 2
    assert calls.loc["y", "cost_usd"] == pytest.approx(0.05, **EXACT)
    assert one(cost.tasks_table(cstore, at(0), at(120)))["cost_usd"] == pytest.approx(0.2, **EXACT)


def test_price_change_recomputes_history(cstore):
    _worked_example(cstore)
    assert one(cost.period_summary(cstore, at(0), at(180)))["spend_usd"] == pytest.approx(0.18, **EXACT)
    # A new H100 price from minute 1 on: $7.20/GPU-hour = $0.12/min. Cost is never frozen at ingest:
    # re-running the window re-prices it.
    sync(cstore, fleet_yaml(price=3.6, w_prefill=0.1).replace(
        "      - {usd_per_gpu_hour: 3.6, valid_from: 2025-01-01}\n",
        "      - {usd_per_gpu_hour: 3.6, valid_from: 2025-01-01}\n"
        "      - {usd_per_gpu_hour: 7.2, valid_from: '2026-01-05T10:01:00Z'}\n"))
    jobs.run_jobs(cstore, start=at(0), end=at(180))
    s = one(cost.period_summary(cstore, at(0), at(180)))
    assert s["spend_usd"] == pytest.approx(0.06 + 0.12 + 0.12, **EXACT)
    assert s["idle_usd"] == pytest.approx(0.12, **EXACT)
    tasks = cost.tasks_table(cstore, at(0), at(180)).set_index("task_id")
    assert tasks.loc["T2", "useful_usd"] == pytest.approx(0.12, **EXACT)  # C in minute 1 at the new price
    assert tasks.loc["T1", "cost_usd"] == pytest.approx(0.045, **EXACT)  # minute 0 keeps the old price


def test_late_span_absorbed_by_next_run(cstore):
    _worked_example(cstore)
    # A late engine call of T1 in minute 2 (work 0.1 x 0 + 60) arrives after the first run.
    sp = Spans()
    sp.call(task_id="T1", step="2", start=125, end=130, prompt=0, output=60, trace="trT1")
    sp.flush(cstore)
    before = one(cost.period_summary(cstore, at(0), at(180)))
    assert before["idle_usd"] == pytest.approx(0.0915, **EXACT)
    jobs.run_jobs(cstore, start=at(0), end=at(180))  # the same window again: idempotent, absorbs it
    after = one(cost.period_summary(cstore, at(0), at(180)))
    # minute 2 now allocates $0.06 x 60 / 400 = $0.009 to the late call
    assert after["idle_usd"] == pytest.approx(0.0915 - 0.009, **EXACT)
    assert after["requests"] == 4 and after["spend_usd"] == pytest.approx(0.18, **EXACT)
    assert len(cost.tasks_table(cstore, at(0), at(180))) == 2  # re-running never duplicates rows
    t1 = cost.tasks_table(cstore, at(0), at(180)).set_index("task_id").loc["T1"]
    assert t1["cost_usd"] == pytest.approx(0.045 + 0.009, **EXACT)


def test_unknown_replica_priced_at_default_and_flagged(cstore):
    sync(cstore, fleet_yaml(price=3.6) + "unknown_replica: {gpu_type: A100, gpu_count: 2}\n")
    metrics_up(cstore, "r-unlisted", [0, 1])
    jobs.run_jobs(cstore, start=at(0), end=at(120))
    rm = cstore.query_df("SELECT replica, gpu_type, gpu_count, in_fleet, spend_usd FROM replica_minutes",
                         tag="test")
    assert set(rm["replica"]) == {"r-unlisted"}
    assert set(rm["in_fleet"]) == {0} and set(rm["gpu_type"]) == {"A100"}
    assert rm["spend_usd"].sum() == pytest.approx(2 * 1.8 * 2 / 60, **EXACT)  # 2 min x $1.80 x 2 GPUs
    dq = one(cost.data_quality(cstore, at(0), at(120)))
    assert dq["default_priced_minutes"] == 2 and dq["unpriced_minutes"] == 0


@pytest.mark.parametrize("started_long_ago", [False, True], ids=["engine_started_at_T0", "engine_started_a_day_before"])
def test_reconciliation_counts_tokens_the_spans_missed(cstore, started_long_ago):
    from datetime import timedelta

    sync(cstore, fleet_yaml())  # $0.06/min, w_prefill 0.1
    # Engine counters scraped at +45 s of minutes 0, 1, 2: 1000/100, 2500/400, 2500/400 (prompt/generation).
    metrics_up(cstore, "r1", [0, 1, 2], counters={0: (1000, 100), 1: (2500, 400), 2: (2500, 400)},
               series_start=at(0) - timedelta(days=1) if started_long_ago else at(0))
    sp = Spans()
    # one engine request (no gateway): first token at 62.1 s, end 70 s: seen by minute 1's scrape (1:45)
    sp.call(task_id=None, start=62, end=70, prompt=1000, output=200, client=False, gateway=False)
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(180))
    rm = cstore.query_df("SELECT minute, counter_prompt_tokens, counter_generation_tokens, counted_tokens, token_gap, "
                         "gap_work, unspanned_usd, allocated_usd FROM replica_minutes ORDER BY minute", tag="test")
    # minutes 1 and 2: +1500/+300 and +0/+0; the call explains 1000 + 200 in minute 1
    assert rm["counter_prompt_tokens"].tolist()[1:] == [1500, 0]
    assert rm["token_gap"].tolist()[1:] == [1500 + 300 - 1200, 0]  # e.g. an aborted request's 500 + 100
    # the 600 unexplained tokens are engine work no call can take: 0.1 x 500 + 100 = 150 work units,
    # an `unspanned` row sharing minute 1's $0.06 with the call's 0.1 x 1000 + 200 = 300
    assert rm["gap_work"].tolist()[1:] == pytest.approx([150, 0], **EXACT)
    assert rm["unspanned_usd"].tolist()[1:] == pytest.approx([0.06 * 150 / 450, 0], **EXACT)
    waste = waste_both(cstore, at(60), at(180)).set_index("category")
    assert waste.loc["unspanned", "usd"] == pytest.approx(0.02, **EXACT)
    dq = one(cost.data_quality(cstore, at(0), at(180)))
    if started_long_ago:
        # minute 0's point is the first one seen of a series that started a day ago: its increase is unknown
        assert pd_isna(rm["token_gap"][0]) and rm["gap_work"][0] == 0
        assert dq["token_gap"] == 600 and dq["counter_tokens"] == 1800
        assert dq["token_gap_ratio"] == pytest.approx(600 / 1800, **EXACT)
    else:
        # the series started at T0: its first point (1000/100) is all increase, and no span explains it
        assert rm["token_gap"][0] == 1100 and rm["gap_work"][0] == pytest.approx(200, **EXACT)
        assert rm["unspanned_usd"][0] == pytest.approx(0.06, **EXACT)
        assert dq["token_gap"] == 1700 and dq["counter_tokens"] == 2900
        assert dq["token_gap_ratio"] == pytest.approx(1700 / 2900, **EXACT)


def test_gauges_and_latency_quantiles_in_replica_minutes(cstore):
    sync(cstore, fleet_yaml())
    metrics_up(cstore, "r1", [0], waiting=4, running=7, kv=0.25)
    sp = Spans()
    sp.call(task_id=None, start=1, end=3, output=11, ttft=0.5, client=False, gateway=False)
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(60))
    row = one(cstore.query_df("SELECT * FROM replica_minutes", tag="test"))
    assert (row["queue_waiting_max"], row["running_avg"], row["kv_usage_avg"]) == (4, 7, 0.25)
    assert row["ttft_p99_s"] == pytest.approx(0.5)
    assert row["e2e_p50_s"] == pytest.approx(2.0)
    assert row["itl_p50_s"] == pytest.approx((2.0 - 0.5) / 10)
    windows = one(cost.replica_windows(cstore, at(0), at(60), 60))
    assert windows["requests"] == 1 and windows["ttft_p99_s"] == pytest.approx(0.5)
    assert windows["running_requests_avg"] == 7


def test_queries_return_documented_columns(cstore):
    _worked_example(cstore)
    start, end = at(0), at(180)
    frames = {
        "cost_period_summary": cost.period_summary(cstore, start, end, by="model"),
        "cost_cpst_trend": cost.cpst_trend(cstore, start, end, 60, by="tenant"),
        "cost_waste_breakdown": cost.waste_breakdown(cstore, start, end),
        "tasks_table": cost.tasks_table(cstore, start, end, search="t1"),
        "tasks_calls": cost.task_calls(cstore, "T1"),
        "cost_replica_windows": cost.replica_windows(cstore, start, end, 120),
        "cost_data_quality": cost.data_quality(cstore, start, end),
    }
    for name, frame in frames.items():
        assert tuple(frame.columns) == cost.COLUMNS[name], name
        assert len(frame) > 0, name
    assert one(frames["tasks_table"])["task_id"] == "T1"  # case-insensitive search
    # by tenant: minute 2 is idle with no call, so no group gets its idle
    assert frames["cost_cpst_trend"]["spend_usd"].sum() == pytest.approx(0.12, **EXACT)
    trend = cost.cpst_trend(cstore, start, end, 60)
    assert trend["spend_usd"].tolist() == pytest.approx([0.06, 0.06, 0.06], **EXACT)
    assert trend["successful_tasks"].tolist() == [1, 1, 0]  # T1 ends at 50 s, T2 at 110 s
    by_replica = one(cost.period_summary(cstore, start, end, by="replica"))
    assert by_replica["grp"] == "r1" and by_replica["successful_tasks"] == 2
    empty = cost.tasks_table(cstore, at(10_000), at(20_000))
    assert tuple(empty.columns) == cost.COLUMNS["tasks_table"] and empty.empty


def test_summary_plans_the_replica_task_join_only_for_grouping_replica(cstore, monkeypatch):
    """The per-replica task join (section ``replica_tasks``) is cut out of the statement unless grouping
    'replica' is asked (ClickHouse plans a constant-false branch anyway: 30-50 ms at 10M calls); the
    figures of the other groupings are the same with and without it."""
    _worked_example(cstore)
    start, end = at(0), at(180)
    sent = record_statements(cstore, monkeypatch)
    with_replica = cost.period_summaries(cstore, start, end, ("", "task_type", "replica"), previous=True)
    without = cost.period_summaries(cstore, start, end, ("", "task_type"), previous=True)
    texts = [text for tag, text in sent if tag == "query.cost_period_summary"]
    assert len(texts) == 2
    assert "LEFT JOIN" in texts[0] and "ended AS (" in texts[0]
    assert "LEFT JOIN" not in texts[1] and "ended AS (" not in texts[1] and "-- end section" not in texts[1]
    for key in ("", "task_type", "previous"):
        pd.testing.assert_frame_equal(with_replica[key], without[key])
    assert one(with_replica[""])["successful_tasks"] == 2 and one(with_replica["replica"])["successful_tasks"] == 2
    assert with_replica["task_type"]["successful_tasks"].sum() == 2


def test_sql_without_names_only_sections_the_query_marks():
    with pytest.raises(UnknownQuery, match="no section"):
        sql_without("cost_period_summary", frozenset({"replica"}))
    with pytest.raises(UnknownQuery, match="no section"):
        sql_without("cost_cpst_trend", frozenset({"replica_tasks"}))
    assert sql_without("cost_period_summary", frozenset()) == sql("cost_period_summary")
    # every marked section of every query closes, so cutting one never eats the rest of a statement
    for path in sorted(QUERIES_DIR.glob("*.sql")):
        text = path.read_text()
        opened = re.findall(r"^[ \t]*-- section: (\w+)[ \t]*$", text, re.M)
        closed = re.findall(r"^[ \t]*-- end section: (\w+)[ \t]*$", text, re.M)
        assert opened == closed, path.name
        for name in set(opened):
            cut = sql_without(path.stem, frozenset({name}))
            assert f"section: {name}" not in cut and len(cut) < len(text), (path.name, name)


def test_query_arguments_are_validated(cstore):
    with pytest.raises(ValueError, match="empty"):
        cost.period_summary(cstore, at(60), at(0))
    with pytest.raises(ValueError, match="cannot group by"):
        cost.period_summary(cstore, at(0), at(60), by="colour")
    with pytest.raises(ValueError, match="unknown filter"):
        cost.period_summary(cstore, at(0), at(60), filters={"region": "eu"})
    with pytest.raises(ValueError, match="multiple of 60"):
        cost.cpst_trend(cstore, at(0), at(60), 90)
    with pytest.raises(ValueError, match="job window is empty"):
        jobs.run_jobs(cstore, start=at(60), end=at(60))
