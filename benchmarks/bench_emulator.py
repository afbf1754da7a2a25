"""Virtual-time speed of the engine emulator, in simulated requests per wall-clock second.

Run: ``.venv/bin/python benchmarks/bench_emulator.py [--quick]``

Scenario: the Azure LLM inference 2023 conversation trace (19,366 requests in ~1 h) replayed as
single-call chat tasks on 8 x H100 (Llama-3.1-8B) behind a least-loaded gateway, i.e. one hour of
an 8-replica fleet at the trace's rate. Every span of docs/telemetry.md is encoded to OTLP protobuf
and serialized (what an OTLP/HTTP sink sends), metric points every 10 s per replica.

Figures: wall and CPU seconds for spans=all / engine / none; the baseline, measured in the same
run on the trace's first 10 minutes, is the same simulator stepping the engine one iteration per
event (``step_batching=False``); the ratio is the speed-up of jumping runs of identical decode
steps. Busy fleet (goal 2): the same 8 replicas at 3x the trace's rate (~16 req/s, 10M requests
~ 7 days), 1 simulated hour, metric points only, in one process and as 2 cells on 2 processes;
the 10M-requests time is projected from those rates. Other work on the same two cores makes all
figures pessimistic: CPU seconds are shown beside wall seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from serving.emulator.fleet_shards import simulate_sharded  # noqa: E402
from serving.emulator.fleet_sim import ReplicaSpec, simulate  # noqa: E402
from serving.plans import CallPlan, StepPlan, TaskPlan  # noqa: E402
from serving.emulator.virtual import read_azure, single_call_plans  # noqa: E402

TRACE = ROOT / "serving" / "workloads" / "data" / "azure_llm_inference_2023_conv.csv"


class CountingSink:
    def __init__(self):
        self.bytes = 0
        self.requests = 0

    def __call__(self, req):
        self.bytes += len(req.SerializeToString())
        self.requests += 1


def run(plans, spans, step_batching=True, replicas=8):
    sink = CountingSink()
    c0, w0 = time.process_time(), time.perf_counter()
    s = simulate(plans, [ReplicaSpec(f"replica-{i}") for i in range(replicas)], sink=sink, spans=spans,
                 policy="least_loaded", seed=1, step_batching=step_batching)
    return s, time.perf_counter() - w0, time.process_time() - c0, sink.bytes


def busy_plans(rows, hours: float, rate: float):
    """The trace looped and compressed ``rate`` times, for ``hours`` simulated hours (sorted)."""
    period = rows[-1][0] + 1.0
    end = hours * 3600
    loop = 0
    while True:
        for i, (t, p, g) in enumerate(rows):
            a = (loop * period + t) / rate
            if a >= end:
                return
            yield TaskPlan(f"b{loop}-{i}", "chat", "trace", a, (StepPlan("answer", (CallPlan(p, g),)),))
        loop += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="first 10 minutes only")
    args = ap.parse_args()
    rows = read_azure(TRACE)
    first10 = [r for r in rows if r[0] < 600]
    plans = single_call_plans(first10 if args.quick else rows)
    print(f"scenario: {len(plans)} requests of the Azure conversation trace on 8 x h100-llama-3.1-8b")
    rates = {}
    for spans in ("all", "engine", "none"):
        s, wall, cpu, nbytes = run(plans, spans)
        rates[spans] = s.engine_requests / wall
        print(f"  spans={spans:6s}: {s.sim_seconds:7.0f} sim s in {wall:6.2f} s wall ({cpu:6.2f} s CPU): "
              f"{s.engine_requests / wall:8.0f} req/s wall, {s.engine_requests / cpu:8.0f} req/s CPU; "
              f"{s.spans} spans, {s.metric_points} metric points, {nbytes / 1e6:.1f} MB OTLP")
    base_plans = single_call_plans(first10)
    fast, wf, cf, _ = run(base_plans, "all")
    slow, ws, cs, _ = run(base_plans, "all", step_batching=False)
    print(f"baseline (first 10 min, {len(base_plans)} requests, spans=all): one event per engine step "
          f"{ws:.2f} s wall ({cs:.2f} s CPU) vs batched decode runs {wf:.2f} s wall ({cf:.2f} s CPU): "
          f"ratio {cs / cf:.1f}x (CPU)")
    assert fast.generation_tokens == slow.generation_tokens
    print(f"goal 1: one hour of an 8-replica fleet in <= 10 s: {len(plans) / rates['all']:.1f} s wall (spans=all)"
          if not args.quick else "goal 1: run without --quick")
    hours = 0.25 if args.quick else 1.0
    fleet = [ReplicaSpec(f"replica-{i}") for i in range(8)]
    c0, w0 = time.process_time(), time.perf_counter()
    one = simulate(busy_plans(rows, hours, 3.0), fleet, spans="none", sink=CountingSink(), seed=1,
                   policy="least_loaded")
    w1, c1 = time.perf_counter() - w0, time.process_time() - c0
    w0 = time.perf_counter()
    two = simulate_sharded(lambda: busy_plans(rows, hours, 3.0), fleet, shards=2, spans="none",
                           sink_factory=lambda i: CountingSink(), seed=1, policy="least_loaded", start_time_ns=0)
    w2 = time.perf_counter() - w0
    r1, r1c, r2 = one.engine_requests / w1, one.engine_requests / c1, two.engine_requests / w2
    print(f"busy fleet ({hours:g} h of 8 x H100 at 3x the trace rate, {one.engine_requests} requests): "
          f"1 process {w1:.1f} s wall ({c1:.1f} s CPU) = {r1:.0f} req/s wall, {r1c:.0f} req/s CPU; "
          f"2 cells on 2 processes {w2:.1f} s wall = {r2:.0f} req/s")
    print(f"goal 2: 10M requests in <= 600 s: projected {10e6 / r2:.0f} s wall with 2 cells as measured here, "
          f"{10e6 / (2 * r1c):.0f} s on 2 idle cores (2 x the single-process CPU rate)")


if __name__ == "__main__":
    main()
