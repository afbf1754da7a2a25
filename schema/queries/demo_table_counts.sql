-- Rows per table the demo fills: its final summary and the smoke test's "every table has rows".
SELECT 'otel_traces' AS table, count() AS rows FROM otel_traces
UNION ALL SELECT 'otel_metrics_gauge', count() FROM otel_metrics_gauge
UNION ALL SELECT 'otel_metrics_sum', count() FROM otel_metrics_sum
UNION ALL SELECT 'otel_metrics_histogram', count() FROM otel_metrics_histogram
UNION ALL SELECT 'llm_calls', count() FROM llm_calls
UNION ALL SELECT 'call_costs', count() FROM call_costs
UNION ALL SELECT 'tasks', count() FROM tasks
UNION ALL SELECT 'replica_minutes', count() FROM replica_minutes
UNION ALL SELECT 'gpu_prices', count() FROM gpu_prices
UNION ALL SELECT 'replicas', count() FROM replicas
UNION ALL SELECT 'alerts', count() FROM alerts
