"""Lenient copies of the OTLP protobuf messages: every ``string`` field declared as ``bytes``.

Position: collectors (decode side). Python protobuf (upb) refuses a whole request when any proto3
``string`` field holds invalid UTF-8. On the wire ``string`` and ``bytes`` are the same
(length-delimited), so parsing the request again with these copies succeeds, lets the validator
reject only the spans (or data points) that carry invalid UTF-8, and keeps the valid ones.

The copies live in their own descriptor pool under the package prefix ``infercost_lenient.``, so
they never clash with the real ``opentelemetry.proto`` classes.
"""

from __future__ import annotations

from functools import lru_cache

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

_PREFIX = "infercost_lenient"


def _collect(file_descriptor, out: dict) -> None:
    for dep in file_descriptor.dependencies:
        _collect(dep, out)
    if file_descriptor.name not in out:
        proto = descriptor_pb2.FileDescriptorProto()
        file_descriptor.CopyToProto(proto)
        out[file_descriptor.name] = proto


def _rewrite_messages(messages) -> None:
    for message in messages:
        for field in message.field:
            if field.type == descriptor_pb2.FieldDescriptorProto.TYPE_STRING:
                field.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
            if field.type_name.startswith(".opentelemetry."):
                field.type_name = f".{_PREFIX}{field.type_name}"
        _rewrite_messages(message.nested_type)


@lru_cache(maxsize=1)
def _pool() -> descriptor_pool.DescriptorPool:
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    _collect(trace_service_pb2.DESCRIPTOR, files)
    _collect(metrics_service_pb2.DESCRIPTOR, files)
    pool = descriptor_pool.DescriptorPool()
    for name, proto in files.items():
        proto.name = f"{_PREFIX}/{name}"
        proto.package = f"{_PREFIX}.{proto.package}"
        proto.dependency[:] = [f"{_PREFIX}/{d}" for d in proto.dependency]
        proto.ClearField("service")  # the gRPC services are not needed and reference other types
        _rewrite_messages(proto.message_type)
        pool.Add(proto)
    return pool


def lenient_class(full_name: str):
    """The lenient message class for an OTLP message name, e.g.
    ``opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest``."""
    descriptor = _pool().FindMessageTypeByName(f"{_PREFIX}.{full_name}")
    return message_factory.GetMessageClass(descriptor)


def lenient_traces_request():
    """A new, empty lenient ``ExportTraceServiceRequest``."""
    return lenient_class("opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest")()


def lenient_metrics_request():
    """A new, empty lenient ``ExportMetricsServiceRequest``."""
    return lenient_class("opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest")()
