"""Property tests of the cost model over random fleets, prices, capacities, retries and failures
(hypothesis).

Invariants (schema/jobs/README.md):

* conservation: allocated + idle == spend for every replica-minute and every window (relative
  1e-9); allocated <= spend x min(1, work / capacity); the categories + unattributed + unspanned +
  idle == spend; no cost is negative;
* category exclusivity: one piece per call and minute (the pieces' seconds add up to the call's), one
  category per call, the one the rule gives for the drawn task outcome, shape and attempts; a task's
  cost == the sum of its calls' cost == the sum of its categories, each the sum of its pieces of it.

Fleets mix billing modes, fleet / learned capacities, price changes inside a minute, replicas missing
from fleet.yaml and engine counters that the spans do not fully explain (gap work, unspanned rows).

EXAMPLES examples are drawn once from a fixed seed (``derandomize``: the same examples on every run
and machine). A job run costs ~1-2 s on this 2-core machine whatever its size, so the examples are
checked in batches of BATCH, one job run a batch: each example of a batch gets its own 30-minute slot
of time and its own replica, GPU type, task and trace names, and every check reads only its slot and
its names. The cost model keys everything by replica, minute and task, so an example's rows are the
ones it would get alone (the one thing they share, fleet.yaml's ``unknown_replica`` type, is priced
the same in every example). A failure names the example and prints it whole (no shrinking).
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from schema import jobs
from schema.queries import cost
from tests.test_cost_support import KEPT_TABLES, Spans, _module_store, at, metrics_up, reset, sync  # noqa: F401

REL = 1e-9
SHAPES = ("full", "engine_only", "crashed", "client_only", "direct")
EXAMPLES = 200
BATCH = 20
SLOT_S = 1800  # an example's calls start before 540 s and end before 690 s; rootless tasks end by 1290 s
TASKS = ("T1", "T2", "T3", "T4")

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
    "task": st.sampled_from([None, *TASKS]),
    "step": st.sampled_from(["1", "2"]),
    "attempt": st.integers(1, 3),
    "ok": st.booleans(),
    "shape": st.sampled_from(SHAPES),
    "choices": st.sampled_from([1, 1, 2]),
    "call_index": st.sampled_from([None, 1, 2]),
})
task_st = st.sampled_from(["success", "failure", "abandoned", "bogus", None])  # None: no root span
example_st = st.fixed_dictionaries({
    "replicas": st.lists(replica_st, min_size=1, max_size=3),
    "calls": st.lists(call_st, max_size=12),
    "outcomes": st.lists(task_st, min_size=len(TASKS), max_size=len(TASKS)),
    "window": st.tuples(st.integers(0, 29), st.integers(1, 30)),
})


def _key(example: dict) -> str:
    return json.dumps(example, sort_keys=True, default=sorted)


def _draw(n: int) -> list[dict]:
    """The first ``n`` distinct examples of ``example_st``, the same on every run (derandomize: a
    fixed seed); hypothesis draws a few examples twice (the simplest ones first), so it draws more."""
    drawn: dict[str, dict] = {}

    @settings(max_examples=n + n // 4, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(example_st)
    def collect(example):
        drawn.setdefault(_key(example), example)

    collect()
    return list(drawn.values())[:n]


_EXAMPLES: list[dict] = []


def examples() -> list[dict]:
    if not _EXAMPLES:
        _EXAMPLES.extend(_draw(EXAMPLES))
    return _EXAMPLES


class Slot:
    """Example ``k``'s names and times: replica ``r0`` is ``e<k>r0``, task ``T1`` is ``e<k>T1``, second
    ``s`` of the example is ``k x SLOT_S + s`` of the batch."""

    def __init__(self, k: int):
        self.k, self.offset = k, k * SLOT_S

    def replica(self, name: str) -> str:
        return f"e{self.k}{name}"

    def task(self, name: str | None) -> str | None:
        return None if name is None else f"e{self.k}{name}"

    def mine(self, replica: str) -> bool:
        return replica.startswith(f"e{self.k}r")

    def at(self, seconds: float):
        return at(self.offset + seconds)


def _fleet_text(batch: list[tuple[Slot, dict]]) -> str:
    gpu_lines = ["  GX:\n    prices:\n      - {usd_per_gpu_hour: 2.5, valid_from: 2025-01-01}"]
    rep_lines = []
    for slot, example in batch:
        for i, rep in enumerate(example["replicas"]):
            gpu = f"e{slot.k}G{i}"
            gpu_lines.append(f"  {gpu}:\n    prices:\n      - {{usd_per_gpu_hour: {rep['price']!r}, valid_from: 2025-01-01}}")
            if rep["new_price"] is not None:
                minute, price = rep["new_price"]
                gpu_lines.append(f"      - {{usd_per_gpu_hour: {price!r}, "
                                 f"valid_from: '{slot.at(60 * minute).isoformat()}Z'}}")
            cap = f", capacity: {rep['capacity']}" if rep["capacity"] else ""
            rep_lines.append(f"  {slot.replica(f'r{i}')}: {{gpu_type: {gpu}, gpu_count: {rep['gpu_count']}, "
                             f"billing: {rep['billing']}{cap}}}")
    return ("gpu_types:\n" + "\n".join(gpu_lines) + "\n" + "replicas:\n" + "\n".join(rep_lines) + "\n"
            "unknown_replica: {gpu_type: GX, gpu_count: 2}\nallocation: {w_prefill: 0.25, w_decode: 1.0}\n"
            "abandon_timeout_s: 600\n")


def _write(store, batch: list[tuple[Slot, dict]]) -> dict[str, tuple[int, int]]:
    """Store the batch's fleet, scrapes and spans; returns each span id of a call -> (example, call index)."""
    sync(store, _fleet_text(batch))
    sp = Spans()
    ids = {}
    for slot, example in batch:
        for i, rep in enumerate(example["replicas"]):
            if rep["up"]:
                counters, totals = {}, [0, 0]
                for minute in sorted(rep["counters"]):  # cumulative: running sums of the drawn increases
                    totals = [totals[0] + rep["counters"][minute][0], totals[1] + rep["counters"][minute][1]]
                    counters[slot.offset // 60 + minute] = tuple(totals)
                metrics_up(store, slot.replica(f"r{i}"), sorted(slot.offset // 60 + m for m in rep["up"]),
                           counters=counters)
        traces = {}
        for task_id, outcome in zip(TASKS, example["outcomes"]):
            traces[task_id] = f"trace-{slot.task(task_id)}"
            if outcome is not None:
                sp.task(traces[task_id], slot.task(task_id), slot.offset, slot.offset + 700, outcome=outcome)
        for index, c in enumerate(example["calls"]):
            shape, prompt, before = c["shape"], c["prompt"], len(sp.rows)
            sp.call(task_id=slot.task(c["task"]), step=c["step"], attempt=c["attempt"],
                    start=slot.offset + c["start"], end=slot.offset + c["start"] + c["duration"],
                    replica=slot.replica(c["replica"]), prompt=prompt, cached=int(prompt * c["cached_frac"]),
                    output=c["output"] if c["ok"] else 0, streamed=c["output"], ok=c["ok"] and shape != "crashed",
                    partial=not c["ok"] and c["output"] > 0,
                    client=shape in ("full", "client_only", "direct", "crashed"),
                    gateway=shape in ("full", "crashed"), engine=shape in ("full", "engine_only", "direct"),
                    trace=traces.get(c["task"]) if c["task"] else None, choices=c["choices"],
                    call_index=c["call_index"])
            ids.update({row[1]: (slot.k, index) for row in sp.rows[before:]})  # every span, each choice's too
    sp.flush(store)
    return ids


def expected_categories(calls, outcomes) -> dict[int, str]:
    """The category of each drawn call by the cost model's rule (schema/jobs/README.md): an
    engine span alone (vLLM drops baggage) -> unattributed; a call without task context with a client
    span (the client's own attempt, called directly, or the client span above the gateway's request) is
    a task of its own (its trace's root: schema/jobs/README.md "Tasks from standard spans"), a success
    when the call ended ok (useful), else a failure (failed_task_waste); a task whose outcome is failure or abandoned
    (a rootless task: its last call + 600 s is before the run's end) -> failed_task_waste; a root
    without a valid outcome -> pending; a successful task's call -> useful when it ended ok and is
    the highest ok attempt of its (step, call), else retry_waste."""
    outcome = {task: ("abandoned" if o is None else o if o in ("success", "failure", "abandoned") else "unknown")
               for task, o in zip(TASKS, outcomes)}
    in_task = [c["task"] is not None and c["shape"] != "engine_only" for c in calls]
    ok = [c["ok"] and c["shape"] != "crashed" for c in calls]
    derived = [c["task"] is None and c["shape"] in ("direct", "client_only", "full", "crashed") for c in calls]
    best: dict[tuple, int] = {}
    for c, tasked, fine in zip(calls, in_task, ok):
        if tasked and fine:
            key = (c["task"], c["step"], c["call_index"] or 0)
            best[key] = max(best.get(key, 0), c["attempt"])
    expected = {}
    for index, (c, tasked, fine) in enumerate(zip(calls, in_task, ok)):
        if derived[index]:
            expected[index] = "useful" if fine else "failed_task_waste"
        elif not tasked:
            expected[index] = "unattributed"
        elif outcome[c["task"]] in ("failure", "abandoned"):
            expected[index] = "failed_task_waste"
        elif outcome[c["task"]] == "unknown":
            expected[index] = "pending"
        elif fine and best.get((c["task"], c["step"], c["call_index"] or 0)) == c["attempt"]:
            expected[index] = "useful"
        else:
            expected[index] = "retry_waste"
    return expected


def _frame(store, table: str, columns: list[str]) -> pd.DataFrame:
    df = store.query_df(f"SELECT {', '.join(columns)} FROM {table}", tag="test.frame")
    return df if len(df.columns) else pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)


CATEGORIES = ("useful", "retry_waste", "failed_task_waste", "pending", "unattributed", "unspanned")
TASK_CATEGORIES = {"useful": "useful_usd", "retry_waste": "retry_waste_usd",
                   "failed_task_waste": "failed_task_waste_usd", "pending": "pending_usd"}


def _reset(store) -> None:
    """Empty the tables the previous batch wrote (``reset`` empties every table; most stay empty)."""
    written = store.query("SELECT name FROM system.tables WHERE database = currentDatabase() AND total_rows > 0 "
                          "AND engine NOT IN ('MaterializedView', 'View', 'Null')", tag="test.reset").result_rows
    for (table,) in written:
        if table not in KEPT_TABLES:
            store.command(f"TRUNCATE TABLE IF EXISTS `{table}`", tag="test.reset")


def test_the_examples_are_drawn_from_a_fixed_seed():
    drawn = examples()
    assert len(drawn) == EXAMPLES and len({_key(e) for e in drawn}) == EXAMPLES
    assert [_key(e) for e in _draw(EXAMPLES)] == [_key(e) for e in drawn]  # derandomized: the same every time
    # the examples reach every shape, outcome, billing and capacity kind
    calls = [c for e in drawn for c in e["calls"]]
    assert {c["shape"] for c in calls} == set(SHAPES)
    assert {o for e in drawn for o in e["outcomes"]} == {"success", "failure", "abandoned", "bogus", None}
    reps = [r for e in drawn for r in e["replicas"]]
    assert {r["billing"] for r in reps} == {"on_demand", "reserved"} and {r["capacity"] for r in reps} == {
        None, 50.0, 5000.0}
    assert sum(bool(r["counters"]) for r in reps) > 50 and sum(r["new_price"] is not None for r in reps) > 50


@pytest.mark.parametrize("first", range(0, EXAMPLES, BATCH))
def test_conservation_and_category_exclusivity(_module_store, first):
    store = _module_store
    _reset(store)
    batch = [(Slot(k), examples()[first + k]) for k in range(BATCH)]
    ids = _write(store, batch)
    # each slot's rootless tasks are abandoned (last call <= 689 s, timeout 600 s) inside it
    jobs.run_jobs(store, start=at(0), end=at(BATCH * SLOT_S))
    rm_all = _frame(store, "replica_minutes", ["replica", "minute", "spend_usd", "allocated_usd", "idle_usd", "work",
                                               "capacity_work"])
    pieces_all = _frame(store, "call_costs", ["replica", "minute", "cost_usd", "category", "task_id", "call_id",
                                              "call_source", "overlap_s", "e2e_s", "start_time"])
    tasks_all = _frame(store, "tasks", ["task_id", "cost_usd", "useful_usd", "retry_waste_usd",
                                        "failed_task_waste_usd", "pending_usd", "partial_usd"])
    # every piece is a drawn call's or unspanned work on a drawn replica
    assert all(call_id in ids for call_id in pieces_all.loc[pieces_all["call_source"] != "unspanned", "call_id"])
    for slot, example in batch:
        try:
            _check(store, slot, example, ids, rm_all, pieces_all, tasks_all)
        except AssertionError as e:
            raise AssertionError(f"example {first + slot.k}: {example!r}") from e
    # the whole run, one row and by group: the groups' spend adds up to the fleet's, which is the
    # replica-minutes' (a summary per group and example would double the run time)
    s = cost.period_summary(store, at(0), at(BATCH * SLOT_S)).iloc[0]
    assert _close(s["spend_usd"], float(rm_all["spend_usd"].sum()))
    assert _close(s["allocated_usd"] + s["idle_usd"], s["spend_usd"])
    for by in ("task_type", "replica"):
        grouped = cost.period_summary(store, at(0), at(BATCH * SLOT_S), by=by)
        assert _close(float(grouped["spend_usd"].sum()), s["spend_usd"]), by


def _check(store, slot: Slot, example: dict, ids, rm_all, pieces_all, tasks_all) -> None:
    calls, outcomes = example["calls"], example["outcomes"]
    rm = rm_all[rm_all["replica"].map(slot.mine)]
    index = pieces_all["call_id"].map(lambda call_id: ids.get(call_id, (None, None))[0] == slot.k)
    pieces = pieces_all[index | ((pieces_all["call_source"] == "unspanned") & pieces_all["replica"].map(slot.mine))]
    mine = {slot.task(t) for t in TASKS} | set(pieces.loc[pieces["task_id"] != "", "task_id"])
    tasks = tasks_all[tasks_all["task_id"].isin(mine)]
    spend = float(rm["spend_usd"].sum())

    # spend by hand: a replica-minute costs price x GPUs / 60 (the drawn price, or the new one from its
    # minute on; a replica missing from fleet.yaml, rx or an r<i> the example drew no fleet entry for:
    # GX, $2.50 x 2 GPUs). Billed minutes: a reserved
    # replica's are every minute of the run; an on-demand one's those it was scraped in (gauges, or
    # counters beside them), and those a call that names it ran in (up by its spans)
    batch_minutes = set(range(-slot.offset // 60, (BATCH * SLOT_S - slot.offset) // 60))
    for replica, group in rm.groupby("replica"):
        name = replica[len(f"e{slot.k}"):]
        minutes = {int((m - slot.at(0)).total_seconds()) // 60 for m in group["minute"]}
        spans = {m for c in calls if c["replica"] == name and c["shape"] != "client_only"
                 for m in range((c["start"] - 1) // 60, (c["start"] + c["duration"] + 1) // 60 + 1)}
        if name == "rx" or int(name[1:]) >= len(example["replicas"]):
            prices = {m: 2.5 * 2 / 60 for m in minutes}
            assert minutes <= spans, (replica, minutes, spans)
        else:
            rep = example["replicas"][int(name[1:])]
            scraped = (rep["up"] | set(rep["counters"])) if rep["up"] else set()
            prices = {m: (rep["new_price"][1] if rep["new_price"] and m >= rep["new_price"][0] else rep["price"])
                      * rep["gpu_count"] / 60 for m in minutes}
            if rep["billing"] == "reserved":
                assert minutes == batch_minutes, replica
            else:
                assert scraped <= minutes <= scraped | spans, (replica, minutes, scraped, spans)
        for row in group.itertuples():
            minute = int((row.minute - slot.at(0)).total_seconds()) // 60
            assert _close(row.spend_usd, prices[minute]), (row, prices[minute])

    # conservation: allocated + idle == spend for every replica-minute, and allocated == its pieces' cost
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

    # exclusivity: one row per call and minute (each call-second in one minute's piece: the pieces'
    # overlaps add up to the call's duration), one category per call, the one the rule gives
    assert not pieces.duplicated(["call_id", "minute"]).any()
    assert set(pieces["category"]) <= set(CATEGORIES)
    assert (pieces.groupby("call_id")["category"].nunique() <= 1).all()
    for _, group in pieces[pieces["call_source"] != "unspanned"].groupby("call_id"):
        seconds = float(group["overlap_s"].sum())
        if group["start_time"].iloc[0] >= at(0):
            assert _close(seconds, float(group["e2e_s"].iloc[0])), group
        else:  # a client span opened 2 ms before the run's window: only its part inside is a piece
            assert seconds <= float(group["e2e_s"].iloc[0]), group
    expected = expected_categories(calls, outcomes)
    for row in pieces.itertuples():
        if row.call_source == "unspanned":  # engine work no call explains: no task
            assert (row.category, row.task_id) == ("unspanned", ""), row
        else:
            call = ids[row.call_id][1]
            assert row.category == expected[call], (row, calls[call])

    # every dollar of spend in exactly one of the categories or idle
    categories = float((tasks["useful_usd"] + tasks["retry_waste_usd"] + tasks["failed_task_waste_usd"]
                        + tasks["pending_usd"]).sum())
    by_category = pieces.groupby("category")["cost_usd"].sum().to_dict() if len(pieces) else {}
    idle = float(rm["idle_usd"].sum())
    assert _close(sum(by_category.values()) + idle, spend)
    assert _close(categories + by_category.get("unattributed", 0.0) + by_category.get("unspanned", 0.0) + idle, spend)
    assert set(pieces.loc[pieces["task_id"] != "", "task_id"]) <= set(tasks["task_id"])

    # a task's cost == the sum of its calls' cost == the sum of its categories, each category's the
    # sum of its pieces of that category
    calls_cost = pieces.groupby("task_id")["cost_usd"].sum().to_dict() if len(pieces) else {}
    task_pieces = pieces[pieces["task_id"] != ""].groupby(["task_id", "category"])["cost_usd"].sum().to_dict()
    for row in tasks.itertuples():
        assert _close(row.cost_usd, calls_cost.get(row.task_id, 0.0)), row
        assert _close(row.cost_usd, row.useful_usd + row.retry_waste_usd + row.failed_task_waste_usd
                      + row.pending_usd), row
        for category, column in TASK_CATEGORIES.items():
            assert _close(getattr(row, column), task_pieces.get((row.task_id, category), 0.0)), (row, category)
        assert row.partial_usd <= row.cost_usd + 1e-12

    # a window of the example's slot: the summary conserves spend, and its categories add up to it
    # (every replica of the batch is in it: a reserved replica is billed in every slot)
    a, b = sorted(example["window"])
    if a == b:
        b = a + 1
    s = cost.period_summary(store, slot.at(60 * a), slot.at(60 * b)).iloc[0]
    assert _close(s["allocated_usd"] + s["idle_usd"], s["spend_usd"])
    parts = (s["useful_usd"] + s["retry_waste_usd"] + s["failed_task_waste_usd"] + s["pending_usd"]
             + s["unattributed_usd"] + s["unspanned_usd"] + s["idle_usd"])
    assert _close(parts, s["spend_usd"])


@pytest.mark.parametrize("shape", SHAPES)
def test_each_call_shape_is_counted_exactly_once(_module_store, shape):
    store = _module_store
    reset(store)
    replicas = [{"gpu_count": 1, "price": 6.0, "new_price": None, "up": {0}, "billing": "on_demand",
                 "capacity": None, "counters": {}}]
    call = {"replica": "r0", "start": 5, "duration": 10, "prompt": 0, "cached_frac": 0.0, "output": 40,
            "task": "T1", "step": "1", "attempt": 1, "ok": shape != "crashed", "shape": shape, "choices": 1,
            "call_index": None}
    slot = Slot(0)
    _write(store, [(slot, {"replicas": replicas, "calls": [call], "outcomes": ["success", None, None, None]})])
    jobs.run_jobs(store, start=at(0), end=at(1800))
    calls = _frame(store, "call_costs", ["call_id", "call_source", "task_id", "output_tokens", "cost_usd"])
    assert calls["call_id"].nunique() == 1  # one unit of work, whatever spans saw it
    row = calls.iloc[0]
    expected_source = {"full": "engine", "engine_only": "engine", "crashed": "gateway", "client_only": "client",
                       "direct": "engine"}[shape]
    assert row["call_source"] == expected_source
    # an engine span alone carries no task context (vLLM drops baggage): unattributed, not T1's
    assert row["task_id"] == ("" if shape == "engine_only" else slot.task("T1"))
    assert row["output_tokens"] == 40
    # $6.00/GPU-hour = $0.10 a minute, the call alone in its minute; the replica is priced only when
    # the evidence names it (client-only evidence does not)
    assert row["cost_usd"] == pytest.approx(0.0 if shape == "client_only" else 0.1, rel=1e-12)
