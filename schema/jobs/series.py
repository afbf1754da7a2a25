"""The live series' blocks (migration 1006): the rollup step that writes them.

Position in the flow: serving -> collectors -> **schema** -> app/alerts. The live page's 7-day and 30-day
latency series (schema/queries/ops_latency_series_hours.sql) take a bucket's t-digest quantiles from its
block while the bucket's rows of ``ops_engine_hours`` have the block's fingerprint; :func:`roll_up_series`
(called by :func:`schema.jobs.roll_up_pending` every minute in ``infercost up``) writes them
(schema/jobs/README.md, "The live series' blocks").
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from schema.jobs.sqlfiles import JOBS_DIR, sql_statements

# The live page's series buckets that get blocks (migration 1006): app.charts.series_bucket of the
# 7-day and the 30-day range, seconds.
SERIES_BLOCKS_S = (7200, 43200)
# The next roll_up_series reads the marks (ops_series_marks, migration 1006) from this long before the
# previous one started: inserts still being written then, and a server's clock ahead of this host's.
SERIES_MARKS_MARGIN = timedelta(minutes=2)
_EPOCH = datetime(1970, 1, 1)


def _utc_minute(value: datetime) -> datetime:
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value.replace(second=0, microsecond=0)


def _interval_start(value: datetime, seconds: int) -> datetime:
    """ClickHouse's ``toStartOfInterval(value, toIntervalSecond(seconds))`` of a naive UTC datetime."""
    epoch = int(value.replace(tzinfo=timezone.utc).timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds, timezone.utc).replace(tzinfo=None)


def roll_up_series(store, *, start: datetime, end: datetime) -> None:
    """Write the live series' blocks (migration 1006) of every size in :data:`SERIES_BLOCKS_S`
    that lie in ``[start, end)`` (UTC, naive; a block counts when all its hours began before the hour
    of ``end``) and that no block row names by the current fingerprint of its rows of
    ``ops_engine_hours`` (summed requests and output tokens, which background merges keep;
    ``run_series_blocks.sql``): the t-digest quantiles the live page's multi-day series shows per
    bucket, fleet and per replica, computed by the page's own merge.

    Only the buckets that can have changed since the newest call of the last 2 days whose range began
    at or before this one's (``ops_series_runs``) are read: those with an hour that inserts (late rows
    included) marked in ``ops_series_marks`` from :data:`SERIES_MARKS_MARGIN` before that call's start
    on, and those that became complete since; with none, no block statement runs. Without such a call
    every bucket of ``[start, end)`` is read. Insert-only; a current block is not written again.
    Raises StoreError from the store."""
    start, end = _utc_minute(start), _utc_minute(end)
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    end_hour = end.replace(minute=0)
    runs = store.query((JOBS_DIR / "series_runs.sql").read_text(), tag="jobs.series_blocks").result_rows
    # the first bucket of each size, no earlier than DateTime's first second (a retention reaching before 1970)
    firsts = {seconds: max(_interval_start(start.replace(minute=0), seconds), _EPOCH) for seconds in SERIES_BLOCKS_S}
    last = {}  # block size -> (marks_from, complete_to) of the newest run covering this one's first bucket
    for seconds, since, marks_from, complete_to in runs:
        if seconds in firsts and since.replace(tzinfo=None) <= firsts[seconds]:
            row = (marks_from.replace(tzinfo=None), complete_to.replace(tzinfo=None))
            last[seconds] = max(last.get(seconds, row), row)
    marked = []
    if last:
        marked = [r[0].replace(tzinfo=None) for r in store.query(
            (JOBS_DIR / "series_marks.sql").read_text(), {"since": min(m for m, _ in last.values())},
            tag="jobs.series_blocks").result_rows]
    run_id = time.time_ns()
    for seconds in SERIES_BLOCKS_S:
        step = timedelta(seconds=seconds)
        hours = []
        if seconds in last:
            marks_from, complete_to = last[seconds]
            buckets = {_interval_start(h, seconds) for h in marked}  # marks_from of the other size may be older
            bucket = _interval_start(complete_to, seconds)  # blocks ending after complete_to, complete by end
            while bucket + step <= end_hour:
                buckets.add(bucket)
                bucket += step
            hours = sorted(b + timedelta(hours=i) for b in buckets if firsts[seconds] <= b and b + step <= end_hour
                           for i in range(seconds // 3600))
            if not hours:
                continue
        for statement in sql_statements(JOBS_DIR / "run_series_blocks.sql"):
            store.command(statement, {"ws": start, "we": end, "s": seconds, "run_id": run_id,
                                      "all": seconds not in last, "hours": hours}, tag="jobs.series_blocks")
    # what this call covered, for the next: marks from a margin before its start are left to it
    store.insert("ops_series_runs", [(seconds, firsts[seconds], now - SERIES_MARKS_MARGIN, end_hour)  # naive UTC
                                     for seconds in SERIES_BLOCKS_S],
                 ["block_seconds", "since", "marks_from", "complete_to"], tag="jobs.series_blocks")
