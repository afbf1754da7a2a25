"""OTLP/HTTP request plumbing shared by traces and metrics: body decoding, JSON ids, value strings.

Position: collectors. Pure functions, no I/O, no store. Rules implemented (OTLP specification,
"OTLP/HTTP" and "JSON Protobuf Encoding"):

* content types ``application/x-protobuf`` and ``application/json``; anything else is
  :class:`UnsupportedMediaType` (HTTP 415);
* ``Content-Encoding: gzip`` (or ``identity``); the body is capped *after* decompression
  (:class:`BodyTooLarge`, HTTP 413), decompressing incrementally so a gzip bomb never expands
  past the cap;
* JSON: trace and span ids are hex strings (case-insensitive), 64-bit integers may be strings
  or numbers, enums are integers, keys lowerCamelCase (snake_case accepted too), unknown fields
  ignored (handled by ``google.protobuf.json_format`` once ids are converted);
* attribute values stringified as the contrib ClickHouse exporter does (pcommon
  ``Value.AsString``): strings as is, bools ``true``/``false``, ints decimal, doubles in the
  shortest round-trip form without a trailing ``.0`` (as ClickHouse's ``toString``), bytes
  base64, arrays and kvlists as JSON.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import zlib
from decimal import Decimal
from dataclasses import dataclass, field

from collectors.otlp_limits import MAX_VALUE_DEPTH, TimeBounds, prune_json_values  # noqa: F401 (re-exported)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
SUPPORTED_TYPES = (PROTOBUF, JSON)
MAX_BODY_BYTES = 64 * 1024 * 1024  # OTLP spec recommendation for the decompressed body
MAX_ATTRIBUTE_VALUE_BYTES = 64 * 1024  # longer string/bytes attribute values are truncated
MAX_ATTRIBUTE_KEY_BYTES = 1024  # longer attribute keys are truncated (keys are map keys: keep them small)
MAX_JSON_DEPTH = 200  # a JSON body nested deeper is refused (400) before it is parsed

# JSON keys of ids (OTLP JSON: hex strings, not base64) and their snake_case spellings.
ID_KEYS = {"traceId": 16, "spanId": 8, "parentSpanId": 8, "trace_id": 16, "span_id": 8, "parent_span_id": 8}


class OTLPRequestError(Exception):
    """A request that cannot be processed at all; ``status`` is the HTTP status to answer."""

    status = 400


class UndecodableBody(OTLPRequestError):
    """The body is not a valid protobuf / JSON OTLP message, or its gzip stream is corrupt (400)."""

    status = 400


class BodyTooLarge(OTLPRequestError):
    """The (decompressed) body exceeds the size limit (413)."""

    status = 413


class UnsupportedMediaType(OTLPRequestError):
    """Content type or content encoding not supported (415)."""

    status = 415


def media_type(content_type: str | None) -> str:
    """The bare media type of a Content-Type header (lower case, parameters dropped).

    Raises UnsupportedMediaType naming the type and the accepted ones.
    """
    bare = (content_type or "").split(";")[0].strip().lower()
    if bare not in SUPPORTED_TYPES:
        raise UnsupportedMediaType(
            f"unsupported content type {content_type or '(none)'!r}: use application/x-protobuf or application/json"
        )
    return bare


def decompress(body: bytes, encoding: str | None, max_bytes: int = MAX_BODY_BYTES) -> bytes:
    """Undo ``Content-Encoding`` (gzip, deflate or identity), never producing more than ``max_bytes``.

    Raises:
        UnsupportedMediaType: another encoding (e.g. ``br``).
        BodyTooLarge: the body, decompressed, exceeds ``max_bytes``.
        UndecodableBody: a corrupt or truncated gzip stream.
    """
    enc = (encoding or "identity").strip().lower()
    if enc in ("", "identity"):
        if len(body) > max_bytes:
            raise BodyTooLarge(f"request body of {len(body)} bytes exceeds the limit of {max_bytes} bytes")
        return body
    if enc not in ("gzip", "x-gzip", "deflate"):
        raise UnsupportedMediaType(f"unsupported Content-Encoding {encoding!r}: use gzip or identity")
    wbits = 47 if enc != "deflate" else 15  # 47 = auto-detect gzip/zlib header
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, max_bytes + 1)
        if len(out) > max_bytes or inflater.unconsumed_tail:
            raise BodyTooLarge(f"request body exceeds the limit of {max_bytes} bytes after {enc} decompression")
        out += inflater.flush()
    except zlib.error as exc:
        raise UndecodableBody(f"corrupt {enc} body: {exc}") from exc
    if len(out) > max_bytes:
        raise BodyTooLarge(f"request body exceeds the limit of {max_bytes} bytes after {enc} decompression")
    if not inflater.eof:
        raise UndecodableBody(f"truncated {enc} body")
    return out


def _json_depth_problem(body: bytes, limit: int) -> str:
    """'' unless brackets nest deeper than ``limit`` outside strings (checked before parsing, so a
    hostile body can never exhaust the parser's recursion)."""
    depth = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return f"JSON nested deeper than {limit} levels"
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return ""


def load_json(body: bytes) -> dict:
    """Parse a JSON body into a dict; raises UndecodableBody naming the position of the error (or the
    nesting depth, past ``MAX_JSON_DEPTH``)."""
    if body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH:
        problem = _json_depth_problem(body, MAX_JSON_DEPTH)
        if problem:
            raise UndecodableBody(f"invalid OTLP JSON: {problem}")
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UndecodableBody(f"invalid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise UndecodableBody(f"invalid OTLP JSON: top level is a {type(doc).__name__}, expected an object")
    return doc


def hex_id_to_b64(value, key: str) -> str:
    """Convert an OTLP JSON hex id to the base64 form ``json_format`` expects.

    Empty string stays empty (e.g. no parent). Raises ValueError naming the key, the length and
    the expected length when the id is not hex or not ``ID_KEYS[key]`` bytes long.
    """
    if value in (None, ""):
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a hex string, got {type(value).__name__}")
    try:
        raw = binascii.unhexlify(value)
    except (binascii.Error, ValueError):
        raise ValueError(f"{key} {value!r} is not hex") from None
    want = ID_KEYS[key]
    if len(raw) != want:
        raise ValueError(f"{key} {value!r} is {len(raw)} bytes, expected {want}")
    return base64.b64encode(raw).decode()


def convert_ids(obj, path: str = ""):
    """Recursively replace hex ids (``ID_KEYS``) in an OTLP JSON fragment by base64, in place.

    Raises ValueError naming the path of the first bad id.
    """
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ID_KEYS and not isinstance(value, (dict, list)):
                try:
                    obj[key] = hex_id_to_b64(value, key)
                except ValueError as exc:
                    raise ValueError(f"{path}{key}: {exc}") from None
            elif isinstance(value, (dict, list)):
                convert_ids(value, f"{path}{key}.")
    elif isinstance(obj, list):
        for index, item in enumerate(obj):
            convert_ids(item, f"{path[:-1]}[{index}].")
    return obj


def format_double(value: float) -> str:
    """A double as ClickHouse's ``toString(Float64)`` writes it: shortest round-trip, ``1`` not ``1.0``."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "0" if math.copysign(1.0, value) > 0 else "-0"
    # Shortest round-trip digits (Python's repr), laid out as ClickHouse (and JavaScript) do:
    # plain decimal when 1e-7 <= |x| < 1e21, otherwise scientific with a bare exponent.
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    digits_text = "".join(map(str, digits)).rstrip("0") or "0"
    point = len(digits) + exponent  # position of the decimal point relative to digits_text
    prefix = "-" if sign else ""
    if -6 <= point - 1 < 21:
        if point <= 0:
            return f"{prefix}0.{'0' * -point}{digits_text}"
        if point >= len(digits_text):
            return f"{prefix}{digits_text}{'0' * (point - len(digits_text))}"
        return f"{prefix}{digits_text[:point]}.{digits_text[point:]}"
    mantissa = digits_text[0] + (f".{digits_text[1:]}" if len(digits_text) > 1 else "")
    return f"{prefix}{mantissa}e{point - 1}"


def _json_scalar(value) -> str:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return json.dumps(value.string_value, ensure_ascii=False)
    if kind == "bool_value":
        return "true" if value.bool_value else "false"
    if kind == "int_value":
        return str(value.int_value)
    if kind == "double_value":
        v = value.double_value
        return format_double(v) if math.isfinite(v) else json.dumps(format_double(v))
    if kind == "bytes_value":
        return json.dumps(base64.b64encode(value.bytes_value).decode())
    return "null"  # nested deeper than one level, as the ClickHouse-side decoder does


def any_value_to_string(value) -> str:
    """Stringify an OTLP ``AnyValue`` exactly as the ingest materialized view does (see module doc)."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return "true" if value.bool_value else "false"
    if kind == "int_value":
        return str(value.int_value)
    if kind == "double_value":
        return format_double(value.double_value)
    if kind == "array_value":
        return "[" + ",".join(_json_scalar(v) for v in value.array_value.values) + "]"
    if kind == "kvlist_value":
        return "{" + ",".join(f"{json.dumps(kv.key, ensure_ascii=False)}:{_json_scalar(kv.value)}"
                              for kv in value.kvlist_value.values) + "}"
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return ""


def attributes_to_map(attributes) -> dict[str, str]:
    """Repeated ``KeyValue`` -> ``{key: stringified value}`` (the exporter's Map(String, String))."""
    return {kv.key: any_value_to_string(kv.value) for kv in attributes}


def truncate_utf8(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes, never inside a character."""
    return text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")


@dataclass
class Truncations:
    """Attribute keys / values cut while validating one request, by kind: ``value`` (longer than the
    value limit), ``key`` (longer than the key limit), ``nested`` (array/kvlist nesting cut to one level)."""

    count: int = 0
    first: str = ""
    kinds: dict = field(default_factory=dict)  # kind -> [count, first place]

    def note(self, where: str, size: int, limit: int, kind: str = "value") -> None:
        if not self.count:
            self.first = f"{where} ({size} bytes)" if size else where
        self.count += 1
        entry = self.kinds.setdefault(kind, [0, f"{where} ({size} bytes)" if size else where])
        entry[0] += 1

    def message(self, limit: int, key_limit: int = MAX_ATTRIBUTE_KEY_BYTES) -> str:
        parts = []
        for kind, (n, first) in self.kinds.items():
            if kind == "value":
                parts.append(f"truncated {n} attribute value(s) longer than {limit} bytes (first: {first})")
            elif kind == "key":
                parts.append(f"truncated {n} attribute key(s) longer than {key_limit} bytes (first: {first})")
            else:
                parts.append(f"cut {n} attribute value(s) nested deeper than {MAX_VALUE_DEPTH} level to that level "
                             f"(deeper levels are stored as null)")
        return "; ".join(parts)


def truncate_attributes(attributes, limit: int, where: str, truncations: Truncations,
                        key_limit: int = MAX_ATTRIBUTE_KEY_BYTES) -> None:
    """Cut keys longer than ``key_limit`` bytes and string/bytes values (also inside arrays and kvlists)
    longer than ``limit`` bytes, in place."""
    for kv in attributes:
        key_size = len(kv.key.encode("utf-8"))
        if key_size > key_limit:
            truncations.note(f"{where} attribute key {truncate_utf8(kv.key, 40)!r}...", key_size, key_limit, "key")
            kv.key = truncate_utf8(kv.key, key_limit)
        _truncate_value(kv.value, limit, f"{where} attribute {kv.key[:80]!r}", truncations)


def _truncate_value(value, limit: int, where: str, truncations: Truncations) -> None:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        size = len(value.string_value.encode("utf-8"))
        if size > limit:
            truncations.note(where, size, limit)
            value.string_value = truncate_utf8(value.string_value, limit)
    elif kind == "bytes_value":
        size = len(value.bytes_value)
        if size > limit:
            truncations.note(where, size, limit)
            value.bytes_value = value.bytes_value[:limit]
    elif kind == "array_value":
        for item in value.array_value.values:
            _truncate_value(item, limit, where, truncations)
    elif kind == "kvlist_value":
        for kv in value.kvlist_value.values:
            _truncate_value(kv.value, limit, where, truncations)


def utf8_problem(value: bytes, what: str) -> str:
    """'' if ``value`` (a lenient-parsed string field) is valid UTF-8, else a message naming ``what``."""
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"{what} is not valid UTF-8 (byte {exc.start})"
    return ""


def lenient_attributes_problem(attributes, where: str) -> str:
    """First invalid-UTF-8 key or string value in lenient-parsed attributes, or ''."""
    for kv in attributes:
        problem = utf8_problem(kv.key, f"{where} attribute key {kv.key!r}")
        if problem:
            return problem
        name = kv.key.decode("utf-8", errors="replace")
        problem = _lenient_value_problem(kv.value, f"{where} attribute {name!r}")
        if problem:
            return problem
    return ""


def _lenient_value_problem(value, where: str) -> str:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return utf8_problem(value.string_value, where)
    if kind == "array_value":
        for item in value.array_value.values:
            problem = _lenient_value_problem(item, where)
            if problem:
                return problem
    if kind == "kvlist_value":
        return lenient_attributes_problem(value.kvlist_value.values, where)
    return ""
