"""How far the demo's own day lies from its own model: the planner's backtest against the day's chance.

Run: ``.venv/bin/python benchmarks/bench_backtest_noise.py [--days 1] [--hours 24] [--realizations 8] [--now ISO]``

The planner's backtest (``planner/backtest.py``) compares the measured period with the median of a few
replays and asks for 10 % on CPST and on each task type's p95 TTFT. In a saturated hour a p95 is
chaotic: the measured figure is one draw. This bench tells a model error from an unlucky draw by
replaying, on the demo's store (``bench_planner.demo_store``), what the demo itself simulated:

* **generator**: the demo's own task plans (``infercost.demo.backfill_plan``, ``infercost.backfill
  .hourly_plans``), its scripted fault and its clients' retry policy, every realization with arrivals
  moved by less than ``--jitter-s`` (far below what a span's timestamps resolve) and its own seed. Nothing
  here is inferred: the spread is the day's own chance, and the figure a perfect planner would predict;
* **planner**: what the backtest replays: the workload, faults and policies the planner infers from the
  store (``planner.extract``, ``planner.incidents``), one seed per replay.

Per task type it prints the measured p95 TTFT, each side's median, lowest and highest, the median's
error against the measured figure and how many realizations lie within the tolerance of it. The
realizations run on ``--workers`` worker processes (``planner.pool.Evaluator``).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import time
from datetime import datetime, timedelta, timezone

from bench_planner import demo_store  # puts the project root on sys.path


def generator_plans(days: float, now, start, end):
    """The demo's own plans of ``[start, end)`` (arrivals from ``start``), its fault and retry policy."""
    from infercost.backfill import hourly_plans
    from infercost.demo import DemoOptions, backfill_plan
    from serving.emulator.faults import FaultEvent

    plan, _ = backfill_plan(DemoOptions(backfill_days=days), now)
    offset = (start - plan.start.replace(tzinfo=None)).total_seconds()
    span = (end - start).total_seconds()
    plans = [dataclasses.replace(p, arrival_s=p.arrival_s - offset) for p in hourly_plans(plan)
             if 0.0 <= p.arrival_s - offset < span]
    faults = [FaultEvent(max(0.0, f.at_s - offset), f.replica, f.kind, f.value, f.until_s - offset) for f in plan.faults
              if f.until_s - offset > 0.0 and f.at_s - offset < span]
    return plans, faults, plan.retry_policy


def jittered(plans, seed: int, jitter_s: float):
    """``plans`` with each arrival moved later by up to ``jitter_s`` (one realization of the day's chance)."""
    rng = random.Random(seed)
    return sorted((dataclasses.replace(p, arrival_s=p.arrival_s + rng.uniform(0.0, jitter_s)) for p in plans),
                  key=lambda p: (p.arrival_s, p.task_id))


def per_type(figures: dict | None) -> dict:
    """Each task type's p95 TTFT and the CPST of one set of ``planner.backtest.figures``."""
    figures = figures or {}
    return {t: row["ttft_p95_s"] for t, row in figures.get("types", {}).items()} | {"CPST": figures.get("cpst_usd")}


def summarise(measured: dict, runs: list[dict], tolerance: float) -> dict:
    out = {}
    for key, target in measured.items():
        values = [r[key] for r in runs if r.get(key) is not None]
        if not values or not target:
            continue
        median = statistics.median_low(values)
        within = sum(abs(v - target) <= tolerance * target for v in values)
        out[key] = (median, min(values), max(values), median / target - 1.0, within, len(values))
    return out


def main() -> None:
    from planner.candidates import current_candidate
    from planner.config import PlanConfig, fleet_base
    from planner.extract import extract_workload
    from planner.incidents import extract_incidents
    from planner.pool import Evaluator
    from planner.run import measured_figures
    from schema.queries import planner as pq

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=1.0, help="the demo store's backfill days (1 or 7)")
    parser.add_argument("--hours", type=float, default=24.0, help="the period: the store's last HOURS")
    parser.add_argument("--realizations", type=int, default=8, help="replays on each side")
    parser.add_argument("--jitter-s", type=float, default=0.001, help="largest move of a generator arrival")
    parser.add_argument("--now", type=datetime.fromisoformat, default=None,
                        help="another day of the demo: the store backfilled up to NOW (ISO, UTC; built once)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.now is not None and args.now.tzinfo is None:
        args.now = args.now.replace(tzinfo=timezone.utc)

    store, _, _, now = demo_store(args.days, args.now)
    end = now.replace(tzinfo=None)
    start = end - timedelta(hours=args.hours)
    first = pq.telemetry_start(store, start, end)
    start = max(start, first) if first is not None else start
    config = PlanConfig()
    workload = extract_workload(store, start, end, sharing_model=config.prefix_sharing)
    current, _ = current_candidate(pq.replicas(store, start, end), config.profiles(), policy=workload.gateway_policy,
                                   gateway_retries=workload.gateway_retries)
    base = fleet_base(store, config, workload.slos)
    incidents = extract_incidents(store, start, end, list(current.replica_ids or ()))
    measured = per_type(measured_figures(store, start, end, incidents.windows)["compare"])
    plans, faults, policy = generator_plans(args.days, now, start, end)
    n = args.realizations
    print(f"period {start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} UTC; generator: {len(plans)} tasks, fault {faults}; "
          f"planner: {len(workload.plans)} tasks, faults {incidents.faults}", flush=True)

    began = time.perf_counter()
    with Evaluator(dataclasses.replace(workload, client=policy), base, workers=args.workers, progress=False,
                   slo_target=config.slo_target) as evaluator:
        generator = []
        for seed in range(n):
            result = evaluator.evaluate_many([current], plans=jittered(plans, seed, args.jitter_s), faults=[faults],
                                             compare=incidents.windows, seeds=[seed])[0]
            generator.append(per_type(result.compare))
    with Evaluator(workload, base, workers=args.workers, progress=False, slo_target=config.slo_target) as evaluator:
        planner = [per_type(r.compare) for r in evaluator.evaluate_many([current] * n, faults=[incidents.faults or None] * n,
                                                                compare=incidents.windows, seeds=list(range(n)))]
    print(f"{2 * n} replays in {time.perf_counter() - began:.0f} s\n")
    print(f"{'figure':<22}{'measured':>10}  {'side':<10}{'median':>10}{'lowest':>10}{'highest':>10}{'error':>9}"
          f"  within {config.tolerance:.0%}")
    for side, runs in (("generator", generator), ("planner", planner)):
        for key, (median, low, high, error, within, count) in summarise(measured, runs, config.tolerance).items():
            print(f"{key:<22}{measured[key]:>10.4g}  {side:<10}{median:>10.4g}{low:>10.4g}{high:>10.4g}{error:>+9.1%}"
                  f"  {within} of {count}")


if __name__ == "__main__":
    main()
