"""The cost jobs' runner: explicit windows (tests, backfills) and a nudge for the periodic chain.

Position in the flow: serving -> collectors -> **schema** -> app/alerts. The jobs themselves are
SQL: one parameterized view per job step in ``schema/migrations/1004_baseline_cost_jobs.sql``
(``job_resolved_calls`` ... ``job_tasks`` over a window ``[ws, we)`` of whole UTC minutes;
schema/jobs/README.md walks one call through them). Two runners run the same views:

* **Periodic** — refreshable materialized views (``1005_baseline_cost_chain.sql``) that a ClickHouse
  server, or the embedded engine inside ``infercost up``, runs every minute with no help from this
  module. They recompute a trailing window (``cost_settings.job_window_s``, default 2 h) into
  ``*_live`` (replaced atomically each run, so late spans are absorbed) and copy minutes about to leave
  it into ``*_history``. Readers use the views ``call_costs``, ``replica_minutes`` and ``tasks``:
  history below ``cost_watermark``, live from it on. The steps that call a job view run its query
  written out (``schema/jobs/written/cost_*_mv.sql``, given to the views after every migrate by
  :mod:`schema.jobs.periodic`: the same rows, planned in less time).
* **Explicit** — :func:`run_jobs` (this module): for ``[start, end)``, in chunks of a day (cut at
  whole hours where a day holds more than ``DEFAULT_MAX_CHUNK_CALLS`` calls), it
  replaces the history rows of each chunk with the job views' output and raises the watermark to
  the chunk's end; two workers run the steps that do not depend on each other at once
  (:mod:`schema.jobs.schedule`). Each step is one file of ``schema/jobs/``; the ones that read a job
  view run as ``schema/jobs/written/run_*.sql``, the views written out (``make written-sql``).
  Deterministic (``end`` is the "now" of abandonment), so tests use it; the backfill
  ``infercost cost --recompute --since 30d`` uses it after a price change.

Both are idempotent: running a window twice gives the same rows. A delete + insert is not atomic:
during a backfill a reader can briefly see a window without rows. No step waits on a mutation:
history rows are deleted as patch parts and scratch rows by partition.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from schema.jobs.schedule import Chunk, Task, plan, run_plan
from schema.jobs.series import SERIES_BLOCKS_S, roll_up_series  # noqa: F401 - the API
from schema.jobs.sqlfiles import JOBS_DIR, split_statements, sql_statements  # noqa: F401 - the API

log = logging.getLogger(__name__)

# The periodic chain's steps in an order its DEPENDS ON graph allows (steps that read nothing of each
# other run side by side: schema/jobs/refresh.sql).
REFRESH_VIEWS = (
    "cost_copy_call_costs_mv", "cost_copy_replica_minutes_mv", "cost_copy_tasks_mv", "cost_watermark_mv",
    "cost_clock_mv", "cost_resolved_calls_mv", "cost_engine_counters_mv", "cost_replica_gauges_mv",
    "cost_reconciliation_mv", "cost_call_costs_mv", "cost_replica_minutes_mv", "cost_tasks_mv",
)
# The steps after the clock: they recompute the live tables over the window the clock holds.
LIVE_VIEWS = REFRESH_VIEWS[REFRESH_VIEWS.index("cost_clock_mv") + 1:]
# A day per statement keeps each embedded call short and its memory bounded (by a day's calls).
DEFAULT_CHUNK = timedelta(days=1)
# Statements at once (one client each): the machines we measure on have 2 cores.
DEFAULT_WORKERS = 2
# Calls (llm_calls rows) a chunk of a long run may hold before it is split at whole hours: a run's
# peak memory grows ~1.2 KiB per call of its largest chunk (benchmarks/bench_scale.py on 2 cores:
# 852 MiB at 143k calls a day, 1,182 MiB at 429k, 2,434 MiB at 1.43M; 2,535 MiB at 30M calls in 8 h
# chunks), so 2M keeps a recompute near 3 GiB by that slope however many calls a day holds, and
# leaves day chunks (fewer fixed costs) up to 2M a day.
DEFAULT_MAX_CHUNK_CALLS = 2_000_000
# Windows up to this long are never split (no count query): the periodic trailing window is 2 h.
SPLIT_FROM = timedelta(hours=6)


@dataclass
class JobRun:
    """What :func:`run_jobs` did: the window (UTC, whole minutes), seconds per job (summed over the
    workers, so their sum can exceed the run's wall time), wall seconds, rows written."""

    start: datetime
    end: datetime
    seconds: dict[str, float] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0
    chunks: int = 0

    @property
    def total_seconds(self) -> float:
        """Seconds spent in the jobs, summed over workers (see ``elapsed_s`` for wall time)."""
        return sum(self.seconds.values())


def _statements(name: str) -> list[str]:
    return sql_statements(JOBS_DIR / f"{name}.sql")


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


def chunk_windows(start: datetime, end: datetime, chunk: timedelta, hourly_calls: dict[datetime, int] | None = None,
                  max_chunk_calls: int | None = None) -> list[tuple[datetime, datetime]]:
    """The consecutive windows an explicit run over ``[start, end)`` is cut into: ``chunk`` long (the
    last shorter), and each window holding more than ``max_chunk_calls`` calls by ``hourly_calls``
    (calls per UTC hour start, naive) cut again at whole hours into ``k = ceil(calls / max)`` pieces
    of about equal calls (each cut at the hour boundary whose running count is nearest ``j/k`` of the
    window's). A single hour is never cut, so an hour over the limit stays one window.

    Returns:
        ``[(start, end), ...]`` naive UTC datetimes, covering ``[start, end)`` without gap or overlap.
    """
    windows = []
    ws = start
    while ws < end:
        windows.append((ws, min(ws + chunk, end)))
        ws = windows[-1][1]
    if not max_chunk_calls or not hourly_calls:
        return windows
    out = []
    for ws, we in windows:
        hour0 = ws.replace(minute=0, second=0, microsecond=0)
        bounds = []  # the window's hour boundaries strictly inside it
        while hour0 + timedelta(hours=len(bounds) + 1) < we:
            bounds.append(hour0 + timedelta(hours=len(bounds) + 1))
        hour_calls = [hourly_calls.get(hour0 + timedelta(hours=i), 0) for i in range(len(bounds) + 1)]
        total = sum(hour_calls)
        pieces = -(-total // max_chunk_calls)
        if pieces <= 1 or not bounds:
            out.append((ws, we))
            continue
        before = list(itertools.accumulate(hour_calls[:-1]))  # calls before each boundary
        cuts, lo = [], 0
        for j in range(1, pieces):
            target = total * j / pieces
            candidates = range(lo, len(bounds))
            if not candidates:
                break
            best = min(candidates, key=lambda i: (abs(before[i] - target), i))
            cuts.append(bounds[best])
            lo = best + 1
        edges = [ws, *cuts, we]
        out.extend(zip(edges[:-1], edges[1:]))
    return out


def _hourly_calls(store, start: datetime, end: datetime) -> dict[datetime, int]:
    rows = store.query((JOBS_DIR / "chunk_calls.sql").read_text(), {"ws": start, "we": end},
                       tag="jobs.chunk_calls").result_rows
    return {_minute(hour): int(calls) for hour, calls in rows}


def run_jobs(store, *, start: datetime | None = None, end: datetime | None = None,
             chunk: timedelta = DEFAULT_CHUNK, progress=None, workers: int = DEFAULT_WORKERS,
             max_chunk_calls: int | None = DEFAULT_MAX_CHUNK_CALLS) -> JobRun:
    """Recompute the cost tables for the window ``[start, end)`` (UTC; rounded out to whole minutes).

    Args:
        store: a migrated :class:`schema.store.Store`.
        start: window start; default ``end`` - the configured trailing window (2 h).
        end: window end, also the "now" that decides abandonment; default: the current minute.
        chunk: windows longer than this run as consecutive chunks, each a complete explicit run,
            so a 30-day backfill never holds one huge statement (memory per statement is bounded
            by a chunk's calls). Abandonment in a chunk is judged at that chunk's end, as the
            periodic job would have.
        max_chunk_calls: a chunk holding more calls than this (``llm_calls`` rows by end time) is
            cut at whole hours into chunks of about equal calls (:func:`chunk_windows`), so a
            run's memory stays bounded as the calls per day grow; None: never. Windows of at most
            :data:`SPLIT_FROM` are not counted nor cut.
        progress: optional callable(str) told about each chunk when it is done:
            ``"<start> .. <end> (chunk i/n, <rows> call-minute rows, <s> s)"``.
        workers: statements run at once, each on its own client (``Store.clone``): 1 = one after
            the other. See :mod:`schema.jobs.schedule` for what may overlap; the result is the
            same either way.

    Returns:
        A :class:`JobRun` with seconds per job, wall seconds and rows written per table.

    Raises:
        ValueError: empty window. StoreError from the store (the first failing statement's; the
        statements already running finish first).
    """
    end = _minute(end or datetime.now(timezone.utc), up=True)
    if start is None:
        start = end - timedelta(seconds=window_setting(store))
    start = _minute(start)
    if end <= start:
        raise ValueError(f"job window is empty: start {start.isoformat()} is not before end {end.isoformat()}")
    began = time.perf_counter()
    result = JobRun(start, end)
    if max_chunk_calls is not None and max_chunk_calls < 1:
        raise ValueError(f"max_chunk_calls must be at least 1, got {max_chunk_calls}")
    split = max_chunk_calls is not None and end - start > SPLIT_FROM
    windows = chunk_windows(start, end, chunk, _hourly_calls(store, start, end) if split else None,
                            max_chunk_calls)
    result.chunks = len(windows)
    # run_id keys a chunk's scratch rows (resolved_calls_runs, reconciliation_runs: one partition
    # each, dropped when the chunk's jobs have read them); unique per process and chunk
    base_id = time.time_ns()
    chunks = [Chunk(i, ws, we, base_id + i) for i, (ws, we) in enumerate(windows)]
    tasks = plan(chunks)
    lock = threading.Lock()
    # each statement with the job views it reads written out (schema/jobs/written/): planned in about
    # half the time of a statement that reads the views
    texts = _statement_texts({name for task in tasks for name in task.files})

    def execute(client, task: Task) -> None:
        c = task.chunk
        params = {"ws": c.start, "we": c.end, "run_id": c.run_id}
        t0 = time.perf_counter()
        for name in task.files:
            for statement in texts[name]:
                client.command(statement, params, tag=f"jobs.{task.job}")
        with lock:
            result.seconds[task.job] = result.seconds.get(task.job, 0.0) + time.perf_counter() - t0
            if task.kind == "scratch":
                c.scratch_dropped = True
        if task.kind == "tasks" and progress:
            rows = _history_counts(client, c.start, c.end).get("call_costs", 0)
            progress(f"{c.start.isoformat()} .. {c.end.isoformat()} (chunk {c.index + 1}/{len(chunks)}, "
                     f"{rows:,} call-minute rows, {time.perf_counter() - began:.1f} s)")

    try:
        run_plan(store, tasks, execute, workers=workers)
    finally:
        _drop_scratch(store, chunks)
    result.rows = _history_counts(store, start, end)
    result.elapsed_s = time.perf_counter() - began
    return result


def _statement_texts(names: set[str]) -> dict[str, list[str]]:
    """The statements of the ``.sql`` files ``names`` as they run: ``schema/jobs/written/<name>.sql``
    (the job views they read written out, :mod:`schema.jobs.writeout`) where there is one, else the file."""
    texts = {}
    for name in names:
        written = JOBS_DIR / "written" / f"{name}.sql"
        texts[name] = sql_statements(written if written.is_file() else JOBS_DIR / f"{name}.sql")
    return texts


def _drop_scratch(store, chunks) -> None:
    """Drop the scratch partitions a failed run left (a no-op for the dropped ones)."""
    for c in chunks:
        if not c.scratch_dropped:
            try:
                for statement in _statements("drop_scratch"):
                    store.command(statement, {"run_id": c.run_id}, tag="jobs.scratch")
            except Exception:  # noqa: BLE001 - the TTL removes them within a day
                log.warning("could not drop the scratch rows of run %s", c.run_id, exc_info=True)


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
    chDB in an Atomic database and on a server). A stopped chain (:func:`stop`) would hold the
    request until it is started, so it is started for the run and stopped again. Raises StoreError
    if a refresh fails (the message carries the view's exception).

    A scheduled run due within ``SCHEDULE_MARGIN_S`` seconds, or missed while the chain was stopped,
    is let run to its end first, and its live steps are run again before the run by hand. The steps
    of a missed run fire as soon as they are started, each on whatever inputs it finds, and a run
    stopped midway leaves the clock ahead of the live tables: the run's copies would then move stale
    live rows to history and its watermark pass the minutes they lacked.
    """
    stopped = bool((status(store)["status"] == "Disabled").any())
    if stopped:
        start(store)
    else:
        _let_scheduled_run_end(store, SCHEDULE_MARGIN_S)
    try:
        for statement in _statements("refresh"):
            store.command(statement, tag="jobs.refresh")
    finally:
        if stopped:
            stop(store)


# A scheduled run due within this many seconds is let run before a run by hand.
SCHEDULE_MARGIN_S = 10


def _due(store, margin_s: int) -> dict:
    """{step: server time} of the steps whose scheduled run is due within ``margin_s`` seconds or was
    missed (a step that waits for others has no time of its own)."""
    rows = store.query((JOBS_DIR / "schedule_due.sql").read_text(), {"margin_s": margin_s},
                       tag="jobs.schedule").result_rows
    return {view: when for view, when, soon in rows if soon}


def _let_scheduled_run_end(store, margin_s: int = 0, due: dict | None = None, wait_s: float = 300.0) -> None:
    """Wait until each step due (``due``, else due within ``margin_s`` seconds) has started a run at or
    after its time and no step runs or waits; then run the live steps again, on the clock that run left."""
    due = _due(store, margin_s) if due is None else due
    if not due:
        return
    query = (JOBS_DIR / "schedule_done.sql").read_text()
    deadline = time.monotonic() + wait_s
    for view, when in due.items():
        while not store.scalar(query, {"view": view, "due": when}, tag="jobs.schedule"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cost chain's step {view} has not run its run due at {when} after {wait_s:g} s")
            time.sleep(0.1)
    statements = _statements("refresh")
    first = next(i for i, statement in enumerate(statements) if statement.split()[-1] in LIVE_VIEWS)
    for statement in statements[first:]:
        store.command(statement, tag="jobs.schedule")


def stop(store, wait_s: float | None = 300.0) -> None:
    """Stop the periodic chain's schedule in this database (``SYSTEM STOP VIEW``) and wait until no refresh
    runs. Stopping does not cancel a refresh in flight: one that started before the caller's rows arrived
    would replace the live tables with a result without them after the caller's own run (and a
    ``SYSTEM REFRESH VIEW`` of a view already refreshing only waits for that stale run). Raises
    RuntimeError when a refresh still runs after ``wait_s`` seconds; ``wait_s=None`` does not wait (the
    disk guard only has to keep new refreshes from starting)."""
    for statement in _statements("stop"):
        store.command(statement, tag="jobs.stop")
    if wait_s is None:
        return
    deadline = time.monotonic() + wait_s
    while (status(store)["status"] == "Running").any():
        if time.monotonic() > deadline:
            raise RuntimeError(f"a refresh of the cost chain still runs {wait_s:g} s after it was stopped")
        time.sleep(0.2)


def start(store) -> None:
    """Resume the periodic chain's schedule (``SYSTEM START VIEW``). The run it missed while stopped
    is let end and its live steps are run again (see :func:`refresh`)."""
    due = _due(store, 0)
    for statement in _statements("start"):
        store.command(statement, tag="jobs.start")
    _let_scheduled_run_end(store, due=due)


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


def roll_up(store, *, start: datetime, end: datetime, chunk: timedelta = DEFAULT_CHUNK) -> int:
    """Rewrite the hourly rollups (migration 1003) of every hour ``[start, end)`` touches from the
    cost tables' history, as :func:`run_jobs` does for each of its chunks (``run_cost_rollup_calls.sql``, ``run_cost_rollup_replicas.sql``,
    ``run_cost_rollup.sql``, ``run_cost_rollup_marks.sql``, ``run_cost_blocks.sql``),
    in chunks of ``chunk``, oldest first. Hours not wholly below the watermark are marked incomplete
    (readers take them from the raw tables). Returns the number of chunks run.

    Raises:
        ValueError: empty window. StoreError from the store.
    """
    start, end = _minute(start), _minute(end, up=True)
    if end <= start:
        raise ValueError(f"rollup window is empty: start {start.isoformat()} is not before end {end.isoformat()}")
    base_id, n = time.time_ns(), 0
    while start < end:
        stop_at = min(start + chunk, end)
        for statement in (_statements("run_cost_rollup_calls") + _statements("run_cost_rollup_replicas")
                          + _statements("run_cost_rollup") + _statements("run_cost_rollup_marks")
                          + _statements("run_cost_blocks")):
            store.command(statement, {"ws": start, "we": stop_at, "run_id": base_id + n}, tag="jobs.rollup")
        start, n = stop_at, n + 1
    return n


def roll_up_pending(store, *, retention_days: int = 30) -> tuple[datetime, datetime] | None:
    """Roll up the hours below the watermark that have no complete rollup yet, from the first such
    hour (within ``retention_days``) to the watermark's hour: the hours the periodic chain copies
    into history (it does not roll up), and any other hour with history but no complete mark.
    Returns the range rolled up (UTC, naive), or None when there was none; then it writes the
    triangle's blocks (migration 1003) that are due over the retention instead. First, whatever the
    watermark, the live series' blocks (:func:`roll_up_series`) over the retention. ``infercost up``
    calls it every minute (:class:`LateRecompute`)."""
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    oldest = now - timedelta(days=int(retention_days))
    roll_up_series(store, start=oldest, end=now)
    mark = watermark(store)
    if mark is None:
        return None
    end = mark.replace(minute=0, second=0, microsecond=0)
    first = store.scalar((JOBS_DIR / "rollup_pending.sql").read_text(), {"oldest": oldest}, tag="jobs.rollup")
    if first is None or first.year <= 1970 or first.replace(tzinfo=None) >= end:
        # every hour rolled up: the triangle's blocks (migration 1003) that were never written, or
        # whose hours a run rewrote after the block's rollup step
        if oldest < end:
            params = {"ws": oldest, "we": end, "run_id": time.time_ns()}
            for statement in _statements("run_cost_blocks"):
                store.command(statement, params, tag="jobs.rollup")
        return None
    first = first.replace(tzinfo=None)
    roll_up(store, start=first, end=end)
    return first, end


class LateRecompute:
    """Background thread calling :func:`recompute_late` and :func:`roll_up_pending` every
    ``interval_s`` (``infercost up`` and ``infercost demo``, one schedule).

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
                rolled = roll_up_pending(self.store, retention_days=self.retention_days)
                if rolled:
                    log.info("rolled up the hours %s .. %s", *rolled)
            except Exception:  # noqa: BLE001 - keep the loop alive; the minutes stay pending
                log.exception("recomputing late minutes or rolling up hours failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
