"""OTLP span encoding without protobuf objects: ExportTraceServiceRequest bytes written directly.

Position: serving (gateway export path). The OTel exporter builds one protobuf object per span,
attribute and value and then serialises them (~50 us per gateway span, the largest share of the
gateway's span cost). :func:`encode_spans_bytes` writes the same wire format field by field, and
caches the encoded key/value of attributes that repeat from request to request (policy, replica,
model, operation, status...). The result parses to a message equal to the exporter's own
``encode_spans(spans)`` (tests/test_gateway_span_encoding.py checks it).

Source of the layout: opentelemetry-proto ``trace/v1/trace.proto``, ``common/v1/common.proto``,
``resource/v1/resource.proto`` and ``collector/trace/v1/trace_service.proto``; the protobuf wire
format (varint, 64-bit, length-delimited, 32-bit records; proto3 omits scalar defaults but keeps
set oneof members and set sub-messages).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from serving.emulator.pbenc import ld as _ld, varint  # the wire primitives the simulators' encoder uses

_CACHE_MAX = 8192  # encoded (key, value) pairs kept; cleared when full
_kv_cache: dict[tuple, bytes] = {}
_head_cache: dict[tuple, bytes] = {}  # (resource, scope) -> encoded Resource / InstrumentationScope (+ schema urls)
_pack_d = struct.Struct("<d").pack
_pack_q = struct.Struct("<Q").pack
_pack_i = struct.Struct("<I").pack


def _any_value(value) -> bytes:
    """AnyValue: string 1, bool 2, int 3, double 4, array 5, kvlist 6, bytes 7 (a oneof: always written)."""
    if value is None:
        return b""
    if value is True or value is False:
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _ld(0x0A, value.encode())
    if isinstance(value, int):
        return b"\x18" + varint(value)
    if isinstance(value, float):
        return b"\x21" + _pack_d(value)
    if isinstance(value, bytes):
        return _ld(0x3A, value)
    if isinstance(value, Sequence):
        return _ld(0x2A, b"".join(_ld(0x0A, _any_value(v)) for v in value))
    if isinstance(value, Mapping):
        return _ld(0x32, b"".join(_ld(0x0A, _key_value(str(k), v)) for k, v in value.items()))
    raise TypeError(f"Invalid type {type(value)} of value {value}")


def _key_value(key: str, value) -> bytes:
    """KeyValue: key 1 (omitted when empty), value 2 (always present)."""
    return (_ld(0x0A, key.encode()) if key else b"") + _ld(0x12, _any_value(value))


def _attributes(tag: int, attributes) -> bytes:
    """Repeated KeyValue field ``tag``: each attribute's tagged bytes cached (the values that repeat
    from request to request: policy, replica, model, operation, status...), not floats (latencies)."""
    if not attributes:
        return b""
    out = []
    cache = _kv_cache
    for key, value in attributes.items():
        cls = value.__class__
        if cls is float:
            out.append(_ld(tag, _key_value(key, value)))
            continue
        ck = (tag, key, cls, tuple(value) if isinstance(value, (list, tuple)) else value)
        try:
            got = cache.get(ck)
        except TypeError:  # an unhashable value
            out.append(_ld(tag, _key_value(key, value)))
            continue
        if got is None:
            if len(cache) >= _CACHE_MAX:
                cache.clear()
            got = cache[ck] = _ld(tag, _key_value(key, value))
        out.append(got)
    return b"".join(out)


_small_cache: dict = {}  # (field, value) -> encoded field: span names, kinds, statuses (a handful of values)


def _small(field: str, value) -> bytes:
    got = _small_cache.get((field, value))
    if got is not None:
        return got
    if field == "name":
        out = _ld(0x2A, value.encode()) if value else b""
    elif field == "kind":
        out = b"\x30" + varint(value.value + 1)  # SDK INTERNAL=0.. -> SPAN_KIND_INTERNAL=1..
    else:  # status: (code, description)
        code, description = value
        payload = (_ld(0x12, description.encode()) if description else b"") + \
                  (b"\x18" + varint(code.value) if code.value else b"")
        out = _ld(0x7A, payload)
    if len(_small_cache) >= 1024:
        _small_cache.clear()
    _small_cache[(field, value)] = out
    return out


def _span(span) -> bytes:
    """Span fields 1-16 in field order (trace.proto)."""
    ctx = span.get_span_context()
    parent = span.parent
    parts = [b"\x0A\x10" + ctx.trace_id.to_bytes(16, "big"), b"\x12\x08" + ctx.span_id.to_bytes(8, "big")]
    if ctx.trace_state:
        parts.append(_ld(0x1A, ",".join(f"{k}={v}" for k, v in ctx.trace_state.items()).encode()))
    if parent:
        parts.append(b"\x22\x08" + parent.span_id.to_bytes(8, "big"))
    parts.append(_small("name", span.name))
    parts.append(_small("kind", span.kind))
    start, end = span.start_time, span.end_time
    if start and end:
        parts.append(_pack_times(0x39, start, 0x41, end))
    else:
        if start:
            parts.append(b"\x39" + _pack_q(start))
        if end:
            parts.append(b"\x41" + _pack_q(end))
    parts.append(_attributes(0x4A, span.attributes))
    if span.dropped_attributes:
        parts.append(b"\x50" + varint(span.dropped_attributes))
    if span.dropped_events:
        parts.append(b"\x60" + varint(span.dropped_events))
    if span.dropped_links:
        parts.append(b"\x70" + varint(span.dropped_links))
    status = span.status
    if status is not None:
        parts.append(_small("status", (status.status_code, status.description)))
    parts.append(_FLAGS_REMOTE_PARENT if parent is not None and parent.is_remote else _FLAGS)  # field 16, fixed32
    return b"".join(parts)


_pack_times = struct.Struct("<BQBQ").pack
_FLAGS = b"\x85\x01" + _pack_i(0x100)
_FLAGS_REMOTE_PARENT = b"\x85\x01" + _pack_i(0x100 | 0x200)


def _heads(resource, scope) -> tuple[bytes, bytes, bytes]:
    """(ResourceSpans.resource field, ScopeSpans.scope field, ScopeSpans.schema_url field) for a group."""
    key = (id(resource), id(scope))
    got = _head_cache.get(key)
    if got is not None and got[0] is resource and got[1] is scope:
        return got[2]
    res = _ld(0x0A, _attributes(0x0A, resource.attributes))
    if scope is None:
        sc_field, schema = _ld(0x0A, b""), b""
    else:
        body = (_ld(0x0A, scope.name.encode()) if scope.name else b"") + \
               (_ld(0x12, scope.version.encode()) if scope.version else b"") + _attributes(0x1A, scope.attributes)
        sc_field = _ld(0x0A, body)
        schema = _ld(0x1A, scope.schema_url.encode()) if scope.schema_url else b""
    if len(_head_cache) >= 64:
        _head_cache.clear()
    _head_cache[key] = (resource, scope, (res, sc_field, schema))
    return res, sc_field, schema


def encode_spans_bytes(spans: Sequence) -> bytes:
    """Serialised ``ExportTraceServiceRequest`` for SDK ``ReadableSpan``s, grouped by resource and
    instrumentation scope in first-seen order (as the OTel exporter groups them). Spans with events
    or links take the exporter's own encoder."""
    if any(s.events or s.links for s in spans):
        return encode_spans(spans).SerializePartialToString()
    # The group's list looked up by object identity: a Resource hashes by JSON-encoding its
    # attributes (once per span, that was about a tenth of the encoding). Equal objects share one
    # list, as in the exporter's grouping by equality.
    groups: dict = {}
    lists: dict = {}
    for span in spans:
        resource, scope = span.resource, span.instrumentation_scope or None
        encoded = lists.get((id(resource), id(scope)))
        if encoded is None:
            encoded = lists[(id(resource), id(scope))] = groups.setdefault(resource, {}).setdefault(scope, [])
        encoded.append(_span(span))
    out = []
    for resource, scopes in groups.items():
        scope_spans = []
        for scope, encoded in scopes.items():
            res, sc_field, schema = _heads(resource, scope)
            scope_spans.append(_ld(0x12, sc_field + b"".join(_ld(0x12, e) for e in encoded) + schema))
        tail = _ld(0x1A, resource.schema_url.encode()) if resource.schema_url else b""
        out.append(_ld(0x0A, res + b"".join(scope_spans) + tail))
    return b"".join(out)


class CompactOTLPSpanExporter(OTLPSpanExporter):
    """OTLPSpanExporter (OTLP/HTTP protobuf) that serialises with :func:`encode_spans_bytes`;
    transport, retries and limits are the parent's. Falls back to the parent's export when its
    internals (OTel SDK versions) are not the expected ones."""

    def export(self, spans) -> SpanExportResult:
        client, metrics = getattr(self, "_client", None), getattr(self, "_metrics", None)
        if self._shutdown or client is None or metrics is None or not hasattr(client, "export"):
            return super().export(spans)
        with metrics.export_operation(len(spans)) as result:
            try:
                data = encode_spans_bytes(spans)
            except Exception as error:  # noqa: BLE001 - as the parent: a bad batch is dropped, not raised
                result.error = error
                return SpanExportResult.FAILURE
            if self._max_request_size is not None and len(data) > self._max_request_size:
                return super().export(spans)  # the parent logs and reports the oversized batch
            answer = client.export(data)
            if not answer.success:
                result.error = answer.error
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS
