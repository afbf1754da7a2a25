"""Benchmark of the weekly review: how long building and rendering a week's report takes.

Run: ``.venv/bin/python benchmarks/bench_review.py [--minutes 60] [--rate 0.3]``

Fills an in-memory store with two simulated weeks (the tests' scenario shape: virtual-time
emulator -> OTLP ingest -> cost jobs; ``--minutes`` of traffic per week at ``--rate`` x the
Mooncake trace's call rate), then times, in the same run:

* baseline: one ``cost.period_summary`` of the week (the cheapest figure the review needs);
* ``build_review`` (every named query the report reads, ~30 calls);
* rendering HTML + Markdown.

Prints the figures and the ratio build / baseline (how many period summaries a review costs).
Other work sharing the CPU makes the figures pessimistic.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def _timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="simulated minutes of traffic per week")
    parser.add_argument("--rate", type=float, default=0.3, help="x the Mooncake trace's call rate")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import review_scenario as sc
    from conftest import new_store

    from app.review import build_review, render_html, render_markdown
    from app.review.weeks import parse_week
    from schema.queries import cost

    sc.SLICE_S = args.minutes * 60
    t0 = time.perf_counter()
    store = new_store()
    sc.sync_fleet(store, sc.parse_fleet(sc.FLEET_YAML))
    w1 = sc._week(store, sc.WEEK1_START, seed=1, rate_scale=args.rate, faults=[])
    w2 = sc._week(store, sc.WEEK2_START, seed=2, rate_scale=args.rate, faults=[])
    setup = time.perf_counter() - t0
    week = parse_week("2026-W48")
    tasks = int(cost.period_summary(store, week.start, week.end).iloc[0]["tasks"])
    calls = w1["summary"].engine_requests + w2["summary"].engine_requests

    base, _ = _timed(lambda: cost.period_summary(store, week.start, week.end), args.repeat)
    build, review = _timed(lambda: build_review(store, week, now=sc.NOW), args.repeat)
    render, _ = _timed(lambda: (render_html(review), render_markdown(review)), args.repeat)
    calls_made = sum(1 for tag in store.stats.by_tag if tag.startswith("query."))

    print(f"scenario: 2 weeks x {args.minutes:.0f} simulated min, {calls:,} engine requests, "
          f"{tasks:,} tasks in the reviewed week (setup {setup:.1f} s)")
    print(f"baseline  period_summary(week)   {base * 1000:8.1f} ms (median of {args.repeat})")
    print(f"build_review(week)               {build * 1000:8.1f} ms  ({calls_made} distinct named queries)")
    print(f"render HTML + Markdown           {render * 1000:8.1f} ms")
    print(f"ratio build_review / baseline    {build / base:8.1f} x")
    print("(2 shared CPU cores, other work running: figures are pessimistic)")


if __name__ == "__main__":
    main()
