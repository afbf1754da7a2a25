"""The OTLP/HTTP receiver end to end: the stock OpenTelemetry SDK exporter -> receiver -> otel_traces / llm_calls.

Every value read back is compared with what was sent (ids, times in ns, attributes, status, kind,
resource). The stock Python SDK has no OTLP/JSON exporter, so the JSON test encodes the SDK's
spans with the SDK's own protobuf encoder and writes them as OTLP JSON (hex ids, int64 as
strings, enum integers, lowerCamelCase), then posts that.
"""

from __future__ import annotations

import base64
import gzip
import json
import os

import httpx
import pytest
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (ExportTraceServiceRequest,
                                                                      ExportTraceServiceResponse)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from collectors.receiver import Receiver, ReceiverConfig
from conftest import emptied
from schema import semconv as sc

T0 = 1_764_400_000_123_456_789  # 2025-11-29T07:06:40.123456789Z
PB = {"content-type": "application/x-protobuf"}

ROW_SQL = """
SELECT toUnixTimestamp64Nano(Timestamp), TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind, ServiceName,
       ResourceAttributes, ScopeName, ScopeVersion, SpanAttributes, Duration, StatusCode, StatusMessage,
       arrayMap(t -> toUnixTimestamp64Nano(t), Events.Timestamp), Events.Name, Events.Attributes,
       Links.TraceId, Links.SpanId, Links.TraceState, Links.Attributes
FROM otel_traces ORDER BY SpanName
"""


@pytest.fixture
def store(module_store):
    return emptied(module_store, "otel_traces", "llm_calls", "otel_traces_trace_id_ts")


@pytest.fixture
def receiver(store, tmp_path):
    r = Receiver(ReceiverConfig(port=0, spool_dir=tmp_path / "spool", batch_max_seconds=0.05,
                                max_body_bytes=2 * 1024 * 1024), store).start()
    yield r
    r.stop()


def _emit(provider):
    """Two spans with every field set; returns (parent, child) SDK spans."""
    tracer = provider.get_tracer("scope-x", "1.2.3")
    parent = tracer.start_span("parent op", kind=SpanKind.SERVER, start_time=T0,
                               attributes={"s": "text", "i": 7, "f": 0.25, "b": True, "arr": ["stop", "length"],
                                           "ints": [1, 2], "whole": 3.0})
    ctx = trace_api.set_span_in_context(parent)
    child = tracer.start_span("child op", context=ctx, kind=SpanKind.CLIENT, start_time=T0 + 10,
                              links=[Link(parent.get_span_context(), {"link.attr": "v"})])
    child.add_event("retry", {"attempt": 2}, timestamp=T0 + 20)
    child.set_status(Status(StatusCode.ERROR, "boom"))
    child.end(end_time=T0 + 1_000)
    parent.set_status(Status(StatusCode.OK))
    parent.end(end_time=T0 + 5_000_000_000)
    return parent, child


def _resource():
    return Resource.create({"service.name": "svc-a", sc.SERVICE_INSTANCE_ID: "r-1", sc.GPU_COUNT: 2})


def _expected_rows(parent, child, resource):
    res = {k: ("true" if v is True else str(v)) for k, v in resource.attributes.items()}
    tid = format(parent.context.trace_id, "032x")
    pid, cid = format(parent.context.span_id, "016x"), format(child.context.span_id, "016x")
    return [
        (T0 + 10, tid, cid, pid, "", "child op", "Client", "svc-a", res, "scope-x", "1.2.3", {}, 990, "Error", "boom",
         [T0 + 20], ["retry"], [{"attempt": "2"}], [tid], [pid], [""], [{"link.attr": "v"}]),
        (T0, tid, pid, "", "", "parent op", "Server", "svc-a", res, "scope-x", "1.2.3",
         {"s": "text", "i": "7", "f": "0.25", "b": "true", "arr": '["stop","length"]', "ints": "[1,2]", "whole": "3"},
         5_000_000_000, "Ok", "", [], [], [], [], [], [], []),
    ]


def _rows(store):
    return [tuple(r) for r in store.query(ROW_SQL, tag="test").result_rows]


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_sdk_protobuf_export_is_stored_exactly(receiver, store, compression):
    resource = _resource()
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(
        OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces", compression=compression)))
    parent, child = _emit(provider)
    provider.shutdown()
    assert receiver.flush(10)
    assert _rows(store) == _expected_rows(parent, child, resource)
    stats = receiver.stats
    assert (stats.received, stats.stored, stats.rejected, stats.queue_rows) == (2, 2, 0, 0)
    assert stats.newest_row_time_ns == T0 + 5_000_000_000
    assert stats.requests == {"/v1/traces 200": 2}


def _to_otlp_json(request: ExportTraceServiceRequest) -> dict:
    doc = json_format.MessageToDict(request, use_integers_for_enums=True)

    def fix(obj):
        if isinstance(obj, dict):
            for key, value in obj.items():
                if key in ("traceId", "spanId", "parentSpanId"):
                    obj[key] = base64.b64decode(value).hex().upper() if value else ""  # hex is case-insensitive
                else:
                    fix(value)
        elif isinstance(obj, list):
            for item in obj:
                fix(item)
    fix(doc)
    return doc


def test_sdk_spans_as_otlp_json_are_stored_exactly(receiver, store):
    resource = _resource()
    provider = TracerProvider(resource=resource)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    parent, child = _emit(provider)
    doc = _to_otlp_json(encode_spans(memory.get_finished_spans()))
    assert isinstance(doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["startTimeUnixNano"], str)
    doc["resourceSpans"][0]["futureField"] = {"ignored": True}
    resp = httpx.post(f"{receiver.url}/v1/traces", content=json.dumps(doc), headers={"content-type": "application/json"})
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
    assert resp.json() == {}
    assert receiver.flush(10)
    assert _rows(store) == _expected_rows(parent, child, resource)


VLLM_ATTRIBUTES = {
    sc.GEN_AI_REQUEST_ID: "chatcmpl-8f3a", sc.GEN_AI_USAGE_PROMPT_TOKENS: 1234, sc.GEN_AI_USAGE_COMPLETION_TOKENS: 321,
    sc.GEN_AI_LATENCY_TTFT: 0.0875, sc.GEN_AI_LATENCY_E2E: 4.25, sc.GEN_AI_LATENCY_QUEUE: 0.0125,
    sc.GEN_AI_LATENCY_PREFILL: 0.075, sc.GEN_AI_LATENCY_DECODE: 4.1625, sc.GEN_AI_LATENCY_INFERENCE: 4.2375,
    sc.GEN_AI_RESPONSE_FINISH_REASONS: '["stop"]', sc.GEN_AI_REQUEST_MAX_TOKENS: 512,
    sc.GEN_AI_REQUEST_TEMPERATURE: 0.7, sc.GEN_AI_REQUEST_TOP_P: 0.95, sc.GEN_AI_REQUEST_N: 1,
}

LLM_CALL_SQL = """
SELECT toUnixTimestamp64Nano(start_time), toUnixTimestamp64Nano(end_time), trace_id, span_id, parent_span_id,
       call_source, service_name, span_name, replica, gpu_type, model, request_id, task_id, prompt_tokens,
       cached_tokens, output_tokens, ttft_s, e2e_s, queue_s, prefill_s, decode_s, inference_s, finish_reason,
       status, error_type, partial
FROM llm_calls
"""


def test_vllm_llm_request_span_maps_to_llm_calls(receiver, store):
    resource = Resource.create({"service.name": "vllm", sc.SERVICE_INSTANCE_ID: "replica-a", sc.GPU_TYPE: "H100",
                                sc.GPU_COUNT: 1, sc.RESOURCE_MODEL: "meta-llama/Llama-3.1-8B-Instruct"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces")))
    parent_ctx = trace_api.SpanContext(0xABCDEF0123456789ABCDEF0123456789, 0x1122334455667788, is_remote=True,
                                       trace_flags=trace_api.TraceFlags(1))
    tracer = provider.get_tracer("vllm.tracing")
    span = tracer.start_span(sc.VLLM_SPAN_NAME, context=trace_api.set_span_in_context(trace_api.NonRecordingSpan(parent_ctx)),
                             kind=SpanKind.SERVER, start_time=T0, attributes=VLLM_ATTRIBUTES)
    span.end(end_time=T0 + 4_250_000_000)
    provider.shutdown()
    assert receiver.flush(10)
    rows = store.query(LLM_CALL_SQL, tag="test").result_rows
    assert rows == [(T0, T0 + 4_250_000_000, "abcdef0123456789abcdef0123456789", format(span.context.span_id, "016x"),
                     "1122334455667788", "engine", "vllm", "llm_request", "replica-a", "H100",
                     "meta-llama/Llama-3.1-8B-Instruct", "chatcmpl-8f3a", "", 1234, None, 321, 0.0875, 4.25, 0.0125,
                     0.075, 4.1625, 4.2375, "stop", "unset", "", 0)]
    attrs = store.query("SELECT SpanAttributes FROM otel_traces", tag="test").result_rows[0][0]
    assert attrs == {k: (v if isinstance(v, str) else ("0.7" if v == 0.7 else str(v))) for k, v in VLLM_ATTRIBUTES.items()}


# --- bad input ---------------------------------------------------------------------------------------

def _span_request(*spans):
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.add(key="service.name").value.string_value = "bad-input"
    ss = rs.scope_spans.add()
    for span in spans:
        ss.spans.append(span)
    return req


def _span(n: int, start=T0, end=T0 + 100, **attrs):
    from opentelemetry.proto.trace.v1.trace_pb2 import Span
    span = Span(trace_id=bytes([n]) * 16, span_id=bytes([n]) * 8, name=f"span-{n}", kind=Span.SPAN_KIND_INTERNAL,
                start_time_unix_nano=start, end_time_unix_nano=end)
    for key, value in attrs.items():
        span.attributes.add(key=key, value=value)
    return span


def _status(resp) -> str:
    if resp.headers["content-type"].startswith("application/json"):
        return resp.json()["message"]
    return status_pb2.Status.FromString(resp.content).message


def _partial(resp) -> tuple[int, str]:
    body = ExportTraceServiceResponse.FromString(resp.content)
    return body.partial_success.rejected_spans, body.partial_success.error_message


def test_bad_input_statuses_messages_and_survivors(receiver, store):
    url = f"{receiver.url}/v1/traces"
    with httpx.Client(timeout=30) as client:
        # random bytes and truncated protobuf: 400 with a google.rpc.Status naming the problem
        resp = client.post(url, content=os.urandom(64) + b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", headers=PB)
        assert resp.status_code == 400 and "undecodable protobuf" in _status(resp)
        whole = _span_request(_span(1)).SerializeToString()
        resp = client.post(url, content=whole[:-7], headers=PB)
        assert resp.status_code == 400 and "undecodable protobuf ExportTraceServiceRequest" in _status(resp)

        # JSON with a 15-byte trace id next to a valid span
        doc = {"resourceSpans": [{"scopeSpans": [{"spans": [
            {"traceId": "02" * 16, "spanId": "02" * 8, "name": "json-ok", "startTimeUnixNano": str(T0),
             "endTimeUnixNano": str(T0 + 5)},
            {"traceId": "03" * 15, "spanId": "03" * 8, "name": "json-bad", "startTimeUnixNano": str(T0),
             "endTimeUnixNano": str(T0 + 5)}]}]}]}
        resp = client.post(url, json=doc)
        assert resp.status_code == 200
        assert resp.json()["partialSuccess"]["rejectedSpans"] == "1"
        assert "traceId '030303030303030303030303030303' is 15 bytes, expected 16" in resp.json()["partialSuccess"]["errorMessage"]

        # end before start
        resp = client.post(url, content=_span_request(_span(4), _span(5, start=T0 + 10, end=T0)).SerializeToString(),
                           headers=PB)
        assert resp.status_code == 200
        assert _partial(resp) == (1, f"rejected 1 of 2 spans; first: span 0505050505050505 (resource_spans[0]."
                                     f"scope_spans[0].spans[1]): end_time_unix_nano {T0} is before "
                                     f"start_time_unix_nano {T0 + 10}")

        # a non-UTF-8 attribute value
        body = _span_request(_span(6, note=AnyValue(string_value="ok")),
                             _span(7, note=AnyValue(string_value="ZZZZ"))).SerializeToString().replace(b"ZZZZ", b"Z\xc3(Z")
        resp = client.post(url, content=body, headers=PB)
        rejected, message = _partial(resp)
        assert resp.status_code == 200 and rejected == 1
        assert "span 0707070707070707" in message and "attribute 'note' is not valid UTF-8 (byte 1)" in message

        # an attribute of 1 MiB: kept, truncated to 64 KiB, reported
        resp = client.post(url, content=_span_request(_span(8, prompt=AnyValue(string_value="p" * (1 << 20))))
                           .SerializeToString(), headers=PB)
        assert resp.status_code == 200
        assert _partial(resp) == (0, "truncated 1 attribute value(s) longer than 65536 bytes "
                                     "(first: span 0808080808080808 attribute 'prompt' (1048576 bytes))")

        # oversized body, gzip bomb, wrong content type
        resp = client.post(url, content=b"\0" * (3 * 1024 * 1024), headers=PB)
        assert resp.status_code == 413 and "exceeds the limit of 2097152 bytes" in _status(resp)
        bomb = gzip.compress(b"\0" * (16 * 1024 * 1024))
        resp = client.post(url, content=bomb, headers={**PB, "content-encoding": "gzip"})
        assert resp.status_code == 413 and "after gzip decompression" in _status(resp)
        resp = client.post(url, content=b"hello", headers={"content-type": "text/plain"})
        assert resp.status_code == 415 and "unsupported content type 'text/plain'" in _status(resp)

        # still serving
        resp = client.post(url, content=_span_request(_span(9)).SerializeToString(), headers=PB)
        assert resp.status_code == 200 and resp.content == b""
    assert receiver.flush(10)
    names = store.query("SELECT SpanName, length(SpanAttributes['prompt']) FROM otel_traces ORDER BY SpanName",
                        tag="test").result_rows
    assert names == [("json-ok", 0), ("span-4", 0), ("span-6", 0), ("span-8", 65536), ("span-9", 0)]
    stats = receiver.stats
    assert (stats.received, stats.rejected, stats.stored, stats.truncated_attributes) == (8, 3, 5, 1)
    assert stats.requests == {"/v1/traces 400": 2, "/v1/traces 200": 5, "/v1/traces 413": 2, "/v1/traces 415": 1}


def test_bearer_token_health_and_prometheus_metrics(store, tmp_path):
    r = Receiver(ReceiverConfig(port=0, spool_dir=tmp_path / "spool", ingest_token="s3cret",
                                batch_max_seconds=0.05), store).start()
    try:
        body = _span_request(_span(1), _span(2, start=T0 + 1, end=T0)).SerializeToString()
        resp = httpx.post(f"{r.url}/v1/traces", content=body, headers=PB)
        assert resp.status_code == 401 and "bearer token" in _status(resp)
        resp = httpx.post(f"{r.url}/v1/traces", content=body, headers={**PB, "authorization": "Bearer s3cret2"})
        assert resp.status_code == 401
        # the scheme is case-insensitive (RFC 9110 11.1): an exporter sending "bearer" is let in
        resp = httpx.post(f"{r.url}/v1/traces", content=body, headers={**PB, "authorization": "bearer s3cret"})
        assert resp.status_code == 200
        assert r.flush(10)
        health = httpx.get(f"{r.url}/health").json()
        assert health["status"] == "ok" and health["stored"] == 1 and health["queue_rows"] == 0
        text = httpx.get(f"{r.url}/metrics").text
        for line in ("infercost_receiver_spans_received_total 2.0", "infercost_receiver_spans_stored_total 1.0",
                     "infercost_receiver_spans_rejected_total 1.0", "infercost_receiver_queue_rows 0.0",
                     "infercost_receiver_spool_bytes 0.0", "infercost_receiver_store_available 1.0",
                     'infercost_receiver_requests_total{code="401",path="/v1/traces"} 2.0'):
            assert line in text, line
        assert "infercost_receiver_newest_row_lag_seconds " in text
    finally:
        r.stop()
        r.stop()  # idempotent
    assert r.config.host == "127.0.0.1"


def test_schema_sent_inline_for_a_server(store):
    """A ClickHouse server gets the protobuf schema inline (format_schema_source='string'); same rows."""
    from collectors.ingest import ingest_traces

    class ServerLike:  # the store as a server-backed client looks to the ingest code: not embedded
        embedded = False

        def raw_insert(self, *args, **kwargs):
            assert kwargs["settings"]["format_schema_source"] == "string"
            return store.raw_insert(*args, **kwargs)

    result = ingest_traces(ServerLike(), _span_request(_span(3), _span(4)))
    assert (result.accepted, result.rejected, result.message) == (2, 0, "")
    assert store.query("SELECT SpanName, SpanKind, Duration FROM otel_traces ORDER BY SpanName", tag="test").result_rows \
        == [("span-3", "Internal", 100), ("span-4", "Internal", 100)]


def _field(number: int, payload: bytes) -> bytes:
    from google.protobuf.internal.encoder import _VarintBytes

    return _VarintBytes(number << 3 | 2) + _VarintBytes(len(payload)) + payload


def _deep_kv(depth: int) -> bytes:
    """Span.attributes entry ``deep`` = an AnyValue nested ``depth`` kvlists deep, encoded by hand (the
    protobuf library refuses to build it past ~30 levels; a hostile or buggy client need not)."""
    value = _field(1, b"leaf")
    for i in range(depth):
        value = _field(6, _field(1, _field(1, f"k{i}".encode()) + _field(2, value)))
    return _field(9, _field(1, b"deep") + _field(2, value))


def test_retention_future_nesting_keys_and_malformed_json(store, tmp_path):
    """By hand: out-of-range times are named in partial_success (never a silent
    200); a 50-level attribute and a 1 MB key keep their span; malformed JSON is a 400 with a message."""
    import time

    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    now = time.time_ns()
    day = 86_400 * 10**9
    r = Receiver(ReceiverConfig(port=0, spool_dir=tmp_path / "spool", batch_max_seconds=0.05, retention_days=30),
                 store).start()
    try:
        times = {1: (1, 2), 2: (now - 40 * day, now - 40 * day + 5), 3: (2**64 - 10, 2**64 - 1),
                 4: (now + 2 * 3600 * 10**9, now + 2 * 3600 * 10**9 + 5), 5: (now - day, now - day + 5)}
        spans = [Span(trace_id=k.to_bytes(16, "big"), span_id=k.to_bytes(8, "big"), name="t", start_time_unix_nano=s,
                      end_time_unix_nano=e) for k, (s, e) in times.items()]
        resp = httpx.post(f"{r.url}/v1/traces", content=_span_request(*spans).SerializeToString(), headers=PB)
        rejected, message = _partial(resp)
        assert resp.status_code == 200 and rejected == 4, message
        assert "2 spans older than the 30-day retention" in message
        assert "2 spans dated more than 3600 s in the future" in message

        deep = Span(trace_id=(6).to_bytes(16, "big"), span_id=(6).to_bytes(8, "big"), name="deep",
                    start_time_unix_nano=now, end_time_unix_nano=now + 5)
        big_key = Span(trace_id=(7).to_bytes(16, "big"), span_id=(7).to_bytes(8, "big"), name="key",
                       start_time_unix_nano=now, end_time_unix_nano=now + 5)
        big_key.attributes.add(key="k" * (1 << 20)).value.string_value = "v"
        spans = _field(2, deep.SerializeToString() + _deep_kv(50)) + _field(2, big_key.SerializeToString())
        body = _field(1, _field(2, spans))  # ExportTraceServiceRequest{resource_spans{scope_spans{spans}}}
        resp = httpx.post(f"{r.url}/v1/traces", content=body, headers=PB)
        rejected, message = _partial(resp)
        assert resp.status_code == 200 and rejected == 0, message
        assert "cut 1 attribute value(s) nested deeper than 1 level" in message
        assert "truncated 1 attribute key(s) longer than 1024 bytes" in message

        for path, text, needle in (("/v1/metrics", b'{"resourceMetrics": 5}', "resourceMetrics must be a list"),
                                   ("/v1/traces", b'{"resourceSpans":' + b"[" * 5000 + b"]" * 5000 + b"}",
                                    "nested deeper than 200 levels")):
            resp = httpx.post(f"{r.url}{path}", content=text, headers={"content-type": "application/json"})
            assert resp.status_code == 400 and needle in resp.json()["message"], resp.text
        assert r.flush(30)
    finally:
        r.stop()
    rows = store.query("SELECT SpanId, arrayMap(k -> length(k), mapKeys(SpanAttributes)), SpanAttributes['deep'] "
                       "FROM otel_traces ORDER BY SpanId", tag="test").result_rows
    # the deep value keeps its first level (stored as JSON; the level below is null, as for any nesting)
    assert rows == [("0000000000000005", [], ""), ("0000000000000006", [4], '{"k49":null}'),
                    ("0000000000000007", [1024], "")]
