"""The rules that write the job views out into the statements that call them.

Position in the flow: serving -> collectors -> **schema** -> app/alerts; used by the generator of
``schema/jobs/written/`` (:mod:`schema.jobs.writeout`, ``make written-sql``) only: nothing is rewritten
at run time.

Why: ClickHouse plans a statement that reads a view roughly twice as expensively as the same query
written out (``SELECT * FROM job_call_costs(...)`` 0.25-0.33 CPU-s of analysis and planning on chDB's
engine 26.9, the view's own query run as the statement 0.16-0.19 CPU-s; benchmarks/README.md), and a
trailing run is almost all planning. The queries are the views' own, as the store formats them
(``system.tables.as_select``, ``job_views.sql``): nothing is restated here.

What is replaced (the rows are the views' rows: ``tests/test_jobs_inline.py``):

* a parameterized job view called with the runner's own parameters, ``job_x(ws = {ws:DateTime},
  we = {we:DateTime}[, run_id = {run_id:UInt64}])``, by ``(<its query>)``: the query binds the same
  ``{ws:DateTime}``, ... placeholders, so it is the call;
* a plain view of :data:`PLAIN_VIEWS` read as ``FROM``/``JOIN <view>`` by ``(<its query>) AS <view>``;
* recursively, inside the inserted queries (``job_replica_minutes`` reads ``job_replica_spend`` and
  ``call_costs``). Anything else is left as written (a view missing from the store stays a view).

:func:`explicit_queries` drops the arms of those queries an explicit run reads no row from (the
periodic chain's ``*_live`` scratch tables; ``call_costs`` read as its history table): fewer reads to
plan in every statement that reads a scratch table or ``call_costs``.
"""

from __future__ import annotations

import re

# Views the runner's statements read, directly or through another of them (identifiers: an allow-list).
JOB_VIEWS = (
    "job_resolved_calls", "job_engine_counters", "job_replica_gauges", "job_reconciliation", "job_call_costs",
    "job_replica_spend", "job_replica_minutes", "job_tasks", "job_triangle_blocks_due",
)
# Non-parameterized views the job views read.
PLAIN_VIEWS = ("call_costs",)

_CALL = re.compile(r"(?<![\w.`])(?:`?\w+`?\.)?`?(job_\w+)`?"
                   r"\((ws = \{ws:DateTime\}, we = \{we:DateTime\}(?:, run_id = \{run_id:UInt64\})?)\)")
_PLAIN = {name: re.compile(rf"\b(FROM|JOIN)\s+(?:`?\w+`?\.)?`?{name}`?(?![\w`(])(\s+AS\s+\w+)?") for name in PLAIN_VIEWS}
_DEPTH = 8  # views inside views: the job views nest two deep
# A job view's periodic arm over a scratch table and the explicit run's arm after it (migrations 1003,
# 1004): `SELECT <columns> FROM <db>.<x>_live WHERE p_run_id = 0 [AND (<condition>)] UNION ALL
# SELECT <columns'> FROM <db>.<x>_runs WHERE (run_id = p_run_id) ...`. An explicit run's run_id is never
# 0, so the first arm reads no row; it names the union's columns, so its list goes to the second arm
# when it aliases them (the two tables have the same columns, and `_runs` two more).
_LIVE_ARM = re.compile(r"SELECT (?P<live>[\w\s,*]+?) FROM (?P<db>(?:`?\w+`?\.)?)`?(?P<x>\w+)_live`? "
                       r"WHERE (?:\(?p_run_id = 0\)?|\(?\{run_id:UInt64\} = 0\)?)(?: AND \([^()]*\))? UNION ALL "
                       r"SELECT (?P<runs>[\w\s,*]+?(?: EXCEPT \(run_id, written_at\))?) FROM (?P=db)`?(?P=x)_runs`? ")
# call_costs (migration 1004): history below the watermark, live from it on.
_CALL_COSTS = re.compile(r"^SELECT \* FROM (?P<history>(?:`?\w+`?\.)?`?call_costs_history`?) WHERE minute < "
                         r"\(SELECT max\(watermark\) FROM (?:`?\w+`?\.)?`?cost_watermark`?\) UNION ALL SELECT \* FROM "
                         r"(?:`?\w+`?\.)?`?call_costs_live`? WHERE minute >= "
                         r"\(SELECT max\(watermark\) FROM (?:`?\w+`?\.)?`?cost_watermark`?\)$")


def inline_views(statement: str, queries: dict[str, str], *, depth: int = 0) -> str:
    """``statement`` with the views of ``queries`` (view name -> its stored query) written out.

    Args:
        statement: SQL text of one statement (placeholders unbound).
        queries: stored queries by view name, from :func:`view_queries`; views not in it are kept.

    Returns:
        The statement text; the same rows as ``statement`` (the same queries, read in place).

    Raises:
        ValueError: views nested deeper than 8 (a view reading itself).
    """
    if depth > _DEPTH:
        raise ValueError("job views nested too deep to inline")

    def call(match: re.Match) -> str:
        query = queries.get(match.group(1))
        return match.group(0) if not query else "(" + inline_views(query, queries, depth=depth + 1) + ")"

    out = _CALL.sub(call, statement)
    for name, pattern in _PLAIN.items():
        query = queries.get(name)
        if query and pattern.search(out):
            body = inline_views(query, queries, depth=depth + 1)
            out = pattern.sub(lambda m, body=body, name=name: f"{m.group(1)} ({body})" + (m.group(2) or f" AS {name}"),
                              out)
    return out


def view_queries(store, sql: str) -> dict[str, str]:
    """The stored queries of :data:`JOB_VIEWS` and :data:`PLAIN_VIEWS` in ``store``'s database: view
    name -> query text (``system.tables.as_select``), from the statement ``sql`` (``job_views.sql``).
    Views with no stored query, and job views whose query does not bind ``{ws:DateTime}`` (a server
    that formats a parameterized view's query otherwise), are left out: the runner reads those views."""
    rows = store.query(sql, {"names": list(JOB_VIEWS + PLAIN_VIEWS)}, tag="jobs.views").result_rows
    return {name: query for name, query in rows
            if query and (name in PLAIN_VIEWS or "{ws:DateTime}" in query)}


def _runs_arm(match: re.Match) -> str:
    columns = match.group("live") if " AS " in match.group("live") else match.group("runs")
    return f"SELECT {columns} FROM {match.group('db')}{match.group('x')}_runs "


def explicit_queries(queries: dict[str, str]) -> dict[str, str]:
    """``queries`` (from :func:`view_queries`) without the arms an explicit run reads no row from.

    * A job view's arm over a periodic scratch table (``<x>_live WHERE p_run_id = 0``): the runner's
      ``run_id`` is never 0, so only the ``<x>_runs`` arm has rows.
    * ``call_costs`` is its history table: the runner reads ``call_costs`` only in statements that run
      after the chunk's ``cost`` step raised the watermark to ``we`` or above (``replica_minutes``,
      ``tasks``; :mod:`schema.jobs.schedule`), and only minutes below ``we`` (every read of it in the
      job views says ``minute < we``), so all from history; the live arm (minutes from the watermark
      on) has none of them.

    Returns:
        A new dict; a query whose text does not match (another server's formatting) is kept whole,
        which reads the same rows.
    """
    out = {}
    for name, query in queries.items():
        if name == "call_costs":
            out[name] = _CALL_COSTS.sub(lambda m: f"SELECT * FROM {m.group('history')}", query)
        else:
            out[name] = _LIVE_ARM.sub(_runs_arm, query)
    return out
