"""The gateway's spans, recorded without the OTel SDK's per-span machinery on the request path.

Position: serving (gateway). With an SDK ``TracerProvider`` the gateway's two spans per request
(``gateway chat``, ``gateway.attempt``) are :class:`LightSpan`: ids from the provider's id
generator, the provider's sampler decides (so a remote parent's sampled flag is honoured exactly
as the SDK would), attributes kept in a plain dict (the gateway's values are str, int, float,
bool or a list of str: nothing to clean), and at ``end()`` one SDK ``ReadableSpan`` goes to the
provider's span processors — what the SDK's own ``Span.end()`` hands them. The SDK span costs a
lock per attribute, a validation pass over every value and a bounded-attributes container
(about 0.15 ms of gateway CPU per request, measured: benchmarks/bench_gateway.py). Any other
provider (the API's no-op, a proxy, a vendor SDK) gets the tracer's own spans.

Not reproduced: span limits (the gateway sets at most ~20 attributes, the default limit is 128)
and the SDK's opt-in self-metrics about spans (``OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED``).
"""

from __future__ import annotations

import time

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, Tracer as SdkTracer
from opentelemetry.sdk.trace.sampling import DEFAULT_ON
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

_UNSET = Status(StatusCode.UNSET)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
_RANDOM = {flags: TraceFlags(flags | TraceFlags.RANDOM_TRACE_ID) for flags in (_SAMPLED, _NOT_SAMPLED)}


class LightSpan(trace.Span):
    """A recording span of the gateway (see module doc); ``end()`` exports it once."""

    __slots__ = ("_factory", "name", "_context", "parent", "kind", "_attributes", "start_time", "_status", "_ended")

    def __init__(self, factory: "SpanFactory", name: str, context: SpanContext, parent: SpanContext | None,
                 kind: SpanKind, attributes: dict, start_time: int):
        self._factory = factory
        self.name, self._context, self.parent, self.kind = name, context, parent, kind
        self._attributes = attributes
        self.start_time = start_time
        self._status = _UNSET
        self._ended = False

    @property
    def attributes(self) -> dict:
        return self._attributes

    def get_span_context(self) -> SpanContext:
        return self._context

    def set_attribute(self, key: str, value) -> None:
        if not self._ended:
            self._attributes[key] = tuple(value) if value.__class__ is list else value

    def set_attributes(self, attributes) -> None:
        if self._ended:
            return
        for key, value in attributes.items():
            self._attributes[key] = tuple(value) if value.__class__ is list else value

    def set_status(self, status, description: str | None = None) -> None:
        # The SDK's rules: OK is final; a description only accompanies ERROR.
        if self._ended or self._status.status_code is StatusCode.OK:
            return
        if isinstance(status, Status):
            self._status = status
        else:
            self._status = Status(status, description if status is StatusCode.ERROR else None)

    def add_event(self, name: str, attributes=None, timestamp=None) -> None:  # not used by the gateway
        raise NotImplementedError("gateway spans carry no events")

    def add_link(self, context, attributes=None) -> None:
        raise NotImplementedError("gateway spans carry no links")

    def update_name(self, name: str) -> None:
        if not self._ended:
            self.name = name

    def is_recording(self) -> bool:
        return not self._ended

    def record_exception(self, exception, attributes=None, timestamp=None, escaped=False) -> None:
        raise NotImplementedError("gateway spans carry no events")

    def end(self, end_time: int | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        f = self._factory
        if f.on_ending is not None:
            f.on_ending(self)
        f.processor.on_end(ReadableSpan(name=self.name, context=self._context, parent=self.parent, resource=f.resource,
                                        attributes=self._attributes, kind=self.kind, status=self._status,
                                        start_time=self.start_time, end_time=end_time or time.time_ns(),
                                        instrumentation_scope=f.scope, instrumentation_info=f.info))


class SpanFactory:
    """``start(name, kind, context, attributes)`` -> a span (LightSpan, or the tracer's own).

    tracer: from ``trace.get_tracer``; light spans only for an SDK tracer of an SDK provider.
    """

    def __init__(self, tracer):
        self.tracer = tracer
        self.light = type(tracer) is SdkTracer and hasattr(tracer, "span_processor")
        if self.light:
            self.processor = tracer.span_processor
            self.on_ending = getattr(self.processor, "_on_ending", None)  # the SDK's hook before on_end
            self.resource = tracer.resource
            self.sampler = tracer.sampler
            self.ids = tracer.id_generator
            self.scope = getattr(tracer, "_instrumentation_scope", None)
            self.info = getattr(tracer, "instrumentation_info", None)
            enabled = getattr(tracer, "_is_enabled", None)
            self.light = enabled is None or enabled()

    def start(self, name: str, kind: SpanKind, context, attributes: dict) -> trace.Span:
        if not self.light:
            return self.tracer.start_span(name, kind=kind, context=context, attributes=attributes)
        parent = trace.get_current_span(context).get_span_context()
        if parent is None or not parent.is_valid:
            parent = None
            trace_id = self.ids.generate_trace_id()
        else:
            trace_id = parent.trace_id
        if self.sampler is DEFAULT_ON:
            # The SDK's default sampler, decided inline: a parent's flag, else sample (its result, field by field).
            sampled = parent is None or parent.trace_flags.sampled
            recording, trace_state = sampled, parent.trace_state if parent is not None else None
            given = attributes if sampled else None
        else:
            result = self.sampler.should_sample(context, trace_id, name, kind, attributes, ())
            sampled, recording = result.decision.is_sampled(), result.decision.is_recording()
            trace_state, given = result.trace_state, result.attributes
        flags = _SAMPLED if sampled else _NOT_SAMPLED
        random_id = parent.trace_flags.random_trace_id if parent is not None else self.ids.is_trace_id_random()
        if random_id:
            flags = _RANDOM[flags]
        span_context = SpanContext(trace_id, self.ids.generate_span_id(), is_remote=False, trace_flags=flags,
                                   trace_state=trace_state)
        if not recording:
            return NonRecordingSpan(span_context)
        # As the SDK: the span starts with the attributes the sampler returned (AlwaysOn / ParentBased: the given ones).
        attrs = {k: tuple(v) if v.__class__ is list else v for k, v in given.items()} if given else {}
        span = LightSpan(self, name, span_context, parent, kind, attrs, time.time_ns())
        self.processor.on_start(span, parent_context=context)
        return span
