"""Lenient copies of the OTLP protobuf messages: every ``string`` field declared as ``bytes``.

Position: collectors (decode side). Python protobuf (upb) refuses a whole request when any proto3
``string`` field holds invalid UTF-8. On the wire ``string`` and ``bytes`` are the same
(length-delimited), so parsing the request again with these copies succeeds, lets the validator
reject only the spans (or data points) that carry invalid UTF-8, and keeps the valid ones.

The copies live in their own descriptor pool under the package prefix ``infercost_lenient.``, so
they never clash with the real ``opentelemetry.proto`` classes.

A second set, ``infercost_shallow.``, also declares ``AnyValue.array_value`` / ``kvlist_value`` as
``bytes``: parsing a request with it never descends into attribute values, so a value nested
deeper than protobuf's recursion limit (about 30 levels of kvlists) cannot make the whole request
undecodable. :func:`flatten_deep_values` uses it to cut such values down to the one level the
store keeps (deeper levels are stored as null anyway) and keep the span.
"""

from __future__ import annotations

from functools import lru_cache

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

_PREFIX = "infercost_lenient"
_SHALLOW = "infercost_shallow"
_NESTED = ("array_value", "kvlist_value")


def _collect(file_descriptor, out: dict) -> None:
    for dep in file_descriptor.dependencies:
        _collect(dep, out)
    if file_descriptor.name not in out:
        proto = descriptor_pb2.FileDescriptorProto()
        file_descriptor.CopyToProto(proto)
        out[file_descriptor.name] = proto


def _rewrite_messages(messages, prefix: str) -> None:
    for message in messages:
        for field in message.field:
            if field.type == descriptor_pb2.FieldDescriptorProto.TYPE_STRING:
                field.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
            if prefix == _SHALLOW and message.name == "AnyValue" and field.name in _NESTED:
                field.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES  # opaque: never parsed
                field.ClearField("type_name")
            if field.type_name.startswith(".opentelemetry."):
                field.type_name = f".{prefix}{field.type_name}"
        _rewrite_messages(message.nested_type, prefix)


@lru_cache(maxsize=2)
def _pool(prefix: str = _PREFIX) -> descriptor_pool.DescriptorPool:
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    _collect(trace_service_pb2.DESCRIPTOR, files)
    _collect(metrics_service_pb2.DESCRIPTOR, files)
    pool = descriptor_pool.DescriptorPool()
    for name, proto in files.items():
        proto.name = f"{prefix}/{name}"
        proto.package = f"{prefix}.{proto.package}"
        proto.dependency[:] = [f"{prefix}/{d}" for d in proto.dependency]
        proto.ClearField("service")  # the gRPC services are not needed and reference other types
        _rewrite_messages(proto.message_type, prefix)
        pool.Add(proto)
    return pool


def decode_problem(exc: Exception) -> str:
    """A protobuf decode error's text with the OTLP type names a client knows: the lenient and
    shallow copies' package prefixes removed (``infercost_shallow.opentelemetry.proto...`` ->
    ``opentelemetry.proto...``)."""
    text = str(exc)
    for prefix in (_PREFIX, _SHALLOW):
        text = text.replace(f"{prefix}.", "")
    return text


def lenient_class(full_name: str, prefix: str = _PREFIX):
    """The lenient message class for an OTLP message name, e.g.
    ``opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest``."""
    descriptor = _pool(prefix).FindMessageTypeByName(f"{prefix}.{full_name}")
    return message_factory.GetMessageClass(descriptor)


_COMMON = "opentelemetry.proto.common.v1."


def _flatten_value(value, depth: int, limit: int) -> int:
    """Cut a shallow-parsed AnyValue's nesting to ``limit`` levels in place; returns values cut."""
    kind = value.WhichOneof("value")
    if kind not in _NESTED:
        return 0
    if depth >= limit:
        value.ClearField(kind)  # null, as the store keeps values nested deeper than one level
        return 1
    holder = lenient_class(_COMMON + ("ArrayValue" if kind == "array_value" else "KeyValueList"), _SHALLOW)()
    holder.ParseFromString(getattr(value, kind))
    cut = 0
    for item in holder.values:
        cut += _flatten_value(item if kind == "array_value" else item.value, depth + 1, limit)
    if cut:
        setattr(value, kind, holder.SerializeToString())
    return cut


def _flatten_attributes(attributes, limit: int) -> int:
    return sum(_flatten_value(kv.value, 0, limit) for kv in attributes)


def flatten_deep_values(body: bytes, signal: str, limit: int = 1) -> tuple[bytes, int]:
    """Re-encode an OTLP request (``signal`` ``traces`` or ``metrics``) with every attribute value cut
    to ``limit`` levels of array/kvlist nesting; returns (bytes, values cut).

    Raises ``google.protobuf.message.DecodeError`` when even the shallow parse fails."""
    name = ("opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest" if signal == "traces"
            else "opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest")
    request = lenient_class(name, _SHALLOW)()
    request.ParseFromString(body)
    cut = 0
    for resource in (request.resource_spans if signal == "traces" else request.resource_metrics):
        cut += _flatten_attributes(resource.resource.attributes, limit)
        for scope in (resource.scope_spans if signal == "traces" else resource.scope_metrics):
            cut += _flatten_attributes(scope.scope.attributes, limit)
            if signal == "traces":
                for span in scope.spans:
                    cut += _flatten_attributes(span.attributes, limit)
                    for event in span.events:
                        cut += _flatten_attributes(event.attributes, limit)
                    for link in span.links:
                        cut += _flatten_attributes(link.attributes, limit)
            else:
                for metric in scope.metrics:
                    kind = metric.WhichOneof("data")
                    for point in (getattr(metric, kind).data_points if kind else ()):
                        cut += _flatten_attributes(point.attributes, limit)
                        for exemplar in getattr(point, "exemplars", ()):
                            cut += _flatten_attributes(exemplar.filtered_attributes, limit)
    return request.SerializeToString(), cut


def lenient_traces_request():
    """A new, empty lenient ``ExportTraceServiceRequest``."""
    return lenient_class("opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest")()


def lenient_metrics_request():
    """A new, empty lenient ``ExportMetricsServiceRequest``."""
    return lenient_class("opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest")()
