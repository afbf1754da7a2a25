"""Backfill days of fleet telemetry in virtual time, straight into the store (the demo's history).

Drives the emulator's fleet simulator (``serving.emulator.fleet_sim``) with task plans replayed from
a public trace (the Azure 2023 or the Mooncake conversation trace), hour by hour with a diurnal load
curve, and hands its OTLP messages to the receiver's in-process decode path (``collectors.ingest``).
One scripted incident (a replica slowed down) gives the alerts and the weekly review something to find.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

HOUR = 3600.0


def diurnal_factor(at: datetime) -> float:
    """Relative load at ``at`` (UTC): a daily curve peaking at 15:00, 0.3 of peak at night, weekends 0.7x.

    Shape only (no source beyond the common daily cycle of interactive services); both traces
    cover about one hour, so each hour replays the trace at ``base_rate x diurnal_factor``.
    """
    daily = 0.3 + 0.7 * (0.5 + 0.5 * math.cos(2 * math.pi * (at.hour + at.minute / 60 - 15) / 24))
    return daily * (0.7 if at.weekday() >= 5 else 1.0)


@dataclass
class BackfillPlan:
    """What to simulate: ``[start, end)`` UTC, the base call-rate scale of the trace, the fleet, faults."""

    start: datetime
    end: datetime
    rate_scale: float
    fleet: list  # list[serving.emulator.fleet_sim.ReplicaSpec]
    faults: list = field(default_factory=list)  # FaultEvent, at_s/until_s in seconds from start
    seed: int = 0
    mix: dict | None = None
    data_dir: str | None = None
    retry_policy: object | None = None
    metrics_interval_s: float = 60.0  # one scrape a minute: replica up-time is per minute
    # (at_s, until_s, rate_scale): windows whose load is one replay of the trace at rate_scale in place of the
    # diurnal hour's arrivals, drawn with a seed of its own (not the hour's), so the window holds the same
    # calls whatever the wall-clock hour it falls on (the demo's incident).
    fixed_load: list = field(default_factory=list)
    failure_rates: dict | None = None  # task type -> share failing on their own (build_plans' failure_rates)
    reask_rates: dict | None = None  # task type -> share of calls re-asked (build_plans' reask_rates)
    trace: str = "azure"  # build_plans' trace: "azure" | "mooncake"
    model: str | None = None  # the model the calls ask for (None: build_plans' default)
    slo_ms: dict | None = None  # task type -> (ttft_ms, e2e_ms) the tasks carry (build_plans' slo_ms)

    @property
    def hours(self) -> int:
        return int(math.ceil((self.end - self.start).total_seconds() / HOUR))


def _plan_kwargs(plan: BackfillPlan) -> dict:
    """build_plans' model and slo_ms when the plan sets them (else build_plans' defaults)."""
    return {**({"model": plan.model} if plan.model else {}), **({"slo_ms": plan.slo_ms} if plan.slo_ms else {})}


def _fixed_load_plans(plan: BackfillPlan) -> list:
    """The plans of every ``plan.fixed_load`` window, arrivals in seconds from ``plan.start``."""
    from serving.workloads import build_plans

    out = []
    for index, (at_s, until_s, rate) in enumerate(plan.fixed_load):
        if until_s > at_s:
            out += [dataclasses.replace(p, arrival_s=p.arrival_s + at_s, task_id=f"{p.task_id}-w{index}")
                    for p in build_plans(plan.trace, plan.data_dir, plan.mix, rate_scale=rate,
                                         duration_s=until_s - at_s, seed=plan.seed * 7919 + index + 1,
                                         failure_rates=plan.failure_rates, reask_rates=plan.reask_rates,
                                         **_plan_kwargs(plan))]
    return out


def _in_fixed_load(plan: BackfillPlan, at_s: float) -> bool:
    return any(lo <= at_s < hi for lo, hi, _ in plan.fixed_load)


def hourly_plans(plan: BackfillPlan):
    """Yield TaskPlans sorted by arrival (seconds from ``plan.start``), built hour by hour (lazy)."""
    from serving.workloads import build_plans

    fixed = _fixed_load_plans(plan)
    for hour in range(plan.hours):
        at = plan.start + timedelta(hours=hour)
        rate = plan.rate_scale * diurnal_factor(at)
        offset = hour * HOUR
        batch = [dataclasses.replace(p, arrival_s=p.arrival_s + offset, task_id=f"{p.task_id}-{hour:04d}")
                 for p in build_plans(plan.trace, plan.data_dir, plan.mix, rate_scale=rate, duration_s=HOUR,
                                      seed=plan.seed * 100_003 + hour, failure_rates=plan.failure_rates,
                                      reask_rates=plan.reask_rates, **_plan_kwargs(plan))]
        batch = [p for p in batch if not _in_fixed_load(plan, p.arrival_s)]
        batch += [p for p in fixed if offset <= p.arrival_s < offset + HOUR]
        yield from sorted(batch, key=lambda p: p.arrival_s)


def estimate_tasks(plan: BackfillPlan, samples: int = 4) -> int:
    """Tasks the backfill will simulate (sizes the progress bar): the mean of ``samples`` hours of plans
    at the base rate scale times the hours' diurnal factors, less the fixed-load windows' share of their
    hours, plus those windows' own plans (counted: the task count is not proportional to the rate scale,
    and one sampled hour is not enough)."""
    from serving.workloads import build_plans

    per_hour = sum(len(build_plans(plan.trace, plan.data_dir, plan.mix, rate_scale=plan.rate_scale, duration_s=HOUR,
                                   seed=plan.seed + k)) for k in range(samples)) / samples
    total = per_hour * sum(diurnal_factor(plan.start + timedelta(hours=h)) for h in range(plan.hours))
    total -= sum(per_hour * diurnal_factor(plan.start + timedelta(seconds=lo)) * (hi - lo) / HOUR
                 for lo, hi, _ in plan.fixed_load if hi > lo)
    total += len(_fixed_load_plans(plan))
    return max(1, round(total))


def run_backfill(store, plan: BackfillPlan, progress: bool = True):
    """Simulate ``plan`` and insert its spans and metric points into ``store``.

    Returns the simulator's ``SimSummary``. Raises ValueError for a bad fleet or fault; StoreError
    when the store refuses the rows.
    """
    from serving.emulator.fleet_sim import simulate

    from collectors.ingest import BufferedIngest

    batch = BufferedIngest(store)  # one insert per ~100k rows: inserts into chDB have a fixed cost
    start_ns = int(plan.start.replace(tzinfo=plan.start.tzinfo or timezone.utc).timestamp()) * 1_000_000_000
    summary = simulate(hourly_plans(plan), plan.fleet, start_time_ns=start_ns, policy="least_loaded",
                       retry_policy=plan.retry_policy, faults=plan.faults, sink=batch, progress=progress,
                       seed=plan.seed, metrics_interval_s=plan.metrics_interval_s,
                       total=estimate_tasks(plan))
    batch.flush()
    if batch.rejected:
        raise RuntimeError(f"the receiver's decode path rejected {batch.rejected} simulated spans or points: "
                           f"{batch.messages[:1]}")
    return summary
