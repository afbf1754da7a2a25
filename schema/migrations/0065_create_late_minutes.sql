-- Late data (DESIGN.md "Cost model" 7): spans and metric points that arrive for a
-- minute below the cost watermark (already copied to *_history: the periodic chain no longer
-- recomputes it) are recorded here at ingest, per minute, replica and source. schema.jobs
-- .recompute_late re-runs the cost jobs over those minutes (bounded by retention) and records the
-- recompute as a newer version of the row; the data-quality view counts the minutes recomputed.
-- Versioned rows, read with argMax(..., updated_at) (no FINAL on read paths).
CREATE TABLE IF NOT EXISTS late_minutes (
    minute DateTime('UTC') COMMENT 'the minute that received late data',
    replica LowCardinality(String) COMMENT 'service.instance.id (gateway.replica for gateway spans); '''' when none',
    source LowCardinality(String) COMMENT 'spans | metrics',
    rows UInt64 COMMENT 'rows that arrived late in this detection',
    updated_at DateTime64(3, 'UTC') COMMENT 'version: detection or recompute time',
    recomputed_at Nullable(DateTime('UTC')) COMMENT 'NULL = pending; set when the cost jobs re-ran the minute'
) ENGINE = ReplacingMergeTree(updated_at)
PARTITION BY toYYYYMM(minute)
ORDER BY (minute, replica, source)
TTL minute + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS late_minutes_spans_mv TO late_minutes
AS SELECT
    toStartOfMinute(Timestamp) AS minute,
    if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'],
       SpanAttributes['gateway.replica']) AS replica,
    'spans' AS source,
    toUInt64(count()) AS rows,
    now64(3, 'UTC') AS updated_at,
    CAST(NULL, 'Nullable(DateTime(\'UTC\'))') AS recomputed_at
FROM otel_traces
WHERE Timestamp < (SELECT max(watermark) FROM cost_watermark)
GROUP BY minute, replica;

CREATE MATERIALIZED VIEW IF NOT EXISTS late_minutes_gauge_mv TO late_minutes
AS SELECT
    toStartOfMinute(TimeUnix) AS minute, ResourceAttributes['service.instance.id'] AS replica, 'metrics' AS source,
    toUInt64(count()) AS rows, now64(3, 'UTC') AS updated_at, CAST(NULL, 'Nullable(DateTime(\'UTC\'))') AS recomputed_at
FROM otel_metrics_gauge
WHERE TimeUnix < (SELECT max(watermark) FROM cost_watermark)
GROUP BY minute, replica;

CREATE MATERIALIZED VIEW IF NOT EXISTS late_minutes_sum_mv TO late_minutes
AS SELECT
    toStartOfMinute(TimeUnix) AS minute, ResourceAttributes['service.instance.id'] AS replica, 'metrics' AS source,
    toUInt64(count()) AS rows, now64(3, 'UTC') AS updated_at, CAST(NULL, 'Nullable(DateTime(\'UTC\'))') AS recomputed_at
FROM otel_metrics_sum
WHERE TimeUnix < (SELECT max(watermark) FROM cost_watermark)
GROUP BY minute, replica;

CREATE MATERIALIZED VIEW IF NOT EXISTS late_minutes_histogram_mv TO late_minutes
AS SELECT
    toStartOfMinute(TimeUnix) AS minute, ResourceAttributes['service.instance.id'] AS replica, 'metrics' AS source,
    toUInt64(count()) AS rows, now64(3, 'UTC') AS updated_at, CAST(NULL, 'Nullable(DateTime(\'UTC\'))') AS recomputed_at
FROM otel_metrics_histogram
WHERE TimeUnix < (SELECT max(watermark) FROM cost_watermark)
GROUP BY minute, replica;
