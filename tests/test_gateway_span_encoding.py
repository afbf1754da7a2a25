"""The gateway's compact OTLP encoding parses to exactly the OTel exporter's own message."""

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState
from opentelemetry.trace import set_span_in_context

from serving.otlp_encoding import encode_spans_bytes


def _spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "infercost-gateway", "deployment": "t"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("infercost.serving.gateway", "1.2")
    other = provider.get_tracer("another.scope")
    remote = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=True,
                         trace_flags=TraceFlags(1), trace_state=TraceState([("vendor", "x=1")]))
    ctx = set_span_in_context(NonRecordingSpan(remote))
    for i in range(3):  # repeated attributes exercise the cache
        span = tracer.start_span("gateway chat", kind=SpanKind.SERVER, context=ctx,
                                 attributes={"gen_ai.operation.name": "chat", "gateway.policy": "round_robin",
                                             "task.id": f"t-{i}", "gen_ai.request.stream": True})
        attempt = tracer.start_span("gateway.attempt", kind=SpanKind.CLIENT, context=set_span_in_context(span),
                                    attributes={"gateway.attempt": 1, "gateway.replica": "replica-0"})
        attempt.set_attributes({"gen_ai.usage.input_tokens": 7 + i, "gen_ai.response.time_to_first_chunk": 0.0123 * i,
                                "gen_ai.response.finish_reasons": ["stop", "length"], "gateway.tokens_streamed": 0,
                                "neg": -5, "big": 2 ** 62, "empty": "", "no": False, "floats": [1.5, -2.0],
                                "utf8": "é ✓"})
        attempt.set_status(Status(StatusCode.ERROR, "stream_broken") if i == 1 else Status(StatusCode.OK))
        attempt.end()
        span.end()
    lone = other.start_span("x", kind=SpanKind.INTERNAL)
    lone.end()
    return exporter.get_finished_spans()


def test_compact_encoding_parses_to_the_exporters_message():
    spans = _spans()
    expected = encode_spans(spans)
    got = ExportTraceServiceRequest.FromString(encode_spans_bytes(spans))
    assert got == expected
    assert encode_spans_bytes(spans) == expected.SerializeToString()  # same field order, same bytes
    assert len(got.resource_spans[0].scope_spans) == 2
    assert len(got.resource_spans[0].scope_spans[0].spans) == 6


def test_spans_with_events_take_the_exporters_encoder():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("t").start_span("s")
    span.add_event("e", {"k": 1})
    span.end()
    spans = exporter.get_finished_spans()
    assert ExportTraceServiceRequest.FromString(encode_spans_bytes(spans)) == encode_spans(spans)


def test_equal_resources_of_two_providers_merge_as_the_exporter_merges_them():
    # Two providers with equal (not identical) resources, spans interleaved: one ResourceSpans, as the
    # exporter's grouping (by Resource equality) gives; distinct resources stay apart, first-seen order.
    exporter = InMemorySpanExporter()
    providers = [TracerProvider(resource=Resource.create({"service.name": name})) for name in ("gw", "gw", "other")]
    for p in providers:
        p.add_span_processor(SimpleSpanProcessor(exporter))
    for i in range(4):
        for p in providers:
            p.get_tracer("infercost.serving.gateway").start_span(f"s{i}").end()
    spans = exporter.get_finished_spans()
    assert spans[0].resource is not spans[1].resource and spans[0].resource == spans[1].resource
    expected = encode_spans(spans)
    assert encode_spans_bytes(spans) == expected.SerializeToString()
    assert [len(r.scope_spans[0].spans) for r in expected.resource_spans] == [8, 4]
