"""Live mode: emulated replicas over HTTP with the stock openai client, /metrics, spans, faults."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from serving.emulator.live import start_replicas
from serving.emulator.profiles import get_profile
from serving.emulator.stats import ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture
def replica():
    exporters = {}

    def factory(rid):
        exporters[rid] = InMemorySpanExporter()
        return exporters[rid]

    fleet = start_replicas(1, "h100-llama-3.1-8b", span_exporter_factory=factory)
    r = fleet[0]
    r.spans = lambda: (r.server.tracer_provider.force_flush(), exporters[r.replica_id].get_finished_spans())[1]
    yield r
    fleet.stop()


def metric_value(text: str, name: str, **labels) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not in /metrics")


def test_openai_client_streaming_and_not(replica):
    client = openai.OpenAI(base_url=replica.url + "/v1", api_key="EMPTY")
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say hi"}],
                                       extra_body={"emulator_output_tokens": 12},
                                       extra_headers={"X-Request-Id": "abc123"})
    assert r.id == "chatcmpl-abc123"
    assert r.usage.completion_tokens == 12 and r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.role == "assistant" and r.choices[0].message.content

    stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Count"}],
                                            max_tokens=8, stream=True,
                                            stream_options={"include_usage": True, "continuous_usage_stats": True},
                                            extra_body={"emulator_output_tokens": 50})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content) == 8
    assert content[-1].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8
    # continuous usage: cumulative on every chunk, take the last, never sum
    assert [c.usage.completion_tokens for c in content] == list(range(1, 9))

    comp = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=5,
                                     extra_body={"ignore_eos": True})
    assert comp.object == "text_completion" and comp.usage.completion_tokens == 5
    assert comp.choices[0].finish_reason == "length"

    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]

    spans = replica.spans()
    assert len(spans) == 3
    first = next(s for s in spans if s.attributes["gen_ai.request.id"] == "chatcmpl-abc123")
    assert first.name == "llm_request" and first.kind.name == "SERVER"
    assert first.attributes["gen_ai.usage.completion_tokens"] == 12
    # vLLM 0.32: no finish reasons, no model, no operation name on the span
    assert not {"gen_ai.response.finish_reasons", "gen_ai.request.model", "gen_ai.operation.name"} & set(first.attributes)
    assert first.instrumentation_scope.name == "vllm.tracing.otel"
    res = first.resource.attributes
    assert res["service.instance.id"] == replica.replica_id and res["gpu.type"] == "H100" and res["gpu.count"] == "1"
    assert res["vllm.instrumenting_module_name"] == "vllm.llm_engine" and res["vllm.process_id"].isdigit()
    # batch 1: TTFT cannot be below the profile's (input overhead + one prefill step)
    prompt = first.attributes["gen_ai.usage.prompt_tokens"]
    assert first.attributes["gen_ai.latency.time_to_first_token"] >= get_profile("h100-llama-3.1-8b").batch1_ttft_s(prompt)
    # request parameters always present: max_tokens derived from the context when the client set none
    assert first.attributes["gen_ai.request.max_tokens"] == get_profile("h100-llama-3.1-8b").max_model_len - prompt
    assert (first.attributes["gen_ai.request.top_p"], first.attributes["gen_ai.request.temperature"],
            first.attributes["gen_ai.request.n"]) == (1.0, 1.0, 1)
    comp_span = next(s for s in spans if s.attributes["gen_ai.request.id"].startswith("cmpl-"))
    assert comp_span.attributes["gen_ai.request.id"].endswith("-0")  # vLLM suffixes the prompt index


def test_usage_has_prompt_tokens_details_only_when_tokens_were_cached(replica):
    """vLLM 0.32 sets ``usage.prompt_tokens_details`` only for a request with cached prompt tokens: a
    miss has none (CONFORMANCE.md), so a reader cannot tell it from a server without
    --enable-prompt-tokens-details and the cost job estimates it from the counters."""
    prompt = " ".join(f"word{i}" for i in range(200))  # many KV blocks: the repeat hits the prefix cache
    usages = []
    for stream in (False, False, True):
        body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 3,
                "ignore_eos": True, "stream": stream, "stream_options": {"include_usage": True} if stream else None}
        r = httpx.post(replica.url + "/v1/chat/completions", json={k: v for k, v in body.items() if v is not None},
                       timeout=30)
        if stream:
            events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
            usages.append(events[-1]["usage"])
        else:
            usages.append(r.json()["usage"])
    miss, hit, hit_streamed = usages
    assert "prompt_tokens_details" not in miss
    assert hit["prompt_tokens_details"]["cached_tokens"] > 0
    assert hit_streamed["prompt_tokens_details"]["cached_tokens"] == hit["prompt_tokens_details"]["cached_tokens"]


def test_span_is_child_of_traceparent(replica):
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    r = httpx.post(replica.url + "/v1/chat/completions", headers={"traceparent": tp},
                   json={"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 3,
                         "temperature": 0.5})
    assert r.status_code == 200
    (span,) = replica.spans()
    assert format(span.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert format(span.parent.span_id, "016x") == "b7ad6b7169203331"
    assert span.attributes["gen_ai.request.max_tokens"] == 3
    assert span.attributes["gen_ai.request.temperature"] == 0.5
    r = httpx.post(replica.url + "/v1/chat/completions",
                   json={"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 3,
                         "temperature": 0})
    assert r.status_code == 200
    greedy = [sp for sp in replica.spans() if sp is not span and sp.attributes["gen_ai.request.id"] != span.attributes["gen_ai.request.id"]]
    assert len(greedy) == 1 and "gen_ai.request.temperature" not in greedy[0].attributes  # omitted at 0


def test_n2_is_two_engine_requests_with_one_parent(replica):
    tp = "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-01"
    r = httpx.post(replica.url + "/v1/chat/completions", headers={"traceparent": tp},
                   json={"model": MODEL, "messages": [{"role": "user", "content": "two"}], "n": 2,
                         "max_tokens": 6, "ignore_eos": True})
    body = r.json()
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert body["usage"]["completion_tokens"] == 12 and body["usage"]["prompt_tokens"] > 0
    spans = replica.spans()
    assert len(spans) == 2
    assert {sp.attributes["gen_ai.request.id"] for sp in spans} == {body["id"]}
    assert {format(sp.parent.span_id, "016x") for sp in spans} == {"c7ad6b7169203331"}
    assert [sp.attributes["gen_ai.usage.prompt_tokens"] for sp in spans] == [body["usage"]["prompt_tokens"]] * 2
    assert sorted(sp.attributes["gen_ai.usage.completion_tokens"] for sp in spans) == [6, 6]
    assert {sp.attributes["gen_ai.request.n"] for sp in spans} == {1}
    stream = httpx.post(replica.url + "/v1/chat/completions",
                        json={"model": MODEL, "messages": [{"role": "user", "content": "two"}], "n": 2, "stream": True,
                              "max_tokens": 4, "ignore_eos": True, "stream_options": {"include_usage": True}})
    chunks = [json.loads(ln[6:]) for ln in stream.text.splitlines() if ln.startswith("data: {")]
    finished = {c["choices"][0]["index"]: c["choices"][0]["finish_reason"] for c in chunks
                if c["choices"] and c["choices"][0]["finish_reason"]}
    assert finished == {0: "length", 1: "length"} and chunks[-1]["usage"]["completion_tokens"] == 8
    text = httpx.get(replica.url + "/metrics").text
    assert metric_value(text, "vllm:request_params_n_count") == 2  # once per client request
    assert metric_value(text, "vllm:request_params_n_sum") == 4
    assert metric_value(text, "vllm:request_success_total", finished_reason="length") == 4
    r = httpx.post(replica.url + "/v1/chat/completions",
                   json={"model": MODEL, "messages": [{"role": "user", "content": "x"}], "n": 2, "temperature": 0})
    assert r.status_code == 400 and "greedy" in r.json()["error"]["message"]


def test_context_limit_caps_output_or_rejects():
    fleet = start_replicas(1, "h100-llama-3.1-8b", profile_overrides={"max_model_len": 64})
    try:
        url = fleet[0].url + "/v1/completions"
        r = httpx.post(url, json={"model": MODEL, "prompt": "w", "max_tokens": 50, "ignore_eos": True,
                                  "emulator_prompt_tokens": 40})
        assert r.status_code == 200  # prompt + max_tokens over the context: answered, output capped
        assert (r.json()["usage"]["completion_tokens"], r.json()["choices"][0]["finish_reason"]) == (24, "length")
        r = httpx.post(url, json={"model": MODEL, "prompt": "w", "max_tokens": 5, "emulator_prompt_tokens": 70})
        assert r.status_code == 400 and r.json()["error"]["param"] == "input_tokens"
        r = httpx.post(url, json={"model": MODEL, "prompt": "w", "max_tokens": 65})
        assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    finally:
        fleet.stop()


def test_errors_have_vllm_shape(replica):
    r = httpx.post(replica.url + "/v1/chat/completions", json={"model": "nope", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 404
    err = r.json()["error"]
    assert err["code"] == 404 and err["type"] == "NotFoundError" and "nope" in err["message"]
    r = httpx.post(replica.url + "/v1/chat/completions", json={"model": MODEL, "messages": []})
    assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestError"
    r = httpx.post(replica.url + "/admin/faults", json={"kind": "slowdown", "value": -1})
    assert r.status_code == 400 and "slowdown" in r.json()["error"]["message"]
    r = httpx.post(replica.url + "/admin/faults", json={"kind": "error_rate", "value": {"503": 1.0}})
    assert r.status_code == 200 and r.json()["error_rate"] == {"503": 1.0}
    client = openai.OpenAI(base_url=replica.url + "/v1", api_key="EMPTY", max_retries=0)
    with pytest.raises(openai.InternalServerError) as exc:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
    assert exc.value.status_code == 503
    assert httpx.post(replica.url + "/admin/faults", json={"clear": True}).status_code == 200
    assert replica.spans() == ()  # rejected before the engine: no span


def test_tokens_are_conserved_including_an_aborted_stream(replica):
    client = openai.OpenAI(base_url=replica.url + "/v1", api_key="EMPTY")
    completed = 0
    for n in (5, 9):
        r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"q{n}"}],
                                           extra_body={"emulator_output_tokens": n})
        completed += r.usage.completion_tokens
    s = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "long"}], stream=True,
                                       stream_options={"include_usage": True}, extra_body={"emulator_output_tokens": 4000})
    for i, chunk in enumerate(s):
        if i == 4:
            break
    s.close()  # the client hangs up: vLLM aborts the request
    import time

    deadline = time.monotonic() + 20
    while replica.server.engine.by_id and time.monotonic() < deadline:
        time.sleep(0.05)
    spans = replica.spans()
    assert len(spans) == 2  # vLLM 0.32 exports no span for the aborted request
    text = httpx.get(replica.url + "/metrics").text
    gen = metric_value(text, "vllm:generation_tokens_total")
    ab_tokens = gen - completed  # only the counters saw the aborted request's tokens
    assert 3 <= ab_tokens < 4000
    assert completed == sum(sp.attributes["gen_ai.usage.completion_tokens"] for sp in spans)
    prompt = metric_value(text, "vllm:prompt_tokens_total")
    assert prompt > sum(sp.attributes["gen_ai.usage.prompt_tokens"] for sp in spans)  # aborted one included
    assert metric_value(text, "vllm:request_success_total", finished_reason="stop") == 2
    assert metric_value(text, "vllm:request_success_total", finished_reason="abort") == 0  # as on vLLM 0.32


def test_crash_breaks_streams_mid_way_and_exports_no_span(replica):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "go"}], "stream": True,
            "emulator_output_tokens": 2000}
    events = []
    with httpx.stream("POST", replica.url + "/v1/chat/completions", json=body, timeout=30) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            events.append(line[6:])
            if len(events) == 6:
                httpx.post(replica.url + "/admin/faults", json={"kind": "crash", "until_s": 0.2})
    assert events[-1] == "[DONE]"
    err = json.loads(events[-2])
    assert err["error"]["code"] == 500 and err["error"]["type"] == "InternalServerError"
    tokens = sum(1 for e in events[:-2] if json.loads(e)["choices"][0]["delta"].get("content"))
    assert 5 <= tokens < 2000
    assert replica.spans() == ()
    # restarted after 0.2 s: serves again, counters reset
    import time

    for _ in range(50):
        if httpx.get(replica.url + "/health").status_code == 200:
            break
        time.sleep(0.05)
    r = httpx.post(replica.url + "/v1/chat/completions",
                   json={"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2})
    assert r.status_code == 200
    assert len(replica.spans()) == 1


def test_metrics_names_types_and_buckets(replica):
    httpx.post(replica.url + "/v1/completions", json={"model": MODEL, "prompt": "hello", "max_tokens": 4})
    text = httpx.get(replica.url + "/metrics").text
    for name, kind in (("vllm:num_requests_running", "gauge"), ("vllm:num_requests_waiting", "gauge"),
                       ("vllm:kv_cache_usage_perc", "gauge"), ("vllm:prompt_tokens", "counter"),
                       ("vllm:generation_tokens", "counter"), ("vllm:num_preemptions", "counter"),
                       ("vllm:prefix_cache_queries", "counter"), ("vllm:prefix_cache_hits", "counter"),
                       ("vllm:request_success", "counter"), ("vllm:time_to_first_token_seconds", "histogram"),
                       ("vllm:inter_token_latency_seconds", "histogram"),
                       ("vllm:e2e_request_latency_seconds", "histogram")):
        family = name + "_total" if kind == "counter" else name  # the text format names counters *_total
        assert f"# TYPE {family} {kind}" in text, name
    labels = f'engine="0",model_name="{MODEL}"'
    assert f"vllm:generation_tokens_total{{{labels}}} 4.0" in text
    for name, bounds in (("vllm:time_to_first_token_seconds", TTFT_BUCKETS),
                         ("vllm:inter_token_latency_seconds", ITL_BUCKETS),
                         ("vllm:e2e_request_latency_seconds", REQUEST_LATENCY_BUCKETS)):
        les = [ln.split('le="')[1].split('"')[0] for ln in text.splitlines() if ln.startswith(name + "_bucket")]
        assert les == [repr(float(b)) for b in bounds] + ["+Inf"]
    assert f"vllm:inter_token_latency_seconds_count{{{labels}}} 3.0" in text  # 4 tokens, 3 gaps
    assert "vllm:cache_config_info{" in text and 'block_size="16"' in text
    assert 'vllm:admission_rejections_total{model_name="' in text  # no engine label, as vLLM 0.32


def test_kv_cut_preemptions_show_in_metrics(replica):
    import concurrent.futures

    assert httpx.post(replica.admin, json={"kind": "kv_cut", "value": 0.999}).status_code == 200  # ~24 blocks left
    client = openai.OpenAI(base_url=replica.url + "/v1", api_key="EMPTY")

    def call(i):
        r = client.completions.create(model=MODEL, prompt=f"request {i}", max_tokens=60,
                                      extra_body={"emulator_prompt_tokens": 100, "ignore_eos": True})
        return r.usage.completion_tokens

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(call, range(4)))
    assert outs == [60] * 4  # preempted requests recompute and still finish
    text = httpx.get(replica.url + "/metrics").text
    assert metric_value(text, "vllm:num_preemptions_total") > 0
    assert metric_value(text, "vllm:generation_tokens_total") == 240


def test_slowdown_ends_at_its_until_time(replica):
    """Issue 17 fault 6: a slowdown announced for N seconds ends after N seconds (it used to last forever)."""
    import time

    # 2 s: long enough that the reads below see it on a loaded host (0.3 s ended before them there).
    set_at = time.monotonic()
    replica.set_fault("slowdown", 3.0, until_s=2.0)
    assert httpx.get(replica.url + "/admin/faults").json()["slowdown"] == 3.0
    assert replica.server.engine.slowdown == 3.0
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and replica.server.faults.slowdown != 1.0:
        time.sleep(0.05)
    assert time.monotonic() - set_at >= 2.0  # it did not end early
    assert httpx.get(replica.url + "/admin/faults").json()["slowdown"] == 1.0
    assert replica.server.engine.slowdown == 1.0
    # A newer fault of the same kind replaces the older one's end time; without until_s it stays.
    httpx.post(replica.url + "/admin/faults", json={"kind": "slowdown", "value": 2.0, "until_s": 0.2})
    replica.set_fault("slowdown", 4.0)
    time.sleep(0.5)
    assert replica.server.faults.slowdown == 4.0
