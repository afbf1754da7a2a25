"""Property tests of the cost model over random fleets, prices and calls (hypothesis).

Invariants (shared/DESIGN.md "Cost model"): allocated + idle == spend for every replica-minute
and every window (relative 1e-9); allocated <= spend x min(1, work / capacity); the tasks'
categories + unattributed + unspanned + idle == spend; no cost is negative; a task's cost == the
sum of its calls' cost == the sum of its categories. Fleets mix billing modes, fleet / learned
capacities and engine counters that the spans do not fully explain (gap work, unspanned rows).
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from schema import jobs
from schema.queries import cost
from tests.test_cost_support import Spans, _module_store, at, metrics_up, reset, sync  # noqa: F401

REL = 1e-9
SHAPES = ("full", "engine_only", "crashed", "client_only", "direct")

replica_st = st.fixed_dictionaries({
    "gpu_count": st.integers(1, 4),
    "price": st.floats(0.5, 12.0, allow_nan=False),
    "new_price": st.one_of(st.none(), st.tuples(st.integers(1, 9), st.floats(0.0, 12.0, allow_nan=False))),
    "up": st.sets(st.integers(0, 9), max_size=10),
    "billing": st.sampled_from(["on_demand", "reserved"]),
    "capacity": st.sampled_from([None, 50.0, 5000.0]),
    # cumulative prompt / generation counters scraped at +45 s of these minutes (series from T0)
    "counters": st.dictionaries(st.integers(0, 9), st.tuples(st.integers(0, 3000), st.integers(0, 800)), max_size=4),
})
call_st = st.fixed_dictionaries({
    "replica": st.sampled_from(["r0", "r1", "r2", "rx"]),  # rx: not in fleet.yaml
    "start": st.integers(0, 539),
    "duration": st.sampled_from([0, 1, 7, 30, 59, 61, 150]),
    "prompt": st.integers(0, 2000),
    "cached_frac": st.sampled_from([0.0, 0.5, 1.0]),
    "output": st.integers(0, 500),
    "task": st.sampled_from([None, "T1", "T2", "T3", "T4"]),
    "step": st.sampled_from(["1", "2"]),
    "attempt": st.integers(1, 3),
    "ok": st.booleans(),
    "shape": st.sampled_from(SHAPES),
    "choices": st.sampled_from([1, 1, 2]),
    "call_index": st.sampled_from([None, 1, 2]),
})
task_st = st.sampled_from(["success", "failure", "abandoned", "bogus", None])  # None: no root span


def _fleet_text(replicas) -> str:
    gpu_lines, rep_lines = [], []
    for i, rep in enumerate(replicas):
        gpu_lines.append(f"  G{i}:\n    prices:\n      - {{usd_per_gpu_hour: {rep['price']!r}, valid_from: 2025-01-01}}")
        if rep["new_price"] is not None:
            minute, price = rep["new_price"]
            gpu_lines.append(f"      - {{usd_per_gpu_hour: {price!r}, valid_from: '{at(60 * minute).isoformat()}Z'}}")
        cap = f", capacity: {rep['capacity']}" if rep["capacity"] else ""
        rep_lines.append(f"  r{i}: {{gpu_type: G{i}, gpu_count: {rep['gpu_count']}, billing: {rep['billing']}{cap}}}")
    return ("gpu_types:\n" + "\n".join(gpu_lines) + "\n" + "replicas:\n" + "\n".join(rep_lines) + "\n"
            "unknown_replica: {gpu_type: G0, gpu_count: 2}\nallocation: {w_prefill: 0.25, w_decode: 1.0}\n"
            "abandon_timeout_s: 600\n")


def _write(store, replicas, calls, outcomes):
    sync(store, _fleet_text(replicas))
    for i, rep in enumerate(replicas):
        if rep["up"]:
            counters, totals = {}, [0, 0]
            for minute in sorted(rep["counters"]):  # cumulative: running sums of the drawn increases
                totals = [totals[0] + rep["counters"][minute][0], totals[1] + rep["counters"][minute][1]]
                counters[minute] = tuple(totals)
            metrics_up(store, f"r{i}", sorted(rep["up"]), counters=counters)
    sp = Spans()
    traces = {}
    for task_id, outcome in zip(("T1", "T2", "T3", "T4"), outcomes):
        traces[task_id] = f"trace-{task_id}"
        if outcome is not None:
            sp.task(traces[task_id], task_id, 0, 700, outcome=outcome)
    for c in calls:
        shape = c["shape"]
        prompt = c["prompt"]
        sp.call(task_id=c["task"], step=c["step"], attempt=c["attempt"], start=c["start"],
                end=c["start"] + c["duration"], replica=c["replica"], prompt=prompt,
                cached=int(prompt * c["cached_frac"]), output=c["output"] if c["ok"] else 0,
                streamed=c["output"], ok=c["ok"] and shape != "crashed", partial=not c["ok"] and c["output"] > 0,
                client=shape in ("full", "client_only", "direct", "crashed"),
                gateway=shape in ("full", "crashed"), engine=shape in ("full", "engine_only", "direct"),
                trace=traces.get(c["task"]) if c["task"] else None, choices=c["choices"],
                call_index=c["call_index"])
    sp.flush(store)


def _frame(store, table: str, columns: list[str]) -> pd.DataFrame:
    df = store.query_df(f"SELECT {', '.join(columns)} FROM {table}", tag="test.frame")
    return df if len(df.columns) else pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)


# No shrinking: one example costs a job run (~1 s on a loaded machine); a failure prints the
# unshrunk example, which is small enough to read. Keeps the file inside its time budget.
@settings(max_examples=8, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(replicas=st.lists(replica_st, min_size=1, max_size=3), calls=st.lists(call_st, max_size=12),
       outcomes=st.lists(task_st, min_size=4, max_size=4), window=st.tuples(st.integers(0, 29), st.integers(1, 30)))
def test_conservation_and_non_negative_costs(_module_store, replicas, calls, outcomes, window):
    store = _module_store
    reset(store)
    _write(store, replicas, calls, outcomes)
    # 30 minutes: every rootless task is abandoned (last call <= 690 s, timeout 600 s) inside it.
    jobs.run_jobs(store, start=at(0), end=at(1800))

    rm = _frame(store, "replica_minutes", ["replica", "minute", "spend_usd", "allocated_usd", "idle_usd", "work",
                                           "capacity_work"])
    pieces = _frame(store, "call_costs", ["replica", "minute", "cost_usd", "category", "task_id", "call_id"])
    tasks = _frame(store, "tasks", ["task_id", "cost_usd", "useful_usd", "retry_waste_usd", "failed_task_waste_usd",
                                    "pending_usd", "partial_usd"])
    spend = float(rm["spend_usd"].sum()) if len(rm) else 0.0

    # allocated + idle == spend for every replica-minute, and allocated == its pieces' cost
    piece_sums = pieces.groupby(["replica", "minute"])["cost_usd"].sum().to_dict() if len(pieces) else {}
    for row in rm.itertuples():
        assert _close(row.allocated_usd + row.idle_usd, row.spend_usd), row
        if row.capacity_work > 0:  # utilisation: never more than spend x work / capacity
            assert row.allocated_usd <= row.spend_usd * min(1.0, row.work / row.capacity_work) * (1 + REL) + 1e-12, row
        assert _close(piece_sums.get((row.replica, row.minute), 0.0), row.allocated_usd), row
    # pieces only where the replica-minute has spend rows (or no replica at all: client evidence)
    for (replica, minute), value in piece_sums.items():
        if value > 0:
            assert ((rm["replica"] == replica) & (rm["minute"] == minute)).any()

    # no negative money anywhere
    assert (rm[["spend_usd", "allocated_usd", "idle_usd"]] >= 0).all().all()
    assert (pieces["cost_usd"] >= 0).all()
    assert (tasks.drop(columns="task_id") >= 0).all().all()

    # tasks' categories + unattributed + idle == spend (every task ended inside the window)
    categories = float((tasks["useful_usd"] + tasks["retry_waste_usd"] + tasks["failed_task_waste_usd"]
                        + tasks["pending_usd"]).sum()) if len(tasks) else 0.0
    unattributed = float(pieces.loc[pieces["category"] == "unattributed", "cost_usd"].sum()) if len(pieces) else 0.0
    unspanned = float(pieces.loc[pieces["category"] == "unspanned", "cost_usd"].sum()) if len(pieces) else 0.0
    idle = float(rm["idle_usd"].sum()) if len(rm) else 0.0
    assert _close(categories + unattributed + unspanned + idle, spend)
    assert set(pieces.loc[pieces["task_id"] != "", "task_id"]) <= set(tasks["task_id"])

    # a task's cost == the sum of its calls' cost == the sum of its categories
    calls_cost = pieces.groupby("task_id")["cost_usd"].sum().to_dict() if len(pieces) else {}
    for row in tasks.itertuples():
        assert _close(row.cost_usd, calls_cost.get(row.task_id, 0.0)), row
        assert _close(row.cost_usd, row.useful_usd + row.retry_waste_usd + row.failed_task_waste_usd
                      + row.pending_usd), row
        assert row.partial_usd <= row.cost_usd + 1e-12

    # every window: the summary conserves spend, and its categories add up to it
    a, b = sorted(window)
    if a == b:
        b = a + 1
    s = cost.period_summary(store, at(60 * a), at(60 * b)).iloc[0]
    assert _close(s["allocated_usd"] + s["idle_usd"], s["spend_usd"])
    parts = (s["useful_usd"] + s["retry_waste_usd"] + s["failed_task_waste_usd"] + s["pending_usd"]
             + s["unattributed_usd"] + s["unspanned_usd"] + s["idle_usd"])
    assert _close(parts, s["spend_usd"])
    grouped = cost.period_summary(store, at(60 * a), at(60 * b), by="task_type")
    if len(grouped) and s["allocated_usd"] > 0:
        assert _close(float(grouped["spend_usd"].sum()), s["spend_usd"])


@pytest.mark.parametrize("shape", SHAPES)
def test_each_call_shape_is_counted_exactly_once(_module_store, shape):
    store = _module_store
    reset(store)
    replicas = [{"gpu_count": 1, "price": 6.0, "new_price": None, "up": {0}, "billing": "on_demand",
                 "capacity": None, "counters": {}}]
    call = {"replica": "r0", "start": 5, "duration": 10, "prompt": 0, "cached_frac": 0.0, "output": 40,
            "task": "T1", "step": "1", "attempt": 1, "ok": shape != "crashed", "shape": shape, "choices": 1,
            "call_index": None}
    _write(store, replicas, [call], ["success", None, None, None])
    jobs.run_jobs(store, start=at(0), end=at(1800))
    calls = _frame(store, "call_costs", ["call_id", "call_source", "task_id", "output_tokens", "cost_usd"])
    assert calls["call_id"].nunique() == 1  # one unit of work, whatever spans saw it
    row = calls.iloc[0]
    expected_source = {"full": "engine", "engine_only": "engine", "crashed": "gateway", "client_only": "client",
                       "direct": "engine"}[shape]
    assert row["call_source"] == expected_source
    # an engine span alone carries no task context (vLLM drops baggage): unattributed, not T1's
    assert row["task_id"] == ("" if shape == "engine_only" else "T1")
    assert row["output_tokens"] == 40
    # the replica is priced only when the evidence names it (client-only evidence does not)
    assert row["cost_usd"] == pytest.approx(0.0 if shape == "client_only" else 0.1, rel=1e-12)
