"""The explicit runner sends its statements with the job views written out (schema/jobs/inline.py),
without the arms an explicit run reads no row from (``explicit_queries``): the rows
must be the views' rows.

Every job view the runner's statements read is compared, as the runner sends it (the view replaced by
its stored query, the views inside it too), with the view itself on the scenario of
``tests/test_cost_job_views.py`` (counters with hit rates, a failed scrape, a reserved replica never
up, minutes with counters and no span and the reverse, gap work, rooted and rootless tasks, an
unattributed call) for three windows; then the text rules on small statements.
"""

from __future__ import annotations

import re

import pytest

from schema import jobs
from schema.jobs import JOBS_DIR, sql_statements
from schema.jobs.inline import explicit_queries, inline_views, view_queries
from tests.test_cost_job_views import RUN_ID, assert_same_rows, drop_scratch, fill_scratch, rows, scenario
from tests.test_cost_support import _module_store, at, cstore  # noqa: F401

WINDOW = "ws = {ws:DateTime}, we = {we:DateTime}"
RUN = WINDOW + ", run_id = {run_id:UInt64}"
# view -> (its arguments, the key its rows are sorted by)
VIEWS = {
    "job_engine_counters": (WINDOW, ["replica", "minute"]),
    "job_replica_gauges": (WINDOW, ["replica", "minute"]),
    "job_resolved_calls": (WINDOW, ["trace_id", "call_id"]),
    "job_reconciliation": (RUN, ["replica", "minute"]),
    "job_call_costs": (RUN, ["minute", "call_id"]),
    "job_replica_spend": (RUN, ["replica", "minute"]),
    "job_replica_minutes": (RUN, ["replica", "minute"]),
    "job_tasks": (WINDOW, ["task_id"]),
}


def _queries(store) -> dict[str, str]:
    return view_queries(store, (JOBS_DIR / "job_views.sql").read_text())


def _record(monkeypatch, store, method: str) -> list[str]:
    """The SQL of every ``store.<method>`` call from now on (the store's class patched)."""
    sent = []
    call = getattr(type(store), method)

    def record(self, sql, parameters=None, *, tag, settings=None):
        sent.append(sql)
        return call(self, sql, parameters, tag=tag, settings=settings)

    monkeypatch.setattr(type(store), method, record)
    return sent


@pytest.mark.parametrize("lo, hi", [(0, 1200), (60, 180), (120, 1200)])
def test_inlined_views_give_the_views_rows(cstore, lo, hi):
    scenario(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(1200))  # call_costs history, which replica_minutes and tasks read
    queries = _queries(cstore)
    assert set(VIEWS) | {"call_costs"} <= set(queries)
    # the explicit run's form: no periodic arm left (the text rules matched this engine's formatting)
    explicit = explicit_queries(queries)
    assert not [name for name, query in explicit.items() if "_live" in query]
    assert sum(query.count("_runs") for query in explicit.values()) == sum(
        query.count("_runs") for query in queries.values())
    # call_costs is read as its history: sound only while every read of it stops below we (<= watermark)
    assert explicit["call_costs"].endswith("call_costs_history")
    reads = [(name, query[m.end():m.end() + 400]) for name, query in queries.items()
             for m in re.finditer(r"FROM (?:\w+\.)?call_costs\b(?!_)", query)]
    assert len(reads) >= 4 and all("(minute < we)" in after.split(" GROUP BY ")[0] for _, after in reads), reads
    p = {"ws": at(lo), "we": at(hi), "run_id": RUN_ID}
    fill_scratch(cstore, p)
    cstore.command(sql_statements(JOBS_DIR / "run_reconcile.sql")[0], p, tag="test.inline")
    seen = {}
    try:
        for view, (args, key) in VIEWS.items():
            sql = f"SELECT * EXCEPT computed_at FROM {view}({args})" if view in (
                "job_call_costs", "job_replica_minutes", "job_tasks") else f"SELECT * FROM {view}({args})"
            inlined = inline_views(sql, queries)
            assert f"{view}(" not in inlined and "job_" not in inlined.replace("job_clock", ""), view
            seen[view] = rows(cstore, sql, p, key)
            assert_same_rows(rows(cstore, inlined, p, key), seen[view], view)
            assert_same_rows(rows(cstore, inline_views(sql, explicit), p, key), seen[view], view)
    finally:
        drop_scratch(cstore, p)
    if (lo, hi) == (0, 1200):
        # the rows reach every path the views have (as in test_cost_job_views)
        assert "estimate" in set(seen["job_resolved_calls"]["cached_source"])
        rec = seen["job_reconciliation"]
        assert ((rec["span_work"] == 0) & rec["counter_prompt_tokens"].notna()).any() and (rec["gap_work"] > 0).any()
        assert set(seen["job_call_costs"]["category"]) >= {"useful", "retry_waste", "failed_task_waste", "unattributed"}
        assert set(seen["job_tasks"]["outcome"]) == {"success", "failure", "abandoned"}
        assert (seen["job_replica_minutes"]["allocated_usd"] > 0).any()


def test_runner_sends_the_views_written_out(cstore, monkeypatch):
    """run_jobs' job statements carry the views' queries, not the views; the history rows are those of
    the statements as written (the views)."""
    scenario(cstore)
    sent = _record(monkeypatch, cstore, "command")
    jobs.run_jobs(cstore, start=at(0), end=at(1200), workers=1)
    inserts = [s for s in sent if s.startswith("INSERT INTO") and ("_history" in s or "_runs" in s)]
    assert len(inserts) >= 7 and not any("job_" in s for s in inserts)
    monkeypatch.undo()
    history = "SELECT * EXCEPT computed_at FROM {table}_history ORDER BY {key}"
    got = {t: cstore.query_df(history.format(table=t, key=k), tag="test.inline")
           for t, k in (("call_costs", "minute, call_id"), ("replica_minutes", "minute, replica"), ("tasks", "task_id"))}
    # the same window through the views (the runner's .sql files as written)
    params = {"ws": at(0), "we": at(1200), "run_id": RUN_ID}
    for name in ("delete_call_costs", "delete_replica_minutes", "delete_tasks", "run_inputs", "run_resolve",
                 "run_reconcile", "run_call_costs", "run_replica_minutes", "drop_scratch", "run_tasks"):
        for statement in sql_statements(JOBS_DIR / f"{name}.sql"):
            cstore.command(statement, params, tag="test.inline")
    for table, key in (("call_costs", ["minute", "call_id"]), ("replica_minutes", ["minute", "replica"]),
                       ("tasks", ["task_id"])):
        assert_same_rows(got[table].sort_values(key, kind="stable").reset_index(drop=True),
                         rows(cstore, history.format(table=table, key=", ".join(key)), {}, key), table)


def _count_inlining(monkeypatch) -> list[int]:
    """Calls of the runner's inline_views from now on (one per statement written out)."""
    calls = []
    inline = jobs.inline_views

    def counted(statement, queries, **kw):
        calls.append(1)
        return inline(statement, queries, **kw)

    monkeypatch.setattr(jobs, "inline_views", counted)
    return calls


def test_runner_keeps_its_statements_until_a_view_or_a_file_changes(cstore, monkeypatch, tmp_path):
    """One cache, keyed by the views' UUIDs and the .sql texts: a second run on an unchanged store reads
    only the UUIDs and writes nothing out; a .sql file whose text changed is written out again and its
    new text runs; a view replaced (new UUID) is read again and its new query runs."""
    scenario(cstore)
    window = {"start": at(0), "end": at(1200), "workers": 1}
    jobs.run_jobs(cstore, **window)
    tasks = "SELECT task_id, calls FROM tasks_history ORDER BY task_id"
    before = cstore.query(tasks, tag="test.inline").result_rows
    assert len(before) >= 3
    queried = _record(monkeypatch, cstore, "query")
    sent = _record(monkeypatch, cstore, "command")
    inlined = _count_inlining(monkeypatch)
    jobs.run_jobs(cstore, **window)
    assert any("uuid" in s for s in queried) and not any("as_select" in s for s in queried)
    assert inlined == [] and cstore.query(tasks, tag="test.inline").result_rows == before
    # the same files elsewhere (the key is their texts): still a hit
    for path in JOBS_DIR.glob("*.sql"):
        (tmp_path / path.name).write_text(path.read_text())
    monkeypatch.setattr(jobs, "JOBS_DIR", tmp_path)
    jobs.run_jobs(cstore, **window)
    assert inlined == []
    # run_tasks.sql's text changed: its statements go out with the new text
    text = (tmp_path / "run_tasks.sql").read_text()
    assert text.count("INSERT INTO tasks_history") == 1
    (tmp_path / "run_tasks.sql").write_text(text.replace("INSERT INTO tasks_history", "INSERT /* v2 */ INTO tasks_history"))
    queried.clear(), sent.clear()
    jobs.run_jobs(cstore, **window)
    assert inlined and any("as_select" in s for s in queried)
    assert sum("INSERT /* v2 */ INTO tasks_history" in s for s in sent) == 1
    assert cstore.query(tasks, tag="test.inline").result_rows == before
    # and kept again from the next run on
    inlined.clear(), sent.clear()
    jobs.run_jobs(cstore, **window)
    assert inlined == [] and sum("/* v2 */" in s for s in sent) == 1
    stored = _queries(cstore)["job_tasks"]
    try:
        cstore.command(f"CREATE OR REPLACE VIEW job_tasks AS SELECT * REPLACE (toUInt32(calls + 1000) AS calls) "
                       f"FROM ({stored})", tag="test.inline")
        queried.clear()
        jobs.run_jobs(cstore, **window)
        assert inlined and any("as_select" in s for s in queried)
        assert cstore.query(tasks, tag="test.inline").result_rows == [(t, n + 1000) for t, n in before]
    finally:
        cstore.command(f"CREATE OR REPLACE VIEW job_tasks AS {stored}", tag="test.inline")


def test_inline_text_rules():
    queries = {
        "job_a": "WITH {ws:DateTime} AS ws SELECT x FROM job_b(ws = {ws:DateTime}, we = {we:DateTime}) JOIN call_costs AS cc ON 1",
        "job_b": "SELECT x FROM db.call_costs WHERE minute >= {ws:DateTime}",
        "call_costs": "SELECT * FROM db.call_costs_history",
    }
    # the runner's own placeholders: written out, nested views too, aliases kept or added
    out = inline_views("INSERT INTO t SELECT * FROM job_a(ws = {ws:DateTime}, we = {we:DateTime}, run_id = {run_id:UInt64})",
                       queries)
    assert out == ("INSERT INTO t SELECT * FROM (WITH {ws:DateTime} AS ws SELECT x FROM "
                   "(SELECT x FROM (SELECT * FROM db.call_costs_history) AS call_costs WHERE minute >= {ws:DateTime}) "
                   "JOIN (SELECT * FROM db.call_costs_history) AS cc ON 1)")
    # other arguments (the periodic chain's subqueries), unknown views and lookalike names are kept
    kept = ("SELECT * FROM job_a(ws = (SELECT max(ws) FROM job_clock), we = {we:DateTime}) "
            "UNION ALL SELECT * FROM job_c(ws = {ws:DateTime}, we = {we:DateTime}) UNION ALL SELECT * FROM call_costs_history")
    assert inline_views(kept, queries) == kept
    with pytest.raises(ValueError):
        inline_views("SELECT * FROM job_a(ws = {ws:DateTime}, we = {we:DateTime})",
                     {"job_a": "SELECT * FROM job_a(ws = {ws:DateTime}, we = {we:DateTime})"})


def test_explicit_queries_text_rules():
    """The periodic arm (``<x>_live WHERE p_run_id = 0``) goes, its column aliases move to the run's arm;
    call_costs is its history table; a text the rules do not match is kept whole."""
    queries = {
        "job_a": "WITH {run_id:UInt64} AS p_run_id, "
                 "g AS (SELECT replica AS g_replica, saturated AS g_sat FROM db.gauges_live WHERE p_run_id = 0 "
                 "UNION ALL SELECT replica, saturated FROM db.gauges_runs WHERE (run_id = p_run_id) AND (p_run_id != 0)), "
                 "c AS (SELECT replica, work FROM db.calls_live WHERE (p_run_id = 0) AND (replica != '') "
                 "UNION ALL SELECT replica, work FROM db.calls_runs WHERE (run_id = p_run_id) AND (replica != '')) "
                 "SELECT * FROM g, c",
        "job_b": "SELECT * FROM db.rec_live WHERE {run_id:UInt64} = 0 UNION ALL SELECT * EXCEPT (run_id, written_at) "
                 "FROM db.rec_runs WHERE (run_id = {run_id:UInt64}) AND ({run_id:UInt64} != 0)",
        "job_c": "SELECT * FROM db.x_live WHERE p_run_id = 0 UNION ALL SELECT * FROM db.y_runs",
        "call_costs": "SELECT * FROM db.call_costs_history WHERE minute < (SELECT max(watermark) FROM db.cost_watermark) "
                      "UNION ALL SELECT * FROM db.call_costs_live WHERE minute >= (SELECT max(watermark) FROM db.cost_watermark)",
    }
    assert explicit_queries(queries) == {
        "job_a": "WITH {run_id:UInt64} AS p_run_id, "
                 "g AS (SELECT replica AS g_replica, saturated AS g_sat FROM db.gauges_runs WHERE (run_id = p_run_id) "
                 "AND (p_run_id != 0)), "
                 "c AS (SELECT replica, work FROM db.calls_runs WHERE (run_id = p_run_id) AND (replica != '')) "
                 "SELECT * FROM g, c",
        "job_b": "SELECT * EXCEPT (run_id, written_at) FROM db.rec_runs WHERE (run_id = {run_id:UInt64}) "
                 "AND ({run_id:UInt64} != 0)",
        # another table after the UNION: not the pattern, kept
        "job_c": "SELECT * FROM db.x_live WHERE p_run_id = 0 UNION ALL SELECT * FROM db.y_runs",
        "call_costs": "SELECT * FROM db.call_costs_history",
    }
    # call_costs in another form: kept
    other = {"call_costs": "SELECT * FROM db.call_costs_history UNION ALL SELECT * FROM db.call_costs_live"}
    assert explicit_queries(other) == other


def test_view_queries_skip_a_job_view_without_the_runners_placeholders():
    """A stored query that does not bind {ws:DateTime} (another server's formatting) is not used: the
    runner then reads the view as written."""

    class Store:
        def query(self, sql, parameters, *, tag):
            assert "system.tables" in sql and "job_call_costs" in parameters["names"]
            return type("Result", (), {"result_rows": [
                ("job_call_costs", "WITH {ws:DateTime} AS ws SELECT 1"), ("job_tasks", "WITH ws_param AS ws SELECT 1"),
                ("job_reconciliation", ""), ("call_costs", "SELECT * FROM db.call_costs_history")]})()

    assert view_queries(Store(), "SELECT name, as_select FROM system.tables") == {
        "job_call_costs": "WITH {ws:DateTime} AS ws SELECT 1", "call_costs": "SELECT * FROM db.call_costs_history"}
