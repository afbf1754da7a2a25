-- Is telemetry arriving? Row counts and the newest timestamp of spans, LLM calls (by source) and
-- engine gauges, for the dashboard's empty states. Cheap: counts use table metadata-friendly count().
SELECT
    (SELECT count() FROM otel_traces) AS spans,
    (SELECT max(Timestamp) FROM otel_traces) AS last_span,
    (SELECT countIf(call_source = 'engine') FROM llm_calls) AS engine_calls,
    (SELECT count() FROM llm_calls) AS calls,
    (SELECT count() FROM otel_metrics_gauge) AS gauge_points,
    (SELECT max(TimeUnix) FROM otel_metrics_gauge) AS last_gauge
