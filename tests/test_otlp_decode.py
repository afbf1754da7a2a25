"""OTLP decoding and validation without the store: value strings, gzip limits, bad spans, JSON ids."""

from __future__ import annotations

import gzip
import json

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from collectors import otlp_common as common
from collectors.otlp_traces import prepare_traces
from google.protobuf.internal.encoder import _VarintBytes

TRACE = bytes(range(1, 17))


def _request(spans):
    """spans: list of (span_id bytes, start, end, attrs dict name->AnyValue)"""
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.add(key="service.name").value.string_value = "svc"
    ss = rs.scope_spans.add()
    for sid, start, end, attrs in spans:
        sp = ss.spans.add(trace_id=TRACE, span_id=sid, name="s", start_time_unix_nano=start, end_time_unix_nano=end)
        for key, value in attrs.items():
            sp.attributes.add(key=key, value=value)
    return req


@pytest.mark.parametrize("value, text", [
    (0.1, "0.1"), (1.0, "1"), (1e-7, "1e-7"), (1e21, "1e21"), (1e16, "10000000000000000"), (1e-5, "0.00001"),
    (-2.5, "-2.5"), (123.456, "123.456"), (9.99e20, "999000000000000000000"), (float("inf"), "inf"),
])
def test_doubles_are_written_as_clickhouse_tostring(value, text):
    assert common.format_double(value) == text


def test_any_value_strings_follow_the_exporter():
    arr = AnyValue()
    arr.array_value.values.add(string_value='a"b')
    arr.array_value.values.add(int_value=3)
    arr.array_value.values.add(bool_value=False)
    arr.array_value.values.add(double_value=0.5)
    kv = AnyValue()
    kv.kvlist_value.values.add(key="k").value.int_value = -1
    cases = [(AnyValue(string_value="x"), "x"), (AnyValue(bool_value=True), "true"), (AnyValue(int_value=0), "0"),
             (AnyValue(double_value=2.0), "2"), (AnyValue(bytes_value=b"\x00\xff"), "AP8="), (arr, '["a\\"b",3,false,0.5]'),
             (kv, '{"k":-1}'), (AnyValue(), "")]
    for value, text in cases:
        assert common.any_value_to_string(value) == text


def test_gzip_bomb_stops_at_the_limit():
    bomb = gzip.compress(b"\0" * (8 * 1024 * 1024))
    assert len(bomb) < 64 * 1024
    with pytest.raises(common.BodyTooLarge, match="exceeds the limit of 1048576 bytes after gzip"):
        common.decompress(bomb, "gzip", 1024 * 1024)
    assert common.decompress(gzip.compress(b"hello"), "gzip", 5) == b"hello"
    with pytest.raises(common.UndecodableBody, match="corrupt gzip"):
        common.decompress(gzip.compress(b"hello")[:10] + b"\xff" * 20, "gzip", 1000)
    with pytest.raises(common.UndecodableBody, match="truncated gzip"):
        common.decompress(gzip.compress(b"hello" * 100)[:-12], "gzip", 1000)
    with pytest.raises(common.UnsupportedMediaType, match="'br'"):
        common.decompress(b"x", "br", 10)


def test_content_types():
    assert common.media_type("application/x-protobuf") == common.PROTOBUF
    assert common.media_type("Application/JSON; charset=utf-8") == common.JSON
    with pytest.raises(common.UnsupportedMediaType, match="'text/plain'"):
        common.media_type("text/plain")


def test_invalid_spans_are_rejected_and_named_valid_ones_kept():
    good = (b"\x01" * 8, 100, 200, {})
    req = _request([good, (b"\x02" * 8, 300, 250, {}), (b"\x03" * 7, 1, 2, {}), (b"\x04" * 8, 0, 5, {})])
    prepared = prepare_traces(req.SerializeToString())
    assert (prepared.accepted, prepared.rejected) == (1, 3)
    assert prepared.message.startswith("rejected 3 of 4 spans; first: span 0202020202020202 ")
    assert "end_time_unix_nano 250 is before start_time_unix_nano 300" in prepared.message
    kept = ExportTraceServiceRequest.FromString(prepared.payload)
    assert [s.span_id for s in kept.resource_spans[0].scope_spans[0].spans] == [b"\x01" * 8]
    assert prepared.newest_ns == 200


def test_valid_request_bytes_are_kept_as_sent():
    body = _request([(b"\x01" * 8, 100, 200, {"a": AnyValue(string_value="x")})]).SerializeToString()
    prepared = prepare_traces(body)
    assert prepared.payload is not None and prepared.payload == body and prepared.message == ""


def test_non_utf8_attribute_rejects_only_its_span():
    body = _request([(b"\x01" * 8, 1, 2, {"ok": AnyValue(string_value="fine")}),
                     (b"\x02" * 8, 1, 2, {"bad": AnyValue(string_value="QQQQ")})]).SerializeToString()
    body = body.replace(b"QQQQ", b"\xff\xfeQQ")
    with pytest.raises(Exception):
        ExportTraceServiceRequest.FromString(body)  # python protobuf refuses the whole request
    prepared = prepare_traces(body)
    assert (prepared.accepted, prepared.rejected) == (1, 1)
    assert "span 0202020202020202" in prepared.message
    assert "attribute 'bad' is not valid UTF-8 (byte 0)" in prepared.message
    kept = ExportTraceServiceRequest.FromString(prepared.payload)
    assert kept.resource_spans[0].scope_spans[0].spans[0].attributes[0].value.string_value == "fine"


def test_large_attribute_is_truncated_at_a_character_boundary():
    value = "é" * 40_000  # 80,000 bytes
    prepared = prepare_traces(_request([(b"\x01" * 8, 1, 2, {"big": AnyValue(string_value=value)})]).SerializeToString(),
                              max_attribute_bytes=65_535)
    assert (prepared.accepted, prepared.rejected, prepared.truncated) == (1, 0, 1)
    assert prepared.message == ("truncated 1 attribute value(s) longer than 65535 bytes "
                                "(first: span 0101010101010101 attribute 'big' (80000 bytes))")
    kept = ExportTraceServiceRequest.FromString(prepared.payload)
    assert kept.resource_spans[0].scope_spans[0].spans[0].attributes[0].value.string_value == "é" * 32_767


@pytest.mark.parametrize("body", [b"\x0a\xff\xff\xff\xff\x0f", b"\x12\x34\x56\x78\x9a", bytes(range(256)) * 3])
def test_undecodable_protobuf(body):
    with pytest.raises(common.UndecodableBody, match="undecodable protobuf ExportTraceServiceRequest") as info:
        prepare_traces(body)
    # the client is told the OTLP type it sent, not the receiver's internal copy of it
    assert "infercost_" not in str(info.value)
    assert "'opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest'" in str(info.value)


def test_json_ids_are_hex_and_checked_per_span():
    doc = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "j"}}]},
                              "scopeSpans": [{"scope": {"name": "sc"}, "spans": [
                                  {"traceId": "0102030405060708090A0B0C0D0E0F10", "spanId": "1111111111111111",
                                   "name": "ok", "kind": 2, "startTimeUnixNano": "1000", "endTimeUnixNano": 2000,
                                   "attributes": [{"key": "n", "value": {"intValue": "42"}}], "unknownField": 1},
                                  {"traceId": "0102030405060708090a0b0c0d0e0f", "spanId": "2222222222222222",
                                   "name": "short", "startTimeUnixNano": "1", "endTimeUnixNano": "2"}]}]}]}
    prepared = prepare_traces(json.dumps(doc).encode(), common.JSON)
    assert (prepared.accepted, prepared.rejected) == (1, 1)
    assert "span 2222222222222222" in prepared.message
    assert "traceId '0102030405060708090a0b0c0d0e0f' is 15 bytes, expected 16" in prepared.message
    span = ExportTraceServiceRequest.FromString(prepared.payload).resource_spans[0].scope_spans[0].spans[0]
    assert span.trace_id == bytes(range(1, 17)) and span.kind == 2 and span.end_time_unix_nano == 2000
    assert span.attributes[0].value.int_value == 42
    with pytest.raises(common.UndecodableBody, match="invalid JSON"):
        prepare_traces(b"{not json", common.JSON)


def _layered_request():
    """Two resources x two scopes, spans of 1-, 2- and 3-byte length prefixes (up to 20 KB)."""
    req = ExportTraceServiceRequest()
    n = 0
    for r in range(2):
        rs = req.resource_spans.add()
        rs.resource.attributes.add(key="service.name").value.string_value = f"svc{r}"
        for s in range(2):
            ss = rs.scope_spans.add()
            ss.scope.name = f"scope{r}{s}"
            for size in (0, 300, 20_000):
                n += 1
                sp = ss.spans.add(trace_id=TRACE, span_id=n.to_bytes(8, "big"), name="s",
                                  start_time_unix_nano=1, end_time_unix_nano=2)
                if size:
                    sp.attributes.add(key="v", value=AnyValue(string_value="x" * size))
    return req


def test_oversized_keys_found_in_every_resource_scope_and_span():
    long_key = "k" * 1500
    req = _layered_request()
    req.resource_spans[1].resource.attributes.add(key=long_key).value.string_value = "r"
    req.resource_spans[1].scope_spans[1].scope.attributes.add(key=long_key).value.string_value = "s"
    target = req.resource_spans[1].scope_spans[1].spans[1]
    target.attributes.add(key=long_key).value.int_value = 7
    body = req.SerializeToString()
    # an unknown field (number 9, varint) in that scope's bytes, before its spans: still read past
    scope_bytes = req.resource_spans[1].scope_spans[1].SerializeToString()
    assert body.count(scope_bytes) == 1
    patched = b"\x48\x01" + scope_bytes
    rs_bytes = req.resource_spans[1].SerializeToString()
    new_rs = rs_bytes.replace(scope_bytes, patched)
    new_rs = new_rs.replace(b"\x12" + _VarintBytes(len(scope_bytes)) + patched,
                            b"\x12" + _VarintBytes(len(patched)) + patched)
    body = body.replace(b"\x0a" + _VarintBytes(len(rs_bytes)) + rs_bytes,
                        b"\x0a" + _VarintBytes(len(new_rs)) + new_rs)
    parsed = ExportTraceServiceRequest.FromString(body)
    assert parsed != req
    parsed.DiscardUnknownFields()
    assert parsed == req  # the same request, one unknown field more
    prepared = prepare_traces(body, max_attribute_bytes=65_535)
    assert (prepared.accepted, prepared.rejected, prepared.truncated) == (12, 0, 3)
    kept = ExportTraceServiceRequest.FromString(prepared.payload)
    rs = kept.resource_spans[1]
    assert [a.key for a in rs.resource.attributes] == ["service.name", "k" * 1024]
    assert [a.key for a in rs.scope_spans[1].scope.attributes] == ["k" * 1024]
    assert [a.key for a in rs.scope_spans[1].spans[1].attributes] == ["v", "k" * 1024]
    assert rs.scope_spans[1].spans[2].attributes[0].value.string_value == "x" * 20_000  # under the value limit


_IDS = {"trace": [b"", b"\x00" * 16, TRACE, TRACE[:15], TRACE + b"\x01"],
        "span": [b"", b"\x00" * 8, b"\x01" * 8, b"\x01" * 7, b"\x01" * 9],
        "parent": [b"", b"\x00" * 8, b"\x02" * 8, b"\x02" * 7]}


def test_validation_accepts_exactly_what_span_problem_and_the_time_bounds_accept():
    """The receiver's inline id / time checks (its hot loop) agree with ``span_problem`` and
    ``TimeBounds.problem``, the functions whose messages it reports."""
    import itertools

    now = 1_700_000_000 * 10**9
    grid = itertools.product(_IDS["trace"], _IDS["span"], _IDS["parent"], [0, 1, now - 10**9, now, now + 10**12],
                             [-1, 0, 10**9, 400 * 86_400 * 10**9], [False, True])
    for case in grid:  # every combination: 4,000 one-span requests
        _check_one_span(*case, now)


def _check_one_span(tid, sid, pid, start, length, bounded, now):
    from collectors.otlp_traces import span_problem

    req = ExportTraceServiceRequest()
    span = req.resource_spans.add().scope_spans.add().spans.add(
        trace_id=tid, span_id=sid, parent_span_id=pid, name="s", start_time_unix_nano=start,
        end_time_unix_nano=max(0, start + length))
    bounds = common.TimeBounds.around(now, 3650, 300.0) if bounded else None
    problem = span_problem(span) or (bounds.problem(span.start_time_unix_nano, span.end_time_unix_nano)
                                     if bounds is not None else "")
    prepared = prepare_traces(req.SerializeToString(), bounds=bounds)
    assert (prepared.accepted, prepared.rejected) == ((0, 1) if problem else (1, 0))
    if span_problem(span):
        assert span_problem(span) in prepared.message
