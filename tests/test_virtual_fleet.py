"""The virtual-time fleet + task simulator: span contract, metric points, faults, the retry cascade."""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter, defaultdict

import pytest

from serving.emulator.faults import FaultEvent, parse_timeline
from serving.emulator.fleet_sim import ReplicaSpec, simulate
from serving.emulator.otlp import CallbackSink, MemorySink, span_attrs
from serving.emulator.stats import ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS
from serving.plans import CallPlan, RetryPolicy, StepPlan, TaskPlan

T0 = 1_700_000_000_000_000_000  # ns


def chat_plans(n, rate, seed=0, prompt=(200, 1500), out=(50, 300), start=0.0):
    rng = random.Random(seed)
    t = start
    plans = []
    for i in range(n):
        t += rng.expovariate(rate)
        call = CallPlan(rng.randint(*prompt), rng.randint(*out))
        plans.append(TaskPlan(f"task-{seed}-{i}", "chat", "acme", t, (StepPlan("answer", (call,)),)))
    return plans


def test_span_contract_of_a_two_step_task():
    plan = TaskPlan("t1", "research_agent", "tenant-a", 2.0, (
        StepPlan("search", (CallPlan(300, 20), CallPlan(400, 30))),
        StepPlan("answer", (CallPlan(800, 40, max_tokens=25),)),
    ), priority="batch", slo_ttft_ms=500, slo_e2e_ms=20000)
    sink = MemorySink()
    summ = simulate([plan], [ReplicaSpec("r0"), ReplicaSpec("r1", profile="a100-llama-3.1-8b")], sink=sink,
                    start_time_ns=T0, seed=3)
    assert summ.tasks == {"success": 1, "failure": 0, "abandoned": 0}
    assert (summ.calls, summ.attempts, summ.engine_requests) == (3, 3, 3)
    spans = sink.spans_by_name()
    assert {k: len(v) for k, v in spans.items()} == {
        "task research_agent": 1, "chat meta-llama/Llama-3.1-8B-Instruct": 3, "gateway chat": 3,
        "gateway.attempt": 3, "llm_request": 3}
    assert summ.spans == 13
    (_, root, ra), = spans["task research_agent"]
    assert ra["task.outcome"] == "success" and ra["tenant.priority"] == "batch" and ra["slo.ttft_ms"] == 500.0
    assert root.start_time_unix_nano == T0 + 2_000_000_000 and not root.parent_span_id
    ids = {s.span_id: (s.name, s) for res, s in sink.spans()}
    assert {s.trace_id for _, s in sink.spans()} == {root.trace_id}
    for res, s, a in spans["llm_request"]:
        assert ids[s.parent_span_id][0] == "gateway.attempt"
        assert s.kind == 2  # SERVER
        assert res["service.name"] == "vllm" and res["service.instance.id"] in ("r0", "r1")
        assert res["gpu.type"] == {"r0": "H100", "r1": "A100"}[res["service.instance.id"]]
        assert res["gpu.count"] == "1" and res["gen_ai.request.model"] == "meta-llama/Llama-3.1-8B-Instruct"
        assert res["vllm.instrumenting_module_name"] == "vllm.llm_engine" and res["vllm.process_id"].isdigit()
        assert "gen_ai.response.finish_reasons" not in a  # vLLM 0.32 puts none on its spans
        assert "task.id" not in a  # vLLM does not propagate baggage
        assert a["gen_ai.latency.e2e"] == pytest.approx((s.end_time_unix_nano - s.start_time_unix_nano) / 1e9, abs=1e-6)
    outs = sorted(a["gen_ai.usage.completion_tokens"] for _, _, a in spans["llm_request"])
    assert outs == [20, 25, 30]
    capped = next(a for _, _, a in spans["llm_request"] if a["gen_ai.usage.completion_tokens"] == 25)
    assert capped["gen_ai.request.max_tokens"] == 25
    # max_tokens is always present: the derived default (context - prompt) when the call set none
    assert sorted(a["gen_ai.request.max_tokens"] for _, _, a in spans["llm_request"]) == [25, 131072 - 400, 131072 - 300]
    scopes = {ss.scope.name for req in sink.traces for rs in req.resource_spans for ss in rs.scope_spans
              for s in ss.spans if s.name == "llm_request"}
    assert scopes == {"vllm.tracing.otel"}
    for _, s, a in spans["gateway.attempt"]:
        assert ids[s.parent_span_id][0] == "gateway chat" and a["gateway.attempt"] == 1
        assert a["task.id"] == "t1" and a["gateway.upstream.status_code"] == 200
    # the gateway copies task.step / task.call / task.attempt from the client's baggage (strings):
    # the search step's two parallel calls are calls 1 and 2 of their step
    gateway_steps = sorted((a["task.step"], a["task.call"], a["task.attempt"]) for _, _, a in spans["gateway.attempt"])
    assert gateway_steps == [("answer", "1", "1"), ("search", "1", "1"), ("search", "2", "1")]
    for _, s, a in spans["gateway chat"]:
        assert ids[s.parent_span_id][0].startswith("chat ") and a["gateway.retries"] == 0
        assert a["task.step"] in ("search", "answer") and a["task.attempt"] == "1"
    steps = Counter()
    for _, s, a in spans["chat meta-llama/Llama-3.1-8B-Instruct"]:
        assert s.parent_span_id == root.span_id and s.kind == 3  # CLIENT
        assert a["task.attempt"] == 1 and a["gen_ai.provider.name"] == "vllm" and "error.type" not in a
        steps[a["task.step"]] += 1
        assert a["gen_ai.usage.output_tokens"] == a["gen_ai.client.tokens_received"]
    assert steps == {"search": 2, "answer": 1}
    # step 2 starts after both calls of step 1 ended
    first_step_end = max(s.end_time_unix_nano for _, s, a in spans["chat meta-llama/Llama-3.1-8B-Instruct"]
                         if a["task.step"] == "search")
    (answer,) = [s for _, s, a in spans["chat meta-llama/Llama-3.1-8B-Instruct"] if a["task.step"] == "answer"]
    assert answer.start_time_unix_nano == first_step_end
    assert root.end_time_unix_nano == answer.end_time_unix_nano


def test_metric_points_follow_the_contract_and_conserve_tokens():
    sink = MemorySink()
    # every prompt of 512 tokens or more opens with the same 512-token block: a prefix the cache reuses
    plans = [dataclasses.replace(p, steps=(StepPlan("answer", (dataclasses.replace(
        p.steps[0].calls[0], prefix_blocks=(7,) if p.steps[0].calls[0].prompt_tokens >= 512 else ()),)),))
        for p in chat_plans(200, rate=4.0, seed=1)]
    summ = simulate(plans, [ReplicaSpec("r0"), ReplicaSpec("r1")], sink=sink, start_time_ns=T0,
                    metrics_interval_s=5.0, policy="least_loaded")
    assert summ.tasks["success"] == 200
    last = {}
    names = Counter()
    for res, name, kind, p in sink.points():
        names[(name, kind)] += 1
        last[(res["service.instance.id"], name, dict((kv.key, kv.value.string_value) for kv in p.attributes).get(
            "finished_reason"))] = p
        assert (p.time_unix_nano - T0) % 5_000_000_000 == 0
        assert {kv.key for kv in p.attributes} >= {"model_name", "engine"}
    kinds = {n: k for (n, k) in names}
    assert kinds == {
        "vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge", "vllm:kv_cache_usage_perc": "gauge",
        "vllm:prompt_tokens": "sum", "vllm:generation_tokens": "sum", "vllm:num_preemptions": "sum",
        "vllm:prefix_cache_queries": "sum", "vllm:prefix_cache_hits": "sum", "vllm:request_success": "sum",
        "vllm:prompt_tokens_cached": "sum", "vllm:time_to_first_token_seconds": "histogram", "vllm:inter_token_latency_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram", "vllm:request_queue_time_seconds": "histogram",
        "vllm:request_prefill_time_seconds": "histogram", "vllm:request_decode_time_seconds": "histogram"}
    gen_by_rep = Counter()
    n_by_rep = Counter()
    attempts = [(a["gateway.replica"], s, a) for _, s, a in sink.spans_by_name()["gateway.attempt"]]
    for res, s in sink.spans():
        if s.name == "llm_request":
            gen_by_rep[res["service.instance.id"]] += span_attrs(s)["gen_ai.usage.completion_tokens"]
            n_by_rep[res["service.instance.id"]] += 1
    assert sum(gen_by_rep.values()) == sum(p.steps[0].calls[0].output_tokens for p in plans)
    for rep in ("r0", "r1"):
        assert last[(rep, "vllm:generation_tokens", None)].as_double == gen_by_rep[rep]
        assert last[(rep, "vllm:request_success", "stop")].as_double == n_by_rep[rep]
        ttft = last[(rep, "vllm:time_to_first_token_seconds", None)]
        assert list(ttft.explicit_bounds) == list(TTFT_BUCKETS) and ttft.count == n_by_rep[rep]
        assert len(ttft.bucket_counts) == len(TTFT_BUCKETS) + 1 and sum(ttft.bucket_counts) == ttft.count
        itl = last[(rep, "vllm:inter_token_latency_seconds", None)]
        assert list(itl.explicit_bounds) == list(ITL_BUCKETS)
        assert itl.count == gen_by_rep[rep] - n_by_rep[rep]  # one sample per token gap
        e2e = last[(rep, "vllm:e2e_request_latency_seconds", None)]
        assert list(e2e.explicit_bounds) == list(REQUEST_LATENCY_BUCKETS)
        # the engine view's phase distribution: queue, prefill and decode observed once per finished request,
        # as vLLM does (the backfill exported queue alone: 7 days of queue against minutes of prefill / decode)
        phases = [last[(rep, f"vllm:request_{phase}_time_seconds", None)] for phase in ("queue", "prefill", "decode")]
        for h in phases:
            assert list(h.explicit_bounds) == list(REQUEST_LATENCY_BUCKETS)
            assert h.count == e2e.count == n_by_rep[rep] and sum(h.bucket_counts) == h.count
        assert phases[1].sum > 0 and phases[2].sum > 0
        assert sum(h.sum for h in phases) <= e2e.sum + 1e-9  # the phases lie inside each request's e2e
        assert last[(rep, "vllm:num_requests_running", None)].as_double == 0
        # the gateway and the client read usage.prompt_tokens_details.cached_tokens (vLLM with
        # --enable-prompt-tokens-details, as the live emulator answers): their cached prompt tokens are
        # the engine's own count (vllm:prompt_tokens_cached), so the cost job need not estimate them.
        # A miss carries no count: vLLM leaves prompt_tokens_details out when nothing was cached.
        cached = last[(rep, "vllm:prompt_tokens_cached", None)].as_double
        counts = [a.get("gen_ai.usage.cache_read.input_tokens") for r, _, a in attempts if r == rep]
        assert sum(c or 0 for c in counts) == cached
        assert 0 not in counts
    client = sink.spans_by_name()["chat meta-llama/Llama-3.1-8B-Instruct"]
    counts = [a.get("gen_ai.usage.cache_read.input_tokens") for _, _, a in client]
    assert sum(c or 0 for c in counts) == sum(
        last[(rep, "vllm:prompt_tokens_cached", None)].as_double for rep in ("r0", "r1")) > 0
    assert None in counts and 0 not in counts  # misses (the first request of each prompt) carry no count


def test_slowed_replica_raises_latency_and_triggers_retries():
    """4 replicas; replica r2 becomes 3x slower at t=60 s; a tight client timeout turns that into
    timeouts and retries, which add load (the cascade)."""
    plans = chat_plans(1200, rate=8.0, seed=7, prompt=(500, 1500), out=(100, 300))
    policy = RetryPolicy(timeout_s=6.0, max_attempts=3, backoff_base_s=0.5)
    fleet = [ReplicaSpec(f"r{i}") for i in range(4)]
    base_sink, slow_sink = MemorySink(), MemorySink()
    base = simulate(plans, fleet, sink=base_sink, retry_policy=policy, seed=2, start_time_ns=T0)
    slow = simulate(plans, fleet, sink=slow_sink, retry_policy=policy, seed=2, start_time_ns=T0,
                    faults=[FaultEvent(60.0, "r2", "slowdown", 3.0)])

    def itl_by_replica(sink):
        acc = defaultdict(list)
        for res, s in sink.spans():
            a = span_attrs(s)
            if s.name == "llm_request" and s.start_time_unix_nano > T0 + 70e9 and a["gen_ai.usage.completion_tokens"] > 1 \
                    and "gen_ai.latency.time_in_model_decode" in a:
                acc[res["service.instance.id"]].append(
                    a["gen_ai.latency.time_in_model_decode"] / (a["gen_ai.usage.completion_tokens"] - 1))
        return {k: sum(v) / len(v) for k, v in acc.items()}

    itl_base, itl_slow = itl_by_replica(base_sink), itl_by_replica(slow_sink)
    healthy = sum(itl_base[r] for r in ("r0", "r1", "r3")) / 3
    assert itl_slow["r2"] / healthy > 2.5  # slowed replica: inter-token latency ~3x
    assert base.timeouts == 0 and base.client_retries == 0
    assert slow.timeouts > 0 and slow.client_retries > 0
    assert slow.engine_requests > base.engine_requests  # retries are extra load
    timeouts = [a for _, s in slow_sink.spans() if s.name.startswith("chat ")
                for a in [span_attrs(s)] if a.get("error.type") == "timeout"]
    assert len(timeouts) == slow.timeouts
    assert all(s.status.code == 2 for _, s in slow_sink.spans() if s.name.startswith("chat ")
               and span_attrs(s).get("error.type"))
    engine_spans = sum(1 for _, s in slow_sink.spans() if s.name == "llm_request")
    # the engine aborts what the client gave up on and, like vLLM 0.32, exports no span for it (a
    # request that finished in the step during which the client gave up ends normally; one still in
    # input processing never ran)
    assert 0.8 * slow.timeouts <= slow.engine_requests - engine_spans <= slow.timeouts


def test_crash_loses_in_flight_spans_and_clients_retry():
    plans = chat_plans(300, rate=6.0, seed=4)
    sink = MemorySink()
    summ = simulate(plans, [ReplicaSpec("r0"), ReplicaSpec("r1")], sink=sink, seed=5, start_time_ns=T0,
                    faults=[FaultEvent(20.0, "r1", "crash", until_s=30.0)], policy="round_robin")
    assert summ.crashed_requests > 0
    spans = sink.spans_by_name()
    broken = [a for _, _, a in spans["chat meta-llama/Llama-3.1-8B-Instruct"] if a.get("error.type") == "stream_broken"]
    assert len(broken) == summ.crashed_requests
    assert any(a["gen_ai.client.partial"] for a in broken)  # some streams broke after tokens
    assert len(spans["llm_request"]) == summ.engine_requests - summ.crashed_requests
    refused = [a for _, _, a in spans["gateway.attempt"] if a.get("error.type") == "connection_error"]
    assert refused and all(a["gateway.replica"] == "r1" for a in refused)
    assert summ.gateway_retries == len(refused)
    assert summ.tasks["success"] == 300  # clients and gateway retried around the dead replica
    # r1 restarted at t=30 s: its cumulative series start again
    starts = {p.start_time_unix_nano for res, n, k, p in sink.points()
              if res["service.instance.id"] == "r1" and n == "vllm:generation_tokens"}
    assert starts == {T0, T0 + 30_000_000_000}


def test_kv_cut_and_error_rate_faults_from_a_timeline():
    faults = parse_timeline([{"at_s": 5, "replica": "r0", "kind": "kv_cut", "value": 0.97},
                             {"at_s": 0, "replica": "*", "kind": "error_rate", "value": {"503": 0.2}, "until_s": 30}])
    plans = chat_plans(150, rate=5.0, seed=9, prompt=(1500, 3000), out=(200, 400))
    sink = MemorySink()
    summ = simulate(plans, [ReplicaSpec("r0"), ReplicaSpec("r1")], sink=sink, seed=1, faults=faults,
                    start_time_ns=T0, gateway_retries=2)
    pre = max(p.as_double for res, n, k, p in sink.points()
              if n == "vllm:num_preemptions" and res["service.instance.id"] == "r0")
    assert pre > 0 and summ.preemptions == pre
    errs = [a for _, _, a in sink.spans_by_name()["gateway.attempt"] if a.get("error.type") == "http.503"]
    assert errs and summ.gateway_retries > 0
    only = MemorySink()
    eng = simulate(plans[:20], [ReplicaSpec("r0")], sink=only, spans="engine", seed=1, start_time_ns=T0)
    got = list(only.spans())
    assert len(got) == eng.engine_spans == 20 and {s.name for _, s in got} == {"llm_request"}
    assert all(len(s.span_id) == 8 and len(s.trace_id) == 16 and not s.parent_span_id for _, s in got)
    with pytest.raises(ValueError, match="entry 0"):
        parse_timeline([{"at_s": 1, "kind": "melt"}])
    with pytest.raises(ValueError, match="unknown replica"):
        simulate(plans[:1], [ReplicaSpec("r0")], faults=[FaultEvent(1, "r9", "slowdown", 2.0)])


def test_abandoned_and_failed_tasks():
    plans = chat_plans(20, rate=50.0, seed=2, prompt=(1000, 1000), out=(2000, 2000))
    sink = MemorySink()
    summ = simulate(plans, [ReplicaSpec("r0", profile="4xh100-llama-3.1-70b")], sink=sink, seed=1,
                    retry_policy=RetryPolicy(timeout_s=100, abandon_after_s=20), start_time_ns=T0)
    assert summ.tasks["abandoned"] == 20
    roots = sink.spans_by_name()["task chat"]
    assert {a["task.outcome"] for _, _, a in roots} == {"abandoned"}
    fail = simulate(plans, [ReplicaSpec("r0")], sink=None, seed=1,
                    faults=[FaultEvent(0, "r0", "error_rate", 1.0)], retry_policy=RetryPolicy(max_attempts=2))
    assert fail.tasks["failure"] == 20 and fail.attempts == 40 and fail.engine_requests == 0


def test_ingest_into_the_store(store):
    from collectors import ingest

    plans = chat_plans(30, rate=3.0, seed=11)
    summ = simulate(plans, [ReplicaSpec("r0"), ReplicaSpec("r1")], start_time_ns=T0, seed=1,
                    sink=CallbackSink(lambda r: ingest.ingest_traces(store, r), lambda r: ingest.ingest_metrics(store, r)))
    rows = dict(store.query("SELECT call_source, count() FROM llm_calls GROUP BY call_source", tag="test.sim").result_rows)
    assert rows == {"engine": 30, "gateway": 30, "client": 30}
    assert store.scalar("SELECT count() FROM otel_traces", tag="test.sim") == summ.spans
    gen = store.scalar("SELECT sum(output_tokens) FROM llm_calls WHERE call_source = 'engine'", tag="test.sim")
    assert gen == sum(p.steps[0].calls[0].output_tokens for p in plans)


@pytest.mark.timeout(120)
def test_sharded_cells_cover_every_task_once():
    from serving.emulator.fleet_shards import shard_of, simulate_sharded

    plans = chat_plans(120, rate=6.0, seed=21)
    fleet = [ReplicaSpec(f"r{i}") for i in range(4)]
    one = simulate(plans, fleet, seed=1, start_time_ns=T0)
    two = simulate_sharded(lambda: plans, fleet, shards=2, start_time_ns=T0, seed=1)
    assert two.tasks == one.tasks == {"success": 120, "failure": 0, "abandoned": 0}
    assert two.generation_tokens == one.generation_tokens == sum(p.steps[0].calls[0].output_tokens for p in plans)
    # cell 0 = replicas r0, r2 and the tasks hashing to 0
    cell0 = sum(1 for p in plans if shard_of(p.task_id, 2) == 0)
    assert two.per_replica["r0"]["requests"] + two.per_replica["r2"]["requests"] == cell0
    with pytest.raises(ValueError, match="shards must be"):
        simulate_sharded(lambda: plans, fleet[:1], shards=2)


def test_rejected_prompts_fail_over_as_http_500():
    plans = chat_plans(40, rate=2.0, seed=5, prompt=(1500, 2000), out=(10, 20))
    sink = MemorySink()
    summ = simulate(plans, [ReplicaSpec("r0"), ReplicaSpec("r1")], sink=sink, seed=1, start_time_ns=T0,
                    faults=[FaultEvent(0, "r0", "kv_cut", 0.999)], gateway_retries=0)  # r0 holds ~400 tokens
    spans = sink.spans_by_name()
    # rejected by the engine (finish reason "error", which the span does not carry): no token, no TTFT
    errors = [a for _, _, a in spans["llm_request"] if "gen_ai.latency.time_to_first_token" not in a
              and a["gen_ai.usage.completion_tokens"] == 0]
    failed = [a for _, _, a in spans["chat meta-llama/Llama-3.1-8B-Instruct"] if a.get("error.type") == "http.500"]
    assert errors and len(failed) == len(errors)
    # every failed attempt was retried, except the last one of each task that ran out of attempts
    assert summ.client_retries == len(failed) - summ.tasks["failure"]
    assert summ.tasks["success"] + summ.tasks["failure"] == 40 and summ.tasks["success"] > 30


def test_session_affinity_keeps_a_task_on_one_replica():
    plan = TaskPlan("sess-42", "copilot", "acme", 0.0, tuple(StepPlan(f"s{i}", (CallPlan(300, 10),)) for i in range(6)))
    sink = MemorySink()
    simulate([plan], [ReplicaSpec(f"r{i}") for i in range(4)], sink=sink, policy="session_affinity", seed=1)
    replicas = {a["gateway.replica"] for _, _, a in sink.spans_by_name()["gateway.attempt"]}
    assert len(replicas) == 1


def test_otlp_http_sink_through_the_receiver(store, tmp_path):
    from collectors import receiver as receiver_mod
    from serving.emulator.otlp import OtlpHttpSink

    receiver = receiver_mod.Receiver(receiver_mod.ReceiverConfig(port=0, spool_dir=tmp_path / "spool",
                                                                 batch_max_seconds=0.1), store).start()
    try:
        sink = OtlpHttpSink(receiver.url)
        plans = chat_plans(25, rate=2.0, seed=13)
        summ = simulate(plans, [ReplicaSpec("r0"), ReplicaSpec("r1")], sink=sink, seed=1, start_time_ns=T0,
                        span_batch=40)
        sink.close()
        assert receiver.flush(30)
    finally:
        receiver.stop()
    assert store.scalar("SELECT count() FROM otel_traces", tag="test.sim") == summ.spans == 125
    assert store.scalar("SELECT count() FROM llm_calls WHERE call_source = 'engine'", tag="test.sim") == 25
    points = store.scalar("SELECT count() FROM otel_metrics_gauge", tag="test.sim") + \
        store.scalar("SELECT count() FROM otel_metrics_sum", tag="test.sim") + \
        store.scalar("SELECT count() FROM otel_metrics_histogram", tag="test.sim")
    assert points == summ.metric_points


def test_span_mode_does_not_change_behaviour():
    plans = chat_plans(150, rate=8.0, seed=17, prompt=(500, 1500), out=(100, 300))
    fleet = [ReplicaSpec("r0"), ReplicaSpec("r1")]
    kw = dict(seed=3, retry_policy=RetryPolicy(timeout_s=4.0), faults=[FaultEvent(5.0, "r1", "slowdown", 4.0)])
    runs = [simulate(plans, fleet, sink=MemorySink(), spans=mode, **kw) for mode in ("all", "none")]
    fields = ("tasks", "attempts", "engine_requests", "client_retries", "timeouts", "generation_tokens", "metric_points")
    assert [getattr(runs[0], f) for f in fields] == [getattr(runs[1], f) for f in fields]
    assert runs[0].timeouts > 0 and runs[1].spans == 0
