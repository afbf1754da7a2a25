"""Virtual-time speed of the engine emulator, in simulated requests per wall-clock second.

Run: ``.venv/bin/python benchmarks/bench_emulator.py [--quick]``

Scenario: the Azure LLM inference 2023 conversation trace (19,366 requests in ~1 h) replayed as
single-call chat tasks on 8 x H100 (Llama-3.1-8B) behind a least-loaded gateway, i.e. one hour of
an 8-replica fleet at the trace's rate. Every span of docs/telemetry.md is encoded to OTLP protobuf
and serialized (what an OTLP/HTTP sink sends), metric points every 10 s per replica.

Figures: wall and CPU seconds for spans=all / engine / none; the baseline, measured in the same
run on the trace's first 10 minutes, is the same simulator stepping the engine one iteration per
event (``step_batching=False``); the ratio is the speed-up of jumping runs of identical decode
steps. The 10M-requests figure is projected from the spans=none rate. Other work on the same two
cores makes all figures pessimistic.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from serving.emulator.fleet_sim import ReplicaSpec, simulate  # noqa: E402
from serving.emulator.virtual import read_azure, single_call_plans  # noqa: E402

TRACE = ROOT.parent / "shared" / "data" / "azure_llm_inference_2023_conv.csv"


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
    hour = next(iter(rates))
    print(f"goal 1: one hour of an 8-replica fleet in <= 10 s: {len(plans) / rates['all']:.1f} s wall (spans=all)"
          if not args.quick else "goal 1: run without --quick")
    print(f"goal 2: 10M requests in <= 600 s: projected {10e6 / rates['none']:.0f} s (spans=none), "
          f"{10e6 / rates['engine']:.0f} s (engine spans), {10e6 / rates['all']:.0f} s (all spans)")
    del hour


if __name__ == "__main__":
    main()
