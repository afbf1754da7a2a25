"""The dashboard's grouped cost queries (issue 18 item 3) against the raw rows they summarise.

``cost.period_summaries`` answers the cost page's headline and its three breakdowns in one query,
and ``cost.replica_windows`` counts a replica's successful tasks by probing the call pieces
against the window's successful tasks. Each figure is recomputed here in pandas from the raw rows
of ``call_costs``, ``replica_minutes`` and ``tasks`` (the cost jobs' outputs over the dashboard
seed: client -> gateway -> engine spans as the collectors store them, tests/dashboard_seed.py), so
a grouping that double counts, drops a group or mixes the idle share fails.
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

from conftest import drop_store, new_store
from dashboard_seed import generate, run_cost_jobs, stop_periodic_jobs
from schema.queries import cost

EXACT = {"rel": 1e-9, "abs": 1e-12}
DIMS = {"task_type": "task_type", "tenant": "tenant_id", "model": "model"}


@pytest.fixture(scope="module")
def seeded():
    store = new_store()
    stop_periodic_jobs(store)
    out = generate(store, tasks=150, hours=0.5)
    if not run_cost_jobs(store, out.start, out.end):
        pytest.skip("no cost jobs in this build")
    yield store, out
    drop_store(store)


def _raw(store, table: str, start, end) -> pd.DataFrame:
    return store.query_df(f"SELECT * FROM {table} WHERE minute >= {{s:DateTime}} AND minute < {{e:DateTime}}",
                          {"s": start.replace(tzinfo=None), "e": end.replace(tzinfo=None)}, tag="test.raw")


def test_one_query_holds_every_grouping_as_the_raw_rows_do(seeded):
    store, out = seeded
    start, end = out.start + timedelta(minutes=5), out.end  # a window that cuts tasks and calls
    pieces, minutes, tasks = (_raw(store, t, start, end) for t in ("call_costs", "replica_minutes", "tasks"))
    assert len(pieces) > 100 and tasks["outcome"].eq("success").sum() > 50  # the seed gave real data

    got = cost.period_summaries(store, start, end, ("", *DIMS))
    assert list(got) == ["", *DIMS]
    spend, idle, alloc = minutes["spend_usd"].sum(), minutes["idle_usd"].sum(), minutes["allocated_usd"].sum()

    fleet = got[""]
    assert len(fleet) == 1 and fleet.iloc[0]["grp"] == ""
    assert fleet.iloc[0]["spend_usd"] == pytest.approx(spend, **EXACT)  # exact mode: the replica-minutes' own
    assert fleet.iloc[0]["idle_usd"] == pytest.approx(idle, **EXACT)
    assert fleet.iloc[0]["allocated_usd"] == pytest.approx(pieces["cost_usd"].sum(), **EXACT)
    assert fleet.iloc[0]["requests"] == pieces["requests"].sum()
    assert fleet.iloc[0]["successful_tasks"] == (tasks["outcome"] == "success").sum()

    for by, column in DIMS.items():
        frame = got[by].set_index("grp")
        allocated = pieces.groupby(column)["cost_usd"].sum()
        ended = tasks.groupby(column)["outcome"].agg(total="size", ok=lambda s: (s == "success").sum())
        assert set(frame.index) == set(allocated.index) | set(ended.index), by
        for grp, row in frame.iterrows():
            a = allocated.get(grp, 0.0)
            assert row["allocated_usd"] == pytest.approx(a, **EXACT), (by, grp)
            # a group's spend = its allocated cost + the fleet's idle in proportion to it (shared/DESIGN.md)
            assert row["spend_usd"] == pytest.approx(a + idle * a / alloc, **EXACT), (by, grp)
            assert row["tasks"] == (ended.loc[grp, "total"] if grp in ended.index else 0), (by, grp)
            assert row["successful_tasks"] == (ended.loc[grp, "ok"] if grp in ended.index else 0), (by, grp)
        assert frame["spend_usd"].sum() == pytest.approx(spend, **EXACT), by  # the groups add up to the fleet
        # the one-query frame is what the single-grouping call returns, row for row
        pd.testing.assert_frame_equal(got[by], cost.period_summary(store, start, end, by))


def test_replica_successes_are_the_distinct_successful_tasks_each_replica_ran(seeded):
    store, out = seeded
    start, end, window = out.start, out.end, 600
    windows = cost.replica_windows(store, start, end, window)
    pieces = _raw(store, "call_costs", start - timedelta(days=1), end)
    tasks = _raw(store, "tasks", start, end)
    ok = tasks[tasks["outcome"] == "success"][["task_id", "minute"]]
    pairs = pieces[pieces["task_id"] != ""][["task_id", "replica"]].drop_duplicates().merge(ok, on="task_id")
    pairs["window_start"] = pd.to_datetime(pairs["minute"]).dt.floor(f"{window}s")
    expected = pairs.groupby(["replica", "window_start"])["task_id"].nunique()
    assert expected.sum() > 50
    got = windows.assign(window_start=pd.to_datetime(windows["window_start"]))
    got = got[got["successful_tasks"] > 0].set_index(["replica", "window_start"])["successful_tasks"]
    assert got.to_dict() == {k: v for k, v in expected.to_dict().items()}
    # and a success on two replicas counts on both: the seed's client retries move tasks across replicas
    assert pairs.groupby("task_id")["replica"].nunique().max() >= 2
