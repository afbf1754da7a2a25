"""Screening a long period on its busiest window: which window, the tasks it holds on its own clock,
the incidents moved onto it, and how many backtest replays a period takes."""

from __future__ import annotations

from datetime import datetime

import pytest

from planner.screen import (backtest_replays, busiest_window, faults_within, incident_window, screening_window,
                            window)
from planner.workload import Workload, hourly_counts
from serving.emulator.faults import FaultEvent
from serving.plans import CallPlan, RetryPolicy, StepPlan, TaskPlan

START = datetime(2026, 11, 2, 0, 0)
HOUR = 3600.0


def _workload(arrivals: list[float], hours: int) -> Workload:
    plans = tuple(TaskPlan(f"t{i}", "chat", "acme", a, (StepPlan("s", (CallPlan(100, 10),)),))
                  for i, a in enumerate(arrivals))
    return Workload(START, datetime(2026, 11, 2 + hours // 24, hours % 24), plans, RetryPolicy(), "least_loaded", 0,
                    hourly=hourly_counts(plans, hours * HOUR))


def test_the_busiest_window_is_the_run_of_hours_with_the_most_arrivals_earliest_on_a_tie():
    #          hour: 0  1  2  3  4  5  6  7
    hourly = (1, 5, 0, 6, 2, 1, 6, 0)
    assert busiest_window(hourly, 2) == 3  # 3+4: 8, 6+7: 6, 0+1: 6, 1+2: 5
    assert busiest_window(hourly, 3) == 1  # 1..3 and 4..6 hold 11 and 9; 3..5: 9, 2..4: 8
    assert busiest_window((2, 2, 2), 1) == 0
    assert busiest_window(hourly, 8) == 0 and busiest_window(hourly, 20) == 0


def test_a_window_keeps_its_tasks_on_its_own_clock():
    w = _workload([10.0, 3 * HOUR + 5, 3 * HOUR + 7, 4 * HOUR - 1, 4 * HOUR, 5 * HOUR + 1], hours=6)
    sub = window(w, 3 * HOUR, 5 * HOUR)
    assert [p.task_id for p in sub.plans] == ["t1", "t2", "t3", "t4"]
    assert [p.arrival_s for p in sub.plans] == [5.0, 7.0, HOUR - 1, HOUR]
    assert sub.start == datetime(2026, 11, 2, 3) and sub.end == datetime(2026, 11, 2, 5)
    assert sub.hourly == (3, 1) and sub.client == w.client and sub.gateway_policy == "least_loaded"


def test_a_period_longer_than_one_and_a_half_windows_is_screened_on_its_busiest_one():
    # 3 h at 1 h: hour 1 has 3 arrivals, the others 1
    w = _workload([100.0, HOUR + 1, HOUR + 2, HOUR + 3, 2 * HOUR + 1], hours=3)
    sub = screening_window(w, 1.0)
    assert (sub.start, sub.end, len(sub.plans)) == (datetime(2026, 11, 2, 1), datetime(2026, 11, 2, 2), 3)
    assert screening_window(w, 2.0) is None  # 3 h is not longer than 1.5 x 2 h
    assert screening_window(w, 0.0) is None  # screening off
    day = _workload([100.0] + [25 * HOUR + i for i in range(5)] + [60 * HOUR], hours=72)
    busiest = screening_window(day, 24.0)
    assert busiest.start == datetime(2026, 11, 2, 2) and len(busiest.plans) == 5  # 02:00 + 24 h reaches 25:00..25:59


def test_incidents_move_onto_the_window_or_it_does_not_hold_them():
    w = _workload([HOUR * h for h in range(10)], hours=10)
    sub = window(w, 2 * HOUR, 6 * HOUR)
    faults = [FaultEvent(2.5 * HOUR, "replica-1", "slowdown", 3.0, 3 * HOUR),
              FaultEvent(4 * HOUR, "replica-0", "crash", None, 4.5 * HOUR)]
    moved = faults_within(faults, sub, w)
    assert [(f.at_s, f.until_s, f.replica, f.kind, f.value) for f in moved] == [
        (0.5 * HOUR, HOUR, "replica-1", "slowdown", 3.0), (2 * HOUR, 2.5 * HOUR, "replica-0", "crash", None)]
    assert faults_within(faults + [FaultEvent(5.5 * HOUR, "replica-0", "crash", None, 6.5 * HOUR)], sub, w) is None
    assert faults_within([FaultEvent(HOUR, "replica-0", "crash", None, 2.5 * HOUR)], sub, w) is None
    assert faults_within([], sub, w) == []


def test_incidents_are_replayed_on_the_busiest_window_that_holds_them_all():
    # 10 h; arrivals per hour 1 1 1 2 1 3 1 1 1 1; one slowdown 4.5 h .. 5.2 h
    arrivals = [h * HOUR + 60.0 * i for h, n in enumerate((1, 1, 1, 2, 1, 3, 1, 1, 1, 1)) for i in range(n)]
    w = _workload(arrivals, hours=10)
    slow = [FaultEvent(4.5 * HOUR, "replica-1", "slowdown", 3.0, 5.2 * HOUR)]
    # 3-h windows holding 4.5 .. 5.2 h start at 3 h (hours 3-5: 6 tasks) or 4 h (hours 4-6: 5 tasks)
    sub = incident_window(w, slow, 3.0)
    assert (sub.start, sub.end, len(sub.plans)) == (datetime(2026, 11, 2, 3), datetime(2026, 11, 2, 6), 6)
    assert [(f.at_s, f.until_s) for f in faults_within(slow, sub, w)] == [(5400.0, 7920.0)]  # 1.5 h, 2.2 h
    late = [FaultEvent(9.5 * HOUR, "replica-0", "crash", None, 10 * HOUR)]
    assert incident_window(w, late, 3.0).start == datetime(2026, 11, 2, 7)  # the window ends with the period
    assert incident_window(w, slow + late, 3.0) is None  # 4.5 .. 10 h: longer than the window
    assert incident_window(w, [], 3.0) is None and incident_window(w, slow, 8.0) is None  # 10 h is not screened


@pytest.mark.parametrize("seeds,hours,replays", [(5, 24, 5), (5, 6, 5), (5, 48, 3), (5, 72, 2), (5, 168, 1),
                                                 (1, 24, 1), (9, 96, 3)])
def test_longer_periods_take_fewer_backtest_replays(seeds, hours, replays):
    assert backtest_replays(seeds, hours * HOUR) == replays


def test_a_long_period_is_searched_on_its_busiest_window_and_the_finalists_replayed_over_all_of_it(store):
    from planner.config import parse_plan_config
    from planner.report import render
    from planner.run import plan
    from planner_helpers import T0, measured_store
    from serving.emulator.fleet_sim import ReplicaSpec

    # 4 hours: 6 chats in each of hours 0, 1 and 3, 14 in hour 2 (the busiest); 2 replicas
    arrivals = [h * HOUR + 600.0 * i + 5 for h in (0, 1, 3) for i in range(6)] + [2 * HOUR + 250.0 * i + 5
                                                                                   for i in range(14)]
    plans = [TaskPlan(f"t{i:02d}", "chat", "acme", a, (StepPlan("respond", (CallPlan(600 + 11 * i, 80),)),),
                      slo_ttft_ms=2000, slo_e2e_ms=60000) for i, a in enumerate(sorted(arrivals))]
    measured_store(store, plans, [ReplicaSpec("r0"), ReplicaSpec("r1")], hours=4.5)
    config = parse_plan_config("backtest_seeds: 1\ntolerance: 0.5\nsearch: {screen_hours: 1, finalists: 2}\n"
                               "candidates:\n  - {name: one-h100, pools: [{gpu_type: H100, count: 1}]}\n")
    run = plan(store, T0, T0.replace(hour=T0.hour + 4), config, workers=0, progress=False, search=False,
               echo=lambda m: None)

    assert run.status != "backtest_failed", run.message
    assert run.screen == {"start": T0.replace(hour=T0.hour + 2).isoformat(),
                          "end": T0.replace(hour=T0.hour + 3).isoformat(), "tasks": 14}
    screened = {r.name: r for r in run.screened}
    # the current fleet, the operator's candidate and the levers, each replayed on hour 2 only
    assert run.screened[0].name == run.current and "one-h100" in screened and "lever-avoid-affinity" in screened
    assert {r.tasks for r in run.screened if not r.error} == {14}
    ok = sorted((r for r in run.screened[1:] if r.meets_slo), key=lambda r: (r.cpst_usd, r.gpus, r.name))
    assert [r.name for r in run.results] == [run.current] + [r.name for r in ok[:2]]
    assert {r.tasks for r in run.results} == {32}  # the finalists and the current fleet over the 4 hours
    assert run.recommended in {r.name for r in run.results}
    text = render(run)
    assert "Compared on the busiest day" in text and "replayed over the period" in text


def test_a_period_reaching_back_before_the_store_s_telemetry_is_replayed_from_where_it_begins(store):
    from datetime import timedelta

    from planner.config import parse_plan_config
    from planner.run import plan
    from planner_helpers import T0, measured_store
    from serving.emulator.fleet_sim import ReplicaSpec

    plans = [TaskPlan(f"t{i:02d}", "chat", "acme", 150.0 * i + 5, (StepPlan("respond", (CallPlan(700 + 9 * i, 60),)),),
                      slo_ttft_ms=2000, slo_e2e_ms=60000) for i in range(20)]
    measured_store(store, plans, [ReplicaSpec("r0"), ReplicaSpec("r1")], hours=1.0)
    messages = []
    run = plan(store, T0 - timedelta(hours=6), T0 + timedelta(hours=1), parse_plan_config("backtest_seeds: 1\n"),
               workers=0, progress=False, search=False, echo=messages.append)
    # six hours without a replica up are not replayed as six idle hours of the fleet
    assert run.start == T0 and run.workload["tasks"] == 20 and not run.screened
    assert f"telemetry of the period begins at {T0:%Y-%m-%d %H:%M} UTC" in " ".join(messages)
    assert run.backtest["passed"] and run.backtest["cpst_error"] < 0.01, run.backtest["problems"]
