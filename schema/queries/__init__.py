"""Named read queries: the only read API of the app, the alerts and the review.

Each query is one ``.sql`` file in this folder, ``<name>.sql``, with typed ``{param:Type}``
placeholders bound by the driver. :func:`run` loads it by name and returns a pandas DataFrame;
domain modules beside this file (``cost.py``, ``ops.py``, ...) wrap the queries in typed functions
with documented units. Callers contain no SQL.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

QUERIES_DIR = Path(__file__).parent
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class UnknownQuery(KeyError):
    """No ``<name>.sql`` in schema/queries."""


@lru_cache(maxsize=None)
def sql(name: str) -> str:
    """The text of the named query; raises UnknownQuery."""
    if not _NAME.match(name):
        raise UnknownQuery(f"bad query name {name!r}")
    path = QUERIES_DIR / f"{name}.sql"
    if not path.is_file():
        raise UnknownQuery(f"no named query {name!r} (expected {path})")
    return path.read_text()


def run(store, name: str, **params):
    """Run the named query with bound ``params``; returns a pandas DataFrame. Tagged ``query.<name>``."""
    return store.query_df(sql(name), params or None, tag=f"query.{name}")


def rows(store, name: str, **params):
    """Run the named query; returns (column_names, result_rows) without pandas."""
    result = store.query(sql(name), params or None, tag=f"query.{name}")
    return result.column_names, result.result_rows
