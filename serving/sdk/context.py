"""Task context on the wire: W3C ``traceparent`` + W3C ``baggage`` carrying the task.* contract.

Position: serving (task SDK and gateway share it). The task SDK puts the task context into
OpenTelemetry baggage; :func:`inject_headers` writes it into outgoing HTTP headers, and the gateway
reads it back with :func:`extract` / :func:`task_attributes`. Keys are ``schema.semconv.BAGGAGE_KEYS``
(docs/telemetry.md). Sources: W3C Trace Context and W3C Baggage recommendations; the OTel
SDK's default propagators are the same two (``tracecontext,baggage``).
"""

from __future__ import annotations

from typing import Mapping, MutableMapping

from opentelemetry import baggage, context as otel_context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.trace import INVALID_SPAN_CONTEXT, SpanContext
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from schema import semconv as sc

# Explicit, not the global propagator: a process-wide OTEL_PROPAGATORS setting must not silently
# drop the task context our cost model depends on.
PROPAGATOR = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
_BAGGAGE = W3CBaggagePropagator()
EMPTY_CONTEXT = otel_context.Context()  # immutable: what extract() returns for headers without either field


def with_task_baggage(values: Mapping[str, object], ctx: otel_context.Context | None = None) -> otel_context.Context:
    """Return ``ctx`` (default: current) with each non-empty task.* value set as baggage (stringified)."""
    ctx = ctx if ctx is not None else otel_context.get_current()
    for key, value in values.items():
        if value is None or value == "":
            continue
        ctx = baggage.set_baggage(key, str(value), context=ctx)
    return ctx


def task_attributes(ctx: otel_context.Context | None = None) -> dict[str, str]:
    """The task.* / tenant.* baggage members of ``ctx`` (default: current), as span attributes.

    Only ``schema.semconv.BAGGAGE_KEYS`` are read: other baggage (another vendor's, a user's) is
    never copied onto spans, so a client cannot blow up attribute cardinality through it.
    """
    items = baggage.get_all(ctx)
    return {k: str(items[k]) for k in sc.BAGGAGE_KEYS if k in items and items[k] not in (None, "")}


def inject_headers(headers: MutableMapping[str, str] | None = None, ctx: otel_context.Context | None = None) -> MutableMapping[str, str]:
    """Write ``traceparent`` (+ ``tracestate``) and ``baggage`` for ``ctx`` into ``headers`` (a new dict if None)."""
    headers = {} if headers is None else headers
    PROPAGATOR.inject(headers, context=ctx)
    return headers


def baggage_header(ctx: otel_context.Context) -> str | None:
    """The ``baggage`` header value :func:`inject_headers` writes for ``ctx`` (None: no baggage).

    For a caller that sends one context's baggage on several requests (the gateway's attempts)."""
    if not baggage.get_all(ctx):
        return None
    carrier: dict[str, str] = {}
    _BAGGAGE.inject(carrier, context=ctx)
    return carrier.get("baggage")


def inject_span_headers(headers: MutableMapping[str, str], span_context: SpanContext,
                        baggage_value: str | None) -> MutableMapping[str, str]:
    """Write what :func:`inject_headers` writes for a context whose current span has ``span_context``
    and whose baggage header is ``baggage_value`` (:func:`baggage_header`): ``traceparent`` (W3C Trace
    Context: version 00, 32 + 16 lower-case hex digits, flags as 2 hex digits), ``tracestate`` when
    set, then ``baggage`` — the same keys, values and order as the OTel propagators, without their
    context look-ups (the gateway calls this once per upstream attempt)."""
    if span_context != INVALID_SPAN_CONTEXT:
        headers["traceparent"] = f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{span_context.trace_flags:02x}"
        if span_context.trace_state:
            headers["tracestate"] = span_context.trace_state.to_header()
    if baggage_value:
        headers["baggage"] = baggage_value
    return headers


def extract(headers: Mapping[str, str]) -> otel_context.Context:
    """The remote span context and baggage carried by incoming ``headers`` (case-insensitive keys)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    return PROPAGATOR.extract(lowered)
