"""Cascade-alert scenarios in virtual time, and the cascade rule's precision and recall.

Run: ``.venv/bin/python benchmarks/bench_alerts.py`` (all generated scenarios; ``--quick`` for 4).

Each scenario builds chat-like task plans (``serving.plans`` dataclasses; Poisson arrivals, 1-3
sequential steps, prompts 500-2000 tokens, outputs 100-300 tokens), simulates them on a 4-replica
fleet with the emulator's virtual-time simulator (``serving.emulator.fleet_sim.simulate``), puts
the OTLP output into a fresh store (``collectors.ingest``), then replays the alert evaluator minute
by minute (``Evaluator.step(now=t)``) and checks whether ONE cascade alert fired, when, and naming
which replica. Replicas run with ``--max-num-seqs 4`` (profile ``alerts-small-8b``: the H100 /
Llama-3.1-8B calibration with a smaller running batch) so the fleet saturates at modest simulated
rates and a scenario simulates in seconds; the alert config's ``saturation.max_running`` matches it.

Position: this is a harness over serving + collectors + schema + alerts (like infercost/), not
part of alerts/, which imports schema only. The tests (tests/test_alerts_scenarios.py) run a few
of these scenarios; this script runs them all and prints precision/recall and timings.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from alerts.config import AlertConfig  # noqa: E402
from alerts.evaluator import Evaluator  # noqa: E402
from alerts.model import RULE_CASCADE, RULE_DEGRADATION, RULE_QUEUE, RULE_RETRY, RULE_SATURATION  # noqa: E402
from serving.plans import CallPlan, RetryPolicy, StepPlan, TaskPlan  # noqa: E402

SMALL_PROFILE = "alerts-small-8b"
MAX_NUM_SEQS = 4
START = datetime(2026, 11, 2, 12, 0, tzinfo=timezone.utc)


def register_profile() -> None:
    """Add the ``alerts-small-8b`` engine profile (H100 / Llama-3.1-8B, ``--max-num-seqs 4``)."""
    from serving.emulator import profiles

    if SMALL_PROFILE not in profiles.PROFILES:
        profiles.PROFILES[SMALL_PROFILE] = profiles.PROFILES["h100-llama-3.1-8b"].with_overrides(
            name=SMALL_PROFILE, max_num_seqs=MAX_NUM_SEQS)


@dataclass(frozen=True)
class Scenario:
    """One run. ``rate`` tasks/s (x ``spike`` between ``spike_at_s`` and ``spike_until_s``);
    ``slow_replica`` slowed ``slowdown``x from ``fault_at_s`` to ``fault_until_s``; ``cascade``:
    whether a cascade is the truth (a replica was degraded enough to start one)."""

    name: str
    seed: int = 1
    rate: float = 3.0
    duration_s: float = 1800.0
    replicas: int = 4
    slow_replica: str | None = None
    slowdown: float = 3.0
    fault_at_s: float = 600.0
    fault_until_s: float | None = 1200.0
    spike: float = 1.0
    spike_at_s: float = 600.0
    spike_until_s: float = 1200.0
    timeout_s: float = 15.0
    max_attempts: int = 3
    policy: str = "round_robin"
    cascade: bool = False


def make_plans(s: Scenario) -> list[TaskPlan]:
    """Chat-like tasks with Poisson arrivals (rate x spike factor inside the spike window)."""
    rng = random.Random(s.seed)
    plans, t, i = [], 0.0, 0
    while True:
        in_spike = s.spike_at_s <= t < s.spike_until_s
        t += rng.expovariate(s.rate * (s.spike if in_spike else 1.0))
        if t >= s.duration_s:
            return plans
        steps = tuple(StepPlan(f"step{k}", (CallPlan(rng.randint(500, 2000), rng.randint(100, 300)),))
                      for k in range(rng.randint(1, 3)))
        plans.append(TaskPlan(f"{s.name}-{i}", "chat", rng.choice(("acme", "globex")), t, steps,
                              slo_ttft_ms=2000.0, slo_e2e_ms=60000.0))
        i += 1


def scenario_config() -> AlertConfig:
    config = AlertConfig()
    config.saturation.max_running = MAX_NUM_SEQS
    return config


def load(store, s: Scenario, chunk: int = 200):
    """Simulate ``s`` into ``store``; returns the simulator's summary."""
    from collectors.ingest import ingest_metrics, ingest_traces
    from serving.emulator.faults import FaultEvent
    from serving.emulator.fleet_sim import ReplicaSpec, simulate
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    register_profile()
    faults = []
    if s.slow_replica:
        faults.append(FaultEvent(s.fault_at_s, s.slow_replica, "slowdown", s.slowdown, s.fault_until_s))

    traces, metrics = [], []

    def sink(request):
        (traces if isinstance(request, ExportTraceServiceRequest) else metrics).append(request)

    fleet = [ReplicaSpec(f"r{i}", profile=SMALL_PROFILE) for i in range(s.replicas)]
    start_ns = int(START.timestamp()) * 1_000_000_000
    summary = simulate(make_plans(s), fleet, start_time_ns=start_ns, policy=s.policy,
                       retry_policy=RetryPolicy(max_attempts=s.max_attempts, timeout_s=s.timeout_s),
                       faults=faults, sink=sink, seed=s.seed, until_s=s.duration_s + 600)
    # Few large inserts: merge the simulator's many small requests (one per batch / metric tick).
    for kind, found, ingest, field_name in ((ExportTraceServiceRequest, traces, ingest_traces, "resource_spans"),
                                            (ExportMetricsServiceRequest, metrics, ingest_metrics, "resource_metrics")):
        for i in range(0, len(found), chunk):
            merged = kind()
            for request in found[i:i + chunk]:
                getattr(merged, field_name).extend(getattr(request, field_name))
            ingest(store, merged)
    return summary


@dataclass
class Outcome:
    scenario: Scenario
    changes: list = field(default_factory=list)  # (minute, rule, state, replica)
    sim_seconds: float = 0.0
    eval_seconds: float = 0.0
    summary: object = None

    def first(self, rule: str, state: str = "firing", replica: str | None = None) -> float | None:
        for minute, r, st, rep in self.changes:
            if r == rule and st == state and (replica is None or rep == replica):
                return minute
        return None

    @property
    def cascades(self) -> list[tuple]:
        return [c for c in self.changes if c[1] == RULE_CASCADE and c[2] == "firing"]


def replay(store, s: Scenario, config: AlertConfig | None = None, step_s: int = 60, until_s: float | None = None,
           evaluator: Evaluator | None = None) -> list:
    """Evaluate minute by minute over the scenario; returns (minute, rule, state, replica) changes."""
    evaluator = evaluator or Evaluator(store, config or scenario_config())
    changes = []
    end = until_s if until_s is not None else s.duration_s + 300
    for t in range(step_s, int(end) + 1, step_s):
        for tr in evaluator.step(START + timedelta(seconds=t)):
            changes.append((t / 60, tr.alert.rule, tr.state.value, tr.alert.replica))
    return changes


def run(store, s: Scenario, config: AlertConfig | None = None) -> Outcome:
    t0 = time.perf_counter()
    summary = load(store, s)
    t1 = time.perf_counter()
    changes = replay(store, s, config)
    return Outcome(s, changes, t1 - t0, time.perf_counter() - t1, summary)


def generated() -> list[Scenario]:
    """The generated scenarios: 7 cascades (different replicas, slowdowns, loads, seeds; round-robin
    routing keeps feeding the slow replica; one metastable: near capacity, 6 s client timeouts and 5
    attempts keep the fleet failing after the slow replica recovered) and 8 without one (healthy at two loads, two pure load
    spikes, a mild 1.2x slowdown, two slowdowns at loads too low for any retry, and a 3x slowdown
    behind least-loaded routing, which steers work away from it: degraded replicas, not cascades)."""
    return [
        Scenario("cascade-r2-3x", seed=11, rate=3.0, slow_replica="r2", slowdown=3.0, cascade=True),
        Scenario("cascade-r0-3x", seed=12, rate=3.0, slow_replica="r0", slowdown=3.0, cascade=True),
        Scenario("cascade-r1-4x", seed=13, rate=2.5, slow_replica="r1", slowdown=4.0, cascade=True),
        Scenario("cascade-r3-2.5x", seed=14, rate=3.5, slow_replica="r3", slowdown=2.5, cascade=True),
        Scenario("cascade-r2-5x-unfixed", seed=15, rate=2.5, slow_replica="r2", slowdown=5.0, fault_until_s=None,
                 cascade=True),
        Scenario("cascade-r1-3x-early", seed=16, rate=3.0, slow_replica="r1", slowdown=3.0, fault_at_s=300,
                 fault_until_s=900, cascade=True),
        Scenario("metastable-r2-3x", seed=17, rate=4.6, slow_replica="r2", slowdown=3.0, fault_at_s=300,
                 fault_until_s=600, timeout_s=6.0, max_attempts=5, cascade=True),
        Scenario("healthy-3", seed=21, rate=3.0),
        Scenario("healthy-3.5", seed=22, rate=3.5),
        Scenario("spike-2x", seed=23, rate=3.0, spike=2.0, spike_at_s=600, spike_until_s=900),
        Scenario("spike-2.5x", seed=24, rate=2.5, spike=2.5, spike_at_s=600, spike_until_s=840),
        Scenario("mild-r2-1.2x", seed=25, rate=3.0, slow_replica="r2", slowdown=1.2),
        Scenario("degraded-low-load-r1-3x", seed=26, rate=1.0, slow_replica="r1", slowdown=3.0),
        Scenario("degraded-low-load-r0-4x", seed=27, rate=0.8, slow_replica="r0", slowdown=4.0),
        Scenario("least-loaded-r2-3x", seed=28, rate=3.0, slow_replica="r2", slowdown=3.0, policy="least_loaded"),
    ]


def judge(o: Outcome) -> dict:
    """Score one run: detected = a cascade fired naming the slowed replica at or after the fault."""
    s = o.scenario
    fault_min = s.fault_at_s / 60
    hits = [c for c in o.cascades if s.slow_replica and c[3] == s.slow_replica and c[0] >= fault_min]
    detected = bool(hits)
    retry_onset = o.first(RULE_RETRY, "pending")
    resolved = o.first(RULE_CASCADE, "resolved")
    # Baseline detector, no correlation: "a replica-degradation alert fired" read as a cascade there.
    naive = [c for c in o.changes if c[1] == RULE_DEGRADATION and c[2] == "firing"]
    naive_hit = any(s.slow_replica and c[3] == s.slow_replica and c[0] >= fault_min for c in naive)
    return {
        "naive_tp": s.cascade and naive_hit, "naive_fp": bool(naive) and not (s.cascade and naive_hit),
        "naive_fn": s.cascade and not naive_hit,
        "scenario": s.name, "truth": s.cascade, "cascades": len(o.cascades), "detected": detected,
        "tp": s.cascade and detected, "fp": (not s.cascade and bool(o.cascades)) or (bool(o.cascades) and not detected),
        "fn": s.cascade and not detected,
        "fired_min": hits[0][0] if hits else (o.cascades[0][0] if o.cascades else None),
        "named": sorted({c[3] for c in o.cascades}),
        "after_fault_min": (hits[0][0] - fault_min) if hits else None,
        "after_retry_onset_min": (hits[0][0] - retry_onset) if hits and retry_onset is not None else None,
        "resolved_min": resolved,
        "other_rules": sorted({c[1] for c in o.changes if c[2] == "firing" and c[1] != RULE_CASCADE}),
        "sim_s": round(o.sim_seconds, 1), "eval_s": round(o.eval_seconds, 1),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 scenarios instead of all")
    parser.add_argument("--only", default=None, help="run the scenarios whose name contains this")
    args = parser.parse_args(argv)
    from schema.migrate import migrate
    from schema.store import connect

    scenarios = generated()
    if args.quick:
        scenarios = [scenarios[0], scenarios[3], scenarios[6], scenarios[8]]
    if args.only:
        scenarios = [s for s in scenarios if args.only in s.name]
    results = []
    wall0 = time.perf_counter()
    for s in scenarios:
        store = connect("chdb://memory", f"bench_{uuid.uuid4().hex[:10]}")
        migrate(store, retention_days=3650)
        r = judge(run(store, s))  # one in-memory database per scenario; gone when the process ends
        results.append(r)
        print(f"{r['scenario']:26} truth={'cascade' if r['truth'] else 'none':7} cascades={r['cascades']} "
              f"detected={r['detected']!s:5} named={','.join(r['named']) or '-'} fired@{r['fired_min']} (+{r['after_fault_min']} min after fault, "
              f"+{r['after_retry_onset_min']} after retry onset) resolved@{r['resolved_min']} "
              f"others={','.join(r['other_rules'])} sim {r['sim_s']}s eval {r['eval_s']}s", flush=True)
    tp = sum(r["tp"] for r in results)
    fp = sum(r["fp"] for r in results)
    fn = sum(r["fn"] for r in results)
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / (tp + fn) if tp + fn else float("nan")
    ntp, nfp, nfn = (sum(r[k] for r in results) for k in ("naive_tp", "naive_fp", "naive_fn"))
    n_precision = ntp / (ntp + nfp) if ntp + nfp else float("nan")
    n_recall = ntp / (ntp + nfn) if ntp + nfn else float("nan")
    wall = time.perf_counter() - wall0
    evals = sum(r["eval_s"] for r in results)
    steps = sum(int(s.duration_s + 300) // 60 for s in scenarios)
    print(f"\ncascade rule over {len(results)} scenarios: TP={tp} FP={fp} FN={fn} "
          f"precision={precision:.2f} recall={recall:.2f}")
    print(f"baseline (any replica-degradation alert = cascade, same runs): TP={ntp} FP={nfp} FN={nfn} "
          f"precision={n_precision:.2f} recall={n_recall:.2f}; precision ratio cascade/baseline = "
          f"{precision / n_precision if n_precision else float('nan'):.2f}")
    print(f"evaluator: {steps} steps in {evals:.1f}s = {evals / steps * 1000:.0f} ms/step; "
          f"simulation+ingest {sum(r['sim_s'] for r in results):.1f}s; wall {wall:.1f}s "
          f"(2 shared cores: figures are pessimistic)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
