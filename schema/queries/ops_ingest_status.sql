-- Is telemetry arriving? For the dashboard's empty states and staleness note: row counts (trivial
-- counts, answered from part metadata), whether any engine call exists (stops at the first), and
-- the newest span / gauge point of the last 24 h (NULL when none). The newest timestamp is read
-- from the partitions of the last two days with a filter on the partition key only, so ClickHouse
-- answers it from each part's min-max of the partition column (`_minmax_count_projection`) without
-- reading a row; a filter on Timestamp itself read a day of spans (37 ms at 500k spans a day).
SELECT
    (SELECT count() FROM otel_traces) AS spans,
    (SELECT if(m >= now64(3) - INTERVAL 1 DAY, m, NULL) FROM
        (SELECT max(Timestamp) AS m FROM otel_traces WHERE toDate(Timestamp) >= toDate(now64(3) - INTERVAL 1 DAY))
    ) AS last_span,
    (SELECT count() FROM (SELECT 1 FROM llm_calls WHERE call_source = 'engine' LIMIT 1)) AS engine_calls,
    (SELECT count() FROM llm_calls) AS calls,
    (SELECT count() FROM otel_metrics_gauge) AS gauge_points,
    (SELECT if(m >= now64(3) - INTERVAL 1 DAY, m, NULL) FROM
        (SELECT max(TimeUnix) AS m FROM otel_metrics_gauge WHERE toDate(TimeUnix) >= toDate(now64(3) - INTERVAL 1 DAY))
    ) AS last_gauge
