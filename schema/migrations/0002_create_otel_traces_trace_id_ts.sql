-- The exporter's trace-id lookup (traces_id_ts_lookup_table.sql / _mv.sql): first and last
-- second of each trace, so a trace can be fetched by id without scanning every partition.
CREATE TABLE IF NOT EXISTS otel_traces_trace_id_ts (
    TraceId String CODEC(ZSTD(1)),
    Start SimpleAggregateFunction(min, DateTime) CODEC(ZSTD(1)),
    End SimpleAggregateFunction(max, DateTime) CODEC(ZSTD(1)),
    INDEX idx_start Start TYPE minmax GRANULARITY 1,
    INDEX idx_end End TYPE minmax GRANULARITY 1
) ENGINE = AggregatingMergeTree()
PARTITION BY toStartOfWeek(Start)
ORDER BY (TraceId)
TTL toDateTime(Start) + toIntervalDay({{retention_days}})
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS otel_traces_trace_id_ts_mv TO otel_traces_trace_id_ts
AS SELECT
    TraceId,
    min(toDateTime(Timestamp)) AS Start,
    max(toDateTime(Timestamp)) AS End
FROM otel_traces
WHERE TraceId != ''
GROUP BY TraceId;
