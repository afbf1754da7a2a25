"""Property-based fuzzing of the receiver: over 1,000 generated bodies per run.

Bodies: random bytes, random JSON (any shape, nested deep, wrong types where OTLP expects lists or
objects), OTLP/JSON and protobuf requests mixing valid spans with invalid ones (bad ids, missing or
reversed times, wrong field types), attribute values nested up to 45 levels and keys of up to 2 KB,
and flipped bytes of valid protobuf. Properties: no answer is a 5xx, every malformed body
gets a 4xx with a message, the receiver stays alive, and every valid span of a request answered
200 is stored (the spans of the well-formed requests are tracked by id).
"""

from __future__ import annotations

import itertools
import json
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from google.protobuf.internal.encoder import _VarintBytes
from google.rpc import status_pb2
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from collectors.receiver import Receiver, ReceiverConfig
from conftest import emptied

IDS = itertools.count(1)
NOW = time.time_ns()


@pytest.fixture
def store(module_store):
    return emptied(module_store, "otel_traces", "llm_calls", "otel_traces_trace_id_ts", "otel_metrics_gauge",
                   "otel_metrics_sum", "otel_metrics_histogram")


def _nested_json(depth: int) -> dict:
    value = {"stringValue": "leaf"}
    for i in range(depth):
        value = {"kvlistValue": {"values": [{"key": f"k{i}", "value": value}]}} if i % 2 else \
            {"arrayValue": {"values": [value, {"intValue": str(i)}]}}
    return value


@st.composite
def json_attribute(draw):
    key = draw(st.one_of(st.text(max_size=20), st.just("k" * draw(st.sampled_from([10, 2_000])))))
    value = draw(st.one_of(
        st.builds(lambda s: {"stringValue": s}, st.text(max_size=50)),
        st.builds(lambda i: {"intValue": str(i)}, st.integers(-2**63, 2**63 - 1)),
        st.builds(lambda d: {"doubleValue": d}, st.floats(allow_nan=False, allow_infinity=False)),
        st.builds(_nested_json, st.integers(0, 45)),
    ))
    return {"key": key, "value": value}


@st.composite
def json_span(draw, valid: bool):
    n = next(IDS)
    span = {"traceId": format(n, "032x"), "spanId": format(n, "016x"), "name": draw(st.text(max_size=30)),
            "startTimeUnixNano": str(NOW), "endTimeUnixNano": str(NOW + 1_000_000),
            "attributes": draw(st.lists(json_attribute(), max_size=3))}
    if not valid:
        fault = draw(st.sampled_from(["trace_id", "span_id", "zero", "start", "reversed", "attributes", "kind",
                                      "not_object"]))
        if fault == "trace_id":
            span["traceId"] = draw(st.sampled_from(["zz", "abc", format(n, "030x")]))
        elif fault == "span_id":
            span["spanId"] = 12345
        elif fault == "zero":
            span["spanId"] = "0" * 16
        elif fault == "start":
            span["startTimeUnixNano"] = "0"
        elif fault == "reversed":
            span["endTimeUnixNano"] = str(NOW - 1)
        elif fault == "attributes":
            span["attributes"] = draw(st.sampled_from([5, "x", {"a": 1}, [1, 2]]))
        elif fault == "kind":
            span["kind"] = {"x": 1}
        else:
            return draw(st.sampled_from([5, "span", None, []])), None
    return span, (format(n, "016x") if valid else None)


@st.composite
def mixed_json_request(draw):
    spans, valid_ids = [], []
    for valid in draw(st.lists(st.booleans(), min_size=1, max_size=6)):
        span, sid = draw(json_span(valid))
        spans.append(span)
        if sid:
            valid_ids.append(sid)
    doc = {"resourceSpans": [{"resource": {"attributes": draw(st.lists(json_attribute(), max_size=2))},
                              "scopeSpans": [{"scope": {"name": "fuzz"}, "spans": spans}]}]}
    return "/v1/traces", "application/json", json.dumps(doc).encode(), valid_ids


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2), encoded by hand: upb itself refuses to build
    messages nested past its depth limit, which is exactly what a hostile client sends."""
    return _VarintBytes(number << 3 | 2) + _VarintBytes(len(payload)) + payload


def _deep_attribute(key: str, depth: int) -> bytes:
    """KeyValue{key, value: AnyValue nested ``depth`` kvlists deep around a string}."""
    value = _field(1, b"leaf")  # AnyValue.string_value
    for i in range(depth):
        kv = _field(1, f"k{i}".encode()) + _field(2, value)  # KeyValue{key, value}
        value = _field(6, _field(1, kv))  # AnyValue.kvlist_value{values}
    return _field(1, key.encode()) + _field(2, value)


@st.composite
def mixed_protobuf_request(draw):
    spans = b""
    valid_ids = []
    for valid in draw(st.lists(st.booleans(), min_size=1, max_size=6)):
        n = next(IDS)
        span = Span(trace_id=n.to_bytes(16, "big"), span_id=n.to_bytes(8, "big"), name="p",
                    start_time_unix_nano=NOW, end_time_unix_nano=NOW + 1000)
        extra = b""
        if valid:
            valid_ids.append(format(n, "016x"))
            extra = _field(9, _deep_attribute("k" * draw(st.sampled_from([3, 2_000])), draw(st.integers(0, 45))))
        else:
            kind = draw(st.sampled_from(["trace", "span", "time"]))
            if kind == "trace":
                span.trace_id = b"\0" * 16
            elif kind == "span":
                span.span_id = b"\1\2"
            else:
                span.start_time_unix_nano = 0
        spans += _field(2, span.SerializeToString() + extra)  # ScopeSpans.spans
    body = _field(1, _field(2, spans))  # ExportTraceServiceRequest.resource_spans{scope_spans{spans}}
    if draw(st.booleans()) and draw(st.booleans()):  # sometimes flip bytes: then nothing is promised
        flips = draw(st.lists(st.integers(0, max(len(body) - 1, 0)), min_size=1, max_size=4))
        raw = bytearray(body)
        for i in flips:
            raw[i] ^= 0xFF
        return "/v1/traces", "application/x-protobuf", bytes(raw), []
    return "/v1/traces", "application/x-protobuf", body, valid_ids


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
                           lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children,
                                                                                             max_size=4), max_leaves=12)


@st.composite
def junk(draw):
    path = draw(st.sampled_from(["/v1/traces", "/v1/metrics"]))
    kind = draw(st.sampled_from(["bytes", "json", "otlp_keys", "deep"]))
    if kind == "bytes":
        return path, draw(st.sampled_from(["application/x-protobuf", "application/json"])), draw(st.binary(max_size=300)), []
    if kind == "json":
        return path, "application/json", json.dumps(draw(json_values)).encode(), []
    if kind == "otlp_keys":  # OTLP's keys holding the wrong types at any level
        key = "resourceSpans" if path == "/v1/traces" else "resourceMetrics"
        inner = draw(st.sampled_from(["scopeSpans", "scopeMetrics", "spans", "metrics", "resource", "dataPoints"]))
        doc = {key: draw(st.one_of(json_values, st.builds(lambda v: [{inner: v}], json_values)))}
        return path, "application/json", json.dumps(doc).encode(), []
    depth = draw(st.integers(100, 1500))
    return path, "application/json", (b'{"resourceSpans":' + b"[" * depth + b"]" * depth + b"}"), []


bodies = st.one_of(mixed_json_request(), mixed_protobuf_request(), junk())


def test_no_body_gets_a_5xx_and_every_valid_span_is_stored(store, tmp_path):
    receiver = Receiver(ReceiverConfig(port=0, spool_dir=tmp_path / "spool", batch_max_seconds=0.2), store).start()
    expected: set[str] = set()
    seen = {"n": 0, "4xx": 0, "200": 0}
    client = httpx.Client(timeout=30)
    try:
        @settings(max_examples=1000, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
        @given(case=bodies)
        def one(case):
            path, content_type, body, valid_ids = case
            resp = client.post(receiver.url + path, content=body, headers={"content-type": content_type})
            seen["n"] += 1
            assert resp.status_code < 500, (resp.status_code, resp.text[:300], body[:200])
            if resp.status_code == 200:
                seen["200"] += 1
                expected.update(valid_ids)
            else:
                seen["4xx"] += 1
                message = (resp.json().get("message") if content_type == "application/json"
                           else status_pb2.Status.FromString(resp.content).message)
                assert resp.status_code == 400 and message, resp.content[:300]
                assert not valid_ids or content_type == "application/json", "a well-formed protobuf request was refused"

        one()
        assert seen["n"] >= 1000 and seen["200"] and seen["4xx"]
        assert httpx.get(receiver.url + "/health").json()["writer_restarts"] == 0
        assert receiver.flush(60)
    finally:
        client.close()
        receiver.stop()
    stored = {r[0] for r in store.query("SELECT SpanId FROM otel_traces", tag="test").result_rows}
    missing = expected - stored
    assert not missing, f"{len(missing)} valid spans of 200-answered requests not stored, e.g. {sorted(missing)[:5]}"
