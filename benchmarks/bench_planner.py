"""Speed of the capacity planner: a 7-day workload of the demo's size x 20 candidates (goal: <= 10 min
on 2 cores), before and after screening, in one run, with the progress bar and its ETA on stderr.

Run: ``.venv/bin/python benchmarks/bench_planner.py [--days 7] [--candidates 20] [--workers 2] [--skip-before]``

Store: the demo's own history (``infercost.demo.backfill_history``: the demo fleet and its trace as
chat / copilot / research-agent tasks with the diurnal curve, the incident at a load peak, the cost
jobs; ``infercost/demo.py`` FLEET_SIZING), built once under
``benchmarks/results/planner-demo-<days>d/`` and reused (building it takes a few minutes).

Measured in one run, on the same store, the same candidates file and the same workers:

* baseline: one replay of the current fleet over the whole period in this process (one candidate, no
  parallelism): what one full-fidelity candidate costs;
* **before**: the planner (``planner.run.plan``) with screening off (``search.screen_hours: 0``): every
  candidate replayed over the whole period;
* **after**: the planner as configured by default: candidates compared on the busiest day, the
  finalists replayed over the whole period (``planner/screen.py``).

Each planner run includes its backtest (the current fleet under the incidents the store knows, and
fault-free) and the recommendation's replays under those incidents. The planner's own candidates stop
when the local search has no untried neighbour, so the bench adds operator candidates (``EXTRA``: GPU
mixes and batch sizes an operator would try) to reach ``--candidates``. Wall seconds, CPU seconds (this
process + its workers), candidates, the backtest's verdict and the recommendation are printed per run.
Figures depend on what else runs on the machine: the load average is printed beside them.
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


def demo_store(days: float, now: datetime | None = None):
    """The demo's backfilled store, built once: as of the time it was built, or of ``now`` (another
    day of the demo: the diurnal hour the incident falls in moves with it). Returns (store, settings,
    start, end)."""
    from infercost.demo import DemoOptions, backfill_history, demo_fleet_file, utcnow
    from infercost.service import open_store, sync_fleet
    from infercost.settings import Settings

    name = f"planner-demo-{days:g}d" + (f"-{now:%Y%m%dT%H%M}" if now is not None else "")
    directory = RESULTS / name
    marker = directory / "now.txt"
    settings = Settings(data_dir=directory)
    store = open_store(settings, echo=lambda m: None)
    if not marker.exists():
        directory.mkdir(parents=True, exist_ok=True)
        now = now or utcnow()
        print(f"building the demo store ({days:g} days to {now:%Y-%m-%d %H:%M} UTC) in {directory} ...",
              file=sys.stderr)
        sync_fleet(store, demo_fleet_file(directory, now), echo=lambda m: None)
        backfill_history(store, DemoOptions(backfill_days=days), now, echo=lambda m: print(m, file=sys.stderr))
        marker.write_text(now.isoformat())
    now = datetime.fromisoformat(marker.read_text())
    return store, settings, now - timedelta(days=days), now


EXTRA = """
candidates:
  - {name: op-3xa100, pools: [{gpu_type: A100, count: 3, max_num_seqs: 16}]}
  - {name: op-4xa100, pools: [{gpu_type: A100, count: 4, max_num_seqs: 16}]}
  - {name: op-2xh100-1xa100, pools: [{gpu_type: H100, count: 2, max_num_seqs: 16}, {gpu_type: A100, count: 1, max_num_seqs: 16}]}
  - {name: op-1xh100-2xa100-s16, pools: [{gpu_type: H100, count: 1, max_num_seqs: 16}, {gpu_type: A100, count: 2, max_num_seqs: 16}]}
  - {name: op-2xh100-s8, pools: [{gpu_type: H100, count: 2, max_num_seqs: 8}]}
  - {name: op-2xh100-s32, pools: [{gpu_type: H100, count: 2, max_num_seqs: 32}]}
  - {name: op-3xh100-s8, pools: [{gpu_type: H100, count: 3, max_num_seqs: 8}]}
  - {name: op-1xh100-1xa100-s32, pools: [{gpu_type: H100, count: 1, max_num_seqs: 32}, {gpu_type: A100, count: 1, max_num_seqs: 32}]}
  - {name: op-4xh100-s16, pools: [{gpu_type: H100, count: 4, max_num_seqs: 16}]}
  - {name: op-1xh100-3xa100-s16, pools: [{gpu_type: H100, count: 1, max_num_seqs: 16}, {gpu_type: A100, count: 3, max_num_seqs: 16}]}
"""


def planner_run(store, start, end, config, workers: int, label: str) -> dict:
    """One planner run; its wall and CPU seconds and what it concluded."""
    from planner.run import plan

    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    run = plan(store, start, end, config, workers=workers,
               echo=lambda m: print(f"[{label}] {m}", file=sys.stderr, flush=True))
    wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
    bt = run.backtest
    types = ", ".join(f"{t} {v['ttft_error']:.1%}" for t, v in (bt.get("types") or {}).items()
                      if v.get("ttft_error") is not None)
    return {"wall": wall, "cpu": cpu, "candidates": len(run.screened) or len(run.results), "run": run,
            "period": len(run.results), "backtest": (f"{'passed' if bt.get('passed') else 'FAILED'}: CPST "
                                                     f"{bt.get('cpst_error') or 0:.1%}, p95 TTFT {types} "
                                                     f"({bt.get('replays', 1)} replay(s))")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--skip-before", action="store_true", help="time only the planner as configured")
    args = parser.parse_args()

    from planner.candidates import current_candidate
    from planner.config import PlanConfig, fleet_base, parse_plan_config
    from planner.extract import extract_workload
    from planner.pool import Evaluator
    from schema.queries import planner as pq

    store, settings, start, end = demo_store(args.days)
    load0 = os.getloadavg()

    # Baseline: one candidate (the current fleet) replayed over the whole period in this process.
    workload = extract_workload(store, start, end)
    current, _ = current_candidate(pq.replicas(store, start, end), policy=workload.gateway_policy,
                                   gateway_retries=workload.gateway_retries)
    base = fleet_base(store, PlanConfig(), workload.slos)
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    with Evaluator(workload, base, workers=0, progress=False, inprocess_url=settings.store_url) as evaluator:
        evaluator.evaluate_many([current])
    base_wall, base_cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0

    config = parse_plan_config(EXTRA, "bench_planner.EXTRA")
    config.search.max_candidates, config.search.budget_s = args.candidates, 36000.0
    runs = {}
    if not args.skip_before:
        before = config.model_copy(deep=True)
        before.search.screen_hours = 0.0
        runs["before (every candidate over the period)"] = planner_run(store, start, end, before, args.workers, "before")
    runs["after (screened on the busiest day)"] = planner_run(store, start, end, config, args.workers, "after")
    load1 = os.getloadavg()

    print(f"workload: {len(workload.plans):,} tasks, {workload.calls:,} calls over {args.days:g} days "
          f"(the demo's backfill)")
    print(f"baseline, one full-period replay in one process: {base_wall:.1f} s wall, {base_cpu:.1f} s CPU")
    for label, r in runs.items():
        print(f"{label}: {r['candidates']} candidates ({r['period']} over the whole period) on {args.workers} workers: "
              f"{r['wall']:.1f} s wall ({r['wall'] / 60:.1f} min), {r['cpu']:.1f} s CPU; backtest {r['backtest']}; "
              f"recommendation: {r['run'].message}")
    if len(runs) == 2:
        (_, b), (_, a) = runs.items()
        print(f"after / before: {a['wall'] / b['wall']:.2f}x the wall time ({b['wall'] / a['wall']:.2f}x faster)")
    last = list(runs.values())[-1]
    print(f"goal <= 600 s for {args.candidates} candidates: "
          f"{'met' if last['wall'] <= 600 and last['candidates'] >= args.candidates else 'NOT met'}")
    print(f"load average before / after: {load0[0]:.1f} / {load1[0]:.1f} (2 cores; other work on the machine "
          f"slows every figure)")


if __name__ == "__main__":
    main()
