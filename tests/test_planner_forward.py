"""The planner's forward test: on a (small) demo store, plan; then apply the recommendation in a
second virtual-time run of the demo's workload generator with a different seed. The realised saving
must be at least 80 % of the predicted one, and every SLO must hold.

The store: 6 weekday hours of the demo's backfill generator (infercost/backfill.py: the Azure 2023
conversation trace as chat / copilot / research-agent tasks, the diurnal curve, client retries with a
10 s timeout) on a fleet of its own (``FLEET``: 2x H100 + 2x A100 serving Llama-3.1-8B at --max-num-seqs
16, mostly idle at this load, so the planner has a saving to find; the demo's own fleet is sized to be
busy). The second run replays the same hours with seed 1: other task types, groupings, tenants and task
arrivals, the simulator's other draws.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from conftest import drop_store, new_store
from infercost.backfill import BackfillPlan, hourly_plans
from infercost.demo import MIX, _retry_policy, demo_fleet_file, demo_profile
from planner.config import PlanConfig, SearchSpec
from planner.run import plan
from planner_helpers import ns
from schema import jobs
from schema.fleet import load_fleet, sync_fleet
from schema.queries import cost
from schema.queries import planner as pq
from serving.emulator.fleet_sim import ReplicaSpec, simulate
from serving.emulator.profiles import get_profile

pytestmark = pytest.mark.slow

START = datetime(2026, 11, 3, 9, 0)  # a Tuesday morning: the diurnal curve rises from 0.65 to 1.0
HOURS = 6
END = START + timedelta(hours=HOURS)
FLEET = {"replica-0": ("h100-llama-3.1-8b", "H100"), "replica-1": ("h100-llama-3.1-8b", "H100"),
         "replica-2": ("a100-llama-3.1-8b", "A100"), "replica-3": ("a100-llama-3.1-8b", "A100")}
SEQS = 16


def _backfill(seed: int) -> BackfillPlan:
    fleet = [ReplicaSpec(rid, demo_profile(profile, SEQS), gpu) for rid, (profile, gpu) in FLEET.items()]
    return BackfillPlan(start=START, end=END, rate_scale=0.05, fleet=fleet, mix=MIX, seed=seed,
                        retry_policy=_retry_policy(10.0))


def _run(store, fleet_file, candidate_replicas, sim_kwargs, seed: int):
    """One virtual-time run of the demo generator into ``store``; returns (CPST, attainment per type)."""
    from collectors.ingest import BufferedIngest

    sync_fleet(store, load_fleet(fleet_file).model_validate({
        **load_fleet(fleet_file).model_dump(),
        "replicas": {r.id: {"gpu_type": r.gpu_type, "gpu_count": r.gpu_count or get_profile(r.profile).gpu_count}
                     for r in candidate_replicas}}))
    backfill = _backfill(seed)
    ingest = BufferedIngest(store)
    simulate(hourly_plans(backfill), candidate_replicas, start_time_ns=ns(START), retry_policy=backfill.retry_policy,
             sink=ingest, seed=seed, metrics_interval_s=60.0, **sim_kwargs)
    ingest.flush()
    jobs.run_jobs(store, start=START, end=END + timedelta(minutes=15))
    summary = cost.period_summary(store, START, END).iloc[0]
    lat = pq.task_latency(store, START, END)
    return float(summary["cpst_usd"]), dict(zip(lat["task_type"], lat["slo_attainment"]))


def test_the_recommendation_realises_its_saving_on_another_week(tmp_path):
    fleet_file = demo_fleet_file(tmp_path, START + timedelta(days=10))  # the H100 price cut is in force
    measured = new_store()
    try:
        fleet = [ReplicaSpec(rid, demo_profile(p, SEQS), gpu) for rid, (p, gpu) in FLEET.items()]
        _run(measured, fleet_file, fleet, {"policy": "least_loaded"}, seed=0)
        config = PlanConfig(search=SearchSpec(budget_s=420, max_candidates=8, max_replicas=4, max_num_seqs=[16, 64]))
        run = plan(measured, START, END, config, workers=2, progress=False, echo=lambda m: None)
    finally:
        drop_store(measured)
    assert run.backtest["passed"], run.backtest
    assert run.status == "recommended", run.message
    assert run.saving_ratio > 0.2
    recommended = next(r for r in run.results if r.name == run.recommended)
    current = next(r for r in run.results if r.name == run.current)
    from planner.candidates import Candidate, Pool
    from serving.emulator.sim_control import AutoscaleRule

    def candidate(result):
        spec = result.spec
        return Candidate(spec["name"], tuple(Pool(**p) for p in spec["pools"]), spec["policy"],
                         spec["gateway_retries"], tuple(sorted(spec["admission"].items())) if spec["admission"] else None,
                         AutoscaleRule(**spec["autoscale"]) if spec["autoscale"] else None,
                         replica_ids=tuple(spec["replica_ids"]) if spec["replica_ids"] else None)

    realised = {}
    for name, result in (("current", current), ("recommended", recommended)):
        store = new_store()
        try:
            cand = candidate(result)
            realised[name] = _run(store, fleet_file, cand.replicas(), cand.sim_kwargs(), seed=1)
        finally:
            drop_store(store)
    realised_ratio = 1 - realised["recommended"][0] / realised["current"][0]
    print(f"\nforward test: recommended {recommended.spec['label']}; predicted saving {run.saving_ratio:.1%}, "
          f"realised {realised_ratio:.1%} (CPST ${realised['recommended'][0]:.4f} vs ${realised['current'][0]:.4f}); "
          f"SLO attainment {realised['recommended'][1]}")
    assert realised_ratio >= 0.8 * run.saving_ratio, (realised_ratio, run.saving_ratio, recommended.spec["label"])
    attainment = realised["recommended"][1]
    assert all(attainment[t] >= config.slo_target for t in ("chat", "copilot", "research_agent")), attainment
