"""Decode and validate an OTLP ``ExportTraceServiceRequest`` into a payload ready for the store.

Position: collectors. No I/O. :func:`prepare_traces` turns a request body (protobuf or OTLP
JSON, already decompressed) into :class:`PreparedTraces`: protobuf bytes that hold only the valid
spans (the original bytes untouched when every span is valid), the counts and a message naming
the first problem. The bytes are what the spool stores and what ClickHouse decodes
(``schema/migrations/1000_baseline_spans.sql``).

A span is rejected (counted in ``partial_success.rejected_spans``) when:

* its trace id is not 16 bytes, or all zero; its span id is not 8 bytes, or all zero; its parent
  span id is neither empty nor 8 bytes (OTLP ``trace.proto``: "an all-zero id is invalid");
* ``start_time_unix_nano`` is 0, or ``end_time_unix_nano`` is before it (Duration would be
  negative; the exporter's Duration column is UInt64);
* any of its string fields (name, attribute keys/values, event names, status message,
  trace state) is not valid UTF-8 — or its resource's / scope's are (then all spans under it);
* in OTLP JSON: an id is not hex or has the wrong length, or a field has the wrong type;
* (with ``bounds``, as the receiver passes) it starts before the store's retention (the table TTL
  would drop it at insert) or more than ``bounds.max_future_s`` in the future — counted apart in
  the message, e.g. "12 spans older than the 30-day retention".

String and bytes attribute values longer than ``max_attribute_bytes`` (default 64 KiB) and keys
longer than ``MAX_ATTRIBUTE_KEY_BYTES`` (1 KiB) are truncated at a UTF-8 character boundary, not
rejected: the span is the evidence of paid GPU work and must not be lost for one oversized
attribute (a prompt logged as an attribute, say). Array/kvlist values nested deeper than one
level — which the store keeps as null — are cut to that level when they are too deep to decode
(protobuf's recursion limit, ~30 levels; a JSON body is pruned the same way). Both are reported in
the partial-success message with 0 rejected spans.

Prompts and completions on spans (content attributes and events, ``collectors/content.py``) are
removed unless ``keep_content``; the count is in :attr:`PreparedTraces.content_dropped`.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from collectors import otlp_common as common
from collectors.content import drop_content, may_hold_content
from collectors.lenient import decode_problem, flatten_deep_values, lenient_traces_request

_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)


@dataclass
class PreparedTraces:
    """A validated request: ``payload`` (protobuf bytes of only the valid spans), counts, message.

    ``newest_ns`` is the latest span end time in the payload (ns since the epoch; 0 when empty),
    used for the receiver's newest-row lag.
    """

    payload: bytes
    accepted: int
    rejected: int
    message: str
    newest_ns: int = 0
    truncated: int = 0  # attribute keys/values cut to the size limit, values cut to one nesting level
    span_ids: bytes = b""  # the accepted spans' 8-byte span ids, concatenated (the writer's split check)
    content_dropped: int = 0  # prompt/completion attributes and events removed (collectors/content.py)


class _Rejections:
    def __init__(self):
        self.count = 0
        self.first = ""
        self.by_time = {"old": 0, "future": 0}  # spans outside the time bounds, apart from ``first``

    def add(self, n: int, why: str) -> None:
        if not self.first:
            self.first = why  # also for n == 0: a malformed, empty container is still worth naming
        self.count += n


def _span_label(span, rs_i: int, ss_i: int, sp_i: int) -> str:
    sid = span.span_id.hex() if isinstance(span.span_id, bytes) else ""
    return f"span {sid or '?'} (resource_spans[{rs_i}].scope_spans[{ss_i}].spans[{sp_i}])"


def span_problem(span) -> str:
    """'' when the span's ids and times are valid, else a message naming the first problem."""
    tid, sid, pid = span.trace_id, span.span_id, span.parent_span_id
    if len(tid) != 16:
        return f"trace_id is {len(tid)} bytes, expected 16"
    if tid == _ZERO_TRACE:
        return "trace_id is all zero"
    if len(sid) != 8:
        return f"span_id is {len(sid)} bytes, expected 8"
    if sid == _ZERO_SPAN:
        return "span_id is all zero"
    if pid and len(pid) != 8:
        return f"parent_span_id is {len(pid)} bytes, expected 8 or empty"
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    if start == 0:
        return "start_time_unix_nano is 0 (missing)"
    if end < start:
        return f"end_time_unix_nano {end} is before start_time_unix_nano {start}"
    return ""


def _validate(request: ExportTraceServiceRequest, rejections: _Rejections,
              walk_above: int, bounds: common.TimeBounds | None, ids: list[bytes]) -> tuple[int, int, bool, list]:
    """Drop invalid spans from ``request`` in place; append each accepted span's id to ``ids``.

    Returns (accepted, newest_ns, changed, big) where ``big`` lists the messages (resources and
    spans) whose serialized size exceeds ``walk_above`` bytes: only they can hold an oversized
    attribute key or value, so only they are walked for truncation.
    """
    accepted = 0
    newest = 0
    changed = False
    big: list = []
    if bounds is not None:
        oldest_ok, newest_ok = bounds.oldest_ns, bounds.newest_ns
    else:
        oldest_ok, newest_ok = -1, 1 << 64
    append = ids.append
    zero_trace, zero_span = _ZERO_TRACE, _ZERO_SPAN
    for rs_i, rs in enumerate(request.resource_spans):
        if rs.resource.ByteSize() > walk_above:
            big.append((f"resource_spans[{rs_i}] resource", rs.resource))
        for ss_i, ss in enumerate(rs.scope_spans):
            bad: list[int] = []
            if ss.scope.ByteSize() > walk_above:
                big.append((f"resource_spans[{rs_i}].scope_spans[{ss_i}] scope", ss.scope))
            for sp_i, span in enumerate(ss.spans):
                tid, sid, pid = span.trace_id, span.span_id, span.parent_span_id
                start, end = span.start_time_unix_nano, span.end_time_unix_nano
                if (len(tid) != 16 or len(sid) != 8 or (pid and len(pid) != 8) or tid == zero_trace
                        or sid == zero_span or start == 0 or end < start):
                    rejections.add(1, f"{_span_label(span, rs_i, ss_i, sp_i)}: {span_problem(span)}")
                    bad.append(sp_i)
                    continue
                if start < oldest_ok or start > newest_ok or end > newest_ok:
                    late = bounds.problem(start, end)
                    if late:
                        rejections.by_time[late] += 1
                        rejections.count += 1
                        bad.append(sp_i)
                        continue
                accepted += 1
                append(sid)
                if end > newest:
                    newest = end
                if span.ByteSize() > walk_above:
                    big.append((None, span))
            for sp_i in reversed(bad):
                del ss.spans[sp_i]
            changed = changed or bool(bad)
    return accepted, newest, changed, big


def _lenient_filter(body: bytes, rejections: _Rejections, truncations: common.Truncations) -> bytes:
    """Parse with the lenient schema, drop spans carrying invalid UTF-8, return valid protobuf bytes.
    Values nested too deep to decode are first cut to the one level the store keeps.

    Raises UndecodableBody when even that fails (truncated or random bytes).
    """
    request = lenient_traces_request()
    try:
        request.ParseFromString(body)
    except DecodeError:
        try:
            body, cut = flatten_deep_values(body, "traces", common.MAX_VALUE_DEPTH)
            request.ParseFromString(body)
        except DecodeError as exc:
            raise common.UndecodableBody(
                f"undecodable protobuf ExportTraceServiceRequest: {decode_problem(exc)}") from exc
        for _ in range(cut):
            truncations.note("nested attribute value", 0, 0, "nested")
    keep_rs = []
    for rs_i, rs in enumerate(request.resource_spans):
        problem = common.lenient_attributes_problem(rs.resource.attributes, "resource")
        if problem:
            rejections.add(sum(len(ss.spans) for ss in rs.scope_spans), f"resource_spans[{rs_i}]: {problem}")
            continue
        keep_rs.append(rs_i)
        for ss_i, ss in enumerate(rs.scope_spans):
            problem = (common.utf8_problem(ss.scope.name, "scope name")
                       or common.utf8_problem(ss.scope.version, "scope version")
                       or common.lenient_attributes_problem(ss.scope.attributes, "scope"))
            if problem:
                rejections.add(len(ss.spans), f"resource_spans[{rs_i}].scope_spans[{ss_i}]: {problem}")
                del ss.spans[:]
                continue
            bad = []
            for sp_i, span in enumerate(ss.spans):
                problem = _lenient_span_problem(span)
                if problem:
                    rejections.add(1, f"{_span_label(span, rs_i, ss_i, sp_i)}: {problem}")
                    bad.append(sp_i)
            for sp_i in reversed(bad):
                del ss.spans[sp_i]
    for rs_i in reversed(range(len(request.resource_spans))):
        if rs_i not in keep_rs:
            del request.resource_spans[rs_i]
    return request.SerializeToString()


def _lenient_span_problem(span) -> str:
    problem = (common.utf8_problem(span.name, "name")
               or common.utf8_problem(span.trace_state, "trace_state")
               or common.utf8_problem(span.status.message, "status message")
               or common.lenient_attributes_problem(span.attributes, "span"))
    if problem:
        return problem
    for e_i, event in enumerate(span.events):
        problem = (common.utf8_problem(event.name, f"events[{e_i}] name")
                   or common.lenient_attributes_problem(event.attributes, f"events[{e_i}]"))
        if problem:
            return problem
    for l_i, link in enumerate(span.links):
        problem = (common.utf8_problem(link.trace_state, f"links[{l_i}] trace_state")
                   or common.lenient_attributes_problem(link.attributes, f"links[{l_i}]"))
        if problem:
            return problem
    return ""


def _json_children(doc, camel: str, snake: str, where: str, rejections: _Rejections) -> list:
    """The list ``doc`` holds under ``camel`` (or ``snake``); none when doc is no object, and none, with a
    rejection of no spans, when that is no list."""
    children = (doc.get(camel, doc.get(snake)) or []) if isinstance(doc, dict) else []
    if not isinstance(children, list):
        rejections.add(0, f"{where} is not a list")
        return []
    return children


def _parse_json_envelope(doc, field: str, message, holder) -> None:
    """Parse ``doc[field]`` (a resource or an instrumentation scope) into ``message`` and doc's schema URL
    into ``holder.schema_url``; raises ValueError (doc is no object), json_format.ParseError, TypeError or
    AttributeError."""
    if not isinstance(doc, dict):
        raise ValueError("not an object")
    json_format.ParseDict(doc.get(field) or {}, message, ignore_unknown_fields=True)
    holder.schema_url = str(doc.get("schemaUrl", doc.get("schema_url", "")) or "")


def _from_json(doc: dict, rejections: _Rejections, truncations: common.Truncations) -> ExportTraceServiceRequest:
    """OTLP JSON -> request; spans with bad ids or bad fields are rejected one by one."""
    request = ExportTraceServiceRequest()
    resource_spans = doc.get("resourceSpans", doc.get("resource_spans")) or []
    if not isinstance(resource_spans, list):
        raise common.UndecodableBody("invalid OTLP JSON: resourceSpans must be a list")
    for _ in range(common.prune_json_values(resource_spans)):
        truncations.note("nested attribute value", 0, 0, "nested")
    for rs_i, rs_doc in enumerate(resource_spans):
        rs = request.resource_spans.add()
        scope_spans = _json_children(rs_doc, "scopeSpans", "scope_spans", f"resourceSpans[{rs_i}].scopeSpans",
                                     rejections)
        try:
            _parse_json_envelope(rs_doc, "resource", rs.resource, rs)
        except (json_format.ParseError, ValueError, TypeError, AttributeError) as exc:
            n = sum(len(s.get("spans") or []) for s in scope_spans
                    if isinstance(s, dict) and isinstance(s.get("spans"), list))
            rejections.add(n, f"resourceSpans[{rs_i}].resource: {exc}")
            del request.resource_spans[-1]
            continue
        for ss_i, ss_doc in enumerate(scope_spans):
            ss = rs.scope_spans.add()
            spans = _json_children(ss_doc, "spans", "spans", f"resourceSpans[{rs_i}].scopeSpans[{ss_i}].spans",
                                   rejections)
            try:
                _parse_json_envelope(ss_doc, "scope", ss.scope, ss)
            except (json_format.ParseError, ValueError, TypeError, AttributeError) as exc:
                rejections.add(len(spans), f"resourceSpans[{rs_i}].scopeSpans[{ss_i}].scope: {exc}")
                del rs.scope_spans[-1]
                continue
            for sp_i, span_doc in enumerate(spans):
                where = f"resourceSpans[{rs_i}].scopeSpans[{ss_i}].spans[{sp_i}]"
                try:
                    if not isinstance(span_doc, dict):
                        raise ValueError("not an object")
                    span_id = span_doc.get("spanId", span_doc.get("span_id", ""))
                    where = f"span {span_id or '?'} ({where})"
                    converted = common.convert_ids(dict(span_doc))
                    span = Span()
                    json_format.ParseDict(converted, span, ignore_unknown_fields=True)
                except (json_format.ParseError, ValueError, TypeError, AttributeError) as exc:
                    rejections.add(1, f"{where}: {exc}")
                    continue
                ss.spans.append(span)
    return request


def prepare_traces(body: bytes | ExportTraceServiceRequest, media: str = common.PROTOBUF,
                   max_attribute_bytes: int = common.MAX_ATTRIBUTE_VALUE_BYTES,
                   bounds: common.TimeBounds | None = None, keep_content: bool = False) -> PreparedTraces:
    """Decode, validate and normalise one trace export request.

    Args:
        body: the decompressed request body, or an already built ``ExportTraceServiceRequest``.
        media: ``application/x-protobuf`` or ``application/json`` (ignored for a message).
        max_attribute_bytes: string/bytes attribute values longer than this are truncated.
        bounds: span start times accepted (retention, clock skew); None accepts any time.
        keep_content: keep prompt and completion attributes and events (removed by default).

    Returns:
        :class:`PreparedTraces`; ``payload`` is empty when nothing was accepted.

    Raises:
        UndecodableBody: the body is not a decodable OTLP trace request at all.
    """
    rejections = _Rejections()
    truncations = common.Truncations()
    text = None if isinstance(body, ExportTraceServiceRequest) else bytes(body)
    if isinstance(body, ExportTraceServiceRequest):
        request, raw = body, None
    elif media == common.JSON:
        request, raw = _from_json(common.load_json(body), rejections, truncations), None
    else:
        raw = bytes(body)
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(raw)
        except DecodeError:
            # invalid UTF-8 somewhere, or values nested too deep: keep what is valid
            raw = _lenient_filter(raw, rejections, truncations)
            request.ParseFromString(raw)
    walk_above = min(max_attribute_bytes, common.MAX_ATTRIBUTE_KEY_BYTES)
    ids: list[bytes] = []
    accepted, newest, changed, big = _validate(request, rejections, walk_above, bounds, ids)
    for where, message in big:
        if where is not None:  # a resource or a scope
            common.truncate_attributes(message.attributes, max_attribute_bytes, where, truncations)
            continue
        where = f"span {message.span_id.hex()}"
        common.truncate_attributes(message.attributes, max_attribute_bytes, where, truncations)
        for event in message.events:
            common.truncate_attributes(event.attributes, max_attribute_bytes, f"{where} event", truncations)
        for link in message.links:
            common.truncate_attributes(link.attributes, max_attribute_bytes, f"{where} link", truncations)
    content_dropped = drop_content(request) if accepted and not keep_content and may_hold_content(request, text) else 0
    if accepted == 0:
        payload = b""
    elif raw is not None and not changed and not truncations.count and not content_dropped:
        payload = raw  # the common case: store the client's bytes as they are
    else:
        payload = request.SerializeToString()
    messages = []
    if rejections.count or rejections.first:
        parts = [bounds.describe(k, n, "spans" if n != 1 else "span") for k, n in rejections.by_time.items() if n]
        if rejections.first:
            parts.append(f"first: {rejections.first}")
        messages.append(f"rejected {rejections.count} of {rejections.count + accepted} spans; " + "; ".join(parts))
    if truncations.count:
        messages.append(truncations.message(max_attribute_bytes))
    return PreparedTraces(payload, accepted, rejections.count, "; ".join(messages), newest, truncations.count,
                          b"".join(ids), content_dropped)

