"""``job_tasks`` reads its rooted tasks' call pieces from their earliest root start and its rootless
tasks' from ``task_lookback_s`` back. A task must still get every piece of every call it made,
wherever the window starts: a rooted task whose first attempt ran long before the window and whose
retry ran inside it, and a rootless (abandoned) one likewise. Every figure is worked out by hand.
"""

from __future__ import annotations

import pytest

from schema import jobs
from tests.test_cost_job_views import WINDOW, rows
from tests.test_cost_support import _module_store, cstore, Spans, at, fleet_yaml, metrics_up, sync  # noqa: F401

EXACT = dict(rel=1e-12, abs=1e-12)
WS, WE = 7200, 10800  # the trailing run's window, seconds after T0: minutes 120-179


def _long_tasks(store) -> None:
    # One H100 at $3.60/GPU-hour = $0.06 a minute; capacity 1e-9 (fleet_yaml's default): a minute
    # with work allocates all its spend, so a call alone in its minute costs $0.06.
    sync(store, fleet_yaml(price=3.60))
    metrics_up(store, "r1", [1, 2, 3, 119, 120, 121, 123])
    sp = Spans()
    # T1 (root 30 s .. 7300 s, success): attempt 1 in minute 1, its retry in minute 120 (in the window)
    sp.task("trT1", "T1", 30, 7300)
    sp.call(task_id="T1", step="s", attempt=1, start=60, end=90, prompt=100, output=10, trace="trT1")
    sp.call(task_id="T1", step="s", attempt=2, start=7230, end=7250, prompt=100, output=10, trace="trT1")
    # T2 (no root span): calls in minutes 2 and 121; last end 7280 s + abandon_timeout_s 600 = 7880 s
    sp.call(task_id="T2", step="y", start=120, end=150, prompt=100, output=10, trace="trT2")
    sp.call(task_id="T2", step="y", call_index=2, start=7260, end=7280, prompt=100, output=10, trace="trT2")
    # T3 (root 200 s .. 300 s): ended before the window, not the trailing run's
    sp.task("trT3", "T3", 200, 300)
    sp.call(task_id="T3", step="z", start=210, end=220, prompt=100, output=10, trace="trT3")
    # T4 (root 7400 s .. 7500 s): its first call 250 s before its root started (the clients' and
    # engines' clocks disagree; the floor keeps 5 minutes of slack), in minute 119, before the window
    sp.task("trT4", "T4", 7400, 7500)
    sp.call(task_id="T4", step="w", start=7150, end=7160, prompt=100, output=10, trace="trT4")
    sp.call(task_id="T4", step="w", call_index=2, start=7410, end=7420, prompt=100, output=10, trace="trT4")
    sp.flush(store)


def test_tasks_get_the_pieces_before_the_window(cstore):
    _long_tasks(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(WE))
    jobs.run_jobs(cstore, start=at(WS), end=at(WE))  # the trailing run rewrites the window's tasks
    df = cstore.query_df("SELECT * FROM tasks_history WHERE minute >= {ws:DateTime} ORDER BY task_id",
                         {"ws": at(WS)}, tag="test.read")
    assert list(df["task_id"]) == ["T1", "T2", "T4"]
    t1, t2, t4 = (df.iloc[i] for i in range(3))
    # T1: $0.06 (minute 1, attempt 1: ok, not the highest ok attempt of (s, call) -> retry waste)
    # + $0.06 (minute 120, attempt 2 -> useful) = $0.12
    assert (t1["outcome"], t1["has_root"], t1["attempts"], t1["calls"], t1["steps"]) == ("success", 1, 2, 2, 1)
    assert t1["cost_usd"] == pytest.approx(0.12, **EXACT)
    assert t1["useful_usd"] == pytest.approx(0.06, **EXACT)
    assert t1["retry_waste_usd"] == pytest.approx(0.06, **EXACT)
    assert (t1["prompt_tokens"], t1["output_tokens"]) == (200, 20)
    assert t1["start_time"] == at(30) and t1["end_time"] == at(7300)
    # T2: abandoned at 7280 + 600 = 7880 s; $0.06 (minute 2) + $0.06 (minute 121), all failed-task waste
    assert (t2["outcome"], t2["has_root"], t2["attempts"], t2["calls"]) == ("abandoned", 0, 2, 2)
    assert t2["cost_usd"] == pytest.approx(0.12, **EXACT)
    assert t2["failed_task_waste_usd"] == pytest.approx(0.12, **EXACT)
    assert t2["start_time"] == at(120) and t2["end_time"] == at(7880)
    # T4: $0.06 (minute 119, before the window and its root) + $0.06 (minute 123), useful both
    assert (t4["outcome"], t4["calls"]) == ("success", 2)
    assert t4["cost_usd"] == pytest.approx(0.12, **EXACT)
    assert t4["useful_usd"] == pytest.approx(0.12, **EXACT)
    # one row per task over the whole range: the trailing run replaced the window's rows
    counts = dict(cstore.query("SELECT task_id, count() FROM tasks_history GROUP BY task_id",
                               tag="test.read").result_rows)
    assert counts == {"T1": 1, "T2": 1, "T3": 1, "T4": 1}


# Each task's cost, the same in every window that holds its end: one H100, $0.06 a minute, capacity
# 1e-9, each call alone in its minute: $0.06 a call. (outcome, has_root, calls, cost, useful, failed-task waste)
LONG_TASKS = {
    "T1": ("success", 1, 2, 0.12, 0.06, 0.0),  # ends 7300 s; attempt 1 (minute 1) retry waste, 2 useful
    "T2": ("abandoned", 0, 2, 0.12, 0.0, 0.12),  # last call ends 7280 s + 600 s: ends 7880 s
    "T3": ("success", 1, 1, 0.06, 0.06, 0.0),  # ends 300 s
    "T4": ("success", 1, 2, 0.12, 0.12, 0.0),  # ends 7500 s; its first call in minute 119
}


@pytest.mark.parametrize("lo, hi, ended", [
    (0, WE, ("T1", "T2", "T3", "T4")),
    (WS, WE, ("T1", "T2", "T4")),  # the trailing window: T1's and T2's first calls 2 hours before it
    (7260, 7500, ("T1",)),  # T4 ends at the window's end, not in it; T2 after it
    # T1's first call inside, its end after it; T2 as the window's end sees it: one call, ended
    # 150 s, abandoned at 150 + 600 = 750 s (its second call, at 7260 s, is after the window)
    (60, 7200, ("T2", "T3")),
    (7300, 7880, ("T1", "T4")),
])
def test_windows_cutting_tasks_give_their_whole_cost(cstore, lo, hi, ended):
    """job_tasks over windows that start before, inside and after the tasks' first calls: the tasks
    that ended in ``[lo, hi)``, each with all of its pieces."""
    _long_tasks(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(WE))  # the call pieces job_tasks reads
    df = rows(cstore, f"SELECT * FROM job_tasks({WINDOW})", {"ws": at(lo), "we": at(hi)}, ["task_id"])
    assert tuple(df["task_id"]) == ended
    for t in df.to_dict("records"):
        outcome, has_root, calls, usd, useful, failed = LONG_TASKS[t["task_id"]]
        if t["task_id"] == "T2" and hi < 7260:
            calls, usd, failed = 1, 0.06, 0.06
            assert t["end_time"] == at(750)
        assert (t["outcome"], t["has_root"], t["calls"]) == (outcome, has_root, calls), t["task_id"]
        assert (t["cost_usd"], t["useful_usd"], t["failed_task_waste_usd"]) == (
            pytest.approx(usd, **EXACT), pytest.approx(useful, **EXACT), pytest.approx(failed, **EXACT)), t["task_id"]
