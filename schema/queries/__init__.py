"""Named read queries: the only read API of the app, the alerts and the review.

Each query is one ``.sql`` file in this folder, ``<name>.sql``, with typed ``{param:Type}``
placeholders bound by the driver. :func:`run` loads it by name and returns a pandas DataFrame;
a query may mark optional parts ``-- section: <name>`` ... ``-- end section: <name>`` (whole lines)
that a caller omits when it asks for nothing they compute (:func:`sql_without`), and include a
fragment several queries share with a line ``-- include: <fragment>`` (``<fragment>.sql``);
domain modules beside this file (``cost.py``, ``ops.py``, ...) wrap the queries in typed functions
with documented units. Callers contain no SQL.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

QUERIES_DIR = Path(__file__).parent
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# the filters of the dashboard's queries: llm_calls.model (or the gauge label model_name) and the task
# context's tenant and task type
FILTER_KEYS = ("model", "tenant", "task_type")


class UnknownQuery(KeyError):
    """No ``<name>.sql`` in schema/queries."""


# a part several queries share: a whole line "-- include: <name>" stands for the text of <name>.sql,
# a fragment (no statement of its own: its header says where it fits and what it expects)
_INCLUDE = re.compile(r"^[ \t]*-- include: (\w+)[ \t]*$", re.M)


@lru_cache(maxsize=None)
def sql(name: str) -> str:
    """The text of the named query, its fragments included; raises UnknownQuery."""
    if not _NAME.match(name):
        raise UnknownQuery(f"bad query name {name!r}")
    path = QUERIES_DIR / f"{name}.sql"
    if not path.is_file():
        raise UnknownQuery(f"no named query {name!r} (expected {path})")
    return _INCLUDE.sub(lambda m: sql(m.group(1)).rstrip("\n"), path.read_text())


# an optional part of a query: from a "-- section: <name>" line to its "-- end section: <name>" line
_SECTION = re.compile(r"^[ \t]*-- section: (\w+)[ \t]*\n.*?^[ \t]*-- end section: \1[ \t]*\n", re.M | re.S)


@lru_cache(maxsize=None)
def sql_without(name: str, sections: frozenset[str]) -> str:
    """The named query's text with its optional ``sections`` cut out (their marker lines too).

    Why: ClickHouse parses, analyzes and plans every part of a statement, also a part whose
    condition is constant false for these parameters (a branch for a grouping nobody asked for);
    at 10M calls that fixed work, not reading, is most of a dashboard query's time (the cost
    summary's per-replica task join: 30-50 ms of its 170-250 ms, ``app/README.md``).

    Raises:
        UnknownQuery: no such query, or a section name the query does not mark.
    """
    text = sql(name)
    unknown = set(sections) - {m.group(1) for m in _SECTION.finditer(text)}
    if unknown:
        raise UnknownQuery(f"query {name!r} has no section(s) {sorted(unknown)}")
    return _SECTION.sub(lambda m: "" if m.group(1) in sections else m.group(0), text)


def run(store, name: str, *, omit: frozenset[str] = frozenset(), **params):
    """Run the named query with bound ``params``; returns a pandas DataFrame. Tagged ``query.<name>``.

    ``omit``: optional sections of the query to leave out (:func:`sql_without`)."""
    text = sql_without(name, frozenset(omit)) if omit else sql(name)
    return store.query_df(text, params or None, tag=f"query.{name}")


def rows(store, name: str, **params):
    """Run the named query; returns (column_names, result_rows) without pandas."""
    result = store.query(sql(name), params or None, tag=f"query.{name}")
    return result.column_names, result.result_rows


def num(value) -> float | None:
    """A value read from the store as a float; None for NULL (None, NaN, NaT, pandas' NA) and non-numbers."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return None if x != x else x


def naive_utc(value: datetime) -> datetime:
    """``value`` as a naive UTC datetime, the form bound to ``DateTime`` parameters: clickhouse-connect
    binds naive datetimes verbatim and the server and chDB read them as UTC. Naive values are taken as
    UTC already. Raises TypeError for anything but a datetime."""
    if not isinstance(value, datetime):
        raise TypeError(f"expected a datetime, got {type(value).__name__}")
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def filter_params(filters: dict | None) -> dict:
    """``filters`` (``FILTER_KEYS``, exact match) as the parameters a filtered query binds: each key,
    '' = no filter. Raises ValueError for an unknown key."""
    filters = filters or {}
    unknown = set(filters) - set(FILTER_KEYS)
    if unknown:
        raise ValueError(f"unknown filter(s) {sorted(unknown)}; accepted: {list(FILTER_KEYS)}")
    return {key: str(filters.get(key) or "") for key in FILTER_KEYS}
