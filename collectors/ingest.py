"""Synchronous, in-process ingest: decode, validate and insert OTLP requests directly (no queue).

Position: collectors -> schema. Interface used by the virtual-time emulator and other areas' tests:

``ingest_traces(store, request) -> IngestResult`` and ``ingest_metrics(store, request) -> IngestResult``
    ``request`` is an ``ExportTraceServiceRequest`` / ``ExportMetricsServiceRequest`` or its
    protobuf bytes. Returns once the rows are in the store. ``accepted`` / ``rejected`` count spans
    (or metric data points); ``message`` names the first problem ('' when none). Raises
    ``UndecodableBody`` for bytes that are no OTLP request, and the store's ``StoreUnavailable`` /
    ``StoreQueryError`` when the insert fails (nothing is half-written: one INSERT per call).

The same insert functions serve the receiver's batching writer:

``insert_trace_payloads(store, payloads)``
    one INSERT of many validated ``ExportTraceServiceRequest`` protobuf payloads, length-delimited,
    into the Null table ``otlp_traces_in``; ClickHouse decodes them with the schema
    ``collectors/otlp_clickhouse.proto`` (sent inline: ``format_schema_source='string'``, so no
    schema file has to be deployed on a server) and the materialized view ``otlp_traces_in_mv``
    writes ``otel_traces`` rows (which feed ``llm_calls``).
``insert_metric_rows(store, rows)``
    column-ordered inserts into ``otel_metrics_gauge/sum/histogram``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from google.protobuf.internal.encoder import _VarintBytes

from collectors import otlp_common as common
from collectors.otlp_metrics import TABLES, MetricRows, metric_rows, prepare_metrics
from collectors.otlp_traces import prepare_traces

SCHEMA_PATH = Path(__file__).with_name("otlp_clickhouse.proto")
TRACES_INPUT_TABLE = "otlp_traces_in"


@dataclass(frozen=True)
class IngestResult:
    """What happened to one request: spans (or data points) stored and rejected, and why."""

    accepted: int
    rejected: int
    message: str


@lru_cache(maxsize=1)
def _protobuf_settings() -> dict:
    return {
        "format_schema_source": "string",
        "format_schema": SCHEMA_PATH.read_text(),
        "format_schema_message_name": "ExportTraceServiceRequest",
        # fill the `value` enum columns: which AnyValue field is set (0, '' and false are values too)
        "input_format_protobuf_oneof_presence": 1,
        # the two materialized views on otel_traces (trace-id lookup, llm_calls) run side by side
        "parallel_view_processing": 1,
    }


def insert_trace_payloads(store, payloads: Iterable[bytes], *, tag: str = "ingest.traces") -> int:
    """Insert validated trace payloads (protobuf ``ExportTraceServiceRequest`` bytes) in ONE insert.

    Returns the number of payloads written. Raises the store's typed errors.
    """
    parts = []
    for payload in payloads:
        if payload:
            parts.append(_VarintBytes(len(payload)))
            parts.append(payload)
    if not parts:
        return 0
    store.raw_insert(TRACES_INPUT_TABLE, b"".join(parts), "Protobuf", tag=tag, settings=_protobuf_settings())
    return len(parts) // 2


def insert_metric_rows(store, rows: MetricRows, *, tag: str = "ingest.metrics") -> int:
    """Insert metric rows, one INSERT per non-empty table; returns the number of rows written."""
    written = 0
    for table, table_rows in rows.by_table().items():
        if table_rows:
            store.insert(table, table_rows, TABLES[table], tag=f"{tag}.{table}")
            written += len(table_rows)
    return written


def ingest_traces(store, request, *, max_attribute_bytes: int = common.MAX_ATTRIBUTE_VALUE_BYTES) -> IngestResult:
    """Validate and insert one ``ExportTraceServiceRequest`` (or its protobuf bytes); see module doc."""
    prepared = prepare_traces(request, common.PROTOBUF, max_attribute_bytes)
    if prepared.payload:
        insert_trace_payloads(store, [prepared.payload])
    return IngestResult(prepared.accepted, prepared.rejected, prepared.message)


def ingest_metrics(store, request) -> IngestResult:
    """Validate and insert one ``ExportMetricsServiceRequest`` (or its protobuf bytes); see module doc."""
    prepared = prepare_metrics(request, common.PROTOBUF)
    if prepared.payload:
        insert_metric_rows(store, metric_rows(prepared.payload))
    return IngestResult(prepared.accepted, prepared.rejected, prepared.message)
