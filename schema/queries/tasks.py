"""Task named queries beyond the cost module's table: one task by id (``infercost cost --task``,
the query API's ``/api/v1/tasks/<id>``).

Position: schema -> app / infercost. Columns and units are ``schema.queries.cost.tasks_table``'s.
"""

from __future__ import annotations

import pandas as pd

from schema.queries import run
from schema.queries.cost import COLUMNS, task_calls

__all__ = ["task_detail"]


def task_detail(store, task_id: str) -> tuple[dict | None, pd.DataFrame]:
    """``(task, calls)`` of one task: its ``tasks`` row as a dict (None when the cost job has no row for
    it, e.g. it has not ended yet) and its calls (``cost.task_calls``: attempts, replica, cost USD and
    category per call). Raises ValueError for an empty id; StoreError from the store."""
    if not task_id:
        raise ValueError("task_id is required")
    df = run(store, "tasks_one", task_id=str(task_id))
    row = None
    if len(df):
        row = {k: df.iloc[0][k] for k in COLUMNS["tasks_table"] if k in df.columns}
    return row, task_calls(store, task_id)
