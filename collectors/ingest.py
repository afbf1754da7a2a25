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
    ``collectors/otlp_clickhouse.proto`` (read in place by the embedded engine; sent inline to a
    server, ``format_schema_source='string'``, so no schema file has to be deployed there) and the
    materialized view ``otlp_traces_in_mv``
    writes ``otel_traces`` rows (which feed ``llm_calls``).
``insert_metric_rows(store, rows)``
    column-ordered inserts into ``otel_metrics_gauge/sum/histogram``.

``BufferedIngest(store, max_rows=100_000)``
    for bulk producers (the virtual-time emulator): call it with trace or metric requests; it
    validates each at once and inserts in large batches (each insert has a fixed cost of
    ~0.1-0.2 CPU-s on the embedded store, so one insert per request is slow); ``flush()`` at the
    end. ``.accepted`` / ``.rejected`` / ``.messages`` accumulate the results.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from google.protobuf.internal.encoder import _VarintBytes

from collectors import otlp_common as common
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

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


@lru_cache(maxsize=2)
def _protobuf_settings(embedded: bool = False) -> dict:
    if embedded:
        # the embedded engine reads the schema file in place (the inline form would make it write a
        # `__cache__/` copy into the current directory)
        schema = {"format_schema": f"{SCHEMA_PATH.resolve()}:ExportTraceServiceRequest"}
    else:
        # a server has no access to our files: send the schema with the insert
        schema = {"format_schema_source": "string", "format_schema": SCHEMA_PATH.read_text(),
                  "format_schema_message_name": "ExportTraceServiceRequest"}
    return {
        **schema,
        # fill the `value` enum columns: which AnyValue field is set (0, '' and false are values too)
        "input_format_protobuf_oneof_presence": 1,
        # the two materialized views on otel_traces (trace-id lookup, llm_calls) run side by side
        "parallel_view_processing": 1,
        # skip indexes (otel_traces' bloom filters on ids and attribute maps, task_spans' task_id)
        # are built when parts merge, not per insert: merges rebuild them from the merged rows
        # anyway, so building them for every small insert part was work done twice (~7% of the
        # receiver's CPU). A part not yet merged has no index and is read in full by a
        # query that would have skipped it: same rows, only that part's skipping is lost.
        "materialize_skip_indexes_on_insert": 0,
    }


def insert_trace_payloads(store, payloads: Iterable[bytes], *, tag: str = "ingest.traces",
                          settings: dict | None = None) -> int:
    """Insert validated trace payloads (protobuf ``ExportTraceServiceRequest`` bytes) in ONE insert.

    ``settings``: extra query settings (the writer's ``insert_deduplication_token``). Returns the
    number of payloads written. Raises the store's typed errors.
    """
    parts = []
    for payload in payloads:
        if payload:
            parts.append(_VarintBytes(len(payload)))
            parts.append(payload)
    if not parts:
        return 0
    merged = _protobuf_settings(bool(getattr(store, "embedded", False)))
    if settings:
        merged = {**merged, **settings}
    # the parts as they are: the store writes them one after the other (never joined on the embedded store)
    store.raw_insert(TRACES_INPUT_TABLE, parts, "Protobuf", tag=tag, settings=merged)
    return len(parts) // 2


def insert_metric_rows(store, rows: MetricRows, *, tag: str = "ingest.metrics", settings: dict | None = None) -> int:
    """Insert metric rows, one INSERT per non-empty table (each with ``settings``, e.g. the writer's
    deduplication token: tables keep separate deduplication logs); returns the rows written."""
    written = 0
    for table, table_rows in rows.by_table().items():
        if table_rows:
            store.insert(table, table_rows, TABLES[table], tag=f"{tag}.{table}", settings=settings)
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


class BufferedIngest:
    """Validate requests as they come, insert them in large batches (see module doc).

    Callable with an ``ExportTraceServiceRequest`` or ``ExportMetricsServiceRequest``; inserts when
    ``max_rows`` spans (or metric points) are buffered and on :meth:`flush`. Store errors propagate
    from the call that triggered the insert; the buffer is kept so a later ``flush()`` can retry.
    """

    def __init__(self, store, max_rows: int = 100_000,
                 max_attribute_bytes: int = common.MAX_ATTRIBUTE_VALUE_BYTES):
        self.store = store
        self.max_rows = max_rows
        self.max_attribute_bytes = max_attribute_bytes
        self.accepted = 0
        self.rejected = 0
        self.messages: list[str] = []
        self._payloads: list[bytes] = []
        self._span_rows = 0
        self._metric_rows = MetricRows()

    def __call__(self, request) -> IngestResult:
        if isinstance(request, ExportTraceServiceRequest):
            prepared = prepare_traces(request, common.PROTOBUF, self.max_attribute_bytes)
            if prepared.payload:
                self._payloads.append(prepared.payload)
                self._span_rows += prepared.accepted
        else:
            prepared = prepare_metrics(request, common.PROTOBUF)
            if prepared.payload:
                self._metric_rows.extend(metric_rows(prepared.payload))
        self.accepted += prepared.accepted
        self.rejected += prepared.rejected
        if prepared.message:
            self.messages.append(prepared.message)
        if self._span_rows + len(self._metric_rows) >= self.max_rows:
            self.flush()
        return IngestResult(prepared.accepted, prepared.rejected, prepared.message)

    def flush(self) -> None:
        """Insert everything buffered (traces in one insert, metrics in one per table)."""
        if self._payloads:
            insert_trace_payloads(self.store, self._payloads, tag="ingest.buffered.traces")
            self._payloads, self._span_rows = [], 0
        if len(self._metric_rows):
            insert_metric_rows(self.store, self._metric_rows, tag="ingest.buffered.metrics")
            self._metric_rows = MetricRows()
