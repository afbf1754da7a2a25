-- Is telemetry arriving? For the dashboard's empty states and staleness note: row counts (trivial
-- counts, answered from part metadata), whether any engine call exists (stops at the first), and
-- the newest span / gauge point of the last 24 h (NULL when none: the scan stays in two partitions).
SELECT
    (SELECT count() FROM otel_traces) AS spans,
    (SELECT max(Timestamp) FROM otel_traces WHERE Timestamp >= now64(3) - INTERVAL 1 DAY) AS last_span,
    (SELECT count() FROM (SELECT 1 FROM llm_calls WHERE call_source = 'engine' LIMIT 1)) AS engine_calls,
    (SELECT count() FROM llm_calls) AS calls,
    (SELECT count() FROM otel_metrics_gauge) AS gauge_points,
    (SELECT max(TimeUnix) FROM otel_metrics_gauge WHERE TimeUnix >= now64(3) - INTERVAL 1 DAY) AS last_gauge
