"""The gateway's upstream trace headers (serving.sdk.context.inject_span_headers / baggage_header)
are the OTel propagators' own (inject_headers): same keys, values and order."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN_CONTEXT, NonRecordingSpan, SpanContext, TraceFlags, TraceState

from serving.sdk.context import (EMPTY_CONTEXT, PROPAGATOR, baggage_header, extract, inject_headers,
                                 inject_span_headers, with_task_baggage)

TRACE_ID, SPAN_ID = 0x0AF7651916CD43DD8448EB211C80319C, 0x00F067AA0BA902B7


def _contexts():
    plain = EMPTY_CONTEXT
    task = with_task_baggage({"task.id": "t-1", "task.type": "research agent", "tenant.priority": "batch",
                              "task.step": 3}, EMPTY_CONTEXT)
    incoming = extract({"traceparent": f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01",
                        "baggage": "task.id=t%202,other=x;prop=1, tenant.id = acme "})
    return [plain, task, incoming]


SPAN_CONTEXTS = [
    SpanContext(TRACE_ID, SPAN_ID, is_remote=False, trace_flags=TraceFlags(1)),
    SpanContext(TRACE_ID, SPAN_ID, is_remote=False, trace_flags=TraceFlags(0)),
    SpanContext(TRACE_ID, 1, is_remote=False, trace_flags=TraceFlags(3),
                trace_state=TraceState([("vendor", "v1"), ("other", "o2")])),
    INVALID_SPAN_CONTEXT,
]


@pytest.mark.parametrize("span_context", SPAN_CONTEXTS)
@pytest.mark.parametrize("ctx_index", range(3))
def test_same_headers_as_the_propagators(span_context, ctx_index):
    ctx = _contexts()[ctx_index]
    span_ctx = trace.set_span_in_context(NonRecordingSpan(span_context), ctx)
    want = inject_headers({"content-type": "application/json"}, span_ctx)
    got = inject_span_headers({"content-type": "application/json"}, span_context, baggage_header(ctx))
    assert list(got.items()) == list(want.items())


def test_hand_computed_headers():
    ctx = with_task_baggage({"task.id": "t 1"}, EMPTY_CONTEXT)
    got = inject_span_headers({}, SPAN_CONTEXTS[2], baggage_header(ctx))
    assert got == {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-0000000000000001-03",
                   "tracestate": "vendor=v1,other=o2", "baggage": "task.id=t+1"}  # W3C Baggage via quote_plus
    assert baggage_header(EMPTY_CONTEXT) is None
    assert PROPAGATOR.extract({}) == EMPTY_CONTEXT  # what the gateway uses without trace headers
