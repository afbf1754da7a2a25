"""One error taxonomy (llm_calls.error_class, migration 1001), from spans the real producers emit.

The task SDK -> the real gateway -> scripted replicas, every span through the OTLP receiver into the
store; the class of each row is read back from ``llm_calls`` and, once resolved by the cost job,
from ``call_costs``. Shapes our producers do not emit (an engine span finishing ``abort`` or
``error``, the OTel HTTP convention's numeric ``error.type``, exception names of other SDKs) are
made with the OpenTelemetry SDK and stored through the receiver's ingest path.
"""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from schema import jobs
from schema import semconv as sc
from tests.stub_upstream import Behaviour
from serving.sdk import CallFailed, task
from tests.producers import MODEL, free_port, ingest_sdk_spans

MESSAGES = [{"role": "user", "content": "hello"}]



def _run(rig, gateway_url, *, timeout_s=10.0, stream=True, task_type="chat"):
    """One task with one call; returns (task_id, error.type of the CallFailed or None)."""
    client, provider = rig.client(gateway_url, timeout_s=timeout_s)
    error = None
    with task(task_type, tenant="acme", tracer_provider=provider) as t:
        try:
            client.chat(model=MODEL, messages=MESSAGES, stream=stream, step="s1", max_tokens=8)
        except CallFailed as exc:
            error = exc.error_type
            t.fail(error)
    client.close()
    return t.task_id, error


def _classes(store, task_id):
    rows = store.query("SELECT call_source, error_type, error_class FROM llm_calls WHERE task_id = {t:String} "
                       "ORDER BY call_source, start_time", {"t": task_id}, tag="test").result_rows
    return [tuple(r) for r in rows]


@pytest.mark.parametrize("behaviour, client_error, expected", [
    (Behaviour(), None, [("client", "", ""), ("gateway", "", "")]),
    # 400 (prompt too long) and 404 (unknown model) are the client's own fault
    (Behaviour(status=400), "http.400", [("client", "http.400", "client_error"), ("gateway", "http.400", "client_error")]),
    (Behaviour(status=404), "http.404", [("client", "http.404", "client_error"), ("gateway", "http.404", "client_error")]),
    (Behaviour(status=504), "http.504", [("client", "http.504", "timeout"), ("gateway", "http.504", "timeout")]),
    (Behaviour(status=408), "http.408", [("client", "http.408", "timeout"), ("gateway", "http.408", "timeout")]),
    (Behaviour(status=500), "http.500", [("client", "http.500", "upstream_error"),
                                         ("gateway", "http.500", "upstream_error")]),
    # the replica dies after 2 tokens: the gateway ends the stream with an error event
    (Behaviour(tokens=6, crash_after=2), "stream_broken", [("client", "stream_broken", "upstream_error"),
                                                           ("gateway", "stream_broken", "upstream_error")]),
    (Behaviour(tokens=6, error_after=2), "stream_broken", [("client", "stream_broken", "upstream_error"),
                                                           ("gateway", "stream_error", "upstream_error")]),
], ids=["ok", "400", "404", "504", "408", "500", "crash", "error_chunk"])
def test_gateway_and_client_rows_are_classified(rig, behaviour, client_error, expected):
    _, url = rig.stub("r-" + str(id(behaviour)), lambda req, headers: behaviour)
    task_id, error = _run(rig, rig.gateway([("r0", url)]))
    rig.flush()
    assert error == client_error
    assert _classes(rig.store, task_id) == expected


def test_every_replica_503_then_the_client_sees_upstream_error(rig):
    _, a = rig.stub("a", lambda req, headers: Behaviour(status=503))
    _, b = rig.stub("b", lambda req, headers: Behaviour(status=503))
    task_id, error = _run(rig, rig.gateway([("ra", a), ("rb", b)], retry_budget_min=5))
    rig.flush()
    assert error == "http.503"
    assert _classes(rig.store, task_id) == [("client", "http.503", "upstream_error"),
                                            ("gateway", "http.503", "upstream_error"),
                                            ("gateway", "http.503", "upstream_error")]


def test_connection_refused_is_upstream_error(rig):
    task_id, error = _run(rig, rig.gateway([("dead", f"http://127.0.0.1:{free_port()}")]))
    rig.flush()
    assert error == "http.502"
    assert _classes(rig.store, task_id) == [("client", "http.502", "upstream_error"),
                                            ("gateway", "connection_error", "upstream_error")]


def test_admission_429_is_rejected(rig):
    _, url = rig.stub("r-adm")
    task_id, error = _run(rig, rig.gateway([("r0", url)], queue_caps={"interactive": 0}))
    rig.flush()
    assert error == "http.429"
    # the gateway's request span is not a call: only the client attempt is a row
    assert _classes(rig.store, task_id) == [("client", "http.429", "rejected")]


def test_client_timeout_resolves_to_timeout_not_cancel(rig, module_store):
    from tests.test_cost_support import fleet_yaml, sync

    stub, url = rig.stub("r-slow", lambda req, headers: Behaviour(tokens=3, delay_s=0.8))
    task_id, error = _run(rig, rig.gateway([("r0", url)]), timeout_s=0.3)
    rig.flush()
    assert error == "timeout"
    # the gateway only saw the client leave; the client knows it timed out
    assert _classes(rig.store, task_id) == [("client", "timeout", "timeout"),
                                            ("gateway", "client_disconnect", "client_cancel")]
    sync(module_store, fleet_yaml(replicas=("r0",)))
    start = module_store.scalar("SELECT toStartOfMinute(min(start_time)) FROM llm_calls WHERE task_id = {t:String}",
                                {"t": task_id}, tag="test")
    jobs.run_jobs(module_store, start=start, end=start + __import__("datetime").timedelta(minutes=3))
    rows = module_store.query("SELECT call_source, error_class FROM call_costs WHERE task_id = {t:String}",
                              {"t": task_id}, tag="test").result_rows
    assert [tuple(r) for r in rows] == [("gateway", "timeout")]


def _span(tracer, name, kind, attrs, error=None):
    span = tracer.start_span(name, kind=kind, attributes=attrs)
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()


@pytest.mark.parametrize("kind, attrs, error, expected", [
    # engine spans of older vLLM / the emulator: finish reasons carry the outcome
    ("engine", {sc.GEN_AI_RESPONSE_FINISH_REASONS: ("abort",)}, None, "client_cancel"),
    ("engine", {sc.GEN_AI_RESPONSE_FINISH_REASONS: ("error",)}, None, "upstream_error"),
    ("engine", {sc.GEN_AI_RESPONSE_FINISH_REASONS: ("repetition",)}, None, ""),
    ("engine", {sc.GEN_AI_RESPONSE_FINISH_REASONS: ("length",)}, None, ""),
    # the OTel HTTP convention: error.type is the status code
    ("client", {sc.ERROR_TYPE: "503"}, "x", "upstream_error"),
    ("client", {sc.ERROR_TYPE: "429"}, "x", "rejected"),
    ("client", {sc.ERROR_TYPE: "422"}, "x", "client_error"),
    # our SDK's cancellation and other SDKs' exception names
    ("client", {sc.ERROR_TYPE: "cancelled"}, "x", "client_cancel"),
    ("client", {sc.ERROR_TYPE: "APITimeoutError"}, "x", "timeout"),
    ("client", {sc.ERROR_TYPE: "RateLimitError"}, "x", "rejected"),
    ("client", {sc.ERROR_TYPE: "BadRequestError"}, "x", "client_error"),
    ("client", {sc.ERROR_TYPE: "APIConnectionError"}, "x", "upstream_error"),
    # gateway attempts: an error with no error.type falls back to the upstream status
    ("gateway", {sc.GATEWAY_UPSTREAM_STATUS: 404}, "x", "client_error"),
    ("gateway", {sc.GATEWAY_UPSTREAM_STATUS: 200}, "x", "upstream_error"),
    ("gateway", {sc.ERROR_TYPE: "first_byte_timeout", sc.GATEWAY_UPSTREAM_STATUS: 200}, "x", "timeout"),
    ("gateway", {sc.ERROR_TYPE: "malformed_sse", sc.GATEWAY_UPSTREAM_STATUS: 200}, "x", "upstream_error"),
    ("gateway", {sc.ERROR_TYPE: "no_replica"}, "x", "upstream_error"),
    ("gateway", {sc.GATEWAY_UPSTREAM_STATUS: 200}, None, ""),
])
def test_other_shapes_are_classified(module_store, kind, attrs, error, expected):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    base = {sc.TASK_ID: "shape-" + kind}
    if kind == "engine":
        _span(tracer, sc.VLLM_SPAN_NAME, SpanKind.SERVER, {sc.GEN_AI_LATENCY_E2E: 0.1} | attrs, error)
    elif kind == "gateway":
        _span(tracer, "gateway.attempt", SpanKind.CLIENT, base | {sc.GATEWAY_ATTEMPT: 1} | attrs, error)
    else:
        _span(tracer, "chat m", SpanKind.CLIENT, base | {sc.GEN_AI_OPERATION_NAME: "chat"} | attrs, error)
    (span,) = exporter.get_finished_spans()
    ingest_sdk_spans(module_store, [span])
    span_id = f"{span.context.span_id:016x}"
    got = module_store.scalar("SELECT error_class FROM llm_calls WHERE span_id = {s:String}", {"s": span_id},
                              tag="test")
    assert got == expected
