"""Workloads: plans from the real traces, prompt text, and the live runner's failure behaviour."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from schema import semconv as sc
from serving.gateway.server import ServerThread
from serving.gateway.stub import Behaviour, StubUpstream
from serving.plans import CallPlan, RetryPolicy, StepPlan, TaskPlan
from serving.workloads import build_plans, load_trace, prompt_text, run_live


def test_trace_loading_matches_the_files(traces_dir):
    azure = load_trace("azure", traces_dir)
    mooncake = load_trace("mooncake", traces_dir)
    # First rows of the files (serving/workloads/data): Azure 374/44 at t=0; Mooncake 6758/500, ids 0..13.
    assert (azure.arrival_s[0], azure.prompt_tokens[0], azure.output_tokens[0]) == (0.0, 374, 44)
    assert mooncake.hash_ids[0] == tuple(range(14)) and mooncake.prompt_tokens[0] == 6758
    assert len(mooncake) == 12031
    assert 3400 < azure.span_s < 3700 and 3400 < mooncake.span_s < 3700
    with pytest.raises(ValueError, match="unknown trace"):
        load_trace("sharegpt", traces_dir)
    with pytest.raises(FileNotFoundError, match="trace file not found"):
        load_trace("azure", traces_dir / "nowhere")


def test_plans_replay_every_call_of_the_window_once(traces_dir):
    tr = load_trace("azure", traces_dir)
    plans = build_plans("azure", traces_dir, duration_s=600, seed=3)
    expected = int((tr.arrival_s < 600).sum())
    assert sum(p.n_calls for p in plans) == expected
    calls = [c for p in plans for s in p.steps for c in s.calls]
    assert [c.prompt_tokens for c in calls] == tr.prompt_tokens[:expected].tolist()
    assert [c.output_tokens for c in calls] == tr.output_tokens[:expected].tolist()
    assert [p.arrival_s for p in plans] == sorted(p.arrival_s for p in plans)
    assert plans == build_plans("azure", traces_dir, duration_s=600, seed=3)  # reproducible
    by_type = Counter(p.task_type for p in plans)
    assert set(by_type) == {"chat", "copilot", "research_agent"}
    for p in plans:
        if p.task_type == "chat":
            assert p.n_calls == 1 and p.priority == "interactive"
        elif p.task_type == "copilot" and p is not plans[-1]:
            assert 10 <= p.n_calls <= 20
        elif p.task_type == "research_agent" and p is not plans[-1]:
            assert 40 <= p.n_calls <= 60 and p.priority == "batch"
            assert p.steps[0].name == "plan" and p.steps[-1].name == "synthesize"
            assert max(len(s.calls) for s in p.steps) >= 4  # fan-out


def test_rate_scale_loop_and_offset(traces_dir):
    tr = load_trace("mooncake", traces_dir)
    double = build_plans("mooncake", traces_dir, rate_scale=2.0, duration_s=300, mix={"chat": 1})
    assert len(double) == int((tr.arrival_s / 2 < 300).sum())  # chat only: one call per task
    # Two loops of the trace: the second one's blocks are offset so loops share no prefix.
    window = build_plans("mooncake", traces_dir, duration_s=60, start_offset_s=tr.span_s, mix={"chat": 1})
    first = build_plans("mooncake", traces_dir, duration_s=60, mix={"chat": 1})
    assert [p.steps[0].calls[0].prompt_tokens for p in window] == [p.steps[0].calls[0].prompt_tokens for p in first]
    assert window[0].arrival_s == pytest.approx(tr.span_s)
    stride = max(max(h) for h in tr.hash_ids if h) + 1
    assert window[0].steps[0].calls[0].prefix_blocks == tuple(b + stride for b in first[0].steps[0].calls[0].prefix_blocks)


def test_azure_tasks_share_their_context_prefix(traces_dir):
    plans = build_plans("azure", traces_dir, duration_s=300, mix={"copilot": 1})
    task_calls = [c for s in plans[0].steps for c in s.calls]
    blocks = [c.prefix_blocks for c in task_calls]
    longest = max(blocks, key=len)
    assert all(b == longest[: len(b)] for b in blocks)  # every call's blocks prefix the longest
    assert all(len(b) == c.prompt_tokens // 512 for b, c in zip(blocks, task_calls))
    other = [c.prefix_blocks for s in plans[1].steps for c in s.calls]
    assert not set(longest) & {x for b in other for x in b}


def test_bad_arguments_are_named(traces_dir):
    with pytest.raises(ValueError, match="unknown task type 'batchjob'"):
        build_plans("azure", traces_dir, mix={"batchjob": 1.0})
    with pytest.raises(ValueError, match="rate_scale"):
        build_plans("azure", traces_dir, rate_scale=0)


def test_prompt_text_lengths_and_shared_blocks():
    a = prompt_text(1200, (7, 8, 9), "call-a")
    b = prompt_text(900, (7, 8), "call-b")
    wa, wb = a.split(), b.split()
    assert (len(wa), len(wb)) == (1200, 900)
    assert wa[:900] == wb[:900]  # 512 + 388 tokens of blocks 7, 8 are identical
    assert prompt_text(300, (), "x").split() != prompt_text(300, (), "y").split()


def _plan(task_id, n_steps, tokens=3):
    return TaskPlan(task_id, "copilot", "acme", 0.0,
                    tuple(StepPlan(f"s{i}", (CallPlan(20, tokens),)) for i in range(1, n_steps + 1)), model="m")


def test_live_runner_outcomes_give_up_and_abandon():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def script(req, headers):
        baggage = headers.get("baggage", "")
        if "task.id=fails" in baggage and "task.step=s2" in baggage:
            return Behaviour(status=503)
        if "task.id=slow" in baggage:
            return Behaviour(tokens=2, delay_s=30.0)  # never answers before the user leaves
        return Behaviour(tokens=req.get("max_tokens", 1))

    stub = StubUpstream("r0", script)
    plans = [_plan("ok", 3, tokens=4), _plan("fails", 3), _plan("slow", 2)]
    policy = RetryPolicy(max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.02, abandon_after_s=2.0)
    # 2 s: "ok" (3 calls) and "fails" (3 calls, 2 backoffs) finish well inside it on a loaded CI
    # machine (0.3 s did not: all three tasks were abandoned there); "slow" never does.
    with ServerThread(stub) as server:
        report = asyncio.run(run_live(plans, server.url + "/v1", policy=policy, tracer_provider=provider))
    assert report.outcomes == Counter({"success": 1, "failure": 1, "abandoned": 1})
    roots = {s.attributes[sc.TASK_ID]: s for s in exporter.get_finished_spans() if s.name == "task copilot"}
    assert roots["fails"].attributes[sc.ERROR_TYPE] == "step_failed:http.503"
    assert roots["slow"].attributes[sc.ERROR_TYPE] == "deadline"
    # "fails": step 1 once, step 2 twice (both 503), step 3 never ran.
    calls = [s for s in exporter.get_finished_spans() if s.name == "chat m" and s.attributes[sc.TASK_ID] == "fails"]
    assert sorted((s.attributes[sc.TASK_STEP], s.attributes[sc.TASK_ATTEMPT]) for s in calls) == \
        [("s1", 1), ("s2", 1), ("s2", 2)]
    slow = [s for s in exporter.get_finished_spans() if s.name == "chat m" and s.attributes[sc.TASK_ID] == "slow"]
    assert [(s.attributes[sc.ERROR_TYPE], s.attributes[sc.CLIENT_PARTIAL]) for s in slow] == [("cancelled", False)]
    ok_calls = [s for s in exporter.get_finished_spans() if s.name == "chat m" and s.attributes[sc.TASK_ID] == "ok"]
    assert [s.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] for s in ok_calls] == [4, 4, 4]
    sent = [r for r in stub.requests if "task.id=ok" in r[2]["baggage"]]
    assert all(r[1]["max_tokens"] == 4 and r[1]["ignore_eos"] is True for r in sent)
    assert all(len(r[1]["messages"][0]["content"].split()) == 20 for r in sent)
