"""Dashboard query time per panel on a large embedded store.

    .venv/bin/python benchmarks/bench_dashboard.py [--calls 10000000] [--tasks 1000000] [--days 7] [--reps 15]

Builds (once, cached under benchmarks/results/dashboard_store_<calls>/) a chDB store with
``--calls`` LLM-call rows and ``--tasks`` tasks over ``--days`` days, generated directly in SQL
(benchmarks/sql/bench_dashboard_*.sql: deterministic, no randomness), plus one task root span per
task and vLLM gauges of 16 replicas every 15 s. With ``--cost-hours`` > 0 a 16-replica fleet is
synced and the cost jobs (``schema.jobs.run_jobs``) run once over the last ``--cost-hours`` hours,
so the cost pages read real cost tables (the jobs' own speed is bench_cost's).

Then times every named query a page issues (``--reps`` runs after one warm-up, p50 / p95 in ms),
for the default view (the last hour) and the wide views (24 h, 7 d), and the full page (sum of its
panels: chDB serialises queries). The baseline, measured in the same run, is the naive fleet tile:
quantiles over every engine call ever stored (lifetime full scan); ratio = panel p95 / baseline p95.

Goal: p95 <= 150 ms per panel query and <= 1 s per full page on 2 cores. Other work may
share those cores while this runs: figures are pessimistic.

``--scripts all`` (or a list of pages) times instead what each page really issues: its whole script
in-process (streamlit.testing), Streamlit's caches cleared before each run, every store call's SQL
time by tag (SQL per page = the sum over its calls). ``--data-dir <demo data dir> --end
<its last minute>`` runs that on a stopped demo's store instead of the generated one:

    .venv/bin/python benchmarks/bench_dashboard.py --calls 10000000 --tasks 1000000 --cost-hours 168 \
        --ranges 1h,7d --reps 5 --scripts all
    .venv/bin/python benchmarks/bench_dashboard.py --data-dir .infercost --end 2026-12-01T16:15:00Z \
        --ranges 1h,7d --reps 5 --scripts all
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.charts import bucket_for, series_bucket  # noqa: E402
from app.costviews import auto_window  # noqa: E402
from schema.migrate import migrate  # noqa: E402
from schema.queries import ops  # noqa: E402
from schema.store import connect  # noqa: E402

SQL_DIR = Path(__file__).parent / "sql"
T0 = datetime(2026, 11, 2, 0, 0, 0)  # naive UTC, bound as DateTime64(3)
PANEL_GOAL_MS = 150.0
PAGE_GOAL_MS = 1000.0


def _sql(name: str) -> str:
    return (SQL_DIR / f"{name}.sql").read_text()


def build(store, calls: int, tasks: int, days: int) -> None:
    span_s = days * 86400
    t = time.perf_counter()
    store.command(_sql("bench_dashboard_llm_calls"), {"n": calls, "t0": T0, "span_s": span_s}, tag="bench.calls",
                  settings={"max_insert_threads": 2})
    store.command(_sql("bench_dashboard_task_roots"), {"tasks": tasks, "t0": T0, "span_s": span_s},
                  tag="bench.tasks")
    store.command(_sql("bench_dashboard_gauges"), {"t0": T0, "span_s": span_s}, tag="bench.gauges")
    print(f"generated {calls:,} calls, {tasks:,} tasks over {days} d in {time.perf_counter() - t:.1f} s", flush=True)


def run_cost(store, days: int, cost_hours: float) -> None:
    """Sync a 16-replica fleet and run the cost jobs over the last ``cost_hours`` hours of the data."""
    from schema.fleet import parse_fleet, sync_fleet
    from schema.jobs import run_jobs, stop

    stop(store)
    replicas = "\n".join(f"  r{i}: {{gpu_type: {'H100' if i < 8 else 'A100'}, gpu_count: 1}}" for i in range(16))
    sync_fleet(store, parse_fleet(
        "gpu_types:\n  H100:\n    prices:\n      - {usd_per_gpu_hour: 3.60, valid_from: 2025-01-01}\n"
        "  A100:\n    prices:\n      - {usd_per_gpu_hour: 1.80, valid_from: 2025-01-01}\n"
        f"replicas:\n{replicas}\n"))
    end = T0 + timedelta(days=days)
    t = time.perf_counter()
    run_jobs(store, start=end - timedelta(hours=cost_hours), end=end)
    print(f"cost jobs over the last {cost_hours:g} h in {time.perf_counter() - t:.1f} s", flush=True)


def roll_up_pending(store) -> None:
    """Roll up the cost tables' hours a store built before the hourly rollups (migration 1003) has."""
    from schema.jobs import roll_up_pending as pending

    t = time.perf_counter()
    rolled = pending(store, retention_days=3650)
    if rolled:
        print(f"rolled up the hours {rolled[0]} .. {rolled[1]} in {time.perf_counter() - t:.1f} s", flush=True)


def timed(fn, reps: int) -> list[float]:
    fn()  # warm-up: first run loads marks and caches
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def panels(store, end: datetime, range_s: int):
    """(page, panel, callable) for every named query the pages issue over a range of ``range_s`` ending ``end``."""
    start = end - timedelta(seconds=range_s)
    w = end - timedelta(minutes=5)
    bucket = series_bucket(range_s)
    out = [
        ("live", "ingest_status", lambda: ops.ingest_status(store)),
        ("live", "filter_values", lambda: ops.filter_values(store, start, end)),
        ("live", "fleet_tiles (5 min + previous)", lambda: ops.fleet_tiles(store, w, end)),
        ("live", "replica_health (5 min)", lambda: ops.replica_health(store, w, end)),
        ("live", f"latency_series ({bucket} s buckets)", lambda: ops.latency_series(store, start, end, bucket)),
        ("live", "gauge_series", lambda: ops.gauge_series(store, start, end, bucket)),
        ("live", "finish_reasons (5 min)", lambda: ops.finish_reasons(store, w, end)),
        ("live", "fleet_tiles tenant filter", lambda: ops.fleet_tiles(store, w, end, {"tenant": "tenant3"})),
    ]
    from schema.queries import cost

    bucket_c = max(60, bucket_for(range_s, points=60))  # the cost page's trend bucket
    tri_window = auto_window(range_s)
    if hasattr(cost, "period_summaries"):  # the page's headline and its three breakdowns: one query
        out.append(("cost", "period_summaries ('' + 3 breakdowns)", lambda: cost.period_summaries(
            store, start, end, ("", "task_type", "tenant", "model"))))
    else:
        out += [("cost", "period_summary", lambda: cost.period_summary(store, start, end))] + [
            ("cost", f"period_summary by {by}", lambda by=by: cost.period_summary(store, start, end, by))
            for by in ("task_type", "tenant", "model")]
    out += [
        ("cost", "period_summary (previous)", lambda: cost.period_summary(store, start - (end - start), start)),
        ("cost", "waste_breakdown", lambda: cost.waste_breakdown(store, start, end)),
        ("cost", "cpst_trend", lambda: cost.cpst_trend(store, start, end, bucket_c)),
        ("cost", "data_quality", lambda: cost.data_quality(store, start, end)),
        ("triangle", f"replica_windows ({tri_window} s, auto)",
         lambda: cost.replica_windows(store, start, end, tri_window)),
        ("tasks", "tasks_table", lambda: cost.tasks_table(store, start, end, None, 1000)),
        ("tasks", "tasks_table search", lambda: cost.tasks_table(store, start, end, "tenant3", 1000)),
    ]
    return out


# The pages as bench_pages.py opens them: (name, page file, extra URL parameters).
SCRIPT_PAGES = {"live": ("views/live_ops.py", {}), "live_engine": ("views/live_ops.py", {"view": "engine"}),
                "cost": ("views/cost.py", {}), "triangle": ("views/triangle.py", {}),
                "tasks": ("views/tasks.py", {}), "alerts": ("views/alerts.py", {}),
                "review": ("views/weekly_review.py", {})}


def page_scripts(store, end: datetime, ranges: list[str], pages: list[str], reps: int) -> None:
    """Every page's whole script in-process (streamlit.testing AppTest, Streamlit's caches cleared before
    each run: every query runs; each run's range ends a minute before the last one's), its wall time and
    the SQL time of every store call it made, by tag.

    What a page issues is what it issues: no hand-kept list of panels. Prints per page the p50 script
    time, the p50 of the summed SQL time (the goal's "sum of panel p50s" measured on the page itself),
    the number of store calls, and the tags that took the most SQL time (p50 over the runs). The SQL of
    the queries a page runs at once (``app.ui.prefetch``, on clones of the store) is summed too, so the
    script time, not the SQL sum, shows what running them at once saves.

    Queries run at once share the 2 cores, so each one's time in that sum includes waiting for the
    other: the sum overstates the page's SQL. "alone" is the goal's own measure ("sum of panel
    p50s"): every read statement of the page's last run, run again by itself ``reps`` times on the one
    client after the page's runs (the same SQL and parameters), the p50 of each, summed."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from app import store_provider

    from schema.store import Store

    calls: list[tuple[str, float]] = []
    statements: list[tuple[str, str, dict | None]] = []  # (tag, sql, parameters) of the reads of a run
    original = Store._call

    def recording(self, tag, fn, *args, **kwargs):
        if getattr(fn, "__name__", "") in ("query", "query_df") and args and isinstance(args[0], str):
            statements.append((tag, args[0], kwargs.get("parameters")))
        t = time.perf_counter()
        try:
            return original(self, tag, fn, *args, **kwargs)
        finally:
            calls.append((tag, (time.perf_counter() - t) * 1000))

    def alone(reps: int) -> float:
        """Sum over the last run's reads of the p50 of each run by itself (ms)."""
        total = 0.0
        for tag, sql, parameters in list(statements):
            times = []
            for _ in range(reps):
                t = time.perf_counter()
                original(store, tag, store.client.query, sql, parameters=parameters)
                times.append((time.perf_counter() - t) * 1000)
            total += statistics.median(times)
        return total

    # every client's calls: a page's prefetch (app.ui.prefetch) runs its queries on clones of the store
    Store._call = recording
    store_provider.set_store(store)
    main_py = str(ROOT / "app" / "main.py")
    components = None  # AppTest scans the installed packages for components on every new app: once here
    sizes = {"1h": "1h", "24h": "24h", "7d": "7d"}
    try:
        print(f"{'page':12} {'range':5} {'script p50':>11} {'SQL p50':>8} {'alone':>7} {'calls':>5}  "
              f"top SQL tags (p50 ms)")
        for label in ranges:
            for name in pages:
                path, extra = SCRIPT_PAGES[name]
                walls, sqls, counts, by_tag = [], [], [], {}
                for i in range(reps + 1):  # the first run imports modules and warms marks: not counted
                    st.cache_data.clear()
                    calls.clear()
                    statements.clear()
                    # each run's range ends a minute earlier (as bench_pages.py --cold): a range ending
                    # on midnight or on the hour is the cheap case, not the usual one
                    at_end = end - timedelta(minutes=i + 1)
                    params = {"range": sizes[label], "end": at_end.strftime("%Y-%m-%dT%H:%M:%SZ"), **extra}
                    at = AppTest.from_file(main_py, default_timeout=600)
                    at._bidi_component_manager = components  # discovered once, as the server does
                    at.query_params.update(params)
                    at.switch_page(path)
                    t = time.perf_counter()
                    at.run()
                    wall = (time.perf_counter() - t) * 1000
                    if at.exception:
                        print(f"{name:12} {label:5} failed: {str(at.exception[0].value)[:100]}")
                        break
                    components = at._bidi_component_manager
                    if i == 0:
                        continue
                    walls.append(wall)
                    sqls.append(sum(ms for _, ms in calls))
                    counts.append(len(calls))
                    run_tags: dict[str, float] = {}
                    for tag, ms in calls:
                        run_tags[tag] = run_tags.get(tag, 0.0) + ms
                    for tag, ms in run_tags.items():
                        by_tag.setdefault(tag, []).append(ms)
                if not walls:
                    continue
                top = sorted(((statistics.median(v), t) for t, v in by_tag.items()), reverse=True)[:6]
                print(f"{name:12} {label:5} {statistics.median(walls):9.0f} ms {statistics.median(sqls):6.0f} ms "
                      f"{alone(reps):5.0f} ms {statistics.median(counts):5.0f}  " + ", ".join(f"{t.removeprefix('query.')} {ms:.0f}"
                                                                      for ms, t in top), flush=True)
    finally:
        Store._call = original
        store_provider.clear()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=10_000_000)
    ap.add_argument("--tasks", type=int, default=1_000_000)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--cost-hours", type=float, default=0.0)
    ap.add_argument("--ranges", default="1h,24h,7d")
    ap.add_argument("--scripts", metavar="PAGES", help="instead of the panel list: run these pages' whole scripts "
                    "in-process (AppTest), e.g. all or live,cost,triangle (see page_scripts)")
    ap.add_argument("--data-dir", help="with --scripts: a (stopped) demo's data dir instead of the generated store")
    ap.add_argument("--end", help="with --data-dir: end of the ranges, ISO UTC (the demo's last minute)")
    args = ap.parse_args()

    if args.data_dir:
        if not args.scripts or not args.end:
            ap.error("--data-dir needs --scripts and --end")
        store = connect(f"chdb://{Path(args.data_dir).resolve() / 'clickhouse'}", "infercost")
        end = datetime.fromisoformat(args.end.replace("Z", "+00:00")).replace(tzinfo=None)
        print(f"load average {os.getloadavg()[0]:.1f}")
        names = list(SCRIPT_PAGES) if args.scripts == "all" else args.scripts.split(",")
        page_scripts(store, end, args.ranges.split(","), names, args.reps)
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        store.close()
        return
    directory = ROOT / "benchmarks" / "results" / f"dashboard_store_{args.calls}"
    marker = directory / ".built"
    store = connect(f"chdb://{directory}", "bench")
    migrate(store, retention_days=3650)
    if not marker.exists():
        build(store, args.calls, args.tasks, args.days)
        marker.write_text("ok\n")
    cost_marker = directory / f".cost_{args.cost_hours:g}h"
    if args.cost_hours > 0 and not cost_marker.exists():
        run_cost(store, args.days, args.cost_hours)
        cost_marker.write_text("ok\n")
    if args.cost_hours > 0:
        roll_up_pending(store)
    end = T0 + timedelta(days=args.days)
    if args.scripts:
        base = timed(lambda: store.query_df(_sql("bench_dashboard_baseline"), tag="bench.baseline"), args.reps)
        print(f"\nbaseline (lifetime full-scan fleet tile): p50 {statistics.median(base):.0f} ms; "
              f"load average {os.getloadavg()[0]:.1f}\n")
        names = list(SCRIPT_PAGES) if args.scripts == "all" else args.scripts.split(",")
        page_scripts(store, end, args.ranges.split(","), names, args.reps)
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        store.close()
        return
    base = timed(lambda: store.query_df(_sql("bench_dashboard_baseline"), tag="bench.baseline"), args.reps)
    base_p95 = p95(base)
    print(f"\nbaseline (lifetime full-scan fleet tile over {args.calls:,} calls): "
          f"p50 {statistics.median(base):.0f} ms, p95 {base_p95:.0f} ms\n")
    ranges = {"1h": 3600, "24h": 86400, "7d": 7 * 86400}
    for label in args.ranges.split(","):
        range_s = ranges[label]
        print(f"--- range {label} ending at the data's end ---")
        print(f"{'page':9} {'panel':40} {'p50 ms':>8} {'p95 ms':>8} {'x base':>7}  goal")
        pages: dict[str, float] = {}
        medians: dict[str, float] = {}
        for page, name, fn in panels(store, end, range_s):
            try:
                values = timed(fn, args.reps)
            except Exception as exc:  # a missing table in this build is reported, not fatal
                print(f"{page:9} {name:40} failed: {str(exc)[:80]}")
                continue
            p50v, p95v = statistics.median(values), p95(values)
            pages[page] = pages.get(page, 0.0) + p95v
            medians[page] = medians.get(page, 0.0) + p50v
            ok = "ok" if p95v <= PANEL_GOAL_MS else "SLOW"
            print(f"{page:9} {name:40} {p50v:8.1f} {p95v:8.1f} {p95v / base_p95:7.3f}  {ok}")
        for page, total in pages.items():
            ok = "ok" if total <= PAGE_GOAL_MS else "SLOW"
            print(f"page {page:9} sum of panel p50s: {medians[page]:7.1f} ms, of p95s: {total:7.1f} ms  {ok}")
        print()
    store.close()


if __name__ == "__main__":
    main()
