"""The periodic chain's refreshable views with their job views written out (schema.jobs.periodic).

After the migrations each chain view that calls a job view runs the view's query in place (planned in
about half the time), as written in ``schema/jobs/written/``; these tests hold that it does, that it gives
the rows the call gives on the same inputs, and that a view that lost its query gets it again. The
chain's own figures, hand-computed, are tests/test_cost_refresh.py's (they run the written-out chain).
"""

from __future__ import annotations

import hashlib
import re
import time
from datetime import datetime, timedelta, timezone

import pandas as pd

from schema import jobs
from schema.jobs import periodic, writeout
from schema.migrate import migrate
from schema.queries import cost
from schema.store_errors import StoreQueryError
from tests import test_cost_support as support
from tests.test_cost_support import Spans, fleet_yaml, metrics_up, sync

# the seven steps that run a job view (schema/migrations/1005_baseline_cost_chain.sql)
WRITTEN_OUT = {"cost_resolved_calls_mv": "job_resolved_calls", "cost_engine_counters_mv": "job_engine_counters",
               "cost_replica_gauges_mv": "job_replica_gauges", "cost_reconciliation_mv": "job_reconciliation",
               "cost_call_costs_mv": "job_call_costs", "cost_replica_minutes_mv": "job_replica_minutes",
               "cost_tasks_mv": "job_tasks"}
CALL = re.compile(r"\bjob_\w+\(ws = ")


def _chain(store) -> dict[str, tuple[str, str]]:
    rows = store.query("SELECT name, as_select, comment FROM system.tables WHERE database = currentDatabase() "
                       "AND engine = 'MaterializedView' AND startsWith(name, 'cost_') AND endsWith(name, '_mv')",
                       tag="test").result_rows
    return {name: (query, comment) for name, query, comment in rows}


def _calls() -> dict[str, str]:
    """Each chain view's query as migration 1005 writes it (the call of its job view), from a store
    migrated without the written-out queries; database names removed."""
    from tests.conftest import drop_store, new_store

    store = new_store(migrated=False)
    try:
        migrate(store, retention_days=3650, write_out=False)
        return {name: query.replace(f"{store.database}.", "") for name, (query, _) in _chain(store).items()}
    finally:
        drop_store(store)


def test_migrate_gives_every_chain_view_that_calls_a_job_view_its_written_out_query(store):
    chain = _chain(store)
    calls = _calls()
    assert set(WRITTEN_OUT) < set(chain)
    files = periodic.chain_queries()
    assert set(files) == set(WRITTEN_OUT)
    for name, view in WRITTEN_OUT.items():
        query, comment = chain[name]
        assert not CALL.search(query), name  # no job view is called any more ...
        assert not re.search(r"\w+_runs\b", query), name  # ... nor the explicit runner's scratch tables read
        assert re.fullmatch(rf"SELECT \* FROM {view}\(ws = \(SELECT max\(ws\) FROM job_clock\), we = .*\)",
                            calls[name]), calls[name]
        digest = hashlib.sha256(files[name].encode()).hexdigest()
        assert comment == f"infercost: written out from schema/jobs/written/{name}.sql | sha256 {digest}"
    # the other five (copies, watermark, clock) are as the migrations wrote them
    for name in set(chain) - set(WRITTEN_OUT):
        assert chain[name][1] == "" and chain[name][0].replace(f"{store.database}.", "") == calls[name], name
    # up to date: nothing to write, and migrating again changes nothing
    assert periodic.write_out(store) == []
    assert migrate(store, retention_days=3650) == [] and _chain(store) == chain


def test_the_written_files_are_what_the_generator_writes_now():
    """schema/jobs/written/ is generated from the migrations and schema/jobs/*.sql: stale files would run
    yesterday's cost model. Fix with `make written-sql`."""
    assert writeout.stale(writeout.written_texts()) == []


def _scenario(store, monkeypatch) -> datetime:
    """Two replicas over the last 25 minutes: a retried call whose first attempt broke (no engine span),
    engine counters that saw more tokens than the spans (the gap charge), a failed task, and one task
    without a root span; the chain stopped, run by hand (after the run the schedule missed, when a minute
    started while it was stopped: jobs.refresh lets that run end and runs its live steps again first)."""
    jobs.stop(store)
    base = datetime.now(timezone.utc).replace(tzinfo=None, second=0, microsecond=0) - timedelta(minutes=25)
    monkeypatch.setattr(support, "T0", base)
    sync(store, fleet_yaml(price=6.0) + "jobs: {window_s: 1800}\n")
    metrics_up(store, "r1", range(0, 20), counters={m: (1000 + 400 * m, 100 + 60 * m) for m in range(0, 20)})
    metrics_up(store, "r2", range(5, 20), running=3.0, kv=0.7)
    sp = Spans()
    sp.task("trA", "A", 50, 400)
    sp.call(task_id="A", start=61, end=90, prompt=800, output=120, trace="trA", ok=False, engine=False, streamed=40)
    sp.call(task_id="A", attempt=2, start=95, end=130, prompt=800, cached=200, output=150, trace="trA")
    sp.task("trB", "B", 600, 700, outcome="failure", tenant="globex")
    sp.call(task_id="B", start=610, end=650, prompt=300, output=60, replica="r2", trace="trB", tenant="globex")
    sp.call(task_id="C", start=900, end=960, prompt=500, output=90, replica="r2", trace="trC")  # no root span
    sp.call(start=1000, end=1010, prompt=50, output=5)  # no task at all
    sp.flush(store)
    jobs.refresh(store)
    assert (jobs.status(store)["exception"] == "").all()
    return base


def test_a_run_the_stopped_chain_missed_moves_no_stale_rows_to_history(store, monkeypatch):
    """A minute starts while the chain is stopped: the run it missed fires when jobs.refresh starts it, each
    step as soon as it is started. The minutes that run's watermark passes are in history all the same."""
    flush = Spans.flush

    def flush_then_let_a_minute_start(spans, into):
        flush(spans, into)
        time.sleep(61 - time.time() % 60)

    monkeypatch.setattr(Spans, "flush", flush_then_let_a_minute_start)
    base = _scenario(store, monkeypatch)
    mark = jobs.watermark(store)  # 20 min (window_s - 600) before the last run's minute: base + 6 min or later
    assert mark >= base + timedelta(minutes=6)
    below = cost.period_summary(store, base, mark).iloc[0]  # read from history only
    assert below["requests"] == 2 and below["retry_waste_usd"] > 0  # task A's two attempts, at base + 61 s and 95 s
    whole = cost.period_summary(store, base, base + timedelta(minutes=25)).iloc[0]
    assert whole["requests"] == 5 and whole["failed_tasks"] == 1  # task B


def _rows(store, query: str) -> pd.DataFrame:
    df = store.query_df(f"SELECT * FROM ({query})", tag="test")
    df = df.drop(columns=[c for c in ("computed_at",) if c in df.columns])  # now() of each statement
    return df.sort_values(list(df.columns[:3])).reset_index(drop=True)


def test_written_out_views_give_the_rows_of_their_job_views(store, monkeypatch):
    _scenario(store, monkeypatch)
    assert store.scalar("SELECT count() FROM call_costs_live WHERE category = 'retry_waste'", tag="test") == 1
    assert store.scalar("SELECT count() FROM reconciliation_live WHERE gap_work > 0", tag="test") > 0
    chain, calls = _chain(store), _calls()
    for name in WRITTEN_OUT:  # each step on the inputs the run left (the live tables before it)
        written, called = _rows(store, chain[name][0]), _rows(store, calls[name])
        assert len(written) > 0, name
        pd.testing.assert_frame_equal(written, called, check_exact=False, rtol=1e-12, obj=name)


def test_a_chain_view_that_lost_its_written_out_query_gets_it_again(store):
    after = _chain(store)
    calls = _calls()
    # a later migration puts the call back (ALTER TABLE ... MODIFY QUERY), or a store was altered by hand
    store.command(f"ALTER TABLE cost_tasks_mv MODIFY QUERY {calls['cost_tasks_mv']}", tag="test")
    assert CALL.search(_chain(store)["cost_tasks_mv"][0])
    store.command("ALTER TABLE cost_tasks_mv MODIFY COMMENT ''", tag="test")
    assert periodic.write_out(store) == ["cost_tasks_mv"]
    assert _chain(store)["cost_tasks_mv"] == after["cost_tasks_mv"]
    assert periodic.write_out(store) == []


def test_periodic_query_leaves_other_forms_alone():
    queries = {"job_tasks": "WITH {ws:DateTime} AS ws, {we:DateTime} AS we SELECT ws, we"}
    clock = "(SELECT max(ws) FROM db.job_clock)"
    assert writeout.periodic_query("SELECT * FROM tasks_live", queries) is None
    assert writeout.periodic_query(f"SELECT * FROM job_other(ws = {clock}, we = (SELECT max(we) FROM db.job_clock))",
                                   queries) is None  # no stored query for it
    assert writeout.periodic_query("SELECT * FROM job_tasks(ws = now(), we = now())", queries) is None
    text = writeout.periodic_query(f"SELECT * FROM job_tasks(ws = {clock}, we = (SELECT max(we) FROM db.job_clock))",
                                   queries)
    assert text == ("SELECT * FROM (WITH CAST((SELECT max(jc.ws) FROM db.job_clock AS jc) AS DateTime) AS ws, "
                    "CAST((SELECT max(jc.we) FROM db.job_clock AS jc) AS DateTime) AS we SELECT ws, we)")
    # a parameter the chain does not bind leaves the view called
    assert writeout.periodic_query(f"SELECT * FROM job_tasks(ws = {clock}, we = (SELECT max(we) FROM db.job_clock))",
                                   {"job_tasks": "SELECT {ws:DateTime}, {other:String}"}) is None


def test_a_refused_alter_leaves_that_view_calling_its_job_view(monkeypatch, caplog):
    from tests.conftest import drop_store, new_store

    store = new_store(migrated=False)
    try:
        real = store.command

        def refusing(sql, *args, **kwargs):
            if sql.startswith("ALTER TABLE `cost_tasks_mv` MODIFY COMMENT"):
                raise StoreQueryError("Code: 48. DB::Exception: not supported (NOT_IMPLEMENTED)", "jobs.chain")
            return real(sql, *args, **kwargs)

        monkeypatch.setattr(store, "command", refusing)
        migrate(store, retention_days=3650)  # does not fail: the view keeps its call (the same rows)
        chain = _chain(store)
        assert CALL.search(chain["cost_tasks_mv"][0]) and chain["cost_tasks_mv"][1] == ""
        assert sum(not CALL.search(q) for name, (q, _) in chain.items() if name in WRITTEN_OUT) == 6
        assert "could not give cost_tasks_mv its written-out query" in caplog.text
        monkeypatch.setattr(store, "command", real)
        assert periodic.write_out(store) == ["cost_tasks_mv"]  # the next migrate tries again
    finally:
        drop_store(store)


def _reads(store, monkeypatch) -> list[str]:
    """Record the text of every ``query`` sent to ``store`` from now on (the statements still run)."""
    sent: list[str] = []
    query = store.query

    def recording(text, *args, **kwargs):
        sent.append(text)
        return query(text, *args, **kwargs)

    monkeypatch.setattr(store, "query", recording)
    return sent


def test_an_up_to_date_chain_is_found_so_from_its_marks_alone(store, monkeypatch):
    sent = _reads(store, monkeypatch)
    # a process start: no migration to apply, the chain views' comments only (no stored query read)
    assert migrate(store, retention_days=3650) == []
    assert sent and not any("as_select" in text for text in sent), sent
