"""The cost jobs' ``.sql`` files: where they are and how a file is split into statements.

Position in the flow: serving -> collectors -> **schema** -> app/alerts; used by :mod:`schema.jobs` and
:mod:`schema.jobs.series`.
"""

from __future__ import annotations

import re
from pathlib import Path

JOBS_DIR = Path(__file__).parent


def sql_statements(path: Path) -> list[str]:
    """The statements of the ``.sql`` file at ``path``: split at ``;`` ending a line, comment lines dropped."""
    return split_statements(Path(path).read_text())


def split_statements(text: str) -> list[str]:
    """The statements of a ``.sql`` text, as :func:`sql_statements`."""
    out = []
    for part in re.split(r";[ \t]*(?:\n|$)", text):
        body = "\n".join(line for line in part.splitlines() if not line.strip().startswith("--")).strip()
        if body:
            out.append(body)
    return out
