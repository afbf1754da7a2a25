"""Speed of the capacity planner: a 7-day workload of the demo's size x 20 candidates (goal: <= 10 min
on 2 cores), with the progress bar and its ETA on stderr.

Run: ``.venv/bin/python benchmarks/bench_planner.py [--days 7] [--candidates 20] [--workers 2]``

Store: the demo's own history (``infercost.demo.backfill_history``: the demo fleet and its trace as
chat / copilot / research-agent tasks with the diurnal curve, the incident at a load peak, the cost
jobs; ``infercost/demo.py`` FLEET_SIZING), built once under
``benchmarks/results/planner-demo-<days>d/`` and reused (building it takes a few minutes).

Measured in one run:

* the planner (``planner.run.plan``): extraction, backtest, Mélange profiling and the
  search until ``--candidates`` candidates were replayed (each: virtual-time simulation, ingest,
  cost jobs over the whole period), on ``--workers`` processes: wall seconds and CPU seconds
  (this process + its workers);
* the baseline: one replay of the current fleet in this process (one candidate, no parallelism).
  ``N x baseline / planner`` is the speed-up of the worker pool over replaying the candidates one
  by one.

The planner's run includes its backtest (``backtest_seeds`` replays of the current fleet under the
incidents the store knows, one fault-free) and the recommendation's replays under those incidents; the
benchmark times the search whatever the backtest says (tolerance set to 0.95) and prints the
backtest's verdict at the default 10 % for the baseline replay. Figures depend on what else runs on
the machine: the load average is printed beside them.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"


def cpu_seconds() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def demo_store(days: float):
    """The demo's backfilled store (built once); returns (store, start, end)."""
    from infercost.demo import DemoOptions, backfill_history, demo_fleet_file, utcnow
    from infercost.service import open_store, sync_fleet
    from infercost.settings import Settings

    directory = RESULTS / f"planner-demo-{days:g}d"
    marker = directory / "now.txt"
    settings = Settings(data_dir=directory)
    store = open_store(settings, echo=lambda m: None)
    if not marker.exists():
        directory.mkdir(parents=True, exist_ok=True)
        now = utcnow()
        print(f"building the demo store ({days:g} days) in {directory} ...", file=sys.stderr)
        sync_fleet(store, demo_fleet_file(directory, now), echo=lambda m: None)
        backfill_history(store, DemoOptions(backfill_days=days), now, echo=lambda m: print(m, file=sys.stderr))
        marker.write_text(now.isoformat())
    now = datetime.fromisoformat(marker.read_text())
    return store, settings, now - timedelta(days=days), now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    from planner import report
    from planner.candidates import current_candidate
    from planner.config import PlanConfig, SearchSpec, fleet_base
    from planner.extract import extract_workload
    from planner.pool import Evaluator
    from planner.run import measured_figures, plan
    from schema.queries import planner as pq

    store, settings, start, end = demo_store(args.days)
    load0 = os.getloadavg()

    # Baseline: one candidate (the current fleet) replayed in this process.
    workload = extract_workload(store, start, end)
    current, _ = current_candidate(pq.replicas(store, start, end), policy=workload.gateway_policy,
                                   gateway_retries=workload.gateway_retries)
    base = fleet_base(store, PlanConfig(), workload.slos)
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    with Evaluator(workload, base, workers=0, progress=False, inprocess_url=settings.store_url) as evaluator:
        one = evaluator.evaluate_many([current])[0]
    base_wall, base_cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
    verdict = report.backtest(measured_figures(store, start, end), one, 0.10)

    # The planner: N candidates on the worker pool.
    config = PlanConfig(tolerance=0.95, search=SearchSpec(budget_s=36000, max_candidates=args.candidates))
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    run = plan(store, start, end, config, workers=args.workers, echo=lambda m: print(m, file=sys.stderr))
    wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
    load1 = os.getloadavg()

    n = len(run.results)
    print(f"workload: {run.workload['tasks']:,} tasks, {run.workload['calls']:,} calls over {args.days:g} days "
          f"(the demo's backfill)")
    print(f"baseline, one candidate in one process: {base_wall:.1f} s wall, {base_cpu:.1f} s CPU "
          f"(backtest at 10 %: {'passed' if verdict['passed'] else 'failed: ' + '; '.join(verdict['problems'])})")
    print(f"planner, {n} candidates on {args.workers} workers: {wall:.1f} s wall ({wall / 60:.1f} min), "
          f"{cpu:.1f} s CPU; {wall / max(1, n):.1f} s wall per candidate")
    print(f"speed-up over one-by-one replays: {n * base_wall / wall:.2f}x (N x baseline wall / planner wall)")
    print(f"goal <= 600 s for 20 candidates: {'met' if wall <= 600 and n >= 20 else 'NOT met'}")
    print(f"load average before / after: {load0[0]:.1f} / {load1[0]:.1f} (2 cores; other work on the machine "
          f"slows every figure)")
    print(f"recommendation: {run.message}")


if __name__ == "__main__":
    main()
