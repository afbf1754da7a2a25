"""alerts/series.py: step detection and speed ratios on hand-made rows (figures computed by hand), and
the replica series query on telemetry the emulator's virtual-time fleet produced, checked against
counts taken from the same spans and metric points."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from alerts import series
from tests.alerts_helpers import T0


def test_step_onset_finds_the_earliest_sustained_rise():
    # oldest -> newest: 1 1 1 1 | 3 3 3 ; given newest first
    newest_first = [3, 3, 3, 1, 1, 1, 1]
    st = series.step_onset(newest_first, ratio=1.5, min_delta=0.3)
    assert st == series.Step(onset=2, before=1, after=3)  # bucket 2 = the first high one
    # a lone spike is no step: the smallest of the two buckets from the onset must be high
    assert series.step_onset([1, 1, 5, 1, 1, 1, 1], ratio=1.5, min_delta=0.3) is None
    # absolute floor: 0 -> 0.08 is a 'rise' but below min_level 0.1
    assert series.step_onset([0.08, 0.08, 0, 0, 0, 0], ratio=3, min_delta=0.05, min_level=0.1) is None
    assert series.step_onset([0.2, 0.2, 0, 0, 0, 0], ratio=3, min_delta=0.05, min_level=0.1).onset == 1
    # too few values before the candidate onset (None gaps do not count)
    assert series.step_onset([3, 3, None, 1, None], ratio=1.5, min_delta=0.3) is None
    # max_onset ignores older onsets: the 1 -> 2 step began at bucket 5; from bucket 2 on, the level
    # before is median(1, 1, 1, 2, 2, 2) = 1.5 and 2 is no step, so the 2 -> 6 one at bucket 1 is found
    values = [6, 6, 2, 2, 2, 2, 1, 1, 1]
    assert series.step_onset(values, ratio=1.5, min_delta=0.3).onset == 5
    assert series.step_onset(values, ratio=1.5, min_delta=0.3, max_onset=2) == series.Step(1, 2, 6)


def _row(replica, b, gpu="H100", itl=0.01, prefill=4e-5, n=20, **extra):
    row = {"replica": replica, "bucket": b, "gpu_type": gpu, "requests": n, "itl_p50_s": itl, "itl_samples": n,
           "prefill_tok_p50_s": prefill, "prefill_samples": n}
    row.update(extra)
    return row


def test_speed_ratio_against_the_gpu_type_median_or_the_fleet():
    rows = [_row("h1", 0), _row("h2", 0), _row("h3", 0, itl=0.03, prefill=1.2e-4),
            _row("a1", 0, gpu="A100", itl=0.0165, prefill=6.6e-5),
            _row("h4", 0, itl=0.02, prefill=4e-5)]  # decode slower (big batch), prefill not: min() = 1.0
    fs = series.build(T0, 60, 4, rows, [])
    # H100 group {h1, h2, h3, h4}, each with 3 same-type peers: reference = median over the group
    # itl median(0.01, 0.01, 0.03, 0.02) = 0.015; prefill median(4e-5, 4e-5, 1.2e-4, 4e-5) = 4e-5
    assert fs.peers["h3"] == "same_gpu_type"
    assert fs.ratios["h3"][0] == pytest.approx(min(0.03 / 0.015, 1.2e-4 / 4e-5))  # 2.0
    assert fs.ratios["h1"][0] == pytest.approx(min(0.01 / 0.015, 1.0))
    assert fs.ratios["h4"][0] == pytest.approx(1.0)
    # a1 has no A100 peer: judged against its own baseline, which one bucket of history cannot give
    assert fs.peers["a1"] == "own_baseline" and fs.ratios["a1"][0] is None and fs.baselines["a1"] == {}
    # too few samples: no figure for that bucket
    few = series.build(T0, 60, 2, [_row("h1", 0, n=4), _row("h2", 0), _row("h3", 0)], [], min_samples=5)
    assert few.ratios["h1"][0] is None


def test_replica_series_query_on_emulator_telemetry(store):
    from collectors.ingest import BufferedIngest
    from serving.emulator.faults import FaultEvent
    from serving.emulator.fleet_sim import ReplicaSpec, simulate
    from serving.emulator.otlp import MemorySink
    from serving.plans import CallPlan, RetryPolicy, StepPlan, TaskPlan

    plans = [TaskPlan(f"t{i}", "chat", "acme", 1.0 + i * 0.5, (StepPlan("s", (CallPlan(300, 20),)),))
             for i in range(200)]
    memory = MemorySink()
    ingest = BufferedIngest(store)

    def sink(request):
        memory(request)
        ingest(request)

    start_ns = int(T0.timestamp()) * 1_000_000_000
    simulate(plans, [ReplicaSpec("r0"), ReplicaSpec("r1"), ReplicaSpec("r2")], start_time_ns=start_ns, sink=sink,
             seed=3, gateway_retries=0, retry_policy=RetryPolicy(max_attempts=1),
             faults=[FaultEvent(0, "r2", "error_rate", {503: 0.5})])
    ingest.flush()
    now = T0 + timedelta(seconds=120)
    fs = series.load(store, now, 60, 2, 900, 5, 2)

    # expected, from the very spans the emulator produced: per replica and bucket by end time
    def bucket(span):
        return int((now.timestamp() * 1e9 - span.end_time_unix_nano) // 60e9)

    engine, attempts, errors = Counter(), Counter(), Counter()
    for res, span in memory.spans():
        b = bucket(span)
        if not 0 <= b < 2:
            continue
        attrs = {kv.key: kv.value for kv in span.attributes}
        if span.name == "llm_request":
            engine[(res["service.instance.id"], b)] += 1
        elif span.name == "gateway.attempt":
            replica = attrs["gateway.replica"].string_value
            attempts[(replica, b)] += 1
            errors[(replica, b)] += attrs["error.type"].string_value == "http.503" if "error.type" in attrs else 0
    assert errors[("r2", 0)] + errors[("r2", 1)] > 10 and not errors[("r0", 0)]
    for (replica, b), n in attempts.items():
        rep = fs.replicas[replica]
        assert rep.get("attempts", b) == n
        assert rep.get("gw_errors", b) == errors[(replica, b)] == rep.get("gw_failed", b)
        assert rep.get("gw_ok", b) == n - errors[(replica, b)]
        assert (rep.get("requests", b) or 0) == engine[(replica, b)]
    # gauges: the emulator's running / waiting / KV-usage points of r0, per bucket
    points = Counter()
    for request in memory.metrics:
        for rm in request.resource_metrics:
            if any(kv.key == "service.instance.id" and kv.value.string_value == "r0" for kv in rm.resource.attributes):
                for m in rm.scope_metrics[0].metrics:
                    if m.HasField("gauge"):
                        b = int((now.timestamp() * 1e9 - m.gauge.data_points[0].time_unix_nano) // 60e9)
                        points[b] += 1
    assert points[1] == 6 * 3  # ticks every 10 s, three gauges
    assert [fs.replicas["r0"].get("gauge_points", b) for b in (0, 1)] == [points[0], points[1]]
    assert fs.replicas["r0"].get("waiting_min", 0) == 0.0
