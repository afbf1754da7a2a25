"""The fleet simulator's control knobs: --max-num-seqs per replica, gateway admission control,
the autoscaling rule (serving/emulator/sim_control.py)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from serving.emulator.fleet_sim import ReplicaSpec, simulate
from serving.emulator.otlp import MemorySink
from serving.emulator.sim_control import AutoscaleRule
from serving.plans import CallPlan, RetryPolicy, StepPlan, TaskPlan

T0 = 1_700_000_000_000_000_000  # ns


def chat(task_id, at, prompt=500, out=400):
    return TaskPlan(task_id, "chat", "acme", at, (StepPlan("answer", (CallPlan(prompt, out),)),))


def test_max_num_seqs_caps_the_running_batch():
    # 1 replica admitting one sequence at a time: the second of two simultaneous calls waits in the
    # engine queue for the whole of the first (vLLM's --max-num-seqs 1).
    sink = MemorySink()
    simulate([chat("a", 1.0), chat("b", 1.0)], [ReplicaSpec("r0", max_num_seqs=1)], sink=sink, start_time_ns=T0)
    engine = sorted(((s.start_time_unix_nano, s.end_time_unix_nano, a) for _, s, a in
                     sink.spans_by_name()["llm_request"]), key=lambda x: x[:2])
    (s1, e1, a1), (s2, e2, a2) = engine
    assert s1 == s2  # both arrived together
    assert a1["gen_ai.latency.time_in_queue"] < 0.001
    # the second was scheduled when the first finished (its engine end), not before; its queue time
    # starts where the engine core took it in, at the end of the first's prefill step (vLLM's QUEUED
    # event), 20 ms of input overhead after both arrived
    assert a2["gen_ai.latency.time_in_queue"] == pytest.approx(
        (e1 - s1) / 1e9 - 0.020 - a1["gen_ai.latency.time_in_model_prefill"], abs=0.002)
    running = [p.as_double for res, name, _, p in sink.points() if name == "vllm:num_requests_running"]
    assert max(running) <= 1
    with pytest.raises(ValueError, match="max_num_seqs"):
        simulate([chat("a", 1.0)], [ReplicaSpec("r0", max_num_seqs=0)])


def test_admission_cap_rejects_with_429_and_clients_retry_after_retry_after():
    # cap 1 interactive request inside the gateway; three chats arrive together. One is admitted,
    # the others get 429 (no upstream attempt, no engine work) and retry no sooner than 1 s later
    # (Retry-After), until each gets in: never two engine requests at once.
    sink = MemorySink()
    plans = [chat(f"t{i}", 1.0, out=200) for i in range(3)]
    policy = RetryPolicy(max_attempts=10, backoff_base_s=0.2, backoff_max_s=0.4, timeout_s=60)
    summ = simulate(plans, [ReplicaSpec("r0"), ReplicaSpec("r1")], sink=sink, start_time_ns=T0,
                    admission_caps={"interactive": 1}, retry_policy=policy, seed=5)
    assert summ.tasks["success"] == 3
    spans = sink.spans_by_name()
    rejected = [a for _, _, a in spans["gateway chat"] if a["gateway.admission"] == "rejected"]
    assert len(rejected) == summ.rejections >= 2
    for a in rejected:
        assert a["gateway.upstream.status_code"] == 429 and a["error.type"] == "admission_rejected"
    assert len(spans["gateway.attempt"]) == len(spans["llm_request"]) == 3  # rejected: no upstream attempt
    client = sorted(((s.start_time_unix_nano, s.end_time_unix_nano, a) for _, s, a in
                     spans["chat meta-llama/Llama-3.1-8B-Instruct"]), key=lambda x: x[:2])
    assert sum(1 for *_, a in client if a.get("error.type") == "http.429") == summ.rejections
    by_task = defaultdict(list)
    for start, end, a in client:
        by_task[a["task.id"]].append((start, end, a))
    for attempts in by_task.values():
        for (s0, e0, a0), (s1, _, _) in zip(attempts, attempts[1:]):
            assert a0["error.type"] == "http.429" and s1 - e0 >= 1_000_000_000  # Retry-After: 1 s
    engine = sorted((s.start_time_unix_nano, s.end_time_unix_nano) for _, s, _ in spans["llm_request"])
    for (_, end), (start, _) in zip(engine, engine[1:]):
        assert start >= end  # cap 1: never two requests upstream at once
    with pytest.raises(ValueError, match="admission caps"):
        simulate(plans, [ReplicaSpec("r0")], admission_caps={"interactive": -1})


def test_autoscaling_boots_on_load_and_parks_when_idle():
    # 3 replicas, min 1, target 2 outstanding per replica: a burst of 12 long calls at t=5 s makes
    # the rule boot r1 and r2 at its next evaluation (t=10 s); they are scraped (billed) from then on
    # and take requests from t=40 s (cold start 30 s), not before; 60 s after the load is gone they
    # drain and stop being scraped; a late task at t=1000 s runs on r0.
    sink = MemorySink()
    burst = [chat(f"b{i}", 5.0 + i * 0.01, prompt=200, out=3000) for i in range(12)]
    later = [chat(f"b2-{i}", 45.0 + i * 0.01, prompt=200, out=300) for i in range(6)]
    plans = burst + later + [chat("late", 1000.0, out=50)]
    rule = AutoscaleRule(min_replicas=1, target_load_per_replica=2, interval_s=10, cold_start_s=30,
                         scale_down_after_s=60)
    fleet = [ReplicaSpec(f"r{i}") for i in range(3)]
    summ = simulate(plans, fleet, sink=sink, start_time_ns=T0, autoscale=rule, policy="least_loaded",
                    metrics_interval_s=10, retry_policy=RetryPolicy(timeout_s=600))
    assert summ.tasks["success"] == len(plans)
    assert summ.scale_events == 4  # 2 boots, 2 drains
    scraped = defaultdict(list)
    for res, name, _, p in sink.points():
        if name == "vllm:num_requests_running":
            scraped[res["service.instance.id"]].append((p.time_unix_nano - T0) / 1e9)
    assert scraped["r0"][0] == 10.0
    for rid in ("r1", "r2"):
        assert min(scraped[rid]) == 10.0  # booted at t=10 and scraped (billed) while booting
        assert max(scraped[rid]) < 1000.0  # parked well before the late task
    served = defaultdict(list)
    for res, s, a in sink.spans_by_name()["llm_request"]:
        served[res["service.instance.id"]].append((s.start_time_unix_nano - T0) / 1e9)
    assert min(served["r1"] + served["r2"]) >= 40.0  # not before the cold start ended
    assert 1000.0 <= max(served["r0"]) < 1001.0


def test_autoscale_rule_is_validated():
    with pytest.raises(ValueError, match="min_replicas"):
        simulate([chat("a", 1.0)], [ReplicaSpec("r0")], autoscale=AutoscaleRule(min_replicas=2))
    with pytest.raises(ValueError, match="target_load_per_replica"):
        simulate([chat("a", 1.0)], [ReplicaSpec("r0")], autoscale=AutoscaleRule(target_load_per_replica=0))
