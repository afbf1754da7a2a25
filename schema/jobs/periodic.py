"""The periodic chain's refreshable views with the job views they run written out.

Position in the flow: serving -> collectors -> **schema** -> app/alerts; called by
:func:`schema.migrate.migrate` after the migrations.

Why: each step of the periodic chain (migrations 0014, 0064, 0240) is a refreshable materialized view
whose query calls a job view, ``SELECT * FROM job_x(ws = (SELECT max(ws) FROM job_clock), we = ...)``,
and ClickHouse plans a statement that reads a view about twice as expensively as the same query written
out (:mod:`schema.jobs.inline`, which does the same for the explicit runner). A cycle of the chain is
almost all planning: on the 10M-call bench store with nothing new in the window, the seven steps that call
a job view took 1.54 s as they are and 0.82 s written out (median of 5 each, one process; schema/jobs/README.md,
"The periodic chain written out"), every minute, in every process that holds an embedded store (the
dashboard's too).

So after the migrations each such view's query becomes its job view's stored query, with

* the views it reads written out in turn (:func:`schema.jobs.inline.inline_views`);
* the binding the chain passes in place of the parameters: ``{ws:DateTime}`` / ``{we:DateTime}`` are
  the clock's ``max(ws)`` / ``max(we)``, cast to the parameter's type as a call would (a scalar subquery
  is Nullable); ``{run_id:UInt64}`` is the chain's 0;
* without the arms over the explicit runner's scratch tables (``... FROM <x>_runs WHERE (run_id =
  p_run_id) AND (p_run_id != 0)``), which read no row when ``run_id`` is 0, as their condition says.

The rows are the view's (``tests/test_jobs_periodic.py`` compares the chain's tables with and without).
The view's own call is kept in the view's comment with a digest of what was written out: the next
:func:`write_out` reads the call from there, writes again only when the job views changed (a later
migration's ``CREATE OR REPLACE VIEW``), and takes a call a later migration put back (``MODIFY QUERY``).

The comment also holds the key of what the text was made from (the job views' UUIDs: a view's
definition changes only with a new UUID; and these rules, the source of this module and of
:mod:`schema.jobs.inline`) and how many views were written out with it. ``write_out(store,
quick=True)``, what ``migrate`` runs when it applied no migration (every process start), reads only
the chain views' comments and the job views' UUIDs and stops there when every mark carries the current
key and their number is the one recorded (a whole ``migrate`` of an up-to-date store: 23-31 ms in a new
process, against 76-92 ms reading the stored queries; schema/jobs/README.md); otherwise, or after a
migration (which may put a call back with the old comment), it reads the stored queries.
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

from schema.jobs import inline
from schema.jobs.inline import inline_views, view_ids, view_queries
from schema.jobs.sqlfiles import JOBS_DIR
from schema.store import StoreError

log = logging.getLogger(__name__)

# A chain view's query as the migrations wrote it (formatted by ClickHouse; the clock may be qualified).
_CHAIN_CALL = re.compile(
    r"^SELECT \* FROM (?:`?\w+`?\.)?`?(?P<view>job_\w+)`?\("
    r"ws = \(SELECT max\(ws\) FROM (?P<clock>(?:`?\w+`?\.)?`?job_clock`?)\), "
    r"we = \(SELECT max\(we\) FROM (?P=clock)\)(?P<run_id>, run_id = 0)?\)$")
# An arm over a scratch table of the explicit runner (migrations 0064, 0240), as stored: it ends where
# its CTE or subquery closes. Its own condition says it reads nothing when run_id is 0.
_RUNS_ARM = re.compile(
    r" UNION ALL SELECT [\w\s,*()]+? FROM (?:`?\w+`?\.)?`?\w+_runs`? "
    r"WHERE \(run_id = (?P<r>p_run_id|\{run_id:UInt64\})\) AND \((?P=r) != 0\)(?: AND \([^()]*\))?(?=\))")
# What the comment of a written-out view holds: its call, then the digest of the text written for it.
_MARK = "infercost: written out from "
_DIGEST = " | sha256 "
_INPUTS = " | inputs "  # then "<key> of <n>": the key of what the text was made from, views written with it


def periodic_query(call: str, queries: dict[str, str]) -> str | None:
    """The chain view query ``call`` (one job view called with the clock's window) with the job view
    written out, or None when ``call`` is not that form or its view has no stored query in ``queries``
    (from :func:`schema.jobs.inline.view_queries`).

    Returns:
        SQL text of a SELECT with the same columns and rows as ``call``.
    """
    match = _CHAIN_CALL.match(call.strip())
    if not match or match.group("view") not in queries:
        return None
    body = inline_views(queries[match.group("view")], queries)
    if match.group("run_id"):
        body = _RUNS_ARM.sub("", body)
    clock = match.group("clock")
    for bound in ("ws", "we"):  # the clock's column, qualified: the view's WITH names its own `ws` / `we`
        body = body.replace("{%s:DateTime}" % bound, f"CAST((SELECT max(jc.{bound}) FROM {clock} AS jc) AS DateTime)")
    body = body.replace("{run_id:UInt64}", "CAST(0 AS UInt64)")
    if "{" in re.sub(r"'(?:[^'\\]|\\.)*'", "", body):  # a parameter no binding covers: leave the view
        return None
    return f"SELECT * FROM ({body})"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _source(query: str, comment: str) -> tuple[str | None, str | None, str | None]:
    """(the view's call, the digest written last, the inputs mark written with it) from its stored
    query and comment."""
    if _CHAIN_CALL.match(query.strip()):
        return query.strip(), None, None
    if comment.startswith(_MARK) and _DIGEST in comment:
        rest, _, inputs = comment[len(_MARK):].partition(_INPUTS)
        call, _, digest = rest.rpartition(_DIGEST)
        return call, digest, inputs or None
    return None, None, None


# The rules a written-out text is made by: a new version of either module writes the chain out again.
_RULES = (Path(inline.__file__).read_bytes(), Path(__file__).read_bytes())


def _inputs_key(store) -> str | None:
    """A digest of what a written-out text is made from: the job views' UUIDs and these rules (the
    source of this module and of :mod:`schema.jobs.inline`); None where UUIDs identify nothing."""
    ids = view_ids(store, (JOBS_DIR / "job_view_ids.sql").read_text())
    if ids is None:
        return None
    digest = hashlib.sha256(repr(ids).encode())
    for source in _RULES:
        digest.update(source)
    return digest.hexdigest()


def _marked_up_to_date(store, key: str) -> bool:
    """True when every chain view's mark carries ``key`` and as many views carry one as it records
    (a view whose ALTER failed lacks the mark, or keeps an older one)."""
    comments = [c for (c,) in store.query((JOBS_DIR / "chain_marks.sql").read_text(), tag="jobs.chain").result_rows]
    marks = [c.partition(_INPUTS)[2] for c in comments if c.startswith(_MARK)]
    return bool(marks) and all(m == f"{key} of {len(marks)}" for m in marks)


def write_out(store, *, quick: bool = False) -> list[str]:
    """Give each refreshable view of the periodic chain that calls a job view the written-out query
    (:func:`periodic_query`), unless it has it already. Idempotent; a view whose query is not the
    chain's call form is left as it is (it reads its view: the same rows).

    With ``quick``, first compare the marks in the chain views' comments with the job views' UUIDs and
    these rules (:func:`_marked_up_to_date`: two small reads) and stop when they agree; only a caller that
    changed no view since the last write-out may ask for it (``migrate`` when it applied nothing: a
    migration may put a call back under the old comment).

    An ``ALTER`` the store refuses (e.g. a ClickHouse that cannot change a refreshable view's query)
    is logged as a warning and leaves that view as it was: it still gives the same rows, planned as
    before, and a later call tries again (a quick one too when the view lacks the current mark).

    Returns:
        The names of the views whose query was rewritten now (empty when all were up to date; a view
        whose text was up to date and only its mark changed is not listed).

    Raises:
        StoreError when the chain's views or the job views' queries or UUIDs cannot be read.
    """
    key = _inputs_key(store)
    if quick and key is not None and _marked_up_to_date(store, key):
        return []
    rows = store.query((JOBS_DIR / "chain_views.sql").read_text(), tag="jobs.chain").result_rows
    queries = None
    texts = {}
    for name, query, comment in rows:
        call, done, inputs = _source(query, comment)
        if call is None:
            continue
        if queries is None:
            queries = view_queries(store, (JOBS_DIR / "job_views.sql").read_text())
        text = periodic_query(call, queries)
        if text is not None:
            texts[name] = (call, text, _digest(text), done, inputs)
    written = []
    mark_inputs = f"{key} of {len(texts)}" if key is not None else None
    for name, (call, text, digest, done, inputs) in texts.items():
        if digest == done and inputs == mark_inputs:
            continue
        mark = _MARK + call + _DIGEST + digest + (_INPUTS + mark_inputs if mark_inputs else "")
        change = f"MODIFY COMMENT {_quoted(mark)}" + ("" if digest == done else f", MODIFY QUERY {text}")
        try:
            store.command(f"ALTER TABLE `{name}` {change}", tag="jobs.chain")
        except StoreError as exc:  # the view keeps its query (the same rows); the next migrate tries again
            log.warning("periodic cost chain: could not write out %s's job view: %s", name, exc)
            continue
        if digest != done:
            written.append(name)
    if written:
        log.info("periodic cost chain: wrote out the job views of %s", ", ".join(written))
    return written
