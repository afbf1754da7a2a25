"""The gateway's light spans export what the OTel SDK's own spans export (ids and times aside)."""

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from serving.gateway.spans import LightSpan, SpanFactory


def _provider():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _record(start):
    """One request and one attempt span, the gateway's way, through ``start(name, kind, ctx, attrs)``."""
    remote = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=True,
                         trace_flags=TraceFlags(1))
    ctx = trace.set_span_in_context(NonRecordingSpan(remote))
    span = start("gateway chat", SpanKind.SERVER, ctx, {"gateway.policy": "round_robin"})
    attempt = start("gateway.attempt", SpanKind.CLIENT, trace.set_span_in_context(span, ctx), {"gateway.attempt": 1})
    attempt.set_attributes({"gen_ai.response.finish_reasons": ["stop"], "gen_ai.usage.input_tokens": 7})
    attempt.set_status(Status(StatusCode.OK))
    attempt.set_status(Status(StatusCode.ERROR, "ignored: OK is final"))
    attempt.end()
    span.set_attribute("error.type", "stream_broken")
    span.set_status(StatusCode.ERROR, "stream_broken")
    span.end()
    span.set_attribute("after.end", 1)  # ignored, as by the SDK
    return span, attempt


def _shape(s):
    return (s.name, s.kind, dict(s.attributes), s.status.status_code, s.status.description,
            s.parent.is_remote if s.parent else None,
            s.context.trace_id, s.context.trace_flags, s.instrumentation_scope, s.resource, s.end_time >= s.start_time)


def test_light_spans_export_what_sdk_spans_export():
    sdk_provider, sdk_exporter = _provider()
    sdk_tracer = sdk_provider.get_tracer("infercost.serving.gateway")
    _record(lambda name, kind, ctx, attrs: sdk_tracer.start_span(name, kind=kind, context=ctx, attributes=attrs))
    light_provider, light_exporter = _provider()
    light_provider._resource = sdk_provider.resource  # same resource object, so the shapes compare equal
    factory = SpanFactory(light_provider.get_tracer("infercost.serving.gateway"))
    assert factory.light
    span, attempt = _record(factory.start)
    assert isinstance(span, LightSpan)
    got = light_exporter.get_finished_spans()
    want = sdk_exporter.get_finished_spans()
    assert [_shape(s) for s in got] == [_shape(s) for s in want]
    for spans in (got, want):
        assert spans[0].parent.span_id == spans[1].context.span_id  # the attempt is the request span's child
        assert spans[1].parent.span_id == 0xB7AD6B7169203331  # the request span is the remote caller's child
    assert dict(got[0].attributes)["gen_ai.response.finish_reasons"] == ("stop",)
    assert dict(got[1].attributes)["error.type"] == "stream_broken" and "after.end" not in got[1].attributes


def test_unsampled_parent_and_foreign_tracers():
    provider, exporter = _provider()
    factory = SpanFactory(provider.get_tracer("g"))
    unsampled = SpanContext(1, 2, is_remote=True, trace_flags=TraceFlags(0))
    span = factory.start("gateway chat", SpanKind.SERVER, trace.set_span_in_context(NonRecordingSpan(unsampled)), {})
    assert not span.is_recording() and span.get_span_context().trace_id == 1
    span.end()
    assert exporter.get_finished_spans() == ()
    noop = SpanFactory(trace.NoOpTracer())
    assert not noop.light
    assert not noop.start("gateway chat", SpanKind.SERVER, None, {}).is_recording()


def test_a_custom_sampler_decides():
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, TraceIdRatioBased

    for sampler, recorded in ((ALWAYS_OFF, 0), (TraceIdRatioBased(1.0), 1)):
        exporter = InMemorySpanExporter()
        provider = TracerProvider(sampler=sampler)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        factory = SpanFactory(provider.get_tracer("g"))
        span = factory.start("gateway chat", SpanKind.SERVER, None, {"a": 1})
        span.end()
        assert len(exporter.get_finished_spans()) == recorded
        assert span.get_span_context().trace_flags.sampled == bool(recorded)
