"""Prompts and completions stay out of the store (collectors/content.py).

The producer is real: OpenInference's OpenAI instrumentation around the ``openai`` client, calling an
emulated vLLM replica. OpenInference records the whole conversation on its LLM span (``input.value``,
``output.value``, ``llm.input_messages.*``, ``llm.output_messages.*``); the receiver removes exactly
those before the span is stored, counts them, and keeps every other attribute (token counts, model).
"""

from __future__ import annotations

import time

import openai
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collectors.content import is_content_key
from collectors.otlp_traces import prepare_traces
from collectors.receiver import Receiver, ReceiverConfig
from serving.emulator import live

PROMPT = "Summarise the incident report for replica-2 in one line."


def _openinference_llm_span(endpoint: str | None = None):
    """One chat completion through the instrumented client; returns (sent SDK spans, response)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    if endpoint:
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
    fleet = live.start_replicas(1, ids=["replica-0"])
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        client = openai.OpenAI(base_url=f"{fleet[0].url}/v1", api_key="none", max_retries=0)
        response = client.chat.completions.create(model="meta-llama/Llama-3.1-8B-Instruct", max_tokens=8,
                                                  messages=[{"role": "user", "content": PROMPT}])
    finally:
        instrumentor.uninstrument()
        fleet.stop()
        provider.shutdown()
    return memory.get_finished_spans(), response


def test_content_is_removed_from_openinference_spans_and_everything_else_kept():
    spans, response = _openinference_llm_span()
    (span,) = spans
    sent = dict(span.attributes)
    content = sorted(k for k in sent if is_content_key(k))
    # what OpenInference sent: the prompt and the completion, as a value and as messages
    assert {"input.value", "output.value", "llm.input_messages.0.message.content",
            "llm.output_messages.0.message.content"} <= set(content)
    assert PROMPT in sent["input.value"] and PROMPT == sent["llm.input_messages.0.message.content"]

    prepared = prepare_traces(encode_spans(spans))
    assert prepared.accepted == 1 and prepared.rejected == 0
    assert prepared.content_dropped == len(content)
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    stored = ExportTraceServiceRequest.FromString(prepared.payload).resource_spans[0].scope_spans[0].spans[0]
    kept = {kv.key for kv in stored.attributes}
    assert kept == set(sent) - set(content)
    assert PROMPT.encode() not in prepared.payload
    values = {kv.key: kv.value for kv in stored.attributes}
    assert values["llm.token_count.prompt"].int_value == response.usage.prompt_tokens
    assert values["llm.token_count.completion"].int_value == response.usage.completion_tokens
    assert values["openinference.span.kind"].string_value == "LLM"

    opted_in = prepare_traces(encode_spans(spans), keep_content=True)
    assert opted_in.content_dropped == 0 and PROMPT.encode() in opted_in.payload


def test_the_receiver_stores_no_prompt_and_counts_what_it_removed(store, tmp_path):
    receiver = Receiver(ReceiverConfig(port=0, spool_dir=tmp_path / "spool", batch_max_seconds=0.05), store).start()
    try:
        spans, _ = _openinference_llm_span(receiver.url)
        expected = sum(1 for k in spans[0].attributes if is_content_key(k))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and receiver.stats.stored < 1:
            time.sleep(0.05)
        assert receiver.stats.stored == 1
        assert receiver.stats.content_dropped == expected
        keys = store.query("SELECT mapKeys(SpanAttributes) FROM otel_traces", tag="test").result_rows[0][0]
        assert keys and not [k for k in keys if is_content_key(k)]
        assert "llm.token_count.prompt" in keys
        count = store.query("SELECT count() FROM otel_traces WHERE position(toString(SpanAttributes), {p:String}) > 0",
                            {"p": PROMPT}, tag="test").result_rows[0][0]
        assert count == 0
    finally:
        receiver.stop()


def test_spans_without_content_are_stored_byte_for_byte():
    """vLLM's and the gateway's spans carry no content: the client's bytes are stored as sent."""
    from tests.vllm_captured import captured_spans

    raw = captured_spans().SerializeToString()
    prepared = prepare_traces(raw)
    assert prepared.content_dropped == 0 and prepared.payload == raw


def test_the_collector_path_removes_the_same_content():
    """docker/otel-collector.yaml deletes the keys and events the receiver removes: the same lists."""
    import re
    from pathlib import Path

    import yaml

    from collectors.content import CONTENT_EVENTS, content_key_pattern

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "docker" / "otel-collector.yaml").read_text())
    assert config["service"]["pipelines"]["traces"]["processors"] == [
        "memory_limiter", "transform/drop_content", "filter/drop_content_events"]
    statements = config["processors"]["transform/drop_content"]["trace_statements"]
    assert [s["context"] for s in statements] == ["span", "spanevent"]
    for s in statements:
        (statement,) = s["statements"]
        ottl = re.fullmatch(r'delete_matching_keys\(attributes, "(.*)"\)', statement).group(1)
        assert ottl.replace("\\\\", "\\") == content_key_pattern()  # OTTL string: "\\." is the regex \.
    conditions = config["processors"]["filter/drop_content_events"]["traces"]["spanevent"]
    assert {re.fullmatch(r'name == "(.*)"', c).group(1) for c in conditions} == CONTENT_EVENTS

    pattern = re.compile(content_key_pattern())
    for key in ("input.value", "llm.input_messages.3.message.contents.0.message_content.text",
                "gen_ai.prompt.0.content", "gen_ai.completion.1.role", "gen_ai.input.messages"):
        assert pattern.match(key), key
    for key in ("gen_ai.usage.prompt_tokens", "llm.token_count.prompt", "gen_ai.request.model", "input.mime_type",
                "llm.invocation_parameters", "gen_ai.response.id"):
        assert not pattern.match(key), key
