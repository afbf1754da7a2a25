"""The cost jobs' runner: explicit windows (tests, backfills) and a nudge for the periodic chain.

Position in the flow: serving -> collectors -> **schema** -> app/alerts. The jobs themselves are
SQL: one parameterized view per job in ``schema/migrations/0013_create_cost_job_views.sql``
(``job_call_costs``, ``job_replica_minutes``, ``job_tasks`` over a window ``[ws, we)`` of whole
UTC minutes). Two runners call the same views:

* **Periodic** — refreshable materialized views (``0014``) that a ClickHouse server, or the
  embedded engine inside ``infercost up``, runs every minute with no help from this module. They
  recompute a trailing window (``cost_settings.job_window_s``, default 2 h) into ``*_live``
  (replaced atomically each run, so late spans are absorbed) and copy minutes about to leave it
  into ``*_history``. Readers use the views ``call_costs``, ``replica_minutes`` and ``tasks``:
  history below ``cost_watermark``, live from it on.
* **Explicit** — :func:`run_jobs` (this module): for ``[start, end)`` it deletes the history rows
  of the window and inserts the job views' output, job by job in dependency order, then raises the
  watermark to ``end``. Deterministic (``end`` is the "now" of abandonment), so tests use it; the
  backfill ``infercost cost --recompute --since 30d`` uses it after a price change.

Both are idempotent: running a window twice gives the same rows. A delete + insert is not atomic:
during a backfill a reader can briefly see a window without rows.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

log = logging.getLogger(__name__)

JOBS_DIR = Path(__file__).parent
# Dependency order: replica_minutes and tasks sum the call_costs view.
JOB_ORDER = ("call_costs", "replica_minutes", "tasks")
# The periodic chain, in DEPENDS ON order (schema/migrations/0014_create_cost_refresh_views.sql).
REFRESH_VIEWS = (
    "cost_copy_call_costs_mv", "cost_copy_replica_minutes_mv", "cost_copy_tasks_mv", "cost_watermark_mv",
    "cost_clock_mv", "cost_resolved_calls_mv", "cost_reconciliation_mv", "cost_call_costs_mv", "cost_replica_minutes_mv", "cost_tasks_mv",
)
# A day per statement keeps each embedded call short (chDB serialises calls) and memory bounded.
DEFAULT_CHUNK = timedelta(days=1)


@dataclass
class JobRun:
    """What :func:`run_jobs` did: the window (UTC, whole minutes), seconds per job, rows written."""

    start: datetime
    end: datetime
    seconds: dict[str, float] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())


def _statements(name: str) -> list[str]:
    return sql_statements(JOBS_DIR / f"{name}.sql")


def sql_statements(path: Path) -> list[str]:
    """The statements of the ``.sql`` file at ``path``: split at ``;`` ending a line, comment lines dropped."""
    text = Path(path).read_text()
    out = []
    for part in re.split(r";[ \t]*(?:\n|$)", text):
        body = "\n".join(line for line in part.splitlines() if not line.strip().startswith("--")).strip()
        if body:
            out.append(body)
    return out


def _minute(value: datetime, *, up: bool = False) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"expected a datetime, got {type(value).__name__}")
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    floored = value.replace(second=0, microsecond=0)
    if up and floored != value:
        floored += timedelta(minutes=1)
    return floored


def window_setting(store) -> int:
    """The trailing window of the periodic run, seconds (``cost_settings.job_window_s``)."""
    sql = (JOBS_DIR / "job_window.sql").read_text()
    return int(store.scalar(sql, tag="jobs.window") or 7200)


def run_jobs(store, *, start: datetime | None = None, end: datetime | None = None,
             chunk: timedelta = DEFAULT_CHUNK, progress=None) -> JobRun:
    """Recompute the cost tables for the window ``[start, end)`` (UTC; rounded out to whole minutes).

    Args:
        store: a migrated :class:`schema.store.Store`.
        start: window start; default ``end`` - the configured trailing window (2 h).
        end: window end, also the "now" that decides abandonment; default: the current minute.
        chunk: windows longer than this run as consecutive chunks (oldest first), each a complete
            explicit run, so a 30-day backfill never holds one huge statement. Abandonment in a
            chunk is judged at that chunk's end, as the periodic job would have.
        progress: optional callable(str) told about each chunk.

    Returns:
        A :class:`JobRun` with seconds per job and rows written per table.

    Raises:
        ValueError: empty window. StoreError from the store.
    """
    end = _minute(end or datetime.now(timezone.utc), up=True)
    if start is None:
        start = end - timedelta(seconds=window_setting(store))
    start = _minute(start)
    if end <= start:
        raise ValueError(f"job window is empty: start {start.isoformat()} is not before end {end.isoformat()}")
    result = JobRun(start, end)
    chunk_start = start
    while chunk_start < end:
        chunk_end = min(chunk_start + chunk, end)
        existing = _history_counts(store, chunk_start, chunk_end)
        # run_id keys this chunk's scratch rows (resolved_calls_runs, read by call_costs and
        # replica_minutes); unique per process and chunk
        params = {"ws": chunk_start, "we": chunk_end, "run_id": time.time_ns()}
        for job in JOB_ORDER:
            began = time.perf_counter()
            # a lightweight DELETE costs a mutation even on an empty range: skip it when nothing is there
            delete = _statements(f"delete_{job}") if existing.get(job) else []
            for statement in delete + _statements(f"run_{job}"):
                store.command(statement, params, tag=f"jobs.{job}")
            if job == "call_costs":
                # The later jobs read the call_costs view, which serves minutes below the
                # watermark from history: raise it before they run.
                for statement in _statements("advance_watermark"):
                    store.command(statement, {"we": chunk_end}, tag="jobs.watermark")
            result.seconds[job] = result.seconds.get(job, 0.0) + time.perf_counter() - began
        if progress:
            progress(f"{chunk_start.isoformat()} .. {chunk_end.isoformat()}")
        chunk_start = chunk_end
    result.rows = _history_counts(store, start, end)
    return result


def _history_counts(store, start: datetime, end: datetime) -> dict[str, int]:
    rows = store.query((JOBS_DIR / "history_counts.sql").read_text(), {"ws": start, "we": end},
                       tag="jobs.counts").result_rows
    return {name: int(count) for name, count in rows}


def watermark(store) -> datetime | None:
    """The history/live boundary (UTC, naive): minutes before it come from ``*_history``; None when
    no run has set it yet. Minutes older than the live window and newer than it were never
    computed unless a run covered them (``infercost cost --recompute``)."""
    value = store.scalar((JOBS_DIR / "watermark.sql").read_text(), tag="jobs.watermark")
    if value is None or value.year <= 1970:
        return None
    return value.replace(tzinfo=None)


def refresh(store) -> None:
    """Run the periodic chain of refreshable materialized views once now and wait for it.

    Uses ``SYSTEM REFRESH VIEW`` / ``SYSTEM WAIT VIEW`` view by view in dependency order (works on
    chDB in an Atomic database and on a server). Raises StoreError if a refresh fails (the
    message carries the view's exception).
    """
    for statement in _statements("refresh"):
        store.command(statement, tag="jobs.refresh")


def stop(store) -> None:
    """Stop the periodic chain's schedule in this database (``SYSTEM STOP VIEW``); for benchmarks."""
    for statement in _statements("stop"):
        store.command(statement, tag="jobs.stop")


def start(store) -> None:
    """Resume the periodic chain's schedule (``SYSTEM START VIEW``)."""
    for statement in _statements("start"):
        store.command(statement, tag="jobs.start")


def status(store):
    """The chain's refresh state: DataFrame (view, status, last_success_time, last_refresh_time,
    next_refresh_time, exception) from ``system.view_refreshes``."""
    return store.query_df((JOBS_DIR / "view_refreshes.sql").read_text(), tag="jobs.status")


# A late minute is recomputed with the hour after it, so tasks that ended there (and summed it)
# are rewritten too; later tasks are in the live window, which the periodic chain recomputes.
LATE_EXTEND = timedelta(hours=1)


def recompute_late(store, *, retention_days: int = 30, progress=None) -> list[tuple[datetime, datetime]]:
    """Recompute the minutes that received data after the live window (``late_minutes``, filled at
    ingest for spans and metric points older than the watermark) and mark them recomputed.

    Pending minutes newer than ``retention_days`` are grouped into ranges (minutes less than
    :data:`LATE_EXTEND` apart share one); each range ``[lo, hi]`` is re-run with :func:`run_jobs`
    over ``[lo, min(hi + 1 min + LATE_EXTEND, watermark))`` — history only: the live window is the
    periodic chain's. Returns the ranges recomputed (UTC, naive). Data arriving during a recompute
    stays pending for the next call.
    """
    before = datetime.now(timezone.utc).replace(tzinfo=None)
    oldest = before - timedelta(days=int(retention_days))
    rows = store.query((JOBS_DIR / "late_pending.sql").read_text(), {"oldest": oldest}, tag="jobs.late").result_rows
    minutes = [r[0].replace(tzinfo=None) for r in rows]
    if not minutes:
        return []
    mark = watermark(store)
    ranges: list[list[datetime]] = []
    for minute in minutes:
        if ranges and minute - ranges[-1][1] <= LATE_EXTEND:
            ranges[-1][1] = minute
        else:
            ranges.append([minute, minute])
    done = []
    for lo, hi in ranges:
        end = hi + timedelta(minutes=1) + LATE_EXTEND
        if mark is not None:
            end = max(min(end, mark), hi + timedelta(minutes=1))
        run_jobs(store, start=lo, end=end)
        store.command((JOBS_DIR / "late_done.sql").read_text(), {"lo": lo, "hi": hi, "before": before},
                      tag="jobs.late_done")
        if progress:
            progress(f"recomputed late data {lo.isoformat()} .. {end.isoformat()}")
        done.append((lo, end))
    return done


class LateRecompute:
    """Background thread calling :func:`recompute_late` every ``interval_s`` (``infercost up``).

    ``start()`` / ``stop()`` (idempotent, joins the thread). Errors are logged, never raised: the
    minutes stay pending and the next round retries them.
    """

    def __init__(self, store, *, interval_s: float = 60.0, retention_days: int = 30):
        self.store, self.interval_s, self.retention_days = store, interval_s, retention_days
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cost-late-recompute", daemon=True)

    def start(self) -> "LateRecompute":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                for lo, end in recompute_late(self.store, retention_days=self.retention_days):
                    log.info("recomputed late data %s .. %s", lo, end)
            except Exception:  # noqa: BLE001 - keep the loop alive; the minutes stay pending
                log.exception("recomputing late minutes failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
