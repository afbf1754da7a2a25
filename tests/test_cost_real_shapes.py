"""Cost truth with the real producers: the task SDK -> the real gateway -> scripted replicas that answer
as vLLM does, every span through the OTLP receiver; vLLM's own llm_request spans re-issued from the
captured ones (tests/fixtures/vllm-0.32-cpu-captured, exact attribute types and resource) with the
trace context the replica received. The right values, worked out by hand, asserted exactly.
"""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest

from collectors.ingest import ingest_traces
from schema import jobs
from tests.stub_upstream import Behaviour
from serving.sdk import CallFailed, task
from tests.producers import (MODEL, captured_spans, scrape, vllm_llm_request, vllm_metrics_page,
                             vllm_request)
from tests.test_cost_support import fleet_yaml, sync

EXACT = dict(rel=1e-12, abs=1e-12)
MESSAGES = [{"role": "user", "content": "hello"}]



def _attempt(store, task_id) -> dict:
    rows = store.query("SELECT span_id, start_time, end_time, prompt_tokens, cached_tokens, output_tokens, error_class "
                       "FROM llm_calls WHERE task_id = {t:String} AND call_source = 'gateway' ORDER BY start_time",
                       {"t": task_id}, tag="test").result_rows
    keys = ("span_id", "start", "end", "prompt", "cached", "output", "error_class")
    return dict(zip(keys, rows[-1]))


def _engine_spans(store, stub, attempt, replica, example, completions, prompt):
    """vLLM's spans for the stub's last request: one per choice, same parent and request id."""
    # Inside the attempt span: a quarter of its length (at most 1 ms) in from each end; the gateway
    # can relay a stub's answer in under 2 ms.
    first, last = int(attempt["start"].timestamp() * 1e9), int(attempt["end"].timestamp() * 1e9)
    margin = min(1_000_000, (last - first) // 4)
    start_ns, end_ns = first + margin, last - margin
    traceparent = stub.requests[-1][2]["traceparent"]
    spans = [vllm_llm_request(example, traceparent=traceparent, start_ns=start_ns, end_ns=end_ns, prompt=prompt,
                              completion=c, replica=replica, request_id="chatcmpl-n") for c in completions]
    assert ingest_traces(store, vllm_request(spans)).accepted == len(spans)


def _run_jobs(store, task_id):
    start = store.scalar("SELECT min(start_time) FROM llm_calls WHERE task_id = {t:String}", {"t": task_id}, tag="test")
    start = start.replace(second=0, microsecond=0, tzinfo=None)
    jobs.run_jobs(store, start=start, end=start + timedelta(minutes=3))


def _calls(store, task_id):
    return store.query_df(
        "SELECT call_id, call_source, any(model) AS model, any(finish_reason) AS finish_reason, sum(prompt_tokens) AS prompt, "
        "sum(cached_tokens) AS cached, max(cached_estimated) AS estimated, sum(output_tokens) AS output, "
        "sum(work) AS work, any(error_class) AS error_class, max(partial) AS partial "
        "FROM call_costs WHERE task_id = {t:String} GROUP BY call_id, call_source", {"t": task_id}, tag="test")


def _one_call(rig, behaviour, *, replica, stream=True, timeout_s=10.0, **kwargs):
    stub, url = rig.stub(replica, lambda req, headers: behaviour)
    client, provider = rig.client(rig.gateway([(replica, url)]), timeout_s=timeout_s)
    with task("chat", tenant="acme", tracer_provider=provider) as t:
        try:
            client.chat(model=MODEL, messages=MESSAGES, stream=stream, step="answer", **kwargs)
            t.succeed()
        except CallFailed as exc:
            t.fail(exc.error_type)
    client.close()
    rig.flush()
    return t.task_id, stub


@pytest.fixture
def fleet(module_store):
    sync(module_store, fleet_yaml(w_prefill=0.25, w_decode=1.0, replicas=("r-cache", "r-n2", "r-crash", "r-abort",
                                                                           "r-model", "r-direct")))


def test_cached_prompt_tokens_reach_the_cost(rig, fleet):
    # prompt 1000, 900 of them prefix-cache hits (usage.prompt_tokens_details), 20 output
    task_id, stub = _one_call(rig, Behaviour(prompt_tokens=1000, cached_tokens=900, tokens=20), replica="r-cache")
    attempt = _attempt(rig.store, task_id)
    assert (attempt["prompt"], attempt["cached"], attempt["output"]) == (1000, 900, 20)  # the gateway recorded them
    _engine_spans(rig.store, stub, attempt, "r-cache", "stream_stop", [20], 1000)  # vLLM's span: no cached count
    _run_jobs(rig.store, task_id)
    call = _calls(rig.store, task_id).iloc[0]
    # work = 0.25 x (1000 - 900) + 20 = 45
    assert (call["call_source"], call["prompt"], call["cached"], call["estimated"]) == ("engine", 1000, 900, 0)
    assert call["work"] == pytest.approx(45, **EXACT)


def test_n2_is_one_call_with_the_prompt_once(rig, fleet):
    # n = 2: vLLM answers usage prompt 10, completion 64 and exports one span per choice (32 + 32)
    task_id, stub = _one_call(rig, Behaviour(prompt_tokens=10, tokens=64), replica="r-n2", n=2)
    attempt = _attempt(rig.store, task_id)
    _engine_spans(rig.store, stub, attempt, "r-n2", "n2_stream", [32, 32], 10)
    _run_jobs(rig.store, task_id)
    calls = _calls(rig.store, task_id)
    assert len(calls) == 1
    call = calls.iloc[0]
    # output 64, work 0.25 x 10 + 64 = 66.5 (not one span's 32 and 34.5)
    assert (call["prompt"], call["output"]) == (10, 64)
    assert call["work"] == pytest.approx(66.5, **EXACT)


def test_crashed_stream_keeps_its_prefill(rig, fleet):
    # a replica prefilled a 200-token prompt, streamed 6 tokens and died: vLLM exports no span
    task_id, _ = _one_call(rig, Behaviour(prompt_tokens=200, tokens=50, crash_after=6), replica="r-crash")
    attempt = _attempt(rig.store, task_id)
    # the first chunk carried the prompt's usage (continuous_usage_stats): the gateway knows it
    assert (attempt["prompt"], attempt["output"], attempt["error_class"]) == (200, 6, "upstream_error")
    _run_jobs(rig.store, task_id)
    call = _calls(rig.store, task_id).iloc[0]
    # work = 0.25 x 200 + 6 = 56
    assert (call["call_source"], call["prompt"], call["output"], call["partial"]) == ("gateway", 200, 6, 1)
    assert call["work"] == pytest.approx(56, **EXACT)
    assert call["error_class"] == "upstream_error"


def test_client_abort_is_costed_with_its_prefill(rig, fleet):
    # the client gives up after 0.4 s of a slow stream; real vLLM exports no span for an abort
    task_id, _ = _one_call(rig, Behaviour(prompt_tokens=300, tokens=200, token_gap_s=0.05), replica="r-abort",
                           timeout_s=0.4)
    attempt = _attempt(rig.store, task_id)
    streamed = attempt["output"]
    assert attempt["prompt"] == 300 and 1 <= streamed < 200
    _run_jobs(rig.store, task_id)
    call = _calls(rig.store, task_id).iloc[0]
    assert (call["call_source"], call["prompt"], call["output"]) == ("gateway", 300, streamed)
    assert call["work"] == pytest.approx(0.25 * 300 + streamed, **EXACT)
    assert call["error_class"] == "timeout"  # the client timed out; the gateway only saw it leave


def test_finish_reason_and_model_recovered_for_the_engine_row(rig, fleet):
    task_id, stub = _one_call(rig, Behaviour(prompt_tokens=21, tokens=32), replica="r-model")
    attempt = _attempt(rig.store, task_id)
    _engine_spans(rig.store, stub, attempt, "r-model", "nonstream_length", [32], 21)
    engine = rig.store.query("SELECT finish_reason, model FROM llm_calls WHERE call_source = 'engine' "
                             "AND parent_span_id = {p:String}", {"p": attempt["span_id"]}, tag="test").result_rows
    assert engine == [("", "")]  # vLLM 0.32 spans carry neither (and this replica was never scraped)
    _run_jobs(rig.store, task_id)
    call = _calls(rig.store, task_id).iloc[0]
    assert (call["call_source"], call["finish_reason"], call["model"]) == ("engine", "stop", MODEL)


def test_model_of_direct_engine_traffic_from_the_scraped_label(rig, fleet):
    # traffic straight to vLLM (no gateway, no SDK): only the replica's /metrics names the model
    now_ns = int(rig.store.scalar("SELECT toUnixTimestamp64Nano(now64(9))", tag="test"))
    scrape(rig.store, vllm_metrics_page([{"running": 1}], model="tiny-llama"), replica="r-direct", at_ns=now_ns)
    span = vllm_llm_request("x_request_id_only", traceparent=None, start_ns=now_ns + 1_000_000,
                            end_ns=now_ns + 50_000_000, prompt=18, completion=4, replica="r-direct")
    ingest_traces(rig.store, vllm_request([span]))
    row = rig.store.query("SELECT model, model_scraped FROM llm_calls WHERE span_id = {s:String}",
                          {"s": span["span_id"]}, tag="test").result_rows
    assert row == [("tiny-llama", 1)]


def test_startup_spans_are_stored_and_are_not_calls(module_store):
    before = module_store.scalar("SELECT count() FROM llm_calls", tag="test")
    startup = captured_spans()["startup_span_examples"]
    assert ingest_traces(module_store, vllm_request(startup)).accepted == 3
    names = module_store.query("SELECT SpanName FROM otel_traces WHERE TraceId = {t:String} ORDER BY SpanName",
                               {"t": startup[0]["trace_id"]}, tag="test").result_rows
    assert [n[0] for n in names] == ["Executor init", "Initialize model", "Worker init"]
    assert module_store.scalar("SELECT count() FROM llm_calls", tag="test") == before


def test_gateway_asks_for_usage_but_relays_only_what_the_client_asked(rig):
    stub, url = rig.stub("r-usage", lambda req, headers: Behaviour(prompt_tokens=7, tokens=3))
    gateway = rig.gateway([("r-usage", url)])
    body = {"model": MODEL, "messages": MESSAGES, "stream": True}
    text = httpx.post(gateway + "/v1/chat/completions", json=body, timeout=10).text
    assert stub.requests[-1][1]["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    events = [e for e in text.split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert not any('"choices": []' in e or '"choices":[]' in e for e in events)  # no usage-only chunk
    asked = httpx.post(gateway + "/v1/chat/completions", json=body | {"stream_options": {"include_usage": True}},
                       timeout=10).text
    assert any('"choices": []' in e for e in asked.split("\n\n"))
    rig.flush()
    rows = rig.store.query("SELECT prompt_tokens FROM llm_calls WHERE call_source = 'gateway' AND replica = 'r-usage'",
                           tag="test").result_rows
    assert rows == [(7,), (7,)]
