-- Weekly review, levers "share" and "delay": per replica in [start, end), the running batch and
-- the queue from vLLM's gauges (scraped points; means are over points, i.e. time-weighted when
-- the scrape interval is regular): vllm:num_requests_running (mean, p95, max) and
-- vllm:num_requests_waiting (mean, p95, max), and the number of points behind them.
SELECT
    if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName) AS replica,
    anyLast(ResourceAttributes['gpu.type']) AS gpu_type,
    avgIf(Value, MetricName = 'vllm:num_requests_running') AS running_mean,
    quantileIf(0.95)(Value, MetricName = 'vllm:num_requests_running') AS running_p95,
    maxIf(Value, MetricName = 'vllm:num_requests_running') AS running_max,
    countIf(MetricName = 'vllm:num_requests_running') AS running_points,
    avgIf(Value, MetricName = 'vllm:num_requests_waiting') AS waiting_mean,
    quantileIf(0.95)(Value, MetricName = 'vllm:num_requests_waiting') AS waiting_p95,
    maxIf(Value, MetricName = 'vllm:num_requests_waiting') AS waiting_max,
    countIf(MetricName = 'vllm:num_requests_waiting') AS waiting_points
FROM otel_metrics_gauge
WHERE MetricName IN ('vllm:num_requests_running', 'vllm:num_requests_waiting')
  AND TimeUnix >= {start:DateTime64(3)} AND TimeUnix < {end:DateTime64(3)}
GROUP BY replica
ORDER BY replica
