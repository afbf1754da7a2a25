"""The periodic chain's steps as a graph (migration 1005): each step waits for the steps that write what
it reads and for nothing else, so steps that read nothing of each other run side by side.

Reads are taken from the stored queries after ``migrate`` (the written-out ones, every table named with
its database), DEPENDS ON from the views' CREATE statements: a change of a step's query that makes it read
a table written by a step it may run beside fails here.
"""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest

from schema import jobs
from schema.queries import cost
from tests.test_jobs_periodic import _scenario

# What the chain (migration 1005) lets run side by side: each pair reads nothing the other writes.
SIDE_BY_SIDE = [
    ("cost_copy_call_costs_mv", "cost_copy_replica_minutes_mv"), ("cost_copy_call_costs_mv", "cost_copy_tasks_mv"),
    ("cost_copy_replica_minutes_mv", "cost_copy_tasks_mv"),
    ("cost_resolved_calls_mv", "cost_engine_counters_mv"), ("cost_resolved_calls_mv", "cost_replica_gauges_mv"),
    ("cost_engine_counters_mv", "cost_replica_gauges_mv"),
    ("cost_replica_minutes_mv", "cost_tasks_mv"),
]


def _graph(store) -> dict[str, tuple[str, set[str], set[str]]]:
    """{step: (target table, steps in its DEPENDS ON, tables its query reads)}, names without database."""
    db = re.escape(store.database)
    rows = store.query("SELECT name, as_select, create_table_query FROM system.tables WHERE database = currentDatabase() "
                       "AND engine = 'MaterializedView' AND startsWith(name, 'cost_') AND endsWith(name, '_mv')",
                       tag="test").result_rows
    graph = {}
    for name, query, create in rows:
        target = re.search(rf" TO {db}\.(\w+)", create).group(1)
        depends = re.search(r"REFRESH EVERY 1 MINUTE(?: DEPENDS ON (.+?))?(?: APPEND)? TO ", create).group(1) or ""
        deps = {d.strip().rpartition(".")[2] for d in depends.split(",") if d.strip()}
        graph[name] = (target, deps, set(re.findall(rf"\b{db}\.(\w+)\b", query)))
    return graph


def _ancestors(graph, step: str) -> set[str]:
    seen, todo = set(), list(graph[step][1])
    while todo:
        dep = todo.pop()
        if dep not in seen:
            seen.add(dep)
            todo.extend(graph[dep][1])
    return seen


def test_each_step_waits_for_the_steps_that_write_what_it_reads_and_no_more(store):
    graph = _graph(store)
    assert set(graph) == set(jobs.REFRESH_VIEWS)
    writer = {target: step for step, (target, _, _) in graph.items()}
    # the reads are really read from the queries (reconciliation joins the three inputs)
    assert {"resolved_calls_live", "engine_counters_live", "replica_gauges_live"} <= graph["cost_reconciliation_mv"][2]
    ancestors = {step: _ancestors(graph, step) for step in graph}
    for step, (_, _, reads) in graph.items():
        assert step not in ancestors[step], f"{step} depends on itself"
        for table in reads:
            other = writer.get(table)
            if other is None or other == step:
                continue
            # before it in the cycle, or after it (the copies read what the previous cycle left)
            assert other in ancestors[step] or step in ancestors[other], \
                f"{step} reads {table}, which {other} replaces, and may run beside it"
    # a step waits for nothing it does not need: each DEPENDS ON entry writes a table the step reads, but
    # the watermark's (it may rise over minutes only once the copies moved them to history)
    for step, (_, deps, reads) in graph.items():
        for dep in deps:
            assert graph[dep][0] in reads or step == "cost_watermark_mv", f"{step} waits for {dep} but reads nothing it writes"
    for a, b in SIDE_BY_SIDE:
        assert a not in ancestors[b] and b not in ancestors[a], f"{a} and {b} still wait for each other"
    # the order jobs.refresh and the docs give is one the graph allows
    order = {step: i for i, step in enumerate(jobs.REFRESH_VIEWS)}
    assert all(order[dep] < order[step] for step, (_, deps, _) in graph.items() for dep in deps)


def _summary(store, base):
    return cost.period_summary(store, base, base + timedelta(minutes=25)).iloc[0]


def test_the_schedule_runs_every_step_of_the_graph_to_the_same_figures(store, monkeypatch):
    # the scenario of tests/test_jobs_periodic.py, run once by hand on the stopped chain
    base = _scenario(store, monkeypatch)
    by_hand = _summary(store, base)
    assert by_hand["requests"] > 0 and by_hand["retry_waste_usd"] > 0
    # the schedule's own run of the next minute: every step, each after the ones it waits for
    minute = store.scalar("SELECT toStartOfMinute(now()) + 60", tag="test")
    jobs.start(store)
    try:
        deadline = time.monotonic() + 120
        done = 0
        while time.monotonic() < deadline:
            done = store.scalar("SELECT count() FROM system.view_refreshes WHERE database = currentDatabase() "
                                "AND startsWith(view, 'cost_') AND status != 'Running' "
                                "AND last_success_time >= {m:DateTime}", {"m": minute}, tag="test")
            if done == len(jobs.REFRESH_VIEWS):
                break
            time.sleep(0.5)
    finally:
        jobs.stop(store)
    state = jobs.status(store)
    assert done == len(jobs.REFRESH_VIEWS), state.to_string()
    assert (state["exception"] == "").all(), state.to_string()
    # the same figures over the scenario's 25 minutes (part of them copied to history by now); task C, which
    # has no root span, may have turned from pending to abandoned meanwhile (its timeout runs on the clock)
    scheduled = _summary(store, base)
    for field in ("requests", "spend_usd", "allocated_usd", "idle_usd", "useful_usd", "retry_waste_usd",
                  "unspanned_usd", "unattributed_usd", "successful_tasks"):
        assert scheduled[field] == pytest.approx(by_hand[field], rel=1e-12, abs=1e-12), field
    assert scheduled["failed_task_waste_usd"] + scheduled["pending_usd"] == pytest.approx(
        by_hand["failed_task_waste_usd"] + by_hand["pending_usd"], rel=1e-12)
