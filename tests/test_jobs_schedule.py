"""The explicit cost runner on two workers (schema/jobs/schedule.py): the dependency graph of a
chunk's steps, the scheduler, and the same history rows as one worker in chunk order."""

from __future__ import annotations

import itertools
import threading
from datetime import datetime, timedelta

import pandas.testing as pdt
import pytest

from schema import jobs
from schema.fleet import parse_fleet, sync_fleet
from schema.jobs.schedule import Chunk, plan, run_plan
from schema.queries import cost
from tests.conftest import ROOT

T0 = datetime(2026, 3, 2, 0, 0)


def _chunks(n: int) -> list[Chunk]:
    return [Chunk(i, T0 + timedelta(hours=i), T0 + timedelta(hours=i + 1), 100 + i) for i in range(n)]


def test_plan_chains_cost_through_replica_minutes_and_bounds_the_lookahead():
    deps = {t.key: set(t.deps) for t in plan(_chunks(4))}
    # the reconciliation after the chunk's counters, gauges and resolved calls, which run side by side
    assert deps[("reconcile", 2)] == {("inputs", 2), ("resolve", 2)}
    # cost of a chunk: its reconciliation and delete, and the previous chunk's replica_minutes
    # (learned capacity reads the history before the chunk)
    assert deps[("cost", 0)] == {("reconcile", 0), ("delete", 0)}
    assert deps[("cost", 2)] == {("reconcile", 2), ("delete", 2), ("replica_minutes", 1)}
    assert deps[("replica_minutes", 2)] == {("cost", 2)}
    assert deps[("tasks", 2)] == {("cost", 2), ("tasks", 1)}
    # the scratch rows dropped after replica_minutes (their last reader), off the chain
    assert deps[("scratch", 2)] == {("replica_minutes", 2)}
    # the hourly rollups: each file's rows as soon as what it reads is written (calls after cost,
    # replica rows after replica_minutes, task rows after tasks), the marks and blocks after all
    # three; each after the previous chunk's same step (a shared hour)
    assert deps[("rollup_calls", 0)] == {("cost", 0)}
    assert deps[("rollup_calls", 2)] == {("cost", 2), ("rollup_calls", 1)}
    assert deps[("rollup_replicas", 2)] == {("replica_minutes", 2), ("rollup_replicas", 1)}
    assert deps[("rollup_tasks", 0)] == {("tasks", 0)}
    assert deps[("rollup_tasks", 2)] == {("tasks", 2), ("rollup_tasks", 1)}
    assert deps[("rollup", 0)] == {("rollup_calls", 0), ("rollup_replicas", 0), ("rollup_tasks", 0)}
    assert deps[("rollup", 2)] == {("rollup_calls", 2), ("rollup_replicas", 2), ("rollup_tasks", 2), ("rollup", 1)}
    # resolution and delete run at most AHEAD (2) chunks ahead of the chain: after the scratch rows
    # of the chunk AHEAD before are dropped
    assert deps[("resolve", 1)] == deps[("inputs", 1)] == deps[("delete", 1)] == set()
    assert deps[("resolve", 3)] == deps[("inputs", 3)] == deps[("delete", 3)] == {("scratch", 1)}
    # every step's files run once per chunk, each .sql file of the chunk exactly once
    files = [f for t in plan(_chunks(1)) for f in t.files]
    assert sorted(files) == sorted(set(files))


class _Client:
    def __init__(self, log):
        self.log, self.closed = log, False

    def clone(self):
        client = _Client(self.log)
        self.log.append(client)
        return client

    def close(self):
        self.closed = True


def test_run_plan_waits_for_dependencies_and_overlaps_independent_steps():
    tasks = plan(_chunks(3))
    events, lock, clones = {}, threading.Lock(), []
    order = itertools.count()  # starts and ends in the order they happened, no clock
    # the first two steps to start wait for each other: both run at once, or a scheduler running one
    # step at a time never lets the second start (the barrier breaks after 30 s and the run fails)
    meet, first = threading.Barrier(2, timeout=30), []

    def execute(client, task):
        with lock:
            events[task.key] = [next(order), None]
            waits = len(first) < 2
            if waits:
                first.append(task.key)
        if waits:
            meet.wait()
        with lock:
            events[task.key][1] = next(order)

    run_plan(_Client(clones), tasks, execute, workers=2)
    assert set(events) == {t.key for t in tasks}
    for task in tasks:
        for dep in task.deps:
            assert events[dep][1] < events[task.key][0], (task.key, dep)
    a, b = first
    assert events[a][0] < events[b][1] and events[b][0] < events[a][1]  # they overlapped
    assert len(clones) == 1 and clones[0].closed


def test_run_plan_raises_the_first_error_and_starts_nothing_that_needs_it():
    tasks = plan(_chunks(3))
    ran = []

    def execute(client, task):
        if task.key == ("cost", 1):
            raise RuntimeError("boom")
        ran.append(task.key)

    with pytest.raises(RuntimeError, match="boom"):
        run_plan(_Client([]), tasks, execute, workers=2)
    assert ("replica_minutes", 1) not in ran and ("tasks", 1) not in ran and ("cost", 2) not in ran


def test_run_plan_starts_the_first_worker_while_the_second_client_opens_and_raises_its_error():
    first_started = threading.Event()
    ran = []

    class SlowClone(_Client):
        def clone(self):
            # opening a client takes engine queries; the first worker must not wait for it
            assert first_started.wait(5), "the first worker waited for the clone"
            return super().clone()

    def execute(client, task):
        first_started.set()
        ran.append(task.key)

    clones = []
    run_plan(SlowClone(clones), plan(_chunks(2)), execute, workers=2)
    assert len(ran) == len(plan(_chunks(2))) and len(clones) == 1 and clones[0].closed

    class FailingClone(_Client):
        def clone(self):
            raise RuntimeError("cannot open the store")

    with pytest.raises(RuntimeError, match="cannot open the store"):
        run_plan(FailingClone([]), plan(_chunks(2)), lambda client, task: None, workers=2)

FLEET = """gpu_types:
  H100: {{prices: [{{usd_per_gpu_hour: 3.6, valid_from: 2025-01-01}}]}}
  A100: {{prices: [{{usd_per_gpu_hour: 1.8, valid_from: 2025-01-01}}]}}
replicas:
""" + "".join(f"  r{i}: {{{{gpu_type: {'H100' if i < 6 else 'A100'}, gpu_count: 1}}}}\n" for i in range(10)) + """
allocation: {{w_prefill: 0.25, w_decode: {w_decode}}}
"""
SPAN = timedelta(hours=36)
CALLS = 1500


def _seed(store, end: datetime) -> None:
    """benchmarks/bench_cost.py's workload, 1,500 calls over 36 h (gateway + engine rows, tasks of 5
    calls, gauges every 15 s with requests waiting: capacity is learned from saturated minutes)."""
    sql = ROOT / "benchmarks" / "sql"
    t0 = end - SPAN
    params = {"first": 0, "n": CALLS, "t0": t0, "ms_per_call": SPAN.total_seconds() * 1000 / CALLS}
    store.command((sql / "bench_cost_calls.sql").read_text(), params, tag="test.seed")
    store.command((sql / "bench_cost_tasks.sql").read_text(), params, tag="test.seed")
    store.command((sql / "bench_cost_gauges.sql").read_text(), {"t0": t0, "span_s": int(SPAN.total_seconds())},
                  tag="test.seed")


def _history(store):
    out = {}
    for table, key in (("call_costs_history", "minute, replica, call_id"), ("replica_minutes_history", "minute, replica"),
                       ("tasks_history", "minute, task_id")):
        out[table] = store.query_df(f"SELECT * EXCEPT computed_at FROM {table} ORDER BY {key}", tag="test.read")
    return out


def _assert_same(a, b):
    for table in a:
        pdt.assert_frame_equal(a[table], b[table], check_exact=False, rtol=1e-9, atol=1e-12, obj=table)


def test_two_workers_write_what_one_worker_writes_after_a_weight_change(store):
    """A weight change alters every minute's work, so each chunk's learned capacity depends on the
    chunks recomputed before it: two workers must still give the rows one worker gives."""
    end = T0 + SPAN
    jobs.stop(store)
    _seed(store, end)
    runs = {}
    for label, w_decode, workers in (("w1 serial", 1.0, 1), ("w2 serial", 2.0, 1), ("w1 parallel", 1.0, 2),
                                     ("w2 parallel", 2.0, 2)):
        sync_fleet(store, parse_fleet(FLEET.format(w_decode=w_decode)))
        said = []
        run = jobs.run_jobs(store, start=end - SPAN, end=end, chunk=timedelta(hours=12), workers=workers,
                            progress=said.append)
        assert run.chunks == 3 and [s.split("(chunk ")[1][:3] for s in said] == ["1/3", "2/3", "3/3"]
        runs[label] = _history(store)
        # what the cost page reads: the 36 whole hours from the hourly rollups
        assert len(cost.rollup_span(store, end - SPAN, end)["rollup_versions"]) == 36
        runs[label]["summary"] = cost.period_summaries(store, end - SPAN, end, ("", "tenant"))["tenant"]
    sources = set(runs["w1 serial"]["replica_minutes_history"]["capacity_source"])
    assert "saturated" in sources
    assert len(runs["w1 serial"]["tasks_history"]) > 200
    # the weights matter (else the comparison below could not fail)
    assert not runs["w1 serial"]["call_costs_history"]["cost_usd"].equals(runs["w2 serial"]["call_costs_history"]["cost_usd"])
    _assert_same(runs["w1 serial"], runs["w1 parallel"])
    _assert_same(runs["w2 serial"], runs["w2 parallel"])
    # no scratch rows left behind
    assert store.scalar("SELECT count() FROM resolved_calls_runs", tag="test.read") == 0
    assert store.scalar("SELECT count() FROM reconciliation_runs", tag="test.read") == 0
    assert store.scalar("SELECT count() FROM engine_counters_runs", tag="test.read") == 0
    assert store.scalar("SELECT count() FROM replica_gauges_runs", tag="test.read") == 0


def test_chunk_windows_cut_a_crowded_day_at_whole_hours_by_calls():
    """Hand-computed: 12 hours of 100 calls then 12 of 300 (4,800); at most 2,000 a chunk -> 3 pieces,
    cut at the boundaries whose calls before are nearest 1,600 (13:00: 1,500) and 3,200 (19:00: 3,000)."""
    day = datetime(2026, 11, 2)
    hourly = {day + timedelta(hours=h): 100 if h < 12 else 300 for h in range(24)}
    got = jobs.chunk_windows(day, day + timedelta(days=1), timedelta(days=1), hourly, 2000)
    assert got == [(day, day + timedelta(hours=13)), (day + timedelta(hours=13), day + timedelta(hours=19)),
                   (day + timedelta(hours=19), day + timedelta(days=1))]
    # no limit, or a day under it: day chunks as before
    assert jobs.chunk_windows(day, day + timedelta(days=2), timedelta(days=1), hourly, None) == [
        (day, day + timedelta(days=1)), (day + timedelta(days=1), day + timedelta(days=2))]
    assert jobs.chunk_windows(day, day + timedelta(days=1), timedelta(days=1), hourly, 4800) == [
        (day, day + timedelta(days=1))]
    # one hour over the limit is never cut: it becomes a chunk of its own
    crowded = {day: 5000, day + timedelta(hours=1): 10}
    assert jobs.chunk_windows(day, day + timedelta(hours=2), timedelta(days=1), crowded, 1000) == [
        (day, day + timedelta(hours=1)), (day + timedelta(hours=1), day + timedelta(hours=2))]
    # a window not on the hour keeps its ends; the cut is at 02:00 (200 calls before it of 400)
    even = {day + timedelta(hours=h): 100 for h in range(4)}
    start, end = day + timedelta(minutes=30), day + timedelta(hours=3, minutes=30)
    assert jobs.chunk_windows(start, end, timedelta(days=1), even, 250) == [
        (start, day + timedelta(hours=2)), (day + timedelta(hours=2), end)]


def test_a_call_limit_splits_chunks_and_writes_what_chunks_of_that_length_write(store):
    """The seeded 36 h (3,000 llm_calls rows, ~1,000 per 12 h) with at most 400 calls a chunk: each
    12 h chunk is cut in three at whole hours, 4 h each, and the history equals a run in 4 h chunks."""
    end = T0 + SPAN
    jobs.stop(store)
    _seed(store, end)
    sync_fleet(store, parse_fleet(FLEET.format(w_decode=1.0)))
    said = []
    run = jobs.run_jobs(store, start=end - SPAN, end=end, chunk=timedelta(hours=12), max_chunk_calls=400,
                        progress=said.append)
    assert run.chunks == 9
    starts = [datetime.fromisoformat(s.split(" .. ")[0]) for s in said]
    assert starts == [end - SPAN + timedelta(hours=4 * i) for i in range(9)]
    limited = _history(store)
    assert jobs.run_jobs(store, start=end - SPAN, end=end, chunk=timedelta(hours=4), max_chunk_calls=None).chunks == 9
    _assert_same(limited, _history(store))
    assert len(limited["call_costs_history"]) > 1000
    with pytest.raises(ValueError, match="max_chunk_calls"):
        jobs.run_jobs(store, start=end - SPAN, end=end, max_chunk_calls=0)
