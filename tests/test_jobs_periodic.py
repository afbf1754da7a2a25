"""The periodic chain's refreshable views with their job views written out (schema.jobs.periodic).

After the migrations each chain view that called a job view runs the view's query in place (planned in
about half the time); these tests hold that it does, that it gives the rows the call gives on the same
inputs, and that a later change of a job view or of a chain view's call is written out again. The chain's
own figures, hand-computed, are tests/test_cost_refresh.py's (they run the written-out chain).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pandas as pd

from schema import jobs
from schema.jobs import periodic
from schema.migrate import migrate
from schema.store_errors import StoreQueryError
from tests import test_cost_support as support
from tests.test_cost_support import Spans, fleet_yaml, metrics_up, sync

# the seven steps that run a job view
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


def _call(comment: str) -> str:
    assert comment.startswith("infercost: written out from "), comment
    return comment[len("infercost: written out from "):].rpartition(" | sha256 ")[0]


def test_migrate_writes_out_every_chain_view_that_calls_a_job_view(store):
    chain = _chain(store)
    assert set(WRITTEN_OUT) < set(chain)
    for name, view in WRITTEN_OUT.items():
        query, comment = chain[name]
        assert not CALL.search(query), name  # no job view is called any more ...
        assert not re.search(r"\w+_runs\b", query), name  # ... nor the explicit runner's scratch tables read
        assert re.fullmatch(rf"SELECT \* FROM {view}\(ws = \(SELECT max\(ws\) FROM \w+\.job_clock\), we = .*\)",
                            _call(comment)), comment
    # the other five (copies, watermark, clock) are as the migrations wrote them
    for name in set(chain) - set(WRITTEN_OUT):
        assert chain[name][1] == "", name
    # up to date: nothing to write, and migrating again changes nothing
    assert periodic.write_out(store) == []
    assert migrate(store, retention_days=3650) == [] and _chain(store) == chain


def _scenario(store, monkeypatch) -> datetime:
    """Two replicas over the last 25 minutes: a retried call whose first attempt broke (no engine span),
    engine counters that saw more tokens than the spans (the gap charge), a failed task, and one task
    without a root span; the chain stopped, run by hand (once, or twice when a minute starts while it is
    stopped: the schedule's missed run fires beside the refresh; the tests' figures are the same either way)."""
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


def _rows(store, query: str) -> pd.DataFrame:
    df = store.query_df(f"SELECT * FROM ({query})", tag="test")
    df = df.drop(columns=[c for c in ("computed_at",) if c in df.columns])  # now() of each statement
    return df.sort_values(list(df.columns[:3])).reset_index(drop=True)


def test_written_out_views_give_the_rows_of_their_job_views(store, monkeypatch):
    _scenario(store, monkeypatch)
    assert store.scalar("SELECT count() FROM call_costs_live WHERE category = 'retry_waste'", tag="test") == 1
    assert store.scalar("SELECT count() FROM reconciliation_live WHERE gap_work > 0", tag="test") > 0
    chain = _chain(store)
    for name in WRITTEN_OUT:  # each step on the inputs the run left (the live tables before it)
        query, comment = chain[name]
        written, called = _rows(store, query), _rows(store, _call(comment))
        assert len(written) > 0, name
        pd.testing.assert_frame_equal(written, called, check_exact=False, rtol=1e-12, obj=name)


def test_a_replaced_job_view_or_a_call_put_back_is_written_out_again(store):
    before = _chain(store)
    # a later migration replaces a job view (here: its query with one more column in its first SELECT)
    query = store.scalar("SELECT as_select FROM system.tables WHERE database = currentDatabase() "
                         "AND name = 'job_engine_counters'", tag="test")
    store.command("CREATE OR REPLACE VIEW job_engine_counters AS "
                  + query.replace("SELECT ", "SELECT 1 AS probe_column, ", 1), tag="test")
    # ... and the chain view that runs it, and the one whose view reads it (resolution expands the counters)
    changed = ["cost_engine_counters_mv", "cost_resolved_calls_mv"]
    assert periodic.write_out(store) == changed
    after = _chain(store)
    assert all("probe_column" in after[name][0] for name in changed)
    # the others keep their queries and digests; their marks take the new inputs key (a new UUID)
    for name in set(after) - set(changed):
        assert after[name][0] == before[name][0], name
        assert after[name][1].partition(" | inputs ")[0] == before[name][1].partition(" | inputs ")[0], name
    # a later migration puts a call back (ALTER TABLE ... MODIFY QUERY): written out from the new call
    call = _call(after["cost_tasks_mv"][1])
    store.command(f"ALTER TABLE cost_tasks_mv MODIFY QUERY {call}", tag="test")
    assert CALL.search(_chain(store)["cost_tasks_mv"][0])
    assert periodic.write_out(store) == ["cost_tasks_mv"]
    assert _chain(store)["cost_tasks_mv"] == after["cost_tasks_mv"]
    assert periodic.write_out(store) == []


def test_periodic_query_leaves_other_forms_alone():
    queries = {"job_tasks": "WITH {ws:DateTime} AS ws, {we:DateTime} AS we SELECT ws, we"}
    clock = "(SELECT max(ws) FROM db.job_clock)"
    assert periodic.periodic_query("SELECT * FROM tasks_live", queries) is None
    assert periodic.periodic_query(f"SELECT * FROM job_other(ws = {clock}, we = (SELECT max(we) FROM db.job_clock))",
                                   queries) is None  # no stored query for it
    assert periodic.periodic_query("SELECT * FROM job_tasks(ws = now(), we = now())", queries) is None
    text = periodic.periodic_query(f"SELECT * FROM job_tasks(ws = {clock}, we = (SELECT max(we) FROM db.job_clock))",
                                   queries)
    assert text == ("SELECT * FROM (WITH CAST((SELECT max(jc.ws) FROM db.job_clock AS jc) AS DateTime) AS ws, "
                    "CAST((SELECT max(jc.we) FROM db.job_clock AS jc) AS DateTime) AS we SELECT ws, we)")
    # a parameter the chain does not bind leaves the view called
    assert periodic.periodic_query(f"SELECT * FROM job_tasks(ws = {clock}, we = (SELECT max(we) FROM db.job_clock))",
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
        assert "could not write out cost_tasks_mv" in caplog.text
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


def test_a_written_out_chain_is_found_so_from_its_marks_alone(store, monkeypatch, tmp_path):
    # each mark records the key of its inputs and how many views were written out with it
    marks = [comment.partition(" | inputs ")[2] for _, comment in _chain(store).values() if comment]
    assert len(marks) == len(WRITTEN_OUT) and len(set(marks)) == 1
    assert re.fullmatch(rf"[0-9a-f]{{64}} of {len(WRITTEN_OUT)}", marks[0])
    sent = _reads(store, monkeypatch)
    # a process start: no migration to apply, the marks and the job views' UUIDs only (no stored query read)
    assert migrate(store, retention_days=3650) == []
    assert periodic.write_out(store, quick=True) == []
    assert sent and not any("as_select" in text for text in sent), sent
    chain = _chain(store)
    # a replaced job view has a new UUID: the quick check sees it, the two steps that read it are rewritten
    query = store.scalar("SELECT as_select FROM system.tables WHERE database = currentDatabase() "
                         "AND name = 'job_engine_counters'", tag="test")
    store.command("CREATE OR REPLACE VIEW job_engine_counters AS "
                  + query.replace("SELECT ", "SELECT 1 AS probe_column, ", 1), tag="test")
    assert periodic.write_out(store, quick=True) == ["cost_engine_counters_mv", "cost_resolved_calls_mv"]
    assert periodic.write_out(store, quick=True) == []
    # a view whose first ALTER failed (its call, no mark): one mark short of the number recorded
    call = _call(chain["cost_tasks_mv"][1])
    store.command(f"ALTER TABLE cost_tasks_mv MODIFY COMMENT '', MODIFY QUERY {call}", tag="test")
    assert periodic.write_out(store, quick=True) == ["cost_tasks_mv"]
    # a migration that puts a call back under the old comment: migrate reads the queries after it (the
    # store has every other migration: a directory of this one alone is the pending list)
    directory = tmp_path / "migrations"
    directory.mkdir()
    (directory / "9990_restore_tasks_call.sql").write_text(f"ALTER TABLE cost_tasks_mv MODIFY QUERY {call};\n")
    assert migrate(store, retention_days=3650, directory=directory) == ["9990_restore_tasks_call.sql"]
    assert not CALL.search(_chain(store)["cost_tasks_mv"][0])
