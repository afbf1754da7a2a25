"""The periodic cost jobs as refreshable materialized views, run by the embedded engine itself.

Uses data a few minutes old (the views work on the wall clock), ``SYSTEM REFRESH VIEW`` /
``SYSTEM WAIT VIEW`` through ``schema.jobs.refresh`` and checks the live -> history hand-over.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from schema import jobs
from schema.queries import cost
from tests import test_cost_support as support
from tests.test_cost_support import Spans, fleet_yaml, hold_the_schedule, metrics_up, sync


def test_refresh_chain_live_window_late_span_and_history(store, monkeypatch):
    # The chain is driven by hand: it runs only when jobs.refresh runs it.
    hold_the_schedule(store)
    now = datetime.now(timezone.utc).replace(tzinfo=None, second=0, microsecond=0)
    base = now - timedelta(minutes=25)
    monkeypatch.setattr(support, "T0", base)  # span builders place times relative to T0
    # A 30-minute trailing window: minutes older than 20 min are copied to history on the next run.
    sync(store, fleet_yaml(price=6.0, w_prefill=0.0) + "jobs: {window_s: 1800}\n")
    metrics_up(store, "r1", [1, 18, 19])
    sp = Spans()
    sp.task("trA", "A", 50, 70)  # task A in minute 1 (25 min ago): will move to history
    sp.call(task_id="A", start=61, end=65, prompt=0, output=10, trace="trA")
    sp.task("trB", "B", 1080, 1190)  # task B in minutes 18-19 (7 min ago): stays live
    sp.call(task_id="B", start=1081, end=1085, prompt=0, output=10, trace="trB")
    sp.call(task_id="B", step="0", start=1070, end=1071, ok=False, output=0, streamed=0, engine=False, trace="trB")
    sp.flush(store)

    jobs.refresh(store)
    state = jobs.status(store)
    assert set(state["view"]) == set(jobs.REFRESH_VIEWS)
    assert (state["exception"] == "").all(), state
    clock = store.query("SELECT ws, we, window_s FROM job_clock", tag="test").result_rows
    assert len(clock) == 1 and clock[0][2] == 1800 and clock[0][1] >= now
    # first run: everything is computed into the live tables
    assert store.scalar("SELECT count() FROM call_costs_live", tag="test") == 3
    # the chain carries the error taxonomy: the failed attempt broke its stream
    assert store.query("SELECT error_class, count() FROM call_costs_live GROUP BY error_class ORDER BY error_class",
                       tag="test").result_rows == [("", 2), ("upstream_error", 1)]
    s = cost.period_summary(store, base, base + timedelta(minutes=25)).iloc[0]
    assert s["requests"] == 3 and s["useful_usd"] == pytest.approx(0.2, rel=1e-12)
    assert s["spend_usd"] == pytest.approx(0.3, rel=1e-12)  # 3 up minutes x $0.10

    # The copy step run twice before the watermark moves (a manual refresh racing the schedule)
    # copies minute 1 once.
    for _ in range(2):
        store.command("SYSTEM REFRESH VIEW cost_copy_call_costs_mv", tag="test")
        store.command("SYSTEM WAIT VIEW cost_copy_call_costs_mv", tag="test")
    assert store.scalar("SELECT count() FROM call_costs_history", tag="test") == 1

    # A late span of task B in minute 19 arrives; the next run absorbs it.
    sp.call(task_id="B", step="2", start=1141, end=1145, prompt=0, output=30, trace="trB")
    sp.flush(store)
    jobs.refresh(store)
    s = cost.period_summary(store, base, base + timedelta(minutes=25)).iloc[0]
    assert s["requests"] == 4 and s["useful_usd"] == pytest.approx(0.3, rel=1e-12)
    assert s["successful_tasks"] == 2 and s["spend_usd"] == pytest.approx(0.3, rel=1e-12)
    # ... while minute 1, older than window - 10 min, moved to history under the watermark
    watermark = store.scalar("SELECT max(watermark) FROM cost_watermark", tag="test")
    assert base + timedelta(minutes=2) <= watermark <= base + timedelta(minutes=18)
    assert store.scalar("SELECT count() FROM call_costs_history", tag="test") == 1
    assert store.scalar("SELECT count() FROM replica_minutes_history", tag="test") == 1
    assert store.scalar("SELECT count() FROM tasks_history", tag="test") == 1
    tasks = store.query_df("SELECT task_id, cost_usd FROM tasks ORDER BY task_id", tag="test")
    assert tasks["task_id"].tolist() == ["A", "B"]
    assert tasks["cost_usd"].tolist() == pytest.approx([0.1, 0.2], rel=1e-12)


def test_rows_arriving_after_a_run_for_a_minute_the_next_copy_moves_are_marked_late(store, monkeypatch):
    """The copy step moves the *_live rows the previous run computed. Spans and scrapes of a minute 24 min
    old that arrive after that run are not in them; they are newer than the watermark, and a minute marked
    by nothing would reach history without them for good. They are marked at ingest (below the next
    copy's cutoff + 1 minute), and recompute_late puts them into history.

    The case needs exactly one chain run before the data: a second would copy and raise the watermark
    past the minute, so the schedule is held and the test alone runs the chain."""
    hold_the_schedule(store)
    now = datetime.now(timezone.utc).replace(tzinfo=None, second=0, microsecond=0)
    base = now - timedelta(minutes=25)
    monkeypatch.setattr(support, "T0", base)
    sync(store, fleet_yaml(price=6.0, w_prefill=0.0) + "jobs: {window_s: 1800}\n")
    jobs.refresh(store)  # a run before any data: job_clock's end is now (or the next minute)
    we = store.scalar("SELECT max(we) FROM job_clock", tag="test").replace(tzinfo=None)
    assert now <= we <= now + timedelta(minutes=2)
    # minute 1 (24 min old, below the next cutoff we - 20 min) and minute 18 (7 min old, live) arrive now
    metrics_up(store, "r1", [1, 18])
    sp = Spans()
    sp.task("trA", "A", 50, 70)
    sp.call(task_id="A", start=61, end=65, prompt=0, output=10, trace="trA")
    sp.task("trB", "B", 1080, 1100)
    sp.call(task_id="B", start=1081, end=1085, prompt=0, output=10, trace="trB")
    sp.flush(store)
    late = store.query("SELECT source, minute, sum(rows) FROM late_minutes GROUP BY source, minute "
                       "ORDER BY source, minute", tag="test").result_rows
    # r1's 3 gauge points of minute 1; task A's root span (starts at 50 s: minute 0) and call A's
    # client, gateway request, gateway attempt and vLLM llm_request spans (minute 1); nothing of
    # minute 18 (live: the next run computes it)
    assert [(src, m.replace(tzinfo=None), n) for src, m, n in late] == [
        ("metrics", base + timedelta(minutes=1), 3), ("spans", base, 1), ("spans", base + timedelta(minutes=1), 4)]
    # not below the watermark yet (no copy ran): recompute_late leaves it pending
    assert jobs.recompute_late(store, retention_days=1) == []

    jobs.refresh(store)  # copies minute 1 as the first run computed it: no call, replica down
    mark = jobs.watermark(store)
    assert mark == we - timedelta(minutes=20)
    window = (base, base + timedelta(minutes=25))
    s = cost.period_summary(store, *window).iloc[0]
    assert s["requests"] == 1 and s["spend_usd"] == pytest.approx(0.1, rel=1e-12)  # minute 18 only

    # the late minute is re-run from history's side: [minute 1, watermark)
    assert jobs.recompute_late(store, retention_days=1) == [(base, mark)]
    s = cost.period_summary(store, *window).iloc[0]
    assert s["requests"] == 2 and s["successful_tasks"] == 2
    assert s["useful_usd"] == pytest.approx(0.2, rel=1e-12) and s["spend_usd"] == pytest.approx(0.2, rel=1e-12)
    assert jobs.recompute_late(store, retention_days=1) == []
