"""The API-server front end (serving/emulator/frontend.py): a FIFO server the arrivals queue behind."""

from __future__ import annotations

import pytest

from serving.emulator.frontend import FrontEnd
from serving.emulator.profiles import PROFILES, get_profile


@pytest.mark.parametrize("name", ["h100-llama-3.1-8b", "a100-llama-3.1-8b", "4xh100-llama-3.1-70b"])
def test_published_gpu_profiles_keep_the_constant_overhead(name):
    prof = PROFILES[name]
    assert prof.frontend_input_s is None
    fe = FrontEnd(prof)
    assert not fe.modelled
    # two arrivals at once: each joins the queue input_overhead_s after arriving, no queueing
    assert fe.admit(1.0, engine_busy=True) == 1.0 + prof.input_overhead_s
    assert fe.admit(1.0, engine_busy=True) == 1.0 + prof.input_overhead_s
    fe.outputs(1.0, 10_000, engine_busy=True)  # output processing costs nothing
    assert fe.admit(2.0, engine_busy=False) == 2.0 + prof.input_overhead_s


def test_arrivals_queue_behind_inputs_and_output_processing():
    fe = FrontEnd(get_profile("h100-llama-3.1-8b", frontend_input_s=0.010, frontend_per_token_s=0.001,
                              frontend_busy_share=0.5))
    assert fe.modelled
    assert fe.admit(1.0, engine_busy=False) == pytest.approx(1.010)  # idle host: 10 ms of input
    # sent 5 ms later while the engine steps: waits for the first (1.010), then 10 ms at half speed
    assert fe.admit(1.005, engine_busy=True) == pytest.approx(1.030)
    # a step ending at 1.020 made 10 tokens: processed after the queued work, 10 x 1 ms at half speed
    fe.outputs(1.020, 10, engine_busy=True)
    assert fe.free_at == pytest.approx(1.050)
    assert fe.admit(1.040, engine_busy=False) == pytest.approx(1.060)
    # the counter is cumulative: no new tokens, no work; 4 new ones from 2.0 on an idle front end
    fe.outputs(1.5, 10, engine_busy=True)
    assert fe.free_at == pytest.approx(1.060)
    fe.outputs(2.0, 14, engine_busy=False)
    assert fe.free_at == pytest.approx(2.004)
    # a restarted engine counts from 0 and nothing is queued
    fe.reset(3.0)
    fe.outputs(3.0, 2, engine_busy=True)
    assert fe.free_at == pytest.approx(3.004)
    assert fe.admit(3.001, engine_busy=True) == pytest.approx(3.024)


def test_cpu_tiny_profile_models_its_front_end_with_the_measured_input_time():
    prof = PROFILES["cpu-tiny-llama"]
    assert prof.frontend_input_s == prof.input_overhead_s > 0
    assert prof.frontend_per_token_s > 0 and prof.frontend_busy_share == 0.5
    # a lone request on an idle replica: TTFT = input + one prefill step, as batch1_ttft_s says
    assert FrontEnd(prof).admit(0.0, engine_busy=False) + prof.step_time(100, 0, 100) == pytest.approx(
        prof.batch1_ttft_s(100))


def test_a_steps_outputs_are_picked_up_after_the_work_queued_ahead():
    # vLLM stamps TTFT when its API server processes the step's outputs: outputs() says when that is
    fe = FrontEnd(get_profile("h100-llama-3.1-8b", frontend_input_s=0.010, frontend_per_token_s=0.002,
                              frontend_busy_share=0.5))
    assert fe.admit(1.0, engine_busy=False) == pytest.approx(1.010)
    # a step ending at 1.004 while the input runs: picked up when the input is done (1.010); its 3
    # tokens then take 3 x 2 ms at half speed -> free at 1.022
    assert fe.outputs(1.004, 3, engine_busy=True) == pytest.approx(1.010)
    assert fe.free_at == pytest.approx(1.022)
    # the next step ends at 1.030, after that work: picked up at once; 1 token at full speed (engine idle)
    assert fe.outputs(1.030, 4, engine_busy=False) == 1.030
    assert fe.free_at == pytest.approx(1.032)
    # no new tokens: nothing queued, picked up at the step's end even though work is queued
    assert fe.outputs(1.031, 4, engine_busy=True) == 1.031
    # model off (GPU profiles): always the step's end
    off = FrontEnd(PROFILES["h100-llama-3.1-8b"])
    off.admit(1.0, engine_busy=True)
    assert off.outputs(1.001, 50, engine_busy=True) == 1.001


def test_span_ttft_ends_at_the_front_ends_pickup_and_prefill_at_the_engines_first_token():
    from schema import semconv as sc
    from serving.emulator.engine import EngineRequest
    from serving.emulator.spans import engine_span_attributes

    req = EngineRequest("r1", 100, 3, arrival=1.0)
    req.queued, req.scheduled, req.first_token, req.last_token, req.finished = 1.010, 1.012, 1.020, 1.030, 1.030
    req.out, req.finish_reason = 3, "stop"
    a = engine_span_attributes(req, "r1")
    assert a[sc.GEN_AI_LATENCY_TTFT] == pytest.approx(0.020)  # no pickup known: the engine's first token
    req.first_seen = 1.026
    a = engine_span_attributes(req, "r1")
    assert a[sc.GEN_AI_LATENCY_TTFT] == pytest.approx(0.026)
    assert a[sc.GEN_AI_LATENCY_PREFILL] == pytest.approx(0.008)  # engine timestamps, as vLLM's
    assert a[sc.GEN_AI_LATENCY_DECODE] == pytest.approx(0.010)
    assert a[sc.GEN_AI_LATENCY_QUEUE] == pytest.approx(0.002)


def test_step_outputs_marks_the_first_tokens_of_the_step_with_the_pickup_time():
    from serving.emulator.engine import Engine, EngineRequest
    from serving.emulator.frontend import step_outputs
    from serving.emulator.spans import engine_span_attributes
    from schema import semconv as sc

    # steps: 10 ms + 0.1 ms per prefill token + 1 ms per decoding sequence; front end: 5 ms input,
    # 20 ms per output token, full speed. Driven one step at a time, as the live server does.
    prof = get_profile("cpu-tiny-llama", base_s=0.010, prefill_per_token_s=0.0001, decode_per_seq_s=0.001,
                       frontend_input_s=0.005, frontend_per_token_s=0.020, frontend_busy_share=1.0)
    eng, fe = Engine(prof), FrontEnd(prof)

    def step(finished_expected=(), during=None):
        eng.plan(max_steps=1)
        if during:
            during()  # an arrival handed over while the step runs
        done = eng.commit()
        assert [r.request_id for r in done] == list(finished_expected)
        return step_outputs(fe, eng, done, engine_busy=True)

    a = EngineRequest("a", 100, 5, arrival=0.0)
    eng.add(a, now=fe.admit(0.0, engine_busy=False))  # joins at 0.005
    # a's prefill step 0.005 -> 0.025 (10 + 100 x 0.1 ms): nothing queued ahead, picked up at once
    assert step() == pytest.approx(0.025) and eng.now == pytest.approx(0.025)
    assert a.first_seen == pytest.approx(0.025) and fe.free_at == pytest.approx(0.045)
    b = EngineRequest("b", 50, 3, arrival=0.026)
    assert fe.admit(0.026, engine_busy=True) == pytest.approx(0.050)  # behind a's token work, + 5 ms
    assert step() == pytest.approx(0.050)  # a's decode 0.025 -> 0.036, picked up after b's input
    assert step() == pytest.approx(0.070)  # 0.036 -> 0.047; the front end is 20 ms a token behind
    # handed over at 0.050 while the next step runs (0.047 -> 0.058)
    assert step(during=lambda: eng.add(b, now=0.050)) == pytest.approx(0.090)
    # b's prefill (5 ms) + a's last decode (1 ms) + 10 ms: 0.058 -> 0.074; a finishes, b's first token
    assert step(["a"]) == pytest.approx(0.110)
    assert b.first_token == pytest.approx(0.074) and b.first_seen == pytest.approx(0.110)
    assert a.first_seen == pytest.approx(0.025)  # set once, at its own first token
    assert fe.free_at == pytest.approx(0.150)  # a's last token and b's first, 20 ms each
    # b's span: TTFT to the pickup (0.110 - 0.026), queue and prefill on the engine's timestamps
    b.out, b.last_token, b.finished, b.finish_reason = 1, 0.074, 0.074, "stop"
    attrs = engine_span_attributes(b, "b")
    assert attrs[sc.GEN_AI_LATENCY_TTFT] == pytest.approx(0.084)
    # vLLM's QUEUED event is at the step boundary where the engine core takes b in (0.058) and it is
    # scheduled there: no queue time; the 8 ms behind the step in flight is in TTFT before it
    assert attrs[sc.GEN_AI_LATENCY_QUEUE] == 0.0
    assert attrs[sc.GEN_AI_LATENCY_PREFILL] == pytest.approx(0.016)


def test_virtual_time_spans_end_ttft_at_the_front_ends_pickup(monkeypatch):
    from schema import semconv as sc
    from serving.emulator.fleet_sim import ReplicaSpec, simulate
    from serving.emulator.otlp import MemorySink, span_attrs
    from serving.plans import CallPlan, StepPlan, TaskPlan

    # steps: 10 ms + 0.1 ms per prefill token + 1 ms per decoding sequence; front end: no input time,
    # 40 ms per output token, full speed; requests reach the replica 1.5 ms after their task starts
    monkeypatch.setitem(PROFILES, "test-front-end", PROFILES["cpu-tiny-llama"].with_overrides(
        name="test-front-end", base_s=0.010, prefill_per_token_s=0.0001, decode_per_seq_s=0.001,
        frontend_input_s=0.0, frontend_per_token_s=0.040, frontend_busy_share=1.0))
    plans = [TaskPlan("a", "chat", "acme", 0.0, (StepPlan("s", (CallPlan(100, 10, max_tokens=10),)),)),
             TaskPlan("b", "chat", "acme", 0.025, (StepPlan("s", (CallPlan(50, 2, max_tokens=2),)),))]
    sink = MemorySink()
    simulate(plans, [ReplicaSpec("r0", profile="test-front-end")], sink=sink, spans="engine",
             start_time_ns=1_796_000_000_000_000_000)
    spans = sorted((span_attrs(s) for _, s in sink.spans() if s.name == "llm_request"),
                   key=lambda a: a[sc.GEN_AI_USAGE_PROMPT_TOKENS], reverse=True)
    a, b = spans
    # a arrives 0.0015, joins at once, prefill 0.0015 -> 0.0215: nothing queued ahead of its first token
    assert a[sc.GEN_AI_LATENCY_TTFT] == pytest.approx(0.020)
    # a's first token costs the front end 40 ms from 0.0015 (its hand-over, the last work): free at
    # 0.0415, so b (arriving 0.0265) joins then; a's decode run is cut there after 2 steps (0.0435), whose
    # 2 tokens are queued from 0.0415 -> free at 0.1215; b's prefill with a's decode: 0.0435 -> 0.0595
    # b is taken in at that step's end (0.0435) and scheduled there: no queue time (vLLM's QUEUED event)
    assert b[sc.GEN_AI_LATENCY_QUEUE] == 0.0
    assert b[sc.GEN_AI_LATENCY_PREFILL] == pytest.approx(0.016)
    # b's first token waits for that backlog: TTFT 0.1215 - 0.0265 (the engine's first token: 0.033)
    assert b[sc.GEN_AI_LATENCY_TTFT] == pytest.approx(0.095)
