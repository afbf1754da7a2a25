"""How the project's ``.sql`` files are split into statements: at a ``;`` that ends a line, with
comment lines dropped. One rule for the migrations (:mod:`schema.migrate`) and the cost jobs
(:mod:`schema.jobs.sqlfiles`), so a file means the same to both.
"""

from __future__ import annotations

import re
from pathlib import Path


def split_statements(text: str) -> list[str]:
    """The non-empty statements of a ``.sql`` text, each without its ``--`` comment lines."""
    out = []
    for part in re.split(r";[ \t]*(?:\n|$)", text):
        body = "\n".join(line for line in part.splitlines() if not line.strip().startswith("--")).strip()
        if body:
            out.append(body)
    return out


def sql_statements(path: Path) -> list[str]:
    """The statements of the ``.sql`` file at ``path`` (:func:`split_statements`)."""
    return split_statements(Path(path).read_text())
