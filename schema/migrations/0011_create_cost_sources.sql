-- Compact copies of the spans the cost jobs need besides llm_calls, filled on insert into
-- otel_traces so the jobs never scan the raw span table.

-- Task root spans ("task {task.type}", INTERNAL, with task.id): outcome, SLO, start and end.
CREATE TABLE IF NOT EXISTS task_spans (
    trace_id String CODEC(ZSTD(1)),
    span_id String CODEC(ZSTD(1)),
    task_id String CODEC(ZSTD(1)),
    task_type LowCardinality(String),
    tenant_id LowCardinality(String),
    tenant_priority LowCardinality(String),
    outcome LowCardinality(String) COMMENT 'task.outcome as sent: success | failure | abandoned (other values read as unknown)',
    start_time DateTime64(9, 'UTC'),
    end_time DateTime64(9, 'UTC'),
    slo_ttft_ms Nullable(Float64) COMMENT 'milliseconds',
    slo_e2e_ms Nullable(Float64) COMMENT 'milliseconds',
    status LowCardinality(String) COMMENT 'ok | error | unset',
    error_type LowCardinality(String),
    INDEX idx_task_id task_id TYPE bloom_filter(0.01) GRANULARITY 1
) ENGINE = MergeTree()
PARTITION BY toDate(end_time)
ORDER BY (toStartOfMinute(end_time), task_id)
TTL toDateTime(end_time) + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS task_spans_mv TO task_spans
AS SELECT
    TraceId AS trace_id,
    SpanId AS span_id,
    SpanAttributes['task.id'] AS task_id,
    SpanAttributes['task.type'] AS task_type,
    SpanAttributes['tenant.id'] AS tenant_id,
    SpanAttributes['tenant.priority'] AS tenant_priority,
    SpanAttributes['task.outcome'] AS outcome,
    Timestamp AS start_time,
    fromUnixTimestamp64Nano(toUnixTimestamp64Nano(Timestamp) + toInt64(Duration), 'UTC') AS end_time,
    toFloat64OrNull(SpanAttributes['slo.ttft_ms']) AS slo_ttft_ms,
    toFloat64OrNull(SpanAttributes['slo.e2e_ms']) AS slo_e2e_ms,
    multiIf(StatusCode IN ('Error', 'STATUS_CODE_ERROR'), 'error',
            StatusCode IN ('Ok', 'STATUS_CODE_OK'), 'ok', 'unset') AS status,
    SpanAttributes['error.type'] AS error_type
FROM otel_traces
WHERE startsWith(SpanName, 'task ') AND SpanAttributes['task.id'] != '';

-- Gateway request spans ("gateway chat", SERVER): the link client attempt -> gateway attempts
-- (a gateway attempt's parent is this span, whose parent is the client attempt).
CREATE TABLE IF NOT EXISTS gateway_requests (
    trace_id String CODEC(ZSTD(1)),
    span_id String CODEC(ZSTD(1)),
    parent_span_id String CODEC(ZSTD(1)),
    start_time DateTime64(9, 'UTC'),
    replica LowCardinality(String) COMMENT 'gateway.replica: the final replica',
    retries Nullable(UInt16) COMMENT 'gateway.retries: hidden retries the gateway performed',
    admission LowCardinality(String) COMMENT 'gateway.admission: admitted | rejected'
) ENGINE = MergeTree()
PARTITION BY toDate(start_time)
ORDER BY (toStartOfMinute(start_time), trace_id, span_id)
TTL toDateTime(start_time) + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS gateway_requests_mv TO gateway_requests
AS SELECT
    TraceId AS trace_id,
    SpanId AS span_id,
    ParentSpanId AS parent_span_id,
    Timestamp AS start_time,
    SpanAttributes['gateway.replica'] AS replica,
    toUInt16OrNull(SpanAttributes['gateway.retries']) AS retries,
    SpanAttributes['gateway.admission'] AS admission
FROM otel_traces
WHERE SpanKind IN ('Server', 'SPAN_KIND_SERVER')
  AND NOT mapContains(SpanAttributes, 'gateway.attempt')
  AND (SpanName = 'gateway chat' OR mapContains(SpanAttributes, 'gateway.policy'));
