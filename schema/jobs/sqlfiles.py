"""The cost jobs' ``.sql`` files: where they are, and how a file is split into statements (:mod:`schema.sqltext`).

Position in the flow: serving -> collectors -> **schema** -> app/alerts; used by :mod:`schema.jobs` and
:mod:`schema.jobs.series`.
"""

from __future__ import annotations

from pathlib import Path

from schema.sqltext import split_statements, sql_statements  # noqa: F401 - the API

JOBS_DIR = Path(__file__).parent
